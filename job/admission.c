/* SPDX-License-Identifier: Apache-2.0 */
/* Admission of a job on a federation under a residency decision
 * (job/admission.h, docs/admission.md). */
#include "job/admission.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/text.h"
#include "crypto/digest.h"
#include "crypto/secagg.h"
#include "job/jobprivacy.h"

uint64_t xf_admit_site_id(const char *name) {
  xf_digest_ctx ctx;
  xf_digest d;
  xf_digest_init(&ctx);
  xf_digest_update(&ctx, "site:", 5);
  xf_digest_update(&ctx, name, strlen(name));
  xf_digest_final(&ctx, &d);
  uint64_t id = 0;
  for (int i = 7; i >= 0; i--) id = id << 8 | d.bytes[i];
  return id & ~(UINT64_C(1) << 63);
}

const char *xf_admit_verdict_name(xf_admit_verdict v) {
  switch (v) {
  case XF_ADMIT_RUNS: return "runs";
  case XF_ADMIT_DENIED: return "denied";
  case XF_ADMIT_UNRUNNABLE: return "unrunnable";
  case XF_ADMIT_SHORT: return "short";
  }
  return "unknown";
}

void xf_admission_free(xf_admission *a) {
  if (!a) return;
  xf_free(a->sites);
  xf_free(a->groups);
  memset(a, 0, sizeof(*a));
}

void xf_admit_group_release(const xf_admit_group *g, xf_release_rule *out) {
  *out = (xf_release_rule){.rule = g->rule,
                           .from = g->region,
                           .to = g->to,
                           .min_cohort = g->min_cohort,
                           .require_secagg = g->require_secagg,
                           .has_max_epsilon = g->has_max_epsilon,
                           .max_epsilon = g->max_epsilon};
}

char *xf_admission_refusal(const xf_admission *a, char *buf, size_t len) {
  if (!len) return buf;
  buf[0] = '\0';
  switch (a->verdict) {
  case XF_ADMIT_RUNS: break;
  case XF_ADMIT_DENIED:
    snprintf(buf, len, "the residency policy does not allow this job: %s", a->reason);
    break;
  case XF_ADMIT_UNRUNNABLE:
    snprintf(buf, len, "this job cannot run as composed: %s", a->reason);
    break;
  case XF_ADMIT_SHORT:
    snprintf(buf, len, "this job cannot run on the federation as it is now: %s", a->reason);
    break;
  }
  return buf;
}

