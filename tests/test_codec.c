/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the update codecs: round trips of every uplink codec within the
 * error bound it reports, unbiased stochastic rounding, error feedback,
 * top-k selection, the sizes the quickstart job needs, refusal of every kind
 * of malformed encoding, fp16/bf16 known answers and the fixed-scale
 * quantizer of secure aggregation. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "codec/codec.h"

#define QUICKSTART_N 199210 /* mlp 200x200 on 784 inputs, 10 classes */

static const xf_codec_uplink CODECS[] = {
    {0, 0},    {0, 16},    {0, 8},    {0, 4},    {0.1, 0},   {0.1, 16},
    {0.1, 8},  {0.1, 4},   {1.0, 8},  {0.01, 8}, {1e-3, 4},
};
#define N_CODECS (sizeof(CODECS) / sizeof(CODECS[0]))

static const char *codec_name(const xf_codec_uplink *c, char *buf, size_t n) {
  if (c->topk_fraction > 0 && c->quant_bits)
    snprintf(buf, n, "topk:%g+q%u", c->topk_fraction, c->quant_bits);
  else if (c->topk_fraction > 0)
    snprintf(buf, n, "topk:%g", c->topk_fraction);
  else if (c->quant_bits)
    snprintf(buf, n, "q%u", c->quant_bits);
  else
    snprintf(buf, n, "none");
  return buf;
}

static float *floats(size_t n) {
  float *v = calloc(n ? n : 1, sizeof(float));
  assert_non_null(v);
  return v;
}

static void fill_normal(float *v, size_t n, double scale, uint64_t seed) {
  xf_rng rng;
  xf_rng_seed(&rng, seed, 1);
  for (size_t i = 0; i < n; i++) v[i] = (float)(scale * xf_rng_normal(&rng));
}

/* ---- the vectors every codec must carry --------------------------------- */

typedef struct sample {
  const char *name;
  size_t n;
  float *x;
} sample;

#define N_SAMPLES 10

static void make_samples(sample s[N_SAMPLES]) {
  size_t i = 0;
  s[i] = (sample){"random 10000", 10000, floats(10000)};
  fill_normal(s[i].x, s[i].n, 0.01, 7);
  i++;
  s[i] = (sample){"zeros", 5000, floats(5000)};
  i++;
  s[i] = (sample){"constant", 5000, floats(5000)};
  for (size_t j = 0; j < 5000; j++) s[i].x[j] = -3.25f;
  i++;
  s[i] = (sample){"one huge outlier", 9000, floats(9000)};
  fill_normal(s[i].x, s[i].n, 1e-3, 8);
  s[i].x[4321] = 1e30f;
  i++;
  s[i] = (sample){"negative zeros", 300, floats(300)};
  for (size_t j = 0; j < 300; j++) s[i].x[j] = j % 3 ? -0.0f : 0.0f;
  i++;
  s[i] = (sample){"denormals", 4097, floats(4097)};
  for (size_t j = 0; j < 4097; j++) s[i].x[j] = (float)((int)(j % 37) - 18) * 0x1p-149f;
  i++;
  s[i] = (sample){"n = 1", 1, floats(1)};
  s[i].x[0] = 0.7f;
  i++;
  s[i] = (sample){"n = 4097", 4097, floats(4097)};
  fill_normal(s[i].x, s[i].n, 5.0, 9);
  i++;
  s[i] = (sample){"extremes", 64, floats(64)};
  for (size_t j = 0; j < 64; j++) s[i].x[j] = j % 2 ? FLT_MAX : -FLT_MAX;
  s[i].x[5] = 1.0f;
  i++;
  s[i] = (sample){"large offset", 4096, floats(4096)};
  for (size_t j = 0; j < 4096; j++) s[i].x[j] = 1e6f + (float)(j % 7) * 0.0625f;
  i++;
  assert_int_equal(i, N_SAMPLES);
}

static void free_samples(sample s[N_SAMPLES]) {
  for (size_t i = 0; i < N_SAMPLES; i++) free(s[i].x);
}

static void every_codec_round_trips_every_vector_within_its_bound(void **state) {
  (void)state;
  sample s[N_SAMPLES];
  make_samples(s);
  for (size_t si = 0; si < N_SAMPLES; si++) {
    size_t n = s[si].n;
    const float *x = s[si].x;
    float *res = floats(n), *before = floats(n), *dec = floats(n), *bound = floats(n);
    for (size_t ci = 0; ci < N_CODECS; ci++) {
      const xf_codec_uplink *c = &CODECS[ci];
      char name[64];
      codec_name(c, name, sizeof(name));
      bool topk = c->topk_fraction > 0;
      /* With and without error feedback (top-k always has it). */
      for (int with_res = topk ? 1 : 0; with_res <= 1; with_res++) {
        xf_rng rng;
        xf_rng_seed(&rng, si * 100 + ci, 3);
        for (size_t i = 0; i < n; i++)
          res[i] = with_res && x[i] != 0 && fabsf(x[i]) < 1e20f
                       ? (float)(1e-3 * xf_rng_normal(&rng)) * fabsf(x[i])
                       : 0.0f;
        memcpy(before, res, n * sizeof(float));
        uint8_t *enc = NULL;
        size_t len = 0;
        xf_errctx err;
        xf_errctx_clear(&err);
        xf_err rc = xf_codec_encode(c, x, n, with_res ? res : NULL, 42 + si, &enc, &len, &err);
        if (rc != XF_OK) fail_msg("%s on %s: %s", name, s[si].name, err.msg);
        assert_true(len <= xf_codec_encoded_max(c, n));
        rc = xf_codec_decode_bound(enc, len, n, dec, bound, &err);
        if (rc != XF_OK) fail_msg("%s on %s: decode: %s", name, s[si].name, err.msg);
        size_t k = xf_codec_topk_count(c->topk_fraction, n), nonzero = 0;
        for (size_t i = 0; i < n; i++) {
          float v = with_res ? x[i] + before[i] : x[i];
          assert_true(isfinite(dec[i]));
          nonzero += dec[i] != 0;
          /* Not sent (or sent and decoded as 0): all of v stays behind. */
          if (topk && dec[i] == 0 && res[i] == v) continue;
          double e = fabs((double)dec[i] - v);
          if (e > bound[i])
            fail_msg("%s on %s: value %zu is %.9g, decoded %.9g, error %g > bound %g", name,
                     s[si].name, i, (double)v, (double)dec[i], e, (double)bound[i]);
          if (c->quant_bits == 0) {
            assert_true(memcmp(&dec[i], &v, sizeof(float)) == 0); /* -0 and denormals too */
            assert_true(bound[i] == 0);
          }
          if (with_res) { /* the residual holds what was not sent */
            double back = (double)dec[i] + res[i];
            if (fabs(back - v) > (fabs((double)v) + fabs((double)dec[i])) * 0x1p-24 + 0x1p-149)
              fail_msg("%s on %s: value %zu: decoded %g + residual %g != %g", name,
                       s[si].name, i, (double)dec[i], (double)res[i], (double)v);
          }
        }
        assert_true(nonzero <= k);
        xf_free(enc);
      }
    }
    free(res);
    free(before);
    free(dec);
    free(bound);
  }
  free_samples(s);
}

