/* SPDX-License-Identifier: Apache-2.0 */
/* Shamir secret sharing of 32-byte secrets over GF(2^61 - 1): split with
 * random polynomials, recover by Lagrange interpolation at 0. */
#include "crypto/shamir.h"

#include <sodium.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

typedef unsigned __int128 xf__u128;

#define P XF_SHAMIR_PRIME
#define LIMB_BYTES 7 /* bytes of the secret per limb; the last limb holds 4 */

_Static_assert(XF_SHAMIR_SECRET_BYTES <= XF_SHAMIR_LIMBS * LIMB_BYTES, "limbs hold a secret");
_Static_assert(XF_SHAMIR_MAX_SHARES < P, "points are nonzero field elements");

/* ---- field arithmetic ----------------------------------------------------
 * Values are kept in [0, p). The reductions use masks rather than branches,
 * so the time taken does not depend on the secret values (the compiler is
 * free to use a conditional move; it has no reason to branch). */

/* r in [0, 2p) → [0, p). */
static inline uint64_t reduce_once(uint64_t r) {
  uint64_t s = r - P;
  uint64_t keep = (uint64_t)0 - (s >> 63); /* all ones when r < p */
  return (r & keep) | (s & ~keep);
}

static inline uint64_t f_add(uint64_t a, uint64_t b) { return reduce_once(a + b); }

static inline uint64_t f_sub(uint64_t a, uint64_t b) { return reduce_once(a + P - b); }

/* 2^61 = 1 mod p, so a product splits at bit 61 into parts that are added. */
static inline uint64_t f_mul(uint64_t a, uint64_t b) {
  xf__u128 z = (xf__u128)a * b;                            /* < 2^122 */
  uint64_t lo = (uint64_t)z & P, hi = (uint64_t)(z >> 61); /* both < 2^61 */
  return reduce_once(lo + hi);
}

/* a^(p-2) = a^-1 for a != 0; the exponent is public, so the sequence of
 * squarings and products is the same for every a. */
static uint64_t f_inv(uint64_t a) {
  uint64_t e = P - 2, r = 1;
  while (e) {
    if (e & 1) r = f_mul(r, a);
    a = f_mul(a, a);
    e >>= 1;
  }
  return r;
}

/* Uniform in [0, p): 61 random bits, redrawn on the single value p. */
static uint64_t f_random(void) {
  uint64_t v;
  do {
    randombytes_buf(&v, sizeof(v));
    v &= P;
  } while (v == P);
  return v;
}

/* ---- limbs of a secret -------------------------------------------------- */

static void secret_to_limbs(const uint8_t *secret, uint64_t *limbs) {
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) {
    uint64_t v = 0;
    for (size_t b = 0; b < LIMB_BYTES; b++) {
      size_t at = l * LIMB_BYTES + b;
      if (at < XF_SHAMIR_SECRET_BYTES) v |= (uint64_t)secret[at] << (8 * b);
    }
    limbs[l] = v;
  }
}

/* False when a limb does not fit the bytes it stands for. */
static bool limbs_to_secret(const uint64_t *limbs, uint8_t *secret) {
  uint64_t excess = 0;
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) {
    size_t bytes = XF_SHAMIR_SECRET_BYTES - l * LIMB_BYTES;
    if (bytes > LIMB_BYTES) bytes = LIMB_BYTES;
    for (size_t b = 0; b < bytes; b++) secret[l * LIMB_BYTES + b] = (uint8_t)(limbs[l] >> (8 * b));
    excess |= limbs[l] >> (8 * bytes);
  }
  return excess == 0;
}

/* ---- points --------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

/* Every point in 1..XF_SHAMIR_MAX_SHARES and no two equal (sorted copy:
 * O(n log n) for any n). */
