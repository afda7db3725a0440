/* SPDX-License-Identifier: Apache-2.0 */
/* The commit of a round attempt, with no sockets, no loop and no journal:
 * the attempt's aggregate (the updates folded and the secure sum), the
 * server optimizer's step, central noise, and the new model file and
 * optimizer state a global coordinator journals. host.c stores what it is
 * given and writes the journal's row (docs/coordinator.md, "Jobs and rounds"). */
#ifndef XF_COORDINATOR_COMMIT_H
#define XF_COORDINATOR_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "coordinator/aggregate.h"
#include "crypto/digest.h"
#include "job/jobspec.h"
#include "privacy/privacy.h"
#include "kernels/model.h"
#include "privacy/noise.h"

/* The site id under which the secure sum joins the folded updates: above
 * every id a site is given, so it never meets one. */
#define XF_COMMIT_SECURE_SUM_ID (UINT64_MAX >> 1)

/* The attempt's aggregate delta into *mean (n_params floats, the caller's
 * to xf_free) and its weight:
 *  - the secure sum's mean alone when nothing was folded into agg;
 *  - else the updates folded into agg with the secure sum's mean, when
 *    there is one, folded as one more input carrying secure_weight (1 when
 *    0), finished by agg's strategy.
 * secure_mean (n_params floats or NULL) is taken over in every case. agg
 * may be NULL (nothing folded). XF_EINVAL when there is nothing to
 * aggregate; the aggregator's errors and XF_ENOMEM otherwise. */
xf_err xf_commit_aggregate(xf_aggregator *agg, float *secure_mean, uint64_t secure_weight,
                           size_t n_params, float **mean, uint64_t *weight,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The standard deviation of the central noise on the mean of `sites`
 * clipped updates of n_params values: N(0, (sigma C)^2) on their sum is
 * N(0, (sigma C / n)^2) on their mean, with the noise sampler's grid slack
 * paid on top (xf_privacy_grid_sigma). *sd is 0 when the privacy spec asks
 * for no central noise (a unit other than site, a mode other than central,
 * or no noise multiplier). sites 0 counts as 1. XF_ERANGE as
 * xf_privacy_grid_sigma. */
xf_err xf_commit_noise_sd(const xf_privacy_spec *privacy, uint32_t sites, size_t n_params,
                          double *sd, xf_errctx *err) XF_WARN_UNUSED;

/* A global round's commit: what it is given. */
typedef struct xf_commit_round {
  const xf_privacy_spec *privacy; /* the job's: decides the central noise */
  const xf_model *model;    /* the architecture the model file names */
  xf_noise *noise;          /* central noise (may be NULL when none is asked) */
  uint32_t sites;           /* the reports the aggregate counts */
  xf_aggregator *agg;       /* the folded updates (may be NULL) */
  float *secure_mean;       /* taken over, as by xf_commit_aggregate */
  uint64_t secure_weight;
} xf_commit_round;

/* ... and what it gives: the new global model and what to journal. */
typedef struct xf_commit_result {
  uint8_t *model;           /* the new model as a float32 model file (xf_free) */
  size_t model_len;
  uint8_t *opt_state;       /* the server optimizer's state after the step (xf_free) */
  size_t opt_len;
  xf_digest params_digest;  /* BLAKE2b-256 of the new parameters */
  uint64_t weight;          /* the aggregate's */
} xf_commit_result;

/* Commits a global round: the aggregate (xf_commit_aggregate), the central
 * noise on it (xf_commit_noise_sd, drawn from in->noise), the server
 * optimizer's step on params[0..n_params) (in place, as opt's state), the
 * new model file and the optimizer's saved state into *out (the caller
 * frees it with xf_commit_result_free; zeroed on failure). params and opt
 * are changed once the step is taken, even if saving fails after it.
 * XF_EINTERNAL when noise is asked and in->noise is NULL; the errors of the
 * steps otherwise (XF_ENOMEM "out of memory saving the optimizer state"). */
xf_err xf_commit_global(const xf_commit_round *in, xf_server_opt *opt, float *params,
                        size_t n_params, xf_commit_result *out, xf_errctx *err) XF_WARN_UNUSED;

/* Frees what r holds; r may be zeroed. */
void xf_commit_result_free(xf_commit_result *r);

#endif
