/* SPDX-License-Identifier: Apache-2.0 */
/* The scheduler of concurrent jobs (coordinator/schedule.h): jobs are
 * activated in the order given up to the limit, the rest wait in that
 * order, a finished run frees its slot, and a job that has a run is never
 * activated twice. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "coordinator/schedule.h"

static void jobs_beyond_the_concurrent_limit_stay_queued_in_submission_order(void **state) {
  (void)state;
  const int64_t queued[] = {7, 3, 9, 4, 12};
  size_t picks[5];
  assert_int_equal(xf_schedule_pick(3, NULL, 0, queued, 5, picks), 3);
  assert_int_equal(queued[picks[0]], 7);
  assert_int_equal(queued[picks[1]], 3);
  assert_int_equal(queued[picks[2]], 9);
  /* With those three running, the next to come is the fourth submitted. */
  const xf_schedule_run running[] = {{7, false}, {3, false}, {9, false}};
  assert_int_equal(xf_schedule_pick(3, running, 3, queued, 5, picks), 0);
  assert_int_equal(xf_schedule_pick(4, running, 3, queued, 5, picks), 1);
  assert_int_equal(queued[picks[0]], 4);
}

static void a_finished_job_frees_a_slot(void **state) {
  (void)state;
  const int64_t queued[] = {4, 12};
  const xf_schedule_run runs[] = {{7, false}, {3, true}, {9, false}};
  size_t picks[2];
  assert_int_equal(xf_schedule_pick(3, runs, 3, queued, 2, picks), 1);
  assert_int_equal(picks[0], 0);
}

static void a_job_with_a_run_is_not_activated_again(void **state) {
  (void)state;
  /* Job 3's run is over but not yet freed: it does not count against the
   * limit, and its job waits for the run to go before it could come back. */
  const int64_t candidates[] = {3, 7, 5};
  const xf_schedule_run runs[] = {{3, true}, {7, false}};
  size_t picks[3];
  assert_int_equal(xf_schedule_pick(16, runs, 2, candidates, 3, picks), 1);
  assert_int_equal(candidates[picks[0]], 5);
}

static void resumed_jobs_come_before_queued_ones_and_a_job_listed_twice_runs_once(void **state) {
  (void)state;
  /* Running and paused jobs first (a restart resumes them), then the queue;
   * a job listed in both takes one slot. */
  const int64_t candidates[] = {2, 5, 5, 8, 9};
  size_t picks[5];
  assert_int_equal(xf_schedule_pick(3, NULL, 0, candidates, 5, picks), 3);
  assert_int_equal(picks[0], 0);
  assert_int_equal(picks[1], 1);
  assert_int_equal(picks[2], 3);
}

static void a_full_coordinator_activates_nothing(void **state) {
  (void)state;
  const int64_t queued[] = {10};
  const xf_schedule_run runs[] = {{1, false}, {2, false}};
  size_t picks[1];
  assert_int_equal(xf_schedule_pick(2, runs, 2, queued, 1, picks), 0);
  assert_int_equal(xf_schedule_pick(0, NULL, 0, queued, 1, picks), 0);
  assert_int_equal(xf_schedule_pick(2, runs, 2, NULL, 0, picks), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(jobs_beyond_the_concurrent_limit_stay_queued_in_submission_order),
      cmocka_unit_test(a_finished_job_frees_a_slot),
      cmocka_unit_test(a_job_with_a_run_is_not_activated_again),
      cmocka_unit_test(resumed_jobs_come_before_queued_ones_and_a_job_listed_twice_runs_once),
      cmocka_unit_test(a_full_coordinator_activates_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
