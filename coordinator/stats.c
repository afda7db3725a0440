/* SPDX-License-Identifier: Apache-2.0 */
/* What the coordinator counts for its /metrics beyond what the journal and
 * the connection guard keep: round and phase durations, rounds per job, and
 * the bytes of closed connections. Counted in every build, served by
 * metrics.c where the build has the HTTP server (XF_HTTP). */
#include <stdio.h>
#include <string.h>

#include "coordinator/daemon_internal.h"

/* Round and phase durations run from well under a second (a test's round)
 * to hours (a large model on slow links). */
static const double xf__duration_bounds[] = {0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600,
                                             1800, 3600, 7200};
#define XF__DURATION_BOUNDS (sizeof(xf__duration_bounds) / sizeof(xf__duration_bounds[0]))

void xf__stats_init(xf__coord *co) {
  xf_prom_hist_init(&xf__coord_stats(co)->round_duration, xf__duration_bounds, XF__DURATION_BOUNDS);
  for (size_t i = 0; i <= XF_JOBM_CANCELLED; i++)
    xf_prom_hist_init(&xf__coord_stats(co)->phase_duration[i], xf__duration_bounds,
                      XF__DURATION_BOUNDS);
}

/* The stats slot of a job, made (replacing the oldest) when missing. */
static size_t job_slot(xf__stats *st, const char *job) {
  for (size_t i = 0; i < XF__STATS_JOBS; i++)
    if (strcmp(st->jobs[i].job, job) == 0) return i;
  size_t i = st->next_job;
  st->next_job = (st->next_job + 1) % XF__STATS_JOBS;
  memset(&st->jobs[i], 0, sizeof(st->jobs[i]));
  snprintf(st->jobs[i].job, sizeof(st->jobs[i].job), "%s", job);
  return i;
}

void xf__stats_phase(xf__run *run) {
  xf_jobm_phase ph = xf_jobm_get_phase(xf__run_machine(run));
  xf__run_clock *c = xf__run_clock_of(run);
  double now = xf__now();
  if (c->phase_since == 0) {
    c->seen_phase = ph;
    c->phase_since = now;
    return;
  }
  if (ph == c->seen_phase) return;
  xf_prom_hist_observe(&xf__coord_stats(xf__run_coord(run))->phase_duration[c->seen_phase],
                       now - c->phase_since);
  if (ph == XF_JOBM_CONFIRMING || (ph == XF_JOBM_EVALUATING && c->opened_at == 0))
    c->opened_at = now;
  c->seen_phase = ph;
  c->phase_since = now;
}

void xf__stats_round(xf__run *run, bool committed) {
  xf__stats *st = xf__coord_stats(xf__run_coord(run));
  xf__run_clock *c = xf__run_clock_of(run);
  size_t i = job_slot(st, xf__run_id(run));
  if (committed) {
    st->jobs[i].completed++;
    if (c->opened_at > 0) xf_prom_hist_observe(&st->round_duration, xf__now() - c->opened_at);
  } else {
    st->jobs[i].failed++;
  }
  c->opened_at = 0;
}

void xf__stats_peer_closed(xf__coord *co, const xf__peer *p) {
  if (!xf__peer_conn(p) || (unsigned)xf__peer_kind_of(p) > XF__PEER_UPSTREAM) return;
  xf__coord_stats(co)->bytes_in[xf__peer_kind_of(p)] += xf_conn_bytes_in(xf__peer_conn(p));
  xf__coord_stats(co)->bytes_out[xf__peer_kind_of(p)] += xf_conn_bytes_out(xf__peer_conn(p));
}
