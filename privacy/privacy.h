/* SPDX-License-Identifier: Apache-2.0 */
/* What a job asks of differential privacy: the unit protected, where the
 * noise is added, the clip bound, the target and the noise multiplier. The
 * job spec (job/jobspec.h) carries one; the accountant, the noise plan and
 * the ledger of this module read it. docs/privacy.md is the reference. */
#ifndef XF_PRIVACY_PRIVACY_H
#define XF_PRIVACY_PRIVACY_H

#include <stdbool.h>

typedef enum xf_privacy_unit {
  XF_PRIVACY_UNIT_SITE = 0, /* "site": each site's whole update (DP-FedAvg) */
  XF_PRIVACY_UNIT_RECORD    /* "record": each record (DP-SGD at the site) */
} xf_privacy_unit;

typedef enum xf_privacy_mode {
  XF_PRIVACY_NONE = 0,     /* "none": no noise, no epsilon */
  XF_PRIVACY_CENTRAL,      /* "central": the aggregator adds noise to the sum */
  XF_PRIVACY_DISTRIBUTED,  /* "distributed": distributed discrete Gaussian + secagg */
  XF_PRIVACY_LOCAL         /* "local": each site adds the full noise */
} xf_privacy_mode;

/* Differential privacy. No privacy section means unit site, mode none. With a
 * mode other than none, clip is required, and target_epsilon or
 * noise_multiplier (or both: the noise is then as given and target_epsilon
 * only stops the job) must be set. */
typedef struct xf_privacy_spec {
  xf_privacy_unit unit;  /* default site */
  xf_privacy_mode mode;  /* default none; required when the section is given */
  double clip;               /* L2 bound C on an update (site) or a per-example
                                gradient (record): > 0; 0 means no clipping,
                                allowed only with mode none */
  bool has_target_epsilon;
  double target_epsilon;     /* > 0 when has_target_epsilon; never with mode none */
  bool has_noise_multiplier;
  double noise_multiplier;   /* sigma / C: >= 0 when has_noise_multiplier; never
                                with mode none */
  double delta;              /* (0, 1); default 1e-5 */
} xf_privacy_spec;

#endif
