/* SPDX-License-Identifier: Apache-2.0 */
/* The one release check: may an artifact leave its region under the
 * conditions of the residency rule that lets it (docs/policy.md,
 * "Conditions")? A site asks it before it trains (of the plan its task
 * carries), a regional aggregator before its aggregate leaves, the global
 * coordinator when an aggregate arrives, and admission when it predicts a
 * run. */
#ifndef XF_POLICY_RELEASE_H
#define XF_POLICY_RELEASE_H

#include <stdbool.h>
#include <stddef.h>

/* The conditions, as the rule and the plan give them. Strings are
 * borrowed; NULL reads as "". */
typedef struct xf_release_rule {
  const char *rule;      /* its id ("default" when no rule was needed) */
  const char *from;      /* the region the artifact leaves */
  const char *to;        /* the region it goes to */
  unsigned min_cohort;   /* sites it must sum; 0 and 1: no condition */
  bool require_secagg;
  bool has_max_epsilon;
  double max_epsilon;
} xf_release_rule;

/* The artifact. */
typedef struct xf_release_artifact {
  unsigned contributors; /* sites whose updates it sums (1 for one site's update) */
  bool secagg;           /* formed under secure aggregation */
  bool privacy;          /* the job has differential privacy */
  bool has_epsilon;      /* ... with a target epsilon it stops before */
  double epsilon;
} xf_release_artifact;

/* True when the artifact meets every condition. Otherwise false, and why
 * (why_len bytes, may be 0) says which condition fails, naming the rule,
 * the regions and what would meet it. */
bool xf_release_allows(const xf_release_rule *r, const xf_release_artifact *a, char *why,
                       size_t why_len);

#endif
