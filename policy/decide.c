/* SPDX-License-Identifier: Apache-2.0 */
/* xf_policy_decide: one job against one policy version, giving per-site
 * eligibility, the rule that decided, the aggregation plan per region and
 * what would make the job allowed (docs/policy.md, "The decision"). */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "policy/policy.h"

const char *xf_policy_path_name(xf_policy_path p) {
  switch (p) {
  case XF_POLICY_PATH_NONE: return "none";
  case XF_POLICY_PATH_DIRECT: return "direct";
  case XF_POLICY_PATH_REGIONAL: return "regional";
  }
  return "?";
}

void xf_policy_decision_free(xf_policy_decision *d) {
  if (!d) return;
  xf_free(d->sites);
  xf_free(d->regions);
  xf_free(d->suggestions);
  memset(d, 0, sizeof(*d));
}

/* Suggestions gathered for one site; they reach the decision only when the
 * site ends up not eligible. Bounded: a site meets at most a few conditions
 * per path, and more advice than this helps no one. */
#define HINTS_MAX 8
typedef struct hints {
  size_t n;
  char text[HINTS_MAX][XF_POLICY_SUGGESTION_MAX];
} hints;

static void hint(hints *h, const char *fmt, ...) XF_PRINTF(2, 3);
static void hint(hints *h, const char *fmt, ...) {
  char s[XF_POLICY_SUGGESTION_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s, sizeof(s), fmt, ap);
  va_end(ap);
  for (size_t i = 0; i < h->n; i++)
    if (strcmp(h->text[i], s) == 0) return;
  if (h->n < HINTS_MAX) memcpy(h->text[h->n++], s, sizeof(s));
}

static xf_err suggest(xf_policy_decision *out, const char *s, xf_errctx *err) {
  for (size_t i = 0; i < out->n_suggestions; i++)
    if (strcmp(out->suggestions[i], s) == 0) return XF_OK;
  char(*grown)[XF_POLICY_SUGGESTION_MAX] =
      xf_realloc(out->suggestions, (out->n_suggestions + 1) * sizeof(*grown));
  if (!grown) return xf_fail(err, XF_ENOMEM, "cannot hold the decision");
  out->suggestions = grown;
  snprintf(grown[out->n_suggestions++], XF_POLICY_SUGGESTION_MAX, "%s", s);
  return XF_OK;
}

static int site_by_name(const void *key, const void *elem) {
  return strcmp((const char *)key, ((const xf_policy_site *)elem)->name);
}

/* Sites are sorted by name (xf_policy_parse). */
static const xf_policy_site *site_of(const xf_policy *p, const char *name) {
  if (!p->n_sites) return NULL;
  return bsearch(name, p->sites, p->n_sites, sizeof(*p->sites), site_by_name);
}

static bool has_tag(const xf_policy_dataset *d, const char *tag) {
  for (size_t i = 0; i < d->n_tags; i++)
    if (strcmp(d->tags[i], tag) == 0) return true;
  return false;
}

/* Whether rule r speaks about this artifact: its kind, a selector that holds
 * for the dataset, a destination covering `to`, and now inside its window. */
static bool rule_applies(const xf_policy_rule *r, xf_policy_kind kind, const xf_policy_dataset *d,
                         const char *region, const char *to, double now) {
  const xf_policy_selector *s = &r->select;
  if (r->kind != kind) return false;
  if (s->region[0] && strcmp(s->region, region) != 0) return false;
  if (s->site[0] && strcmp(s->site, d->site) != 0) return false;
  if (s->dataset[0] && strcmp(s->dataset, d->name) != 0) return false;
  if (s->classification && s->classification != d->classification) return false;
  if (s->tag[0] && !has_tag(d, s->tag)) return false;
  if (r->has_valid_from && now < r->valid_from) return false;
  if (r->has_valid_until && now >= r->valid_until) return false;
  for (size_t i = 0; i < r->n_dests; i++)
    if (strcmp(r->dests[i], "*") == 0 || strcmp(r->dests[i], to) == 0) return true;
  return false;
}

/* The conditions of an allow rule that the job itself can meet (min_cohort of
 * a regional aggregate depends on the federation and is checked per region);
 * each unmet one leaves a hint. */
