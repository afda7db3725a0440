/* SPDX-License-Identifier: Apache-2.0 */
/* Noise samplers for differential privacy: exact discrete Laplace and
 * Gaussian samplers (Canonne, Kamath, Steinke 2020; Karney 2016) and the
 * Gaussian on a fine grid, drawn by a table sampler within 2^-90 of the
 * discrete Gaussian per value, over a ChaCha20 generator that is either
 * seeded (reproducible tests) or drawn from the system CSPRNG. See
 * docs/privacy-noise.md. */
#ifndef XF_PRIVACY_NOISE_H
#define XF_PRIVACY_NOISE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_NOISE_SEED_BYTES 32

/* Largest numerator or denominator accepted by the rational samplers
 * (2^31 - 1). Why this bound: every intermediate value of the discrete
 * Gaussian's rejection step then fits in 128 bits (see noise.c). */
#define XF_NOISE_RATIONAL_MAX 2147483647u

/* Bounds of the Gaussian on a grid: sigma in [XF_NOISE_SIGMA_MIN,
 * XF_NOISE_SIGMA_MAX], and every input value at most 2^XF_NOISE_GRID_RANGE_LOG2
 * grid steps from zero (2^40 steps: inputs up to about 2^26 sigma). */
#define XF_NOISE_SIGMA_MIN 0x1p-60
#define XF_NOISE_SIGMA_MAX 0x1p60
#define XF_NOISE_GRID_RANGE_LOG2 40

/* The Gaussian on a grid draws each coordinate's noise within this total
 * variation distance of the exact discrete Gaussian N_Z(0, s^2) (2^-90), so
 * an n-vector is within n * XF_NOISE_GRID_TV of the exact mechanism's
 * (docs/privacy-noise.md, "The grid sampler"); xf_noise_grid_tv gives that
 * bound and privacy/plan.c charges it to delta. */
#define XF_NOISE_GRID_TV 0x1p-90

/* A generator. Its whole state (key and unread keystream) lives in
 * sodium_malloc memory and is wiped when freed. Not thread-safe: use one
 * generator per thread. */
typedef struct xf_noise xf_noise;

/* A generator whose stream is a function of the 32-byte seed only, for
 * reproducible tests and replays; never use it for a real release. *out is
 * owned by the caller and released with xf_noise_free. XF_ENOMEM when secure
 * memory cannot be had, XF_EINTERNAL when libsodium cannot start. */
xf_err xf_noise_new_seeded(const uint8_t seed[XF_NOISE_SEED_BYTES], xf_noise **out) XF_WARN_UNUSED;

/* A generator keyed from randombytes_buf (the operating system's CSPRNG),
 * for production. Same ownership and errors as xf_noise_new_seeded. */
xf_err xf_noise_new_random(xf_noise **out) XF_WARN_UNUSED;

/* Wipes and releases g; NULL is ignored. */
void xf_noise_free(xf_noise *g);

/* *out uniform in [0, m), without modulo bias (rejection sampling).
 * XF_EINVAL when m == 0. */
xf_err xf_noise_uniform(xf_noise *g, uint64_t m, uint64_t *out) XF_WARN_UNUSED;

/* Poisson sampling: picked[0..*m) receives, in increasing order, each index
 * in [0, n) taken independently with probability l/n exactly (DP-SGD's
 * sampled batch, expected size l), picked having room for n indices. About
 * 16 keystream bits an index: the first 16 bits of a uniform U in [0, 1)
 * are compared with those of l/n, and only on a tie (odds 2^-16) do further
 * digits decide. XF_EINVAL when l > n, n == 0 or n >= 2^32. */
xf_err xf_noise_poisson_sample(xf_noise *g, uint64_t l, uint64_t n, uint32_t *picked,
                               size_t *m) XF_WARN_UNUSED;

/* *out ~ Bernoulli(exp(-num/den)), exactly, with integer arithmetic only
 * (CKS 2020, Algorithm 1). num in [0, XF_NOISE_RATIONAL_MAX], den in
 * [1, XF_NOISE_RATIONAL_MAX]; XF_ERANGE otherwise. */
xf_err xf_noise_bernoulli_exp(xf_noise *g, uint32_t num, uint32_t den, bool *out) XF_WARN_UNUSED;

