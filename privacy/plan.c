/* SPDX-License-Identifier: Apache-2.0 */
/* Privacy plans: calibration of the site's noise for a job. */
#include "privacy/plan.h"

#include <inttypes.h>
#include <math.h>

#include "privacy/accountant.h"
#include "privacy/noise.h"

xf_err xf_privacy_grid_sigma(double z, double sensitivity, size_t n, double *sigma,
                             xf_errctx *err) {
  if (!(isfinite(z) && z > 0 && isfinite(sensitivity) && sensitivity > 0))
    return xf_fail(err, XF_ERANGE, "noise multiplier %g and sensitivity %g must be positive", z,
                   sensitivity);
  double s = z * sensitivity;
  /* Each pass grows sigma by the shortfall; the slack is a small fraction of
   * sigma (sqrt(n) 2^-14 of it at most), so two or three passes settle it. */
  for (int i = 0; i < 64; i++) {
    double zeff;
    if (xf_noise_grid_multiplier(s, sensitivity, n, &zeff) != XF_OK)
      return xf_fail(err, XF_ERANGE, "noise of standard deviation %g is outside the sampler's "
                     "range", s);
    if (zeff >= z) {
      *sigma = s;
      return XF_OK;
    }
    s *= (z / zeff) * (1 + 1e-9);
  }
  return xf_fail(err, XF_ERANGE,
                 "the sampler's grid cannot reach noise multiplier %g for %zu values: the "
                 "model is too large for its precision", z, n);
}


xf_err xf_privacy_plan_for(const xf_privacy_spec *pv, const xf_privacy_schedule *schedule,
                           uint64_t records, size_t n_params, xf_privacy_plan *out,
                           xf_errctx *err) {
  *out = (xf_privacy_plan){0};
  bool record = pv->unit == XF_PRIVACY_UNIT_RECORD && pv->mode != XF_PRIVACY_NONE;
  bool local = pv->unit == XF_PRIVACY_UNIT_SITE && pv->mode == XF_PRIVACY_LOCAL;
  if (!record && !local) return XF_OK;
  out->site_noise = true;
  if (record) {
    uint64_t batch = schedule->batch_size;
    if (records == 0 || batch > records) {
      xf_errctx_field(err, "local.batch_size");
      return xf_fail(err, XF_EINVAL,
                     "DP-SGD draws a Poisson sample of expected size %" PRIu64 " from %" PRIu64
                     " records: the batch must not exceed the dataset",
                     batch, records);
    }
    out->sampling_rate = (double)batch / (double)records;
    out->steps_per_round =
        (uint64_t)schedule->epochs * xf_dp_steps_per_epoch((size_t)records, (int)batch);
  } else {
    /* Each round's update is released whole to an aggregator that knows
     * who took part: no amplification by sampling. */
    out->sampling_rate = 1.0;
    out->steps_per_round = 1;
  }
  out->planned_steps = out->steps_per_round * schedule->rounds;
  /* The table sampler is within tv of the exact discrete Gaussian per
   * noised vector, so planned_steps vectors are within planned_steps tv of
   * the exact mechanism, and an (eps, delta')-DP guarantee of the exact one
   * holds for the drawn one at delta' + (1 + e^eps) planned_steps tv
   * (docs/privacy-noise.md, "The grid sampler"). When that share is a
   * negligible part of the job's delta, the calibration is made at delta
   * less it and the table draws the noise; otherwise (a given multiplier,
   * whose epsilon is reported at the job's delta, or a large target whose
   * e^eps makes the share count) the exact sampler draws it and nothing is
   * charged. */
  double tv;
  XF_GUARD(xf_noise_grid_tv(n_params, &tv));
  out->table_sampler = false;
  out->sampler_delta = 0;
  if (pv->has_noise_multiplier) {
    out->accounted_multiplier = pv->noise_multiplier;
  } else {
    double eps, order;
    xf_errctx inner = {0};
    double share = (double)out->planned_steps * tv * (1 + exp(pv->target_epsilon));
    if (isfinite(share) && share <= pv->delta * XF_PRIVACY_TABLE_SHARE) {
      out->table_sampler = true;
      out->sampler_delta = share;
    }
    double delta = pv->delta - out->sampler_delta;
    if (xf_dp_calibrate(pv->target_epsilon, out->sampling_rate, out->planned_steps, delta,
                        &out->accounted_multiplier, &eps, &order, &inner) != XF_OK) {
      xf_errctx_field(err, "privacy.target_epsilon");
      return xf_fail(err, XF_EINVAL, "cannot calibrate the noise for %" PRIu64
                     " steps at sampling rate %.6g: %s", out->planned_steps, out->sampling_rate,
                     inner.msg);
    }
  }
  if (out->accounted_multiplier == 0) {
    out->noise_multiplier = 0;
    return XF_OK;
  }
  /* The sum of clipped per-record gradients (record) or the clipped update
   * (local) moves by at most clip between neighbours. */
  double sigma;
  XF_GUARD(xf_privacy_grid_sigma(out->accounted_multiplier, pv->clip, n_params, &sigma, err));
  out->noise_multiplier = sigma / pv->clip;
  return XF_OK;
}
