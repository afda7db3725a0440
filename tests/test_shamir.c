/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of Shamir sharing over GF(2^61 - 1) (crypto/shamir.h): the known
 * answers of tests/data/shamir.exp, reconstruction from every t-subset,
 * perfect hiding by t - 1 shares, and the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crypto/shamir.h"

#define P XF_SHAMIR_PRIME

typedef unsigned __int128 u128;

/* The test's own field arithmetic (plain %), independent of shamir.c's. */
static uint64_t mulmod(uint64_t a, uint64_t b) { return (uint64_t)((u128)a * b % P); }
static uint64_t addmod(uint64_t a, uint64_t b) { return (a + b) % P; }
static uint64_t submod(uint64_t a, uint64_t b) { return (a + P - b) % P; }
static uint64_t invmod(uint64_t a) {
  uint64_t r = 1, e = P - 2;
  for (; e; e >>= 1, a = mulmod(a, a))
    if (e & 1) r = mulmod(r, a);
  return r;
}

static void random_secret(uint8_t s[XF_SHAMIR_SECRET_BYTES]) {
  randombytes_buf(s, XF_SHAMIR_SECRET_BYTES);
}

/* ---- known answers ------------------------------------------------------------ */

#define MAX_KAT_SHARES 16

static void check_case(const uint8_t *secret, uint32_t t, xf_shamir_share *sh, size_t n, int line) {
  uint8_t got[XF_SHAMIR_SECRET_BYTES];
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_shamir_combine(sh, t, t, got, &ctx) != XF_OK)
    fail_msg("shamir.exp:%d first t: %s", line, ctx.msg);
  assert_memory_equal(got, secret, sizeof(got));
  if (xf_shamir_combine(sh + n - t, t, t, got, &ctx) != XF_OK)
    fail_msg("shamir.exp:%d last t: %s", line, ctx.msg);
  assert_memory_equal(got, secret, sizeof(got));
  if (xf_shamir_combine(sh, n, t, got, &ctx) != XF_OK)
    fail_msg("shamir.exp:%d all: %s", line, ctx.msg);
  assert_memory_equal(got, secret, sizeof(got));
  if (t > 1) assert_int_equal(xf_shamir_combine(sh, t - 1, t, got, NULL), XF_EINVAL);
  if (n > t) { /* a changed extra share is caught */
    xf_shamir_share bad[MAX_KAT_SHARES];
    memcpy(bad, sh, n * sizeof(*sh));
    bad[n - 1].y[2] = (bad[n - 1].y[2] + 1) % P;
    assert_int_equal(xf_shamir_combine(bad, n, t, got, NULL), XF_EINTEGRITY);
  }
}

static void known_answers_match_shamir_exp(void **state) {
  (void)state;
  char path[4096];
  const char *src = getenv("XF_SOURCE_DIR");
  assert_non_null(src);
  snprintf(path, sizeof(path), "%s/tests/data/shamir.exp", src);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open %s", path);
  char line[1024];
  int lineno = 0, cases = 0, start = 0;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES];
  uint32_t t = 0;
  xf_shamir_share sh[MAX_KAT_SHARES];
  size_t n = 0;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    char hex[80];
    unsigned tt;
    unsigned long long y[5];
    unsigned x;
    if (line[0] == '#' || line[0] == '\n') continue;
    if (sscanf(line, "secret %79s %u", hex, &tt) == 2) {
      size_t bin_len;
      if (sodium_hex2bin(secret, sizeof(secret), hex, strlen(hex), NULL, &bin_len, NULL) != 0 ||
          bin_len != sizeof(secret))
        fail_msg("shamir.exp:%d: bad secret", lineno);
      t = tt;
      n = 0;
      start = lineno;
    } else if (sscanf(line, "share %u %llu %llu %llu %llu %llu", &x, &y[0], &y[1], &y[2], &y[3],
                      &y[4]) == 6) {
      if (n == MAX_KAT_SHARES) fail_msg("shamir.exp:%d: too many shares", lineno);
      sh[n].x = x;
      for (int l = 0; l < 5; l++) sh[n].y[l] = y[l];
      n++;
    } else if (strncmp(line, "end", 3) == 0) {
      check_case(secret, t, sh, n, start);
      cases++;
    } else {
      fail_msg("shamir.exp:%d: malformed line", lineno);
    }
  }
  fclose(f);
  assert_int_equal(cases, 7);
}

/* ---- properties ---------------------------------------------------------------- */