static void bound_is_the_step_of_the_chunk(void **state) {
  (void)state;
  const size_t n = 6000; /* a full chunk and a partial one */
  float *x = floats(n), *dec = floats(n), *bound = floats(n);
  xf_rng rng;
  xf_rng_seed(&rng, 5, 5);
  for (size_t i = 0; i < n; i++) x[i] = (float)(2 * xf_rng_uniform(&rng) - 1);
  static const uint32_t bits[] = {16, 8, 4};
  for (size_t b = 0; b < 3; b++) {
    xf_codec_uplink c = {0, bits[b]};
    uint8_t *enc;
    size_t len;
    assert_int_equal(xf_codec_encode(&c, x, n, NULL, 1, &enc, &len, NULL), XF_OK);
    assert_int_equal(xf_codec_decode_bound(enc, len, n, dec, bound, NULL), XF_OK);
    for (size_t j = 0; j < n; j += XF_CODEC_CHUNK) {
      size_t m = n - j < XF_CODEC_CHUNK ? n - j : XF_CODEC_CHUNK;
      float lo = x[j], hi = x[j];
      for (size_t i = j; i < j + m; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
      }
      double step = ((double)hi - lo) / ((1u << bits[b]) - 1);
      /* One step, up to the float rounding of the step and the levels. */
      assert_true(bound[j] >= step);
      assert_true(bound[j] <= step * (1 + 1e-6) + 4 * 0x1p-24);
      for (size_t i = j; i < j + m; i++) assert_true(fabs((double)dec[i] - x[i]) <= bound[i]);
    }
    xf_free(enc);
  }
  free(x);
  free(dec);
  free(bound);
}

static void stochastic_rounding_is_unbiased(void **state) {
  (void)state;
  const size_t n = 64, rounds = 4000;
  float *x = floats(n), *dec = floats(n), *bound = floats(n);
  double *mean = calloc(n, sizeof(double));
  assert_non_null(mean);
  fill_normal(x, n, 1.0, 11);
  static const uint32_t bits[] = {4, 8};
  for (size_t b = 0; b < 2; b++) {
    xf_codec_uplink c = {0, bits[b]};
    memset(mean, 0, n * sizeof(double));
    for (size_t r = 0; r < rounds; r++) {
      uint8_t *enc;
      size_t len;
      assert_int_equal(xf_codec_encode(&c, x, n, NULL, 1000 + r, &enc, &len, NULL), XF_OK);
      assert_int_equal(xf_codec_decode_bound(enc, len, n, dec, bound, NULL), XF_OK);
      for (size_t i = 0; i < n; i++) mean[i] += dec[i];
      xf_free(enc);
    }
    /* Each decoded value is x plus an error of mean 0 within one step, so of
     * standard deviation at most step / 2: the mean of R draws is within
     * 6 step / (2 sqrt R) of x but with odds below 1e-8 per coordinate, and
     * the mean over all coordinates within 6 step / (2 sqrt(R n)). */
    double total = 0, sd1 = bound[0] / (2 * sqrt((double)rounds));
    for (size_t i = 0; i < n; i++) {
      double err = mean[i] / rounds - x[i];
      total += err;
      if (fabs(err) > 6 * sd1)
        fail_msg("q%u: mean of %zu decodings of x[%zu] = %.7f is off by %g (6 sd = %g)",
                 bits[b], rounds, i, (double)x[i], err, 6 * sd1);
    }
    assert_true(fabs(total / n) <= 6 * sd1 / sqrt((double)n));
    /* A deterministic rounding would be off by a good part of a step. */
    assert_true(6 * sd1 < bound[0] / 10);
  }
  free(x);
  free(dec);
  free(bound);
  free(mean);
}

