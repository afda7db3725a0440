/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the round's streaming aggregator and the server optimizers: known
 * answers, independence of commit order, chunking and interleaving, the
 * fixed-point range and rounding, overflow bounds, arrival checks, abort,
 * robust aggregates, long-double and double references, state save and load,
 * and allocation failures. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "coordinator/aggregate.h"
#include "job/jobspec.h"
#include "crypto/digest.h"

/* ---- helpers ---------------------------------------------------------------- */

static xf_job_strategy strategy_of(xf_job_strategy_kind kind) {
  xf_job_strategy s;
  xf_job_strategy_defaults(&s, kind);
  return s;
}

static xf_aggregator *new_agg(xf_job_strategy_kind kind, size_t n, size_t cap) {
  xf_job_strategy s = strategy_of(kind);
  xf_aggregator *agg = NULL;
  assert_int_equal(xf_aggregator_create(&s, n, cap, &agg, NULL), XF_OK);
  return agg;
}

/* One whole update in a single chunk. */
static void submit(xf_aggregator *agg, uint64_t site, uint64_t weight, const float *v, size_t n) {
  xf_agg_update *u = NULL;
  assert_int_equal(xf_aggregator_begin_update(agg, site, weight, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, v, n, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(u, NULL), XF_OK);
}

static float *rand_floats(xf_rng *r, size_t n, double scale) {
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) v[i] = (float)((2 * xf_rng_uniform(r) - 1) * scale);
  return v;
}

static void finish_into(const xf_aggregator *agg, float *out) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_aggregator_finish(agg, out, &err);
  if (rc != XF_OK) fail_msg("finish: %s", err.msg);
}

/* ---- mean-based aggregation ----------------------------------------------------- */

static void fedavg_is_the_weighted_mean_by_hand(void **state) {
  (void)state;
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 3, 0);
  const float a[3] = {1, 2, 3}, b[3] = {5, -2, 0.5f}, c[3] = {-1, 0, 8};
  submit(agg, 10, 1, a, 3);
  submit(agg, 11, 3, b, 3);
  float out[3];
  finish_into(agg, out);
  /* (1*1 + 3*5)/4, (1*2 - 3*2)/4, (1*3 + 3*0.5)/4 */
  assert_true(out[0] == 4.0f && out[1] == -1.0f && out[2] == 1.125f);
  submit(agg, 12, 4, c, 3);
  finish_into(agg, out);
  /* (16 - 4)/8, (-4 + 0)/8, (4.5 + 32)/8 */
  assert_true(out[0] == 1.5f && out[1] == -0.5f && out[2] == 4.5625f);
  assert_int_equal(xf_aggregator_committed(agg), 3);
  assert_int_equal(xf_aggregator_total_weight(agg), 8);
  xf_aggregator_free(agg);
}

/* Streams the update of one site as shuffled chunks of random sizes. */
typedef struct chunked {
  xf_agg_update *upd;
  const float *values;
  size_t offsets[64], counts[64];
  size_t n_chunks, next;
} chunked;

static void chunk_plan(xf_rng *r, chunked *c, const float *values, size_t n) {
  c->values = values;
  c->n_chunks = 0;
  c->next = 0;
  size_t off = 0;
  while (off < n) {
    size_t left = n - off;
    size_t len = c->n_chunks == 63 ? left : 1 + (size_t)xf_rng_below(r, left < 97 ? left : 97);
    c->offsets[c->n_chunks] = off;
    c->counts[c->n_chunks] = len;
    c->n_chunks++;
    off += len;
  }
  for (size_t i = c->n_chunks; i > 1; i--) {
    size_t j = (size_t)xf_rng_below(r, i);
    size_t o = c->offsets[i - 1], k = c->counts[i - 1];
    c->offsets[i - 1] = c->offsets[j], c->counts[i - 1] = c->counts[j];
    c->offsets[j] = o, c->counts[j] = k;
  }
}

static void chunk_splits_and_interleaving_do_not_change_the_mean(void **state) {
  (void)state;
  enum { N = 1000, SITES = 3 };
  xf_rng r;
  xf_rng_seed(&r, 7, 0);
  float *v[SITES];
  const uint64_t weights[SITES] = {120, 7, 3001};
  for (int s = 0; s < SITES; s++) v[s] = rand_floats(&r, N, 3.0);
  xf_aggregator *ref = new_agg(XF_JOB_STRATEGY_FEDADAM, N, 0);
  for (int s = 0; s < SITES; s++) submit(ref, (uint64_t)s, weights[s], v[s], N);
  float want[N], got[N];
  finish_into(ref, want);
  xf_aggregator_free(ref);

  for (int trial = 0; trial < 20; trial++) {
    xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDADAM, N, 0);
    chunked c[SITES];
    for (int s = 0; s < SITES; s++) {
      chunk_plan(&r, &c[s], v[s], N);
      assert_int_equal(xf_aggregator_begin_update(agg, (uint64_t)s, weights[s], &c[s].upd, NULL),
                       XF_OK);
    }
    assert_int_equal(xf_aggregator_in_flight(agg), SITES);
    /* All three in flight, chunks interleaved at random, and each update
     * committed the moment its last chunk is in: in whatever order they
     * complete, not the order the reference committed in. */
    int committed = 0;
    while (committed < SITES) {
      int s = (int)xf_rng_below(&r, SITES);
      if (c[s].next == c[s].n_chunks) continue;
      size_t k = c[s].next++;
      assert_int_equal(xf_aggregator_fold(c[s].upd, c[s].offsets[k], v[s] + c[s].offsets[k],
                                          c[s].counts[k], NULL),
                       XF_OK);
      if (c[s].next == c[s].n_chunks) {
        assert_int_equal(xf_aggregator_end_update(c[s].upd, NULL), XF_OK);
        committed++;
      }
    }
    finish_into(agg, got);
    assert_memory_equal(got, want, sizeof(want));
    xf_aggregator_free(agg);
  }
  for (int s = 0; s < SITES; s++) free(v[s]);
}

/* Values spread over many binades (1e-9 to 1e6 in magnitude, some below the
 * 2^-17 from which fixed point is exact), so that a double running sum
 * would tell commit orders apart. */
static float *wide_floats(xf_rng *r, size_t n) {
  static const double scales[] = {1e-9, 1e-6, 1e-3, 1, 1e3, 1e6};
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++)
    v[i] = (float)((2 * xf_rng_uniform(r) - 1) * scales[xf_rng_below(r, 6)]);
  return v;
}

/* The old arithmetic, a double running sum in commit order, for checking
 * that the data below would have told orders apart. */
static void double_mean(float *const *v, const uint64_t *w, const int *order, int k, size_t n,
                        float *out) {
  double total = 0;
  for (int j = 0; j < k; j++) total += (double)w[order[j]];
  for (size_t i = 0; i < n; i++) {
    double sum = 0;
    for (int j = 0; j < k; j++) sum += (double)w[order[j]] * (double)v[order[j]][i];
    out[i] = (float)(sum / total);
  }
}

/* Next permutation in lexicographic order; false after the last. */
static bool next_permutation(int *p, int k) {
  int i = k - 2;
  while (i >= 0 && p[i] >= p[i + 1]) i--;
  if (i < 0) return false;
  int j = k - 1;
  while (p[j] <= p[i]) j--;
  int t = p[i];
  p[i] = p[j], p[j] = t;
  for (int a = i + 1, b = k - 1; a < b; a++, b--) t = p[a], p[a] = p[b], p[b] = t;
  return true;
}

static void mean_is_bit_identical_in_every_commit_order(void **state) {
  (void)state;
  enum { N = 2000, K = 5 };
  xf_rng r;
  xf_rng_seed(&r, 101, 0);
  float *v[K];
  uint64_t w[K];
  for (int s = 0; s < K; s++) {
    v[s] = wide_floats(&r, N);
    w[s] = 1 + xf_rng_below(&r, UINT64_C(1) << 40);
  }
  /* In every other coordinate the first two updates cancel, as opposite
   * updates of two sites do, leaving a mean far smaller than the terms. */
  w[1] = w[0];
  for (size_t i = 0; i < N; i += 2) v[1][i] = -v[0][i];
  float want[N], got[N], dbl_first[N], dbl[N];
  int order[K] = {0, 1, 2, 3, 4};
  double_mean(v, w, order, K, N, dbl_first);
  bool double_differs = false;
  int perms = 0;
  do {
    xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, N, 0);
    for (int j = 0; j < K; j++) submit(agg, (uint64_t)order[j], w[order[j]], v[order[j]], N);
    finish_into(agg, perms == 0 ? want : got);
    if (perms > 0) assert_memory_equal(got, want, sizeof(want));
    xf_aggregator_free(agg);
    double_mean(v, w, order, K, N, dbl);
    double_differs |= memcmp(dbl, dbl_first, sizeof(dbl)) != 0;
    perms++;
  } while (next_permutation(order, K));
  assert_int_equal(perms, 120);
  /* The data has teeth: the double running sum this replaced gives
   * different bits in some order. */
  assert_true(double_differs);
  for (int s = 0; s < K; s++) free(v[s]);
}

