/* SPDX-License-Identifier: Apache-2.0 */
/* The release check (policy/release.h). */
#include "policy/release.h"

#include <stdio.h>

static const char *str(const char *s) { return s ? s : ""; }

bool xf_release_allows(const xf_release_rule *r, const xf_release_artifact *a, char *why,
                       size_t why_len) {
  char scratch[1];
  if (!why || why_len == 0) {
    why = scratch;
    why_len = sizeof(scratch);
  }
  why[0] = '\0';
  const char *rule = r->rule && *r->rule ? r->rule : "default";
  unsigned need = r->min_cohort ? r->min_cohort : 1;
  if (a->contributors < need) {
    snprintf(why, why_len,
             "it sums %u site%s; rule %s lets it leave region %s for %s only as an aggregate of "
             "at least %u sites",
             a->contributors, a->contributors == 1 ? "" : "s", rule, str(r->from), str(r->to),
             need);
    return false;
  }
  if (r->require_secagg && !a->secagg) {
    snprintf(why, why_len,
             "rule %s lets it leave region %s for %s only when it was securely aggregated: "
             "enable secure_aggregation",
             rule, str(r->from), str(r->to));
    return false;
  }
  if (r->has_max_epsilon && (!a->privacy || !a->has_epsilon || !(a->epsilon <= r->max_epsilon))) {
    if (!a->privacy || !a->has_epsilon)
      snprintf(why, why_len,
               "rule %s lets it leave region %s for %s only with differential privacy at epsilon "
               "<= %g: add privacy with a target_epsilon of at most %g",
               rule, str(r->from), str(r->to), r->max_epsilon, r->max_epsilon);
    else
      snprintf(why, why_len,
               "rule %s lets it leave region %s for %s only with differential privacy at epsilon "
               "<= %g; the job's target is %g",
               rule, str(r->from), str(r->to), r->max_epsilon, a->epsilon);
    return false;
  }
  return true;
}
