/* SPDX-License-Identifier: Apache-2.0 */
/* A job spec as the residency policy sees it (job/residency.h). */
#include "job/residency.h"

#include <string.h>

xf_err xf_residency_job_of(const xf_jobspec *spec, const char *coordinator_region,
                           const char **tags, xf_policy_job *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  for (uint32_t i = 0; i < spec->data.n_tags; i++) tags[i] = spec->data.tags[i];
  bool privacy = spec->privacy.mode != XF_PRIVACY_NONE;
  if (privacy && !spec->privacy.has_target_epsilon) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "privacy.target_epsilon");
    return xf_fail(err, XF_EDENIED,
                   "the job has privacy but no target_epsilon: the residency policy weighs the "
                   "epsilon a job promises not to exceed, so set privacy.target_epsilon");
  }
  out->dataset = spec->data.dataset;
  out->tags = tags;
  out->n_tags = spec->data.n_tags;
  out->privacy = privacy;
  out->epsilon = privacy ? spec->privacy.target_epsilon : 0;
  out->secagg = spec->secure_aggregation.enabled;
  out->min_sites = spec->min_sites;
  out->coordinator_region = coordinator_region;
  return XF_OK;
}