/* The spacing of floats just above |x|: at least the ulp on either side. */
static double ulp_above(float x) {
  float a = fabsf(x);
  return (double)nextafterf(a, INFINITY) - (double)a;
}

/* The bound of docs/aggregation.md, checked against a long-double mean of
 * the float values themselves: half an ulp of the result for its rounding
 * to float, 2^-41 for the fixed-point rounding of values below 2^-17, and
 * 2^-50 of the mean of |w v| for the rounding of the sum to double, of the
 * division, and of the reference itself. Weights reach 2^40 so that every
 * product w v is exact in a 64-bit significand. */
static void mean_agrees_with_a_long_double_reference(void **state) {
  (void)state;
  enum { N = 4000, K = 7 };
  xf_rng r;
  xf_rng_seed(&r, 102, 0);
  float *v[K], got[N];
  uint64_t w[K];
  long double total = 0;
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, N, 0);
  for (int s = 0; s < K; s++) {
    v[s] = wide_floats(&r, N);
    w[s] = 1 + xf_rng_below(&r, UINT64_C(1) << 40);
    total += (long double)w[s];
    submit(agg, (uint64_t)s, w[s], v[s], N);
  }
  finish_into(agg, got);
  int quantized = 0;
  for (size_t i = 0; i < N; i++) {
    long double sum = 0, abs_sum = 0;
    for (int s = 0; s < K; s++) {
      sum += (long double)w[s] * (long double)v[s][i];
      abs_sum += (long double)w[s] * fabsl((long double)v[s][i]);
      quantized += v[s][i] != 0 && fabsf(v[s][i]) < 0x1p-17f;
    }
    long double ref = sum / total;
    long double tol = 0.5L * (long double)ulp_above(got[i]) + 0x1p-41L +
                      0x1p-50L * (abs_sum / total);
    if (fabsl((long double)got[i] - ref) > tol)
      fail_msg("mean[%zu] = %.9g, reference %.12Lg, tolerance %.3Lg", i, (double)got[i], ref,
               tol);
  }
  assert_true(quantized > 0); /* the 2^-41 term was exercised */
  xf_aggregator_free(agg);
  for (int s = 0; s < K; s++) free(v[s]);
}

/* Fixed point rounds v * 2^40 to nearest, ties to even: values below 2^-17
 * land on multiples of 2^-40, and anything under half a unit on zero. */
static void small_values_round_to_the_nearest_fixed_point_unit(void **state) {
  (void)state;
  const float v[8] = {0x1.8p-41f, 0x1p-41f,   0x1.8p-40f, -0x1p-41f,
                      -0x1.8p-41f, 0x1p-149f, 0x1.4p-40f, 0x1.2p-17f};
  const float want[8] = {0x1p-40f,  0.0f,       0x1p-39f, 0.0f,
                         -0x1p-40f, 0.0f,       0x1p-40f, 0x1.2p-17f};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 8, 0);
  submit(agg, 1, 3, v, 8);
  float out[8];
  finish_into(agg, out);
  for (int i = 0; i < 8; i++) {
    if (out[i] != want[i]) fail_msg("element %d: %a, want %a", i, (double)out[i], (double)want[i]);
    if (want[i] == 0) assert_false(signbit(out[i])); /* an integer zero is +0 */
  }
  xf_aggregator_free(agg);
}

static void values_beyond_the_fixed_point_range_are_refused(void **state) {
  (void)state;
  const float largest = nextafterf(XF_AGG_VALUE_LIMIT, 0); /* 2^23 - 0.5 */
  float v[6] = {1, -2, largest, -largest, 0, 7};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDADAM, 6, 0);
  xf_agg_update *u = NULL;
  xf_errctx err;

  const float beyond[] = {XF_AGG_VALUE_LIMIT, -XF_AGG_VALUE_LIMIT, 1e30f, -3e38f};
  for (size_t b = 0; b < sizeof(beyond) / sizeof(beyond[0]); b++) {
    float chunk[3] = {0.5f, beyond[b], 2};
    xf_errctx_clear(&err);
    assert_int_equal(xf_aggregator_begin_update(agg, 1, 4, &u, NULL), XF_OK);
    assert_int_equal(xf_aggregator_fold(u, 0, v, 2, NULL), XF_OK);
    assert_int_equal(xf_aggregator_fold(u, 2, chunk, 3, &err), XF_ERANGE);
    assert_non_null(strstr(err.msg, "site 1: value 3 is"));
    assert_non_null(strstr(err.msg, "outside the range (-2^23, 2^23)"));
    /* The update is spoiled: no more values, and end_update drops it. */
    assert_int_equal(xf_aggregator_fold(u, 5, v + 5, 1, NULL), XF_EINVAL);
    assert_int_equal(xf_aggregator_end_update(u, NULL), XF_EFORMAT);
    assert_int_equal(xf_aggregator_in_flight(agg), 0);
  }
  /* The largest values inside the range are held exactly. */
  submit(agg, 1, 4, v, 6);
  float out[6];
  finish_into(agg, out);
  assert_memory_equal(out, v, sizeof(v));
  xf_aggregator_free(agg);

  /* The range is the fixed point's: robust kinds keep floats and take any
   * finite value. */
  const float big[2] = {XF_AGG_VALUE_LIMIT, -3e38f};
  agg = new_agg(XF_JOB_STRATEGY_MEDIAN, 2, 1);
  submit(agg, 1, 1, big, 2);
  finish_into(agg, out);
  assert_memory_equal(out, big, sizeof(big));
  xf_aggregator_free(agg);
}

/* Weights totalling XF_AGG_WEIGHT_MAX = 2^53 on values at the edge of the
 * range, 2^23 - 0.5, whose fixed-point values are 2^63 - 2^39: sums up to
 * 2^116 - 2^92, which the 128-bit sum holds (the sanitized build would trap
 * a signed overflow), and means that come out exact. */
static void sums_at_the_weight_limit_do_not_overflow(void **state) {
  (void)state;
  const uint64_t max = XF_AGG_WEIGHT_MAX;
  const float edge = nextafterf(XF_AGG_VALUE_LIMIT, 0);
  const float up[3] = {edge, -edge, 0x1p-40f}, down[3] = {-edge, edge, 0};
  float out[3];

  /* One update of the largest weight. */
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 3, 0);
  submit(agg, 1, max, up, 3);
  assert_int_equal(xf_aggregator_total_weight(agg), max);
  finish_into(agg, out);
  assert_memory_equal(out, up, sizeof(up));
  /* The total is full: nothing more can begin. */
  xf_agg_update *u = NULL;
  assert_int_equal(xf_aggregator_begin_update(agg, 2, 1, &u, NULL), XF_EINVAL);
  xf_aggregator_free(agg);

  /* Two halves of the same sign: the sum is at its largest, 2^53 (2^63 - 2^39). */
  agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 3, 0);
  submit(agg, 1, max / 2, up, 3);
  submit(agg, 2, max / 2, up, 3);
  finish_into(agg, out);
  assert_memory_equal(out, up, sizeof(up));
  xf_aggregator_free(agg);

  /* Nearly all the weight on one side: (2^53 - 2) / 2^53 of the edge rounds
   * back to it, and one unit of 2^-40 over 2^53 is 2^-93, still exact. */
  for (int order = 0; order < 2; order++) {
    agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 3, 0);
    if (order == 0) {
      submit(agg, 1, max - 1, up, 3);
      submit(agg, 2, 1, down, 3);
    } else {
      submit(agg, 2, 1, down, 3);
      submit(agg, 1, max - 1, up, 3);
    }
    finish_into(agg, out);
    assert_true(out[0] == edge && out[1] == -edge);
    assert_true(out[2] == (float)((double)(max - 1) / 0x1p53 * 0x1p-40));
    xf_aggregator_free(agg);
  }
  agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 3, 0);
  submit(agg, 1, 1, up, 3);
  submit(agg, 2, max - 1, down, 3);
  finish_into(agg, out);
  assert_true(out[2] == 0x1p-93f);
  xf_aggregator_free(agg);
}

static void missing_values_are_refused_and_leave_no_trace(void **state) {
  (void)state;
  float v[100];
  for (int i = 0; i < 100; i++) v[i] = (float)i;
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 100, 0);
  xf_agg_update *u = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_aggregator_begin_update(agg, 5, 10, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, v, 17, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 18, v + 18, 82, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(u, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "99 of 100"));
  assert_non_null(strstr(err.msg, "value 17 is missing"));
  assert_int_equal(xf_aggregator_committed(agg), 0);
  assert_int_equal(xf_aggregator_in_flight(agg), 0);
  assert_int_equal(xf_aggregator_total_weight(agg), 0);
  /* The site may send again, and a complete update now counts. */
  submit(agg, 5, 10, v, 100);
  float out[100];
  finish_into(agg, out);
  assert_memory_equal(out, v, sizeof(v));
  xf_aggregator_free(agg);
}

