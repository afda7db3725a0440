/* SPDX-License-Identifier: Apache-2.0 */
/* Exact discrete Laplace and Gaussian samplers (CKS 2020) over a ChaCha20
 * generator with fast key erasure, and the Gaussian on a grid built on them. */
#include "crypto/noise.h"

#include <math.h>
#include <sodium.h>
#include <string.h>

typedef unsigned __int128 xf__u128;

/* Keystream is made XF__BLOCK bytes at a time: the first 32 become the next
 * key (fast key erasure, so a captured state does not reveal noise already
 * drawn), the rest is handed out and wiped as it is read. */
#define XF__BLOCK 512
#define XF__KEY crypto_stream_chacha20_KEYBYTES

_Static_assert(XF_NOISE_SEED_BYTES == crypto_stream_chacha20_KEYBYTES, "seed is a ChaCha20 key");

struct xf_noise {
  uint8_t key[XF__KEY];
  uint8_t block[XF__BLOCK];
  size_t pos; /* next unread byte of block; XF__BLOCK when empty */
};

static void xf__refill(xf_noise *g) {
  static const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES]; /* fresh key each block */
  crypto_stream_chacha20(g->block, XF__BLOCK, nonce, g->key);
  memcpy(g->key, g->block, XF__KEY);
  sodium_memzero(g->block, XF__KEY);
  g->pos = XF__KEY;
}

/* 64 keystream bits, little-endian, so the stream is the same on any host. */
static uint64_t xf__u64(xf_noise *g) {
  if (g->pos + 8 > XF__BLOCK) xf__refill(g);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | g->block[g->pos + (size_t)i];
  sodium_memzero(g->block + g->pos, 8);
  g->pos += 8;
  return v;
}

static xf_err xf__new(const uint8_t *seed, xf_noise **out) {
  *out = NULL;
  if (sodium_init() < 0) return XF_EINTERNAL;
  xf_noise *g = sodium_malloc(sizeof(*g));
  if (!g) return XF_ENOMEM;
  if (seed)
    memcpy(g->key, seed, XF__KEY);
  else
    randombytes_buf(g->key, XF__KEY);
  sodium_memzero(g->block, XF__BLOCK);
  g->pos = XF__BLOCK;
  *out = g;
  return XF_OK;
}

xf_err xf_noise_new_seeded(const uint8_t seed[XF_NOISE_SEED_BYTES], xf_noise **out) {
  return xf__new(seed, out);
}

xf_err xf_noise_new_random(xf_noise **out) { return xf__new(NULL, out); }

void xf_noise_free(xf_noise *g) {
  if (g) sodium_free(g); /* sodium_free zeroes the region before unmapping it */
}

/* Uniform in [0, m), m >= 1: draws below 2^64 mod m are rejected so that the
 * accepted range is a whole number of copies of [0, m). */
static uint64_t xf__uniform64(xf_noise *g, uint64_t m) {
  uint64_t threshold = (0 - m) % m;
  for (;;) {
    uint64_t r = xf__u64(g);
    if (r >= threshold) return r % m;
  }
}

static xf__u128 xf__uniform128(xf_noise *g, xf__u128 m) {
  if (m <= UINT64_MAX) return xf__uniform64(g, (uint64_t)m);
  xf__u128 threshold = (0 - m) % m;
  for (;;) {
    xf__u128 r = ((xf__u128)xf__u64(g) << 64) | xf__u64(g);
    if (r >= threshold) return r % m;
  }
}

xf_err xf_noise_uniform(xf_noise *g, uint64_t m, uint64_t *out) {
  if (!g || !out || m == 0) return XF_EINVAL;
  *out = xf__uniform64(g, m);
  return XF_OK;
}

/* Internal ranges. The samplers below are called with numerators below 2^126
 * and denominators below 2^81 (see xf__discrete_gaussian), so den * K in
 * xf__bern_exp_le1 stays below 2^128 for K <= XF__K_MAX; K exceeds k with
 * probability 1/k!, so the loop cap is never met in practice. */
#define XF__K_MAX ((uint64_t)1 << 40)

/* Bernoulli(exp(-num/den)) for 0 <= num <= den (CKS Algorithm 1, first
 * branch): K counts successes of Bernoulli(gamma/K), K = 1, 2, ...; the
 * probability that the count stops at an odd K is exp(-gamma). */
static xf_err xf__bern_exp_le1(xf_noise *g, xf__u128 num, xf__u128 den, bool *out) {
  uint64_t k = 1;
  for (;;) {
    if (k > XF__K_MAX) return XF_EINTERNAL;
    if (xf__uniform128(g, den * k) >= num) break; /* Bernoulli(num / (den k)) == 0 */
    k++;
  }
  *out = (k & 1) == 1;
  return XF_OK;
}

