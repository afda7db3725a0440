/* SPDX-License-Identifier: Apache-2.0 */
/* The site's task set (site/taskset.h), with no sockets and the clock
 * passed in: offers taken, refused and resumed, room made, goes and
 * cancels, the worker's order, reports in result order, a lost link, and
 * the actions each event asks the daemon for, in order. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "site/taskset.h"

/* The daemon's tasks, as far as the set sees them: pointers. */
static int users[8];
#define A (&users[0])
#define B (&users[1])
#define C (&users[2])

static const uint8_t model_one[XF_DIGEST_BYTES] = {1};
static const uint8_t model_two[XF_DIGEST_BYTES] = {2};
static const uint8_t key_one[XF_SEAL_PUBLICKEYBYTES] = {0x11};
static const uint8_t key_two[XF_SEAL_PUBLICKEYBYTES] = {0x22};

static int setup(void **state) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_site_tasks *s = NULL;
  if (xf_site_tasks_new(3, &s, &err) != XF_OK) return -1;
  *state = s;
  return 0;
}

static int teardown(void **state) {
  xf_site_tasks_free(*state);
  return 0;
}

static xf_site_tasks_offer offer(const char *job, uint32_t round) {
  return (xf_site_tasks_offer){.job = job, .round = round, .attempt = 1,
                               .model_digest = model_one, .model_stream_id = 7,
                               .deadline_ms = 10000};
}

/* The names of the pending actions, in order, space-separated; the last
 * action into *last when last is not NULL. */
static const char *drain(xf_site_tasks *s, xf_site_tasks_action *last) {
  static char names[1024];
  names[0] = '\0';
  xf_site_tasks_action a;
  while (xf_site_tasks_next(s, &a)) {
    size_t used = strlen(names);
    snprintf(names + used, sizeof(names) - used, "%s%s", used ? " " : "",
             xf_site_tasks_action_name(a.kind));
    if (last) *last = a;
  }
  return names;
}

/* Takes o as the checks would (sealed to key when it is not NULL), for
 * user; the set's entry. */
static xf_site_task *take_sealed(xf_site_tasks *s, const xf_site_tasks_offer *o, void *user,
                                 const uint8_t *key, uint64_t now) {
  char busy[XF_SITE_WHY_MAX];
  assert_int_equal(xf_site_tasks_offer_in(s, o, now, busy, sizeof(busy)), XF_SITE_TASKS_CHECK);
  assert_string_equal(busy, "");
  (void)drain(s, NULL);
  static xf_site_offer_verdict v; /* large: not on the stack */
  memset(&v, 0, sizeof(v));
  v.step = XF_SITE_OFFER_TAKEN;
  if (key) {
    v.uo.sealed = true;
    memcpy(v.uo.seal_pk, key, XF_SEAL_PUBLICKEYBYTES);
  }
  xf_site_tasks_checked c = {.verdict = &v, .user = user};
  xf_site_tasks_offer_checked(s, o, &c);
  assert_string_equal(drain(s, NULL), "accept");
  xf_site_task *t = xf_site_tasks_find(s, o->job, o->round, o->attempt);
  assert_non_null(t);
  assert_ptr_equal(xf_site_task_user(t), user);
  return t;
}

static xf_site_task *take(xf_site_tasks *s, const char *job, void *user) {
  xf_site_tasks_offer o = offer(job, 1);
  return take_sealed(s, &o, user, NULL, 1000);
}

/* Takes the task through its training: its model in, the worker started
 * on it, its result in. */
static void train(xf_site_tasks *s, xf_site_task *t) {
  xf_site_tasks_model_in(s, t);
  assert_string_equal(drain(s, NULL), "start");
  assert_ptr_equal(xf_site_tasks_worker_back(s, true), t);
  xf_site_tasks_trained(s, t);
  (void)drain(s, NULL);
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_REPORTING);
}

/* ---- offers ----------------------------------------------------------------------------- */

static void an_offer_the_checks_take_is_accepted_and_waits_for_its_model(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 4);
  o.update_stream_id = 0;
  xf_site_task *t = take_sealed(s, &o, A, NULL, 1000);
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_MODEL);
  assert_true(xf_site_task_offered_now(t));
  assert_int_equal(xf_site_task_update_stream(t), xf_site_update_stream_id(4, 1));
  assert_int_equal(xf_site_tasks_count(s), 1);
}

