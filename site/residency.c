/* SPDX-License-Identifier: Apache-2.0 */
/* The site's own residency rules: a task's residency plan checked against
 * the operator's local policy, the site's audit rows, and the budget cap a
 * residency rule sets (site/residency.h, docs/policy.md "Site-local rules"). */
#include "site/residency.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "policy/audit.h"

static const char *str_or(const char *s, const char *dflt) { return s && *s ? s : dflt; }

/* Fills out as allowed or refused; details repeat why, name the local
 * version and rule, and end with what would make it allowed. */
static void verdict(xf_site_residency_verdict *out, bool allowed, const char *rule,
                    const char *path, const char *fix, const char *fmt, ...) XF_PRINTF(6, 7);
static void verdict(xf_site_residency_verdict *out, bool allowed, const char *rule,
                    const char *path, const char *fix, const char *fmt, ...) {
  out->allowed = allowed;
  snprintf(out->rule, sizeof(out->rule), "%s", rule);
  snprintf(out->path, sizeof(out->path), "%s", path);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->why, sizeof(out->why), fmt, ap);
  va_end(ap);
  if (allowed) {
    snprintf(out->details, sizeof(out->details), "%s", out->why);
    return;
  }
  snprintf(out->details, sizeof(out->details),
           "this site's local policy (version %llu, rule '%s') forbids it: %s%s%s",
           (unsigned long long)out->policy_version, rule, out->why,
           fix && *fix ? "; it would be allowed with: " : "", fix ? fix : "");
}

/* The decision's suggestions, joined with "; ". */
static void suggestions_text(const xf_policy_decision *d, char *buf, size_t n) {
  size_t used = 0;
  buf[0] = '\0';
  for (size_t i = 0; i < d->n_suggestions && used < n; i++)
    used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "; " : "", d->suggestions[i]);
}

static bool policy_lists_dataset(const xf_policy *p, const char *dataset, const char *site) {
  for (size_t i = 0; i < p->n_datasets; i++)
    if (strcmp(p->datasets[i].name, dataset) == 0 && strcmp(p->datasets[i].site, site) == 0)
      return true;
  return false;
}

/* The facts of the job as the local policy weighs them. tags is an array
 * of XF_JOB_TAGS_MAX the caller keeps alive with spec. */
static void job_facts(const xf_jobspec *spec, const xf_site_residency *res, const char **tags,
                      xf_policy_job *job) {
  for (uint32_t i = 0; i < spec->data.n_tags && i < XF_JOB_TAGS_MAX; i++)
    tags[i] = spec->data.tags[i];
  const xf_privacy_spec *pv = &spec->privacy;
  *job = (xf_policy_job){
      .dataset = spec->data.dataset,
      .tags = tags,
      .n_tags = spec->data.n_tags,
      .privacy = pv->mode != XF_PRIVACY_NONE,
      .epsilon = res->epsilon > 0 ? res->epsilon
                                  : (pv->has_target_epsilon ? pv->target_epsilon : 0),
      .secagg = spec->secure_aggregation.enabled,
      /* The local policy speaks for this site alone: the job's quorum is the
       * coordinator's concern, and would only add advice about min_sites
       * that this site cannot act on. */
      .min_sites = 1,
      .coordinator_region = res->coordinator_region,
      /* A regional aggregate's size is the coordinator's to gather, not the
       * local policy's to count (it lists few sites, often only this one):
       * the local rules are held to the cohort the plan guarantees. */
      .cohort = res->min_cohort ? res->min_cohort : 1,
  };
}

/* The checks on a decision that found this site (sd) eligible: how its
 * update leaves the region (the site's region as the local policy places it)
 * against where the task sends it. */
static void check_route(const xf_site_residency *res, const xf_policy_site_decision *sd,
                        xf_site_residency_verdict *out) {
  const char *to = str_or(res->aggregator_region, str_or(res->coordinator_region, "?"));
  const char *coord = str_or(res->coordinator_region, "?");
  const char *path = xf_policy_path_name(sd->path);
  bool leaves = strcmp(to, sd->region) != 0;
  if (leaves && strcmp(to, coord) != 0) {
    verdict(out, false, sd->rule, path, "an aggregator in this site's region or in the coordinator's",
            "the update would go to an aggregator in region '%s', which is neither this site's "
            "region '%s' nor the coordinator's region '%s' the local rules were checked against",
            to, sd->region, coord);
    return;
  }
  if (sd->path == XF_POLICY_PATH_REGIONAL && leaves) {
    char fix[160];
    snprintf(fix, sizeof(fix), "a regional aggregator in '%s' that aggregates this site's update "
             "before it leaves the region", sd->region);
    verdict(out, false, sd->rule, path, fix,
            "updates of region '%s' may leave only as a regional aggregate, but this task sends "
            "the update straight to an aggregator in region '%s'",
            sd->region, to);
    return;
  }
  verdict(out, true, sd->rule, path, NULL, "%s", sd->why);
}