static void duplicate_out_of_range_and_non_finite_values_spoil_the_update(void **state) {
  (void)state;
  float v[10] = {0}, bad[2] = {1, NAN}, inf[1] = {INFINITY};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 10, 0);
  xf_agg_update *u = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);

  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, v, 6, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 5, v, 5, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "value 5 arrived twice"));
  assert_int_equal(xf_aggregator_fold(u, 6, v, 4, NULL), XF_EINVAL);
  assert_int_equal(xf_aggregator_end_update(u, NULL), XF_EFORMAT);

  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 9, v, 2, NULL), XF_ERANGE);
  xf_aggregator_abort_update(u);
  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, SIZE_MAX, v, 2, NULL), XF_ERANGE);
  xf_aggregator_abort_update(u);

  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 3, bad, 2, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "value 4 is NaN"));
  xf_aggregator_abort_update(u);
  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, inf, 1, NULL), XF_ERANGE);
  xf_aggregator_abort_update(u);

  /* An empty chunk is no arrival at all; a whole update afterwards counts. */
  assert_int_equal(xf_aggregator_begin_update(agg, 1, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 10, NULL, 0, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(u, 0, v, 10, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_committed(agg), 1);
  xf_aggregator_free(agg);
}

static void one_update_per_site_and_sane_weights(void **state) {
  (void)state;
  float v[4] = {1, 2, 3, 4};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 4, 0);
  xf_agg_update *u = NULL, *w = NULL;
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &w, NULL), XF_EEXISTS);
  assert_int_equal(xf_aggregator_fold(u, 0, v, 4, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &w, NULL), XF_EEXISTS);
  assert_int_equal(xf_aggregator_begin_update(agg, 4, 0, &w, NULL), XF_EINVAL);
  assert_int_equal(xf_aggregator_begin_update(agg, 4, XF_AGG_WEIGHT_MAX, &w, NULL), XF_EINVAL);
  assert_int_equal(xf_aggregator_begin_update(agg, 4, XF_AGG_WEIGHT_MAX - 1, &w, NULL), XF_OK);
  xf_aggregator_abort_update(w);
  xf_aggregator_free(agg);
}

static void finish_needs_a_committed_update_and_none_in_flight(void **state) {
  (void)state;
  float v[2] = {1, 2}, out[2];
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_FEDAVG, 2, 0);
  assert_int_equal(xf_aggregator_finish(agg, out, NULL), XF_EINVAL);
  submit(agg, 1, 1, v, 2);
  xf_agg_update *u = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_aggregator_begin_update(agg, 2, 1, &u, NULL), XF_OK);
  assert_int_equal(xf_aggregator_finish(agg, out, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "in flight"));
  xf_aggregator_abort_update(u);
  assert_int_equal(xf_aggregator_finish(agg, out, NULL), XF_OK);
  xf_aggregator_free(agg);

  xf_job_strategy s = strategy_of(XF_JOB_STRATEGY_MEDIAN);
  assert_int_equal(xf_aggregator_create(&s, 2, 0, &agg, NULL), XF_EINVAL);
  assert_int_equal(xf_aggregator_create(&s, 0, 4, &agg, NULL), XF_EINVAL);
}

/* An aborted update, whether barely started or complete but not ended,
 * leaves the mean bit-identical to a run where it never began. */
static void abort_leaves_the_aggregate_bit_identical(void **state) {
  (void)state;
  enum { N = 513 };
  xf_rng r;
  xf_rng_seed(&r, 11, 0);
  float *a = rand_floats(&r, N, 1), *b = rand_floats(&r, N, 1e3), *c = rand_floats(&r, N, 1e-3);
  float want[N], got[N];
  xf_job_strategy_kind kinds[] = {XF_JOB_STRATEGY_FEDAVG, XF_JOB_STRATEGY_MEDIAN,
                                  XF_JOB_STRATEGY_TRIMMED_MEAN};
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    xf_aggregator *ref = new_agg(kinds[k], N, 4);
    submit(ref, 1, 17, a, N);
    submit(ref, 2, 5, b, N);
    finish_into(ref, want);
    xf_aggregator_free(ref);

    xf_aggregator *agg = new_agg(kinds[k], N, 4);
    xf_agg_update *u = NULL, *w = NULL;
    submit(agg, 1, 17, a, N);
    assert_int_equal(xf_aggregator_begin_update(agg, 3, 1000, &u, NULL), XF_OK);
    assert_int_equal(xf_aggregator_fold(u, 100, c + 100, 200, NULL), XF_OK);
    xf_aggregator_abort_update(u);
    assert_int_equal(xf_aggregator_begin_update(agg, 4, 999, &w, NULL), XF_OK);
    assert_int_equal(xf_aggregator_fold(w, 0, c, N, NULL), XF_OK);
    submit(agg, 2, 5, b, N);
    xf_aggregator_abort_update(w);
    finish_into(agg, got);
    assert_memory_equal(got, want, sizeof(want));
    assert_int_equal(xf_aggregator_total_weight(agg), 22);
    /* The aborted sites may begin again. */
    assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &u, NULL), XF_OK);
    xf_aggregator_free(agg); /* frees the update in flight too */
  }
  free(a), free(b), free(c);
}

/* ---- robust aggregation ------------------------------------------------------------ */

static void median_known_answers_odd_even_and_signed_zero(void **state) {
  (void)state;
  const float r1[4] = {1, -3, 0.0f, 2}, r2[4] = {2, -1, 0.0f, 4}, r3[4] = {3, -2, 0.0f, 1e6f};
  const float r4[4] = {10, 5, -0.0f, 3};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_MEDIAN, 4, 8);
  float out[4];
  submit(agg, 1, 1, r1, 4); /* one site, one vote */
  submit(agg, 2, 1, r2, 4);
  submit(agg, 3, 1, r3, 4);
  finish_into(agg, out);
  assert_true(out[0] == 2 && out[1] == -2 && out[2] == 0 && out[3] == 4);
  submit(agg, 4, 1, r4, 4);
  finish_into(agg, out);
  assert_true(out[0] == 2.5f && out[1] == -1.5f && out[3] == 3.5f);
  assert_true(out[2] == 0 && !signbit(out[2]));
  xf_aggregator_free(agg);
}

static void byzantine_update_does_not_move_the_median(void **state) {
  (void)state;
  enum { N = 200 };
  xf_rng r;
  xf_rng_seed(&r, 3, 0);
  float *honest[4], byz[N], out[N];
  for (int s = 0; s < 4; s++) {
    honest[s] = rand_floats(&r, N, 0.1);
    for (int i = 0; i < N; i++) honest[s][i] += 1.0f;
  }
  for (int i = 0; i < N; i++) byz[i] = (i % 2) ? 1e6f : -1e6f;
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_MEDIAN, N, 5);
  /* A site's weight under a robust kind is its vote, which the caller sets
   * to 1 whatever the site claims. */
  for (int s = 0; s < 4; s++) submit(agg, (uint64_t)s, 1, honest[s], N);
  submit(agg, 99, 1, byz, N);
  finish_into(agg, out);
  for (int i = 0; i < N; i++) {
    float lo = honest[0][i], hi = honest[0][i];
    for (int s = 1; s < 4; s++) lo = fminf(lo, honest[s][i]), hi = fmaxf(hi, honest[s][i]);
    assert_true(out[i] >= lo && out[i] <= hi);
  }
  xf_aggregator_free(agg);
  for (int s = 0; s < 4; s++) free(honest[s]);
}

static float trimmed_of(double trim, const float *vals, size_t k) {
  xf_job_strategy s = strategy_of(XF_JOB_STRATEGY_TRIMMED_MEAN);
  s.trim_fraction = trim;
  xf_aggregator *agg = NULL;
  assert_int_equal(xf_aggregator_create(&s, 1, k, &agg, NULL), XF_OK);
  for (size_t i = 0; i < k; i++) submit(agg, i, 1, &vals[i], 1);
  float out;
  finish_into(agg, &out);
  xf_aggregator_free(agg);
  return out;
}

