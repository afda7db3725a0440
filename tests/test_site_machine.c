/* SPDX-License-Identifier: Apache-2.0 */
/* The site machine (site/sitemachine.h), with no sockets: a task's phases
 * driven event by event, the decision on a task offered again, and the
 * transitions listed in docs/site-machine.md against the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "site/sitemachine.h"

/* Steps *phase on ev and checks the step happened with `want`. */
static void step_to(xf_sitem_phase *phase, xf_sitem_event ev, bool held, xf_sitem_phase to,
                    xf_sitem_action want) {
  xf_sitem_phase from = *phase;
  xf_sitem_action act;
  if (!xf_sitem_step(phase, ev, held, &act) || *phase != to || act != want)
    fail_msg("%s on %s: now %s doing %s; wanted %s doing %s", xf_sitem_phase_name(from),
             xf_sitem_event_name(ev), xf_sitem_phase_name(*phase), xf_sitem_action_name(act),
             xf_sitem_phase_name(to), xf_sitem_action_name(want));
}

static void no_step(xf_sitem_phase phase, xf_sitem_event ev, bool held) {
  xf_sitem_phase p = phase;
  xf_sitem_action act = XF_SITEM_REPORT;
  assert_false(xf_sitem_step(&p, ev, held, &act));
  assert_int_equal(p, phase);
  assert_int_equal(act, XF_SITEM_NOTHING);
}

/* ---- a task's life ------------------------------------------------------------------ */

static void task_not_held_trains_once_its_model_is_in(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_MODEL;
  step_to(&p, XF_SITEM_MODEL_IN, false, XF_SITEM_QUEUED, XF_SITEM_QUEUE);
  step_to(&p, XF_SITEM_WORKER, false, XF_SITEM_WORKING, XF_SITEM_TRAIN);
  step_to(&p, XF_SITEM_TRAINED, false, XF_SITEM_REPORTING, XF_SITEM_REPORT);
  step_to(&p, XF_SITEM_DELIVERED, false, XF_SITEM_GONE, XF_SITEM_FORGET);
}

static void held_task_waits_for_the_go_before_it_queues(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_MODEL;
  step_to(&p, XF_SITEM_MODEL_IN, true, XF_SITEM_HELD, XF_SITEM_WAIT_GO);
  no_step(p, XF_SITEM_WORKER, true); /* the worker never takes a held task */
  step_to(&p, XF_SITEM_GO, false, XF_SITEM_QUEUED, XF_SITEM_QUEUE);
}

static void go_before_the_model_is_in_lets_it_queue_at_once(void **state) {
  (void)state;
  no_step(XF_SITEM_MODEL, XF_SITEM_GO, false); /* the daemon notes the go */
  xf_sitem_phase p = XF_SITEM_MODEL;
  step_to(&p, XF_SITEM_MODEL_IN, false, XF_SITEM_QUEUED, XF_SITEM_QUEUE);
}

static void held_task_offered_without_hold_trains(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_HELD;
  step_to(&p, XF_SITEM_UNHOLD, false, XF_SITEM_QUEUED, XF_SITEM_QUEUE);
}

static void result_made_before_a_hold_goes_out_at_the_go(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_REPORTING;
  step_to(&p, XF_SITEM_GO, false, XF_SITEM_REPORTING, XF_SITEM_REPORT);
}

static void cancel_mid_upload_forgets_the_task(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_REPORTING;
  step_to(&p, XF_SITEM_DROP, false, XF_SITEM_GONE, XF_SITEM_FORGET);
}

static void cancel_while_training_abandons_the_task_to_the_worker(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_WORKING;
  step_to(&p, XF_SITEM_DROP, false, XF_SITEM_GONE, XF_SITEM_ABANDON);
}

static void cancel_of_a_held_or_queued_task_forgets_it(void **state) {
  (void)state;
  xf_sitem_phase phases[] = {XF_SITEM_MODEL, XF_SITEM_HELD, XF_SITEM_QUEUED};
  for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
    xf_sitem_phase p = phases[i];
    step_to(&p, XF_SITEM_DROP, true, XF_SITEM_GONE, XF_SITEM_FORGET);
  }
}

