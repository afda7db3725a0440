/* SPDX-License-Identifier: Apache-2.0 */
/* The aggregator's side of SecAgg+ for one round attempt as a sans-IO
 * machine: the scale and parameters of the setup, the phases and their
 * deadlines, the relaying of the sites' signed keys and shares, the
 * consistency round and the unmasking of the mean, reported as an action
 * list (coordinator/saphase.h). */
#include "coordinator/saphase.h"

#include <math.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* Per-index progress and standing. */
enum {
  XF__ADVERTISED = 1, /* its keys are in the server */
  XF__SHARED = 2,     /* its shares are held for routing: it is in U2 */
  XF__MASKED = 4,     /* its whole masked input is held */
  XF__SURVIVOR = 8,   /* in U3 */
  XF__REVEALED = 16,  /* its reveal is in the server */
  XF__GONE = 32,      /* out of the round: nothing more is waited for or counted from it */
  XF__SIGNED = 64     /* its signature of U3 is held */
};

/* One encrypted pair of shares, held from its sender's message until the
 * shares are routed. */
typedef struct xf__share {
  uint32_t from, to;
  uint8_t ct[XF_SECAGG_SHARE_BYTES];
  uint8_t sig[XF_SECAGG_SIG_BYTES]; /* its sender's */
} xf__share;

/* The cohort sorted by site id, for lookups. */
typedef struct xf__place {
  uint64_t site;
  uint32_t index;
} xf__place;

struct xf_saphase {
  xf_secagg_params p;
  xf_secagg_server *server;
  xf_codec_fixed fixed; /* the shared integer scale */
  size_t n_params;
  double phase_s;
  xf_saphase_state state;
  double deadline; /* of the current phase; INFINITY when none runs */

  uint64_t *ids;      /* index - 1 -> site id */
  xf__place *places;  /* sorted by site */
  double *scale;      /* index - 1 -> its share of the cohort's weight */
  uint64_t *weight;   /* index - 1 -> its weight */
  uint8_t *flags;     /* index - 1 -> XF__*, set through xf__flag */
  /* The sites each phase waits for (xf__waits), kept as flags change so
   * that an event costs O(1), not O(n), to check. */
  uint32_t waiting[4];
  uint32_t **inputs;  /* index - 1 -> its whole masked input, held until unmasking */

  xf__share *shares; /* received, waiting to be routed */
  size_t n_shares, cap_shares;
  /* The routing of the last SEND_ROUTED actions: the shares sorted by
   * receiver. Kept, with the shares, until the next event call. */
  uint32_t *route_from;
  const uint8_t **route_cts;
  uint8_t *route_sigs;
  bool routed;

  uint8_t *adverts; /* n * XF_SECAGG_ADVERT_BYTES, for SEND_KEYS */
  uint8_t *advert_sigs;  /* n * XF_SECAGG_SIG_BYTES: each site's signature of its keys */
  uint8_t **certs;       /* index - 1 -> its certificate (DER), until SEND_KEYS */
  uint32_t *cert_lens;   /* index - 1 -> its length, 0: none */
  uint8_t *cert_blob;    /* SEND_KEYS: the certificates back to back */
  size_t cert_blob_len;
  uint8_t *check_sigs;   /* n * XF_SECAGG_SIG_BYTES: each survivor's signature of U3 */
  uint32_t *signers;     /* SEND_UNMASK: the survivors that signed, ascending */
  uint8_t *signer_sigs;  /* ... and their signatures, in that order */
  size_t n_signers;
  uint32_t *u2;
  size_t n_u2;
  uint32_t *u3;
  size_t n_u3;
  uint64_t *survivors; /* the site ids of U3 */

  uint64_t subset_seed; /* with uplink top-k: the shared random subset's seed */
  uint32_t *subset;     /* ... its indices (p.length of them), or NULL: all */

  float *mean;          /* DONE: the unmasked mean, until taken */
  uint64_t mean_weight; /* the survivors' total weight */

  xf_saphase_action *actions; /* room for n + 3: see xf__push */
  size_t n_actions, cap_actions;
  char failure[XF_SAPHASE_WHY_MAX];
  uint32_t refused;       /* sites that refused to go on (xf_saphase_refused) */
  uint64_t first_refuser; /* the first of them */
};

/* ---- names ---------------------------------------------------------------------------------- */

const char *xf_saphase_state_name(xf_saphase_state s) {
  switch (s) {
  case XF_SAPHASE_ADVERT: return "advert";
  case XF_SAPHASE_SHARE: return "share";
  case XF_SAPHASE_MASKED: return "masked";
  case XF_SAPHASE_CHECK: return "check";
  case XF_SAPHASE_UNMASK: return "unmask";
  case XF_SAPHASE_DONE: return "done";
  case XF_SAPHASE_FAILED: return "failed";
  }
  return "unknown";
}

/* ---- actions and bookkeeping ---------------------------------------------------------------- */

/* One call queues at most: a DROP for the sender of a message, then one
 * phase's worth of per-site actions (at most one for each of the other
 * n - 1 sites), then DONE or FAILED: n + 1. Room for n + 3 is reserved at
 * creation; running out would be a bug in this count, so it aborts rather
 * than lose an instruction to the caller. */
static xf_saphase_action *xf__push(xf_saphase *sa, xf_saphase_action_kind kind, uint64_t site) {
  if (sa->n_actions >= sa->cap_actions) abort();
  xf_saphase_action *a = &sa->actions[sa->n_actions++];
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  a->site = site;
  return a;
}

/* Whether a site with flags f is one that phase ADVERT (0), SHARE (1),
 * CHECK (2) or UNMASK (3) waits for. */
static bool xf__waits(uint8_t f, int phase) {
  if (f & XF__GONE) return false;
  if (phase == 0) return !(f & XF__ADVERTISED);
  if (phase == 1) return (f & XF__ADVERTISED) && !(f & XF__SHARED);
  if (phase == 2) return (f & XF__SURVIVOR) && !(f & XF__SIGNED);
  return (f & XF__SIGNED) && !(f & XF__REVEALED);
}

static void xf__flag(xf_saphase *sa, uint32_t i, uint8_t flag) {
  uint8_t *f = &sa->flags[i - 1];
  for (int ph = 0; ph < 4; ph++) sa->waiting[ph] -= xf__waits(*f, ph);
  *f |= flag;
  for (int ph = 0; ph < 4; ph++) sa->waiting[ph] += xf__waits(*f, ph);
}

static void xf__wipe_input(xf_saphase *sa, uint32_t i) {
  uint32_t *in = sa->inputs[i - 1];
  if (!in) return;
  sodium_memzero(in, (size_t)sa->p.length * sizeof(*in));
  xf_free(in);
  sa->inputs[i - 1] = NULL;
}

