/* SPDX-License-Identifier: Apache-2.0 */
/* The words of a job's progress (job/jobprogress.h). */
#include "job/jobprogress.h"

#include <stdio.h>

bool xf_job_train_loss_kept(const xf_jobspec *spec) {
  return spec->privacy.unit == XF_PRIVACY_UNIT_RECORD && spec->privacy.mode != XF_PRIVACY_NONE;
}

void xf_job_sites_text(const xf_job_sites *s, char *out, size_t n) {
  if (!n) return;
  if (s->invited > 0)
    snprintf(out, n, "%u invited, %u accepted, %u reported", (unsigned)s->invited,
             (unsigned)s->accepted, (unsigned)s->reported);
  else if (s->last_round > 0)
    snprintf(out, n, "%u invited, %u reported in round %u", (unsigned)s->last_invited,
             (unsigned)s->last_reported, (unsigned)s->last_round);
  else snprintf(out, n, "none yet");
}
