/* SPDX-License-Identifier: Apache-2.0 */
/* Splits of one dataset into per-site shards: IID, Dirichlet label skew and k
 * classes per site (after NIID-Bench, Li et al. 2022), with each site's test
 * part following its train part's label distribution. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "data/dataset_internal.h"

/* RNG streams of a split ("split" in ASCII, then a number), so that a job
 * seed reused for initialization or shuffling draws unrelated numbers. */
#define XF__STREAM_TRAIN UINT64_C(0x73706c6974000001) /* train assignment */
#define XF__STREAM_HOLD UINT64_C(0x73706c6974000002)  /* classes:K holder sets */
#define XF__STREAM_TEST UINT64_C(0x73706c6974000003)  /* test assignment */

#define XF__MAX_SITES 10000
/* Sites times classes: the per-site class tables stay below 64 MiB each. */
#define XF__MAX_CELLS (UINT64_C(1) << 24)
#define XF__DEFAULT_MIN_RECORDS 10
#define XF__DEFAULT_MAX_DRAWS 1000

/* ---- schemes ----------------------------------------------------------------- */

xf_err xf_split_scheme_parse(const char *s, xf_split_scheme *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  static const char hint[] =
      "use iid, dirichlet:ALPHA (e.g. dirichlet:0.5) or classes:K (e.g. classes:2)";
  if (strcmp(s, "iid") == 0) {
    out->kind = XF_SPLIT_IID;
    return XF_OK;
  }
  if (strncmp(s, "dirichlet:", 10) == 0) {
    char *end = NULL;
    double a = strtod(s + 10, &end);
    if (end == s + 10 || *end != '\0' || !isfinite(a) || a <= 0 || a > 1e6)
      return xf_fail(err, XF_EINVAL,
                     "split scheme '%s': ALPHA must be a number above 0 and at most 1e6 (small "
                     "values skew labels strongly, large ones approach iid)",
                     s);
    out->kind = XF_SPLIT_DIRICHLET;
    out->alpha = a;
    return XF_OK;
  }
  if (strncmp(s, "classes:", 8) == 0) {
    const char *d = s + 8;
    unsigned long k = 0;
    size_t i = 0;
    /* Stops growing k past the largest K, so no length of digits overflows. */
    for (; d[i] >= '0' && d[i] <= '9'; i++)
      if (k <= XF_CSV_MAX_CLASSES) k = k * 10 + (unsigned)(d[i] - '0');
    if (i == 0 || d[i] != '\0' || k < 1 || k > XF_CSV_MAX_CLASSES)
      return xf_fail(err, XF_EINVAL, "split scheme '%s': K must be a whole number of classes "
                                     "per site, at least 1",
                     s);
    out->kind = XF_SPLIT_CLASSES;
    out->k = (uint32_t)k;
    return XF_OK;
  }
  return xf_fail(err, XF_EINVAL, "unknown split scheme '%s': %s", s, hint);
}

void xf_split_scheme_format(const xf_split_scheme *s, char *buf, size_t n) {
  switch (s->kind) {
  case XF_SPLIT_DIRICHLET:
    /* The shortest decimal that reads back to the same alpha, without an
     * exponent where plain digits are as short to read ("100", not "1e+02"). */
    for (int prec = 1; prec <= 17; prec++) {
      snprintf(buf, n, "dirichlet:%.*g", prec, s->alpha);
      bool exponent = strchr(buf + 10, 'e') != NULL;
      bool plain_fits = s->alpha >= 1e-4 && s->alpha < 1e6;
      if (strtod(buf + 10, NULL) == s->alpha && (!exponent || !plain_fits)) break;
    }
    return;
  case XF_SPLIT_CLASSES:
    snprintf(buf, n, "classes:%u", s->k);
    return;
  case XF_SPLIT_IID:
  default:
    snprintf(buf, n, "iid");
    return;
  }
}

/* ---- plan -------------------------------------------------------------------- */