/* The shares have done their work once routed: wiped and released with the
 * routing that pointed into them. */
static void xf__release_routing(xf_saphase *sa) {
  if (sa->shares) sodium_memzero(sa->shares, sa->n_shares * sizeof(*sa->shares));
  xf_free(sa->shares);
  xf_free(sa->route_from);
  xf_free(sa->route_cts);
  xf_free(sa->route_sigs);
  sa->shares = NULL;
  sa->n_shares = sa->cap_shares = 0;
  sa->route_from = NULL;
  sa->route_cts = NULL;
  sa->route_sigs = NULL;
}

/* The certificates have done their work once relayed with the keys. */
static void xf__release_certs(xf_saphase *sa) {
  for (uint32_t i = 0; sa->certs && i < sa->p.n; i++) {
    xf_free(sa->certs[i]);
    sa->certs[i] = NULL;
  }
  xf_free(sa->cert_blob);
  sa->cert_blob = NULL;
  sa->cert_blob_len = 0;
}

/* Every event starts a new action list. */
static void xf__begin(xf_saphase *sa) {
  sa->n_actions = 0;
  if (sa->routed) {
    xf__release_routing(sa);
    sa->routed = false;
  }
}

/* Leaves site i out of the round: DROP with why, and nothing more is
 * waited for or counted from it. */
static void xf__drop(xf_saphase *sa, uint32_t i, const char *fmt, ...) XF_PRINTF(3, 4);
static void xf__drop(xf_saphase *sa, uint32_t i, const char *fmt, ...) {
  xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_DROP, sa->ids[i - 1]);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->why, sizeof(a->why), fmt, ap);
  va_end(ap);
  xf__flag(sa, i, XF__GONE);
  xf__wipe_input(sa, i);
}

/* The sum cannot be unmasked: FAILED with why. */
static void xf__fail(xf_saphase *sa, const char *fmt, ...) XF_PRINTF(2, 3);
static void xf__fail(xf_saphase *sa, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(sa->failure, sizeof(sa->failure), fmt, ap);
  va_end(ap);
  /* Refusals are why too few sites were left: the reason says so. */
  size_t at = strlen(sa->failure);
  if (sa->refused && at < sizeof(sa->failure))
    snprintf(sa->failure + at, sizeof(sa->failure) - at,
             "; %u site%s refused to go on (site %llu first)", sa->refused,
             sa->refused == 1 ? "" : "s", (unsigned long long)sa->first_refuser);
  xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_FAILED, 0);
  snprintf(a->why, sizeof(a->why), "%s", sa->failure);
  sa->state = XF_SAPHASE_FAILED;
  sa->deadline = INFINITY;
  for (uint32_t i = 1; i <= sa->p.n; i++) xf__wipe_input(sa, i);
}

static uint32_t xf__count(const xf_saphase *sa, uint8_t has, uint8_t lacks) {
  uint32_t c = 0;
  for (uint32_t i = 0; i < sa->p.n; i++)
    c += (sa->flags[i] & has) == has && !(sa->flags[i] & lacks);
  return c;
}

/* ---- life cycle ----------------------------------------------------------------------------- */

void xf_saphase_free(xf_saphase *sa) {
  if (!sa) return;
  xf_secagg_server_free(sa->server);
  for (uint32_t i = 1; sa->inputs && i <= sa->p.n; i++) xf__wipe_input(sa, i);
  xf_free(sa->inputs);
  xf__release_routing(sa);
  xf__release_certs(sa);
  xf_free(sa->certs);
  xf_free(sa->cert_lens);
  xf_free(sa->advert_sigs);
  xf_free(sa->check_sigs);
  xf_free(sa->signers);
  xf_free(sa->signer_sigs);
  xf_free(sa->ids);
  xf_free(sa->places);
  xf_free(sa->scale);
  xf_free(sa->weight);
  xf_free(sa->flags);
  xf_free(sa->adverts);
  xf_free(sa->u2);
  xf_free(sa->u3);
  xf_free(sa->survivors);
  xf_free(sa->subset);
  xf_free(sa->mean);
  xf_free(sa->actions);
  xf_free(sa);
}

static int xf__cmp_place(const void *a, const void *b) {
  uint64_t x = ((const xf__place *)a)->site, y = ((const xf__place *)b)->site;
  return (x > y) - (x < y);
}

/* The smallest b for which 2^(b-1) > need. */
static unsigned xf__bits_above(uint64_t need) {
  unsigned b = 1;
  while (b < 64 && (1ull << (b - 1)) <= need) b++;
  return b;
}

