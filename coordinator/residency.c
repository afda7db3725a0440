/* SPDX-License-Identifier: Apache-2.0 */
/* Residency enforcement in the coordinator daemon (docs/policy.md,
 * "Enforcement"): the global coordinator decides every job against the
 * current policy version at submission and before every attempt, pauses a
 * job the policy no longer allows, invites only eligible sites and tells
 * each task what its region's plan is; a regional aggregator holds its
 * region's aggregate to that plan before it leaves; both write what they
 * decided, what crossed a boundary and what they refused to the audit
 * trail. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/residency.h"

/* A paused job is decided again at least this often, so that a rule whose
 * validity window opens lets it go on without a policy change. */
#define XF__PAUSED_RECHECK_S 10.0

bool xf__residency_on(const xf__coord *co) { return !co->cfg.regional && !co->cfg.residency_off; }

void xf__audit(xf__coord *co, const char *kind, const char *subject, json_t *detail) {
  if (!detail) detail = json_object();
  char *text = detail ? json_dumps(detail, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(detail);
  if (!co->audit || !text) {
    XF_ERROR("audit_failed", "kind=%s subject=\"%s\" reason=\"%s\"", kind, subject,
             co->audit ? "out of memory" : "no audit trail open");
    free(text);
    return;
  }
  xf_errctx err = {0};
  if (xf_audit_append(co->audit, xf__now(), co->name[0] ? co->name : "coordinator", kind,
                      subject && *subject ? subject : "-", text, NULL, &err) != XF_OK)
    XF_ERROR("audit_failed", "kind=%s subject=\"%s\" reason=\"%s\"", kind, subject, err.msg);
  free(text);
}

/* The current version, reloaded when the version table moved on. */
static xf_err current_policy(xf__coord *co, const xf_policy **out, xf_errctx *err) {
  uint64_t v = 0;
  XF_GUARD(xf_policy_version_current(co->db, &v, err));
  if (!co->policy || co->policy->version != v) {
    xf_policy *p = NULL;
    XF_GUARD(xf_policy_load(co->db, v, &p, err));
    xf_policy_free(co->policy);
    co->policy = p;
  }
  *out = co->policy;
  return XF_OK;
}

xf_err xf__residency_decide(xf__coord *co, const xf_jobspec *spec, xf_policy_decision *out,
                            xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!co->cfg.region[0])
    return xf_fail(err, XF_EDENIED,
                   "this coordinator has no region, so the residency policy cannot place it: "
                   "start it with --region R (or \"region\" in its config)");
  const xf_policy *p;
  XF_GUARD(current_policy(co, &p, err));
  if (p->version == 0)
    return xf_fail(err, XF_EDENIED,
                   "no residency policy has been pushed to this coordinator yet, and without one "
                   "nothing may leave its region: a compliance identity pushes one with "
                   "'xfed policy push'");
  xf_policy_job job;
  const char *tags[XF_JOB_TAGS_MAX];
  XF_GUARD(xf_residency_job_of(spec, co->cfg.region, tags, &job, err));
  return xf_policy_decide(p, &job, xf__now(), out, err);
}

void xf__residency_explain(const xf_policy_decision *d, char *buf, size_t len) {
  size_t eligible = 0, at = 0;
  for (size_t i = 0; i < d->n_sites; i++) eligible += d->sites[i].eligible;
  int n = snprintf(buf, len, "policy version %" PRIu64 " makes %zu of %zu sites eligible",
                   d->version, eligible, d->n_sites);
  at = n > 0 ? (size_t)n : 0;
  for (size_t i = 0; i < d->n_sites && at < len; i++) {
    if (d->sites[i].eligible) continue;
    n = snprintf(buf + at, len - at, "; %s: %s", d->sites[i].site, d->sites[i].why);
    at += n > 0 ? (size_t)n : 0;
  }
  for (size_t i = 0; i < d->n_suggestions && at < len; i++) {
    n = snprintf(buf + at, len - at, "%s%s", i ? "; " : ". To allow it: ", d->suggestions[i]);
    at += n > 0 ? (size_t)n : 0;
  }
}