static void queue_limit_refuses_busy_naming_the_tasks_held(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  take(s, "j2", B);
  xf_site_task *t3 = take(s, "j3", C);
  xf_site_tasks_model_in(s, t3);
  (void)drain(s, NULL);
  xf_site_tasks_offer o = offer("j4", 1);
  char busy[XF_SITE_WHY_MAX];
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, busy, sizeof(busy)), XF_SITE_TASKS_CHECK);
  assert_string_equal(busy, "this site holds 3 tasks: job j1 round 1 attempt 1 (model), job j2 "
                            "round 1 attempt 1 (model), job j3 round 1 attempt 1 (training); "
                            "offer it again once one of them is done");
  /* The checks refuse it BUSY with that text: the set passes it on. */
  static xf_site_offer_verdict v;
  memset(&v, 0, sizeof(v));
  v.step = XF_SITE_OFFER_BUSY;
  v.reason = XFED__TASK_REFUSAL__REASON__BUSY;
  snprintf(v.why, sizeof(v.why), "%s", busy);
  xf_site_tasks_checked c = {.verdict = &v};
  xf_site_tasks_offer_checked(s, &o, &c);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "ignore-stream refuse");
  assert_int_equal(last.reason, XFED__TASK_REFUSAL__REASON__BUSY);
  assert_string_equal(last.text, busy);
  assert_int_equal(xf_site_tasks_count(s), 3);
}

static void a_taken_offer_beyond_the_limit_is_still_refused_busy(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  take(s, "j2", B);
  take(s, "j3", C);
  xf_site_tasks_offer o = offer("j4", 1);
  static xf_site_offer_verdict v;
  memset(&v, 0, sizeof(v));
  v.step = XF_SITE_OFFER_TAKEN;
  xf_site_tasks_checked c = {.verdict = &v, .user = &users[3]};
  xf_site_tasks_offer_checked(s, &o, &c);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "ignore-stream refuse forget");
  assert_ptr_equal(last.user, &users[3]);
  assert_int_equal(xf_site_tasks_count(s), 3);
}

static void a_stale_task_is_dropped_to_make_room(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A); /* deadline 10000 */
  take(s, "j2", B);
  take(s, "j3", C);
  xf_site_tasks_link_down(s);
  (void)drain(s, NULL);
  xf_site_tasks_offer o2 = offer("j2", 1); /* j2 comes back on the new link */
  assert_int_equal(xf_site_tasks_offer_in(s, &o2, 5000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  (void)drain(s, NULL);
  xf_site_tasks_offer o = offer("j4", 1);
  char busy[XF_SITE_WHY_MAX];
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 20000, busy, sizeof(busy)), XF_SITE_TASKS_CHECK);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "drop drop");
  assert_string_equal(last.why, "its deadline passed without the coordinator offering it again");
  assert_string_equal(busy, ""); /* room now */
  assert_int_equal(xf_site_tasks_count(s), 1);
  assert_non_null(xf_site_tasks_find(s, "j2", 1, 1));
}

static void a_task_before_its_deadline_or_offered_on_this_link_is_not_stale(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  xf_site_tasks_tick(s, 20000); /* past its deadline, but offered on this link */
  assert_string_equal(drain(s, NULL), "");
  xf_site_tasks_link_down(s);
  (void)drain(s, NULL);
  xf_site_tasks_tick(s, 9999); /* not offered again, but not past its deadline */
  assert_string_equal(drain(s, NULL), "");
  xf_site_tasks_tick(s, 10000);
  assert_string_equal(drain(s, NULL), "drop");
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void a_training_task_is_never_dropped_as_stale(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *t = take(s, "j1", A);
  xf_site_tasks_model_in(s, t);
  assert_string_equal(drain(s, NULL), "start");
  xf_site_tasks_link_down(s);
  (void)drain(s, NULL);
  xf_site_tasks_tick(s, 50000);
  assert_string_equal(drain(s, NULL), "");
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_WORKING);
}