static xf_err xf__check_config(const xf_saphase_config *cfg, xf_errctx *err) {
  XF_ENSURE(cfg, err, XF_EINVAL, "secure aggregation needs its configuration");
  XF_ENSURE(cfg->n >= 2 && cfg->n <= XF_SECAGG_MAX_SITES, err, XF_EINVAL,
            "secure aggregation needs 2 to %u sites in a round, the cohort has %u",
            XF_SECAGG_MAX_SITES, cfg->n);
  XF_ENSURE(cfg->sites, err, XF_EINVAL, "secure aggregation needs the cohort's site ids");
  XF_ENSURE(cfg->graph_seed, err, XF_EINVAL, "secure aggregation needs the attempt's graph seed");
  XF_ENSURE(cfg->threshold > 0 && cfg->threshold <= 1, err, XF_EINVAL,
            "secure_aggregation.threshold %g is outside (0, 1]", cfg->threshold);
  XF_ENSURE(cfg->bits >= 8 && cfg->bits <= 32, err, XF_EINVAL,
            "secure_aggregation.bits %u is outside 8..32", cfg->bits);
  XF_ENSURE(cfg->n_params >= 1 && cfg->n_params <= XF_SECAGG_MAX_LENGTH, err, XF_EINVAL,
            "a model of %zu parameters cannot be aggregated securely (1..%llu)", cfg->n_params,
            (unsigned long long)XF_SECAGG_MAX_LENGTH);
  XF_ENSURE(cfg->clip > 0 && isfinite(cfg->clip), err, XF_EINVAL,
            "secure aggregation needs privacy.clip (> 0, finite; it is %g): it fixes the shared "
            "integer scale",
            cfg->clip);
  XF_ENSURE(cfg->noise_multiplier >= 0 && isfinite(cfg->noise_multiplier), err, XF_EINVAL,
            "the noise multiplier is %g; it must be 0 (no distributed noise) or positive",
            cfg->noise_multiplier);
  XF_ENSURE(cfg->quant_bits == 0 || (cfg->quant_bits >= 2 && cfg->quant_bits <= 32), err,
            XF_EINVAL, "compression.uplink quant_bits %u is neither 0 nor in 2..32",
            cfg->quant_bits);
  XF_ENSURE(cfg->topk_fraction >= 0 && cfg->topk_fraction <= 1, err, XF_EINVAL,
            "compression.uplink topk_fraction %g is outside [0, 1]", cfg->topk_fraction);
  XF_ENSURE(cfg->topk_fraction == 0 || cfg->n_params <= XF_CODEC_N_MAX, err, XF_EINVAL,
            "a shared random subset of a model of %zu parameters cannot be drawn (at most %u)",
            cfg->n_params, XF_CODEC_N_MAX);
  XF_ENSURE(cfg->phase_s > 0, err, XF_EINVAL,
            "a secure-aggregation phase must last more than 0 s (it is %g)", cfg->phase_s);
  uint64_t total = 0;
  for (uint32_t i = 0; cfg->weights && i < cfg->n; i++) {
    XF_ENSURE(cfg->weights[i] >= 1, err, XF_EINVAL,
              "site %llu has weight 0; a weight is its training records, at least 1",
              (unsigned long long)cfg->sites[i]);
    XF_ENSURE(total + cfg->weights[i] > total, err, XF_EINVAL,
              "the cohort's weights add up past 2^64");
    total += cfg->weights[i];
  }
  /* The sum of n sites' values must stay below 2^(bits-1) units (see
   * xf_saphase_create). */
  uint64_t half = 1ull << (cfg->bits - 1);
  if (cfg->quant_bits) {
    uint64_t per_site = 1ull << (cfg->quant_bits - 1); /* bound + 1 */
    if (per_site * cfg->n >= half) {
      unsigned need = xf__bits_above(per_site * cfg->n);
      return xf_fail(err, XF_ERANGE,
                     "secure_aggregation.bits %u cannot hold the sum of %u sites' q%u values; "
                     "raise bits to at least %u%s",
                     cfg->bits, cfg->n, cfg->quant_bits, need,
                     need > 32 ? " (more than the 32 secure aggregation allows: lower qN or "
                                 "the cohort)"
                               : "");
    }
  } else if (half < (uint64_t)cfg->n + 2) {
    unsigned need = xf__bits_above((uint64_t)cfg->n + 1);
    return xf_fail(err, XF_ERANGE,
                   "secure_aggregation.bits %u cannot hold the sum of %u sites' roundings; "
                   "raise bits to at least %u",
                   cfg->bits, cfg->n, need);
  }
  return XF_OK;
}

/* The per-site tables of a cohort of n; false when one cannot be had. */
static bool alloc_tables(xf_saphase *sa, uint32_t n) {
  sa->ids = xf_mallocarray(n, sizeof(*sa->ids));
  sa->places = xf_mallocarray(n, sizeof(*sa->places));
  sa->scale = xf_mallocarray(n, sizeof(*sa->scale));
  sa->weight = xf_mallocarray(n, sizeof(*sa->weight));
  sa->flags = xf_calloc(n, 1);
  sa->inputs = xf_calloc(n, sizeof(*sa->inputs));
  sa->adverts = xf_mallocarray(n, XF_SECAGG_ADVERT_BYTES);
  sa->u2 = xf_mallocarray(n, sizeof(*sa->u2));
  sa->u3 = xf_mallocarray(n, sizeof(*sa->u3));
  sa->survivors = xf_mallocarray(n, sizeof(*sa->survivors));
  sa->advert_sigs = xf_calloc(n, XF_SECAGG_SIG_BYTES);
  sa->certs = xf_calloc(n, sizeof(*sa->certs));
  sa->cert_lens = xf_calloc(n, sizeof(*sa->cert_lens));
  sa->check_sigs = xf_calloc(n, XF_SECAGG_SIG_BYTES);
  sa->signers = xf_mallocarray(n, sizeof(*sa->signers));
  sa->signer_sigs = xf_mallocarray(n, XF_SECAGG_SIG_BYTES);
  sa->cap_actions = (size_t)n + 3;
  sa->actions = xf_mallocarray(sa->cap_actions, sizeof(*sa->actions));
  return sa->ids && sa->places && sa->scale && sa->weight && sa->flags && sa->inputs &&
         sa->adverts && sa->u2 && sa->u3 && sa->survivors && sa->advert_sigs && sa->certs &&
         sa->cert_lens && sa->check_sigs && sa->signers && sa->signer_sigs && sa->actions;
}

/* The cohort's ids in order and their places sorted by id; a site listed
 * twice is refused. */
static xf_err place_sites(xf_saphase *sa, const xf_saphase_config *cfg, xf_errctx *err) {
  uint32_t n = cfg->n;
  for (uint32_t i = 0; i < n; i++) {
    sa->ids[i] = cfg->sites[i];
    sa->places[i] = (xf__place){.site = cfg->sites[i], .index = i + 1};
  }
  qsort(sa->places, n, sizeof(*sa->places), xf__cmp_place);
  for (uint32_t i = 1; i < n; i++) {
    if (sa->places[i].site == sa->places[i - 1].site) {
      return xf_fail(err, XF_EINVAL, "site %llu is listed twice in the cohort",
                     (unsigned long long)sa->places[i].site);
    }
  }
  return XF_OK;
}

/* Uplink top-k: every site sends the same random subset of coordinates
 * (what they leave out stays in their residuals). */
static xf_err draw_subset(xf_saphase *sa, const xf_saphase_config *cfg, xf_errctx *err) {
  if (!(cfg->topk_fraction > 0)) return XF_OK;
  sa->p.length = xf_codec_topk_count(cfg->topk_fraction, cfg->n_params);
  sa->subset_seed = cfg->subset_seed;
  sa->subset = xf_mallocarray(sa->p.length, sizeof(*sa->subset));
  if (!sa->subset) return xf_fail(err, XF_ENOMEM, "out of memory for the shared subset");
  xf_err rc = xf_codec_random_subset(sa->subset_seed, cfg->n_params, sa->p.length, sa->subset);
  if (rc != XF_OK)
    return xf_fail(err, rc, "cannot draw a shared subset of %llu of %zu parameters: %s",
                   (unsigned long long)sa->p.length, cfg->n_params, xf_strerror(rc));
  return XF_OK;
}

/* The sites' weights and scales, and the fixed-point grid their masked
 * inputs are drawn on. */