typedef struct split_ctx {
  const xf_dataset *train, *test;
  const xf_split_scheme *scheme;
  uint32_t sites, classes;
  uint32_t min_records, max_draws;
  uint32_t *tr_order, *tr_off; /* train indices grouped by class; class k at tr_off[k] */
  uint32_t *te_order, *te_off;
  uint32_t *site_of_train, *site_of_test;
  uint32_t *site_cls; /* [site * classes + k]: train records of class k at the site */
  uint32_t *quota;    /* same shape: test records of class k for the site */
  uint64_t *size;     /* train records per site */
  uint64_t *test_size;
  double *prop;
  uint8_t *hold;     /* classes:K: [site * classes + k] = site holds class k */
  uint32_t *held;    /* classes:K: classes held per site */
  uint32_t *present; /* classes:K: the classes with train records */
  struct remainder {
    uint64_t rem;
    uint32_t site;
  } *rems;
} split_ctx;

static void ctx_free(split_ctx *c) {
  xf_free(c->tr_order);
  xf_free(c->tr_off);
  xf_free(c->te_order);
  xf_free(c->te_off);
  xf_free(c->site_of_train);
  xf_free(c->site_of_test);
  xf_free(c->site_cls);
  xf_free(c->quota);
  xf_free(c->size);
  xf_free(c->test_size);
  xf_free(c->prop);
  xf_free(c->hold);
  xf_free(c->held);
  xf_free(c->present);
  xf_free(c->rems);
}

static xf_err ctx_alloc(split_ctx *c, xf_errctx *err) {
  size_t S = c->sites, C = c->classes, cells = S * C;
  c->tr_order = xf_mallocarray(c->train->n, sizeof(uint32_t));
  c->tr_off = xf_calloc(C + 1, sizeof(uint32_t));
  c->te_order = xf_mallocarray(c->test->n, sizeof(uint32_t));
  c->te_off = xf_calloc(C + 1, sizeof(uint32_t));
  c->site_of_train = xf_mallocarray(c->train->n, sizeof(uint32_t));
  c->site_of_test = xf_mallocarray(c->test->n, sizeof(uint32_t));
  c->site_cls = xf_calloc(cells, sizeof(uint32_t));
  c->quota = xf_calloc(cells, sizeof(uint32_t));
  c->size = xf_calloc(S, sizeof(uint64_t));
  c->test_size = xf_calloc(S, sizeof(uint64_t));
  c->prop = xf_calloc(S, sizeof(double));
  c->hold = xf_calloc(cells, 1);
  c->held = xf_calloc(S, sizeof(uint32_t));
  c->present = xf_calloc(C, sizeof(uint32_t));
  c->rems = xf_calloc(S, sizeof(*c->rems));
  if (!c->tr_order || !c->tr_off || !c->te_order || !c->te_off || !c->site_of_train ||
      !c->site_of_test || !c->site_cls || !c->quota || !c->size || !c->test_size || !c->prop ||
      !c->hold || !c->held || !c->present || !c->rems)
    return xf_fail(err, XF_ENOMEM, "out of memory planning a split over %u sites", c->sites);
  return XF_OK;
}

/* Counting sort of a dataset's indices by label: ascending within a class. */
static void group_by_class(const xf_dataset *ds, uint32_t classes, uint32_t *order,
                           uint32_t *off) {
  memset(off, 0, (classes + 1) * sizeof(uint32_t));
  for (uint32_t i = 0; i < ds->n; i++) off[ds->y[i] + 1]++;
  for (uint32_t k = 0; k < classes; k++) off[k + 1] += off[k];
  /* off[k] is the next free slot of class k while filling, then restored. */
  for (uint32_t i = 0; i < ds->n; i++) order[off[ds->y[i]]++] = i;
  for (uint32_t k = classes; k > 0; k--) off[k] = off[k - 1];
  off[0] = 0;
}

static void count_site_classes(split_ctx *c) {
  memset(c->site_cls, 0, (size_t)c->sites * c->classes * sizeof(uint32_t));
  memset(c->size, 0, c->sites * sizeof(uint64_t));
  for (uint32_t i = 0; i < c->train->n; i++) {
    uint32_t s = c->site_of_train[i];
    c->site_cls[(size_t)s * c->classes + (uint32_t)c->train->y[i]]++;
    c->size[s]++;
  }
}

static int by_remainder(const void *a, const void *b) {
  const struct remainder *x = a, *y = b;
  if (x->rem != y->rem) return x->rem < y->rem ? 1 : -1;
  return x->site < y->site ? -1 : x->site > y->site;
}

/* Test records of each class per site, in proportion to the sites' train
 * records of that class, by largest remainders in exact integer arithmetic.
 * A class absent from train is divided by the sites' train sizes. Returns
 * the fewest test records any site gets. */