static bool conditions_hold(const xf_policy_rule *r, const xf_policy_job *job, const char *region,
                            hints *h) {
  bool ok = true;
  if (r->has_max_epsilon) {
    if (!job->privacy) {
      hint(h, "add privacy with epsilon <= %g", r->max_epsilon);
      ok = false;
    } else if (job->epsilon > r->max_epsilon) {
      hint(h, "lower epsilon to <= %g (the job spends %g)", r->max_epsilon, job->epsilon);
      ok = false;
    }
  }
  if (r->require_secagg && !job->secagg) {
    hint(h, "enable secure aggregation");
    ok = false;
  }
  if (r->kind == XF_POLICY_KIND_UPDATE && r->min_cohort) {
    unsigned quorum = job->min_sites ? job->min_sites : 1;
    if (quorum < r->min_cohort) {
      hint(h, "set min_sites >= %u (rule '%s' for %s updates)", r->min_cohort, r->id, region);
      ok = false;
    }
  }
  return ok;
}

/* The outcome of one artifact kind for one site. */
typedef struct verdict {
  const xf_policy_rule *deny;    /* a valid deny that applies: beats any allow */
  const xf_policy_rule *allow;   /* the first allow whose conditions hold */
  const xf_policy_rule *blocked; /* the first allow that applies but whose conditions fail */
} verdict;

/* The rules one decision can use, per artifact kind: those that cover the
 * coordinator's region and are valid now, in the policy's order. Built once
 * per decision, so that each site looks only at rules that could apply to
 * it (with 10,000 rules, most are about other kinds and destinations). */
typedef struct candidates {
  const xf_policy_rule **rules[2]; /* [0] update, [1] regional_aggregate */
  size_t n[2];
} candidates;

static xf_err candidates_make(const xf_policy *p, const xf_policy_job *job, double now,
                              candidates *c, xf_errctx *err) {
  memset(c, 0, sizeof(*c));
  for (int k = 0; k < 2; k++) {
    c->rules[k] = p->n_rules ? xf_calloc(p->n_rules, sizeof(*c->rules[k])) : NULL;
    if (p->n_rules && !c->rules[k]) return xf_fail(err, XF_ENOMEM, "cannot hold the decision");
  }
  for (size_t i = 0; i < p->n_rules; i++) {
    const xf_policy_rule *r = &p->rules[i];
    int k = r->kind == XF_POLICY_KIND_UPDATE               ? 0
            : r->kind == XF_POLICY_KIND_REGIONAL_AGGREGATE ? 1
                                                           : -1;
    if (k < 0) continue;
    if (r->has_valid_from && now < r->valid_from) continue;
    if (r->has_valid_until && now >= r->valid_until) continue;
    bool to = false;
    for (size_t j = 0; j < r->n_dests && !to; j++)
      to = strcmp(r->dests[j], "*") == 0 || strcmp(r->dests[j], job->coordinator_region) == 0;
    if (to) c->rules[k][c->n[k]++] = r;
  }
  return XF_OK;
}

static void candidates_free(candidates *c) {
  xf_free(c->rules[0]);
  xf_free(c->rules[1]);
}

static verdict judge(const candidates *c, xf_policy_kind kind, const xf_policy_dataset *d,
                     const char *region, const xf_policy_job *job, double now, hints *h) {
  verdict v = {0};
  int k = kind == XF_POLICY_KIND_UPDATE ? 0 : 1;
  for (size_t i = 0; i < c->n[k]; i++) {
    const xf_policy_rule *r = c->rules[k][i];
    if (!rule_applies(r, kind, d, region, job->coordinator_region, now)) continue;
    if (r->effect == XF_POLICY_DENY) {
      if (!v.deny) v.deny = r;
    } else if (conditions_hold(r, job, region, h)) {
      if (!v.allow) v.allow = r;
    } else if (!v.blocked)
      v.blocked = r;
  }
  return v;
}

static void say(xf_policy_site_decision *s, const char *rule, const char *fmt, ...)
    XF_PRINTF(3, 4);
static void say(xf_policy_site_decision *s, const char *rule, const char *fmt, ...) {
  va_list ap;
  snprintf(s->rule, sizeof(s->rule), "%s", rule);
  va_start(ap, fmt);
  vsnprintf(s->why, sizeof(s->why), fmt, ap);
  va_end(ap);
}

/* Per-site work before the regional cohorts are counted. */
typedef struct pending {
  const xf_policy_rule *regional; /* the allow rule of a regional aggregate, if that is the path */
  hints h;
} pending;