static void set_scale(xf_saphase *sa, const xf_saphase_config *cfg) {
  uint32_t n = cfg->n;
  /* Weights: each site's records (its share of the cohort's), or equal.
   * Sites scale their updates by them, so the masked sum is already the
   * weighted sum. */
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; i++) {
    sa->weight[i] = cfg->weights ? cfg->weights[i] : 1;
    total += sa->weight[i];
  }
  for (uint32_t i = 0; i < n; i++)
    sa->scale[i] = cfg->weights ? (double)sa->weight[i] / (double)total : 1.0 / (double)n;
  /* Each site's scaled update has coordinates within clip (its L2 norm is
   * at most clip, its scale at most 1); the sum of n of them, each rounded
   * by less than a unit, stays below 2^(bits-1) units. With uplink qN each
   * site's values are integers of N bits on the scale (xf__check_config
   * made sure n of them add up below 2^(bits-1)). */
  sa->fixed.bits = cfg->bits;
  sa->fixed.bound = (uint32_t)((1ull << (cfg->bits - 1)) - 1 - n);
  if (cfg->quant_bits) sa->fixed.bound = (uint32_t)((1ull << (cfg->quant_bits - 1)) - 1);
  /* Distributed noise rides on the same integers: the sites' shares add
   * up to about z C max(scale) sqrt(n / t) on each coordinate of the sum
   * (update/update.c), so the scale holds clip plus eight of those (a value
   * beyond it, about once in 10^15, is clipped by its site). Without this
   * the noise would be cut off wherever it exceeds the clip. */
  double range = cfg->clip;
  if (cfg->noise_multiplier > 0) {
    double top = 0;
    for (uint32_t i = 0; i < n; i++) top = sa->scale[i] > top ? sa->scale[i] : top;
    double sum_sd = cfg->noise_multiplier * cfg->clip * top *
                    sqrt((double)n / (double)sa->p.threshold);
    range += 8.0 * 1.05 * sum_sd; /* 1.05: the grid's slack on each share */
  }
  sa->fixed.step = range / (double)sa->fixed.bound;
}

xf_err xf_saphase_create(const xf_saphase_config *cfg, double now, xf_saphase **out,
                         xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "secure aggregation needs somewhere to put its state");
  *out = NULL;
  XF_GUARD(xf__check_config(cfg, err));
  uint32_t n = cfg->n;
  xf_saphase *sa = xf_calloc(1, sizeof(*sa));
  if (!sa) return xf_fail(err, XF_ENOMEM, "out of memory for secure aggregation");
  sa->p.n = n;
  uint32_t t = (uint32_t)ceil(cfg->threshold * (double)n - 1e-9);
  sa->p.threshold = t < 2 ? 2 : t > n ? n : t;
  /* The sites refuse a round that half of them could unmask
   * (crypto/secagg_guard.h): say so here, before anyone trains. */
  if (2 * (uint64_t)sa->p.threshold <= n) {
    xf_fail(err, XF_EINVAL,
            "secure_aggregation.threshold %g makes t = %u of %u sites, not more than half: "
            "against an aggregator that may lie to the sites it must be; raise it above 0.5",
            cfg->threshold, sa->p.threshold, n);
    xf_free(sa);
    return XF_EINVAL;
  }
  sa->p.bits = cfg->bits;
  sa->p.length = cfg->n_params;
  sa->p.degree = xf_secagg_default_degree(n);
  memcpy(sa->p.graph_seed, cfg->graph_seed, sizeof(sa->p.graph_seed));
  sa->n_params = cfg->n_params;
  sa->phase_s = cfg->phase_s < XF_SAPHASE_PHASE_MAX_S ? cfg->phase_s : XF_SAPHASE_PHASE_MAX_S;
  xf_err rc = XF_OK;
  if (!alloc_tables(sa, n)) {
    rc = xf_fail(err, XF_ENOMEM, "out of memory for secure aggregation of %u sites", n);
    goto fail;
  }
  if ((rc = place_sites(sa, cfg, err)) != XF_OK) goto fail;
  if ((rc = draw_subset(sa, cfg, err)) != XF_OK) goto fail;
  rc = xf_secagg_server_new(&sa->p, &sa->server, err);
  if (rc != XF_OK) goto fail;
  set_scale(sa, cfg);
  sa->waiting[0] = n;
  sa->state = XF_SAPHASE_ADVERT;
  sa->deadline = now + sa->phase_s;
  *out = sa;
  return XF_OK;
fail:
  xf_saphase_free(sa);
  return rc;
}

/* ---- inspection ----------------------------------------------------------------------------- */

uint32_t xf_saphase_index(const xf_saphase *sa, uint64_t site) {
  if (!sa) return 0;
  xf__place key = {.site = site};
  const xf__place *p = bsearch(&key, sa->places, sa->p.n, sizeof(key), xf__cmp_place);
  return p ? p->index : 0;
}

xf_err xf_saphase_setup(const xf_saphase *sa, uint64_t site, xf_update_secagg *out) {
  uint32_t i = xf_saphase_index(sa, site);
  if (!i) return XF_ENOENT;
  memset(out, 0, sizeof(*out));
  out->params = sa->p;
  out->index = i;
  out->fixed = sa->fixed;
  out->scale = sa->scale[i - 1];
  if (sa->subset) {
    out->subset = sa->p.length;
    out->subset_seed = sa->subset_seed;
  }
  return XF_OK;
}

const xf_secagg_params *xf_saphase_params(const xf_saphase *sa) { return &sa->p; }
const uint64_t *xf_saphase_cohort(const xf_saphase *sa) { return sa->ids; }
xf_saphase_state xf_saphase_get_state(const xf_saphase *sa) { return sa->state; }

double xf_saphase_deadline(const xf_saphase *sa) {
  bool running = sa->state == XF_SAPHASE_ADVERT || sa->state == XF_SAPHASE_SHARE ||
                 sa->state == XF_SAPHASE_CHECK || sa->state == XF_SAPHASE_UNMASK;
  return running ? sa->deadline : INFINITY;
}

const xf_saphase_action *xf_saphase_actions(const xf_saphase *sa, size_t *n) {
  *n = sa->n_actions;
  return sa->actions;
}

const char *xf_saphase_failure(const xf_saphase *sa) {
  return sa->state == XF_SAPHASE_FAILED ? sa->failure : "";
}

uint64_t xf_saphase_prg_expansions(const xf_saphase *sa) {
  return xf_secagg_server_prg_expansions(sa->server);
}

/* ---- the phases ----------------------------------------------------------------------------- */