static void failed_training_forgets_the_task(void **state) {
  (void)state;
  xf_sitem_phase p = XF_SITEM_WORKING;
  step_to(&p, XF_SITEM_FAILED, false, XF_SITEM_GONE, XF_SITEM_FORGET);
  p = XF_SITEM_REPORTING; /* its release refused by the ledger */
  step_to(&p, XF_SITEM_FAILED, false, XF_SITEM_GONE, XF_SITEM_FORGET);
}

static void a_gone_task_takes_no_more_events(void **state) {
  (void)state;
  for (int ev = 0; ev < XF_SITEM_EVENTS; ev++) no_step(XF_SITEM_GONE, (xf_sitem_event)ev, false);
}

static void events_out_of_turn_change_nothing(void **state) {
  (void)state;
  no_step(XF_SITEM_MODEL, XF_SITEM_TRAINED, false);
  no_step(XF_SITEM_QUEUED, XF_SITEM_GO, false);
  no_step(XF_SITEM_WORKING, XF_SITEM_GO, false);
  no_step(XF_SITEM_HELD, XF_SITEM_MODEL_IN, true); /* a resent model */
  no_step(XF_SITEM_REPORTING, XF_SITEM_WORKER, false);
  no_step(XF_SITEM_QUEUED, XF_SITEM_DELIVERED, false);
}

static void every_phase_but_gone_can_be_dropped(void **state) {
  (void)state;
  for (int ph = 0; ph < XF_SITEM_GONE; ph++) {
    xf_sitem_phase p = (xf_sitem_phase)ph;
    xf_sitem_action act;
    assert_true(xf_sitem_step(&p, XF_SITEM_DROP, false, &act));
    assert_int_equal(p, XF_SITEM_GONE);
  }
}

static void table_is_deterministic_no_two_rows_match_one_step(void **state) {
  (void)state;
  size_t n;
  const xf_sitem_transition *t = xf_sitem_transitions(&n);
  for (size_t i = 0; i < n; i++)
    for (size_t j = i + 1; j < n; j++) {
      if (t[i].from != t[j].from || t[i].event != t[j].event) continue;
      bool overlap = t[i].when == XF_SITEM_ALWAYS || t[j].when == XF_SITEM_ALWAYS ||
                     t[i].when == t[j].when;
      if (overlap)
        fail_msg("rows %zu and %zu both match %s on %s", i, j, xf_sitem_phase_name(t[i].from),
                 xf_sitem_event_name(t[i].event));
    }
}

static void phase_names_are_the_ones_the_logs_use(void **state) {
  (void)state;
  assert_string_equal(xf_sitem_phase_name(XF_SITEM_MODEL), "model");
  assert_string_equal(xf_sitem_phase_name(XF_SITEM_HELD), "held");
  assert_string_equal(xf_sitem_phase_name(XF_SITEM_QUEUED), "queued");
  assert_string_equal(xf_sitem_phase_name(XF_SITEM_WORKING), "training");
  assert_string_equal(xf_sitem_phase_name(XF_SITEM_REPORTING), "reporting");
  assert_string_equal(xf_sitem_phase_name((xf_sitem_phase)42), "?");
}

/* ---- the clock ------------------------------------------------------------------------------ */

static void task_from_an_earlier_session_past_its_deadline_is_stale(void **state) {
  (void)state;
  assert_true(xf_sitem_stale(false, false, 1000, 1000));
  assert_true(xf_sitem_stale(false, false, 0, 5)); /* no deadline: its round is unknown */
  assert_false(xf_sitem_stale(false, false, 1001, 1000));
}

static void task_offered_on_this_session_or_training_is_never_stale(void **state) {
  (void)state;
  assert_false(xf_sitem_stale(true, false, 1, 1000));
  assert_false(xf_sitem_stale(false, true, 1, 1000));
}

/* ---- offered again ------------------------------------------------------------------------ */