/* Decides one site: direct, regional (pending its cohort) or not at all. */
static void decide_site(const candidates *p, const xf_policy_dataset *d,
                        const xf_policy_job *job, double now, xf_policy_site_decision *s,
                        pending *pend) {
  const char *to = job->coordinator_region;
  if (strcmp(s->region, to) == 0) {
    s->eligible = true;
    s->path = XF_POLICY_PATH_DIRECT;
    say(s, "default", "its updates stay in region %s, where the coordinator runs", to);
    return;
  }
  verdict up = judge(p, XF_POLICY_KIND_UPDATE, d, s->region, job, now, &pend->h);
  if (!up.deny && up.allow) {
    s->eligible = true;
    s->path = XF_POLICY_PATH_DIRECT;
    s->has_max_epsilon = up.allow->has_max_epsilon;
    s->max_epsilon = up.allow->max_epsilon;
    say(s, up.allow->id, "rule %s allows its updates to go to %s", up.allow->id, to);
    return;
  }
  verdict agg = judge(p, XF_POLICY_KIND_REGIONAL_AGGREGATE, d, s->region, job, now, &pend->h);
  if (!agg.deny && agg.allow) {
    pend->regional = agg.allow; /* eligible once the region's cohort is counted */
    s->path = XF_POLICY_PATH_REGIONAL;
    s->has_max_epsilon = agg.allow->has_max_epsilon;
    s->max_epsilon = agg.allow->max_epsilon;
    say(s, agg.allow->id, "rule %s allows its updates to leave %s only as a regional aggregate",
        agg.allow->id, s->region);
    return;
  }
  /* The reason that points at a way out comes first: a regional aggregate
   * that conditions block is what the suggestions are about. */
  if (agg.deny)
    say(s, agg.deny->id, "rule %s denies regional aggregates of %s going to %s", agg.deny->id,
        s->region, to);
  else if (agg.blocked)
    say(s, agg.blocked->id, "rule %s allows a regional aggregate only under conditions the job "
        "does not meet", agg.blocked->id);
  else if (up.deny)
    say(s, up.deny->id, "rule %s denies its updates going to %s", up.deny->id, to);
  else if (up.blocked)
    say(s, up.blocked->id, "rule %s allows its updates only under conditions the job does not "
        "meet", up.blocked->id);
  else {
    say(s, "default", "no rule allows artifacts of %s to go to %s (default deny)", s->region, to);
    hint(&pend->h, "add a rule allowing %s updates or regional aggregates to %s", s->region, to);
  }
}

static xf_err check_job(const xf_policy *p, const xf_policy_job *job, xf_errctx *err) {
  const char *field = NULL, *msg = NULL;
  if (!job) field = "job", msg = "the job is missing";
  else if (!job->dataset || !*job->dataset) field = "dataset", msg = "the job names no dataset";
  else if (!job->coordinator_region || !*job->coordinator_region)
    field = "coordinator_region", msg = "the job names no coordinator region";
  else if (job->privacy && !(job->epsilon > 0 && isfinite(job->epsilon)))
    field = "epsilon", msg = "a job with privacy needs a positive, finite epsilon";
  else if (job->n_tags && !job->tags) field = "tags", msg = "the job's tags are missing";
  if (field) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "%s", field);
    return xf_fail(err, XF_EINVAL, "%s", msg);
  }
  for (size_t i = 0; i < p->n_regions; i++)
    if (strcmp(p->regions[i].name, job->coordinator_region) == 0) return XF_OK;
  xf_errctx_clear(err);
  xf_errctx_field(err, "coordinator_region");
  return xf_fail(err, XF_EINVAL, "the coordinator's region '%.64s' is not in policy version %llu",
                 job->coordinator_region, (unsigned long long)p->version);
}

/* Fills out->regions from the site decisions and settles the pending
 * regional aggregates: a region's cohort is its sites on the regional path,
 * and must reach the largest min_cohort among their rules. */