/* Bernoulli(exp(-num/den)) for any num >= 0, den >= 1 (CKS Algorithm 1):
 * exp(-gamma) = exp(-1)^floor(gamma) * exp(-frac(gamma)). The loop over
 * floor(gamma) ends at the first failure, after 1.6 draws on average. */
static xf_err xf__bern_exp(xf_noise *g, xf__u128 num, xf__u128 den, bool *out) {
  if (num <= den) return xf__bern_exp_le1(g, num, den, out);
  xf__u128 whole = num / den;
  for (xf__u128 i = 0; i < whole; i++) {
    bool b;
    XF_GUARD(xf__bern_exp_le1(g, 1, 1, &b));
    if (!b) {
      *out = false;
      return XF_OK;
    }
  }
  return xf__bern_exp_le1(g, num % den, den, out);
}

xf_err xf_noise_bernoulli_exp(xf_noise *g, uint32_t num, uint32_t den, bool *out) {
  if (!g || !out) return XF_EINVAL;
  if (num > XF_NOISE_RATIONAL_MAX || den == 0 || den > XF_NOISE_RATIONAL_MAX) return XF_ERANGE;
  return xf__bern_exp(g, num, den, out);
}

/* Cap on V, the count of Bernoulli(exp(-1)) successes in the Laplace
 * sampler; it keeps U + t V below 2^63. A longer run has odds exp(-2^31); it
 * is discarded and redrawn, which moves the distribution by less than that in
 * total variation. */
#define XF__RUN_MAX ((uint64_t)1 << 31)

/* Largest |value| the Gaussian's Laplace proposals may take, so that
 * |Y| b t stays below 2^63 there. With t <= 46342 a larger proposal has odds
 * below exp(-2^31 / 46342) = exp(-46340); it is redrawn, as above. */
#define XF__GAUSS_PROPOSAL_MAX ((uint64_t)1 << 31)

/* Discrete Laplace with scale t/s (CKS Algorithm 2), t, s >= 1 and below
 * 2^32: X = U + t V with U uniform on [0, t) accepted with probability
 * exp(-U/t) and V geometric with ratio exp(-1), so X is geometric with ratio
 * exp(-1/t); Y = floor(X / s) is geometric with ratio exp(-s/t), and a
 * random sign with the double-counted zero rejected gives the Laplace.
 * Draws with |Y| > ymax are redrawn (ymax is INT64_MAX for the public
 * sampler, where t < 2^31 and V < 2^31 keep |Y| < 2^62 anyway). */
static xf_err xf__discrete_laplace(xf_noise *g, uint64_t t, uint64_t s, uint64_t ymax,
                                   int64_t *out) {
  for (;;) {
    uint64_t u = xf__uniform64(g, t);
    bool d;
    XF_GUARD(xf__bern_exp(g, u, t, &d));
    if (!d) continue;
    uint64_t v = 0;
    for (;;) {
      bool a;
      XF_GUARD(xf__bern_exp_le1(g, 1, 1, &a));
      if (!a) break;
      v++;
      if (v >= XF__RUN_MAX) break;
    }
    if (v >= XF__RUN_MAX) continue;
    uint64_t y = (u + t * v) / s; /* t * v < 2^62 */
    if (y > ymax) continue;
    bool negative = (xf__u64(g) & 1) == 1;
    if (negative && y == 0) continue;
    *out = negative ? -(int64_t)y : (int64_t)y;
    return XF_OK;
  }
}

xf_err xf_noise_discrete_laplace(xf_noise *g, uint32_t t_num, uint32_t t_den, int64_t *out) {
  if (!g || !out) return XF_EINVAL;
  if (t_num == 0 || t_num > XF_NOISE_RATIONAL_MAX || t_den == 0 || t_den > XF_NOISE_RATIONAL_MAX)
    return XF_ERANGE;
  return xf__discrete_laplace(g, t_num, t_den, INT64_MAX, out);
}

static uint64_t xf__isqrt(uint64_t x) {
  uint64_t r = (uint64_t)sqrt((double)x); /* a first guess only; fixed below */
  while (r * r > x) r--;
  while ((r + 1) * (r + 1) <= x) r++;
  return r;
}

/* Discrete Gaussian with sigma^2 = a/b, 1 <= a, b < 2^31 (CKS Algorithm 3):
 * Y ~ Laplace(t) with t = floor(sigma) + 1, accepted with probability
 * exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)) = exp(-(|Y| b t - a)^2 / (2 a b t^2)).
 * Sizes: floor(sigma) = isqrt(floor(a/b)) exactly, t <= 46342 and
 * b t <= sqrt(a b) + b < 2^32; with |Y| < 2^31 (XF__GAUSS_PROPOSAL_MAX),
 * |Y| b t - a fits in int64 and
 * its square below 2^126; 2 a b t^2 < 2^81. All exact. */