static const uint8_t key_a[XF_SEAL_PUBLICKEYBYTES] = {1};
static const uint8_t key_b[XF_SEAL_PUBLICKEYBYTES] = {2};

static xf_sitem_held reporting_sealed(void) {
  return (xf_sitem_held){.phase = XF_SITEM_REPORTING, .same_model = true, .sealed = true,
                         .seal_pk = key_a, .update_stream_id = 0x10003};
}

static void reoffer_after_a_coordinator_restart_reseals_without_retraining(void **state) {
  (void)state;
  xf_sitem_held t = reporting_sealed();
  xf_sitem_again o = {.seal_key = key_b, .update_stream_id = 77};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_RESUME);
  assert_true(r.reseal);
  assert_true(r.update_stream);
  assert_false(r.unhold || r.rehold || r.model_stream);
  /* Resuming moves no phase: the result goes out as it is. */
  no_step(XF_SITEM_REPORTING, XF_SITEM_WORKER, false);
}

static void reoffer_with_the_same_key_and_stream_changes_nothing(void **state) {
  (void)state;
  xf_sitem_held t = reporting_sealed();
  xf_sitem_again o = {.seal_key = key_a, .update_stream_id = 0x10003};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_RESUME);
  assert_false(r.reseal || r.update_stream || r.unhold || r.rehold || r.model_stream);
}

static void reoffer_of_an_unsealed_task_never_reseals(void **state) {
  (void)state;
  xf_sitem_held t = reporting_sealed();
  t.sealed = false;
  xf_sitem_again o = {.seal_key = key_b};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_false(r.reseal);
}

static void reoffer_names_the_model_stream_only_while_it_is_received(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_MODEL, .same_model = true};
  xf_sitem_again o = {.model_stream_id = 9};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_true(r.model_stream);
  t.phase = XF_SITEM_QUEUED;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_false(r.model_stream);
}

static void reoffer_without_hold_releases_a_held_task(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_HELD, .same_model = true, .hold = true};
  xf_sitem_again o = {.hold = false};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_true(r.unhold);
  t.go = true; /* its go came already: nothing to release */
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_false(r.unhold);
}

static void reoffer_held_again_after_the_go_keeps_the_result_for_the_next_go(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_REPORTING, .same_model = true, .hold = true, .go = true};
  xf_sitem_again o = {.hold = true};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_RESUME);
  assert_true(r.rehold);
}

static void reoffer_held_again_of_a_masked_update_refuses_the_lost_session(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_REPORTING, .same_model = true, .hold = true, .go = true,
                     .secagg = true};
  xf_sitem_again o = {.hold = true};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_SESSION_LOST);
  assert_false(r.rehold);
}

static void reoffer_of_an_evaluation_held_again_is_simply_resumed(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_REPORTING, .same_model = true, .hold = true, .go = true,
                     .evaluate_only = true, .secagg = true};
  xf_sitem_again o = {.hold = true};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_RESUME);
  assert_false(r.rehold);
}

static void reoffer_with_another_model_replaces_the_task(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_REPORTING, .same_model = false};
  xf_sitem_again o = {0};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_OTHER_MODEL);
}

static void reoffer_with_another_model_while_training_is_refused_busy(void **state) {
  (void)state;
  xf_sitem_held t = {.phase = XF_SITEM_WORKING, .same_model = false};
  xf_sitem_again o = {0};
  xf_sitem_reoffer r;
  xf_sitem_reoffer_decide(&t, &o, &r);
  assert_int_equal(r.kind, XF_SITEM_BUSY);
}

/* ---- the documentation ------------------------------------------------------------------- */

/* The cells of a row "| a | b | c |" into cells (at most max), trimmed. */
static size_t row_cells(char *line, char **cells, size_t max) {
  size_t n = 0;
  char *p = strchr(line, '|');
  while (p && n < max) {
    char *start = p + 1;
    char *end = strchr(start, '|');
    if (!end) break;
    *end = 0;
    while (*start == ' ') start++;
    char *tail = end;
    while (tail > start && tail[-1] == ' ') *--tail = 0;
    cells[n++] = start;
    p = end;
  }
  return n;
}

