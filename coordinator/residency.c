/* SPDX-License-Identifier: Apache-2.0 */
/* Residency in the coordinator daemon (docs/policy.md, "Enforcement"): the
 * policy version decisions are taken against, the federation as admission
 * sees it, admission itself (job/admission.h: the one behind `xfed policy
 * check`, submission and every attempt) and the audit trail that records
 * what was decided, what crossed a boundary and what was refused. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "job/residency.h"

bool xf__residency_on(const xf__coord *co) {
  return !xf__coord_cfg(co)->regional && !xf__coord_cfg(co)->residency_off;
}

void xf__audit(xf__coord *co, const char *kind, const char *subject, json_t *detail) {
  if (!detail) detail = json_object();
  char *text = detail ? json_dumps(detail, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(detail);
  if (!xf__coord_audit(co) || !text) {
    XF_ERROR("audit_failed", "kind=%s subject=\"%s\" reason=\"%s\"", kind, subject,
             xf__coord_audit(co) ? "out of memory" : "no audit trail open");
    free(text);
    return;
  }
  xf_errctx err = {0};
  if (xf_audit_append(xf__coord_audit(co), xf__now(),
                      xf__coord_name(co)[0] ? xf__coord_name(co) : "coordinator", kind,
                      subject && *subject ? subject : "-", text, NULL, &err) != XF_OK)
    XF_ERROR("audit_failed", "kind=%s subject=\"%s\" reason=\"%s\"", kind, subject, err.msg);
  free(text);
}

/* The cache lives in the coordinator's slot for it, which only this file
 * reads and writes. */
const xf_policy *xf__policy_cached(xf__coord *co) { return *xf__coord_policy(co); }

void xf__policy_cache(xf__coord *co, xf_policy *p) {
  xf_policy **slot = xf__coord_policy(co);
  xf_policy_free(*slot);
  *slot = p;
}

/* The current version, reloaded when the version table moved on. */
xf_err xf__policy_current(xf__coord *co, const xf_policy **out, xf_errctx *err) {
  uint64_t v = 0;
  XF_GUARD(xf_policy_version_current(xf__coord_db(co), &v, err));
  const xf_policy *cached = xf__policy_cached(co);
  if (!cached || cached->version != v) {
    xf_policy *p = NULL;
    XF_GUARD(xf_policy_load(xf__coord_db(co), v, &p, err));
    xf__policy_cache(co, p);
  }
  *out = xf__policy_cached(co);
  return XF_OK;
}

xf_err xf__residency_decide(xf__coord *co, const xf_jobspec *spec, xf_policy_decision *out,
                            xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  if (!xf__coord_cfg(co)->region[0])
    return xf_fail(err, XF_EDENIED,
                   "this coordinator has no region, so the residency policy cannot place it: "
                   "start it with --region R (or \"region\" in its config)");
  const xf_policy *p;
  XF_GUARD(xf__policy_current(co, &p, err));
  if (p->version == 0)
    return xf_fail(err, XF_EDENIED,
                   "no residency policy has been pushed to this coordinator yet, and without one "
                   "nothing may leave its region: a compliance identity pushes one with "
                   "'xfed policy push'");
  xf_policy_job job;
  const char *tags[XF_JOB_TAGS_MAX];
  XF_GUARD(xf_residency_job_of(spec, xf__coord_cfg(co)->region, tags, &job, err));
  XF_GUARD(xf_policy_decide(p, &job, xf__now(), out, err));
  for (size_t i = 0; i < out->n_sites; i++) {
    unsigned path = (unsigned)out->sites[i].path <= XF_POLICY_PATH_REGIONAL
                        ? (unsigned)out->sites[i].path : XF_POLICY_PATH_NONE;
    xf__coord_stats(co)->decisions[out->sites[i].eligible ? 1 : 0][path]++;
  }
  return XF_OK;
}

void xf__journal_state(xf__coord *co, int64_t job, xf_job_state state, const char *msg) {
  xf_errctx err = {0};
  if (xf_journal_job_set_state(xf__coord_db(co), job, state, msg, xf__now(), &err) != XF_OK)
    XF_ERROR("journal_failed", "doing=job_state reason=\"%s\"", err.msg);
}

/* ---- the federation as admission sees it ---------------------------------------------------------- */

void xf__federation_free(xf__federation *f) {
  xf_free(f->sites);
  xf_free(f->datasets);
  xf_free(f->tags);
  memset(f, 0, sizeof(*f));
}

