/* SPDX-License-Identifier: Apache-2.0 */
/* The site's own residency rules: the check of a task's residency plan
 * against the site operator's local policy (kept in the site database with
 * policy/policy.h), the rows it writes to the site's audit trail, and the
 * privacy-budget cap a residency rule sets (docs/policy.md, "Site-local
 * rules"). No sockets: the daemon copies the offer's facts in. */
#ifndef XF_SITE_RESIDENCY_H
#define XF_SITE_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "policy/policy.h"
#include "site/registry.h"
#include "storage/db.h"

/* What a TaskOffer's Residency says (net/xfed.proto), as plain values.
 * Strings are borrowed. */
typedef struct xf_site_residency {
  uint64_t policy_version;        /* the coordinator's policy version */
  const char *coordinator_region; /* where the global coordinator aggregates */
  const char *aggregator_region;  /* where this site's update goes */
  const char *path;               /* "direct" or "regional" */
  const char *rule;               /* the coordinator's rule behind the path */
  uint32_t min_cohort;            /* sites a regional aggregate holds before it leaves */
  bool require_secagg;
  bool has_max_epsilon;
  double max_epsilon;
  double epsilon;                 /* the epsilon the decision was taken at; 0: none */
} xf_site_residency;

/* Who, what and where of one task, for the check and its audit row.
 * Strings are borrowed. */
typedef struct xf_site_task_ref {
  const char *site;   /* this site's name (the audit actor) */
  const char *region; /* this site's region (site.json) */
  const char *job;
  uint32_t round, attempt;
} xf_site_task_ref;

/* The outcome of the local check. */
typedef struct xf_site_residency_verdict {
  bool allowed;
  uint64_t policy_version;              /* the local version checked; 0: none */
  char rule[XF_POLICY_NAME_MAX];        /* the local rule that decided, or "none" */
  char path[16];                        /* the local path: "none", "direct", "regional" */
  char why[512];                        /* one sentence for a person */
  char details[1024];                   /* the refusal text: why, the rule, and what
                                         * would make it allowed */
} xf_site_residency_verdict;

/* Checks a task against the site's local policy (its current version in db)
 * at time now and fills *out; does not write the audit row
 * (xf_site_residency_audit does).
 *
 * Version 0 (no local policy), and a local policy that does not list the
 * job's dataset at this site, restrict nothing: out->allowed, rule "none".
 * Otherwise a task without a plan (res->coordinator_region NULL or empty:
 * the coordinator runs without a policy) is refused, since the rules cannot
 * be checked; and a task with one is decided with xf_policy_decide from spec
 * and res (the
 * epsilon is res->epsilon when above 0, else the spec's target_epsilon) and
 * refused when the decision fails, this site is not eligible, the local path
 * is "regional" but the update leaves the region unaggregated, the local
 * min_cohort exceeds res->min_cohort, or the update goes to a region that is
 * neither this site's nor the coordinator's. Returns XF_OK whatever the
 * verdict; XF_EDB / XF_ENOMEM when the policy cannot be read. */
xf_err xf_site_residency_check(xf_db *db, const xf_site_task_ref *task,
                               const xf_site_residency *res, const xf_jobspec *spec, double now,
                               xf_site_residency_verdict *out, xf_errctx *err) XF_WARN_UNUSED;

/* Appends the verdict to the site's audit trail: kind "decision" when
 * allowed, else "refused_task", subject the job, detail {job, round,
 * attempt, dataset, policy_version, coordinator_policy_version, rule, why,
 * aggregator_region, path}. Errors as xf_audit_append. */
xf_err xf_site_residency_audit(xf_db *db, const xf_site_task_ref *task, const char *dataset,
                               const xf_site_residency *res,
                               const xf_site_residency_verdict *v, double now,
                               xf_errctx *err) XF_WARN_UNUSED;

/* Appends a "crossing" row: this site's update of `bytes` bytes went from
 * its region to an aggregator in to_region. detail {job, round, attempt,
 * kind: "update", from, to, bytes}. Errors as xf_audit_append. */
xf_err xf_site_audit_crossing(xf_db *db, const xf_site_task_ref *task, const char *to_region,
                              uint64_t bytes, double now, xf_errctx *err) XF_WARN_UNUSED;

/* Where a privacy-budget cap across jobs comes from. */
typedef enum xf_site_cap_source {
  XF_SITE_CAP_NONE = 0, /* no cap */
  XF_SITE_CAP_BUDGET,   /* the operator's budget for the dataset */
  XF_SITE_CAP_POLICY,   /* the residency rule's max_epsilon */
} xf_site_cap_source;

typedef struct xf_site_cap {
  xf_site_cap_source source;
  double epsilon; /* the cap, when source is not NONE */
  double delta;   /* the delta it is stated at */
} xf_site_cap;

/* The lower of the dataset's budget (at its budget delta) and the residency
 * rule's max_epsilon (at the job's delta) when res has one (res may be
 * NULL); the budget wins a tie. Both caps still hold (each at its own
 * delta); this one is the one that binds first, checked and named first. */
xf_site_cap xf_site_budget_cap(const xf_site_dataset *ds, const xf_site_residency *res,
                               double job_delta);

#endif