static void docs_list_the_transitions_of_the_table_row_for_row(void **state) {
  (void)state;
  const char *src = getenv("XF_SOURCE_DIR");
  assert_non_null(src);
  char path[1024];
  snprintf(path, sizeof(path), "%s/docs/site-machine.md", src);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open %s", path);
  size_t n;
  const xf_sitem_transition *t = xf_sitem_transitions(&n);
  char line[512];
  bool in_section = false, in_table = false;
  size_t row = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "## ", 3) == 0) {
      in_section = strcmp(line, "## Transitions\n") == 0;
      in_table = false;
      continue;
    }
    if (!in_section || line[0] != '|') continue;
    char *cells[6];
    size_t k = row_cells(line, cells, 6);
    if (!in_table) { /* the header, then the separator */
      in_table = k == 5 && strcmp(cells[0], "from") == 0;
      if (in_table && fgets(line, sizeof(line), f) == NULL) break;
      continue;
    }
    if (k != 5) fail_msg("%s: a transition row of %zu cells: %s", path, k, line);
    if (row >= n) fail_msg("%s lists more transitions than the table's %zu", path, n);
    const xf_sitem_transition *r = &t[row];
    const char *want[5] = {xf_sitem_phase_name(r->from), xf_sitem_event_name(r->event),
                           xf_sitem_when_name(r->when), xf_sitem_phase_name(r->to),
                           xf_sitem_action_name(r->action)};
    for (int c = 0; c < 5; c++)
      if (strcmp(cells[c], want[c]) != 0)
        fail_msg("%s, transition %zu: \"%s\" where the table has \"%s\"", path, row + 1,
                 cells[c], want[c]);
    row++;
  }
  fclose(f);
  if (row != n) fail_msg("%s lists %zu transitions; the table has %zu", path, row, n);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(task_not_held_trains_once_its_model_is_in),
      cmocka_unit_test(held_task_waits_for_the_go_before_it_queues),
      cmocka_unit_test(go_before_the_model_is_in_lets_it_queue_at_once),
      cmocka_unit_test(held_task_offered_without_hold_trains),
      cmocka_unit_test(result_made_before_a_hold_goes_out_at_the_go),
      cmocka_unit_test(cancel_mid_upload_forgets_the_task),
      cmocka_unit_test(cancel_while_training_abandons_the_task_to_the_worker),
      cmocka_unit_test(cancel_of_a_held_or_queued_task_forgets_it),
      cmocka_unit_test(failed_training_forgets_the_task),
      cmocka_unit_test(a_gone_task_takes_no_more_events),
      cmocka_unit_test(events_out_of_turn_change_nothing),
      cmocka_unit_test(every_phase_but_gone_can_be_dropped),
      cmocka_unit_test(table_is_deterministic_no_two_rows_match_one_step),
      cmocka_unit_test(phase_names_are_the_ones_the_logs_use),
      cmocka_unit_test(task_from_an_earlier_session_past_its_deadline_is_stale),
      cmocka_unit_test(task_offered_on_this_session_or_training_is_never_stale),
      cmocka_unit_test(reoffer_after_a_coordinator_restart_reseals_without_retraining),
      cmocka_unit_test(reoffer_with_the_same_key_and_stream_changes_nothing),
      cmocka_unit_test(reoffer_of_an_unsealed_task_never_reseals),
      cmocka_unit_test(reoffer_names_the_model_stream_only_while_it_is_received),
      cmocka_unit_test(reoffer_without_hold_releases_a_held_task),
      cmocka_unit_test(reoffer_held_again_after_the_go_keeps_the_result_for_the_next_go),
      cmocka_unit_test(reoffer_held_again_of_a_masked_update_refuses_the_lost_session),
      cmocka_unit_test(reoffer_of_an_evaluation_held_again_is_simply_resumed),
      cmocka_unit_test(reoffer_with_another_model_replaces_the_task),
      cmocka_unit_test(reoffer_with_another_model_while_training_is_refused_busy),
      cmocka_unit_test(docs_list_the_transitions_of_the_table_row_for_row),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