const xf_admit_site *xf_admission_site(const xf_admission *a, uint64_t id) {
  for (size_t i = 0; i < a->n_sites; i++)
    if (a->sites[i].id == id) return &a->sites[i];
  return NULL;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static void say(char *buf, size_t len, const char *fmt, ...) XF_PRINTF(3, 4);
static void say(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

static const xf_fed_dataset *job_dataset(const xf_jobspec *spec, const xf_fed_site *s) {
  for (size_t i = 0; i < s->n_datasets; i++) {
    const xf_fed_dataset *d = &s->datasets[i];
    if (!d->name || strcmp(d->name, spec->data.dataset) != 0) continue;
    bool all = true;
    for (uint32_t t = 0; t < spec->data.n_tags && all; t++) {
      bool found = false;
      for (size_t u = 0; u < d->n_tags && !found; u++)
        found = d->tags[u] && strcmp(d->tags[u], spec->data.tags[t]) == 0;
      all = found;
    }
    if (all) return d;
  }
  return NULL;
}

/* The policy's decisions per site, by name, for lookups in O(log n): a
 * federation of ten thousand sites asks once for each. */
typedef struct decided_index {
  const xf_policy_site_decision **v; /* sorted by site name, then as decided */
  size_t n;
} decided_index;

static int by_decided(const void *x, const void *y) {
  const xf_policy_site_decision *a = *(const xf_policy_site_decision *const *)x;
  const xf_policy_site_decision *b = *(const xf_policy_site_decision *const *)y;
  int c = strcmp(a->site, b->site);
  return c ? c : (a > b) - (a < b);
}

static xf_err decided_index_make(const xf_policy_decision *d, decided_index *ix) {
  ix->v = NULL;
  ix->n = 0;
  if (!d || !d->n_sites) return XF_OK;
  ix->v = xf_calloc(d->n_sites, sizeof(*ix->v));
  if (!ix->v) return XF_ENOMEM;
  for (size_t i = 0; i < d->n_sites; i++) ix->v[i] = &d->sites[i];
  ix->n = d->n_sites;
  qsort(ix->v, ix->n, sizeof(*ix->v), by_decided);
  return XF_OK;
}

/* The first decision for site name, as a pass in order would find it. */
static const xf_policy_site_decision *decided_site(const decided_index *ix, const char *name) {
  size_t lo = 0, hi = ix->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(ix->v[mid]->site, name) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < ix->n && strcmp(ix->v[lo]->site, name) == 0 ? ix->v[lo] : NULL;
}

static const xf_policy_region_plan *decided_region(const xf_policy_decision *d, const char *region) {
  for (size_t i = 0; d && i < d->n_regions; i++)
    if (strcmp(d->regions[i].region, region) == 0) return &d->regions[i];
  return NULL;
}

/* The policy's decision as one paragraph: what is not allowed, per site,
 * and what would make it allowed. */
static void explain_decision(const xf_policy_decision *d, char *buf, size_t len) {
  size_t eligible = 0;
  for (size_t i = 0; i < d->n_sites; i++) eligible += d->sites[i].eligible;
  say(buf, len, "policy version %llu makes %zu of %zu sites eligible",
      (unsigned long long)d->version, eligible, d->n_sites);
  for (size_t i = 0; i < d->n_sites; i++)
    if (!d->sites[i].eligible) xf_text_append(buf, len, "%s: %s", d->sites[i].site, d->sites[i].why);
  for (size_t i = 0; i < d->n_suggestions; i++)
    xf_text_append(buf, len, "%s%s", i ? "" : "to allow it: ", d->suggestions[i]);
}

/* ---- sites ----------------------------------------------------------------------------------- */

/* Whether the site's dataset has the data's shape. */
static bool same_shape(const xf_admission *a, const xf_fed_dataset *d) {
  return d->h == a->h && d->w == a->w && d->c == a->c;
}

/* Decides one site that holds the job's data: eligible or not, and why. */
static void judge_site(const xf_jobspec *spec, const xf_policy_decision *decision,
                       const decided_index *ix, const xf_federation *fed, const xf_admission *a, const xf_fed_site *fs,
                       const xf_fed_dataset *ds, xf_admit_site *s) {
  snprintf(s->rule, sizeof(s->rule), "%s", decision ? "default" : "-");
  if (!fs->connected) {
    say(s->why, sizeof(s->why), "not connected%s", fs->via ? " (or its aggregator is not)" : "");
    return;
  }
  if (!same_shape(a, ds)) {
    say(s->why, sizeof(s->why),
        "its dataset '%s' holds %ux%ux%u records, the job's model takes %ux%ux%u (the first "
        "eligible site's)",
        ds->name, ds->h, ds->w, ds->c, a->h, a->w, a->c);
    return;
  }
  if (!fed->residency_on) {
    if (fs->via && spec->topology != XF_JOB_TOPOLOGY_REGIONAL) {
      say(s->why, sizeof(s->why),
          "it is behind regional aggregator %s: without a residency policy such sites take "
          "part only in jobs with \"topology\": \"regional\"",
          fs->via);
      return;
    }
    s->eligible = true;
    say(s->why, sizeof(s->why), "%s (no residency policy)",
        fs->via ? "through its regional aggregator" : "straight to the coordinator");
    return;
  }
  const xf_policy_site_decision *d = decided_site(ix, fs->name);
  if (!d) {
    say(s->why, sizeof(s->why),
        "policy version %llu does not list site %s with dataset '%s': add it (xfed policy site "
        "add, dataset add)",
        (unsigned long long)decision->version, fs->name, spec->data.dataset);
    return;
  }
  snprintf(s->rule, sizeof(s->rule), "%s", d->rule);
  s->has_max_epsilon = d->has_max_epsilon;
  s->max_epsilon = d->max_epsilon;
  if (strcmp(d->region, fs->region) != 0) {
    say(s->why, sizeof(s->why),
        "the policy places it in region %s, its certificate in %s: fix the policy or the "
        "certificate",
        d->region, fs->region);
    return;
  }
  if (!d->eligible) {
    snprintf(s->why, sizeof(s->why), "%s", d->why);
    return;
  }
  const xf_policy_region_plan *rp = decided_region(decision, fs->region);
  xf_policy_path path = rp ? rp->path : XF_POLICY_PATH_NONE;
  if (!fs->via && path != XF_POLICY_PATH_DIRECT) {
    if (path == XF_POLICY_PATH_REGIONAL)
      say(s->why, sizeof(s->why),
          "rule %s lets region %s's artifacts leave only as a regional aggregate, and this "
          "site reports straight to the coordinator: run it behind region %s's aggregator",
          rp->rule, fs->region, fs->region);
    else
      say(s->why, sizeof(s->why), "nothing of region %s may reach the coordinator", fs->region);
    return;
  }
  if (fs->via && path == XF_POLICY_PATH_NONE) {
    say(s->why, sizeof(s->why), "nothing of region %s may reach the coordinator", fs->region);
    return;
  }
  s->eligible = true;
  snprintf(s->why, sizeof(s->why), "%s", d->why);
}

/* ---- groups ---------------------------------------------------------------------------------- */

static xf_admit_group *group_for(xf_admission *a, const char *via, const char *region) {
  for (size_t i = 0; i < a->n_groups; i++)
    if (strcmp(a->groups[i].via, via) == 0) return &a->groups[i];
  xf_admit_group *g = &a->groups[a->n_groups++];
  memset(g, 0, sizeof(*g));
  snprintf(g->via, sizeof(g->via), "%s", via);
  g->via_id = *via ? xf_admit_site_id(via) : 0;
  snprintf(g->region, sizeof(g->region), "%s", region ? region : "");
  g->usable = true;
  return g;
}

static int by_group(const void *x, const void *y) {
  const xf_admit_group *a = x, *b = y;
  if (!a->via[0] != !b->via[0]) return a->via[0] ? 1 : -1; /* the direct group first */
  return strcmp(a->via, b->via);
}

/* Sets what a group must meet and whether it can: the release conditions
 * of its region's plan, secure aggregation within it, its fewest sites. */
static void judge_group(const xf_jobspec *spec, const xf_policy_decision *decision,
                        const xf_federation *fed, xf_admit_group *g) {
  const xf_privacy_spec *pv = &spec->privacy;
  bool regional = g->via[0] != '\0';
  g->secagg = spec->secure_aggregation.enabled;
  g->min_sites = g->secagg ? 2 : 1;
  snprintf(g->rule, sizeof(g->rule), "%s", decision ? "default" : "-");
  snprintf(g->path, sizeof(g->path), "%s", regional ? "regional" : "direct");
  snprintf(g->to, sizeof(g->to), "%s", fed->coordinator_region ? fed->coordinator_region : "");
  const xf_policy_region_plan *rp = regional ? decided_region(decision, g->region) : NULL;
  if (rp && rp->path == XF_POLICY_PATH_REGIONAL) {
    snprintf(g->rule, sizeof(g->rule), "%s", rp->rule);
    g->min_cohort = rp->min_cohort;
    g->require_secagg = rp->require_secagg;
    g->has_max_epsilon = rp->has_max_epsilon;
    g->max_epsilon = rp->max_epsilon;
    if (rp->min_cohort > g->min_sites) g->min_sites = rp->min_cohort;
  } else if (rp) {
    snprintf(g->path, sizeof(g->path), "direct");
  }
  if (g->eligible < g->min_sites) {
    g->usable = false;
    if (!regional)
      say(g->why, sizeof(g->why),
          "secure aggregation among the sites that report straight to the coordinator needs at "
          "least 2 of them, and %u %s eligible: route %s through its region's aggregator, add "
          "another direct site, or set secure_aggregation.enabled to false",
          g->eligible, g->eligible == 1 ? "is" : "are", g->eligible == 1 ? "it" : "them");
    else if (g->min_cohort > 1 && g->eligible < g->min_cohort)
      say(g->why, sizeof(g->why),
          "rule %s lets region %s's aggregate leave only with at least %u sites, and %u %s "
          "eligible behind %s",
          g->rule, g->region, g->min_cohort, g->eligible,
          g->eligible == 1 ? "is" : "are", g->via);
    else
      say(g->why, sizeof(g->why),
          "secure aggregation within %s needs at least 2 sites, and %u %s eligible behind it",
          g->via, g->eligible, g->eligible == 1 ? "is" : "are");
    return;
  }
  if (regional) {
    xf_release_artifact art = {.contributors = g->eligible,
                               .secagg = g->secagg,
                               .privacy = pv->mode != XF_PRIVACY_NONE,
                               .has_epsilon = pv->has_target_epsilon,
                               .epsilon = pv->target_epsilon};
    char why[300];
    xf_release_rule rule;
    xf_admit_group_release(g, &rule);
    if (!xf_release_allows(&rule, &art, why, sizeof(why))) {
      g->usable = false;
      say(g->why, sizeof(g->why), "region %s's aggregate: %s", g->region, why);
      return;
    }
    if (g->has_max_epsilon && pv->unit == XF_PRIVACY_UNIT_SITE &&
        pv->mode == XF_PRIVACY_CENTRAL) {
      g->usable = false;
      say(g->why, sizeof(g->why),
          "rule %s asks for differential privacy on region %s's aggregate as it leaves, but "
          "central noise is added at the coordinator, after it has left: use privacy mode "
          "\"distributed\" (with secure aggregation) or \"local\", or unit \"record\"",
          g->rule, g->region);
      return;
    }
  }
  if (g->secagg) {
    if (g->eligible > XF_SECAGG_MAX_SITES) {
      g->usable = false;
      say(g->why, sizeof(g->why), "secure aggregation over %u sites: at most %u take part in one",
          g->eligible, (unsigned)XF_SECAGG_MAX_SITES);
      return;
    }
    uint32_t q = spec->compression.uplink.quant_bits, bits = spec->secure_aggregation.bits;
    if (q) {
      uint64_t per_site = 1ull << (q - 1); /* a value's largest magnitude, plus one */
      if (per_site * g->eligible >= (1ull << (bits - 1))) {
        /* The fewest bits b with 2^(b-1) > per_site * n. */
        unsigned need = 1;
        while (need < 64 && (1ull << (need - 1)) <= per_site * g->eligible) need++;
        g->usable = false;
        say(g->why, sizeof(g->why),
            "secure_aggregation.bits %u cannot hold the sum of %u sites' q%u values; raise bits "
            "to at least %u%s",
            (unsigned)bits, g->eligible, (unsigned)q, need,
            need > 32 ? " (more than secure aggregation allows: lower qN or the cohort)" : "");
      }
    }
  }
}

/* ---- the composition ------------------------------------------------------------------------- */

static void describe(const xf_jobspec *spec, xf_admission *a) {
  char *buf = a->composition;
  size_t len = sizeof(a->composition);
  const char *strategy = xf_job_strategy_kind_name(spec->strategy.kind);
  unsigned direct = 0, regionals = 0;
  for (size_t i = 0; i < a->n_groups; i++) {
    if (!a->groups[i].usable) continue;
    if (a->groups[i].via[0]) regionals++;
    else direct = a->groups[i].eligible;
  }
  bool robust = xf_job_strategy_is_robust(spec->strategy.kind);
  if (!regionals)
    say(buf, len, "%s over %u sites' updates", robust ? strategy : "weighted mean", a->eligible);
  else if (robust)
    say(buf, len,
        "%s within each regional aggregator's sites, then a %s across %u regional input%s "
        "(each counting its sites) and %u direct site%s",
        strategy, strategy, regionals, regionals == 1 ? "" : "s", direct, direct == 1 ? "" : "s");
  else
    say(buf, len,
        "weighted mean: %u regional aggregate%s (each carrying its sites' weight) and %u "
        "direct site%s",
        regionals, regionals == 1 ? "" : "s", direct, direct == 1 ? "" : "s");
  if (spec->secure_aggregation.enabled && (direct || regionals))
    xf_text_append(buf, len, "secure aggregation %s%s%s", direct ? "among the direct sites" : "",
           direct && regionals ? " and " : "", regionals ? "within each regional aggregator" : "");
  if (xf_job_noise_in_sum(spec))
    xf_text_append(buf, len, "%s noise on the mean of every reporting site",
           spec->privacy.mode == XF_PRIVACY_CENTRAL ? "central" : "distributed");
}

/* ---- the decision ---------------------------------------------------------------------------- */

/* One announcement of the job's data, in the order gather_sites sorts them:
 * by name, a connected one first, then as announced. */
typedef struct holder {
  const xf_fed_site *fs;
  const xf_fed_dataset *d;
  size_t order;
} holder;

static int by_holder(const void *x, const void *y) {
  const holder *a = x, *b = y;
  int c = strcmp(a->fs->name, b->fs->name);
  if (c) return c;
  if (a->fs->connected != b->fs->connected) return a->fs->connected ? -1 : 1;
  return (a->order > b->order) - (a->order < b->order);
}

/* The sites that hold the job's data, by name (a name announced twice
 * counts once: its first connected announcement wins, else its first),
 * sorted by name, each keeping its dataset in data[] and its announcement
 * in from[]. One sort, so that ten thousand sites cost milliseconds, not
 * the seconds a pairwise pass over them takes. XF_ENOMEM. */
static xf_err gather_sites(const xf_jobspec *spec, const xf_federation *fed, xf_admission *out,
                           const xf_fed_dataset **data, const xf_fed_site **from) {
  holder *h = xf_calloc(fed->n_sites ? fed->n_sites : 1, sizeof(*h));
  if (!h) return XF_ENOMEM;
  size_t n = 0;
  for (size_t i = 0; i < fed->n_sites; i++) {
    const xf_fed_site *fs = &fed->sites[i];
    const xf_fed_dataset *d = fs->name ? job_dataset(spec, fs) : NULL;
    if (d) h[n++] = (holder){.fs = fs, .d = d, .order = i};
  }
  qsort(h, n, sizeof(*h), by_holder);
  for (size_t i = 0; i < n; i++) {
    if (i && strcmp(h[i].fs->name, h[i - 1].fs->name) == 0) continue;
    const xf_fed_site *fs = h[i].fs;
    xf_admit_site *s = &out->sites[out->n_sites];
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", fs->name);
    snprintf(s->region, sizeof(s->region), "%s", fs->region ? fs->region : "");
    snprintf(s->via, sizeof(s->via), "%s", fs->via ? fs->via : "");
    s->id = xf_admit_site_id(s->name);
    s->via_id = fs->via ? xf_admit_site_id(fs->via) : 0;
    s->connected = fs->connected;
    s->records = h[i].d->train_records;
    s->test_records = h[i].d->test_records;
    data[out->n_sites] = h[i].d;
    from[out->n_sites] = fs;
    out->n_sites++;
  }
  xf_free(h);
  return XF_OK;
}

/* The data's shape (the first connected site's, by name), each site
 * judged, and the groups over the eligible sites, judged in turn. */
static void judge_sites_and_groups(const xf_jobspec *spec, const xf_policy_decision *decision,
                                   const decided_index *ix,
                                   const xf_federation *fed, xf_admission *out,
                                   const xf_fed_dataset **data, const xf_fed_site **from) {
  for (size_t i = 0; i < out->n_sites; i++)
    if (from[i]->connected) {
      out->h = data[i]->h;
      out->w = data[i]->w;
      out->c = data[i]->c;
      break;
    }
  for (size_t i = 0; i < out->n_sites; i++) {
    judge_site(spec, decision, ix, fed, out, from[i], data[i], &out->sites[i]);
    if (out->sites[i].eligible && data[i]->classes > out->classes) out->classes = data[i]->classes;
  }

  /* Groups over the eligible sites. */
  for (size_t i = 0; i < out->n_sites; i++) {
    xf_admit_site *s = &out->sites[i];
    if (!s->eligible) continue;
    xf_admit_group *g = group_for(out, s->via, from[i]->via ? from[i]->via_region : "");
    if (!g->region[0] && from[i]->via) snprintf(g->region, sizeof(g->region), "%s", s->region);
    g->eligible++;
  }
  qsort(out->groups, out->n_groups, sizeof(*out->groups), by_group);
  for (size_t gi = 0; gi < out->n_groups; gi++) judge_group(spec, decision, fed, &out->groups[gi]);
}

/* Each eligible site joins its group, and leaves the job with the group's
 * reason when the group cannot run (by_group[i] marks those); the rest
 * are counted in out->eligible. */
static void place_sites_in_groups(xf_admission *out, bool *by_group) {
  for (size_t i = 0; i < out->n_sites; i++) {
    xf_admit_site *s = &out->sites[i];
    if (!s->eligible) continue;
    for (uint32_t gi = 0; gi < out->n_groups; gi++) {
      if (strcmp(out->groups[gi].via, s->via) != 0) continue;
      s->group = gi;
      if (!out->groups[gi].usable) {
        s->eligible = false;
        by_group[i] = true; /* its group's reason says why */
        snprintf(s->why, sizeof(s->why), "%s", out->groups[gi].why);
      }
    }
    if (s->eligible) out->eligible++;
  }
}

/* Why a job the federation could run otherwise has too few sites: a group
 * that cannot run for a reason of the spec makes it unrunnable as written;
 * otherwise it is short of connected sites. */
static void explain_too_few(const xf_jobspec *spec, xf_admission *out, const bool *by_group) {
  char *why = out->reason;
  size_t why_len = sizeof(out->reason);
  bool composed = false;
  for (size_t gi = 0; gi < out->n_groups; gi++) {
    const xf_admit_group *g = &out->groups[gi];
    if (!g->usable && g->eligible >= g->min_sites) composed = true;
  }
  out->verdict = composed ? XF_ADMIT_UNRUNNABLE : XF_ADMIT_SHORT;
  size_t holders = out->n_sites, connected = 0;
  for (size_t i = 0; i < out->n_sites; i++) connected += out->sites[i].connected;
  if (composed) {
    /* The setting at fault first, then the count. */
    for (size_t gi = 0; gi < out->n_groups; gi++)
      if (!out->groups[gi].usable && out->groups[gi].eligible >= out->groups[gi].min_sites)
        xf_text_append(why, why_len, "%s", out->groups[gi].why);
    xf_text_append(why, why_len, "that leaves %u site%s for min_sites %u", out->eligible,
           out->eligible == 1 ? "" : "s", (unsigned)spec->min_sites);
    return;
  }
  if (out->eligible == 0)
    say(why, why_len,
        "none of the %zu sites holding dataset '%s' (%zu connected) can take part, and min_sites "
        "is %u (counted in sites, whatever aggregators stand between)",
        holders, spec->data.dataset, connected, (unsigned)spec->min_sites);
  else if (out->eligible >= spec->min_sites)
    say(why, why_len,
        "sites_per_round %g of the %u eligible sites invites %u, below min_sites %u: raise "
        "sites_per_round or lower min_sites",
        spec->sites_per_round, out->eligible, out->invite, (unsigned)spec->min_sites);
  else
    say(why, why_len,
        "min_sites is %u (counted in sites, whatever aggregators stand between) and %u of the %zu "
        "sites holding dataset '%s' (%zu connected) can take part: lower min_sites to at most %u, "
        "or bring more sites in",
        (unsigned)spec->min_sites, out->eligible, holders, spec->data.dataset, connected,
        out->eligible);
  for (size_t gi = 0; gi < out->n_groups; gi++)
    if (!out->groups[gi].usable) xf_text_append(why, why_len, "%s", out->groups[gi].why);
  for (size_t i = 0; i < out->n_sites; i++)
    if (!out->sites[i].eligible && !by_group[i])
      xf_text_append(why, why_len, "%s: %s", out->sites[i].name, out->sites[i].why);
}

/* The verdict. Settings the whole job cannot run with come first. */
static void give_verdict(const xf_jobspec *spec, const xf_policy_decision *decision,
                         xf_admission *out, const bool *by_group) {
  const xf_privacy_spec *pv = &spec->privacy;
  char *why = out->reason;
  size_t why_len = sizeof(out->reason);
  if (spec->secure_aggregation.enabled && !(pv->clip > 0)) {
    out->verdict = XF_ADMIT_UNRUNNABLE;
    say(why, why_len,
        "privacy.clip: secure aggregation sums integers on a scale shared by the round's sites, "
        "which privacy.clip fixes: give privacy.clip (it may come without noise, with mode "
        "\"none\")");
    return;
  }
  if (xf_job_noise_in_sum(spec) && spec->sites_per_round > 1) {
    out->verdict = XF_ADMIT_UNRUNNABLE;
    say(why, why_len,
        "sites_per_round: is a count of sites; with %s privacy give it as a fraction in (0, 1], "
        "the sampling rate the accountant uses",
        xf_job_privacy_mode_name(pv->mode));
    return;
  }
  /* The policy is what refuses only when the federation could run the job
   * at all: fewer sites holding the data than min_sites is no rule's doing. */
  size_t holders_all = out->n_sites;
  if (decision && decision->n_sites > holders_all) holders_all = decision->n_sites;
  if (decision && !decision->allowed && holders_all >= spec->min_sites) {
    out->verdict = XF_ADMIT_DENIED;
    explain_decision(decision, why, why_len);
    return;
  }
  if (out->eligible >= spec->min_sites && out->invite >= spec->min_sites) return;
  explain_too_few(spec, out, by_group);
}

xf_err xf_admission_decide(const xf_jobspec *spec, const xf_policy_decision *decision,
                           const xf_federation *fed, xf_admission *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (fed->residency_on && !decision)
    return xf_fail(err, XF_EINVAL, "admission under a residency policy needs its decision");
  out->has_policy = decision != NULL;
  out->policy_version = decision ? decision->version : 0;
  size_t cap = fed->n_sites ? fed->n_sites : 1;
  out->sites = xf_calloc(cap, sizeof(*out->sites));
  out->groups = xf_calloc(cap + 1, sizeof(*out->groups));
  const xf_fed_dataset **data = xf_calloc(cap, sizeof(*data));
  const xf_fed_site **from = xf_calloc(cap, sizeof(*from));
  if (!out->sites || !out->groups || !data || !from) {
    xf_free(data);
    xf_free(from);
    xf_admission_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory admitting the job");
  }

  if (gather_sites(spec, fed, out, data, from) != XF_OK) {
    xf_free(data);
    xf_free(from);
    xf_admission_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory admitting the job");
  }
  decided_index ix;
  if (decided_index_make(decision, &ix) != XF_OK) {
    xf_free(data);
    xf_free(from);
    xf_admission_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory admitting the job");
  }
  judge_sites_and_groups(spec, decision, &ix, fed, out, data, from);
  xf_free(ix.v);
  bool *by_group = xf_calloc(out->n_sites ? out->n_sites : 1, sizeof(bool));
  if (!by_group) {
    xf_free(data);
    xf_free(from);
    xf_admission_free(out);
    return xf_fail(err, XF_ENOMEM, "out of memory admitting the job");
  }
  place_sites_in_groups(out, by_group);
  xf_free(data);
  xf_free(from);

  uint32_t target = 0;
  xf_jobspec_cohort(spec, out->eligible, &target, &out->invite);
  describe(spec, out);
  give_verdict(spec, decision, out, by_group);
  xf_free(by_group);
  return XF_OK;
}

/* ---- the dataset ------------------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The names of the datasets listed in the refusal; the rest are counted. */
#define KNOWN_SHOWN 12

xf_err xf_admission_check_dataset(const xf_jobspec *spec, const xf_federation *fed,
                                  const xf_policy *policy, xf_errctx *err) {
  const char *want = spec->data.dataset;
  size_t cap = policy ? policy->n_datasets : 0, n = 0;
  for (size_t i = 0; i < fed->n_sites; i++) cap += fed->sites[i].n_datasets;
  if (cap == 0) return XF_OK;
  const char **names = xf_calloc(cap, sizeof(*names));
  if (!names) return xf_fail(err, XF_ENOMEM, "out of memory listing the datasets");
  bool by_sites = false, by_policy = false;
  for (size_t i = 0; i < fed->n_sites; i++)
    for (size_t d = 0; d < fed->sites[i].n_datasets; d++) {
      const char *name = fed->sites[i].datasets[d].name;
      if (!name) continue;
      names[n++] = name;
      by_sites = true;
    }
  for (size_t i = 0; policy && i < policy->n_datasets; i++) {
    names[n++] = policy->datasets[i].name;
    by_policy = true;
  }
  for (size_t i = 0; i < n; i++)
    if (strcmp(names[i], want) == 0) {
      xf_free(names);
      return XF_OK;
    }
  qsort(names, n, sizeof(*names), by_name);
  size_t distinct = 0;
  for (size_t i = 0; i < n; i++)
    if (distinct == 0 || strcmp(names[distinct - 1], names[i]) != 0) names[distinct++] = names[i];
  xf_text_nearest near;
  xf_text_nearest_start(&near, want);
  for (size_t i = 0; i < distinct; i++) xf_text_nearest_offer(&near, names[i]);
  const char *hint = xf_text_nearest_best(&near);
  char list[KNOWN_SHOWN * (XF_POLICY_NAME_MAX + 2) + 32];
  size_t used = 0;
  list[0] = '\0';
  for (size_t i = 0; i < distinct && i < KNOWN_SHOWN && used < sizeof(list); i++) {
    int w = snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "", names[i]);
    if (w > 0) used += (size_t)w;
  }
  if (distinct > KNOWN_SHOWN && used < sizeof(list))
    snprintf(list + used, sizeof(list) - used, " and %zu more", distinct - KNOWN_SHOWN);
  xf_errctx_field(err, "data.dataset");
  xf_err rc = xf_fail(err, XF_EINVAL,
                      "no site holds a dataset '%s'; the datasets %s %s %s%s%s%s", want,
                      by_sites && by_policy ? "sites have registered or the residency policy lists"
                      : by_sites            ? "sites have registered"
                                            : "the residency policy lists",
                      distinct == 1 ? "is" : "are", list, hint ? "; did you mean '" : "",
                      hint ? hint : "", hint ? "'?" : "");
  xf_free(names);
  return rc;
}

/* ---- JSON ---------------------------------------------------------------------------------------- */

xf_err xf_admission_json(const xf_admission *a, const xf_jobspec *spec, char **text,
                         xf_errctx *err) {
  *text = NULL;
  json_t *sites = json_array(), *groups = json_array();
  for (size_t i = 0; sites && i < a->n_sites; i++) {
    const xf_admit_site *s = &a->sites[i];
    json_array_append_new(
        sites, json_pack("{s:s,s:s,s:s,s:b,s:b,s:s,s:s}", "site", s->name, "region", s->region,
                         "via", s->via, "connected", s->connected, "eligible", s->eligible,
                         "rule", s->rule, "reason", s->why));
  }
  for (size_t i = 0; groups && i < a->n_groups; i++) {
    const xf_admit_group *g = &a->groups[i];
    json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:b,s:s,s:s,s:i,s:b,s:b,s:s}", "via", g->via,
                          "region", g->region, "eligible", (int)g->eligible, "min_sites",
                          (int)g->min_sites, "secagg", g->secagg, "rule", g->rule, "path",
                          g->path, "min_cohort", (int)g->min_cohort, "require_secagg",
                          g->require_secagg, "usable", g->usable, "reason", g->why);
    if (o)
      json_object_set_new(o, "max_epsilon",
                          g->has_max_epsilon ? json_real(g->max_epsilon) : json_null());
    json_array_append_new(groups, o);
  }
  json_t *o = json_pack("{s:s,s:s,s:i,s:i,s:i,s:s,s:o,s:o}", "verdict",
                        xf_admit_verdict_name(a->verdict), "reason", a->reason, "eligible",
                        (int)a->eligible, "invite", (int)a->invite, "min_sites",
                        (int)spec->min_sites, "composition", a->composition, "sites", sites,
                        "groups", groups);
  if (o)
    json_object_set_new(o, "policy_version",
                        a->has_policy ? json_integer((json_int_t)a->policy_version) : json_null());
  char *dumped = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (!dumped) return xf_fail(err, XF_ENOMEM, "out of memory writing the admission");
  *text = xf_strdup(dumped);
  free(dumped); /* jansson's */
  return *text ? XF_OK : xf_fail(err, XF_ENOMEM, "out of memory writing the admission");
}