static void reoffer_after_a_coordinator_restart_reseals_without_retraining(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.seal_key = key_one;
  o.update_stream_id = 40;
  xf_site_task *t = take_sealed(s, &o, A, key_one, 1000);
  train(s, t);
  xf_site_tasks_link_down(s);
  assert_string_equal(drain(s, NULL), "restart-stream");
  o.seal_key = key_two;
  o.update_stream_id = 41;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  xf_site_tasks_action a;
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_RESEAL);
  assert_memory_equal(a.seal_pk, key_two, XF_SEAL_PUBLICKEYBYTES);
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_UPDATE_STREAM);
  assert_int_equal(a.stream_id, 41);
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_ACCEPT);
  assert_true(a.resumed);
  assert_int_equal(a.phase, XF_SITEM_REPORTING); /* no start: the result is kept */
  assert_false(xf_site_tasks_next(s, &a));
  assert_int_equal(xf_site_task_update_stream(t), 41);
  /* The same offer again changes nothing more. */
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, NULL), "accept");
}

static void reoffer_with_another_model_drops_the_task_and_checks_the_offer(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  xf_site_tasks_offer o = offer("j1", 1);
  o.model_digest = model_two;
  xf_site_tasks_action last;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, NULL, 0), XF_SITE_TASKS_CHECK);
  assert_string_equal(drain(s, &last), "drop");
  assert_ptr_equal(last.user, A);
  assert_string_equal(last.why, "offered again with another model");
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void reoffer_with_another_model_while_training_is_refused_busy(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *t = take(s, "j1", A);
  xf_site_tasks_model_in(s, t);
  (void)drain(s, NULL);
  xf_site_tasks_offer o = offer("j1", 1);
  o.model_digest = model_two;
  xf_site_tasks_action last;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, &last), "refuse");
  assert_int_equal(last.reason, XFED__TASK_REFUSAL__REASON__BUSY);
  assert_string_equal(last.text,
                      "this site is training job j1 round 1 attempt 1 from another model");
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_WORKING);
}

static void a_newer_round_of_a_job_supersedes_its_older_task(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  xf_site_tasks_offer o = offer("j1", 2);
  xf_site_tasks_action last;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, NULL, 0), XF_SITE_TASKS_CHECK);
  assert_string_equal(drain(s, &last), "drop");
  assert_string_equal(last.why, "superseded by another round or attempt of its job");
  assert_null(xf_site_tasks_of_job(s, "j1"));
}

static void a_masked_task_held_again_after_its_go_refuses_the_lost_session(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.hold = true;
  char busy[8];
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, busy, sizeof(busy)), XF_SITE_TASKS_CHECK);
  static xf_site_offer_verdict v;
  memset(&v, 0, sizeof(v));
  v.step = XF_SITE_OFFER_TAKEN;
  v.secagg = true;
  v.uo.secagg = true;
  xf_site_tasks_checked c = {.verdict = &v, .user = A};
  xf_site_tasks_offer_checked(s, &o, &c);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "accept");
  assert_true(last.advertise);
  xf_site_task *t = xf_site_tasks_find(s, "j1", 1, 1);
  assert_ptr_equal(xf_site_tasks_go_in(s, "j1", 1, 1), t);
  xf_site_tasks_go_checked(s, t, XF_SITE_GO_FOLLOWED, XFED__TASK_REFUSAL__REASON__UNSPECIFIED, "",
                           true);
  assert_string_equal(drain(s, &last), "go");
  assert_true(last.advertise);
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  /* its model still coming, on the stream the offer names */
  assert_string_equal(drain(s, NULL), "model-stream refuse sa-forget drop");
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void a_result_held_again_goes_out_after_the_next_go(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.hold = true;
  xf_site_task *t = take_sealed(s, &o, A, NULL, 1000);
  xf_site_tasks_model_in(s, t);
  assert_string_equal(drain(s, NULL), "held");
  assert_ptr_equal(xf_site_tasks_go_in(s, "j1", 1, 1), t);
  xf_site_tasks_go_checked(s, t, XF_SITE_GO_FOLLOWED, XFED__TASK_REFUSAL__REASON__UNSPECIFIED, "",
                           false);
  assert_string_equal(drain(s, NULL), "go start");
  assert_ptr_equal(xf_site_tasks_worker_back(s, true), t);
  xf_site_tasks_trained(s, t);
  (void)drain(s, NULL);
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, NULL), "accept");
  void *out[3];
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 0); /* held until the go */
  assert_ptr_equal(xf_site_tasks_go_in(s, "j1", 1, 1), t);
  xf_site_tasks_go_checked(s, t, XF_SITE_GO_FOLLOWED, XFED__TASK_REFUSAL__REASON__UNSPECIFIED, "",
                           false);
  assert_string_equal(drain(s, NULL), "go report");
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 1);
}