static void trimmed_mean_known_answers(void **state) {
  (void)state;
  const float five[5] = {4, 1e6f, 2, 1, 3};
  assert_true(trimmed_of(0.2, five, 5) == 3.0f);      /* cut 1 each end: (2+3+4)/3 */
  assert_true(trimmed_of(0.1, five, 5) == (float)((1e6 + 10) / 5)); /* cut 0 */
  const float four[4] = {-1e6f, 8, 2, 1e6f};
  assert_true(trimmed_of(0.25, four, 4) == 5.0f);     /* cut 1: (2+8)/2 */
  assert_true(trimmed_of(0.49, four, 4) == 5.0f);     /* floor(1.96) = 1 */
  assert_true(trimmed_of(0.0, four, 4) == 2.5f);
  float hundred[100];
  for (int i = 0; i < 100; i++) hundred[i] = (float)((99 - i) * (99 - i));
  /* 0.29 * 100 is 28.999... in double; the cut is still 29: the mean of i^2
   * for i = 29..70, (S(70) - S(28)) / 42 with S(n) = n(n+1)(2n+1)/6. */
  assert_true(trimmed_of(0.29, hundred, 100) == (float)((116795.0 - 7714.0) / 42.0));
  xf_job_strategy s = strategy_of(XF_JOB_STRATEGY_TRIMMED_MEAN);
  s.trim_fraction = 0.5;
  xf_aggregator *agg = NULL;
  assert_int_equal(xf_aggregator_create(&s, 1, 4, &agg, NULL), XF_EINVAL);
}

static void robust_results_do_not_depend_on_commit_order(void **state) {
  (void)state;
  enum { N = 300, K = 7 };
  xf_rng r;
  xf_rng_seed(&r, 5, 0);
  float *v[K], want[N], got[N];
  for (int s = 0; s < K; s++) v[s] = rand_floats(&r, N, 1);
  v[2][0] = 0.0f, v[3][0] = -0.0f;
  xf_job_strategy_kind kinds[] = {XF_JOB_STRATEGY_MEDIAN, XF_JOB_STRATEGY_TRIMMED_MEAN};
  for (int k = 0; k < 2; k++) {
    xf_aggregator *agg = new_agg(kinds[k], N, K);
    for (int s = 0; s < K; s++) submit(agg, (uint64_t)s, 1, v[s], N);
    finish_into(agg, want);
    xf_aggregator_free(agg);
    agg = new_agg(kinds[k], N, K);
    for (int s = K - 1; s >= 0; s--) submit(agg, (uint64_t)s, 1, v[s], N);
    finish_into(agg, got);
    assert_memory_equal(got, want, sizeof(want));
    xf_aggregator_free(agg);
  }
  for (int s = 0; s < K; s++) free(v[s]);
}

static void robust_capacity_is_enforced_with_a_clear_error(void **state) {
  (void)state;
  float v[3] = {1, 2, 3};
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_TRIMMED_MEAN, 3, 2);
  xf_agg_update *u = NULL, *w = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  submit(agg, 1, 1, v, 3);
  assert_int_equal(xf_aggregator_begin_update(agg, 2, 1, &u, NULL), XF_OK);
  /* Updates in flight count against the capacity. */
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &w, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "trimmed_mean keeps every update in memory"));
  assert_non_null(strstr(err.msg, "sized for 2"));
  xf_aggregator_abort_update(u);
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &w, NULL), XF_OK);
  assert_int_equal(xf_aggregator_fold(w, 0, v, 3, NULL), XF_OK);
  assert_int_equal(xf_aggregator_end_update(w, NULL), XF_OK);
  assert_int_equal(xf_aggregator_begin_update(agg, 4, 1, &u, NULL), XF_ERANGE);
  assert_int_equal(xf_aggregator_committed(agg), 2);
  xf_aggregator_free(agg);
}

/* ---- robust aggregation with weights (votes) --------------------------------------- */

static xf_aggregator *new_robust(xf_job_strategy_kind kind, double trim, size_t n, size_t cap) {
  xf_job_strategy s = strategy_of(kind);
  s.trim_fraction = trim;
  xf_aggregator *agg = NULL;
  assert_int_equal(xf_aggregator_create(&s, n, cap, &agg, NULL), XF_OK);
  return agg;
}

/* The robust aggregate of one coordinate: vals[i] from site i with weight
 * w[i]. */
static float robust_of(xf_job_strategy_kind kind, double trim, const float *vals,
                       const uint64_t *w, size_t k) {
  xf_aggregator *agg = new_robust(kind, trim, 1, k);
  for (size_t i = 0; i < k; i++) submit(agg, i, w[i], &vals[i], 1);
  float out;
  finish_into(agg, &out);
  xf_aggregator_free(agg);
  return out;
}

static void weighted_median_counts_a_regional_input_by_its_sites(void **state) {
  (void)state;
  /* Four direct sites and one regional aggregate (the last value). */
  const float v[5] = {4, 1, 10, 3, 2};
  /* As one vote the region is one value among five: the median is 3. */
  const uint64_t one_vote[5] = {1, 1, 1, 1, 1};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, one_vote, 5) == 3.0f);
  /* A region of three sites: 1, 2, 3, 4 and 10 three times: the median is 4. */
  const uint64_t three[5] = {1, 1, 3, 1, 1};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, three, 5) == 4.0f);
  /* A region of five sites holds a majority of the nine sites: its value. */
  const uint64_t five[5] = {1, 1, 5, 1, 1};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, five, 5) == 10.0f);

  /* A weight of m counts exactly as m sites with that value, bit for bit. */
  enum { N = 400 };
  xf_rng r;
  xf_rng_seed(&r, 61, 0);
  float *direct[3], *region = rand_floats(&r, N, 1), weighted[N], expanded[N];
  for (int s = 0; s < 3; s++) direct[s] = rand_floats(&r, N, 1);
  for (uint64_t m = 1; m <= 6; m++) {
    xf_aggregator *a = new_agg(XF_JOB_STRATEGY_MEDIAN, N, 4);
    xf_aggregator *b = new_agg(XF_JOB_STRATEGY_MEDIAN, N, 3 + m);
    for (int s = 0; s < 3; s++) {
      submit(a, (uint64_t)s, 1, direct[s], N);
      submit(b, (uint64_t)s, 1, direct[s], N);
    }
    submit(a, 100, m, region, N);
    for (uint64_t j = 0; j < m; j++) submit(b, 100 + j, 1, region, N);
    assert_int_equal(xf_aggregator_total_weight(a), 3 + m);
    finish_into(a, weighted);
    finish_into(b, expanded);
    assert_memory_equal(weighted, expanded, sizeof(weighted));
    xf_aggregator_free(a), xf_aggregator_free(b);
  }
  for (int s = 0; s < 3; s++) free(direct[s]);
  free(region);
}

static void weighted_median_at_exactly_half_takes_the_mean_of_the_straddling_values(void **state) {
  (void)state;
  /* W = 8: the cumulative weight is 3 after 1 and exactly 4 after 2, so the
   * median is the mean of 2 and the next value, 5. */
  const float v[4] = {9, 2, 5, 1};
  const uint64_t w[4] = {2, 1, 2, 3};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, w, 4) == 3.5f);
  /* One more unit on 1 (W = 9, half 4.5): the cumulative 5 after 2 passes it. */
  const uint64_t w1[4] = {2, 1, 2, 4};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, w1, 4) == 2.0f);
  /* One more unit on 9 instead: the cumulative 6 after 5 passes it. */
  const uint64_t w9[4] = {3, 1, 2, 3};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, w9, 4) == 5.0f);
  /* Two more units on 1 (W = 10): exactly half after 1, the mean of 1 and 2. */
  const uint64_t w11[4] = {2, 1, 2, 5};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, v, w11, 4) == 1.5f);
  /* The mean is taken in double and rounded once: two neighbouring floats
   * whose midpoint is a tie rounds to the even one. */
  const float near[2] = {1.0f, 0x1.000002p0f};
  const uint64_t heavy[2] = {7, 7};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, near, heavy, 2) == 1.0f);
  /* The next value is the next in the sorted order, whoever's it is. */
  const float same[3] = {-2, 4, 4};
  const uint64_t ws[3] = {5, 3, 2};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, same, ws, 3) == 1.0f); /* mean(-2, 4) */
  /* Half reached inside a run of equal values: their mean is that value. */
  const uint64_t ws3[3] = {1, 1, 2};
  assert_true(robust_of(XF_JOB_STRATEGY_MEDIAN, 0, same, ws3, 3) == 4.0f); /* mean(4, 4) */
}

/* The total order of the aggregator: by value, -0 before +0. */
static int cmp_float_total(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  if (x < y) return -1;
  if (x > y) return 1;
  return (int)(signbit(y) != 0) - (int)(signbit(x) != 0);
}

/* The unweighted rules as they were before weights counted, as a reference. */
static float classic_median(float *col, size_t k) {
  qsort(col, k, sizeof(float), cmp_float_total);
  if (k % 2) return col[k / 2];
  return (float)(((double)col[k / 2 - 1] + (double)col[k / 2]) / 2.0);
}

static float classic_trimmed_mean(float *col, size_t k, size_t cut) {
  qsort(col, k, sizeof(float), cmp_float_total);
  double s = 0;
  for (size_t i = cut; i < k - cut; i++) s += (double)col[i];
  return (float)(s / (double)(k - 2 * cut));
}

