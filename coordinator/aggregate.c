/* SPDX-License-Identifier: Apache-2.0 */
/* The streaming aggregator of a round: staging of updates in flight, exact
 * once-only arrival checks, the exact fixed-point weighted sum, and the robust
 * coordinate-wise median and trimmed mean, weighted by the votes (sites) each
 * input stands for. */
#include "coordinator/aggregate.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* The exact sum of the mean-based kinds, one per parameter: a signed 128-bit
 * integer in units of 2^-XF_AGG_FIXED_BITS. GCC and Clang provide __int128 on
 * every 64-bit target xfed builds for; it is an extension to C11, hence the
 * __extension__ and the one typedef that every use goes through. 16 bytes,
 * 16-byte aligned, which malloc guarantees on those targets. Bounds: a fixed
 * value is below 2^63 in magnitude (|v| < 2^23 = XF_AGG_VALUE_LIMIT times
 * 2^40) and the round's weights total at most XF_AGG_WEIGHT_MAX = 2^53, so
 * |sum| < 2^116, far from the 2^127 where the integer would overflow, and no
 * check is needed per addition. */
__extension__ typedef __int128 xf__fixed_sum;

/* The fixed-point rounding below relies on double arithmetic being done in
 * double (SSE2 on x86-64, every AArch64), not in x87 extended precision. */
#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "coordinator/aggregate.c needs FLT_EVAL_METHOD == 0"
#endif

_Static_assert(XF_AGG_FIXED_BITS == 40 &&
                   (long long)XF_AGG_VALUE_LIMIT == 1LL << (63 - XF_AGG_FIXED_BITS),
               "xf__to_fixed, finish and the bounds in aggregate.h and "
               "docs/aggregation.md are written for S = 40");

/* An update in flight. `values` is the staging copy (mean-based kinds) or the
 * row kept until finish (robust kinds); `seen` has one bit per element. */
struct xf_agg_update {
  xf_aggregator *agg;
  xf_agg_update *prev, *next; /* the aggregator's list of updates in flight */
  uint64_t site_id;
  uint64_t weight;
  float *values;
  uint64_t *seen;
  size_t n_seen;
  bool spoiled;
};

/* A committed update of a robust kind, kept until finish. */
typedef struct xf__row {
  float *values;
  uint64_t site_id;
  uint64_t weight; /* votes: the sites the update stands for */
} xf__row;

/* Robust kinds sort (value, rank) pairs packed in 64 bits, the rank in the
 * low 32, so a round holds fewer than 2^32 updates; no round comes near. */
#define XF__ROBUST_CAPACITY_MAX UINT32_MAX

struct xf_aggregator {
  xf_job_strategy strategy;
  bool robust;
  size_t n_params;
  size_t capacity;        /* robust: rows held at most, committed + in flight */
  xf__fixed_sum *sum;     /* mean-based: exact sum of weight * fixed(value) */
  xf__row *rows;          /* robust: committed rows sorted by site id, capacity slots */
  size_t n_committed;
  uint64_t total_weight;  /* committed */
  uint64_t pending_weight; /* in flight */
  xf_agg_update *in_flight;
  size_t n_in_flight;
  float *spare;           /* a released staging copy kept for the next update */
  uint64_t *sites;        /* sorted site ids, committed and in flight */
  size_t n_sites, sites_cap;
};

/* ---- site ids ------------------------------------------------------------- */