static uint64_t compute_quotas(split_ctx *c) {
  uint32_t S = c->sites, C = c->classes;
  memset(c->test_size, 0, S * sizeof(uint64_t));
  for (uint32_t k = 0; k < C; k++) {
    uint64_t tk = c->te_off[k + 1] - c->te_off[k];
    uint64_t total = c->tr_off[k + 1] - c->tr_off[k];
    bool by_size = total == 0;
    if (by_size) total = c->train->n;
    uint64_t given = 0;
    for (uint32_t s = 0; s < S; s++) {
      uint64_t w = by_size ? c->size[s] : c->site_cls[(size_t)s * C + k];
      uint64_t num = tk * w;
      uint32_t q = (uint32_t)(num / total);
      c->quota[(size_t)s * C + k] = q;
      c->rems[s].rem = num % total;
      c->rems[s].site = s;
      given += q;
    }
    uint64_t left = tk - given; /* below the number of sites with a share */
    if (left) {
      qsort(c->rems, S, sizeof(*c->rems), by_remainder);
      for (uint64_t i = 0; i < left; i++) c->quota[(size_t)c->rems[i].site * C + k]++;
    }
    for (uint32_t s = 0; s < S; s++) c->test_size[s] += c->quota[(size_t)s * C + k];
  }
  uint64_t fewest = UINT64_MAX;
  for (uint32_t s = 0; s < S; s++)
    if (c->test_size[s] < fewest) fewest = c->test_size[s];
  return fewest;
}

static uint64_t fewest_train(const split_ctx *c) {
  uint64_t fewest = UINT64_MAX;
  for (uint32_t s = 0; s < c->sites; s++)
    if (c->size[s] < fewest) fewest = c->size[s];
  return fewest;
}

/* Fails when some site would have no test record (iid and classes:K, where
 * drawing again would not help). */
static xf_err require_test_records(split_ctx *c, const char *scheme, xf_errctx *err) {
  if (compute_quotas(c) > 0) return XF_OK;
  return xf_fail(err, XF_EINVAL,
                 "%s over %u sites leaves a site without test records (the test set has %u "
                 "records): use fewer sites or a larger test set",
                 scheme, c->sites, c->test->n);
}

static xf_err split_iid(split_ctx *c, xf_rng *rng, const char *scheme, xf_errctx *err) {
  uint32_t n = c->train->n, S = c->sites;
  if (n / S < c->min_records)
    return xf_fail(err, XF_EINVAL,
                   "%u train records cannot give each of %u sites at least %u: use fewer sites "
                   "or lower the minimum",
                   n, S, c->min_records);
  for (uint32_t i = 0; i < n; i++) c->tr_order[i] = i;
  xf_rng_shuffle_u32(rng, c->tr_order, n);
  for (uint32_t s = 0; s < S; s++) {
    uint32_t from = (uint32_t)((uint64_t)s * n / S), to = (uint32_t)((uint64_t)(s + 1) * n / S);
    for (uint32_t p = from; p < to; p++) c->site_of_train[c->tr_order[p]] = s;
  }
  /* tr_order is the class grouping again for the test assignment. */
  group_by_class(c->train, c->classes, c->tr_order, c->tr_off);
  count_site_classes(c);
  return require_test_records(c, scheme, err);
}

/* One Dirichlet draw as NIID-Bench makes it: per class, proportions over the
 * sites from Dirichlet(alpha), zeroed for sites that already hold their fair
 * share (n / sites), renormalized, and cut by cumulative sums. False when the
 * draw is degenerate (every eligible proportion underflowed to 0). */
static bool dirichlet_draw(split_ctx *c, xf_rng *rng) {
  uint32_t S = c->sites, n = c->train->n;
  memset(c->size, 0, S * sizeof(uint64_t));
  for (uint32_t k = 0; k < c->classes; k++) {
    uint32_t nk = c->tr_off[k + 1] - c->tr_off[k];
    if (nk == 0) continue;
    uint32_t *seg = c->tr_order + c->tr_off[k];
    xf_rng_shuffle_u32(rng, seg, nk);
    double sum = 0;
    for (uint32_t s = 0; s < S; s++) {
      double g = xf_rng_gamma(rng, c->scheme->alpha);
      c->prop[s] = c->size[s] * S < (uint64_t)n ? g : 0.0;
      sum += c->prop[s];
    }
    if (!(sum > 0) || !isfinite(sum)) return false;
    double cum = 0;
    uint32_t prev = 0;
    for (uint32_t s = 0; s < S; s++) {
      uint32_t cut = nk;
      if (s + 1 < S) {
        cum += c->prop[s] / sum;
        double v = cum * nk;
        cut = v >= nk ? nk : (uint32_t)v;
        if (cut < prev) cut = prev;
      }
      for (uint32_t p = prev; p < cut; p++) c->site_of_train[seg[p]] = s;
      c->size[s] += cut - prev;
      prev = cut;
    }
  }
  return true;
}