static void unit_weights_give_the_classic_median(void **state) {
  (void)state;
  enum { N = 200, KMAX = 12 };
  xf_rng r;
  xf_rng_seed(&r, 62, 0);
  float out[N], col[KMAX];
  for (size_t k = 1; k <= KMAX; k++) {
    float *v[KMAX];
    for (size_t s = 0; s < k; s++) {
      v[s] = wide_floats(&r, N);
      /* Ties and signed zeros in some coordinates. */
      v[s][0] = s % 2 ? 0.0f : -0.0f;
      v[s][1] = (float)(s % 3);
    }
    for (int kind = 0; kind < 2; kind++) {
      double trim = 0.1 + 0.13 * (double)(k % 3);
      xf_aggregator *agg = new_robust(kind ? XF_JOB_STRATEGY_TRIMMED_MEAN : XF_JOB_STRATEGY_MEDIAN,
                                      trim, N, k);
      /* Committed in a rotated order, with site ids that fall as s rises. */
      for (size_t j = 0; j < k; j++) {
        size_t s = (j + k / 2) % k;
        submit(agg, 1000 - 3 * s, 1, v[s], N);
      }
      finish_into(agg, out);
      size_t cut = (size_t)floor(trim * (double)k + 1e-9);
      if (2 * cut >= k) cut = (k - 1) / 2;
      for (size_t i = 0; i < N; i++) {
        for (size_t s = 0; s < k; s++) col[s] = v[s][i];
        float want = kind ? classic_trimmed_mean(col, k, cut) : classic_median(col, k);
        if (memcmp(&out[i], &want, sizeof(float)) != 0)
          fail_msg("%s of %zu, coordinate %zu: %a, classic %a", kind ? "trimmed" : "median", k,
                   i, (double)out[i], (double)want);
      }
      xf_aggregator_free(agg);
    }
    for (size_t s = 0; s < k; s++) free(v[s]);
  }
}

static void weighted_trimmed_mean_cuts_units_of_weight_from_each_end(void **state) {
  (void)state;
  /* W = 10, trim 0.2: two units cut from each end, here exactly the -100 and
   * the 100: (3 * 1 + 3 * 2) / 6. */
  const float v[4] = {100, 2, -100, 1};
  const uint64_t w[4] = {2, 3, 2, 3};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.2, v, w, 4) == 1.5f);
  /* trim 0: the weighted mean of all, (200 + 6 - 200 + 3) / 10. */
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.0, v, w, 4) == 0.9f);
  /* The cut counts units of weight, not updates: with unit weights 0.2 of
   * four updates cuts nothing. */
  const uint64_t unit[4] = {1, 1, 1, 1};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.2, v, unit, 4) == 0.75f);
  /* The tolerance of floor(trim * W) holds for weights: 0.29 * 100 cuts 29
   * units, here all of the 29 at each end. */
  const float three[3] = {-7, 5, 7};
  const uint64_t w3[3] = {29, 42, 29};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.29, three, w3, 3) == 5.0f);

  /* A weight of m counts as m sites of that value: with values of few
   * significant bits every sum is exact, so the two agree bit for bit. */
  enum { N = 300 };
  xf_rng r;
  xf_rng_seed(&r, 63, 0);
  float *rows[4];
  const uint64_t ws[4] = {1, 4, 2, 3};
  for (int s = 0; s < 4; s++) {
    rows[s] = malloc(N * sizeof(float));
    for (size_t i = 0; i < N; i++) rows[s][i] = (float)((int)xf_rng_below(&r, 64) - 32) / 8.0f;
  }
  const double trims[] = {0.0, 0.1, 0.15, 0.2, 0.3, 0.49};
  for (size_t t = 0; t < sizeof(trims) / sizeof(trims[0]); t++) {
    xf_aggregator *a = new_robust(XF_JOB_STRATEGY_TRIMMED_MEAN, trims[t], N, 4);
    xf_aggregator *b = new_robust(XF_JOB_STRATEGY_TRIMMED_MEAN, trims[t], N, 10);
    uint64_t site = 0;
    for (int s = 0; s < 4; s++) {
      submit(a, (uint64_t)s * 10, ws[s], rows[s], N);
      for (uint64_t j = 0; j < ws[s]; j++) submit(b, site++, 1, rows[s], N);
    }
    float got[N], want[N];
    finish_into(a, got);
    finish_into(b, want);
    assert_memory_equal(got, want, sizeof(got));
    xf_aggregator_free(a), xf_aggregator_free(b);
  }
  for (int s = 0; s < 4; s++) free(rows[s]);
}

static void trimmed_cut_inside_a_heavy_update_keeps_its_remaining_units(void **state) {
  (void)state;
  /* W = 8, trim 0.25: two units cut from each end. At the bottom 0 and 2
   * go whole; at the top two of the five units of 10 go and three stay:
   * (4 + 3 * 10) / 4. */
  const float v[4] = {10, 0, 4, 2};
  const uint64_t w[4] = {5, 1, 1, 1};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.25, v, w, 4) == 8.5f);
  /* Mirrored at the bottom: (-4 - 30) / 4. */
  const float m[4] = {-10, 0, -4, -2};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.25, m, w, 4) == -8.5f);
  /* Both cuts inside one update: W = 13, trim 0.3 cuts 3 units from each
   * end: the 1, the 2 and one unit of 5 at the bottom, both units of 100 and
   * one of 5 at the top. 7 units of 5 remain. */
  const float c[4] = {1, 2, 5, 100};
  const uint64_t wc[4] = {1, 1, 9, 2};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.3, c, wc, 4) == 5.0f);
  /* Each cut inside an outlier: W = 10, cut 2, and each outlier keeps one of
   * its three units: (-6 + 2 * 3 + 2 * 7 + 1000) / 6. */
  const float d[4] = {1000, 3, -6, 7};
  const uint64_t wd[4] = {3, 2, 3, 2};
  assert_true(robust_of(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.2, d, wd, 4) == 169.0f);
}

static void robust_result_does_not_depend_on_commit_order_with_weights(void **state) {
  (void)state;
  enum { N = 256, K = 6 };
  xf_rng r;
  xf_rng_seed(&r, 64, 0);
  float *v[K], want[N], got[N];
  const uint64_t w[K] = {3, 1, 5, 2, 1, 4}; /* W = 16 */
  /* Values over many binades, so that the double sum of the trimmed mean
   * rounds and would tell orders of its terms apart. */
  for (int s = 0; s < K; s++) v[s] = wide_floats(&r, N);
  /* Ties across sites of different weights, so that the tie order (by site
   * id) decides which update a cut straddles and the order of the sum. */
  for (size_t i = 0; i < N; i += 2) {
    v[1][i] = v[0][i];
    v[4][i] = v[2][i];
    v[5][i] = v[0][i];
  }
  v[2][1] = 0.0f, v[3][1] = -0.0f, v[5][1] = 0.0f;
  /* Coordinate 3: the cumulative weight is exactly W / 2 = 8 after site 0's
   * value (sites 1 and 5 below it). */
  v[1][3] = -3, v[5][3] = -2, v[0][3] = -1, v[2][3] = 1, v[3][3] = 2, v[4][3] = 3;
  /* Coordinate 5, for trim 0.3 (cut 4 units): sites 0 and 4 tie at a = -2^-50
   * and the top cut falls inside the pair, keeping two of its four units.
   * Site 0 first keeps both: s = -(3 + 2^-21) - 5 + 2a exactly, and s / 8
   * is just below the float midpoint -(1 + 2^-24), giving -(1 + 2^-23).
   * Site 4 first keeps one each: s + a rounds back to s, a tie to even,
   * twice, and s / 8 on the midpoint rounds to -1. */
  v[5][5] = -1e6f, v[1][5] = -0x1.800004p1f, v[2][5] = -1, v[0][5] = -0x1p-50f,
  v[4][5] = -0x1p-50f, v[3][5] = 1e6f;
  const double trims[] = {0.1, 0.2, 0.3};
  for (int kind = 0; kind < 4; kind++) {
    bool median = kind == 0;
    double trim = median ? 0 : trims[kind - 1];
    int order[K] = {0, 1, 2, 3, 4, 5};
    int perms = 0;
    do {
      xf_aggregator *agg = new_robust(median ? XF_JOB_STRATEGY_MEDIAN
                                             : XF_JOB_STRATEGY_TRIMMED_MEAN,
                                      trim, N, K);
      for (int j = 0; j < K; j++) submit(agg, (uint64_t)order[j] + 40, w[order[j]], v[order[j]], N);
      finish_into(agg, perms == 0 ? want : got);
      if (perms > 0) assert_memory_equal(got, want, sizeof(want));
      xf_aggregator_free(agg);
      perms++;
    } while (next_permutation(order, K));
    assert_int_equal(perms, 720);
    if (median) assert_true(want[3] == 0.0f); /* mean(-1, 1) */
    if (trim == 0.3) assert_true(want[5] == -0x1.000002p0f);
  }
  for (int s = 0; s < K; s++) free(v[s]);
}