static void same_seed_gives_the_same_bytes(void **state) {
  (void)state;
  const size_t n = 10000;
  float *x = floats(n), *r1 = floats(n), *r2 = floats(n);
  fill_normal(x, n, 0.1, 12);
  for (size_t ci = 0; ci < N_CODECS; ci++) {
    uint8_t *a, *b, *c3;
    size_t la, lb, lc;
    memset(r1, 0, n * sizeof(float));
    memset(r2, 0, n * sizeof(float));
    assert_int_equal(xf_codec_encode(&CODECS[ci], x, n, r1, 99, &a, &la, NULL), XF_OK);
    assert_int_equal(xf_codec_encode(&CODECS[ci], x, n, r2, 99, &b, &lb, NULL), XF_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    assert_memory_equal(r1, r2, n * sizeof(float));
    memset(r2, 0, n * sizeof(float));
    assert_int_equal(xf_codec_encode(&CODECS[ci], x, n, r2, 100, &c3, &lc, NULL), XF_OK);
    if (CODECS[ci].quant_bits) /* another seed rounds otherwise */
      assert_true(la != lc || memcmp(a, c3, la) != 0);
    else
      assert_memory_equal(a, c3, la);
    xf_free(a);
    xf_free(b);
    xf_free(c3);
  }
  free(x);
  free(r1);
  free(r2);
}

/* Over rounds, what was decoded plus what is left in the residual is what
 * was given: error feedback loses nothing but float rounding. */
static void error_feedback_loses_nothing_over_rounds(void **state) {
  (void)state;
  const size_t n = 5000, rounds = 50;
  float *x = floats(n), *res = floats(n), *dec = floats(n);
  double *given = calloc(n, sizeof(double)), *got = calloc(n, sizeof(double)),
         *tol = calloc(n, sizeof(double));
  assert_true(given && got && tol);
  static const xf_codec_uplink cs[] = {{0.01, 8}, {0.05, 0}, {0, 4}, {0.2, 16}};
  for (size_t ci = 0; ci < 4; ci++) {
    memset(res, 0, n * sizeof(float));
    memset(given, 0, n * sizeof(double));
    memset(got, 0, n * sizeof(double));
    memset(tol, 0, n * sizeof(double));
    for (size_t r = 0; r < rounds; r++) {
      fill_normal(x, n, 0.01, 500 + r);
      for (size_t i = 0; i < n; i++) {
        given[i] += x[i];
        /* The two float operations of a round: x + residual, and v - decoded. */
        tol[i] += 0x1p-23 * (fabs((double)x[i]) + 2 * fabs((double)res[i]) + 0.02) + 0x1p-149;
      }
      uint8_t *enc;
      size_t len;
      assert_int_equal(xf_codec_encode(&cs[ci], x, n, res, 7 * r, &enc, &len, NULL), XF_OK);
      assert_int_equal(xf_codec_decode(enc, len, n, dec, NULL), XF_OK);
      for (size_t i = 0; i < n; i++) got[i] += dec[i];
      xf_free(enc);
    }
    double unsent = 0;
    for (size_t i = 0; i < n; i++) {
      double diff = fabs(got[i] + res[i] - given[i]);
      if (diff > tol[i])
        fail_msg("codec %zu, coordinate %zu: sent %.9g + residual %.9g != given %.9g", ci, i,
                 got[i], (double)res[i], given[i]);
      unsent += fabs(res[i]);
    }
    if (cs[ci].topk_fraction > 0) assert_true(unsent > 0); /* top-k does hold values back */
  }
  free(x);
  free(res);
  free(dec);
  free(given);
  free(got);
  free(tol);
}

static int by_magnitude_desc(const void *a, const void *b) {
  float x = fabsf(*(const float *)a), y = fabsf(*(const float *)b);
  return x < y ? 1 : x > y ? -1 : 0;
}

static void topk_keeps_the_largest_magnitudes(void **state) {
  (void)state;
  const size_t n = 20000;
  float *x = floats(n), *sorted = floats(n), *res = floats(n), *dec = floats(n);
  fill_normal(x, n, 1.0, 13);
  memcpy(sorted, x, n * sizeof(float));
  qsort(sorted, n, sizeof(float), by_magnitude_desc);
  static const double fractions[] = {1e-4, 0.01, 0.1, 0.5, 1.0};
  for (size_t f = 0; f < 5; f++) {
    xf_codec_uplink c = {fractions[f], 0};
    size_t k = xf_codec_topk_count(fractions[f], n);
    float kth = fabsf(sorted[k - 1]);
    memset(res, 0, n * sizeof(float));
    uint8_t *enc;
    size_t len;
    assert_int_equal(xf_codec_encode(&c, x, n, res, 0, &enc, &len, NULL), XF_OK);
    assert_int_equal(xf_codec_decode(enc, len, n, dec, NULL), XF_OK);
    size_t sent = 0;
    for (size_t i = 0; i < n; i++) {
      bool kept = fabsf(x[i]) >= kth;
      if (kept) {
        sent++;
        assert_true(dec[i] == x[i]);
        assert_true(res[i] == 0);
      } else {
        assert_true(dec[i] == 0);
        assert_true(res[i] == x[i]);
      }
    }
    assert_int_equal(sent, k);
    xf_free(enc);
  }
  /* Equal magnitudes: the lowest indices win, whatever the signs. */
  for (size_t i = 0; i < 100; i++) x[i] = i % 2 ? -1.0f : 1.0f;
  x[70] = 2.0f;
  memset(res, 0, 100 * sizeof(float));
  xf_codec_uplink c = {0.05, 0};
  uint8_t *enc;
  size_t len;
  assert_int_equal(xf_codec_encode(&c, x, 100, res, 0, &enc, &len, NULL), XF_OK);
  assert_int_equal(xf_codec_decode(enc, len, 100, dec, NULL), XF_OK);
  for (size_t i = 0; i < 100; i++)
    assert_true((dec[i] != 0) == (i < 4 || i == 70));
  xf_free(enc);
  free(x);
  free(sorted);
  free(res);
  free(dec);
}

static void topk_count_is_the_ceiling_with_at_least_one(void **state) {
  (void)state;
  assert_int_equal(xf_codec_topk_count(0.01, QUICKSTART_N), 1993);
  assert_int_equal(xf_codec_topk_count(0.07, 100), 7);
  assert_int_equal(xf_codec_topk_count(0.5, 100), 50);
  assert_int_equal(xf_codec_topk_count(0.501, 100), 51);
  assert_int_equal(xf_codec_topk_count(1e-9, 10), 1);
  assert_int_equal(xf_codec_topk_count(1.0, 10), 10);
  assert_int_equal(xf_codec_topk_count(0, 10), 10);
  assert_int_equal(xf_codec_topk_count(1e-3, 1663370), 1664);
}

static size_t encoded_size(const xf_codec_uplink *c, const float *x, size_t n) {
  float *res = floats(n);
  uint8_t *enc;
  size_t len;
  assert_int_equal(xf_codec_encode(c, x, n, res, 1, &enc, &len, NULL), XF_OK);
  assert_true(len <= xf_codec_encoded_max(c, n));
  xf_free(enc);
  free(res);
  return len;
}

static void quickstart_update_meets_the_size_targets(void **state) {
  (void)state;
  const size_t n = QUICKSTART_N;
  float *x = floats(n);
  fill_normal(x, n, 0.01, 14);
  double f32 = 4.0 * n;
  xf_codec_uplink none = {0, 0}, q8 = {0, 8}, q4 = {0, 4}, tq8 = {0.01, 8};
  size_t s_none = encoded_size(&none, x, n), s8 = encoded_size(&q8, x, n),
         s4 = encoded_size(&q4, x, n), st = encoded_size(&tq8, x, n);
  print_message("quickstart (%zu values): none %zu B, q8 %zu B (%.2f%%), q4 %zu B (%.2f%%), "
                "topk:0.01+q8 %zu B (%.3f%%)\n",
                n, s_none, s8, 100 * s8 / f32, s4, 100 * s4 / f32, st, 100 * st / f32);
  assert_int_equal(s_none, XF_CODEC_HEADER_BYTES + 4 * n);
  /* 49 chunks of 8 bytes of scale; one byte or half a byte per value. */
  assert_int_equal(s8, XF_CODEC_HEADER_BYTES + 49 * 8 + n);
  assert_int_equal(s4, XF_CODEC_HEADER_BYTES + 49 * 8 + (n + 1) / 2);
  assert_true(s8 <= 0.27 * f32);
  assert_true(st <= 0.02 * f32);
  /* Indices of 1993 random positions cost under 1.5 bytes each. */
  assert_true(st <= XF_CODEC_HEADER_BYTES + 8 + 1993 + 1.5 * 1993);
  /* The bound holds the format's worst case. */
  assert_true(xf_codec_encoded_max(&tq8, n) <= 0.02 * f32);
  free(x);
}

/* ---- malformed input ---------------------------------------------------- */

static void expect_eformat(const uint8_t *in, size_t len, size_t n, const char *what) {
  float *out = floats(n);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_codec_decode(in, len, n, out, &err);
  if (rc != XF_EFORMAT) fail_msg("%s: got %s, not XF_EFORMAT", what, xf_err_name(rc));
  if (err.code != XF_EFORMAT || !strstr(err.msg, "offset "))
    fail_msg("%s: the message \"%s\" names no offset", what, err.msg);
  free(out);
}

static uint8_t *encode_or_fail(const xf_codec_uplink *c, const float *x, size_t n, size_t *len) {
  float *res = floats(n);
  uint8_t *enc;
  assert_int_equal(xf_codec_encode(c, x, n, res, 3, &enc, len, NULL), XF_OK);
  free(res);
  return enc;
}

static void truncated_flipped_or_padded_encodings_are_refused(void **state) {
  (void)state;
  const size_t n = 4100; /* a partial chunk, odd for q4 */
  float *x = floats(n), *out = floats(n);
  fill_normal(x, n, 1.0, 15);
  static const xf_codec_uplink cs[] = {{0, 0}, {0, 16}, {0, 8}, {0, 4}, {0.01, 0}, {0.003, 4}};
  for (size_t ci = 0; ci < 6; ci++) {
    char name[64], what[128];
    codec_name(&cs[ci], name, sizeof(name));
    size_t len;
    uint8_t *enc = encode_or_fail(&cs[ci], x, n, &len);
    for (size_t cut = 0; cut < len; cut++) {
      snprintf(what, sizeof(what), "%s cut to %zu of %zu bytes", name, cut, len);
      expect_eformat(enc, cut, n, what);
    }
    uint8_t *longer = malloc(len + 1);
    assert_non_null(longer);
    memcpy(longer, enc, len);
    longer[len] = 0;
    snprintf(what, sizeof(what), "%s with a trailing byte", name);
    expect_eformat(longer, len + 1, n, what);
    snprintf(what, sizeof(what), "%s decoded for n + 1", name);
    expect_eformat(enc, len, n + 1, what);
    /* A flipped byte gives another valid update or XF_EFORMAT, never more. */
    for (size_t at = 0; at < len; at++) {
      for (unsigned bit = 0; bit < 8; bit += 3) {
        memcpy(longer, enc, len);
        longer[at] ^= (uint8_t)(1u << bit);
        xf_errctx err;
        xf_errctx_clear(&err);
        xf_err rc = xf_codec_decode(longer, len, n, out, &err);
        if (rc == XF_OK) {
          assert_true(at >= XF_CODEC_HEADER_BYTES); /* every header byte is checked */
          for (size_t i = 0; i < n; i++) assert_true(isfinite(out[i]));
        } else if (rc != XF_EFORMAT || !strstr(err.msg, "offset ")) {
          fail_msg("%s with bit %u of byte %zu flipped: %s \"%s\"", name, bit, at,
                   xf_err_name(rc), err.msg);
        }
      }
    }
    free(longer);
    xf_free(enc);
  }
  free(x);
  free(out);
}

/* Builds an encoding by hand: a header, then body bytes. */
static size_t craft(uint8_t *buf, uint8_t kind, uint8_t bits, uint32_t n, uint32_t k,
                    uint32_t chunk, const uint8_t *body, size_t body_len) {
  uint8_t h[XF_CODEC_HEADER_BYTES] = {'X', 'F', 'U', 'C', XF_CODEC_VERSION, kind, bits, 0};
  for (int i = 0; i < 4; i++) {
    h[8 + i] = (uint8_t)(n >> (8 * i));
    h[12 + i] = (uint8_t)(k >> (8 * i));
    h[16 + i] = (uint8_t)(chunk >> (8 * i));
  }
  memcpy(buf, h, sizeof(h));
  memcpy(buf + sizeof(h), body, body_len);
  return sizeof(h) + body_len;
}

static void put_f32(uint8_t *p, float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(b >> (8 * i));
}

static void every_malformed_field_is_named(void **state) {
  (void)state;
  uint8_t buf[256], body[64];
  size_t len;
  float out[16];
  /* A valid start: dense q8 of 4 values, and top-k float32 of 2 of 10. */
  put_f32(body, -1.0f);
  put_f32(body + 4, 0.5f);
  body[8] = 0, body[9] = 1, body[10] = 2, body[11] = 4;
  len = craft(buf, 0, 8, 4, 4, 4096, body, 12);
  assert_int_equal(xf_codec_decode(buf, len, 4, out, NULL), XF_OK);
  assert_true(out[0] == -1.0f && out[1] == -0.5f && out[2] == 0.0f && out[3] == 1.0f);

  uint8_t bad[256];
  struct {
    size_t at;
    uint8_t value;
    const char *what;
  } header_faults[] = {
      {0, 'Y', "magic"},      {4, 2, "version 2"},   {5, 2, "kind 2"},
      {6, 7, "7 bits"},       {6, 32, "32 bits"},    {7, 1, "reserved byte"},
      {8, 5, "n = 5"},        {12, 3, "dense k != n"}, {17, 0, "chunk 0"},
  };
  for (size_t i = 0; i < sizeof(header_faults) / sizeof(header_faults[0]); i++) {
    memcpy(bad, buf, len);
    bad[header_faults[i].at] = header_faults[i].value;
    expect_eformat(bad, len, 4, header_faults[i].what);
  }
  len = craft(bad, 0, 8, 4, 4, 4097, body, 12);
  expect_eformat(bad, len, 4, "chunk above 4096");
  len = craft(bad, 0, 0, 1, 1, 4096, body, 4);
  expect_eformat(bad, len, 1, "chunk size for float32 values");
  len = craft(bad, 0, 0, 0, 0, 0, body, 0);
  expect_eformat(bad, len, 0, "n = 0");

  /* Scales. */
  put_f32(body, NAN);
  len = craft(bad, 0, 8, 4, 4, 4096, body, 12);
  expect_eformat(bad, len, 4, "NaN lowest level");
  put_f32(body, -1.0f);
  put_f32(body + 4, INFINITY);
  len = craft(bad, 0, 8, 4, 4, 4096, body, 12);
  expect_eformat(bad, len, 4, "infinite step");
  put_f32(body + 4, -0.5f);
  len = craft(bad, 0, 8, 4, 4, 4096, body, 12);
  expect_eformat(bad, len, 4, "negative step");

  /* A float32 value that is not finite. */
  put_f32(body, 1.0f);
  put_f32(body + 4, INFINITY);
  len = craft(bad, 0, 0, 2, 2, 0, body, 8);
  expect_eformat(bad, len, 2, "infinite float32 value");

  /* q4 of 3 values: 8 bytes of scale and 2 of codes, high nibble of the last 0. */
  put_f32(body, 0.0f);
  put_f32(body + 4, 1.0f);
  body[8] = 0x21, body[9] = 0x03;
  len = craft(bad, 0, 4, 3, 3, 4096, body, 10);
  assert_int_equal(xf_codec_decode(bad, len, 3, out, NULL), XF_OK);
  assert_true(out[0] == 1.0f && out[1] == 2.0f && out[2] == 3.0f);
  body[9] = 0x13;
  len = craft(bad, 0, 4, 3, 3, 4096, body, 10);
  expect_eformat(bad, len, 3, "nonzero padding nibble");

  /* Top-k indices: 2 of 10, float32. */
  struct {
    uint8_t idx[8];
    size_t idx_len;
    uint32_t k;
    const char *what;
    bool ok;
  } idx_cases[] = {
      {{3, 4}, 2, 2, "indices 3, 7", true},
      {{3, 0}, 2, 2, "a repeated index", false},
      {{9, 1}, 2, 2, "an index beyond n", false},
      {{10}, 1, 1, "first index n", false},
      {{0x83, 0x00, 4}, 3, 2, "a non-minimal varint", false},
      {{0x80, 0x80, 0x80, 0x80, 0x80, 0x00}, 6, 1, "a varint of 6 bytes", false},
      {{0xff, 0xff, 0xff, 0xff, 0x1f}, 5, 1, "a varint above 32 bits", false},
      {{0xff, 0xff, 0xff, 0xff, 0x0f}, 5, 1, "an index of 2^32 - 1", false},
      {{0x83}, 1, 1, "a cut varint", false},
  };
  for (size_t i = 0; i < sizeof(idx_cases) / sizeof(idx_cases[0]); i++) {
    uint8_t b2[64];
    memcpy(b2, idx_cases[i].idx, idx_cases[i].idx_len);
    for (uint32_t j = 0; j < idx_cases[i].k; j++) put_f32(b2 + idx_cases[i].idx_len + 4 * j, 2.0f);
    len = craft(bad, 1, 0, 10, idx_cases[i].k, 0, b2, idx_cases[i].idx_len + 4 * idx_cases[i].k);
    if (idx_cases[i].ok) {
      assert_int_equal(xf_codec_decode(bad, len, 10, out, NULL), XF_OK);
      for (size_t j = 0; j < 10; j++) assert_true(out[j] == (j == 3 || j == 7 ? 2.0f : 0.0f));
    } else {
      expect_eformat(bad, len, 10, idx_cases[i].what);
    }
  }
  len = craft(bad, 1, 0, 10, 0, 0, body, 0);
  expect_eformat(bad, len, 10, "top-k of 0 values");
  len = craft(bad, 1, 0, 10, 11, 0, body, 0);
  expect_eformat(bad, len, 10, "top-k of more than n values");
  /* A huge k with few bytes fails before any index is read. */
  len = craft(bad, 1, 8, 0xffffffffu, 0xffffffffu, 4096, body, 4);
  expect_eformat(bad, len, 0xffffffffu, "huge k");
  /* NULL bytes. */
  assert_int_equal(xf_codec_decode(NULL, 5, 4, out, NULL), XF_EINVAL);
}

/* ---- arguments ---------------------------------------------------------- */

static void invalid_arguments_are_refused_and_leave_the_residual(void **state) {
  (void)state;
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, res[8] = {0}, keep[8];
  uint8_t *enc = (uint8_t *)1;
  size_t len = 1;
  static const xf_codec_uplink bad[] = {{1.5, 0}, {-0.1, 0}, {NAN, 8}, {0, 7}, {0, 32}};
  for (size_t i = 0; i < 5; i++) {
    xf_errctx err;
    xf_errctx_clear(&err);
    assert_int_equal(xf_codec_encode(&bad[i], x, 8, res, 0, &enc, &len, &err), XF_EINVAL);
    assert_null(enc);
    assert_true(err.msg[0] != '\0');
    assert_int_equal(xf_codec_encoded_max(&bad[i], 8), 0);
  }
  xf_codec_uplink topk = {0.5, 8}, q8 = {0, 8};
  assert_int_equal(xf_codec_encode(&q8, x, 0, NULL, 0, &enc, &len, NULL), XF_EINVAL);
  assert_int_equal(xf_codec_encoded_max(&q8, 0), 0);
  assert_int_equal(xf_codec_encode(&topk, x, 8, NULL, 0, &enc, &len, NULL), XF_EINVAL);
  x[5] = NAN;
  assert_int_equal(xf_codec_encode(&q8, x, 8, NULL, 0, &enc, &len, NULL), XF_EINVAL);
  /* Finite parts whose sum overflows. */
  x[5] = FLT_MAX;
  res[5] = FLT_MAX;
  res[2] = 0.25f;
  memcpy(keep, res, sizeof(res));
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_codec_encode(&topk, x, 8, res, 0, &enc, &len, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "value 5"));
  assert_memory_equal(res, keep, sizeof(res));
  /* A failed allocation leaves the residual too. */
  res[5] = 0;
  memcpy(keep, res, sizeof(res));
  for (long fail = 0; fail < 2; fail++) {
    xf_alloc_fail_after(fail);
    xf_err rc = xf_codec_encode(&topk, x, 8, res, 0, &enc, &len, NULL);
    xf_alloc_fail_reset();
    assert_int_equal(rc, XF_ENOMEM);
    assert_null(enc);
    assert_memory_equal(res, keep, sizeof(res));
  }
  /* The shrink after encoding may fail: the result is still whole. */
  xf_alloc_fail_after(2);
  xf_err rc = xf_codec_encode(&topk, x, 8, res, 0, &enc, &len, NULL);
  xf_alloc_fail_reset();
  assert_int_equal(rc, XF_OK);
  float out[8];
  assert_int_equal(xf_codec_decode(enc, len, 8, out, NULL), XF_OK);
  xf_free(enc);
}