/* *out ~ discrete Laplace with scale t = t_num/t_den: P(x) proportional to
 * exp(-|x|/t) on the integers, exactly (CKS 2020, Algorithm 2). t_num and
 * t_den in [1, XF_NOISE_RATIONAL_MAX]; XF_ERANGE otherwise. */
xf_err xf_noise_discrete_laplace(xf_noise *g, uint32_t t_num, uint32_t t_den,
                                 int64_t *out) XF_WARN_UNUSED;

/* *out ~ discrete Gaussian N_Z(0, sigma^2) with sigma^2 = sigma2_num /
 * sigma2_den: P(x) proportional to exp(-x^2 / (2 sigma^2)) on the integers,
 * exactly (Karney 2016, Algorithm D, with the Bernoulli(exp(-gamma)) steps
 * of CKS 2020, Algorithm 1). Both in [1, XF_NOISE_RATIONAL_MAX]; XF_ERANGE
 * otherwise. The variance is at most sigma^2 (and within
 * exp(-2 pi^2 sigma^2) relative of it for sigma >= 1). */
xf_err xf_noise_discrete_gaussian(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                  int64_t *out) XF_WARN_UNUSED;

/* n independent draws of xf_noise_discrete_gaussian into out[0..n). On error
 * out's contents are unspecified. */
xf_err xf_noise_discrete_gaussian_vec(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                      int64_t *out, size_t n) XF_WARN_UNUSED;

/* The grid the Gaussian of standard deviation sigma is sampled on: step
 * 2^-*grid_exp, and the standard deviation actually used, *sigma_eff =
 * s * 2^-*grid_exp with s = ceil(sigma * 2^*grid_exp) in [2^14, 2^15], so
 * sigma <= *sigma_eff < sigma * (1 + 2^-14). A privacy accountant should use
 * *sigma_eff, and a sensitivity grown for the rounding of the inputs to the
 * grid: see xf_noise_grid_multiplier. XF_ERANGE when sigma is not finite or
 * outside [XF_NOISE_SIGMA_MIN, XF_NOISE_SIGMA_MAX]. Either out pointer may be
 * NULL. */
xf_err xf_noise_gaussian_grid(double sigma, int *grid_exp, double *sigma_eff) XF_WARN_UNUSED;

/* Which sampler g's Gaussian on a grid draws from: a new generator uses
 * Karney's exact discrete Gaussian (xf_noise_discrete_gaussian); on, the
 * cumulative-table sampler, within XF_NOISE_GRID_TV of it per value and many
 * times faster. Turn it on only where the privacy accounting charges that
 * distance (xf_privacy_plan's table_sampler). NULL is ignored. */
void xf_noise_use_table(xf_noise *g, bool on);

/* Whether g's table sampler may use the CPU's vector instructions (AVX-512
 * where there is AVX-512; on by default). The output is the same bits
 * either way: off is for the tests that check so. NULL is ignored. */
void xf_noise_use_simd(xf_noise *g, bool on);

/* Adds Gaussian noise of standard deviation sigma to out[0..n) in place (to
 * write pure noise, pass zeros). Each value is rounded to the grid of
 * xf_noise_gaussian_grid, a discrete Gaussian N_Z(0, s^2) in grid steps is
 * added in exact integer arithmetic, and the exact sum is converted to float
 * once, so the output is a deterministic function of the integer mechanism's
 * output: this is what closes the floating-point attacks of Mironov 2012
 * (docs/privacy-noise.md). The discrete Gaussian is exact, or with
 * xf_noise_use_table each value's integer noise is within XF_NOISE_GRID_TV of
 * N_Z(0, s^2) in total variation, the vector's within xf_noise_grid_tv(n).
 * The table sampler's table for s (about 240 KiB, public) is
 * made on the first call with that s and kept by g until s changes or g is
 * freed. XF_ERANGE when sigma is out of range or an input is not finite or
 * lies more than 2^XF_NOISE_GRID_RANGE_LOG2 steps from zero; XF_ENOMEM when
 * the table cannot be allocated; out and g's stream are then left unchanged. */
xf_err xf_noise_gaussian_vec(xf_noise *g, double sigma, float *out, size_t n) XF_WARN_UNUSED;

