/* SPDX-License-Identifier: Apache-2.0 */
/* The facts of a job spec that the residency policy decides on
 * (policy/policy.h's xf_policy_job), shared by the coordinator and
 * `xfed policy check`. */
#ifndef XF_JOB_RESIDENCY_H
#define XF_JOB_RESIDENCY_H

#include "base/result.h"
#include "job/jobspec.h"
#include "policy/policy.h"

/* Fills *out from spec for a coordinator in coordinator_region: the dataset
 * and its tags (pointed to through tags, an array of XF_JOB_TAGS_MAX the
 * caller keeps alive with spec), privacy and the epsilon the job spends
 * (its privacy.target_epsilon), secure aggregation and min_sites.
 * XF_EDENIED naming "privacy.target_epsilon" for a job with privacy but no
 * target: a policy can only weigh an epsilon the job promises not to
 * exceed. */
xf_err xf_residency_job_of(const xf_jobspec *spec, const char *coordinator_region,
                           const char **tags, xf_policy_job *out, xf_errctx *err) XF_WARN_UNUSED;

#endif
