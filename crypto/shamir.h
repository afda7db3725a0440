/* SPDX-License-Identifier: Apache-2.0 */
/* Shamir t-of-n secret sharing of 32-byte secrets (seeds and keys) over the
 * prime field GF(2^61 - 1), for secure aggregation. See
 * docs/secure-aggregation.md. */
#ifndef XF_CRYPTO_SHAMIR_H
#define XF_CRYPTO_SHAMIR_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_SHAMIR_SECRET_BYTES 32

/* The field is GF(p), p = 2^61 - 1 (a Mersenne prime: reduction is two
 * shifts and adds on 64-bit words, with no table or branch on secret data).
 * A secret is cut into XF_SHAMIR_LIMBS limbs of 7 bytes (the last holds the
 * remaining 4), each below 2^56 < p, and each limb is shared with its own
 * polynomial of degree t - 1 and fresh coefficients: every limb is then
 * perfectly hidden from t - 1 shares, and so is the whole secret. */
#define XF_SHAMIR_PRIME (((uint64_t)1 << 61) - 1)
#define XF_SHAMIR_LIMBS 5

/* Evaluation points are 1..XF_SHAMIR_MAX_SHARES; a secret has at most that
 * many shares. Why this bound: it is far above any cohort (secure
 * aggregation shares among a site's neighbours, at most a few hundred) and
 * keeps the O(t^2) interpolation and the duplicate check cheap. */
#define XF_SHAMIR_MAX_SHARES 65536u

/* A share: the evaluation point x (never 0) and the value of each limb's
 * polynomial there, each in [0, p). */
typedef struct xf_shamir_share {
  uint32_t x;
  uint64_t y[XF_SHAMIR_LIMBS];
} xf_shamir_share;

/* The wire form of a share: x as a big-endian u32, then y[0..4] as
 * big-endian u64, 44 bytes. */
#define XF_SHAMIR_SHARE_BYTES (4 + 8 * XF_SHAMIR_LIMBS)

/* Splits `secret` into n shares at the points 1..n, any t of which recover
 * it: shares[k] is the share at x = k + 1 (shares holds n entries, written by
 * the caller's buffer; callers holding shares of a key should keep them in
 * sodium_malloc memory). Coefficients come from randombytes_buf and live in
 * sodium_malloc memory, wiped before return. XF_EINVAL when t < 1, t > n or
 * n > XF_SHAMIR_MAX_SHARES; XF_ENOMEM when secure memory cannot be had.
 * Details in ctx (may be NULL). */
xf_err xf_shamir_split(const uint8_t secret[XF_SHAMIR_SECRET_BYTES], uint32_t t, uint32_t n,
                       xf_shamir_share *shares, xf_errctx *ctx) XF_WARN_UNUSED;

/* The same at the given points xs[0..n) (each in 1..XF_SHAMIR_MAX_SHARES,
 * no two equal): shares[k] is the share at xs[k]. Secure aggregation uses a
 * site's index as its point, so that a share names its holder. XF_EINVAL as
 * for xf_shamir_split, and when a point is 0, too large or repeated. */
xf_err xf_shamir_split_at(const uint8_t secret[XF_SHAMIR_SECRET_BYTES], uint32_t t,
                          const uint32_t *xs, uint32_t n, xf_shamir_share *shares,
                          xf_errctx *ctx) XF_WARN_UNUSED;

/* Recovers the secret of threshold t from count shares by Lagrange
 * interpolation at 0 over the first t of them; every further share must lie
 * on the same polynomials. Writes secret only on success.
 * XF_EINVAL: t < 1, count < t ("too few shares"), count above
 * XF_SHAMIR_MAX_SHARES, a point 0 or repeated, or a value not below p.
 * XF_EINTEGRITY: an extra share disagrees with the first t, or the
 * interpolated limbs do not fit their 7 (or 4) bytes (shares of different
 * secrets or thresholds, or corrupted). Cost O(count * t) field products. */
xf_err xf_shamir_combine(const xf_shamir_share *shares, size_t count, uint32_t t,
                         uint8_t secret[XF_SHAMIR_SECRET_BYTES], xf_errctx *ctx) XF_WARN_UNUSED;

/* Wire form of a share (see XF_SHAMIR_SHARE_BYTES). Decoding checks that x
 * is in 1..XF_SHAMIR_MAX_SHARES and every value below p (XF_EFORMAT). */
void xf_shamir_share_encode(const xf_shamir_share *s, uint8_t out[XF_SHAMIR_SHARE_BYTES]);
xf_err xf_shamir_share_decode(const uint8_t in[XF_SHAMIR_SHARE_BYTES],
                              xf_shamir_share *s) XF_WARN_UNUSED;

#endif