static xf_err check_points(const uint32_t *xs, size_t n, xf_errctx *ctx) {
  uint32_t *sorted = xf_malloc(n * sizeof(*sorted) + 1);
  if (!sorted) return xf_fail(ctx, XF_ENOMEM, "no memory to check %zu share points", n);
  xf_err rc = XF_OK;
  for (size_t k = 0; k < n && rc == XF_OK; k++) {
    if (xs[k] == 0 || xs[k] > XF_SHAMIR_MAX_SHARES)
      rc = xf_fail(ctx, XF_EINVAL, "share point %u is outside 1..%u", xs[k], XF_SHAMIR_MAX_SHARES);
    sorted[k] = xs[k];
  }
  if (rc == XF_OK) {
    qsort(sorted, n, sizeof(*sorted), cmp_u32);
    for (size_t k = 1; k < n && rc == XF_OK; k++)
      if (sorted[k] == sorted[k - 1])
        rc = xf_fail(ctx, XF_EINVAL, "share point %u appears twice", sorted[k]);
  }
  xf_free(sorted);
  return rc;
}

/* ---- split ----------------------------------------------------------------- */

xf_err xf_shamir_split_at(const uint8_t secret[XF_SHAMIR_SECRET_BYTES], uint32_t t,
                          const uint32_t *xs, uint32_t n, xf_shamir_share *shares, xf_errctx *ctx) {
  XF_ENSURE(secret && xs && shares, ctx, XF_EINVAL, "shamir split: NULL argument");
  XF_ENSURE(n >= 1 && n <= XF_SHAMIR_MAX_SHARES, ctx, XF_EINVAL,
            "shamir split: %u shares is outside 1..%u", n, XF_SHAMIR_MAX_SHARES);
  XF_ENSURE(t >= 1 && t <= n, ctx, XF_EINVAL,
            "shamir split: threshold %u must be in 1..%u (the number of shares)", t, n);
  XF_GUARD(check_points(xs, n, ctx));
  if (sodium_init() < 0) return xf_fail(ctx, XF_EINTERNAL, "libsodium cannot start");

  /* coef[l * t + d] is limb l's coefficient of x^d; coef[l * t] the limb. */
  size_t words = (size_t)XF_SHAMIR_LIMBS * t;
  uint64_t *coef = sodium_malloc(words * sizeof(*coef));
  if (!coef) return xf_fail(ctx, XF_ENOMEM, "no secure memory for %u coefficients", t);
  uint64_t limbs[XF_SHAMIR_LIMBS];
  secret_to_limbs(secret, limbs);
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) {
    coef[l * t] = limbs[l];
    for (size_t d = 1; d < t; d++) coef[l * t + d] = f_random();
  }
  sodium_memzero(limbs, sizeof(limbs));

  for (uint32_t k = 0; k < n; k++) {
    shares[k].x = xs[k];
    for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) {
      const uint64_t *c = &coef[l * t];
      uint64_t y = c[t - 1]; /* Horner */
      for (size_t d = t - 1; d-- > 0;) y = f_add(f_mul(y, xs[k]), c[d]);
      shares[k].y[l] = y;
    }
  }
  sodium_free(coef); /* zeroes before unmapping */
  return XF_OK;
}

xf_err xf_shamir_split(const uint8_t secret[XF_SHAMIR_SECRET_BYTES], uint32_t t, uint32_t n,
                       xf_shamir_share *shares, xf_errctx *ctx) {
  XF_ENSURE(n >= 1 && n <= XF_SHAMIR_MAX_SHARES, ctx, XF_EINVAL,
            "shamir split: %u shares is outside 1..%u", n, XF_SHAMIR_MAX_SHARES);
  uint32_t *xs = xf_malloc((size_t)n * sizeof(*xs));
  if (!xs) return xf_fail(ctx, XF_ENOMEM, "no memory for %u share points", n);
  for (uint32_t k = 0; k < n; k++) xs[k] = k + 1;
  xf_err rc = xf_shamir_split_at(secret, t, xs, n, shares, ctx);
  xf_free(xs);
  return rc;
}

/* ---- combine --------------------------------------------------------------- */

/* The value at `at` of the polynomial through the first t shares, limb by
 * limb: sum_i y_i prod_{j != i} (at - x_j) / (x_i - x_j). */
static void interpolate(const xf_shamir_share *s, uint32_t t, uint64_t at, uint64_t *out) {
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) out[l] = 0;
  for (uint32_t i = 0; i < t; i++) {
    uint64_t num = 1, den = 1;
    for (uint32_t j = 0; j < t; j++) {
      if (j == i) continue;
      num = f_mul(num, f_sub(at, s[j].x));
      den = f_mul(den, f_sub(s[i].x, s[j].x));
    }
    uint64_t lambda = f_mul(num, f_inv(den));
    for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) out[l] = f_add(out[l], f_mul(lambda, s[i].y[l]));
  }
}