xf_err xf__federation_make(xf__coord *co, xf__federation *out) {
  memset(out, 0, sizeof(*out));
  size_t n_sites = 0, n_sets = 0, n_tags = 0;
  for (xf__site *s = xf__coord_sites(co); s; s = s->next) {
    if (!s->regional) {
      n_sites++;
      n_sets += s->n_datasets;
      for (size_t d = 0; d < s->n_datasets; d++) n_tags += s->datasets[d].n_tags;
    }
    for (size_t b = 0; b < s->n_behind; b++) {
      n_sites++;
      n_sets += s->behind[b].n_datasets;
      for (size_t d = 0; d < s->behind[b].n_datasets; d++)
        n_tags += s->behind[b].datasets[d].n_tags;
    }
  }
  out->sites = xf_calloc(n_sites ? n_sites : 1, sizeof(*out->sites));
  out->datasets = xf_calloc(n_sets ? n_sets : 1, sizeof(*out->datasets));
  out->tags = xf_calloc(n_tags ? n_tags : 1, sizeof(*out->tags));
  if (!out->sites || !out->datasets || !out->tags) {
    xf__federation_free(out);
    return XF_ENOMEM;
  }
  size_t ns = 0, nd = 0, nt = 0;
  for (xf__site *s = xf__coord_sites(co); s; s = s->next) {
    size_t count = s->regional ? s->n_behind : 1;
    for (size_t k = 0; k < count; k++) {
      const xf__dataset *sets = s->regional ? s->behind[k].datasets : s->datasets;
      size_t n = s->regional ? s->behind[k].n_datasets : s->n_datasets;
      xf_fed_site *fs = &out->sites[ns++];
      fs->name = s->regional ? s->behind[k].name : s->name;
      fs->region = s->regional ? s->behind[k].region : s->region;
      fs->via = s->regional ? s->name : NULL;
      fs->via_region = s->regional ? s->region : NULL;
      fs->connected = s->peer != NULL;
      fs->datasets = &out->datasets[nd];
      fs->n_datasets = n;
      for (size_t d = 0; d < n; d++) {
        const xf__dataset *src = &sets[d];
        xf_fed_dataset *o = &out->datasets[nd++];
        o->name = src->name;
        o->tags = &out->tags[nt];
        o->n_tags = src->n_tags;
        for (uint32_t t = 0; t < src->n_tags; t++) out->tags[nt++] = src->tags[t];
        o->train_records = src->train_records;
        o->test_records = src->test_records;
        o->classes = src->classes;
        o->h = src->h;
        o->w = src->w;
        o->c = src->c;
      }
    }
  }
  out->fed.sites = out->sites;
  out->fed.n_sites = ns;
  out->fed.coordinator_region = xf__coord_cfg(co)->region;
  out->fed.residency_on = xf__residency_on(co);
  return XF_OK;
}

xf_err xf__admit_check_dataset(xf__coord *co, const xf_jobspec *spec, xf_errctx *err) {
  const xf_policy *policy = NULL;
  if (xf__residency_on(co) && xf__coord_cfg(co)->region[0]) {
    XF_GUARD(xf__policy_current(co, &policy, err));
    if (policy->version == 0) policy = NULL;
  }
  xf__federation f;
  if (xf__federation_make(co, &f) != XF_OK)
    return xf_fail(err, XF_ENOMEM, "out of memory describing the federation");
  xf_err rc = xf_admission_check_dataset(spec, &f.fed, policy, err);
  xf__federation_free(&f);
  return rc;
}

xf_err xf__admit(xf__coord *co, const xf_jobspec *spec, xf_admission *out, char **decision_json,
                 xf_errctx *err) {
  if (decision_json) *decision_json = NULL;
  memset(out, 0, sizeof(*out));
  xf_policy_decision d;
  memset(&d, 0, sizeof(d));
  bool has_decision = false;
  if (xf__residency_on(co)) {
    xf_errctx derr = {0};
    xf_err rc = xf__residency_decide(co, spec, &d, &derr);
    if (rc == XF_EDENIED) {
      /* No policy (or no region): nothing may leave; that is the verdict. */
      out->verdict = XF_ADMIT_DENIED;
      out->has_policy = true;
      snprintf(out->reason, sizeof(out->reason), "%s%s%s", derr.field[0] ? derr.field : "",
               derr.field[0] ? ": " : "", derr.msg);
      return XF_OK;
    }
    if (rc != XF_OK) {
      *err = derr;
      return rc;
    }
    has_decision = true;
  }
  xf__federation f;
  xf_err rc = xf__federation_make(co, &f);
  if (rc != XF_OK) {
    xf_policy_decision_free(&d);
    return xf_fail(err, rc, "out of memory describing the federation");
  }
  rc = xf_admission_decide(spec, has_decision ? &d : NULL, &f.fed, out, err);
  if (rc == XF_OK && has_decision && decision_json &&
      xf_policy_decision_json(&d, decision_json, err) != XF_OK)
    *decision_json = NULL;
  xf__federation_free(&f);
  xf_policy_decision_free(&d);
  return rc;
}