/* ---- downlink ------------------------------------------------------------ */

#ifdef __FLT16_MAX__
static float f32(uint32_t bits) {
  float f;
  memcpy(&f, &bits, 4);
  return f;
}
#endif

static uint32_t bits_of(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

static uint16_t half_of(float x, bool bf16) {
  uint16_t h = 0xdead;
  assert_int_equal(xf_codec_to_half(&x, 1, bf16, &h), XF_OK);
  return h;
}

static void fp16_rounds_to_nearest_even(void **state) {
  (void)state;
  struct {
    float x;
    uint16_t h;
  } kat[] = {
      {1.0f, 0x3c00},
      {-2.0f, 0xc000},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {65504.0f, 0x7bff},                 /* the largest fp16 */
      {65519.99f, 0x7bff},                /* below the halfway point to 2^16 */
      {0x1p-24f, 0x0001},                 /* the smallest subnormal */
      {-0x1p-24f, 0x8001},
      {0x1p-25f, 0x0000},                 /* half of it: a tie, to the even 0 */
      {0x1.000002p-25f, 0x0001},          /* just above the tie */
      {0x1.8p-24f, 0x0002},               /* 1.5 units: a tie, to the even 2 */
      {0x1.4p-23f, 0x0002},               /* 2.5 units: a tie, to the even 2 */
      {0x1p-14f, 0x0400},                 /* the smallest normal */
      {0x1.ff8p-15f, 0x03ff},             /* the largest subnormal, 1023 units */
      {0x1.ffcp-15f, 0x0400},             /* 1023.5 units: a tie, up to the even 1024 */
      {1.0f + 0x1p-11f, 0x3c00},          /* a tie between 1 and 1 + 2^-10, to the even 1 */
      {1.0f + 0x1.8p-10f, 0x3c02},        /* a tie between mantissas 1 and 2, to 2 */
      {0x1.002002p+0f, 0x3c01},          /* one float32 unit above the tie */
      {0x1p-149f, 0x0000},                /* a float32 subnormal */
      {3.14159265f, 0x4248},
      {2048.0f + 1.0f, 0x6800},           /* 2049: a tie between 2048 and 2050 */
      {2048.0f + 3.0f, 0x6802},           /* 2051: a tie, to 2052 */
  };
  for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
    uint16_t h = half_of(kat[i].x, false);
    if (h != kat[i].h)
      fail_msg("fp16 of %a is 0x%04x, not 0x%04x", (double)kat[i].x, h, kat[i].h);
  }
  float bad[] = {NAN, INFINITY, -INFINITY, 65520.0f, -65520.0f, 1e10f, FLT_MAX};
  xf_err want[] = {XF_EINVAL, XF_EINVAL, XF_EINVAL, XF_ERANGE, XF_ERANGE, XF_ERANGE, XF_ERANGE};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint16_t h;
    assert_int_equal(xf_codec_to_half(&bad[i], 1, false, &h), want[i]);
  }
  /* Every finite fp16 goes to float32 and back to itself. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7c00) == 0x7c00) continue;
    uint16_t in = (uint16_t)h, back;
    float f;
    xf_codec_from_half(&in, 1, false, &f);
    assert_int_equal(xf_codec_to_half(&f, 1, false, &back), XF_OK);
    assert_int_equal(back, in);
  }
  uint16_t inf = 0x7c00, nan = 0x7e00;
  float f;
  xf_codec_from_half(&inf, 1, false, &f);
  assert_true(isinf(f) && f > 0);
  xf_codec_from_half(&nan, 1, false, &f);
  assert_true(isnan(f));
#ifdef __FLT16_MAX__
  /* Against the compiler's conversion, which rounds to nearest even too. */
  xf_rng rng;
  xf_rng_seed(&rng, 16, 16);
  for (int i = 0; i < 200000; i++) {
    float x = f32((uint32_t)xf_rng_next(&rng));
    if (!isfinite(x) || fabsf(x) >= 65520.0f) continue;
    _Float16 ref = (_Float16)x;
    uint16_t want_h;
    memcpy(&want_h, &ref, 2);
    assert_int_equal(half_of(x, false), want_h);
  }