/* ADVERT is over: the keys go to every advertiser still in the round. */
static void xf__send_keys(xf_saphase *sa, double now) {
  uint32_t count = xf__count(sa, XF__ADVERTISED, XF__GONE);
  if (count < sa->p.threshold) {
    xf__fail(sa,
             "only %u of the cohort's %u sites sent their keys for secure aggregation, fewer "
             "than the threshold %u",
             count, sa->p.n, sa->p.threshold);
    return;
  }
  xf_secagg_server_adverts(sa->server, sa->adverts);
  /* Every advertiser's certificate, back to back, relayed with the keys. */
  size_t total = 0;
  for (uint32_t i = 0; i < sa->p.n; i++) total += sa->cert_lens[i];
  sa->cert_blob = xf_malloc(total ? total : 1);
  if (!sa->cert_blob) {
    xf__fail(sa, "out of memory relaying %u sites' certificates", sa->p.n);
    return;
  }
  for (uint32_t i = 0; i < sa->p.n; i++) {
    if (sa->cert_lens[i])
      memcpy(sa->cert_blob + sa->cert_blob_len, sa->certs[i], sa->cert_lens[i]);
    sa->cert_blob_len += sa->cert_lens[i];
    xf_free(sa->certs[i]);
    sa->certs[i] = NULL;
  }
  sa->state = XF_SAPHASE_SHARE;
  sa->deadline = now + sa->phase_s;
  for (uint32_t i = 1; i <= sa->p.n; i++) {
    uint8_t f = sa->flags[i - 1];
    if (f & XF__GONE) continue;
    if (!(f & XF__ADVERTISED)) {
      xf__drop(sa, i, "sent no keys for secure aggregation in time");
      continue;
    }
    xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_SEND_KEYS, sa->ids[i - 1]);
    a->adverts = sa->adverts;
    a->adverts_len = (size_t)sa->p.n * XF_SECAGG_ADVERT_BYTES;
    a->sigs = sa->advert_sigs;
    a->certs = sa->cert_blob;
    a->certs_len = sa->cert_blob_len;
    a->cert_lens = sa->cert_lens;
  }
}

/* SHARE is over: U2 is fixed and every sharer still in the round gets the
 * shares addressed to it, in the order they came. */
static void xf__route(xf_saphase *sa) {
  xf_errctx err = {0};
  if (xf_secagg_server_routed(sa->server, sa->u2, &sa->n_u2, &err) != XF_OK) {
    xf__fail(sa,
             "only %u of the cohort's %u sites sent their shares for secure aggregation, fewer "
             "than the threshold %u",
             xf__count(sa, XF__SHARED, 0), sa->p.n, sa->p.threshold);
    return;
  }
  /* A counting sort by receiver, stable so that each receiver's shares keep
   * their order of arrival. */
  size_t *start = xf_calloc((size_t)sa->p.n + 2, sizeof(*start));
  sa->route_from = xf_mallocarray(sa->n_shares ? sa->n_shares : 1, sizeof(*sa->route_from));
  sa->route_cts = xf_mallocarray(sa->n_shares ? sa->n_shares : 1, sizeof(*sa->route_cts));
  sa->route_sigs = xf_mallocarray(sa->n_shares ? sa->n_shares : 1, XF_SECAGG_SIG_BYTES);
  sa->routed = true; /* released at the next event, whatever happens here */
  if (!start || !sa->route_from || !sa->route_cts || !sa->route_sigs) {
    xf_free(start);
    xf__fail(sa, "out of memory routing the shares of %zu sites", sa->n_u2);
    return;
  }
  for (size_t m = 0; m < sa->n_shares; m++) start[sa->shares[m].to + 1]++;
  for (uint32_t i = 1; i <= sa->p.n + 1; i++) start[i] += start[i - 1];
  /* start[j] is where the shares for site j begin; placing them moves it to
   * where they end, which is where those for site j + 1 begin. */
  for (size_t m = 0; m < sa->n_shares; m++) {
    const xf__share *sh = &sa->shares[m];
    size_t k = start[sh->to]++;
    sa->route_from[k] = sh->from;
    sa->route_cts[k] = sh->ct;
    memcpy(sa->route_sigs + k * XF_SECAGG_SIG_BYTES, sh->sig, XF_SECAGG_SIG_BYTES);
  }
  sa->state = XF_SAPHASE_MASKED;
  sa->deadline = INFINITY;
  for (uint32_t i = 1; i <= sa->p.n; i++) {
    uint8_t f = sa->flags[i - 1];
    if (f & XF__GONE) continue;
    if (!(f & XF__SHARED)) {
      if (f & XF__ADVERTISED) xf__drop(sa, i, "sent no shares for secure aggregation in time");
      continue;
    }
    size_t lo = start[i - 1], hi = start[i];
    xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_SEND_ROUTED, sa->ids[i - 1]);
    a->u2 = sa->u2;
    a->n_u2 = sa->n_u2;
    a->from = sa->route_from + lo;
    a->cts = sa->route_cts + lo;
    a->sigs = sa->route_sigs + lo * XF_SECAGG_SIG_BYTES;
    a->n_cts = hi - lo;
  }
  xf_free(start);
}

/* The round closed: the masked inputs of the sites still in it go into the
 * sum, U3 is fixed and asked to sign it. */
static void xf__unmask_start(xf_saphase *sa, double now) {
  if (sa->state == XF_SAPHASE_ADVERT || sa->state == XF_SAPHASE_SHARE) {
    xf__fail(sa, "the round closed in the %s phase of secure aggregation, before the shares "
                 "were routed: there is no masked input to unmask",
             xf_saphase_state_name(sa->state));
    return;
  }
  if (sa->state != XF_SAPHASE_MASKED) return;
  xf_errctx err = {0};
  for (uint32_t i = 1; i <= sa->p.n; i++) {
    uint32_t *in = sa->inputs[i - 1];
    if (!in) continue;
    if (xf_secagg_server_add_masked(sa->server, i, 0, sa->p.length, in, &err) != XF_OK)
      xf__drop(sa, i, "its masked input could not be added to the sum: %s", err.msg);
    xf__wipe_input(sa, i);
  }
  uint32_t have = xf__count(sa, XF__MASKED, XF__GONE);
  if (have < sa->p.threshold) {
    xf__fail(sa,
             "only %u of the cohort's %u sites are still in the round with their masked input, "
             "fewer than the threshold %u",
             have, sa->p.n, sa->p.threshold);
    return;
  }
  if (xf_secagg_server_survivors(sa->server, sa->u3, &sa->n_u3, &err) != XF_OK) {
    xf__fail(sa, "%s", err.msg);
    return;
  }
  sa->state = XF_SAPHASE_CHECK;
  sa->deadline = now + sa->phase_s;
  for (size_t m = 0; m < sa->n_u3; m++) {
    uint32_t i = sa->u3[m];
    xf__flag(sa, i, XF__SURVIVOR);
    sa->survivors[m] = sa->ids[i - 1];
    if (sa->flags[i - 1] & XF__GONE) continue;
    xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_SEND_CHECK, sa->ids[i - 1]);
    a->u3 = sa->u3;
    a->n_u3 = sa->n_u3;
  }
}