static void a_held_task_offered_again_without_hold_trains(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.hold = true;
  xf_site_task *t = take_sealed(s, &o, A, NULL, 1000);
  xf_site_tasks_model_in(s, t);
  assert_string_equal(drain(s, NULL), "held");
  o.hold = false; /* a restarted aggregator that no longer holds it */
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "start accept");
  assert_int_equal(last.phase, XF_SITEM_WORKING);
  assert_false(xf_site_task_held(t));
}

static void an_update_stream_the_daemon_cannot_make_is_offered_again(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.update_stream_id = 40;
  xf_site_task *t = take_sealed(s, &o, A, NULL, 1000);
  train(s, t);
  o.update_stream_id = 41;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, NULL), "update-stream accept");
  xf_site_tasks_update_stream_kept(s, t, 40); /* its sender could not be made again */
  assert_int_equal(xf_site_task_update_stream(t), 40);
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 3000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, NULL), "update-stream accept"); /* tried again */
}

/* ---- goes and cancels ----------------------------------------------------------------------- */

static void a_go_for_an_unknown_task_is_ignored(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  xf_site_tasks_action last;
  assert_null(xf_site_tasks_go_in(s, "j1", 2, 1));
  assert_string_equal(drain(s, &last), "go-unknown");
  assert_string_equal(last.job, "j1");
  assert_int_equal(last.round, 2);
  assert_int_equal(xf_site_tasks_count(s), 1);
}

static void a_go_for_a_task_not_held_is_a_repeat(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *t = take(s, "j1", A); /* not held */
  xf_site_tasks_action last;
  assert_null(xf_site_tasks_go_in(s, "j1", 1, 1));
  assert_string_equal(drain(s, &last), "go-repeated");
  assert_int_equal(last.phase, XF_SITEM_MODEL);
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_MODEL);
}