static void robust_weights_are_bounded_and_exact_at_the_limit(void **state) {
  (void)state;
  /* A robust round's rank of an update fits 32 bits: so does its capacity. */
  xf_job_strategy st = strategy_of(XF_JOB_STRATEGY_MEDIAN);
  xf_aggregator *none = NULL;
  if (SIZE_MAX > UINT32_MAX)
    assert_int_equal(xf_aggregator_create(&st, 2, (size_t)UINT32_MAX + 1, &none, NULL), XF_EINVAL);
  assert_null(none);
  const uint64_t half = XF_AGG_WEIGHT_MAX / 2;
  const float a[2] = {1, -4}, b[2] = {3, 8}, c[2] = {100, 100};
  float out[2];
  xf_aggregator *agg = new_agg(XF_JOB_STRATEGY_MEDIAN, 2, 3);
  submit(agg, 1, half, a, 2);
  submit(agg, 2, half, b, 2);
  /* The total is 2^53: nothing more can begin, as for the mean. */
  xf_agg_update *u = NULL;
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 1, &u, NULL), XF_EINVAL);
  assert_int_equal(xf_aggregator_begin_update(agg, 3, 0, &u, NULL), XF_EINVAL);
  /* Exactly half each: the mean of the two. */
  finish_into(agg, out);
  assert_true(out[0] == 2.0f && out[1] == 2.0f);
  xf_aggregator_free(agg);

  /* One unit short of 2^53 in all: a's 2^52 is more than half, so its values
   * are the median, on either side of the others. */
  agg = new_agg(XF_JOB_STRATEGY_MEDIAN, 2, 3);
  submit(agg, 1, half, a, 2);
  submit(agg, 2, half - 2, b, 2);
  submit(agg, 3, 1, c, 2);
  finish_into(agg, out);
  assert_true(out[0] == 1.0f && out[1] == -4.0f);
  xf_aggregator_free(agg);

  /* A trimmed mean of W = 2^53 - 1 cuts k = floor(0.49 W) units from each
   * end: both cuts fall inside the two updates, which keep 2^52 - k and
   * 2^52 - k - 1 units. */
  const uint64_t w = XF_AGG_WEIGHT_MAX - 1;
  const uint64_t k = (uint64_t)floor(0.49 * (double)w + 1e-9);
  const double ka = (double)(half - k), kb = (double)(half - k - 1), kept = (double)(w - 2 * k);
  agg = new_robust(XF_JOB_STRATEGY_TRIMMED_MEAN, 0.49, 2, 3);
  submit(agg, 1, half, a, 2);
  submit(agg, 2, half - 1, b, 2);
  finish_into(agg, out);
  assert_true(kept == ka + kb);
  assert_true(out[0] == (float)((ka * 1 + kb * 3) / kept));
  assert_true(out[1] == (float)((ka * -4 + kb * 8) / kept));
  /* Both a hair below 2 in double (2^-47 and 2^-45), which round to 2. */
  assert_true(out[0] == 2.0f && out[1] == 2.0f);
  xf_aggregator_free(agg);
}

/* Two levels as a regional topology runs them: each region takes the median
 * of its sites with one vote each, and the global aggregator takes the
 * regional medians weighted by their sites (the regional total weight) beside
 * the direct sites' updates. Returns the global median of one coordinate.
 * vals holds the sites' values region by region; region_size[g] sites each,
 * size 1 for a direct site. */
static float two_level_median(const float *vals, const size_t *region_size, size_t regions) {
  xf_aggregator *global = new_agg(XF_JOB_STRATEGY_MEDIAN, 1, regions);
  size_t at = 0;
  for (size_t g = 0; g < regions; g++) {
    xf_aggregator *regional = new_agg(XF_JOB_STRATEGY_MEDIAN, 1, region_size[g]);
    for (size_t s = 0; s < region_size[g]; s++) submit(regional, s, 1, &vals[at + s], 1);
    at += region_size[g];
    float m;
    finish_into(regional, &m);
    submit(global, g, xf_aggregator_total_weight(regional), &m, 1);
    xf_aggregator_free(regional);
  }
  float out;
  finish_into(global, &out);
  xf_aggregator_free(global);
  return out;
}

/* The guarantee of docs/aggregation.md: the result stays within the honest
 * sites' values while the regions in which at least half the sites are
 * Byzantine hold fewer than half of all the sites; and it is tight: a
 * quarter of the sites, half of each of the regions holding half the sites,
 * moves it anywhere. */
static void two_level_median_holds_while_captured_regions_hold_under_half_the_sites(void **state) {
  (void)state;
  enum { MAXS = 40 };
  xf_rng r;
  xf_rng_seed(&r, 65, 0);
  for (int trial = 0; trial < 300; trial++) {
    size_t regions = 1 + (size_t)xf_rng_below(&r, 7), size[8], total = 0;
    for (size_t g = 0; g < regions; g++) {
      size[g] = 1 + (size_t)xf_rng_below(&r, 6);
      total += size[g];
    }
    float vals[MAXS];
    bool byz[MAXS];
    size_t captured = 0, at = 0;
    float lo = INFINITY, hi = -INFINITY;
    for (size_t g = 0; g < regions; g++) {
      size_t bad = (size_t)xf_rng_below(&r, size[g] + 1);
      if (2 * bad >= size[g]) captured += size[g];
      for (size_t s = 0; s < size[g]; s++) {
        byz[at + s] = s < bad;
        vals[at + s] = byz[at + s] ? (xf_rng_below(&r, 2) ? 1e30f : -1e30f)
                                   : (float)xf_rng_uniform(&r);
        if (!byz[at + s]) lo = fminf(lo, vals[at + s]), hi = fmaxf(hi, vals[at + s]);
      }
      at += size[g];
    }
    if (2 * captured >= total) continue;
    float m = two_level_median(vals, size, regions);
    if (!(m >= lo && m <= hi))
      fail_msg("trial %d: %g outside the honest [%g, %g]", trial, (double)m, (double)lo,
               (double)hi);
  }
  /* Four regions of two sites: one Byzantine site in each of two regions,
   * a quarter of the sites, captures half the weight. */
  const float vals[8] = {0.1f, 1e30f, 0.2f, 1e30f, 0.3f, 0.4f, 0.5f, 0.6f};
  const size_t size[4] = {2, 2, 2, 2};
  assert_true(two_level_median(vals, size, 4) > 1e29f);
  /* The same eight sites under one flat median stay in range. */
  xf_aggregator *flat = new_agg(XF_JOB_STRATEGY_MEDIAN, 1, 8);
  for (size_t s = 0; s < 8; s++) submit(flat, s, 1, &vals[s], 1);
  float m;
  finish_into(flat, &m);
  assert_true(m >= 0.1f && m <= 0.6f);
  xf_aggregator_free(flat);
}

/* ---- server optimizers against a double-precision reference -------------------------- */

typedef struct reference {
  xf_job_strategy s;
  double *w, *m, *v;
  size_t n;
  int yogi_up, yogi_down; /* how often each branch of Yogi's sign ran */
} reference;

static void reference_init(reference *ref, const xf_job_strategy *s, const float *w0, size_t n) {
  ref->s = *s;
  ref->n = n;
  ref->w = malloc(n * sizeof(double));
  ref->m = calloc(n, sizeof(double));
  ref->v = malloc(n * sizeof(double));
  ref->yogi_up = ref->yogi_down = 0;
  bool adaptive = s->kind == XF_JOB_STRATEGY_FEDADAM || s->kind == XF_JOB_STRATEGY_FEDYOGI ||
                  s->kind == XF_JOB_STRATEGY_FEDADAGRAD;
  for (size_t i = 0; i < n; i++) {
    ref->w[i] = w0[i];
    ref->v[i] = adaptive ? s->tau * s->tau : 0;
  }
}

static void reference_step(reference *ref, const float *delta) {
  const xf_job_strategy *s = &ref->s;
  for (size_t i = 0; i < ref->n; i++) {
    double d = delta[i];
    switch (s->kind) {
    case XF_JOB_STRATEGY_FEDAVGM:
      ref->v[i] = s->server_momentum * ref->v[i] + d;
      ref->w[i] += s->server_lr * ref->v[i];
      break;
    case XF_JOB_STRATEGY_FEDADAM:
    case XF_JOB_STRATEGY_FEDYOGI:
    case XF_JOB_STRATEGY_FEDADAGRAD:
      ref->m[i] = s->beta1 * ref->m[i] + (1 - s->beta1) * d;
      if (s->kind == XF_JOB_STRATEGY_FEDADAGRAD) {
        ref->v[i] += d * d;
      } else if (s->kind == XF_JOB_STRATEGY_FEDADAM) {
        ref->v[i] = s->beta2 * ref->v[i] + (1 - s->beta2) * d * d;
      } else if (ref->v[i] > d * d) {
        ref->v[i] -= (1 - s->beta2) * d * d;
        ref->yogi_down++;
      } else if (ref->v[i] < d * d) {
        ref->v[i] += (1 - s->beta2) * d * d;
        ref->yogi_up++;
      }
      ref->w[i] += s->server_lr * ref->m[i] / (sqrt(ref->v[i]) + s->tau);
      break;
    default:
      ref->w[i] += s->server_lr * d;
      break;
    }
  }
}