static xf_err split_dirichlet(split_ctx *c, xf_rng *rng, const char *scheme, xf_errctx *err) {
  for (uint32_t draw = 0; draw < c->max_draws; draw++) {
    if (!dirichlet_draw(c, rng)) continue;
    if (fewest_train(c) < c->min_records) continue;
    count_site_classes(c);
    if (compute_quotas(c) == 0) continue;
    return XF_OK;
  }
  return xf_fail(err, XF_EINVAL,
                 "%s over %u sites did not give every site at least %u train records and a "
                 "test record in %u draws: raise alpha, use fewer sites, or lower the minimum",
                 scheme, c->sites, c->min_records, c->max_draws);
}

static xf_err split_classes(split_ctx *c, xf_rng *hold_rng, xf_rng *rng, const char *scheme,
                            xf_errctx *err) {
  uint32_t S = c->sites, C = c->classes, K = c->scheme->k;
  /* Only classes with train records can be held. */
  uint32_t *present = c->present;
  uint32_t cp = 0;
  for (uint32_t k = 0; k < C; k++)
    if (c->tr_off[k + 1] > c->tr_off[k]) present[cp++] = k;
  if (K > cp)
    return xf_fail(err, XF_EINVAL,
                   "%s asks for %u classes per site but the train set has %u classes: use "
                   "K <= %u",
                   scheme, K, cp, cp);
  if ((uint64_t)S * K < cp)
    return xf_fail(err, XF_EINVAL,
                   "%s over %u sites holds at most %llu of the %u classes, and records of the "
                   "others would be dropped: use more sites or a larger K",
                   scheme, S, (unsigned long long)S * K, cp);
  /* Cover every class once (round robin over a shuffled class list), then fill
   * each site up to K distinct classes at random. */
  xf_rng_shuffle_u32(hold_rng, present, cp);
  uint32_t *held = c->held;
  for (uint32_t t = 0; t < cp; t++) {
    uint32_t s = t % S;
    c->hold[(size_t)s * C + present[t]] = 1;
    held[s]++;
  }
  for (uint32_t s = 0; s < S; s++) {
    while (held[s] < K) {
      uint32_t k = present[xf_rng_below(hold_rng, cp)];
      if (c->hold[(size_t)s * C + k]) continue;
      c->hold[(size_t)s * C + k] = 1;
      held[s]++;
    }
  }
  /* Deal each class's shuffled records evenly over its holders, in site
   * order (sizes differ by at most 1, larger parts first). */
  for (uint32_t k = 0; k < C; k++) {
    uint32_t nk = c->tr_off[k + 1] - c->tr_off[k];
    if (nk == 0) continue;
    uint32_t holders = 0;
    for (uint32_t s = 0; s < S; s++) holders += c->hold[(size_t)s * C + k];
    if (nk < holders)
      return xf_fail(err, XF_EINVAL,
                     "%s: class %u has %u train records but %u sites hold it: use fewer sites "
                     "or a smaller K",
                     scheme, k, nk, holders);
    uint32_t *seg = c->tr_order + c->tr_off[k];
    xf_rng_shuffle_u32(rng, seg, nk);
    uint32_t j = 0, pos = 0;
    for (uint32_t s = 0; s < S; s++) {
      if (!c->hold[(size_t)s * C + k]) continue;
      uint32_t part = nk / holders + (j < nk % holders ? 1 : 0);
      for (uint32_t p = 0; p < part; p++) c->site_of_train[seg[pos + p]] = s;
      pos += part;
      j++;
    }
  }
  count_site_classes(c);
  uint64_t fewest = fewest_train(c);
  if (fewest < c->min_records)
    return xf_fail(err, XF_EINVAL,
                   "%s over %u sites leaves a site with %llu train records, fewer than the "
                   "minimum %u: use fewer sites or a larger K",
                   scheme, S, (unsigned long long)fewest, c->min_records);
  return require_test_records(c, scheme, err);
}