static void a_go_that_cannot_be_followed_refuses_and_drops_the_task(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o1 = offer("j1", 1), o2 = offer("j2", 1);
  o1.hold = o2.hold = true;
  xf_site_task *t1 = take_sealed(s, &o1, A, NULL, 1000);
  xf_site_task *t2 = take_sealed(s, &o2, B, NULL, 1000);
  xf_site_tasks_action last;
  xf_site_tasks_go_checked(s, t1, XF_SITE_GO_SETUP, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                           "secure aggregation: no", true);
  assert_string_equal(drain(s, &last), "refuse sa-forget drop");
  assert_string_equal(last.why, "its go cannot be followed");
  xf_site_tasks_go_checked(s, t2, XF_SITE_GO_RELEASE, XFED__TASK_REFUSAL__REASON__POLICY_DENIED,
                           "too few", false);
  assert_string_equal(drain(s, &last), "refuse drop");
  assert_string_equal(last.why, "the aggregator's cohort is smaller than the plan allows");
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void cancel_mid_upload_forgets_the_task(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *t = take(s, "j1", A);
  train(s, t);
  xf_site_tasks_action last;
  xf_site_tasks_cancel(s, "j1", 1, 1, "the round closed");
  xf_site_tasks_action a;
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_CANCELLED);
  assert_string_equal(a.text, "the round closed");
  assert_int_equal(a.phase, XF_SITEM_REPORTING);
  assert_string_equal(drain(s, &last), "sa-forget drop");
  assert_int_equal(last.phase, XF_SITEM_REPORTING);
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void cancel_while_training_abandons_the_task_to_the_worker(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *t = take(s, "j1", A);
  xf_site_task *u = take(s, "j2", B);
  xf_site_tasks_model_in(s, t);
  xf_site_tasks_model_in(s, u);
  assert_string_equal(drain(s, NULL), "start"); /* j1; j2 waits */
  xf_site_tasks_cancel(s, "j1", 1, 1, "");
  assert_string_equal(drain(s, NULL), "cancelled sa-forget abandon");
  assert_ptr_equal(xf_site_tasks_worker(s), A); /* until it hands it back */
  xf_site_tasks_action last;
  assert_null(xf_site_tasks_worker_back(s, true));
  assert_string_equal(drain(s, &last), "result-dropped start");
  assert_ptr_equal(last.user, B);
}

static void a_cancel_for_an_unknown_task_is_ignored(void **state) {
  xf_site_tasks *s = *state;
  take(s, "j1", A);
  xf_site_tasks_cancel(s, "j9", 1, 1, "gone");
  assert_string_equal(drain(s, NULL), "cancel-unknown");
  assert_int_equal(xf_site_tasks_count(s), 1);
}

/* ---- the worker and the reports ------------------------------------------------------------- */

static void a_go_before_the_model_is_in_lets_the_task_start_once_it_is(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.hold = true;
  xf_site_task *t = take_sealed(s, &o, A, NULL, 1000);
  assert_ptr_equal(xf_site_tasks_go_in(s, "j1", 1, 1), t);
  xf_site_tasks_go_checked(s, t, XF_SITE_GO_FOLLOWED, XFED__TASK_REFUSAL__REASON__UNSPECIFIED, "",
                           false);
  assert_string_equal(drain(s, NULL), "go"); /* its model is not in yet */
  xf_site_tasks_model_in(s, t);
  assert_string_equal(drain(s, NULL), "start");
}

static void ready_tasks_start_in_the_order_they_became_ready(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A), *b = take(s, "j2", B), *c = take(s, "j3", C);
  xf_site_tasks_action last;
  xf_site_tasks_model_in(s, b);
  assert_string_equal(drain(s, &last), "start");
  assert_ptr_equal(last.user, B);
  xf_site_tasks_model_in(s, c);
  xf_site_tasks_model_in(s, a);
  assert_string_equal(drain(s, NULL), ""); /* the worker is busy */
  assert_ptr_equal(xf_site_tasks_worker_back(s, true), b);
  xf_site_tasks_trained(s, b);
  assert_string_equal(drain(s, &last), "start");
  assert_ptr_equal(last.user, C); /* ready before j1, though accepted after it */
  assert_ptr_equal(xf_site_tasks_worker_back(s, true), c);
  xf_site_tasks_failed(s, c, false);
  assert_string_equal(drain(s, &last), "forget start");
  assert_ptr_equal(last.user, A);
}

static void reports_go_out_in_result_order(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A), *b = take(s, "j2", B);
  train(s, b);
  train(s, a);
  void *out[3];
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 2);
  assert_ptr_equal(out[0], B);
  assert_ptr_equal(out[1], A);
  xf_site_tasks_delivered(s, b);
  assert_string_equal(drain(s, NULL), "forget");
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 1);
  assert_ptr_equal(out[0], A);
}

static void link_down_keeps_a_held_result_until_the_task_is_offered_again(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A);
  take(s, "j2", B);
  train(s, a);
  xf_site_tasks_link_down(s);
  assert_string_equal(drain(s, NULL), "restart-stream restart-stream");
  assert_int_equal(xf_site_tasks_count(s), 2); /* nothing is lost with the link */
  assert_false(xf_site_task_offered_now(a));
  void *out[3];
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 0);
  xf_site_tasks_link_up(s);
  assert_string_equal(drain(s, NULL), "report");
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 0); /* not before its offer */
  xf_site_tasks_offer o = offer("j1", 1);
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  assert_string_equal(drain(s, NULL), "accept");
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 1);
  assert_ptr_equal(out[0], A);
}

static void a_failed_task_is_told_only_when_offered_on_this_link(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A), *b = take(s, "j2", B);
  xf_site_tasks_failed(s, a, true);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "tell-failed forget");
  assert_true(last.ignore);
  xf_site_tasks_link_down(s);
  (void)drain(s, NULL);
  xf_site_tasks_failed(s, b, true);
  assert_string_equal(drain(s, NULL), "forget");
}

