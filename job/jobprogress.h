/* SPDX-License-Identifier: Apache-2.0 */
/* What every view of a job (`xfed job status` and `watch`, `xfed job
 * report`, the coordinator's dashboard) says of its progress, worded once:
 * the sites of its round, the train loss a site keeps, and the notes a
 * report's panel shows when no round carries its figure. */
#ifndef XF_JOB_JOBPROGRESS_H
#define XF_JOB_JOBPROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/jobspec.h"

/* A panel of the report with no round that carries its figure. */
#define XF_JOB_NOTE_NO_ACCURACY "no evaluation reported"
#define XF_JOB_NOTE_NO_LOSS "no loss reported"
#define XF_JOB_NOTE_NO_EPSILON "no \xce\xb5 reported: the job has no differential privacy"
#define XF_JOB_NOTE_NO_BYTES "no bytes reported"
/* The train loss of a job under record-level privacy, in place of a figure
 * (xf_job_train_loss_kept). */
#define XF_JOB_NOTE_TRAIN_LOSS_KEPT "kept at the sites"

/* Whether the job's sites keep their train loss: under record-level
 * privacy it is measured on the sampled training batches without noise,
 * so it never leaves the site (docs/privacy.md). */
bool xf_job_train_loss_kept(const xf_jobspec *spec);

/* The sites of a job's round, counted in sites. */
typedef struct xf_job_sites {
  /* The open attempt (invited 0: none is open): sites asked, those that
   * accepted, and those whose updates count so far. */
  uint32_t invited, accepted, reported;
  /* The last committed round (0: none yet) and, of the attempt that
   * committed it, the sites asked and those whose updates counted. */
  uint32_t last_round, last_invited, last_reported;
} xf_job_sites;

/* Into out (n bytes, always terminated): the open attempt's counts, "6
 * invited, 6 accepted, 2 reported"; with none open, the last committed
 * round's, "6 invited, 6 reported in round 40"; with neither, "none yet". */
void xf_job_sites_text(const xf_job_sites *s, char *out, size_t n);

#endif