static void reference_free(reference *ref) { free(ref->w), free(ref->m), free(ref->v); }

/* Round r's delta: alternating scales, so that Yogi's second moment both
 * grows (large deltas) and shrinks (small ones). */
static float *round_delta(xf_rng *r, size_t n, int round) {
  return rand_floats(r, n, round % 2 ? 0.002 : 0.1);
}

static void server_optimizers_match_a_double_reference(void **state) {
  (void)state;
  enum { N = 257, ROUNDS = 8 };
  xf_job_strategy_kind kinds[] = {
      XF_JOB_STRATEGY_FEDAVG,  XF_JOB_STRATEGY_FEDAVGM, XF_JOB_STRATEGY_FEDPROX,
      XF_JOB_STRATEGY_FEDADAM, XF_JOB_STRATEGY_FEDYOGI, XF_JOB_STRATEGY_FEDADAGRAD,
      XF_JOB_STRATEGY_MEDIAN,  XF_JOB_STRATEGY_TRIMMED_MEAN};
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    xf_job_strategy s = strategy_of(kinds[k]);
    if (kinds[k] == XF_JOB_STRATEGY_FEDAVG) s.server_lr = 0.7;
    xf_rng r;
    xf_rng_seed(&r, 21, k);
    float *w = rand_floats(&r, N, 1);
    reference ref;
    reference_init(&ref, &s, w, N);
    xf_server_opt *opt = NULL;
    assert_int_equal(xf_server_opt_create(&s, N, &opt, NULL), XF_OK);
    for (int round = 0; round < ROUNDS; round++) {
      float *d = round_delta(&r, N, round);
      xf_server_opt_step(opt, w, d);
      reference_step(&ref, d);
      for (size_t i = 0; i < N; i++) {
        double tol = 1e-5 * (1 + fabs(ref.w[i]));
        if (fabs(w[i] - ref.w[i]) > tol)
          fail_msg("%s round %d w[%zu]: %.9g vs reference %.9g",
                   xf_job_strategy_kind_name(kinds[k]), round, i, (double)w[i], ref.w[i]);
      }
      free(d);
    }
    assert_int_equal(xf_server_opt_steps(opt), ROUNDS);
    if (kinds[k] == XF_JOB_STRATEGY_FEDYOGI) assert_true(ref.yogi_up > 0 && ref.yogi_down > 0);
    xf_server_opt_free(opt);
    reference_free(&ref);
    free(w);
  }
}

static void fedavgm_without_momentum_is_fedavg_bit_for_bit(void **state) {
  (void)state;
  enum { N = 100 };
  xf_rng r;
  xf_rng_seed(&r, 8, 0);
  float *w1 = rand_floats(&r, N, 1);
  float *w2 = malloc(N * sizeof(float));
  memcpy(w2, w1, N * sizeof(float));
  xf_job_strategy avg = strategy_of(XF_JOB_STRATEGY_FEDAVG), avgm =
                                                                 strategy_of(XF_JOB_STRATEGY_FEDAVGM);
  avg.server_lr = avgm.server_lr = 0.9;
  avgm.server_momentum = 0.0;
  xf_server_opt *a = NULL, *b = NULL;
  assert_int_equal(xf_server_opt_create(&avg, N, &a, NULL), XF_OK);
  assert_int_equal(xf_server_opt_create(&avgm, N, &b, NULL), XF_OK);
  for (int round = 0; round < 6; round++) {
    float *d = round_delta(&r, N, round);
    xf_server_opt_step(a, w1, d);
    xf_server_opt_step(b, w2, d);
    free(d);
  }
  assert_memory_equal(w1, w2, N * sizeof(float));
  xf_server_opt_free(a), xf_server_opt_free(b);
  free(w1), free(w2);
}

static void save_and_load_mid_run_continues_bit_for_bit(void **state) {
  (void)state;
  enum { N = 130, ROUNDS = 6, CUT = 3 };
  xf_job_strategy_kind kinds[] = {
      XF_JOB_STRATEGY_FEDAVG,  XF_JOB_STRATEGY_FEDAVGM, XF_JOB_STRATEGY_FEDADAM,
      XF_JOB_STRATEGY_FEDYOGI, XF_JOB_STRATEGY_FEDADAGRAD, XF_JOB_STRATEGY_MEDIAN};
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    xf_job_strategy s = strategy_of(kinds[k]);
    xf_rng r;
    xf_rng_seed(&r, 33, k);
    float *w_once = rand_floats(&r, N, 1), *w_twice = malloc(N * sizeof(float));
    memcpy(w_twice, w_once, N * sizeof(float));
    float *d[ROUNDS];
    for (int i = 0; i < ROUNDS; i++) d[i] = round_delta(&r, N, i);

    xf_server_opt *once = NULL, *first = NULL, *resumed = NULL;
    assert_int_equal(xf_server_opt_create(&s, N, &once, NULL), XF_OK);
    for (int i = 0; i < ROUNDS; i++) xf_server_opt_step(once, w_once, d[i]);

    assert_int_equal(xf_server_opt_create(&s, N, &first, NULL), XF_OK);
    for (int i = 0; i < CUT; i++) xf_server_opt_step(first, w_twice, d[i]);
    uint8_t *saved = NULL;
    size_t len = 0;
    assert_int_equal(xf_server_opt_save(first, &saved, &len), XF_OK);
    xf_server_opt_free(first);
    assert_int_equal(xf_server_opt_create(&s, N, &resumed, NULL), XF_OK);
    assert_int_equal(xf_server_opt_load(resumed, saved, len, NULL), XF_OK);
    assert_int_equal(xf_server_opt_steps(resumed), CUT);
    for (int i = CUT; i < ROUNDS; i++) xf_server_opt_step(resumed, w_twice, d[i]);

    assert_memory_equal(w_once, w_twice, N * sizeof(float));
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    assert_int_equal(xf_server_opt_save(once, &a, &la), XF_OK);
    assert_int_equal(xf_server_opt_save(resumed, &b, &lb), XF_OK);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    xf_free(a), xf_free(b), xf_free(saved);
    xf_server_opt_free(once), xf_server_opt_free(resumed);
    for (int i = 0; i < ROUNDS; i++) free(d[i]);
    free(w_once), free(w_twice);
  }
}

/* Re-seals a state after an edit, as a writer with a bug would. */
static void reseal(uint8_t *buf, size_t len) {
  xf_digest dg;
  xf_digest_buf(buf, len - XF_DIGEST_BYTES, &dg);
  memcpy(buf + len - XF_DIGEST_BYTES, dg.bytes, XF_DIGEST_BYTES);
}

static void load_refuses_damaged_or_foreign_state_and_changes_nothing(void **state) {
  (void)state;
  enum { N = 40 };
  xf_job_strategy s = strategy_of(XF_JOB_STRATEGY_FEDADAM);
  xf_rng r;
  xf_rng_seed(&r, 44, 0);
  float *w = rand_floats(&r, N, 1), *d = rand_floats(&r, N, 0.1);
  xf_server_opt *opt = NULL, *target = NULL;
  assert_int_equal(xf_server_opt_create(&s, N, &opt, NULL), XF_OK);
  xf_server_opt_step(opt, w, d);
  uint8_t *good = NULL, *before = NULL, *after = NULL;
  size_t len = 0, lbefore = 0, lafter = 0;
  assert_int_equal(xf_server_opt_save(opt, &good, &len), XF_OK);
  assert_int_equal(len, 80 + 2 * N * 4 + XF_DIGEST_BYTES);

  assert_int_equal(xf_server_opt_create(&s, N, &target, NULL), XF_OK);
  assert_int_equal(xf_server_opt_save(target, &before, &lbefore), XF_OK);
  uint8_t *bad = malloc(len + 1);
  xf_errctx err;

  /* Every truncation. */
  for (size_t cut = 0; cut < len; cut++)
    assert_int_equal(xf_server_opt_load(target, good, cut, NULL), XF_ETRUNCATED);
  /* A trailing byte. */
  memcpy(bad, good, len);
  bad[len] = 0;
  assert_int_equal(xf_server_opt_load(target, bad, len + 1, NULL), XF_EFORMAT);
  /* Any flipped payload or digest byte. */
  for (size_t at = 80; at < len; at += 7) {
    memcpy(bad, good, len);
    bad[at] ^= 0x10;
    assert_int_equal(xf_server_opt_load(target, bad, len, NULL), XF_EINTEGRITY);
  }
  /* Not our magic. */
  memcpy(bad, good, len);
  bad[0] = 'Y';
  assert_int_equal(xf_server_opt_load(target, bad, len, NULL), XF_EFORMAT);
  /* A negative second moment, sealed with a valid digest. */
  memcpy(bad, good, len);
  bad[80 + N * 4] |= 0x80;
  reseal(bad, len);
  xf_errctx_clear(&err);
  assert_int_equal(xf_server_opt_load(target, bad, len, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "second moment[0]"));
  /* Another server_lr. */
  xf_job_strategy other = s;
  other.server_lr = 0.02;
  xf_server_opt *foreign = NULL;
  assert_int_equal(xf_server_opt_create(&other, N, &foreign, NULL), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_server_opt_load(foreign, good, len, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "server_lr"));
  xf_server_opt_free(foreign);
  /* Another kind, another size. */
  other = strategy_of(XF_JOB_STRATEGY_FEDYOGI);
  other.server_lr = s.server_lr;
  assert_int_equal(xf_server_opt_create(&other, N, &foreign, NULL), XF_OK);
  assert_int_equal(xf_server_opt_load(foreign, good, len, NULL), XF_EFORMAT);
  xf_server_opt_free(foreign);
  assert_int_equal(xf_server_opt_create(&s, N + 1, &foreign, NULL), XF_OK);
  assert_int_equal(xf_server_opt_load(foreign, good, len, NULL), XF_EFORMAT);
  xf_server_opt_free(foreign);

  /* None of the refusals touched the target. */
  assert_int_equal(xf_server_opt_save(target, &after, &lafter), XF_OK);
  assert_int_equal(lbefore, lafter);
  assert_memory_equal(before, after, lbefore);
  assert_int_equal(xf_server_opt_load(target, good, len, NULL), XF_OK);
  assert_int_equal(xf_server_opt_steps(target), 1);

  free(bad), free(w), free(d);
  xf_free(good), xf_free(before), xf_free(after);
  xf_server_opt_free(opt), xf_server_opt_free(target);
}

