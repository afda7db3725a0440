/* SPDX-License-Identifier: Apache-2.0 */
/* Admission: whether a job will run on this federation under this policy,
 * and the plan it runs under — which sites, through which aggregator, in
 * which secure-aggregation and release groups, under which conditions. The
 * one function behind `xfed policy check`, submission and every attempt
 * (docs/admission.md): what it allows runs, what it refuses is refused
 * with the reason and the fix, before any site trains. */
#ifndef XF_JOB_ADMISSION_H
#define XF_JOB_ADMISSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "policy/policy.h"
#include "policy/release.h"

/* Room for names (sites, regions, aggregators, rules) with their terminator. */
#define XF_ADMIT_NAME_MAX 64

/* The coordinator's id of a site or regional aggregator: the first 8 bytes of
 * BLAKE2b-256("site:" NAME), little-endian, top bit cleared. */
uint64_t xf_admit_site_id(const char *name);

/* ---- the federation as the coordinator sees it ---------------------------------------- */

/* One dataset a site announced. Strings are borrowed. */
typedef struct xf_fed_dataset {
  const char *name;
  const char *const *tags;
  size_t n_tags;
  uint32_t train_records, test_records, classes, h, w, c;
} xf_fed_dataset;

/* One site: straight to the coordinator, or behind a regional aggregator. */
typedef struct xf_fed_site {
  const char *name;
  const char *region;
  const char *via;      /* the regional aggregator it is behind (its name), NULL: direct */
  const char *via_region;
  bool connected;       /* its session (or its aggregator's and its own) is up */
  const xf_fed_dataset *datasets;
  size_t n_datasets;
} xf_fed_site;

typedef struct xf_federation {
  const xf_fed_site *sites;
  size_t n_sites;
  const char *coordinator_region; /* "" when the coordinator has none */
  /* Without a residency policy ("residency_policy": "off") every site is
   * eligible where the spec routes it; with one, decision says. */
  bool residency_on;
  /* A policy-only view (`xfed policy check --db`): the sites are the
   * policy's, each assumed connected where the policy's plan routes it. */
  bool assumed;
} xf_federation;

/* ---- the plan ------------------------------------------------------------------------------ */

typedef enum xf_admit_verdict {
  XF_ADMIT_RUNS = 0,   /* the job runs (an attempt can open now) */
  XF_ADMIT_DENIED,     /* the residency policy does not allow it */
  XF_ADMIT_UNRUNNABLE, /* it cannot run as composed on this federation (the reason
                          names the setting and the fix) */
  XF_ADMIT_SHORT       /* too few eligible sites are connected for min_sites */
} xf_admit_verdict;

/* "runs", "denied", "unrunnable", "short". */
const char *xf_admit_verdict_name(xf_admit_verdict v);

typedef struct xf_admit_site {
  char name[XF_ADMIT_NAME_MAX];
  char region[XF_ADMIT_NAME_MAX];
  uint64_t id;                     /* xf_admit_site_id(name) */
  char via[XF_ADMIT_NAME_MAX];     /* its aggregator, "" when direct */
  uint64_t via_id;                 /* 0 when direct */
  bool connected;
  bool eligible;                   /* takes part when drawn */
  char rule[XF_POLICY_NAME_MAX];   /* the rule that decided ("default", "-" without policy) */
  char why[320];                   /* for a person: why it is in, or why not */
  uint32_t group;                  /* its group (eligible sites) */
  uint64_t records;                /* its dataset's training records */
  uint64_t test_records;
  bool has_max_epsilon;            /* the cap its admitting rule sets on the dataset */
  double max_epsilon;
} xf_admit_site;

/* The sites that reach the coordinator one way: straight (via ""), or
 * through one regional aggregator. */