/* CHECK is over: the survivors that signed U3 get every signature and are
 * asked to reveal. A site reveals only with t signatures of the same U3,
 * so fewer than t signers fail the round here. A signer that left since
 * still counts as a signature; it is not asked. */
static void xf__ask_reveals(xf_saphase *sa, double now) {
  sa->n_signers = 0;
  for (size_t m = 0; m < sa->n_u3; m++) {
    uint32_t i = sa->u3[m];
    if (!(sa->flags[i - 1] & XF__SIGNED)) continue;
    memcpy(sa->signer_sigs + sa->n_signers * XF_SECAGG_SIG_BYTES,
           sa->check_sigs + (size_t)(i - 1) * XF_SECAGG_SIG_BYTES, XF_SECAGG_SIG_BYTES);
    sa->signers[sa->n_signers++] = i;
  }
  if (sa->n_signers < sa->p.threshold) {
    xf__fail(sa,
             "only %zu of the %zu survivors signed the survivor set, fewer than the threshold "
             "%u: no site reveals without that many signatures",
             sa->n_signers, sa->n_u3, sa->p.threshold);
    return;
  }
  sa->state = XF_SAPHASE_UNMASK;
  sa->deadline = now + sa->phase_s;
  for (size_t m = 0; m < sa->n_signers; m++) {
    uint32_t i = sa->signers[m];
    if (sa->flags[i - 1] & XF__GONE) continue;
    xf_saphase_action *a = xf__push(sa, XF_SAPHASE_ACT_SEND_UNMASK, sa->ids[i - 1]);
    a->u3 = sa->u3;
    a->n_u3 = sa->n_u3;
    a->signers = sa->signers;
    a->n_signers = sa->n_signers;
    a->sigs = sa->signer_sigs;
  }
}

/* UNMASK is over: unmasks the sum with the shares at hand and forms the
 * mean. */
static void xf__finish(xf_saphase *sa) {
  xf_errctx err = {0};
  uint32_t *sum = xf_mallocarray(sa->p.length, sizeof(*sum));
  float *part = xf_mallocarray(sa->p.length, sizeof(*part));
  float *mean = sa->subset ? xf_calloc(sa->n_params, sizeof(*mean)) : part;
  if (!sum || !part || !mean || xf_secagg_server_finish(sa->server, sum, &err) != XF_OK) {
    xf_free(sum);
    if (mean != part) xf_free(mean);
    xf_free(part);
    if (sum && part && mean) xf__fail(sa, "%s", err.msg);
    else xf__fail(sa, "out of memory unmasking a sum of %llu values",
                  (unsigned long long)sa->p.length);
    return;
  }
  xf_codec_dequantize_fixed(&sa->fixed, sum, sa->p.length, part);
  xf_free(sum);
  if (sa->subset) { /* the subset's values at their places, zero elsewhere */
    for (uint64_t k = 0; k < sa->p.length; k++) mean[sa->subset[k]] = part[k];
    xf_free(part);
  }
  /* The sum is of the survivors' scaled updates: rescale to their mean. */
  double have = 0, total = 0;
  for (uint32_t i = 0; i < sa->p.n; i++) total += sa->scale[i];
  uint64_t w = 0;
  for (size_t m = 0; m < sa->n_u3; m++) {
    have += sa->scale[sa->u3[m] - 1];
    w += sa->weight[sa->u3[m] - 1];
  }
  float f = (float)(total / have);
  for (size_t k = 0; k < sa->n_params; k++) mean[k] *= f;
  sa->mean = mean;
  sa->mean_weight = w;
  sa->state = XF_SAPHASE_DONE;
  sa->deadline = INFINITY;
  xf__push(sa, XF_SAPHASE_ACT_DONE, 0);
}

/* Moves a phase on once every site it waits for has answered or left, or
 * at its deadline. */
static void xf__check(xf_saphase *sa, double now, bool timed_out) {
  bool waiting = false;
  switch (sa->state) {
  case XF_SAPHASE_ADVERT: waiting = sa->waiting[0] > 0; break;
  case XF_SAPHASE_SHARE: waiting = sa->waiting[1] > 0; break;
  case XF_SAPHASE_CHECK: waiting = sa->waiting[2] > 0; break;
  case XF_SAPHASE_UNMASK: waiting = sa->waiting[3] > 0; break;
  default: return;
  }
  if (waiting && !timed_out) return;
  if (sa->state == XF_SAPHASE_ADVERT) xf__send_keys(sa, now);
  else if (sa->state == XF_SAPHASE_SHARE) xf__route(sa);
  else if (sa->state == XF_SAPHASE_CHECK) {
    xf__ask_reveals(sa, now);
    /* Every signer may have left already: nothing more to wait for. */
    if (sa->state == XF_SAPHASE_UNMASK && sa->waiting[3] == 0) xf__finish(sa);
  } else
    xf__finish(sa);
}

/* ---- events --------------------------------------------------------------------------------- */

/* Starts an event for a message of `site` about `what` and finds its
 * index *i. XF_ENOENT outside the cohort, XF_EINVAL once the machine is
 * over; nothing is queued for either. */
static xf_err xf__message(xf_saphase *sa, uint64_t site, const char *what, uint32_t *i,
                          xf_errctx *err) {
  xf__begin(sa);
  *i = xf_saphase_index(sa, site);
  XF_ENSURE(*i, err, XF_ENOENT,
            "site %llu sent %s but is not in this secure aggregation's cohort of %u sites",
            (unsigned long long)site, what, sa->p.n);
  XF_ENSURE(sa->state != XF_SAPHASE_DONE && sa->state != XF_SAPHASE_FAILED, err, XF_EINVAL,
            "site %llu sent %s after secure aggregation was %s", (unsigned long long)site, what,
            xf_saphase_state_name(sa->state));
  return XF_OK;
}

/* Refuses site i's message: DROP with why, and `code` with the same words
 * (naming the site) in err. */
static xf_err xf__refuse(xf_saphase *sa, uint32_t i, xf_errctx *err, xf_err code,
                        const char *fmt, ...) XF_PRINTF(5, 6);
static xf_err xf__refuse(xf_saphase *sa, uint32_t i, xf_errctx *err, xf_err code,
                        const char *fmt, ...) {
  char why[XF_SAPHASE_WHY_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof(why), fmt, ap);
  va_end(ap);
  xf__drop(sa, i, "%s", why);
  return xf_fail(err, code, "site %llu: %s", (unsigned long long)sa->ids[i - 1], why);
}

