/* SPDX-License-Identifier: Apache-2.0 */
/* A job's privacy in terms of its spec: the plan of the noise a site adds
 * (privacy/plan.h under the job's rounds, epochs and batch), and what the
 * coordinator accounts for site-level privacy whose noise is in the sum
 * (central, or distributed under secure aggregation). docs/privacy.md. */
#ifndef XF_JOB_JOBPRIVACY_H
#define XF_JOB_JOBPRIVACY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "privacy/plan.h"

/* xf_privacy_plan_for with the job's privacy section, rounds, local epochs
 * and batch size. Errors as that function's. */
xf_err xf_job_privacy_plan(const xf_jobspec *spec, uint64_t records, size_t n_params,
                           xf_privacy_plan *out, xf_errctx *err) XF_WARN_UNUSED;

/* Site-level privacy whose noise the aggregator's sum carries: mode central
 * (the aggregator adds it) or distributed (the sites add shares of it under
 * secure aggregation). The coordinator accounts for it. */
bool xf_job_noise_in_sum(const xf_jobspec *spec);

/* The chance that a site is asked in a round: the invited fraction
 * (sites_per_round times over_selection, at most 1). Submission refuses
 * central privacy with a count of sites per round, whose rate would depend
 * on how many sites are eligible. The cohort is a fixed-size draw,
 * accounted as Poisson sampling at the same rate (docs/coordinator.md). */
double xf_job_sampling_rate(const xf_jobspec *spec);

/* The epsilon at the job's delta after `rounds` committed rounds of
 * noise-in-sum privacy (0 rounds: 0). False when the job has no such
 * privacy (or no noise multiplier yet: submission calibrates it); INFINITY
 * when the accountant fails. */
bool xf_job_epsilon(const xf_jobspec *spec, uint32_t rounds, double *eps);

#endif