/* Index of the first id >= site in the sorted list. */
static size_t xf__site_lower_bound(const xf_aggregator *agg, uint64_t site) {
  size_t lo = 0, hi = agg->n_sites;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (agg->sites[mid] < site) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static bool xf__site_known(const xf_aggregator *agg, uint64_t site) {
  size_t i = xf__site_lower_bound(agg, site);
  return i < agg->n_sites && agg->sites[i] == site;
}

/* Makes room for one more id, so that the insertion itself cannot fail. */
static xf_err xf__site_reserve(xf_aggregator *agg) {
  if (agg->n_sites < agg->sites_cap) return XF_OK;
  size_t cap = agg->sites_cap ? 2 * agg->sites_cap : 16;
  if (cap > SIZE_MAX / sizeof(uint64_t)) return XF_ENOMEM;
  uint64_t *grown = xf_realloc(agg->sites, cap * sizeof(uint64_t));
  if (!grown) return XF_ENOMEM;
  agg->sites = grown;
  agg->sites_cap = cap;
  return XF_OK;
}

static void xf__site_insert(xf_aggregator *agg, uint64_t site) {
  size_t i = xf__site_lower_bound(agg, site);
  memmove(agg->sites + i + 1, agg->sites + i, (agg->n_sites - i) * sizeof(uint64_t));
  agg->sites[i] = site;
  agg->n_sites++;
}

static void xf__site_remove(xf_aggregator *agg, uint64_t site) {
  size_t i = xf__site_lower_bound(agg, site);
  if (i == agg->n_sites || agg->sites[i] != site) return;
  memmove(agg->sites + i, agg->sites + i + 1, (agg->n_sites - i - 1) * sizeof(uint64_t));
  agg->n_sites--;
}

/* ---- arrival bitmap --------------------------------------------------------- */

#define XF__WORD_BITS 64u

/* Mask of bits [lo, hi) within one word, 0 <= lo < hi <= 64. */
static uint64_t xf__bits(unsigned lo, unsigned hi) {
  uint64_t upper = hi == XF__WORD_BITS ? ~UINT64_C(0) : (UINT64_C(1) << hi) - 1;
  return upper & ~((UINT64_C(1) << lo) - 1);
}

/* Index of the first set bit in [from, to), or `to` when none is set. */
static size_t xf__first_set(const uint64_t *map, size_t from, size_t to) {
  size_t i = from;
  while (i < to) {
    size_t w = i / XF__WORD_BITS;
    unsigned lo = (unsigned)(i % XF__WORD_BITS);
    size_t word_end = (w + 1) * XF__WORD_BITS;
    unsigned hi = to < word_end ? (unsigned)(to - w * XF__WORD_BITS) : XF__WORD_BITS;
    uint64_t hit = map[w] & xf__bits(lo, hi);
    if (hit) return w * XF__WORD_BITS + (size_t)__builtin_ctzll(hit);
    i = word_end;
  }
  return to;
}

/* Index of the first clear bit in [0, n), or n when all are set. */
static size_t xf__first_clear(const uint64_t *map, size_t n) {
  for (size_t w = 0; w * XF__WORD_BITS < n; w++) {
    if (map[w] != ~UINT64_C(0)) {
      size_t i = w * XF__WORD_BITS + (size_t)__builtin_ctzll(~map[w]);
      return i < n ? i : n;
    }
  }
  return n;
}

static void xf__set_range(uint64_t *map, size_t from, size_t to) {
  size_t i = from;
  while (i < to) {
    size_t w = i / XF__WORD_BITS;
    unsigned lo = (unsigned)(i % XF__WORD_BITS);
    size_t word_end = (w + 1) * XF__WORD_BITS;
    unsigned hi = to < word_end ? (unsigned)(to - w * XF__WORD_BITS) : XF__WORD_BITS;
    map[w] |= xf__bits(lo, hi);
    i = word_end;
  }
}

/* ---- values ----------------------------------------------------------------- */

#define XF__STAGE_BLOCK 16

/* Copies src[0..n) to dst in one pass and tells whether every value is below
 * limit in magnitude (NaN is not). No early exit, and blocks of a fixed
 * length, so that GCC vectorizes the loop at -O2 too; a refused chunk spoils
 * its update, whose staging copy is then never read. */
static bool xf__stage(float *restrict dst, const float *restrict src, size_t n, float limit) {
  unsigned ok = 1;
  size_t i = 0;
  for (; i + XF__STAGE_BLOCK <= n; i += XF__STAGE_BLOCK) {
    unsigned block_ok = 1;
    for (size_t j = 0; j < XF__STAGE_BLOCK; j++) {
      float x = src[i + j];
      dst[i + j] = x;
      block_ok &= fabsf(x) < limit;
    }
    ok &= block_ok;
  }
  for (; i < n; i++) {
    float x = src[i];
    dst[i] = x;
    ok &= fabsf(x) < limit;
  }
  return ok;
}

/* v in fixed point: v * 2^40 rounded to the nearest integer, ties to even,
 * for |v| < 2^23, so that the result is below 2^63. x = v * 2^40 is exact in
 * double and, coming from a float, has at most 24 significant bits. Adding
 * and subtracting M = 1.5 * 2^52 then rounds it to an integer exactly as
 * llrint would (to nearest, ties to even: the rounding mode, which xfed
 * leaves at its default):
 *  - |x| < 2^51: x + M lies in (2^52, 2^53), where the doubles are the
 *    integers, and M is even, so the sum rounds to M + round(x) and the
 *    subtraction is exact;
 *  - |x| >= 2^51: x is a multiple of 2^28 (24 significant bits), so x, M and
 *    x + M are multiples of 2^28 below 2^64 in magnitude, at most 36
 *    significant bits: both steps are exact and give x back, an integer.
 * The conversion to int64 is then exact. Unlike llrint, which GCC calls out
 * of line for every element, this has no call and no branch. */
static inline int64_t xf__to_fixed(float v) {
  double x = (double)v * 0x1p40;
  x += 0x1.8p52;
  x -= 0x1.8p52;
  return (int64_t)x;
}

/* sum[i] += weight * fixed(v[i]) for i < n. weight <= 2^53 and |fixed| < 2^63
 * make each product exact in 128 bits; the bounds on the total are at the
 * typedef. */
static void xf__accumulate(xf__fixed_sum *restrict sum, const float *restrict v, size_t n,
                           uint64_t weight) {
  int64_t w = (int64_t)weight; /* both factors signed 64-bit: one widening multiply */
  for (size_t i = 0; i < n; i++) sum[i] += (xf__fixed_sum)w * xf__to_fixed(v[i]);
}

/* ---- create and free --------------------------------------------------------- */

xf_err xf_aggregator_create(const xf_job_strategy *strategy, size_t n_params,
                            size_t robust_capacity, xf_aggregator **out, xf_errctx *err) {
  XF_ENSURE(strategy && out, err, XF_EINVAL, "aggregator: strategy and out are required");
  XF_ENSURE(n_params > 0, err, XF_EINVAL, "aggregator: a model has at least one parameter");
  XF_ENSURE(strategy->kind >= XF_JOB_STRATEGY_FEDAVG &&
                strategy->kind <= XF_JOB_STRATEGY_TRIMMED_MEAN,
            err, XF_EINVAL, "aggregator: unknown strategy kind %d", (int)strategy->kind);
  bool robust = xf_job_strategy_is_robust(strategy->kind);
  if (robust) {
    XF_ENSURE(robust_capacity > 0 && robust_capacity <= XF__ROBUST_CAPACITY_MAX, err, XF_EINVAL,
              "aggregator: %s holds every update in memory and needs a capacity of 1..2^32-1 "
              "updates, got %zu",
              xf_job_strategy_kind_name(strategy->kind), robust_capacity);
    XF_ENSURE(!(strategy->kind == XF_JOB_STRATEGY_TRIMMED_MEAN) ||
                  (strategy->trim_fraction >= 0 && strategy->trim_fraction < 0.5),
              err, XF_EINVAL, "aggregator: trim_fraction must be in [0, 0.5), got %g",
              strategy->trim_fraction);
  }
  xf_aggregator *agg = xf_calloc(1, sizeof(*agg));
  if (!agg) return xf_fail(err, XF_ENOMEM, "aggregator: out of memory");
  agg->strategy = *strategy;
  agg->robust = robust;
  agg->n_params = n_params;
  if (robust) {
    agg->capacity = robust_capacity;
    agg->rows = xf_calloc(robust_capacity, sizeof(xf__row));
    if (!agg->rows) goto nomem;
  } else {
    agg->sum = xf_mallocarray(n_params, sizeof(xf__fixed_sum));
    if (!agg->sum) goto nomem;
    /* Zeroed here rather than by calloc's lazily mapped pages, so that the
     * page faults of the sum (26.6 MB for fedavg-cnn) fall at round start,
     * not on the first update the round is waiting on. */
    memset(agg->sum, 0, n_params * sizeof(xf__fixed_sum));
  }
  *out = agg;
  return XF_OK;
nomem:
  xf_aggregator_free(agg);
  return xf_fail(err, XF_ENOMEM, "aggregator: out of memory for %zu parameters", n_params);
}

static void xf__update_release(xf_agg_update *upd) {
  xf_aggregator *agg = upd->agg;
  if (upd->prev) upd->prev->next = upd->next;
  else agg->in_flight = upd->next;
  if (upd->next) upd->next->prev = upd->prev;
  agg->n_in_flight--;
  agg->pending_weight -= upd->weight;
  xf_free(upd->seen);
  xf_free(upd);
}

/* Mean-based kinds keep one released staging copy for the next update to
 * reuse, so that a round of one update after another does not map and fault
 * in fresh pages for each: glibc maps allocations above 32 MB anew every
 * time (models of more than 8M parameters), and page faults then cost more
 * than the fold itself. Its stale values are never read: end_update needs
 * every element to have arrived again. */
static void xf__staging_release(xf_aggregator *agg, float *values) {
  if (!agg->robust && !agg->spare) agg->spare = values;
  else xf_free(values);
}

/* Forgets an update in flight entirely: its staging or row, its site id. */
static void xf__update_discard(xf_agg_update *upd) {
  xf__site_remove(upd->agg, upd->site_id);
  xf__staging_release(upd->agg, upd->values);
  xf__update_release(upd);
}

void xf_aggregator_free(xf_aggregator *agg) {
  if (!agg) return;
  while (agg->in_flight) xf__update_discard(agg->in_flight);
  if (agg->rows)
    for (size_t i = 0; i < agg->n_committed; i++) xf_free(agg->rows[i].values);
  xf_free(agg->rows);
  xf_free(agg->sum);
  xf_free(agg->spare);
  xf_free(agg->sites);
  xf_free(agg);
}

/* ---- one update ------------------------------------------------------------ */

xf_err xf_aggregator_begin_update(xf_aggregator *agg, uint64_t site_id, uint64_t weight,
                                  xf_agg_update **out, xf_errctx *err) {
  XF_ENSURE(agg && out, err, XF_EINVAL, "aggregator: agg and out are required");
  XF_ENSURE(!xf__site_known(agg, site_id), err, XF_EEXISTS,
            "site %" PRIu64 " already has an update in this round; one update per site",
            site_id);
  XF_ENSURE(weight > 0 && weight <= XF_AGG_WEIGHT_MAX, err, XF_EINVAL,
            "site %" PRIu64 ": update weight (training records) must be in 1..2^53, got %" PRIu64,
            site_id, weight);
  uint64_t held = agg->total_weight + agg->pending_weight;
  XF_ENSURE(weight <= XF_AGG_WEIGHT_MAX - held, err, XF_EINVAL,
            "site %" PRIu64 ": the round's total weight would pass 2^53", site_id);
  XF_ENSURE(!agg->robust || agg->n_committed + agg->n_in_flight < agg->capacity, err,
            XF_ERANGE,
            "site %" PRIu64 ": %s keeps every update in memory and this round was sized for "
            "%zu; the update is refused (raise the capacity or select fewer sites)",
            site_id, xf_job_strategy_kind_name(agg->strategy.kind), agg->capacity);

  size_t words = (agg->n_params + XF__WORD_BITS - 1) / XF__WORD_BITS;
  xf_agg_update *upd = xf_calloc(1, sizeof(*upd));
  float *values = agg->spare ? agg->spare : xf_mallocarray(agg->n_params, sizeof(float));
  uint64_t *seen = xf_calloc(words, sizeof(uint64_t));
  if (!upd || !values || !seen || xf__site_reserve(agg) != XF_OK) {
    xf_free(upd);
    if (values != agg->spare) xf_free(values);
    xf_free(seen);
    return xf_fail(err, XF_ENOMEM, "site %" PRIu64 ": out of memory for an update of %zu values",
                   site_id, agg->n_params);
  }
  upd->agg = agg;
  upd->site_id = site_id;
  upd->weight = weight;
  if (values == agg->spare) agg->spare = NULL;
  upd->values = values;
  upd->seen = seen;
  upd->next = agg->in_flight;
  if (agg->in_flight) agg->in_flight->prev = upd;
  agg->in_flight = upd;
  agg->n_in_flight++;
  agg->pending_weight += weight;
  xf__site_insert(agg, site_id);
  *out = upd;
  return XF_OK;
}

xf_err xf_aggregator_fold(xf_agg_update *upd, size_t offset, const float *values, size_t count,
                          xf_errctx *err) {
  XF_ENSURE(upd, err, XF_EINVAL, "aggregator: no update");
  const xf_aggregator *agg = upd->agg;
  XF_ENSURE(!upd->spoiled, err, XF_EINVAL,
            "site %" PRIu64 ": the update was refused earlier and takes no more values",
            upd->site_id);
  if (count == 0) return XF_OK;
  if (offset > agg->n_params || count > agg->n_params - offset) {
    upd->spoiled = true;
    return xf_fail(err, XF_ERANGE,
                   "site %" PRIu64 ": values %zu..%zu lie outside the model's %zu parameters",
                   upd->site_id, offset, offset + (count - 1), agg->n_params);
  }
  size_t dup = xf__first_set(upd->seen, offset, offset + count);
  if (dup != offset + count) {
    upd->spoiled = true;
    return xf_fail(err, XF_EFORMAT, "site %" PRIu64 ": value %zu arrived twice", upd->site_id,
                   dup);
  }
  float limit = agg->robust ? INFINITY : XF_AGG_VALUE_LIMIT;
  if (!xf__stage(upd->values + offset, values, count, limit)) {
    upd->spoiled = true;
    size_t i = 0;
    while (fabsf(values[i]) < limit) i++;
    if (isnan(values[i]) || isinf(values[i]))
      return xf_fail(err, XF_ERANGE, "site %" PRIu64 ": value %zu is %s", upd->site_id,
                     offset + i, isnan(values[i]) ? "NaN" : "infinite");
    return xf_fail(err, XF_ERANGE,
                   "site %" PRIu64 ": value %zu is %g, outside the range (-2^23, 2^23) that "
                   "the exact mean holds",
                   upd->site_id, offset + i, (double)values[i]);
  }
  xf__set_range(upd->seen, offset, offset + count);
  upd->n_seen += count;
  return XF_OK;
}

xf_err xf_aggregator_end_update(xf_agg_update *upd, xf_errctx *err) {
  XF_ENSURE(upd, err, XF_EINVAL, "aggregator: no update");
  xf_aggregator *agg = upd->agg;
  uint64_t site = upd->site_id;
  if (upd->spoiled) {
    xf__update_discard(upd);
    return xf_fail(err, XF_EFORMAT,
                   "site %" PRIu64 ": the update was refused during its transfer and is dropped",
                   site);
  }
  if (upd->n_seen != agg->n_params) {
    size_t missing = xf__first_clear(upd->seen, agg->n_params);
    size_t got = upd->n_seen;
    xf__update_discard(upd);
    return xf_fail(err, XF_EFORMAT,
                   "site %" PRIu64 ": the update ended with %zu of %zu values (value %zu is "
                   "missing) and is dropped",
                   site, got, agg->n_params, missing);
  }
  if (agg->robust) {
    /* Rows are kept in order of site id, so that a row's index is its rank
     * in finish's tie order whatever the order of commits. */
    size_t at = agg->n_committed;
    while (at > 0 && agg->rows[at - 1].site_id > site) {
      agg->rows[at] = agg->rows[at - 1];
      at--;
    }
    agg->rows[at] = (xf__row){.values = upd->values, .site_id = site, .weight = upd->weight};
  } else {
    /* The one place the sum changes. Integer addition is exact, so the sum
     * is the same whatever order the updates are committed in. */
    xf__accumulate(agg->sum, upd->values, agg->n_params, upd->weight);
    xf__staging_release(agg, upd->values);
  }
  agg->n_committed++;
  agg->total_weight += upd->weight;
  xf__update_release(upd);
  return XF_OK;
}

void xf_aggregator_abort_update(xf_agg_update *upd) {
  if (upd) xf__update_discard(upd);
}

size_t xf_aggregator_committed(const xf_aggregator *agg) { return agg->n_committed; }
uint64_t xf_aggregator_total_weight(const xf_aggregator *agg) { return agg->total_weight; }
size_t xf_aggregator_in_flight(const xf_aggregator *agg) { return agg->n_in_flight; }

/* ---- finish ----------------------------------------------------------------- */

/* Total order on finite floats by value, with -0 before +0, as unsigned
 * integers; xf__order_value inverts it. */
static uint32_t xf__order_key(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return (u & UINT32_C(0x80000000)) ? ~u : u | UINT32_C(0x80000000);
}

static float xf__order_value(uint32_t key) {
  uint32_t u = (key & UINT32_C(0x80000000)) ? key & UINT32_C(0x7fffffff) : ~key;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Sorts n distinct keys ascending: Shell sort with gaps growing about 2.25
 * times (1, 3, 7, 16, 37, 84, ...), the last pass an insertion sort. No
 * allocation and no recursion, as finish runs it once per coordinate, and
 * faster than qsort's comparator calls for the tens to hundreds of updates
 * a round holds. The keys are distinct, so every correct sort gives the
 * same order. */
static void xf__sort_keys(uint64_t *a, size_t n) {
  size_t gaps[64];
  size_t g = 0;
  for (size_t h = 1; h < n && g < sizeof(gaps) / sizeof(gaps[0]); h = h * 9 / 4 + 1) gaps[g++] = h;
  while (g-- > 0) {
    size_t h = gaps[g];
    for (size_t i = h; i < n; i++) {
      uint64_t x = a[i];
      size_t j = i;
      for (; j >= h && a[j - h] > x; j -= h) a[j] = a[j - h];
      a[j] = x;
    }
  }
}

/* The reducers take one coordinate's values as sorted keys: the value's
 * order key in the high 32 bits, the rank of its row (rows are in order of
 * site id) in the low 32, so that the sort orders by value and then by site
 * id. rows gives each rank's weight; w is the total weight. */
static float xf__key_value(uint64_t key) { return xf__order_value((uint32_t)(key >> 32)); }

static uint64_t xf__key_weight(const xf__row *rows, uint64_t key) {
  return rows[(uint32_t)key].weight;
}

/* The weighted median: the value at which the cumulative weight first
 * passes w / 2, or, where it is exactly w / 2 after some value, the mean of
 * that value and the next. Cumulative weights are at most 2^53, so twice
 * them is exact in 64 bits. With unit weights this is the middle value, or
 * the mean of the two middle ones for an even count. */
static float xf__weighted_median(const uint64_t *keys, size_t k, const xf__row *rows,
                                 uint64_t w) {
  uint64_t cum = 0;
  size_t i = 0;
  for (;; i++) {
    cum += xf__key_weight(rows, keys[i]);
    if (2 * cum >= w) break;
  }
  /* i < k - 1 whenever 2 cum == w: the weight after it is w / 2 > 0. */
  if (2 * cum > w || i + 1 == k) return xf__key_value(keys[i]);
  /* The midpoint of two floats is exact in double; one rounding to float. */
  return (float)(((double)xf__key_value(keys[i]) + (double)xf__key_value(keys[i + 1])) / 2.0);
}

/* The weighted trimmed mean: the units of weight in [cut, w - cut) of the
 * sorted values are kept, an update straddling a bound keeping only its
 * units inside, and their weighted mean is taken in double, summed in
 * ascending order. Each term kept * value rounds once (kept <= 2^53 is
 * exact); updates with no unit kept add nothing, so that with unit weights
 * the sum is exactly the plain sum of the middle values. */
static float xf__weighted_trimmed_mean(const uint64_t *keys, size_t k, const xf__row *rows,
                                       uint64_t w, uint64_t cut) {
  uint64_t lo = cut, hi = w - cut, cum = 0;
  double s = 0;
  for (size_t i = 0; i < k && cum < hi; i++) {
    uint64_t start = cum;
    cum += xf__key_weight(rows, keys[i]);
    uint64_t from = start > lo ? start : lo, to = cum < hi ? cum : hi;
    if (to > from) s += (double)(to - from) * (double)xf__key_value(keys[i]);
  }
  return (float)(s / (double)(hi - lo));
}

xf_err xf_aggregator_finish(const xf_aggregator *agg, float *out, xf_errctx *err) {
  XF_ENSURE(agg && out, err, XF_EINVAL, "aggregator: agg and out are required");
  XF_ENSURE(agg->n_in_flight == 0, err, XF_EINVAL,
            "aggregator: %zu updates are still in flight; end or abort them before finishing",
            agg->n_in_flight);
  XF_ENSURE(agg->n_committed > 0, err, XF_EINVAL,
            "aggregator: no update was committed this round; there is nothing to aggregate");
  if (!agg->robust) {
    /* Three roundings, each deterministic: the sum to double (the compiler
     * runtime's __int128 conversion rounds to nearest), the division by W
     * (exact in double, W <= 2^53), and the final one to float; the scaling
     * by 2^-40 is exact (a nonzero |sum / W| is at least 2^-53, far above
     * the subnormals). docs/aggregation.md bounds the error. */
    double w = (double)agg->total_weight;
    for (size_t i = 0; i < agg->n_params; i++)
      out[i] = (float)((double)agg->sum[i] / w * 0x1p-40);
    return XF_OK;
  }
  size_t k = agg->n_committed;
  uint64_t w = agg->total_weight;
  uint64_t *keys = xf_mallocarray(k, sizeof(uint64_t));
  if (!keys) return xf_fail(err, XF_ENOMEM, "aggregator: out of memory for %zu values", k);
  /* trim_fraction * w may land a hair below an integer (0.29 * 100 gives
   * 28.999...); the tolerance keeps such products at the integer meant. The
   * cut stays below w / 2 because trim_fraction < 0.5. */
  uint64_t cut = 0;
  if (agg->strategy.kind == XF_JOB_STRATEGY_TRIMMED_MEAN) {
    cut = (uint64_t)floor(agg->strategy.trim_fraction * (double)w + 1e-9);
    if (2 * cut >= w) cut = (w - 1) / 2;
  }
  const xf__row *rows = agg->rows;
  for (size_t i = 0; i < agg->n_params; i++) {
    for (size_t r = 0; r < k; r++)
      keys[r] = (uint64_t)xf__order_key(rows[r].values[i]) << 32 | (uint64_t)r;
    xf__sort_keys(keys, k);
    out[i] = agg->strategy.kind == XF_JOB_STRATEGY_MEDIAN
                 ? xf__weighted_median(keys, k, rows, w)
                 : xf__weighted_trimmed_mean(keys, k, rows, w, cut);
  }
  xf_free(keys);
  return XF_OK;
}