static void an_update_the_coordinator_refuses_waits_for_the_next_offer(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A), *b = take(s, "j2", B);
  train(s, a);
  train(s, b);
  xf_site_tasks_update_refused(s, a);
  assert_string_equal(drain(s, NULL), "restart-stream");
  void *out[3];
  assert_int_equal(xf_site_tasks_reporting(s, out, 3), 1); /* the others go on */
  assert_ptr_equal(out[0], B);
}

static void a_task_let_go_takes_its_pending_actions_with_it(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  o.seal_key = key_one;
  xf_site_task *t = take_sealed(s, &o, A, key_one, 1000);
  train(s, t);
  o.seal_key = key_two;
  o.update_stream_id = 9;
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 2000, NULL, 0), XF_SITE_TASKS_ANSWERED);
  xf_site_tasks_action a;
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_RESEAL);
  /* the daemon cannot seal to the new key: it lets the task go */
  xf_site_tasks_drop(s, t, "the update cannot be sealed again");
  assert_int_equal(xf_site_task_phase(t), XF_SITEM_GONE); /* readable until the drain ends */
  assert_string_equal(drain(s, NULL), "drop"); /* no update-stream, no accept */
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void stopping_abandons_the_worker_task_and_starts_nothing_more(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A), *b = take(s, "j2", B);
  xf_site_tasks_model_in(s, a);
  (void)drain(s, NULL);
  xf_site_tasks_stop(s);
  xf_site_tasks_action last;
  assert_string_equal(drain(s, &last), "abandon");
  assert_null(last.why);
  xf_site_tasks_model_in(s, b);
  assert_string_equal(drain(s, NULL), "");
  assert_null(xf_site_tasks_worker_back(s, false));
  assert_string_equal(drain(s, NULL), "result-dropped");
  assert_int_equal(xf_site_tasks_count(s), 1);
}

static void a_worker_that_cannot_start_refuses_and_drops_the_task(void **state) {
  xf_site_tasks *s = *state;
  xf_site_task *a = take(s, "j1", A);
  xf_site_tasks_model_in(s, a);
  (void)drain(s, NULL);
  xf_site_tasks_start_failed(s, a, "bad argument");
  xf_site_tasks_action a1, last;
  assert_true(xf_site_tasks_next(s, &a1));
  assert_int_equal(a1.kind, XF_SITE_TASKS_REFUSE);
  assert_string_equal(a1.text, "cannot start training: bad argument");
  assert_string_equal(drain(s, &last), "drop");
  assert_string_equal(last.why, "worker pool refused");
  assert_null(xf_site_tasks_worker(s));
}

static void a_task_that_cannot_be_set_up_is_refused_and_handed_back(void **state) {
  xf_site_tasks *s = *state;
  xf_site_tasks_offer o = offer("j1", 1);
  assert_int_equal(xf_site_tasks_offer_in(s, &o, 1000, NULL, 0), XF_SITE_TASKS_CHECK);
  static xf_site_offer_verdict v;
  memset(&v, 0, sizeof(v));
  v.step = XF_SITE_OFFER_TAKEN;
  v.uo.secagg = true;
  xf_site_tasks_checked c = {.verdict = &v, .user = A, .setup_failed = "secure aggregation",
                             .setup_err = "no cohort"};
  xf_site_tasks_offer_checked(s, &o, &c);
  xf_site_tasks_action a, last;
  assert_true(xf_site_tasks_next(s, &a));
  assert_int_equal(a.kind, XF_SITE_TASKS_IGNORE_STREAM);
  assert_int_equal(a.stream_id, 7);
  assert_true(xf_site_tasks_next(s, &a));
  assert_string_equal(a.text, "secure aggregation: no cohort");
  assert_string_equal(drain(s, &last), "sa-forget forget");
  assert_ptr_equal(last.user, A);
  assert_int_equal(xf_site_tasks_count(s), 0);
}

static void a_set_holds_one_to_sixty_four_tasks(void **state) {
  (void)state;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_site_tasks *s = NULL;
  assert_int_equal(xf_site_tasks_new(0, &s, &err), XF_EINVAL);
  assert_null(s);
  assert_int_equal(xf_site_tasks_new(65, &s, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "65"));
}