static void server_opt_refuses_bad_hyperparameters(void **state) {
  (void)state;
  xf_server_opt *opt = NULL;
  xf_job_strategy s = strategy_of(XF_JOB_STRATEGY_FEDYOGI);
  s.tau = 0;
  assert_int_equal(xf_server_opt_create(&s, 4, &opt, NULL), XF_EINVAL);
  s = strategy_of(XF_JOB_STRATEGY_FEDAVGM);
  s.server_momentum = 1.0;
  assert_int_equal(xf_server_opt_create(&s, 4, &opt, NULL), XF_EINVAL);
  s = strategy_of(XF_JOB_STRATEGY_FEDAVG);
  s.server_lr = 0;
  assert_int_equal(xf_server_opt_create(&s, 4, &opt, NULL), XF_EINVAL);
  s = strategy_of(XF_JOB_STRATEGY_FEDAVG);
  assert_int_equal(xf_server_opt_create(&s, 0, &opt, NULL), XF_EINVAL);
}

/* ---- allocation failures -------------------------------------------------------------- */

/* One round and one optimizer step through every allocating call. */
static xf_err one_round(xf_job_strategy_kind kind, const float *a, const float *b, size_t n,
                        float *w) {
  xf_job_strategy s = strategy_of(kind);
  xf_aggregator *agg = NULL;
  xf_agg_update *u = NULL;
  xf_server_opt *opt = NULL, *back = NULL;
  uint8_t *saved = NULL;
  size_t len = 0;
  float *mean = malloc(n * sizeof(float));
  xf_err rc = xf_aggregator_create(&s, n, 3, &agg, NULL);
  if (rc == XF_OK) rc = xf_aggregator_begin_update(agg, 1, 2, &u, NULL);
  if (rc == XF_OK) rc = xf_aggregator_fold(u, 0, a, n / 2, NULL);
  if (rc == XF_OK) rc = xf_aggregator_fold(u, n / 2, a + n / 2, n - n / 2, NULL);
  if (rc == XF_OK) rc = xf_aggregator_end_update(u, NULL);
  if (rc == XF_OK) rc = xf_aggregator_begin_update(agg, 2, 1, &u, NULL);
  if (rc == XF_OK) xf_aggregator_abort_update(u);
  if (rc == XF_OK) rc = xf_aggregator_begin_update(agg, 3, 5, &u, NULL);
  if (rc == XF_OK) rc = xf_aggregator_fold(u, 0, b, n, NULL);
  /* Left in flight on purpose when the next call fails: free must reclaim it. */
  if (rc == XF_OK) rc = xf_server_opt_create(&s, n, &opt, NULL);
  if (rc == XF_OK) rc = xf_aggregator_end_update(u, NULL);
  if (rc == XF_OK) rc = xf_aggregator_finish(agg, mean, NULL);
  if (rc == XF_OK) xf_server_opt_step(opt, w, mean);
  if (rc == XF_OK) rc = xf_server_opt_save(opt, &saved, &len);
  if (rc == XF_OK) rc = xf_server_opt_create(&s, n, &back, NULL);
  if (rc == XF_OK) rc = xf_server_opt_load(back, saved, len, NULL);
  xf_free(saved);
  xf_server_opt_free(back);
  xf_server_opt_free(opt);
  xf_aggregator_free(agg);
  free(mean);
  return rc;
}

static void allocation_failures_are_reported_not_crashed(void **state) {
  (void)state;
  enum { N = 77 };
  xf_rng r;
  xf_rng_seed(&r, 9, 0);
  float *a = rand_floats(&r, N, 1), *b = rand_floats(&r, N, 1);
  xf_job_strategy_kind kinds[] = {XF_JOB_STRATEGY_FEDADAM, XF_JOB_STRATEGY_MEDIAN};
  for (int k = 0; k < 2; k++) {
    float want[N], got[N];
    memset(want, 0, sizeof(want));
    assert_int_equal(one_round(kinds[k], a, b, N, want), XF_OK);
    bool succeeded = false;
    for (long n = 0; n < 200 && !succeeded; n++) {
      memset(got, 0, sizeof(got));
      xf_alloc_fail_after(n);
      xf_err rc = one_round(kinds[k], a, b, N, got);
      xf_alloc_fail_reset();
      if (rc == XF_OK) succeeded = true;
      else assert_int_equal(rc, XF_ENOMEM);
    }
    assert_true(succeeded);
    assert_memory_equal(got, want, sizeof(want));
  }
  free(a), free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(fedavg_is_the_weighted_mean_by_hand),
      cmocka_unit_test(chunk_splits_and_interleaving_do_not_change_the_mean),
      cmocka_unit_test(mean_is_bit_identical_in_every_commit_order),
      cmocka_unit_test(mean_agrees_with_a_long_double_reference),
      cmocka_unit_test(small_values_round_to_the_nearest_fixed_point_unit),
      cmocka_unit_test(values_beyond_the_fixed_point_range_are_refused),
      cmocka_unit_test(sums_at_the_weight_limit_do_not_overflow),
      cmocka_unit_test(missing_values_are_refused_and_leave_no_trace),
      cmocka_unit_test(duplicate_out_of_range_and_non_finite_values_spoil_the_update),
      cmocka_unit_test(one_update_per_site_and_sane_weights),
      cmocka_unit_test(finish_needs_a_committed_update_and_none_in_flight),
      cmocka_unit_test(abort_leaves_the_aggregate_bit_identical),
      cmocka_unit_test(median_known_answers_odd_even_and_signed_zero),
      cmocka_unit_test(byzantine_update_does_not_move_the_median),
      cmocka_unit_test(trimmed_mean_known_answers),
      cmocka_unit_test(robust_results_do_not_depend_on_commit_order),
      cmocka_unit_test(robust_capacity_is_enforced_with_a_clear_error),
      cmocka_unit_test(weighted_median_counts_a_regional_input_by_its_sites),
      cmocka_unit_test(weighted_median_at_exactly_half_takes_the_mean_of_the_straddling_values),
      cmocka_unit_test(unit_weights_give_the_classic_median),
      cmocka_unit_test(weighted_trimmed_mean_cuts_units_of_weight_from_each_end),
      cmocka_unit_test(trimmed_cut_inside_a_heavy_update_keeps_its_remaining_units),
      cmocka_unit_test(robust_result_does_not_depend_on_commit_order_with_weights),
      cmocka_unit_test(robust_weights_are_bounded_and_exact_at_the_limit),
      cmocka_unit_test(two_level_median_holds_while_captured_regions_hold_under_half_the_sites),
      cmocka_unit_test(server_optimizers_match_a_double_reference),
      cmocka_unit_test(fedavgm_without_momentum_is_fedavg_bit_for_bit),
      cmocka_unit_test(save_and_load_mid_run_continues_bit_for_bit),
      cmocka_unit_test(load_refuses_damaged_or_foreign_state_and_changes_nothing),
      cmocka_unit_test(server_opt_refuses_bad_hyperparameters),
      cmocka_unit_test(allocation_failures_are_reported_not_crashed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