static xf_err plan_regions(xf_policy_decision *out, pending *pend, const xf_policy_job *job,
                           xf_errctx *err) {
  for (size_t i = 0; i < out->n_sites; i++) {
    xf_policy_site_decision *s = &out->sites[i];
    xf_policy_region_plan *r = NULL;
    for (size_t j = 0; j < out->n_regions; j++)
      if (strcmp(out->regions[j].region, s->region) == 0) r = &out->regions[j];
    if (!r) {
      xf_policy_region_plan *grown =
          xf_realloc(out->regions, (out->n_regions + 1) * sizeof(*grown));
      if (!grown) return xf_fail(err, XF_ENOMEM, "cannot hold the decision");
      out->regions = grown;
      r = &grown[out->n_regions++];
      memset(r, 0, sizeof(*r));
      snprintf(r->region, sizeof(r->region), "%s", s->region);
      snprintf(r->rule, sizeof(r->rule), "default");
    }
    r->sites++;
    const xf_policy_rule *rule = pend[i].regional;
    if (!rule) continue;
    unsigned k = rule->min_cohort ? rule->min_cohort : 1;
    if (r->path != XF_POLICY_PATH_REGIONAL || k > r->min_cohort) {
      snprintf(r->rule, sizeof(r->rule), "%s", rule->id);
      r->min_cohort = k;
    }
    r->path = XF_POLICY_PATH_REGIONAL;
    r->require_secagg |= rule->require_secagg;
    if (rule->has_max_epsilon && (!r->has_max_epsilon || rule->max_epsilon < r->max_epsilon)) {
      r->has_max_epsilon = true;
      r->max_epsilon = rule->max_epsilon;
    }
  }
  for (size_t j = 0; j < out->n_regions; j++) {
    xf_policy_region_plan *r = &out->regions[j];
    unsigned cohort = 0;
    for (size_t i = 0; i < out->n_sites; i++)
      if (pend[i].regional && strcmp(out->sites[i].region, r->region) == 0) cohort++;
    if (job->cohort) cohort = job->cohort; /* the caller knows the aggregate's size */
    for (size_t i = 0; i < out->n_sites; i++) {
      xf_policy_site_decision *s = &out->sites[i];
      if (strcmp(s->region, r->region) != 0) continue;
      if (pend[i].regional) {
        if (cohort >= r->min_cohort)
          s->eligible = true;
        else {
          s->path = XF_POLICY_PATH_NONE;
          snprintf(s->why, sizeof(s->why),
                   "rule %s needs a regional aggregate of at least %u sites from %s; %s %u",
                   r->rule, r->min_cohort, r->region,
                   job->cohort ? "the plan guarantees" : "the job has", cohort);
          hint(&pend[i].h, "needs >= %u %s sites per regional aggregate", r->min_cohort,
               r->region);
        }
      }
      if (s->eligible) r->eligible++;
    }
    if (r->path == XF_POLICY_PATH_REGIONAL && cohort < r->min_cohort)
      r->path = XF_POLICY_PATH_NONE;
    else if (r->path != XF_POLICY_PATH_REGIONAL && r->eligible) {
      r->path = XF_POLICY_PATH_DIRECT;
      for (size_t i = 0; i < out->n_sites; i++)
        if (out->sites[i].eligible && strcmp(out->sites[i].region, r->region) == 0) {
          snprintf(r->rule, sizeof(r->rule), "%s", out->sites[i].rule);
          break;
        }
    }
  }
  return XF_OK;
}

static int by_region(const void *a, const void *b) {
  return strcmp(((const xf_policy_region_plan *)a)->region,
                ((const xf_policy_region_plan *)b)->region);
}