static void action_names_are_one_per_kind(void **state) {
  (void)state;
  assert_string_equal(xf_site_tasks_action_name(XF_SITE_TASKS_ACCEPT), "accept");
  assert_string_equal(xf_site_tasks_action_name(XF_SITE_TASKS_RESULT_DROPPED), "result-dropped");
  assert_string_equal(xf_site_tasks_action_name(XF_SITE_TASKS_ACTIONS), "?");
}

/* docs/site-machine.md's list of actions, under "## The task set": the
 * first cell of each row after the "| action |" header, in order. */
static void docs_list_the_actions_by_their_names_in_order(void **state) {
  (void)state;
  const char *src = getenv("XF_SOURCE_DIR");
  assert_non_null(src);
  char path[1024];
  snprintf(path, sizeof(path), "%s/docs/site-machine.md", src);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open %s", path);
  char line[1024], name[64];
  bool in_section = false, in_table = false;
  int k = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "## ", 3) == 0) in_section = strcmp(line, "## The task set\n") == 0;
    if (!in_section) continue;
    if (strcmp(line, "| action | the daemon |\n") == 0) {
      in_table = true;
      (void)fgets(line, sizeof(line), f); /* the separator */
      continue;
    }
    if (!in_table) continue;
    if (line[0] != '|') break;
    if (sscanf(line, "| %63[^ |]", name) != 1) fail_msg("%s: a row without a name: %s", path, line);
    if (k >= XF_SITE_TASKS_ACTIONS) fail_msg("%s lists more actions than the code's", path);
    if (strcmp(name, xf_site_tasks_action_name((xf_site_tasks_action_kind)k)) != 0)
      fail_msg("%s, action %d: \"%s\" where the code has \"%s\"", path, k + 1, name,
               xf_site_tasks_action_name((xf_site_tasks_action_kind)k));
    k++;
  }
  fclose(f);
  if (k != XF_SITE_TASKS_ACTIONS)
    fail_msg("%s lists %d actions; the code has %d", path, k, XF_SITE_TASKS_ACTIONS);
}

#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(an_offer_the_checks_take_is_accepted_and_waits_for_its_model),
      T(queue_limit_refuses_busy_naming_the_tasks_held),
      T(a_taken_offer_beyond_the_limit_is_still_refused_busy),
      T(a_stale_task_is_dropped_to_make_room),
      T(a_task_before_its_deadline_or_offered_on_this_link_is_not_stale),
      T(a_training_task_is_never_dropped_as_stale),
      T(reoffer_after_a_coordinator_restart_reseals_without_retraining),
      T(reoffer_with_another_model_drops_the_task_and_checks_the_offer),
      T(reoffer_with_another_model_while_training_is_refused_busy),
      T(a_newer_round_of_a_job_supersedes_its_older_task),
      T(a_masked_task_held_again_after_its_go_refuses_the_lost_session),
      T(a_result_held_again_goes_out_after_the_next_go),
      T(a_held_task_offered_again_without_hold_trains),
      T(an_update_stream_the_daemon_cannot_make_is_offered_again),
      T(a_go_for_an_unknown_task_is_ignored),
      T(a_go_for_a_task_not_held_is_a_repeat),
      T(a_go_that_cannot_be_followed_refuses_and_drops_the_task),
      T(cancel_mid_upload_forgets_the_task),
      T(cancel_while_training_abandons_the_task_to_the_worker),
      T(a_cancel_for_an_unknown_task_is_ignored),
      T(a_go_before_the_model_is_in_lets_the_task_start_once_it_is),
      T(ready_tasks_start_in_the_order_they_became_ready),
      T(reports_go_out_in_result_order),
      T(link_down_keeps_a_held_result_until_the_task_is_offered_again),
      T(a_failed_task_is_told_only_when_offered_on_this_link),
      T(an_update_the_coordinator_refuses_waits_for_the_next_offer),
      T(a_task_let_go_takes_its_pending_actions_with_it),
      T(stopping_abandons_the_worker_task_and_starts_nothing_more),
      T(a_worker_that_cannot_start_refuses_and_drops_the_task),
      T(a_task_that_cannot_be_set_up_is_refused_and_handed_back),
      cmocka_unit_test(a_set_holds_one_to_sixty_four_tasks),
      cmocka_unit_test(action_names_are_one_per_kind),
      cmocka_unit_test(docs_list_the_actions_by_their_names_in_order),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
