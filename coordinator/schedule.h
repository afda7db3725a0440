/* SPDX-License-Identifier: Apache-2.0 */
/* The scheduler of the global coordinator's concurrent jobs: which of the
 * journal's jobs to make runs of, given the limit and the runs it already
 * hosts. A pure function, no sockets, no journal: host.c reads the
 * candidates from the journal, asks, and activates what it is told
 * (docs/coordinator.md, "Jobs and rounds"). */
#ifndef XF_COORDINATOR_SCHEDULE_H
#define XF_COORDINATOR_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A run the coordinator hosts: its journal job id and whether it is over
 * (finished, failed or cancelled, not yet freed). A finished run frees its
 * slot at once, but its job is not activated again while the run is kept. */
typedef struct xf_schedule_run {
  int64_t id;
  bool over;
} xf_schedule_run;

/* Which of candidates[0..n) to activate now, in their order: each that has
 * no run among runs[0..n_runs) (over or not) and is not picked already,
 * while fewer than `limit` runs would be unfinished. The caller lists the
 * jobs to resume (running and paused) before the queued ones in submission
 * order, so that queued jobs beyond the limit wait in that order. Writes
 * the picks' indices into candidates, ascending, to picks[0..return) (room
 * for n); allocates nothing. An activation that fails or ends at once
 * leaves its slot free: the caller asks again over the candidates after
 * the last pick with its runs as they are then. */
size_t xf_schedule_pick(size_t limit, const xf_schedule_run *runs, size_t n_runs,
                        const int64_t *candidates, size_t n, size_t *picks);

#endif