xf_err xf_site_residency_check(xf_db *db, const xf_site_task_ref *task,
                               const xf_site_residency *res, const xf_jobspec *spec, double now,
                               xf_site_residency_verdict *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  XF_GUARD(xf_policy_version_current(db, &out->policy_version, err));
  if (out->policy_version == 0) {
    verdict(out, true, "none", "none", NULL, "this site has no local policy");
    return XF_OK;
  }
  xf_policy *p = NULL;
  XF_GUARD(xf_policy_load(db, out->policy_version, &p, err));
  if (!policy_lists_dataset(p, spec->data.dataset, task->site)) {
    verdict(out, true, "none", "none", NULL,
            "the local policy does not list dataset '%s' at site %s, so it does not restrict it",
            spec->data.dataset, task->site);
    xf_policy_free(p);
    return XF_OK;
  }
  /* Rules that cannot be checked do not hold: a coordinator that runs
   * without a policy sends no plan, and then this dataset stays home. */
  if (!res->coordinator_region || !*res->coordinator_region) {
    verdict(out, false, "none", "none",
            "a coordinator that runs under a residency policy (xfed-coord --residency-policy "
            "enforce)",
            "the task carries no residency plan (its coordinator runs without a policy), and "
            "this site's local policy restricts dataset '%s': it takes tasks on it only with a "
            "plan it can check", spec->data.dataset);
    xf_policy_free(p);
    return XF_OK;
  }
  const char *tags[XF_JOB_TAGS_MAX];
  xf_policy_job job;
  job_facts(spec, res, tags, &job);
  xf_policy_decision dec;
  memset(&dec, 0, sizeof(dec));
  xf_errctx inner;
  xf_errctx_clear(&inner);
  xf_err rc = xf_policy_decide(p, &job, now, &dec, &inner);
  xf_policy_free(p);
  if (rc == XF_ENOMEM) return xf_fail(err, rc, "%s", inner.msg);
  if (rc != XF_OK) {
    char fix[200];
    if (strcmp(inner.field, "coordinator_region") == 0)
      snprintf(fix, sizeof(fix), "region '%s' added to the local policy with a rule that lets "
               "this site's data go there", str_or(res->coordinator_region, "?"));
    else
      snprintf(fix, sizeof(fix), "a job that states %s", inner.field[0] ? inner.field : "it");
    verdict(out, false, "none", "none", fix, "the local rules cannot decide this job: %s",
            inner.msg);
    return XF_OK;
  }
  const xf_policy_site_decision *sd = NULL;
  for (size_t i = 0; i < dec.n_sites; i++)
    if (strcmp(dec.sites[i].site, task->site) == 0) sd = &dec.sites[i];
  char fix[512];
  suggestions_text(&dec, fix, sizeof(fix));
  if (!sd) {
    char want[256] = "";
    size_t used = 0;
    for (uint32_t i = 0; i < spec->data.n_tags && used < sizeof(want); i++)
      used += (size_t)snprintf(want + used, sizeof(want) - used, "%s%s", i ? ", " : "",
                               spec->data.tags[i]);
    verdict(out, false, "none", "none", "the local policy's dataset carrying the job's tags",
            "the local policy lists dataset '%s' at site %s without the job's tags (%s)",
            spec->data.dataset, task->site, used ? want : "none");
  } else if (!sd->eligible) {
    verdict(out, false, sd->rule, xf_policy_path_name(sd->path), fix, "%s", sd->why);
  } else {
    check_route(res, sd, out);
  }
  xf_policy_decision_free(&dec);
  return XF_OK;
}

/* Appends one row whose detail is obj (consumed). */
static xf_err append(xf_db *db, double now, const char *actor, const char *kind,
                     const char *subject, json_t *obj, xf_errctx *err) {
  char *text = obj ? json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(obj);
  if (!text) return xf_fail(err, XF_ENOMEM, "cannot build the audit row");
  xf_err rc = xf_audit_append(db, now, actor, kind, subject, text, NULL, err);
  free(text);
  return rc;
}

xf_err xf_site_residency_audit(xf_db *db, const xf_site_task_ref *task, const char *dataset,
                               const xf_site_residency *res,
                               const xf_site_residency_verdict *v, double now,
                               xf_errctx *err) {
  json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:I,s:I,s:s,s:s,s:s,s:s}", "job", task->job, "round",
                        (json_int_t)task->round, "attempt", (json_int_t)task->attempt,
                        "dataset", dataset, "policy_version", (json_int_t)v->policy_version,
                        "coordinator_policy_version", (json_int_t)res->policy_version, "rule",
                        v->rule, "why", v->why, "aggregator_region",
                        str_or(res->aggregator_region, ""), "path", v->path);
  return append(db, now, task->site, v->allowed ? "decision" : "refused_task", task->job, o,
                err);
}

xf_err xf_site_audit_crossing(xf_db *db, const xf_site_task_ref *task, const char *to_region,
                              uint64_t bytes, double now, xf_errctx *err) {
  json_t *o = json_pack("{s:s,s:I,s:I,s:s,s:s,s:s,s:I}", "job", task->job, "round",
                        (json_int_t)task->round, "attempt", (json_int_t)task->attempt, "kind",
                        "update", "from", task->region, "to", to_region, "bytes",
                        (json_int_t)bytes);
  return append(db, now, task->site, "crossing", task->job, o, err);
}

xf_site_cap xf_site_budget_cap(const xf_site_dataset *ds, const xf_site_residency *res,
                               double job_delta) {
  xf_site_cap cap = {.source = XF_SITE_CAP_NONE};
  if (ds->has_budget)
    cap = (xf_site_cap){.source = XF_SITE_CAP_BUDGET,
                        .epsilon = ds->budget_epsilon,
                        .delta = ds->budget_delta > 0 ? ds->budget_delta
                                                      : XF_SITE_BUDGET_DELTA_DEFAULT};
  if (res && res->has_max_epsilon && res->max_epsilon > 0 && isfinite(res->max_epsilon) &&
      (cap.source == XF_SITE_CAP_NONE || res->max_epsilon < cap.epsilon))
    cap = (xf_site_cap){.source = XF_SITE_CAP_POLICY, .epsilon = res->max_epsilon,
                        .delta = job_delta};
  return cap;
}
