/* SPDX-License-Identifier: Apache-2.0 */
/* A job's privacy in terms of its spec (job/jobprivacy.h). */
#include "job/jobprivacy.h"

#include <math.h>

#include "base/log.h"
#include "privacy/accountant.h"

xf_err xf_job_privacy_plan(const xf_jobspec *spec, uint64_t records, size_t n_params,
                           xf_privacy_plan *out, xf_errctx *err) {
  xf_privacy_schedule s = {.rounds = spec->rounds,
                           .epochs = spec->local.epochs,
                           .batch_size = spec->local.batch_size};
  return xf_privacy_plan_for(&spec->privacy, &s, records, n_params, out, err);
}

bool xf_job_noise_in_sum(const xf_jobspec *spec) {
  return spec->privacy.unit == XF_PRIVACY_UNIT_SITE &&
         (spec->privacy.mode == XF_PRIVACY_CENTRAL ||
          spec->privacy.mode == XF_PRIVACY_DISTRIBUTED);
}

double xf_job_sampling_rate(const xf_jobspec *spec) {
  double q = spec->sites_per_round * spec->over_selection;
  return q > 1 ? 1 : q;
}

bool xf_job_epsilon(const xf_jobspec *spec, uint32_t rounds, double *eps) {
  if (!xf_job_noise_in_sum(spec) || !spec->privacy.has_noise_multiplier) return false;
  *eps = 0;
  if (rounds == 0) return true;
  double order;
  xf_errctx err = {0};
  if (xf_dp_epsilon_sgm(xf_job_sampling_rate(spec), spec->privacy.noise_multiplier, rounds,
                        spec->privacy.delta, NULL, 0, XF_DP_CONVERSION_IMPROVED, eps, &order,
                        &err) != XF_OK) {
    XF_ERROR("accountant_failed", "reason=\"%s\"", err.msg);
    *eps = INFINITY;
  }
  return true;
}