#endif
}

static void bf16_rounds_to_nearest_even(void **state) {
  (void)state;
  struct {
    float x;
    uint16_t h;
  } kat[] = {
      {1.0f, 0x3f80},
      {-1.0f, 0xbf80},
      {-0.0f, 0x8000},
      {1.0f + 0x1p-8f, 0x3f80},           /* a tie, to the even 1 */
      {1.0f + 0x1.8p-7f, 0x3f82},         /* a tie between mantissas 1 and 2, to 2 */
      {0x1.010002p+0f, 0x3f81},          /* one float32 unit above the tie */
      {0x1p-149f, 0x0000},
      {0x1p-133f, 0x0001},                /* the smallest bf16 subnormal */
      {3.0e38f, 0x7f62},                  /* 0x7f61b1e6 rounds up */
      {0x1.fep127f, 0x7f7f},              /* the largest bf16 */
  };
  for (size_t i = 0; i < sizeof(kat) / sizeof(kat[0]); i++) {
    uint16_t h = half_of(kat[i].x, true);
    if (h != kat[i].h)
      fail_msg("bf16 of %a is 0x%04x, not 0x%04x", (double)kat[i].x, h, kat[i].h);
  }
  float bad[] = {NAN, -INFINITY, FLT_MAX, 0x1.ffp127f};
  xf_err want[] = {XF_EINVAL, XF_EINVAL, XF_ERANGE, XF_ERANGE};
  for (size_t i = 0; i < 4; i++) {
    uint16_t h;
    assert_int_equal(xf_codec_to_half(&bad[i], 1, true, &h), want[i]);
  }
  for (uint32_t h = 0; h < 0x10000; h++) {
    if ((h & 0x7f80) == 0x7f80) continue;
    uint16_t in = (uint16_t)h, back;
    float f;
    xf_codec_from_half(&in, 1, true, &f);
    assert_int_equal(bits_of(f), h << 16);
    assert_int_equal(xf_codec_to_half(&f, 1, true, &back), XF_OK);
    assert_int_equal(back, in);
  }
  /* A vector: the model as a whole. */
  const size_t n = 1000;
  float *x = floats(n), *back = floats(n);
  uint16_t *h = calloc(n, 2);
  assert_non_null(h);
  fill_normal(x, n, 0.05, 17);
  for (int bf = 0; bf <= 1; bf++) {
    assert_int_equal(xf_codec_to_half(x, n, bf, h), XF_OK);
    xf_codec_from_half(h, n, bf, back);
    for (size_t i = 0; i < n; i++)
      assert_true(fabsf(back[i] - x[i]) <= fabsf(x[i]) * (bf ? 0x1p-8f : 0x1p-11f) + 0x1p-25f);
  }
  free(x);
  free(back);
  free(h);
}