/* Deals each class's shuffled test records by the quotas. */
static void assign_test(split_ctx *c, xf_rng *rng) {
  uint32_t S = c->sites, C = c->classes;
  for (uint32_t k = 0; k < C; k++) {
    uint32_t tk = c->te_off[k + 1] - c->te_off[k];
    uint32_t *seg = c->te_order + c->te_off[k];
    xf_rng_shuffle_u32(rng, seg, tk);
    uint32_t pos = 0;
    for (uint32_t s = 0; s < S; s++) {
      uint32_t q = c->quota[(size_t)s * C + k];
      for (uint32_t p = 0; p < q; p++) c->site_of_test[seg[pos + p]] = s;
      pos += q;
    }
  }
}

/* Site lists in ascending record order from a record -> site map. */
static xf_err build_lists(const uint32_t *site_of, uint32_t n, uint32_t sites, uint32_t **off,
                          uint32_t **idx, xf_errctx *err) {
  *off = xf_calloc((size_t)sites + 1, sizeof(uint32_t));
  *idx = xf_mallocarray(n ? n : 1, sizeof(uint32_t));
  if (!*off || !*idx) return xf_fail(err, XF_ENOMEM, "out of memory for the split plan");
  for (uint32_t i = 0; i < n; i++) (*off)[site_of[i] + 1]++;
  for (uint32_t s = 0; s < sites; s++) (*off)[s + 1] += (*off)[s];
  for (uint32_t i = 0; i < n; i++) (*idx)[(*off)[site_of[i]]++] = i;
  for (uint32_t s = sites; s > 0; s--) (*off)[s] = (*off)[s - 1];
  (*off)[0] = 0;
  return XF_OK;
}

static xf_err check_labels_in_range(const xf_dataset *ds, const char *part, uint32_t classes,
                                    xf_errctx *err) {
  for (uint32_t i = 0; i < ds->n; i++)
    if (ds->y[i] < 0 || (uint32_t)ds->y[i] >= classes)
      return xf_fail(err, XF_EINVAL, "%s record %u has label %d outside [0, %u)", part, i + 1,
                     ds->y[i], classes);
  return XF_OK;
}

static xf_err plan_run(split_ctx *c, uint64_t seed, xf_split_plan *out, xf_errctx *err) {
  XF_GUARD(ctx_alloc(c, err));
  group_by_class(c->train, c->classes, c->tr_order, c->tr_off);
  group_by_class(c->test, c->classes, c->te_order, c->te_off);
  xf_rng train_rng, hold_rng, test_rng;
  xf_rng_seed(&train_rng, seed, XF__STREAM_TRAIN);
  xf_rng_seed(&hold_rng, seed, XF__STREAM_HOLD);
  xf_rng_seed(&test_rng, seed, XF__STREAM_TEST);
  char scheme[64];
  xf_split_scheme_format(c->scheme, scheme, sizeof(scheme));
  switch (c->scheme->kind) {
  case XF_SPLIT_IID: XF_GUARD(split_iid(c, &train_rng, scheme, err)); break;
  case XF_SPLIT_DIRICHLET: XF_GUARD(split_dirichlet(c, &train_rng, scheme, err)); break;
  case XF_SPLIT_CLASSES: XF_GUARD(split_classes(c, &hold_rng, &train_rng, scheme, err)); break;
  default: return xf_fail(err, XF_EINVAL, "unknown split scheme kind %d", (int)c->scheme->kind);
  }
  assign_test(c, &test_rng);
  out->sites = (int)c->sites;
  XF_GUARD(build_lists(c->site_of_train, c->train->n, c->sites, &out->train_off,
                       &out->train_idx, err));
  return build_lists(c->site_of_test, c->test->n, c->sites, &out->test_off, &out->test_idx, err);
}