/* ---- the global coordinator's plan ------------------------------------------------------------ */

const xf_policy_region_plan *xf__residency_region(const xf__job *job, const char *region) {
  if (!job->has_plan) return NULL;
  for (size_t i = 0; i < job->plan.n_regions; i++)
    if (strcmp(job->plan.regions[i].region, region) == 0) return &job->plan.regions[i];
  return NULL;
}

static const xf_policy_site_decision *site_decision(const xf__job *job, const char *name) {
  for (size_t i = 0; i < job->plan.n_sites; i++)
    if (strcmp(job->plan.sites[i].site, name) == 0) return &job->plan.sites[i];
  return NULL;
}

/* A site whose policy region is not the region its certificate names is
 * not the site the policy speaks of. */
static bool site_ok(const xf__job *job, const char *name, const char *region) {
  const xf_policy_site_decision *d = site_decision(job, name);
  return d && d->eligible && strcmp(d->region, region) == 0;
}

size_t xf__residency_behind(const xf__job *job, const xf__site *s) {
  size_t n = 0;
  for (size_t i = 0; i < s->n_behind; i++) n += site_ok(job, s->behind[i], s->region);
  return n;
}

bool xf__residency_site_ok(const xf__coord *co, const xf__job *job, const xf__site *s) {
  if (job->relay) {
    /* A regional aggregator invites only the sites its task names. */
    const xf__residency *r = &co->up.residency;
    if (!r->present) return true;
    for (size_t i = 0; i < r->n_sites; i++)
      if (strcmp(r->sites[i], s->name) == 0) return true;
    return false;
  }
  if (!xf__residency_on(co)) return true;
  if (!job->has_plan || job->paused) return false;
  const xf_policy_region_plan *rp = xf__residency_region(job, s->region);
  if (!rp) return false;
  if (!s->regional) {
    /* Straight to us: only where updates may go directly (or stay). */
    return rp->path == XF_POLICY_PATH_DIRECT && site_ok(job, s->name, s->region);
  }
  /* A regional aggregator: its region's aggregate may leave (directly
   * allowed updates may also leave summed), with enough eligible sites
   * behind it. */
  if (rp->path == XF_POLICY_PATH_NONE) return false;
  size_t behind = xf__residency_behind(job, s);
  unsigned need = rp->path == XF_POLICY_PATH_REGIONAL ? rp->min_cohort : 1;
  return behind >= (need ? need : 1);
}

void xf__residency_offer(const xf__coord *co, const xf__job *job, const xf__site *s,
                         Xfed__Residency *out, char **names) {
  xfed__residency__init(out);
  const xf_policy_region_plan *rp = xf__residency_region(job, s->region);
  out->policy_version = job->plan.version;
  out->coordinator_region = (char *)co->cfg.region;
  out->aggregator_region = (char *)co->cfg.region;
  out->path = rp && rp->path == XF_POLICY_PATH_REGIONAL ? "regional" : "direct";
  out->rule = rp ? (char *)rp->rule : "default";
  out->min_cohort = rp && rp->path == XF_POLICY_PATH_REGIONAL && rp->min_cohort ? rp->min_cohort
                                                                               : 1;
  out->require_secagg = rp && rp->path == XF_POLICY_PATH_REGIONAL && rp->require_secagg;
  out->has_max_epsilon = rp && rp->path == XF_POLICY_PATH_REGIONAL && rp->has_max_epsilon;
  out->max_epsilon = out->has_max_epsilon ? rp->max_epsilon : 0;
  /* A site straight to us carries the cap of the rule that let it come. */
  const xf_policy_site_decision *sd = s->regional ? NULL : site_decision(job, s->name);
  if (sd && sd->has_max_epsilon) {
    out->has_max_epsilon = true;
    out->max_epsilon = sd->max_epsilon;
  }
  out->epsilon = job->spec.privacy.mode != XF_PRIVACY_NONE && job->spec.privacy.has_target_epsilon
                     ? job->spec.privacy.target_epsilon
                     : 0;
  out->n_sites = 0;
  out->sites = names;
  if (s->regional && names)
    for (size_t i = 0; i < s->n_behind; i++)
      if (site_ok(job, s->behind[i], s->region)) names[out->n_sites++] = (char *)s->behind[i];
}