/* xf_noise_gaussian_vec on up to `threads` threads (the caller's included).
 * out is cut into fixed chunks of 2^12 values; chunk c is noised by a child
 * generator keyed with the c-th 32 bytes drawn from g, so for a seeded g the
 * output is a fixed function of g's state whatever `threads` is (it differs
 * from xf_noise_gaussian_vec's). Runs inline when threads <= 1 or n fits one
 * chunk. Children live in sodium_malloc memory and are wiped; they share g's
 * table. Same law, checks and errors as xf_noise_gaussian_vec, out unchanged
 * on XF_ERANGE, and XF_ENOMEM (out and g's stream unchanged) when memory or
 * secure memory cannot be had. A
 * helper thread that cannot be started leaves its share to the others. */
xf_err xf_noise_gaussian_vec_par(xf_noise *g, double sigma, float *out, size_t n,
                                 int threads) XF_WARN_UNUSED;

/* The same noise drawn ahead, so that another thread can draw it while the
 * vector is still being computed (DP-SGD draws a step's noise during the
 * step's clipped backward). For one vector of n values:
 *   xf_noise_pending_key(p, g)  takes the vector's chunk keys from g's
 *                               stream, as xf_noise_gaussian_vec_par does;
 *   xf_noise_pending_draw(p)    draws the values' integer noise (g is not
 *                               touched); up to two threads may call it at
 *                               once, each taking chunks until none is left;
 *   xf_noise_pending_apply(p, out)  checks out's range and adds it.
 * The result is the bits xf_noise_gaussian_vec_par(g, sigma, out, n, any)
 * gives from the same state of g, with one difference: g has moved on
 * even when apply refuses out (XF_ERANGE, out left as it was). The drawn
 * noise lives in sodium_malloc memory and apply wipes it, used or not.
 * new copies g's sampler choice (xf_noise_use_table, xf_noise_use_simd) and
 * makes its own table; XF_ERANGE for a sigma out of range, XF_ENOMEM.
 * Call apply once every draw has returned; it is XF_EINVAL when the vector
 * was not keyed and drawn whole since the last apply. */
typedef struct xf_noise_pending xf_noise_pending;
xf_err xf_noise_pending_new(const xf_noise *g, double sigma, size_t n,
                            xf_noise_pending **out) XF_WARN_UNUSED;
xf_err xf_noise_pending_key(xf_noise_pending *p, xf_noise *g) XF_WARN_UNUSED;
void xf_noise_pending_draw(xf_noise_pending *p);
xf_err xf_noise_pending_apply(xf_noise_pending *p, float *out) XF_WARN_UNUSED;
void xf_noise_pending_free(xf_noise_pending *p);

/* *tv = n * XF_NOISE_GRID_TV, rounded up: a bound on the total variation
 * distance between the noise xf_noise_gaussian_vec(_par) adds to an n-vector
 * and the exact discrete Gaussian's (each coordinate's draw is within
 * XF_NOISE_GRID_TV, and draws are independent). A mechanism within tv of an
 * (epsilon, delta)-DP one is (epsilon, delta + (1 + e^epsilon) tv)-DP, which
 * is how privacy/plan.c charges it. XF_EINVAL when tv is NULL. */
xf_err xf_noise_grid_tv(size_t n, double *tv) XF_WARN_UNUSED;

/* The noise multiplier a privacy accountant must use for
 * xf_noise_gaussian_vec(sigma) on an n-vector of L2 sensitivity
 * `sensitivity`: *z_eff = sigma_eff / (sensitivity + sqrt(n) * step), with
 * sigma_eff and step = 2^-grid_exp from xf_noise_gaussian_grid. Each input
 * coordinate moves by at most step/2 when rounded to the grid, so the rounded
 * values of two neighbouring inputs differ by at most sensitivity + sqrt(n)
 * step in L2, and the noise has standard deviation sigma_eff. Rounded down,
 * never above the exact value. XF_ERANGE when sigma is out of range, the
 * sensitivity is negative or not finite, or both the sensitivity and n are 0;
 * XF_EINVAL when z_eff is NULL. */
xf_err xf_noise_grid_multiplier(double sigma, double sensitivity, size_t n,
                                double *z_eff) XF_WARN_UNUSED;

#endif
