/* SPDX-License-Identifier: Apache-2.0 */
/* The concurrent jobs' scheduler (coordinator/schedule.h). */
#include "coordinator/schedule.h"

static bool hosted(const xf_schedule_run *runs, size_t n_runs, int64_t id) {
  for (size_t i = 0; i < n_runs; i++)
    if (runs[i].id == id) return true;
  return false;
}

static bool picked(const int64_t *candidates, const size_t *picks, size_t n_picks, int64_t id) {
  for (size_t i = 0; i < n_picks; i++)
    if (candidates[picks[i]] == id) return true;
  return false;
}

size_t xf_schedule_pick(size_t limit, const xf_schedule_run *runs, size_t n_runs,
                        const int64_t *candidates, size_t n, size_t *picks) {
  size_t unfinished = 0;
  for (size_t i = 0; i < n_runs; i++) unfinished += !runs[i].over;
  size_t n_picks = 0;
  for (size_t i = 0; i < n && unfinished + n_picks < limit; i++) {
    if (hosted(runs, n_runs, candidates[i]) || picked(candidates, picks, n_picks, candidates[i]))
      continue;
    picks[n_picks++] = i;
  }
  return n_picks;
}