xf_err xf_split_plan_make(const xf_dataset *train, const xf_dataset *test, int sites,
                          const xf_split_scheme *scheme, uint64_t seed,
                          const xf_split_options *opt, xf_split_plan *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (sites < 1 || sites > XF__MAX_SITES)
    return xf_fail(err, XF_EINVAL, "%d sites: a split needs 1 to %d sites", sites,
                   XF__MAX_SITES);
  if (train->n == 0 || test->n == 0)
    return xf_fail(err, XF_EINVAL, "a split needs a train set and a test set with records");
  uint32_t classes = train->classes > test->classes ? train->classes : test->classes;
  if (classes == 0) return xf_fail(err, XF_EINVAL, "the dataset has no classes");
  if ((uint64_t)sites * classes > XF__MAX_CELLS)
    return xf_fail(err, XF_EINVAL,
                   "%d sites x %u classes is more than the %llu site-class pairs a split "
                   "handles: use fewer sites",
                   sites, classes, (unsigned long long)XF__MAX_CELLS);
  XF_GUARD(check_labels_in_range(train, "train", classes, err));
  XF_GUARD(check_labels_in_range(test, "test", classes, err));
  split_ctx c;
  memset(&c, 0, sizeof(c));
  c.train = train;
  c.test = test;
  c.scheme = scheme;
  c.sites = (uint32_t)sites;
  c.classes = classes;
  c.min_records = opt && opt->min_records ? opt->min_records : XF__DEFAULT_MIN_RECORDS;
  c.max_draws = opt && opt->max_draws ? opt->max_draws : XF__DEFAULT_MAX_DRAWS;
  xf_err rc = plan_run(&c, seed, out, err);
  ctx_free(&c);
  if (rc != XF_OK) xf_split_plan_free(out);
  return rc;
}

void xf_split_plan_free(xf_split_plan *plan) {
  if (!plan) return;
  xf_free(plan->train_off);
  xf_free(plan->train_idx);
  xf_free(plan->test_off);
  xf_free(plan->test_idx);
  memset(plan, 0, sizeof(*plan));
}

/* ---- shards -------------------------------------------------------------------- */

static xf_err gather(const xf_dataset *src, const uint32_t *idx, uint32_t n, uint32_t classes,
                     xf_dataset *dst, xf_errctx *err) {
  XF_GUARD(xf_dataset_alloc(dst, n, src->h, src->w, src->c, classes, err));
  size_t row = (size_t)src->features;
  for (uint32_t i = 0; i < n; i++) {
    memcpy(dst->x + i * row, src->x + (size_t)idx[i] * row, row * sizeof(float));
    dst->y[i] = src->y[idx[i]];
  }
  return XF_OK;
}

static xf_err shards_fill(const xf_dataset *train, const xf_dataset *test,
                          const xf_split_plan *plan, xf_split *out, xf_errctx *err) {
  out->shards = xf_calloc((size_t)plan->sites, sizeof(xf_dataset_pair));
  if (!out->shards) return xf_fail(err, XF_ENOMEM, "out of memory for %d shards", plan->sites);
  out->sites = plan->sites;
  for (int s = 0; s < plan->sites; s++) {
    XF_GUARD(gather(train, plan->train_idx + plan->train_off[s],
                    plan->train_off[s + 1] - plan->train_off[s], out->classes,
                    &out->shards[s].train, err));
    XF_GUARD(gather(test, plan->test_idx + plan->test_off[s],
                    plan->test_off[s + 1] - plan->test_off[s], out->classes,
                    &out->shards[s].test, err));
  }
  return XF_OK;
}

xf_err xf_dataset_split(const xf_dataset *train, const xf_dataset *test, int sites,
                        const xf_split_scheme *scheme, uint64_t seed,
                        const xf_split_options *opt, xf_split *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (train->h != test->h || train->w != test->w || train->c != test->c)
    return xf_fail(err, XF_EINVAL, "train and test records differ in shape");
  xf_split_plan plan;
  XF_GUARD(xf_split_plan_make(train, test, sites, scheme, seed, opt, &plan, err));
  out->scheme = *scheme;
  out->seed = seed;
  out->classes = train->classes > test->classes ? train->classes : test->classes;
  out->min_records = opt && opt->min_records ? opt->min_records : XF__DEFAULT_MIN_RECORDS;
  xf_err rc = shards_fill(train, test, &plan, out, err);
  xf_split_plan_free(&plan);
  if (rc != XF_OK) xf_split_free(out);
  return rc;
}

void xf_split_free(xf_split *split) {
  if (!split) return;
  for (int s = 0; split->shards && s < split->sites; s++) xf_dataset_pair_free(&split->shards[s]);
  xf_free(split->shards);
  memset(split, 0, sizeof(*split));
}