typedef struct xf_admit_group {
  char via[XF_ADMIT_NAME_MAX];
  uint64_t via_id;
  char region[XF_ADMIT_NAME_MAX];  /* the aggregator's region ("" for the direct group) */
  unsigned eligible;               /* eligible sites in it */
  unsigned min_sites;              /* the fewest it can run with: 2 under secure aggregation,
                                      and at least the release rule's min_cohort */
  bool secagg;                     /* secure aggregation runs within it */
  /* What its aggregate must meet to leave its region (xf_admit_group_release). */
  unsigned min_cohort;             /* 0: no condition */
  bool require_secagg;
  bool has_max_epsilon;
  double max_epsilon;
  char to[XF_ADMIT_NAME_MAX];      /* the coordinator's region */
  char rule[XF_POLICY_NAME_MAX];
  char path[16];                   /* "direct" or "regional" (the policy's path) */
  bool usable;
  char why[320];                   /* when not usable: why, and the fix */
} xf_admit_group;

typedef struct xf_admission {
  xf_admit_verdict verdict;
  char reason[1536];               /* not RUNS: why, with what would fix it */
  bool has_policy;
  uint64_t policy_version;
  xf_admit_site *sites;            /* every site holding the job's data, by name */
  size_t n_sites;
  xf_admit_group *groups;          /* the direct group first (when it has sites), then
                                      aggregators by name */
  size_t n_groups;
  unsigned eligible;               /* eligible sites over usable groups */
  unsigned invite;                 /* sites an attempt invites (xf_jobspec_cohort) */
  uint32_t h, w, c, classes;       /* the data's shape (the first eligible site's) */
  char composition[400];           /* how aggregation composes across the groups */
} xf_admission;

/* Admits spec on fed. decision is the residency policy's decision of the job
 * (xf_policy_decide, the coordinator's region) when fed->residency_on, else
 * NULL. The spec must have passed xf_jobspec_validate. On success (the
 * verdict may still refuse) the caller frees *out with
 * xf_admission_free. XF_ENOMEM. */
xf_err xf_admission_decide(const xf_jobspec *spec, const xf_policy_decision *decision,
                           const xf_federation *fed, xf_admission *out,
                           xf_errctx *err) XF_WARN_UNUSED;

void xf_admission_free(xf_admission *a);

/* Whether spec's data.dataset is a dataset anyone here knows: a site of fed
 * announced it, or policy (NULL when there is none) lists it at some site.
 * A job on a dataset nobody has is the researcher's mistake (a misspelt
 * name), not the policy's or the federation's: XF_EINVAL naming the field
 * data.dataset, the datasets that are known and the nearest of them ("did
 * you mean"). A federation that knows no dataset at all (no site announced
 * one, the policy lists none) is XF_OK: admission's verdict then says what
 * is missing. Run at check and submission, before admission. XF_ENOMEM. */
xf_err xf_admission_check_dataset(const xf_jobspec *spec, const xf_federation *fed,
                                  const xf_policy *policy, xf_errctx *err) XF_WARN_UNUSED;

/* The one sentence a job that will not run is refused with, at check and at
 * submission alike: what kind of refusal, then the reason with its fix.
 * "" for a job that runs. Returns buf. */
char *xf_admission_refusal(const xf_admission *a, char *buf, size_t len);

/* The release conditions of group g as policy/release.h's rule (its strings
 * point into g). */
void xf_admit_group_release(const xf_admit_group *g, xf_release_rule *out);

/* The admission as compact JSON: verdict, reason, policy_version (null
 * without a policy), eligible, invite, min_sites, composition, sites
 * [{site, region, via, connected, eligible, rule, reason}], groups [{via,
 * region, eligible, min_sites, secagg, rule, path, min_cohort,
 * require_secagg, max_epsilon, usable, reason}]. What `xfed policy check`
 * prints and what submission refuses with. The caller frees *text with
 * xf_free. XF_ENOMEM. */
xf_err xf_admission_json(const xf_admission *a, const xf_jobspec *spec, char **text,
                         xf_errctx *err) XF_WARN_UNUSED;

/* The site of the plan by id; NULL when it holds no data of the job. */
const xf_admit_site *xf_admission_site(const xf_admission *a, uint64_t id);

#endif
