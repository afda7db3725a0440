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
  submit(agg, 1, 100, r1, 4);
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
  for (int s = 0; s < 4; s++) submit(agg, (uint64_t)s, 1, honest[s], N);
  submit(agg, 99, 1000000, byz, N);
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
      cmocka_unit_test(server_optimizers_match_a_double_reference),
      cmocka_unit_test(fedavgm_without_momentum_is_fedavg_bit_for_bit),
      cmocka_unit_test(save_and_load_mid_run_continues_bit_for_bit),
      cmocka_unit_test(load_refuses_damaged_or_foreign_state_and_changes_nothing),
      cmocka_unit_test(server_opt_refuses_bad_hyperparameters),
      cmocka_unit_test(allocation_failures_are_reported_not_crashed),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