xf_err xf_shamir_combine(const xf_shamir_share *shares, size_t count, uint32_t t,
                         uint8_t secret[XF_SHAMIR_SECRET_BYTES], xf_errctx *ctx) {
  XF_ENSURE(shares && secret, ctx, XF_EINVAL, "shamir combine: NULL argument");
  XF_ENSURE(t >= 1, ctx, XF_EINVAL, "shamir combine: threshold 0");
  XF_ENSURE(count >= t, ctx, XF_EINVAL, "too few shares: %zu given, threshold is %u", count, t);
  XF_ENSURE(count <= XF_SHAMIR_MAX_SHARES, ctx, XF_EINVAL, "shamir combine: %zu shares is above %u",
            count, XF_SHAMIR_MAX_SHARES);
  uint32_t *xs = xf_malloc(count * sizeof(*xs) + 1);
  if (!xs) return xf_fail(ctx, XF_ENOMEM, "no memory for %zu share points", count);
  for (size_t k = 0; k < count; k++) xs[k] = shares[k].x;
  xf_err rc = check_points(xs, count, ctx);
  xf_free(xs);
  if (rc != XF_OK) return rc;
  for (size_t k = 0; k < count; k++)
    for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++)
      XF_ENSURE(shares[k].y[l] < P, ctx, XF_EINVAL, "share at point %u: value not below 2^61 - 1",
                shares[k].x);

  uint64_t limbs[XF_SHAMIR_LIMBS], extra[XF_SHAMIR_LIMBS];
  for (size_t k = t; k < count && rc == XF_OK; k++) {
    interpolate(shares, t, shares[k].x, extra);
    if (memcmp(extra, shares[k].y, sizeof(extra)) != 0)
      rc = xf_fail(ctx, XF_EINTEGRITY,
                   "share at point %u does not lie on the polynomial of the first %u shares",
                   shares[k].x, t);
  }
  if (rc == XF_OK) {
    interpolate(shares, t, 0, limbs);
    uint8_t out[XF_SHAMIR_SECRET_BYTES];
    if (limbs_to_secret(limbs, out))
      memcpy(secret, out, sizeof(out));
    else
      rc = xf_fail(ctx, XF_EINTEGRITY,
                   "the shares do not interpolate to a 32-byte secret (mixed, corrupted or "
                   "fewer than the threshold they were made with)");
    sodium_memzero(out, sizeof(out));
  }
  sodium_memzero(limbs, sizeof(limbs));
  sodium_memzero(extra, sizeof(extra));
  return rc;
}

/* ---- wire form ------------------------------------------------------------- */

void xf_shamir_share_encode(const xf_shamir_share *s, uint8_t out[XF_SHAMIR_SHARE_BYTES]) {
  for (size_t b = 0; b < 4; b++) out[b] = (uint8_t)(s->x >> (24 - 8 * b));
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++)
    for (size_t b = 0; b < 8; b++) out[4 + 8 * l + b] = (uint8_t)(s->y[l] >> (56 - 8 * b));
}

xf_err xf_shamir_share_decode(const uint8_t in[XF_SHAMIR_SHARE_BYTES], xf_shamir_share *s) {
  uint32_t x = 0;
  for (size_t b = 0; b < 4; b++) x = x << 8 | in[b];
  if (x == 0 || x > XF_SHAMIR_MAX_SHARES) return XF_EFORMAT;
  uint64_t y[XF_SHAMIR_LIMBS];
  for (size_t l = 0; l < XF_SHAMIR_LIMBS; l++) {
    uint64_t v = 0;
    for (size_t b = 0; b < 8; b++) v = v << 8 | in[4 + 8 * l + b];
    if (v >= P) return XF_EFORMAT;
    y[l] = v;
  }
  s->x = x;
  memcpy(s->y, y, sizeof(y));
  sodium_memzero(y, sizeof(y));
  return XF_OK;
}