/* The decision of one attempt, as an audit row. */
static void audit_decision(xf__coord *co, const xf__job *job, const char *when,
                           const xf_policy_decision *d, const char *error) {
  json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "job", job->id_text, "when", when, "round",
                        (json_int_t)xf_round_number(job->round), "coordinator_region",
                        co->cfg.region);
  if (d) {
    char *text = NULL;
    xf_errctx err = {0};
    if (xf_policy_decision_json(d, &text, &err) == XF_OK) {
      json_object_set_new(o, "decision", json_loads(text, 0, NULL));
      xf_free(text);
    }
  } else {
    json_object_set_new(o, "error", json_string(error));
  }
  xf__audit(co, "decision", job->id_text, o);
}

bool xf__residency_admit(xf__coord *co, xf__job *job) {
  if (!xf__residency_on(co) || job->relay) return true;
  double now = xf__now();
  uint64_t v = 0;
  xf_errctx err = {0};
  if (job->paused && job->paused_checked + XF__PAUSED_RECHECK_S > now &&
      xf_policy_version_current(co->db, &v, &err) == XF_OK && v == job->plan.version)
    return false; /* nothing changed since the last look */
  job->paused_checked = now;
  xf_policy_decision d;
  xf_err rc = xf__residency_decide(co, &job->spec, &d, &err);
  char why[1024];
  bool allowed = rc == XF_OK && d.allowed;
  if (rc != XF_OK)
    snprintf(why, sizeof(why), "%.500s", err.msg);
  else if (!d.allowed)
    xf__residency_explain(&d, why, sizeof(why));
  /* A paused job that is still not allowed under the same version is not
   * decided anew in the trail: the row that paused it says it all. */
  bool same = job->paused && rc == XF_OK && !allowed && d.version == job->plan.version;
  if (!same) audit_decision(co, job, "round", rc == XF_OK ? &d : NULL, why);
  if (rc == XF_OK) {
    xf_policy_decision_free(&job->plan);
    job->plan = d;
    job->has_plan = true;
  }
  if (allowed) {
    if (job->paused) {
      job->paused = false;
      XF_INFO("job_resumed", "job=%s policy_version=%" PRIu64, job->id_text, job->plan.version);
      xf__audit(co, "job", job->id_text,
                json_pack("{s:s,s:I}", "event", "resumed", "policy_version",
                          (json_int_t)job->plan.version));
      xf__journal_state(co, job, XF_JOB_RUNNING, NULL);
    }
    return true;
  }
  if (!job->paused) {
    job->paused = true;
    char msg[XF_ROUND_MSG_MAX * 2];
    snprintf(msg, sizeof(msg), "paused before round %u: %.340s",
             (unsigned)xf_round_number(job->round), why);
    XF_WARN("job_paused", "job=%s reason=\"%s\"", job->id_text, why);
    xf__audit(co, "job", job->id_text,
              json_pack("{s:s,s:I,s:s}", "event", "paused", "round",
                        (json_int_t)xf_round_number(job->round), "why", why));
    xf__journal_state(co, job, XF_JOB_PAUSED, msg);
  }
  return false;
}

void xf__policy_changed(xf__coord *co) {
  xf__job *job = co->active;
  if (job) job->paused_checked = 0;
  xf__job_tick(co);
}

void xf__journal_state(xf__coord *co, const xf__job *job, xf_job_state state, const char *msg) {
  xf_errctx err = {0};
  if (xf_journal_job_set_state(co->db, job->id, state, msg, xf__now(), &err) != XF_OK)
    XF_ERROR("journal_failed", "doing=job_state reason=\"%s\"", err.msg);
}
