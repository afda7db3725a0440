/* SPDX-License-Identifier: Apache-2.0 */
/* A round attempt's commit: aggregate, central noise, the optimizer's step
 * and the new model file (coordinator/commit.h). */
#include "coordinator/commit.h"

#include <string.h>

#include "base/alloc.h"
#include "kernels/checkpoint.h"
#include "privacy/plan.h"

/* The secure sum joins the folded updates (regional aggregates, or sites
 * outside secure aggregation) as one input. */
static xf_err fold_secure_sum(xf_aggregator *agg, float *secure_mean, uint64_t secure_weight,
                              size_t n_params, xf_errctx *err) {
  xf_agg_update *u = NULL;
  xf_err rc = xf_aggregator_begin_update(agg, XF_COMMIT_SECURE_SUM_ID,
                                         secure_weight ? secure_weight : 1, &u, err);
  if (rc == XF_OK) rc = xf_aggregator_fold(u, 0, secure_mean, n_params, err);
  if (rc == XF_OK) rc = xf_aggregator_end_update(u, err);
  else xf_aggregator_abort_update(u);
  xf_free(secure_mean);
  return rc;
}

xf_err xf_commit_aggregate(xf_aggregator *agg, float *secure_mean, uint64_t secure_weight,
                           size_t n_params, float **mean, uint64_t *weight, xf_errctx *err) {
  *mean = NULL;
  size_t folded = agg ? xf_aggregator_committed(agg) : 0;
  if (secure_mean && folded == 0) {
    *mean = secure_mean;
    *weight = secure_weight;
    return XF_OK;
  }
  if (secure_mean) XF_GUARD(fold_secure_sum(agg, secure_mean, secure_weight, n_params, err));
  XF_ENSURE(agg && xf_aggregator_committed(agg) > 0, err, XF_EINVAL,
            "no update was taken in this attempt");
  float *out = xf_mallocarray(n_params, sizeof(float));
  if (!out) return xf_fail(err, XF_ENOMEM, "out of memory for the aggregate");
  xf_err rc = xf_aggregator_finish(agg, out, err);
  if (rc != XF_OK) {
    xf_free(out);
    return rc;
  }
  *mean = out;
  *weight = xf_aggregator_total_weight(agg);
  return XF_OK;
}

xf_err xf_commit_noise_sd(const xf_privacy_spec *privacy, uint32_t sites, size_t n_params,
                          double *sd, xf_errctx *err) {
  *sd = 0;
  if (privacy->unit != XF_PRIVACY_UNIT_SITE || privacy->mode != XF_PRIVACY_CENTRAL ||
      !privacy->has_noise_multiplier)
    return XF_OK;
  double n = sites ? (double)sites : 1.0;
  return xf_privacy_grid_sigma(privacy->noise_multiplier, privacy->clip / n, n_params, sd, err);
}

static xf_err add_central_noise(const xf_commit_round *in, float *mean, size_t n_params,
                                xf_errctx *err) {
  double sd = 0;
  XF_GUARD(xf_commit_noise_sd(in->privacy, in->sites, n_params, &sd, err));
  if (sd == 0) return XF_OK;
  if (!in->noise) return xf_fail(err, XF_EINTERNAL, "no noise generator");
  return xf_noise_gaussian_vec(in->noise, sd, mean, n_params);
}

/* The new model file and the optimizer's state, once the step is taken. */
static xf_err save_model(const xf_commit_round *in, const xf_server_opt *opt,
                         const float *params, xf_commit_result *out, xf_errctx *err) {
  /* The encoder hashes the parameters for the file's header: that digest is
   * the round's parameter digest, taken once. */
  XF_GUARD(xf_checkpoint_encode_as(in->model, params, XF_CHECKPOINT_F32, &out->model,
                                   &out->model_len, &out->params_digest, err));
  if (xf_server_opt_save(opt, &out->opt_state, &out->opt_len) != XF_OK)
    return xf_fail(err, XF_ENOMEM, "out of memory saving the optimizer state");
  return XF_OK;
}

xf_err xf_commit_global(const xf_commit_round *in, xf_server_opt *opt, float *params,
                        size_t n_params, xf_commit_result *out, xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  float *mean = NULL;
  XF_GUARD(xf_commit_aggregate(in->agg, in->secure_mean, in->secure_weight, n_params, &mean,
                               &out->weight, err));
  xf_err rc = add_central_noise(in, mean, n_params, err);
  if (rc == XF_OK) xf_server_opt_step(opt, params, mean);
  xf_free(mean);
  if (rc == XF_OK) rc = save_model(in, opt, params, out, err);
  if (rc != XF_OK) xf_commit_result_free(out);
  return rc;
}

void xf_commit_result_free(xf_commit_result *r) {
  xf_free(r->model);
  xf_free(r->opt_state);
  memset(r, 0, sizeof(*r));
}