/* Every t-subset of n shares (as a bit mask) gives the secret back. */
static void check_all_subsets(uint32_t t, uint32_t n) {
  uint8_t secret[XF_SHAMIR_SECRET_BYTES], got[XF_SHAMIR_SECRET_BYTES];
  random_secret(secret);
  xf_shamir_share sh[12], pick[12];
  assert_int_equal(xf_shamir_split(secret, t, n, sh, NULL), XF_OK);
  for (uint32_t k = 0; k < n; k++) assert_int_equal(sh[k].x, k + 1);
  int subsets = 0;
  for (uint32_t mask = 0; mask < (1u << n); mask++) {
    if ((uint32_t)__builtin_popcount(mask) != t) continue;
    size_t m = 0;
    for (uint32_t k = n; k-- > 0;) /* descending: order must not matter */
      if (mask & (1u << k)) pick[m++] = sh[k];
    memset(got, 0, sizeof(got));
    assert_int_equal(xf_shamir_combine(pick, m, t, got, NULL), XF_OK);
    assert_memory_equal(got, secret, sizeof(got));
    subsets++;
  }
  assert_true(subsets > 0);
}

static void any_t_of_n_shares_reconstruct(void **state) {
  (void)state;
  check_all_subsets(1, 4);
  check_all_subsets(2, 3);
  check_all_subsets(3, 6);
  check_all_subsets(5, 10);
  check_all_subsets(7, 7);
}

static void split_at_site_indices_reconstructs(void **state) {
  (void)state;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES], got[XF_SHAMIR_SECRET_BYTES];
  random_secret(secret);
  uint32_t xs[5] = {65536, 17, 3, 999, 1};
  xf_shamir_share sh[5];
  assert_int_equal(xf_shamir_split_at(secret, 3, xs, 5, sh, NULL), XF_OK);
  for (int k = 0; k < 5; k++) assert_int_equal(sh[k].x, xs[k]);
  assert_int_equal(xf_shamir_combine(sh + 2, 3, 3, got, NULL), XF_OK);
  assert_memory_equal(got, secret, sizeof(got));
}

/* Limb l of a secret, as the file format defines it. */
static uint64_t limb(const uint8_t *s, int l) {
  uint64_t v = 0;
  for (int b = 0; b < 7 && 7 * l + b < XF_SHAMIR_SECRET_BYTES; b++)
    v |= (uint64_t)s[7 * l + b] << (8 * b);
  return v;
}

/* t - 1 shares fix nothing: for any candidate secret there is a share at a
 * fresh point that, with them, interpolates to that candidate. The value is
 * found with the test's own arithmetic and the library must agree. */
static void fewer_than_t_shares_fit_every_secret(void **state) {
  (void)state;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES], got[XF_SHAMIR_SECRET_BYTES];
  random_secret(secret);
  xf_shamir_share sh[4];
  assert_int_equal(xf_shamir_split(secret, 3, 4, sh, NULL), XF_OK);
  const uint64_t x1 = sh[0].x, x2 = sh[1].x, xs = 99; /* two shares, threshold 3 */
  for (int trial = 0; trial < 20; trial++) {
    uint8_t cand[XF_SHAMIR_SECRET_BYTES];
    random_secret(cand);
    if (trial == 0) memset(cand, 0, sizeof(cand));
    xf_shamir_share three[3] = {sh[0], sh[1], {.x = (uint32_t)xs}};
    for (int l = 0; l < 5; l++) {
      /* The polynomial through (0, c), (x1, y1), (x2, y2), evaluated at xs. */
      uint64_t pts[3] = {0, x1, x2}, ys[3] = {limb(cand, l), sh[0].y[l], sh[1].y[l]}, v = 0;
      for (int i = 0; i < 3; i++) {
        uint64_t num = 1, den = 1;
        for (int j = 0; j < 3; j++) {
          if (j == i) continue;
          num = mulmod(num, submod(xs, pts[j]));
          den = mulmod(den, submod(pts[i], pts[j]));
        }
        v = addmod(v, mulmod(ys[i], mulmod(num, invmod(den))));
      }
      three[2].y[l] = v;
    }
    assert_int_equal(xf_shamir_combine(three, 3, 3, got, NULL), XF_OK);
    assert_memory_equal(got, cand, sizeof(got));
  }
}

/* Pearson's statistic of 256 byte counts against uniform. */
static double chi2_uniform(const unsigned *counts, unsigned total) {
  double e = total / 256.0, s = 0;
  for (int b = 0; b < 256; b++) s += (counts[b] - e) * (counts[b] - e) / e;
  return s;
}

/* One share (t = 2) of an all-zero and of an all-ones secret: its low bytes
 * are uniform in both cases and the two histograms agree. The 0.9999
 * quantile of chi-square with 255 degrees of freedom is about 355; 370 is
 * used. */
static void a_share_below_threshold_is_uniform_whatever_the_secret(void **state) {
  (void)state;
  enum { DRAWS = 40000 };
  static unsigned a[256], b[256];
  uint8_t zero[XF_SHAMIR_SECRET_BYTES] = {0}, ones[XF_SHAMIR_SECRET_BYTES];
  memset(ones, 0xff, sizeof(ones));
  xf_shamir_share sh[2];
  for (int d = 0; d < DRAWS; d++) {
    assert_int_equal(xf_shamir_split(zero, 2, 2, sh, NULL), XF_OK);
    a[sh[1].y[d % 5] & 0xff]++;
    assert_int_equal(xf_shamir_split(ones, 2, 2, sh, NULL), XF_OK);
    b[sh[1].y[d % 5] & 0xff]++;
  }
  double ca = chi2_uniform(a, DRAWS), cb = chi2_uniform(b, DRAWS), two = 0;
  for (int k = 0; k < 256; k++)
    if (a[k] + b[k]) two += ((double)a[k] - b[k]) * ((double)a[k] - b[k]) / (a[k] + b[k]);
  print_message("chi2: zero secret %.1f, ones %.1f, two-sample %.1f (df 255)\n", ca, cb, two);
  assert_true(ca < 370 && cb < 370 && two < 370);
}