static xf_err xf__discrete_gaussian(xf_noise *g, uint64_t a, uint64_t b, int64_t *out) {
  uint64_t t = xf__isqrt(a / b) + 1;
  uint64_t bt = b * t;
  xf__u128 den = (xf__u128)2 * a * b * t * t;
  for (;;) {
    int64_t y;
    XF_GUARD(xf__discrete_laplace(g, t, 1, XF__GAUSS_PROPOSAL_MAX - 1, &y));
    uint64_t mag = y < 0 ? (uint64_t)-y : (uint64_t)y;
    int64_t diff = (int64_t)(mag * bt) - (int64_t)a;
    uint64_t adiff = diff < 0 ? (uint64_t)-diff : (uint64_t)diff;
    bool c;
    XF_GUARD(xf__bern_exp(g, (xf__u128)adiff * adiff, den, &c));
    if (c) {
      *out = y;
      return XF_OK;
    }
  }
}

static xf_err xf__check_sigma2(uint32_t num, uint32_t den) {
  if (num == 0 || num > XF_NOISE_RATIONAL_MAX || den == 0 || den > XF_NOISE_RATIONAL_MAX)
    return XF_ERANGE;
  return XF_OK;
}

xf_err xf_noise_discrete_gaussian(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                  int64_t *out) {
  if (!g || !out) return XF_EINVAL;
  XF_GUARD(xf__check_sigma2(sigma2_num, sigma2_den));
  return xf__discrete_gaussian(g, sigma2_num, sigma2_den, out);
}

xf_err xf_noise_discrete_gaussian_vec(xf_noise *g, uint32_t sigma2_num, uint32_t sigma2_den,
                                      int64_t *out, size_t n) {
  if (!g || (!out && n > 0)) return XF_EINVAL;
  XF_GUARD(xf__check_sigma2(sigma2_num, sigma2_den));
  for (size_t i = 0; i < n; i++) XF_GUARD(xf__discrete_gaussian(g, sigma2_num, sigma2_den, &out[i]));
  return XF_OK;
}

/* Grid: sigma = m 2^e with m in [1/2, 1), so sigma 2^(15 - e) lies in
 * [2^14, 2^15) and its ceiling s in [2^14, 2^15]; s^2 <= 2^30 is a valid
 * sigma^2 numerator. Rounding sigma up never weakens the guarantee. */
static xf_err xf__grid(double sigma, int *k, uint64_t *s) {
  if (!isfinite(sigma) || sigma < XF_NOISE_SIGMA_MIN || sigma > XF_NOISE_SIGMA_MAX)
    return XF_ERANGE;
  int e;
  (void)frexp(sigma, &e);
  *k = 15 - e;
  *s = (uint64_t)ceil(ldexp(sigma, *k));
  return XF_OK;
}

xf_err xf_noise_gaussian_grid(double sigma, int *grid_exp, double *sigma_eff) {
  int k;
  uint64_t s;
  XF_GUARD(xf__grid(sigma, &k, &s));
  if (grid_exp) *grid_exp = k;
  if (sigma_eff) *sigma_eff = ldexp((double)s, -k);
  return XF_OK;
}

xf_err xf_noise_gaussian_vec(xf_noise *g, double sigma, float *out, size_t n) {
  if (!g || (!out && n > 0)) return XF_EINVAL;
  int k;
  uint64_t s;
  XF_GUARD(xf__grid(sigma, &k, &s));
  const double range = ldexp(1.0, XF_NOISE_GRID_RANGE_LOG2);
  /* Validate everything first so that a refused vector is left unchanged. */
  for (size_t i = 0; i < n; i++) {
    double x = ldexp((double)out[i], k); /* exact: a power-of-two scaling */
    if (!isfinite(x) || fabs(x) > range) return XF_ERANGE;
  }
  for (size_t i = 0; i < n; i++) {
    /* The input in grid steps, rounded to nearest (ties to even). */
    int64_t x = (int64_t)nearbyint(ldexp((double)out[i], k));
    int64_t y;
    XF_GUARD(xf__discrete_gaussian(g, s * s, 1, &y));
    /* |x + y| < 2^40 + 2^31: exact. The one rounding is int64 -> float
     * (correctly rounded); scaling by 2^-k is exact for |sigma| within range,
     * so out[i] is a fixed function of the exact integer x + y. */
    out[i] = ldexpf((float)(x + y), -k);
  }
  return XF_OK;
}