xf_err xf_policy_decide(const xf_policy *policy, const xf_policy_job *job, double now,
                        xf_policy_decision *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  XF_GUARD(check_job(policy, job, err));
  out->version = policy->version;

  /* The federation: sites holding the dataset with every tag the job names.
   * Datasets are sorted by (site, name), so sites come out sorted. */
  size_t n = 0;
  for (size_t i = 0; i < policy->n_datasets; i++)
    if (strcmp(policy->datasets[i].name, job->dataset) == 0) n++;
  pending *pend = n ? xf_calloc(n, sizeof(*pend)) : NULL;
  out->sites = n ? xf_calloc(n, sizeof(*out->sites)) : NULL;
  xf_err rc = XF_OK;
  if (n && (!pend || !out->sites)) {
    rc = xf_fail(err, XF_ENOMEM, "cannot hold the decision");
    goto out;
  }
  candidates cands;
  if ((rc = candidates_make(policy, job, now, &cands, err)) != XF_OK) {
    candidates_free(&cands);
    goto out;
  }
  for (size_t i = 0; i < policy->n_datasets; i++) {
    const xf_policy_dataset *d = &policy->datasets[i];
    if (strcmp(d->name, job->dataset) != 0) continue;
    bool tagged = true;
    for (size_t t = 0; t < job->n_tags; t++)
      if (!job->tags[t] || !has_tag(d, job->tags[t])) tagged = false;
    const xf_policy_site *site = site_of(policy, d->site);
    if (!tagged || !site) continue;
    xf_policy_site_decision *s = &out->sites[out->n_sites];
    snprintf(s->site, sizeof(s->site), "%s", site->name);
    snprintf(s->region, sizeof(s->region), "%s", site->region);
    decide_site(&cands, d, job, now, s, &pend[out->n_sites]);
    out->n_sites++;
  }
  candidates_free(&cands);
  if ((rc = plan_regions(out, pend, job, err)) != XF_OK) goto out;
  if (out->n_regions) qsort(out->regions, out->n_regions, sizeof(*out->regions), by_region);

  size_t eligible = 0;
  for (size_t i = 0; i < out->n_sites; i++) {
    if (out->sites[i].eligible) {
      eligible++;
      continue;
    }
    for (size_t h = 0; h < pend[i].h.n && rc == XF_OK; h++)
      rc = suggest(out, pend[i].h.text[h], err);
  }
  if (rc != XF_OK) goto out;
  unsigned quorum = job->min_sites ? job->min_sites : 1;
  out->allowed = eligible >= quorum;
  if (out->n_sites == 0) {
    char s[XF_POLICY_SUGGESTION_MAX];
    snprintf(s, sizeof(s), "no site holds dataset '%.64s'%s", job->dataset,
             job->n_tags ? " with the job's tags" : "");
    rc = suggest(out, s, err);
  } else if (!out->allowed && out->n_suggestions == 0 && eligible > 0) {
    /* With none eligible, lowering min_sites helps nothing: each site's
     * reason says what would. */
    char s[XF_POLICY_SUGGESTION_MAX];
    snprintf(s, sizeof(s), "only %zu sites are eligible: lower min_sites to <= %zu", eligible,
             eligible);
    rc = suggest(out, s, err);
  }

out:
  xf_free(pend);
  if (rc != XF_OK) xf_policy_decision_free(out);
  return rc;
}

/* ---- the decision as JSON ------------------------------------------------------------ */

xf_err xf_policy_decision_json(const xf_policy_decision *d, char **text, xf_errctx *err) {
  *text = NULL;
  json_t *sites = json_array(), *regions = json_array(), *sugg = json_array();
  bool ok = sites && regions && sugg;
  for (size_t i = 0; ok && i < d->n_sites; i++) {
    const xf_policy_site_decision *s = &d->sites[i];
    ok = json_array_append_new(
             sites, json_pack("{s:s,s:s,s:b,s:s,s:s,s:s,s:o}", "site", s->site, "region",
                              s->region, "eligible", s->eligible, "path",
                              xf_policy_path_name(s->path), "rule", s->rule, "reason", s->why,
                              "max_epsilon",
                              s->has_max_epsilon ? json_real(s->max_epsilon) : json_null())) == 0;
  }
  for (size_t i = 0; ok && i < d->n_regions; i++) {
    const xf_policy_region_plan *r = &d->regions[i];
    json_t *o = json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:b,s:o}", "region", r->region, "path",
                          xf_policy_path_name(r->path), "rule", r->rule, "sites", (int)r->sites,
                          "eligible", (int)r->eligible, "min_cohort", (int)r->min_cohort,
                          "require_secagg", r->require_secagg, "max_epsilon",
                          r->has_max_epsilon ? json_real(r->max_epsilon) : json_null());
    ok = json_array_append_new(regions, o) == 0;
  }
  for (size_t i = 0; ok && i < d->n_suggestions; i++)
    ok = json_array_append_new(sugg, json_string(d->suggestions[i])) == 0;
  json_t *doc = ok ? json_pack("{s:I,s:b,s:O,s:O,s:O}", "version", (json_int_t)d->version,
                               "allowed", d->allowed, "sites", sites, "regions", regions,
                               "suggestions", sugg)
                   : NULL;
  json_decref(sites);
  json_decref(regions);
  json_decref(sugg);
  char *dumped = doc ? json_dumps(doc, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
  json_decref(doc);
  if (!dumped) return xf_fail(err, XF_ENOMEM, "cannot hold the decision");
  /* jansson allocates with malloc; callers free with xf_free. */
  size_t len = strlen(dumped);
  *text = xf_malloc(len + 1);
  if (*text) memcpy(*text, dumped, len + 1);
  free(dumped);
  return *text ? XF_OK : xf_fail(err, XF_ENOMEM, "cannot hold the decision");
}