/* ---- refusals ---------------------------------------------------------------------- */

static void bad_thresholds_and_points_are_refused(void **state) {
  (void)state;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES] = {1};
  xf_shamir_share sh[4];
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_shamir_split(secret, 5, 4, sh, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "threshold"));
  assert_int_equal(xf_shamir_split(secret, 0, 4, sh, NULL), XF_EINVAL);
  assert_int_equal(xf_shamir_split(secret, 1, 0, sh, NULL), XF_EINVAL);
  assert_int_equal(xf_shamir_split(secret, 1, XF_SHAMIR_MAX_SHARES + 1, sh, NULL), XF_EINVAL);
  uint32_t dup[3] = {4, 9, 4}, zero[3] = {1, 0, 2}, big[2] = {1, XF_SHAMIR_MAX_SHARES + 1};
  assert_int_equal(xf_shamir_split_at(secret, 2, dup, 3, sh, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "twice"));
  assert_int_equal(xf_shamir_split_at(secret, 2, zero, 3, sh, NULL), XF_EINVAL);
  assert_int_equal(xf_shamir_split_at(secret, 2, big, 2, sh, NULL), XF_EINVAL);
}

static void bad_share_sets_are_refused(void **state) {
  (void)state;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES], got[XF_SHAMIR_SECRET_BYTES];
  random_secret(secret);
  xf_shamir_share sh[4], bad[4];
  assert_int_equal(xf_shamir_split(secret, 3, 4, sh, NULL), XF_OK);
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_shamir_combine(sh, 2, 3, got, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "too few shares"));
  assert_int_equal(xf_shamir_combine(sh, 3, 0, got, NULL), XF_EINVAL);
  memcpy(bad, sh, sizeof(bad));
  bad[2].x = bad[0].x;
  assert_int_equal(xf_shamir_combine(bad, 3, 3, got, NULL), XF_EINVAL);
  memcpy(bad, sh, sizeof(bad));
  bad[1].x = 0;
  assert_int_equal(xf_shamir_combine(bad, 3, 3, got, NULL), XF_EINVAL);
  memcpy(bad, sh, sizeof(bad));
  bad[1].y[4] = P;
  assert_int_equal(xf_shamir_combine(bad, 3, 3, got, NULL), XF_EINVAL);
  /* Shares of a threshold-3 secret read as threshold 2: the limbs almost
   * surely overflow their bytes (odds about 2^-(5*5+29)). */
  assert_int_equal(xf_shamir_combine(sh, 2, 2, got, NULL), XF_EINTEGRITY);
}

static void shares_round_trip_through_their_wire_form(void **state) {
  (void)state;
  uint8_t secret[XF_SHAMIR_SECRET_BYTES], wire[XF_SHAMIR_SHARE_BYTES];
  random_secret(secret);
  xf_shamir_share sh[3], back;
  assert_int_equal(xf_shamir_split(secret, 2, 3, sh, NULL), XF_OK);
  for (int k = 0; k < 3; k++) {
    xf_shamir_share_encode(&sh[k], wire);
    assert_int_equal(wire[3], k + 1); /* big-endian point first */
    assert_int_equal(xf_shamir_share_decode(wire, &back), XF_OK);
    assert_int_equal(back.x, sh[k].x);
    assert_memory_equal(back.y, sh[k].y, sizeof(back.y));
  }
  xf_shamir_share_encode(&sh[0], wire);
  memset(wire, 0, 4);
  assert_int_equal(xf_shamir_share_decode(wire, &back), XF_EFORMAT);
  xf_shamir_share_encode(&sh[0], wire);
  memset(wire + 4, 0xff, 8); /* y[0] = 2^64 - 1 >= p */
  assert_int_equal(xf_shamir_share_decode(wire, &back), XF_EFORMAT);
}

int main(void) {
  if (sodium_init() < 0) return 1;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(known_answers_match_shamir_exp),
      cmocka_unit_test(any_t_of_n_shares_reconstruct),
      cmocka_unit_test(split_at_site_indices_reconstructs),
      cmocka_unit_test(fewer_than_t_shares_fit_every_secret),
      cmocka_unit_test(a_share_below_threshold_is_uniform_whatever_the_secret),
      cmocka_unit_test(bad_thresholds_and_points_are_refused),
      cmocka_unit_test(bad_share_sets_are_refused),
      cmocka_unit_test(shares_round_trip_through_their_wire_form),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