/* Whether site i may send `what` in phase `phase`; if not, it is refused. */
static xf_err xf__in_turn(xf_saphase *sa, uint32_t i, xf_saphase_state phase, const char *what,
                          xf_errctx *err) {
  if (sa->flags[i - 1] & XF__GONE)
    return xf__refuse(sa, i, err, XF_EINVAL, "sent %s after it had left the round", what);
  if (sa->state != phase)
    return xf__refuse(sa, i, err, XF_EINVAL,
                      "sent %s out of turn: secure aggregation is in its %s phase, not %s", what,
                      xf_saphase_state_name(sa->state), xf_saphase_state_name(phase));
  return XF_OK;
}

/* Takes site i's keys, their signature and its certificate. */
static xf_err xf__take_advert(xf_saphase *sa, uint32_t i, const xf_saphase_keys *k,
                              xf_errctx *err) {
  XF_GUARD(xf__in_turn(sa, i, XF_SAPHASE_ADVERT, "keys", err));
  if (!k || !k->advert || k->advert_len != XF_SECAGG_ADVERT_BYTES)
    return xf__refuse(sa, i, err, XF_EFORMAT, "sent keys of %zu bytes, not %d",
                      k && k->advert ? k->advert_len : 0, XF_SECAGG_ADVERT_BYTES);
  if (!k->sig || k->sig_len != XF_SECAGG_SIG_BYTES)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent keys with a signature of %zu bytes, not %d: the other sites would "
                      "refuse them",
                      k->sig ? k->sig_len : 0, XF_SECAGG_SIG_BYTES);
  if (!k->cert || k->cert_len < 1 || k->cert_len > XF_SECAGG_CERT_MAX)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent keys with a certificate of %zu bytes, not 1 to %d",
                      k->cert ? k->cert_len : 0, XF_SECAGG_CERT_MAX);
  uint8_t *cert = xf_malloc(k->cert_len);
  if (!cert) return xf__refuse(sa, i, err, XF_ENOMEM, "out of memory holding its certificate");
  xf_errctx why = {0};
  xf_err rc = xf_secagg_server_advert(sa->server, i, k->advert, &why);
  if (rc != XF_OK) {
    xf_free(cert);
    return xf__refuse(sa, i, err, rc, "its keys were refused: %s", why.msg);
  }
  memcpy(cert, k->cert, k->cert_len);
  sa->certs[i - 1] = cert;
  sa->cert_lens[i - 1] = (uint32_t)k->cert_len;
  memcpy(sa->advert_sigs + (size_t)(i - 1) * XF_SECAGG_SIG_BYTES, k->sig, XF_SECAGG_SIG_BYTES);
  xf__flag(sa, i, XF__ADVERTISED);
  return XF_OK;
}

xf_err xf_saphase_advert(xf_saphase *sa, uint64_t site, const xf_saphase_keys *keys, double now,
                         xf_errctx *err) {
  uint32_t i;
  XF_GUARD(xf__message(sa, site, "keys", &i, err));
  xf_err rc = xf__take_advert(sa, i, keys, err);
  xf__check(sa, now, false);
  return rc;
}

/* Whether site i's shares are well formed; if not, it is refused. */
static xf_err xf__shares_fit(xf_saphase *sa, uint32_t i, const xf_saphase_shares_msg *msg,
                             xf_errctx *err) {
  uint8_t f = sa->flags[i - 1];
  if (!(f & XF__ADVERTISED))
    return xf__refuse(sa, i, err, XF_EINVAL, "sent shares without having sent its keys");
  if (f & XF__SHARED) return xf__refuse(sa, i, err, XF_EEXISTS, "sent its shares twice");
  if (!msg) return xf__refuse(sa, i, err, XF_EFORMAT, "sent no shares message");
  size_t n = msg->n_to;
  if (msg->n_cts != n || msg->n_sigs != n)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent %zu receivers, %zu ciphertexts and %zu signatures; the three "
                      "lists must be equally long",
                      n, msg->n_cts, msg->n_sigs);
  if (n > sa->p.degree)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent %zu shares; a site has %u neighbours to share with", n,
                      sa->p.degree);
  if (n && (!msg->to || !msg->cts || !msg->ct_lens || !msg->sigs || !msg->sig_lens))
    return xf__refuse(sa, i, err, XF_EFORMAT, "sent %zu shares with a list missing", n);
  for (size_t k = 0; k < n; k++) {
    uint32_t j = msg->to[k];
    const char *wrong = NULL;
    if (j < 1 || j > sa->p.n) wrong = "is outside the cohort";
    else if (j == i) wrong = "is itself";
    else if (!msg->cts[k] || msg->ct_lens[k] != XF_SECAGG_SHARE_BYTES)
      wrong = "is not a share's length";
    else if (!msg->sigs[k] || msg->sig_lens[k] != XF_SECAGG_SIG_BYTES)
      wrong = "has no signature";
    for (size_t m = 0; !wrong && m < k; m++)
      if (msg->to[m] == j) wrong = "is named twice";
    if (!wrong && !xf_secagg_neighbours(&sa->p, i, j)) wrong = "is not its neighbour";
    if (wrong)
      return xf__refuse(sa, i, err, XF_EFORMAT,
                        "sent a malformed share: the receiver %u of its share %zu %s", j, k,
                        wrong);
  }
  return XF_OK;
}

/* Holds site i's shares for routing. */
static xf_err xf__take_shares(xf_saphase *sa, uint32_t i, const xf_saphase_shares_msg *msg,
                              xf_errctx *err) {
  XF_GUARD(xf__in_turn(sa, i, XF_SAPHASE_SHARE, "shares", err));
  XF_GUARD(xf__shares_fit(sa, i, msg, err));
  size_t n = msg->n_to;
  if (sa->n_shares + n > sa->cap_shares) {
    size_t cap = sa->cap_shares ? sa->cap_shares : 16;
    while (cap < sa->n_shares + n) cap *= 2;
    xf__share *g = xf_realloc(sa->shares, cap * sizeof(*g));
    if (!g) return xf__refuse(sa, i, err, XF_ENOMEM, "out of memory holding its %zu shares", n);
    sa->shares = g;
    sa->cap_shares = cap;
  }
  xf_errctx why = {0};
  xf_err rc = xf_secagg_server_shared(sa->server, i, &why);
  if (rc != XF_OK) return xf__refuse(sa, i, err, rc, "its shares were refused: %s", why.msg);
  for (size_t k = 0; k < n; k++) {
    xf__share *sh = &sa->shares[sa->n_shares++];
    sh->from = i;
    sh->to = msg->to[k];
    memcpy(sh->ct, msg->cts[k], XF_SECAGG_SHARE_BYTES);
    memcpy(sh->sig, msg->sigs[k], XF_SECAGG_SIG_BYTES);
  }
  xf__flag(sa, i, XF__SHARED);
  return XF_OK;
}

