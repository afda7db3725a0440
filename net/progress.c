/* SPDX-License-Identifier: Apache-2.0 */
/* The progress rule of a connection (net/progress.h). */
#include "net/progress.h"

/* The clock less the time spent paused. */
static uint64_t active(const xf_progress *p, uint64_t now_ms) {
  uint64_t off = p->paused_total + (p->paused && now_ms > p->paused_at ? now_ms - p->paused_at : 0);
  return now_ms > off ? now_ms - off : 0;
}

void xf_progress_init(xf_progress *p, const xf_progress_rule *rule, uint64_t now_ms) {
  *p = (xf_progress){.rule = *rule};
  if (p->rule.window_ms == 0) p->rule.window_ms = 1;
  if (p->rule.grace_ms < p->rule.window_ms) p->rule.grace_ms = p->rule.window_ms;
  p->window_since = active(p, now_ms);
}

void xf_progress_read(xf_progress *p, uint64_t now_ms, size_t n, bool in_frame) {
  uint64_t t = active(p, now_ms);
  if (in_frame && !p->in_frame) {
    /* The bytes that began this frame may have ended the one before: the
     * window counts them, which errs by at most one read in the peer's
     * favour. */
    p->frame_since = t;
    p->window_since = t;
    p->window_bytes = 0;
  }
  p->window_bytes += n;
  p->in_frame = in_frame;
}

void xf_progress_pause(xf_progress *p, uint64_t now_ms) {
  if (p->paused) return;
  p->paused = true;
  p->paused_at = now_ms;
}

void xf_progress_resume(xf_progress *p, uint64_t now_ms) {
  if (!p->paused) return;
  p->paused_total += now_ms > p->paused_at ? now_ms - p->paused_at : 0;
  p->paused = false;
}

xf_err xf_progress_check(xf_progress *p, uint64_t now_ms, xf_errctx *err) {
  if (p->rule.min_rate == 0 || p->paused) return XF_OK;
  uint64_t t = active(p, now_ms);
  if (!p->in_frame) {
    p->window_since = t;
    p->window_bytes = 0;
    return XF_OK;
  }
  uint64_t span = t - p->window_since;
  if (span < p->rule.window_ms) return XF_OK;
  uint64_t bytes = p->window_bytes;
  uint64_t age = t - p->frame_since;
  p->window_since = t;
  p->window_bytes = 0;
  /* bytes * 1000 < min_rate * span, without dividing: the rate is below. */
  if (age < p->rule.grace_ms || bytes * 1000u >= (uint64_t)p->rule.min_rate * span) return XF_OK;
  return xf_fail(err, XF_ERANGE,
                 "a frame in progress for %.1f s advanced %llu bytes in the last %.1f s "
                 "(%llu bytes/s), below the minimum of %u bytes/s",
                 (double)age / 1000.0, (unsigned long long)bytes, (double)span / 1000.0,
                 (unsigned long long)(bytes * 1000u / span), (unsigned)p->rule.min_rate);
}
