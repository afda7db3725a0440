/* SPDX-License-Identifier: Apache-2.0 */
/* The progress rule of a connection, without sockets or clocks: a frame in
 * progress must advance at a minimum rate, averaged over a window, once it
 * is older than a grace period (docs/protocol.md, "Limits"). It measures
 * bytes per second, not silence: a peer that sends a byte now and then keeps
 * an idle timer happy forever, and holds the buffer of its frame all along.
 * The connection layer feeds it the bytes it reads and the loop's clock, and
 * pauses it while this side is not reading; tests feed it numbers. */
#ifndef XF_NET_PROGRESS_H
#define XF_NET_PROGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

/* Defaults, far below any link a site trains over: 4 KiB/s is 32 kbit/s,
 * so a 1 MiB tensor chunk still passes at 256 s, and 30 s is the idle
 * timeout's span, which outlasts TCP's retransmission backoff on a lossy
 * link. A frame that meets the rate completes in at most its size divided
 * by the rate (17 minutes for a 4 MiB frame); the buffer budget bounds how
 * much such frames may hold at once. */
#define XF_PROGRESS_MIN_RATE 4096u     /* bytes per second */
#define XF_PROGRESS_WINDOW_MS 30000u   /* the rate is averaged over this long */
#define XF_PROGRESS_GRACE_MS 30000u    /* a frame younger than this is not judged */

typedef struct xf_progress_rule {
  uint32_t min_rate;  /* bytes per second; 0 turns the rule off */
  uint32_t window_ms; /* each verdict averages at least this long (0: 1 ms) */
  uint32_t grace_ms;  /* raised to window_ms when below it */
} xf_progress_rule;

/* One connection's measurement. Times are milliseconds of any monotonic
 * clock; the rule counts only the time while this side reads. */
typedef struct xf_progress {
  xf_progress_rule rule;
  bool paused;
  uint64_t paused_at;    /* the clock when the pause began */
  uint64_t paused_total; /* clock time spent paused before that */
  bool in_frame;         /* a frame (or its length prefix) is partly read */
  uint64_t frame_since;  /* active time when it began */
  uint64_t window_since; /* active time when the current window began */
  uint64_t window_bytes; /* bytes read since */
} xf_progress;

/* Starts a measurement with rule (copied) and nothing in progress. */
void xf_progress_init(xf_progress *p, const xf_progress_rule *rule, uint64_t now_ms);

/* n bytes of the stream were read at now_ms; in_frame: a frame is partly
 * read after them. A frame that begins starts a fresh window. */
void xf_progress_read(xf_progress *p, uint64_t now_ms, size_t n, bool in_frame);

/* This side stopped reading (its application paused, or the buffer budget
 * has no room): the time until xf_progress_resume does not count. A second
 * pause without a resume is ignored, as is a resume while not paused. */
void xf_progress_pause(xf_progress *p, uint64_t now_ms);
void xf_progress_resume(xf_progress *p, uint64_t now_ms);

/* The verdict, to be asked at least once per window. XF_OK unless a frame
 * older than the grace period read less than min_rate bytes per second over
 * the window that just ended: then XF_ERANGE with the measured rate, the
 * window and the frame's age in err. Each verdict on a full window starts
 * the next one. Never fails while paused or between frames. */
xf_err xf_progress_check(xf_progress *p, uint64_t now_ms, xf_errctx *err) XF_WARN_UNUSED;

#endif