xf_err xf_saphase_shares(xf_saphase *sa, uint64_t site, const xf_saphase_shares_msg *msg,
                         double now, xf_errctx *err) {
  uint32_t i;
  XF_GUARD(xf__message(sa, site, "shares", &i, err));
  xf_err rc = xf__take_shares(sa, i, msg, err);
  xf__check(sa, now, false);
  return rc;
}

/* Holds site i's masked input. */
static xf_err xf__take_masked(xf_saphase *sa, uint32_t i, uint32_t **words, size_t n_words,
                              xf_errctx *err) {
  XF_GUARD(xf__in_turn(sa, i, XF_SAPHASE_MASKED, "a masked input", err));
  uint8_t f = sa->flags[i - 1];
  if (!(f & XF__SHARED))
    return xf__refuse(sa, i, err, XF_EINVAL,
                      "sent a masked input, but its shares were not routed");
  if (f & XF__MASKED) return xf__refuse(sa, i, err, XF_EEXISTS, "sent its masked input twice");
  if (!words || !*words || n_words != sa->p.length)
    return xf__refuse(sa, i, err, XF_EFORMAT, "sent a masked input of %zu values, not %llu",
                      words && *words ? n_words : 0, (unsigned long long)sa->p.length);
  uint32_t over = sa->p.bits == 32 ? 0 : ~((1u << sa->p.bits) - 1), seen = 0;
  for (size_t k = 0; k < n_words; k++) seen |= (*words)[k] & over;
  if (seen)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent a masked input with values of more than %u bits", sa->p.bits);
  sa->inputs[i - 1] = *words;
  *words = NULL;
  xf__flag(sa, i, XF__MASKED);
  return XF_OK;
}

xf_err xf_saphase_masked(xf_saphase *sa, uint64_t site, uint32_t **words, size_t n_words,
                         double now, xf_errctx *err) {
  uint32_t i;
  XF_GUARD(xf__message(sa, site, "a masked input", &i, err));
  xf_err rc = xf__take_masked(sa, i, words, n_words, err);
  xf__check(sa, now, false);
  return rc;
}

/* Takes a survivor's signature of U3. */
static xf_err xf__take_check_sig(xf_saphase *sa, uint32_t i, const uint8_t *sig, size_t len,
                                 xf_errctx *err) {
  XF_GUARD(xf__in_turn(sa, i, XF_SAPHASE_CHECK, "a signature of the survivors", err));
  uint8_t f = sa->flags[i - 1];
  if (!(f & XF__SURVIVOR))
    return xf__refuse(sa, i, err, XF_EINVAL,
                      "sent a signature of the survivors, but it is not one of them");
  if (f & XF__SIGNED)
    return xf__refuse(sa, i, err, XF_EEXISTS, "signed the survivors twice");
  if (!sig || len != XF_SECAGG_SIG_BYTES)
    return xf__refuse(sa, i, err, XF_EFORMAT,
                      "sent a signature of the survivors of %zu bytes, not %d", sig ? len : 0,
                      XF_SECAGG_SIG_BYTES);
  memcpy(sa->check_sigs + (size_t)(i - 1) * XF_SECAGG_SIG_BYTES, sig, XF_SECAGG_SIG_BYTES);
  xf__flag(sa, i, XF__SIGNED);
  return XF_OK;
}

xf_err xf_saphase_check_sig(xf_saphase *sa, uint64_t site, const uint8_t *sig, size_t len,
                            double now, xf_errctx *err) {
  uint32_t i;
  XF_GUARD(xf__message(sa, site, "a signature of the survivors", &i, err));
  xf_err rc = xf__take_check_sig(sa, i, sig, len, err);
  xf__check(sa, now, false);
  return rc;
}

/* Takes a signer's reveal. */
static xf_err xf__take_reveal(xf_saphase *sa, uint32_t i, const uint8_t *msg, size_t len,
                              xf_errctx *err) {
  XF_GUARD(xf__in_turn(sa, i, XF_SAPHASE_UNMASK, "a reveal", err));
  if (!(sa->flags[i - 1] & XF__SIGNED))
    return xf__refuse(sa, i, err, XF_EINVAL,
                      "sent a reveal without having signed the survivors");
  if (!msg) return xf__refuse(sa, i, err, XF_EFORMAT, "sent an empty reveal");
  xf_errctx why = {0};
  xf_err rc = xf_secagg_server_add_reveal(sa->server, i, msg, len, &why);
  if (rc != XF_OK) return xf__refuse(sa, i, err, rc, "its reveal was refused: %s", why.msg);
  xf__flag(sa, i, XF__REVEALED);
  return XF_OK;
}

xf_err xf_saphase_reveal(xf_saphase *sa, uint64_t site, const uint8_t *msg, size_t len,
                         double now, xf_errctx *err) {
  uint32_t i;
  XF_GUARD(xf__message(sa, site, "a reveal", &i, err));
  xf_err rc = xf__take_reveal(sa, i, msg, len, err);
  xf__check(sa, now, false);
  return rc;
}

void xf_saphase_gone(xf_saphase *sa, uint64_t site, double now) {
  xf__begin(sa);
  uint32_t i = xf_saphase_index(sa, site);
  if (!i || (sa->flags[i - 1] & XF__GONE)) return;
  xf__flag(sa, i, XF__GONE);
  xf__wipe_input(sa, i);
  xf__check(sa, now, false);
}

void xf_saphase_refused(xf_saphase *sa, uint64_t site, double now) {
  uint32_t i = xf_saphase_index(sa, site);
  if (i && !(sa->flags[i - 1] & XF__GONE) && sa->state != XF_SAPHASE_DONE &&
      sa->state != XF_SAPHASE_FAILED && sa->refused++ == 0)
    sa->first_refuser = site;
  xf_saphase_gone(sa, site, now);
}

void xf_saphase_close(xf_saphase *sa, double now) {
  xf__begin(sa);
  xf__unmask_start(sa, now);
}

void xf_saphase_tick(xf_saphase *sa, double now) {
  xf__begin(sa);
  if (now >= xf_saphase_deadline(sa)) xf__check(sa, now, true);
}

xf_err xf_saphase_take_mean(xf_saphase *sa, float **mean, uint64_t *weight,
                            const uint64_t **survivors, size_t *n, xf_errctx *err) {
  XF_ENSURE(sa->state == XF_SAPHASE_DONE && sa->mean, err, XF_EINVAL,
            "secure aggregation has no mean to hand over: it is %s%s",
            xf_saphase_state_name(sa->state),
            sa->state == XF_SAPHASE_DONE ? " and the mean was taken" : "");
  *mean = sa->mean;
  sa->mean = NULL;
  *weight = sa->mean_weight;
  *survivors = sa->survivors;
  *n = sa->n_u3;
  return XF_OK;
}