/* ---- fixed scale ---------------------------------------------------------- */

static void fixed_scale_round_trips_clips_and_sums(void **state) {
  (void)state;
  const size_t n = 4000, sites = 5;
  float *x = floats(n), *back = floats(n);
  uint32_t *q = calloc(n, sizeof(uint32_t)), *sum = calloc(n, sizeof(uint32_t));
  double *truth = calloc(n, sizeof(double));
  assert_true(q && sum && truth);
  xf_codec_fixed f = {1e-3, 20, 1000}; /* values within +-1 pass unclipped */
  fill_normal(x, n, 0.5, 18);
  size_t beyond = 0;
  for (size_t i = 0; i < n; i++) beyond += fabsf(x[i]) > 1.0f;
  size_t clipped = 99;
  assert_int_equal(xf_codec_quantize_fixed(&f, x, n, 1, q, &clipped, NULL), XF_OK);
  assert_int_equal(clipped, beyond);
  assert_true(beyond > 0);
  xf_codec_dequantize_fixed(&f, q, n, back);
  for (size_t i = 0; i < n; i++) {
    float want = fmaxf(-1.0f, fminf(1.0f, x[i]));
    assert_true(fabsf(back[i] - want) < 1e-3f * (1 + 1e-6f));
    assert_true(q[i] < (1u << 20));
  }
  /* Sites add their integers mod 2^bits; the lift gives the sum. */
  for (size_t s = 0; s < sites; s++) {
    fill_normal(x, n, 0.2, 100 + s);
    assert_int_equal(xf_codec_quantize_fixed(&f, x, n, s, q, NULL, NULL), XF_OK);
    for (size_t i = 0; i < n; i++) {
      truth[i] += fmax(-1.0, fmin(1.0, x[i]));
      sum[i] = (sum[i] + q[i]) & ((1u << 20) - 1);
    }
  }
  xf_codec_dequantize_fixed(&f, sum, n, back);
  for (size_t i = 0; i < n; i++) assert_true(fabs(back[i] - truth[i]) < sites * 1e-3 * (1 + 1e-6));
  /* Unbiased: the mean of many quantizations of one value. */
  float v = 0.0123456f;
  double mean = 0;
  const int draws = 20000;
  for (int r = 0; r < draws; r++) {
    uint32_t z;
    assert_int_equal(xf_codec_quantize_fixed(&f, &v, 1, (uint64_t)r, &z, NULL, NULL), XF_OK);
    float d;
    xf_codec_dequantize_fixed(&f, &z, 1, &d);
    mean += d;
  }
  assert_true(fabs(mean / draws - v) < 6 * 1e-3 / (2 * sqrt((double)draws)));
  /* 32 bits, negative values. */
  xf_codec_fixed f32b = {0.5, 32, 1000000};
  float neg[3] = {-3.0f, -0.25f, 1e9f};
  uint32_t z[3];
  assert_int_equal(xf_codec_quantize_fixed(&f32b, neg, 3, 0, z, &clipped, NULL), XF_OK);
  assert_int_equal(z[0], UINT32_MAX - 5); /* -6 */
  assert_int_equal(clipped, 1);
  float d3[3];
  xf_codec_dequantize_fixed(&f32b, z, 3, d3);
  assert_true(d3[0] == -3.0f && (d3[1] == 0.0f || d3[1] == -0.5f) && d3[2] == 500000.0f);
  /* Refusals. */
  xf_codec_fixed bad[] = {{0, 20, 10}, {-1, 20, 10}, {NAN, 20, 10}, {1, 1, 0},
                          {1, 33, 10}, {1, 8, 128}, {1, 8, 0}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    assert_int_equal(xf_codec_quantize_fixed(&bad[i], neg, 3, 0, z, NULL, NULL), XF_EINVAL);
  neg[1] = NAN;
  assert_int_equal(xf_codec_quantize_fixed(&f32b, neg, 3, 0, z, NULL, NULL), XF_EINVAL);
  free(x);
  free(back);
  free(q);
  free(sum);
  free(truth);
}

/* The shared random subset: a function of the seed alone, k distinct
 * indices in increasing order, every index about equally likely. */
static void random_subset_is_shared_distinct_sorted_and_uniform(void **state) {
  (void)state;
  enum { N = 1000, K = 100, DRAWS = 400 };
  uint32_t a[K], b[K];
  assert_int_equal(xf_codec_random_subset(42, N, K, a), XF_OK);
  assert_int_equal(xf_codec_random_subset(42, N, K, b), XF_OK);
  assert_memory_equal(a, b, sizeof(a));
  for (size_t i = 1; i < K; i++) assert_true(a[i - 1] < a[i]);
  assert_true(a[K - 1] < N);
  assert_int_equal(xf_codec_random_subset(43, N, K, b), XF_OK);
  assert_memory_not_equal(a, b, sizeof(a));
  /* Each index is picked with probability K/N: over DRAWS seeds the counts
   * follow a binomial; a chi-square over the N cells stays well below its
   * 1e-6 tail (about 1225 for 999 degrees of freedom). */
  static unsigned hits[N];
  memset(hits, 0, sizeof(hits));
  for (uint64_t seed = 0; seed < DRAWS; seed++) {
    assert_int_equal(xf_codec_random_subset(seed, N, K, a), XF_OK);
    for (size_t i = 0; i < K; i++) hits[a[i]]++;
  }
  double mean = (double)DRAWS * K / N, var = mean * (1 - (double)K / N), chi = 0;
  for (size_t i = 0; i < N; i++) chi += ((double)hits[i] - mean) * ((double)hits[i] - mean) / var;
  assert_true(chi < 1225);
  uint32_t all[5];
  assert_int_equal(xf_codec_random_subset(7, 5, 5, all), XF_OK);
  for (uint32_t i = 0; i < 5; i++) assert_int_equal(all[i], i);
  assert_int_equal(xf_codec_random_subset(7, 5, 6, all), XF_EINVAL);
  assert_int_equal(xf_codec_random_subset(7, 5, 0, all), XF_EINVAL);
}

/* Masked integers packed to their width and back, for every width. */
static void packed_integers_round_trip_and_refuse_bad_lengths(void **state) {
  (void)state;
  enum { N = 333 };
  uint32_t in[N], back[N];
  uint8_t buf[N * 4 + 1];
  xf_rng rng;
  xf_rng_seed(&rng, 5, 5);
  for (uint32_t bits = 1; bits <= 32; bits++) {
    uint32_t mask = bits == 32 ? UINT32_MAX : (1u << bits) - 1;
    for (size_t i = 0; i < N; i++) in[i] = (uint32_t)xf_rng_next(&rng) & mask;
    size_t len = xf_codec_packed_bytes(N, bits);
    assert_int_equal(len, (N * bits + 7) / 8);
    xf_codec_pack_bits(in, N, bits, buf);
    assert_int_equal(xf_codec_unpack_bits(buf, len, N, bits, back, NULL), XF_OK);
    assert_memory_equal(in, back, sizeof(in));
    assert_int_equal(xf_codec_unpack_bits(buf, len - 1, N, bits, back, NULL), XF_EFORMAT);
    if ((N * bits) % 8) { /* a padding bit set */
      buf[len - 1] |= 0x80;
      assert_int_equal(xf_codec_unpack_bits(buf, len, N, bits, back, NULL), XF_EFORMAT);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_codec_round_trips_every_vector_within_its_bound),
      cmocka_unit_test(bound_is_the_step_of_the_chunk),
      cmocka_unit_test(stochastic_rounding_is_unbiased),
      cmocka_unit_test(same_seed_gives_the_same_bytes),
      cmocka_unit_test(error_feedback_loses_nothing_over_rounds),
      cmocka_unit_test(topk_keeps_the_largest_magnitudes),
      cmocka_unit_test(topk_count_is_the_ceiling_with_at_least_one),
      cmocka_unit_test(quickstart_update_meets_the_size_targets),
      cmocka_unit_test(truncated_flipped_or_padded_encodings_are_refused),
      cmocka_unit_test(every_malformed_field_is_named),
      cmocka_unit_test(invalid_arguments_are_refused_and_leave_the_residual),
      cmocka_unit_test(fp16_rounds_to_nearest_even),
      cmocka_unit_test(bf16_rounds_to_nearest_even),
      cmocka_unit_test(fixed_scale_round_trips_clips_and_sums),
      cmocka_unit_test(random_subset_is_shared_distinct_sorted_and_uniform),
      cmocka_unit_test(packed_integers_round_trip_and_refuse_bad_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
