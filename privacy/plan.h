/* SPDX-License-Identifier: Apache-2.0 */
/* The noise a site adds for a job's privacy section and what the accountant
 * charges for it: the one computation that the site (which trains, noises
 * and keeps the budget ledger) and the coordinator (which reports) share.
 * docs/privacy.md explains the accounting. */
#ifndef XF_PRIVACY_PLAN_H
#define XF_PRIVACY_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "privacy/privacy.h"

/* The largest share of a job's delta the table sampler may take
 * (xf_privacy_plan.sampler_delta): beyond it, as with a large target_epsilon
 * whose e^epsilon magnifies the sampler's distance, the exact sampler is
 * used and nothing is charged. */
#define XF_PRIVACY_TABLE_SHARE 0x1p-20

/* What a site does for one job on one dataset. */
typedef struct xf_privacy_plan {
  /* The site adds the noise: unit record (DP-SGD) or unit site with mode
   * local. False for mode none, central and distributed: then nothing
   * below is set. */
  bool site_noise;
  double sampling_rate;        /* q of each noised step: L / records for record, 1 for local */
  uint64_t steps_per_round;    /* noised steps in one round the site takes part in */
  uint64_t planned_steps;      /* steps_per_round * rounds: what target_epsilon covers */
  double accounted_multiplier; /* the noise multiplier the accountant charges */
  double noise_multiplier;     /* sigma / clip actually drawn: at least accounted_multiplier,
                                  grown so that the grid's rounding slack is paid for
                                  (xf_noise_grid_multiplier) */
  bool table_sampler;          /* the noise is drawn by the table sampler
                                  (xf_noise_use_table): only when calibrating to
                                  target_epsilon and its share below is at most
                                  delta * XF_PRIVACY_TABLE_SHARE; else the exact sampler */
  double sampler_delta;        /* the share of delta charged for the table sampler's distance
                                  from the exact discrete Gaussian, (1 + e^target_epsilon)
                                  planned_steps xf_noise_grid_tv(n_params): the multiplier
                                  is calibrated at delta less it. 0 with the exact sampler */
} xf_privacy_plan;

/* How a job trains at a site, as far as privacy is concerned. */
typedef struct xf_privacy_schedule {
  uint32_t rounds;     /* the job's rounds: what target_epsilon covers */
  uint32_t epochs;     /* local epochs per round */
  uint32_t batch_size; /* records per step (DP-SGD's expected Poisson batch) */
} xf_privacy_schedule;

/* The plan for privacy pv under schedule on a dataset of `records` training
 * records and a model of n_params parameters. With target_epsilon and no noise_multiplier, the
 * accounted multiplier is the smallest that keeps planned_steps at the
 * sampling rate within target_epsilon at the job's delta; with
 * noise_multiplier it is that value. XF_EINVAL naming the field when the
 * spec cannot be run on this dataset (a batch larger than the dataset, a
 * target no noise reaches). */
xf_err xf_privacy_plan_for(const xf_privacy_spec *pv, const xf_privacy_schedule *schedule,
                           uint64_t records, size_t n_params, xf_privacy_plan *out,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The standard deviation to ask of xf_noise_gaussian_vec for an n-vector of
 * L2 sensitivity `sensitivity` so that the mechanism is at least as private
 * as the Gaussian with multiplier z: the smallest sigma >= z * sensitivity
 * found whose xf_noise_grid_multiplier is >= z. XF_ERANGE when z or the
 * sensitivity are not positive and finite. */
xf_err xf_privacy_grid_sigma(double z, double sensitivity, size_t n, double *sigma,
                             xf_errctx *err) XF_WARN_UNUSED;

#endif
