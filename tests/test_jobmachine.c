/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine alone (coordinator/jobmachine.h): events in, actions out,
 * an injected clock, no sockets. The first cases drive it by hand; the
 * rest run whole jobs through the simulated federation (tests/sim.c) and
 * are the regressions this machine was built to end: min_sites counting
 * aggregators, refusals behind an aggregator lost, secure aggregation over
 * a mixed cohort failing in round 1, median taking a region as one input,
 * privacy spent on an attempt known to be lost, counts in aggregators. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "support.h"
#include "sim.h"

#include "base/alloc.h"
#include "coordinator/jobmachine.h"
#include "crypto/digest.h"

static char dir[64];

static int group_setup(void **state) {
  (void)state;
  snprintf(dir, sizeof(dir), "/tmp/xf-jobm-XXXXXX");
  if (!mkdtemp(dir)) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(dir);
  return 0;
}

/* ---- by hand ------------------------------------------------------------------------------------ */

/* A plan of n direct sites s1..sn (eligible), with a verdict. */
static xf_admission plan_of(size_t n, xf_admit_verdict verdict, const char *reason) {
  xf_admission a;
  memset(&a, 0, sizeof(a));
  a.verdict = verdict;
  snprintf(a.reason, sizeof(a.reason), "%s", reason ? reason : "");
  a.sites = xf_calloc(n ? n : 1, sizeof(*a.sites));
  a.groups = xf_calloc(1, sizeof(*a.groups));
  assert_non_null(a.sites);
  assert_non_null(a.groups);
  a.n_groups = 1;
  a.groups[0].usable = true;
  a.groups[0].min_sites = 1;
  for (size_t i = 0; i < n; i++) {
    xf_admit_site *s = &a.sites[a.n_sites++];
    snprintf(s->name, sizeof(s->name), "s%zu", i + 1);
    s->id = xf_admit_site_id(s->name);
    s->eligible = true;
    s->connected = true;
    s->records = 100;
  }
  a.eligible = (unsigned)n;
  return a;
}

static uint64_t sid(int i) {
  char name[16];
  snprintf(name, sizeof(name), "s%d", i);
  return xf_admit_site_id(name);
}

static size_t count(const xf_jobm *m, xf_jobm_action_kind k) {
  size_t n, c = 0;
  const xf_jobm_action *a = xf_jobm_actions(m, &n);
  for (size_t i = 0; i < n; i++) c += a[i].kind == k;
  return c;
}

static const xf_jobm_action *first(const xf_jobm *m, xf_jobm_action_kind k) {
  size_t n;
  const xf_jobm_action *a = xf_jobm_actions(m, &n);
  for (size_t i = 0; i < n; i++)
    if (a[i].kind == k) return &a[i];
  return NULL;
}

static xf_jobm *global_machine(const xf_jobspec *spec) {
  xf_jobm_config cfg = {.role = XF_JOBM_GLOBAL, .spec = spec, .round = 1, .attempt = 1,
                        .n_params = 18};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  return m;
}

static void a_job_waits_for_sites_and_opens_when_they_come(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  assert_true(xf_jobm_wants_plan(m));
  xf_admission short_plan = plan_of(1, XF_ADMIT_SHORT, "1 of the sites can take part");
  assert_int_equal(xf_jobm_plan(m, &short_plan, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_WAITING);
  assert_int_equal(count(m, XF_JOBM_OFFER), 0);
  assert_non_null(strstr(xf_jobm_message(m), "waiting for sites"));
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 11.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_CONFIRMING);
  assert_int_equal(count(m, XF_JOBM_OPENED), 1);
  assert_int_equal(count(m, XF_JOBM_OFFER), 3);
  uint32_t inv, acc, rep, tgt;
  xf_jobm_counts(m, &inv, &acc, &rep, &tgt);
  assert_int_equal(inv, 3);
  xf_admission_free(&short_plan);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void nobody_trains_until_every_site_answered_then_all_go(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(xf_jobm_refused(m, sid(2), 0, XF_JOBM_REFUSED_BUSY, "training job 9", 10.2,
                                   NULL),
                   XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(xf_jobm_accepted(m, sid(3), NULL, 0, 10.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 2);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_TRAINING);
  /* An update before its GO is not taken: s2 refused. */
  assert_int_equal(xf_jobm_reported(m, sid(2), NULL, 0, 100, 10.4, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_DISCARD), 1);
  assert_int_equal(xf_jobm_reported(m, sid(1), NULL, 0, 100, 10.5, NULL), XF_OK);
  assert_int_equal(xf_jobm_reported(m, sid(3), NULL, 0, 100, 10.6, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_COMMIT), 1);
  assert_int_equal(first(m, XF_JOBM_COMMIT)->samples, 2);
  assert_int_equal(xf_jobm_committed(m, 11.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_rounds_committed(m), 1);
  assert_true(xf_jobm_wants_plan(m)); /* decided again before the next attempt */
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void too_few_acceptances_retry_without_a_go(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  xf_admission ok = plan_of(2, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(
      xf_jobm_refused(m, sid(2), 0, XF_JOBM_REFUSED_POLICY, "rule s2-stays denies it", 10.2, NULL),
      XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(count(m, XF_JOBM_RETRY), 1);
  assert_non_null(strstr(first(m, XF_JOBM_RETRY)->note, "rule s2-stays denies it"));
  assert_int_equal(count(m, XF_JOBM_CANCEL), 1); /* s1, which waited */
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_WAITING);
  assert_int_equal(xf_jobm_attempt(m), 2);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

/* An aggregator that answers for fewer of its sites than min_sites needs:
 * the sites it leaves out drop the attempt below min_sites, which is
 * retried before anyone trains (the machine reads nothing of the attempt it
 * closed: run under AddressSanitizer this was a use after free). */
static void an_aggregator_answering_for_too_few_sites_retries_without_a_go(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  spec.min_sites = 3;
  xf_jobm *m = global_machine(&spec);
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  uint64_t agg = xf_admit_site_id("agg-eu");
  snprintf(ok.groups[0].via, sizeof(ok.groups[0].via), "agg-eu");
  ok.groups[0].via_id = agg;
  for (size_t i = 0; i < ok.n_sites; i++) {
    snprintf(ok.sites[i].via, sizeof(ok.sites[i].via), "agg-eu");
    ok.sites[i].via_id = agg;
  }
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_OFFER), 1);
  assert_int_equal(first(m, XF_JOBM_OFFER)->n_sites, 3);
  uint64_t two[2] = {sid(1), sid(2)};
  assert_int_equal(xf_jobm_accepted(m, agg, two, 2, 10.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(count(m, XF_JOBM_RETRY), 1);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_WAITING);
  assert_int_equal(xf_jobm_attempt(m), 2);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void a_policy_that_no_longer_allows_pauses_and_one_that_does_resumes(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  xf_admission denied = plan_of(3, XF_ADMIT_DENIED, "rule x denies it");
  assert_int_equal(xf_jobm_plan(m, &denied, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_PAUSED);
  assert_int_equal(count(m, XF_JOBM_PAUSE), 1);
  assert_non_null(strstr(first(m, XF_JOBM_PAUSE)->note, "rule x denies it"));
  assert_int_equal(xf_jobm_plan(m, &denied, 20.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_PAUSE), 0); /* paused once */
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 30.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_RESUME), 1);
  assert_int_equal(count(m, XF_JOBM_OPENED), 1);
  xf_admission_free(&denied);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void a_spent_budget_fails_the_job_without_retrying(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  xf_admission ok = plan_of(2, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_refused(m, sid(1), 0, XF_JOBM_REFUSED_BUDGET,
                                   "dataset d at s1 has spent epsilon 3 of its budget 3", 10.1,
                                   NULL),
                   XF_OK);
  assert_int_equal(count(m, XF_JOBM_FAIL), 1);
  assert_non_null(strstr(first(m, XF_JOBM_FAIL)->note, "spent epsilon 3 of its budget 3"));
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_FAILED);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void a_lost_link_is_waited_for_then_dropped_and_a_return_is_offered_again(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  xf_jobm *m = global_machine(&spec);
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_link(m, sid(1), false, 10.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_link(m, sid(1), true, 12.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_OFFER), 1);
  assert_true(first(m, XF_JOBM_OFFER)->resend);
  assert_int_equal(xf_jobm_link(m, sid(2), false, 12.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_tick(m, 12.0 + XF_JOBM_RECONNECT_GRACE_S - 0.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_PARTICIPANT), 0);
  assert_int_equal(xf_jobm_tick(m, 12.0 + XF_JOBM_RECONNECT_GRACE_S + 0.1, NULL), XF_OK);
  const xf_jobm_action *p = first(m, XF_JOBM_PARTICIPANT);
  assert_non_null(p);
  assert_int_equal(p->site, sid(2));
  assert_int_equal(p->state, XF_PARTICIPANT_DROPPED);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void a_relay_answers_upstream_and_trains_only_on_its_go(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  uint64_t cohort[2] = {sid(1), sid(2)};
  xf_release_rule rule = {.rule = "eu-regional", .from = "eu", .to = "us", .min_cohort = 2};
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY, .spec = &spec, .round = 3, .attempt = 1,
                        .n_params = 18, .deadline = 600, .answer_by = 100,
                        .release = &rule, .cohort = cohort, .n_cohort = 2};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL); /* s3 is not named upstream */
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_OFFER), 2);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(2), NULL, 0, 10.2, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(first(m, XF_JOBM_ACCEPT_UP)->n_sites, 2);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_AWAIT_GO);
  assert_int_equal(xf_jobm_go(m, 10.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 2);
  assert_int_equal(xf_jobm_reported(m, sid(1), NULL, 0, 100, 10.4, NULL), XF_OK);
  assert_int_equal(xf_jobm_reported(m, sid(2), NULL, 0, 100, 10.5, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_COMMIT), 1);
  assert_int_equal(xf_jobm_committed(m, 10.6, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  assert_int_equal(first(m, XF_JOBM_FORWARD)->n_sites, 2);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_DONE);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

/* A relay machine of two sites that accepted, answered upstream and got
 * its go, its sites training. */
static xf_jobm *relay_training(xf_jobspec *spec, xf_admission *plan) {
  *spec = sim_spec(2);
  uint64_t cohort[2] = {sid(1), sid(2)};
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY, .spec = spec, .round = 2, .attempt = 1,
                        .n_params = 18, .deadline = 600, .answer_by = 100,
                        .cohort = cohort, .n_cohort = 2};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  *plan = plan_of(2, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, plan, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(2), NULL, 0, 10.2, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(xf_jobm_go(m, 10.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 2);
  return m;
}

/* CI's kill -9 of the coordinator: the relay's sites reported after its
 * link came back but before the restarted coordinator offered the task
 * again. The aggregate must wait for the new go (a coordinator that does
 * not hold the task yet refuses it), and then go up, once. */
static void a_relay_keeps_an_aggregate_made_while_upstream_is_away_for_its_new_go(void **state) {
  (void)state;
  xf_jobspec spec;
  xf_admission plan;
  xf_jobm *m = relay_training(&spec, &plan);
  assert_int_equal(xf_jobm_upstream_lost(m, 11.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_reported(m, sid(1), NULL, 0, 100, 11.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_reported(m, sid(2), NULL, 0, 100, 11.2, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_COMMIT), 1);
  assert_int_equal(xf_jobm_committed(m, 11.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 0);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_DONE);
  assert_non_null(strstr(xf_jobm_message(m), "waits for upstream"));
  /* Offered again, held: say again who is in, and still wait. */
  assert_int_equal(xf_jobm_reoffered(m, true, 12.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(first(m, XF_JOBM_ACCEPT_UP)->n_sites, 2);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 0);
  /* The new go: now it goes, for the first time. */
  assert_int_equal(xf_jobm_go(m, 12.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  assert_int_equal(first(m, XF_JOBM_FORWARD)->n_sites, 2);
  assert_int_equal(first(m, XF_JOBM_FORWARD)->weight, 200);
  assert_false(first(m, XF_JOBM_FORWARD)->resend);
  assert_int_equal(xf_jobm_go(m, 12.2, NULL), XF_OK); /* a repeated go sends nothing again */
  assert_int_equal(count(m, XF_JOBM_FORWARD), 0);
  xf_admission_free(&plan);
  xf_jobm_free(m);
}

/* An aggregate sent before the link dropped (or refused by an upstream
 * that did not hold the task) goes again only once upstream holds the
 * task again: on the go of a held offer, at once for one that is not. */
static void a_relay_sends_its_aggregate_again_only_to_an_upstream_that_holds_the_task(
    void **state) {
  (void)state;
  xf_jobspec spec;
  xf_admission plan;
  xf_jobm *m = relay_training(&spec, &plan);
  assert_int_equal(xf_jobm_reported(m, sid(1), NULL, 0, 100, 11.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_reported(m, sid(2), NULL, 0, 100, 11.2, NULL), XF_OK);
  assert_int_equal(xf_jobm_committed(m, 11.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  assert_false(first(m, XF_JOBM_FORWARD)->resend);
  /* Refused as a task upstream does not hold; its go says it holds it now. */
  assert_int_equal(xf_jobm_upstream_lost(m, 12.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 0);
  assert_int_equal(xf_jobm_go(m, 12.05, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  assert_true(first(m, XF_JOBM_FORWARD)->resend);
  assert_int_equal(xf_jobm_upstream_lost(m, 12.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_reoffered(m, true, 12.2, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 0);
  assert_int_equal(xf_jobm_go(m, 12.3, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  assert_true(first(m, XF_JOBM_FORWARD)->resend);
  assert_int_equal(first(m, XF_JOBM_FORWARD)->n_sites, 2);
  assert_int_equal(xf_jobm_upstream_lost(m, 13.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_reoffered(m, false, 13.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(count(m, XF_JOBM_FORWARD), 1);
  xf_admission_free(&plan);
  xf_jobm_free(m);
}

/* The go an old upstream gave before the sites had answered is not the
 * restarted one's: the sites train only on the new go. */
static void a_relay_waits_for_a_restarted_upstreams_go_before_its_sites_train(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  uint64_t cohort[2] = {sid(1), sid(2)};
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY, .spec = &spec, .round = 2, .attempt = 1,
                        .n_params = 18, .deadline = 600, .answer_by = 100,
                        .cohort = cohort, .n_cohort = 2};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  xf_admission plan = plan_of(2, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &plan, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(2), NULL, 0, 10.2, NULL), XF_OK);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_AWAIT_GO);
  assert_int_equal(xf_jobm_upstream_lost(m, 10.3, NULL), XF_OK);
  assert_int_equal(xf_jobm_reoffered(m, true, 11.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_ACCEPT_UP), 1);
  assert_int_equal(count(m, XF_JOBM_GO), 0);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_AWAIT_GO);
  assert_int_equal(xf_jobm_go(m, 11.1, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_GO), 2);
  xf_admission_free(&plan);
  xf_jobm_free(m);
}

static void a_relay_below_its_cohort_refuses_upstream_before_anyone_trains(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(2);
  uint64_t cohort[2] = {sid(1), sid(2)};
  xf_release_rule rule = {.rule = "eu-regional", .from = "eu", .to = "us", .min_cohort = 2};
  xf_jobm_config cfg = {.role = XF_JOBM_RELAY, .spec = &spec, .round = 1, .attempt = 1,
                        .n_params = 18, .deadline = 600, .release = &rule, .cohort = cohort,
                        .n_cohort = 2};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  xf_admission ok = plan_of(2, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(xf_jobm_accepted(m, sid(1), NULL, 0, 10.1, NULL), XF_OK);
  assert_int_equal(xf_jobm_refused(m, sid(2), 0, XF_JOBM_REFUSED_POLICY, "rule s2-stays", 10.2,
                                   NULL),
                   XF_OK);
  /* s2's own refusal goes up, then the task as a whole; s1 never trains. */
  size_t n;
  const xf_jobm_action *a = xf_jobm_actions(m, &n);
  bool site_refusal = false, task_refusal = false, go = false;
  for (size_t i = 0; i < n; i++) {
    site_refusal |= a[i].kind == XF_JOBM_REFUSE_UP && a[i].site == sid(2);
    task_refusal |= a[i].kind == XF_JOBM_REFUSE_UP && a[i].site == 0;
    go |= a[i].kind == XF_JOBM_GO;
  }
  assert_true(site_refusal);
  assert_true(task_refusal);
  assert_false(go);
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_FAILED);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

static void noise_in_the_sum_stops_before_the_round_that_would_pass_the_target(void **state) {
  (void)state;
  xf_jobspec spec = sim_spec(50);
  spec.privacy = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_SITE, .mode = XF_PRIVACY_CENTRAL,
                                   .clip = 1, .has_target_epsilon = true, .target_epsilon = 1,
                                   .has_noise_multiplier = true, .noise_multiplier = 0.8,
                                   .delta = 1e-5};
  xf_jobm_config cfg = {.role = XF_JOBM_GLOBAL, .spec = &spec, .round = 6, .attempt = 1,
                        .rounds_committed = 5, .n_params = 18};
  xf_jobm *m = NULL;
  assert_int_equal(xf_jobm_create(&cfg, &m, NULL), XF_OK);
  xf_admission ok = plan_of(3, XF_ADMIT_RUNS, NULL);
  assert_int_equal(xf_jobm_plan(m, &ok, 10.0, NULL), XF_OK);
  assert_int_equal(count(m, XF_JOBM_STOP), 1);
  assert_non_null(strstr(first(m, XF_JOBM_STOP)->note, "above the target 1"));
  assert_int_equal(xf_jobm_get_phase(m), XF_JOBM_EVALUATING);
  assert_int_equal(count(m, XF_JOBM_OFFER), 0);
  xf_admission_free(&ok);
  xf_jobm_free(m);
}

/* ---- whole jobs through the simulated federation ------------------------------------------------- */

static void regional_sites(sim_config *c) {
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "e1", .region = "eu", .via = "agg-eu"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "e2", .region = "eu", .via = "agg-eu"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "p1", .region = "ap", .via = "agg-ap"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "p2", .region = "ap", .via = "agg-ap"};
}

static void base(sim_config *c, uint32_t rounds) {
  memset(c, 0, sizeof(*c));
  c->dir = dir;
  c->data_seed = 3;
  c->spec = sim_spec(rounds);
}

static void run_ok(const sim_config *c, sim_result *r) {
  assert_int_equal(sim_run(c, r), 0);
  if (r->verdict != XF_ADMIT_RUNS) print_error("refused: %s\n", r->refusal);
  assert_int_equal(r->verdict, XF_ADMIT_RUNS);
  if (r->phase != XF_JOBM_DONE) print_error("ended %s: %s\n", xf_jobm_phase_name(r->phase), r->message);
  assert_int_equal(r->phase, XF_JOBM_DONE);
  assert_true(isfinite(r->accuracy));
}

static void min_sites_counts_the_sites_behind_regional_aggregators(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  c.spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  c.spec.min_sites = 3; /* 4 sites behind 2 aggregators */
  regional_sites(&c);
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.rounds_committed, 2);
  assert_int_equal(r.max_invited, 4);
  assert_int_equal(r.attempts, 2);
}

static void a_refusal_behind_an_aggregator_reaches_the_coordinator_in_the_sites_words(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  c.spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  regional_sites(&c);
  c.sites[0].refuse_policy = true; /* e1 */
  sim_result r;
  run_ok(&c, &r);
  assert_true(r.refused_rows >= 2); /* each round */
  assert_non_null(strstr(r.refusals, "rule e1-stays"));
  assert_int_equal(r.sites[0].trained, 0);
  assert_int_equal(r.sites[1].trained, 2);
}

static const char mixed_policy[] =
    "{\"regions\": [{\"name\": \"ap\"}, {\"name\": \"eu\"}, {\"name\": \"us\"}],"
    " \"sites\": [{\"name\": \"u1\", \"region\": \"us\"}, {\"name\": \"u2\", \"region\": \"us\"},"
    "  {\"name\": \"e1\", \"region\": \"eu\"}, {\"name\": \"e2\", \"region\": \"eu\"}],"
    " \"datasets\": ["
    "  {\"name\": \"synth\", \"site\": \"u1\", \"classification\": \"internal\"},"
    "  {\"name\": \"synth\", \"site\": \"u2\", \"classification\": \"internal\"},"
    "  {\"name\": \"synth\", \"site\": \"e1\", \"classification\": \"confidential\"},"
    "  {\"name\": \"synth\", \"site\": \"e2\", \"classification\": \"confidential\"}],"
    " \"rules\": ["
    "  {\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
    "   \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"],"
    "   \"conditions\": {\"min_cohort\": 2}}]}";

static void mixed_sites(sim_config *c) {
  c->policy_json = mixed_policy;
  c->coordinator_region = "us";
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "u1", .region = "us"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "u2", .region = "us"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "e1", .region = "eu", .via = "agg-eu"};
  c->sites[c->n_sites++] = (sim_site_cfg){.name = "e2", .region = "eu", .via = "agg-eu"};
}

static void secure_aggregation_runs_over_a_cohort_the_policy_mixes(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  c.spec.secure_aggregation.enabled = true;
  c.spec.privacy.clip = 1.0;
  mixed_sites(&c);
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.rounds_committed, 2);
  assert_int_equal(r.max_invited, 4);
  for (size_t i = 0; i < r.n_sites; i++) assert_int_equal(r.sites[i].trained, 2);
}

static void four_direct_sites_with_secure_aggregation(sim_config *c) {
  base(c, 2);
  c->spec.secure_aggregation.enabled = true; /* threshold 0.66: t = 3 of 4 */
  c->spec.privacy.clip = 1.0;
  for (int i = 0; i < 4; i++) {
    static const char *const names[] = {"a1", "a2", "a3", "a4"};
    c->sites[c->n_sites++] = (sim_site_cfg){.name = names[i], .region = "us"};
  }
}

/* A site that refuses the survivor set leaves the unmasking; with t of the
 * others signing, its input (already in the sum) is unmasked from their
 * shares and every round commits all four. */
static void a_site_refusing_the_survivor_set_leaves_and_t_signers_still_unmask(void **state) {
  (void)state;
  sim_config c;
  four_direct_sites_with_secure_aggregation(&c);
  c.sites[3].refuse_survivors = true;
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.rounds_committed, 2);
  assert_int_equal(r.attempts, 2);
  /* Every site's update in both committed sums, the refuser's included:
   * the secure sum's weight is the four sites' 96 training records each. */
  for (size_t i = 0; i < 4; i++) assert_int_equal(r.sites[i].used, 2);
  assert_int_equal(r.weight_last, 4 * 96);
}

/* Two of four refuse: fewer than t = 3 sign, no site reveals, each attempt
 * fails cleanly, and the job fails in the sites' words. */
static void refusals_that_leave_fewer_than_t_signers_fail_the_job_in_the_sites_words(void **state) {
  (void)state;
  sim_config c;
  four_direct_sites_with_secure_aggregation(&c);
  c.sites[2].refuse_survivors = c.sites[3].refuse_survivors = true;
  sim_result r;
  assert_int_equal(sim_run(&c, &r), 0);
  assert_int_equal(r.verdict, XF_ADMIT_RUNS);
  assert_int_equal(r.phase, XF_JOBM_FAILED);
  assert_int_equal(r.rounds_committed, 0);
  assert_true(r.attempts >= 2);
  if (!strstr(r.message, "only 2 of the 4 survivors signed the survivor set") ||
      !strstr(r.message, "refused by the site: a3: secagg survivors: refusing to sign"))
    fail_msg("message: %s", r.message);
}

static void median_across_regions_weighs_each_region_by_its_sites(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  c.spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  xf_job_strategy_defaults(&c.spec.strategy, XF_JOB_STRATEGY_MEDIAN);
  regional_sites(&c);
  c.sites[c.n_sites++] = (sim_site_cfg){.name = "p3", .region = "ap", .via = "agg-ap"};
  sim_result r;
  run_ok(&c, &r);
  /* Two regional inputs, of 2 and 3 sites: 5 votes, not 2. */
  assert_int_equal(r.weight_last, 5);
}

static void an_attempt_the_region_cannot_release_spends_no_budget(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  c.spec.privacy = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_RECORD, .mode = XF_PRIVACY_LOCAL,
                                     .clip = 1.0, .has_target_epsilon = true,
                                     .target_epsilon = 8, .delta = 1e-5};
  mixed_sites(&c);
  c.sites[3].refuse_policy = true; /* e2: the region's aggregate cannot reach 2 sites */
  sim_result r;
  run_ok(&c, &r);
  /* e1 accepted each time, and never trained or spent anything. */
  assert_int_equal(r.sites[2].trained, 0);
  assert_int_equal(r.sites[2].charged, 0);
  assert_true(r.sites[2].ledger_epsilon == 0);
  /* the direct sites' ledgers hold exactly what was used */
  for (int i = 0; i < 2; i++) {
    assert_int_equal(r.sites[i].charged, r.sites[i].used);
    assert_true(fabs(r.sites[i].ledger_epsilon - r.sites[i].expected_epsilon) < 1e-6);
  }
}

static void counts_shown_are_sites_whatever_stands_between(void **state) {
  (void)state;
  sim_config c;
  base(&c, 1);
  c.spec.topology = XF_JOB_TOPOLOGY_REGIONAL;
  c.spec.min_sites = 4;
  regional_sites(&c);
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.max_invited, 4); /* not 2 aggregators */
}

static void a_site_that_leaves_after_accepting_is_counted_out_and_the_round_goes_on(void **state) {
  (void)state;
  sim_config c;
  base(&c, 2);
  for (int i = 0; i < 3; i++) {
    static const char *const names[] = {"a1", "a2", "a3"};
    c.sites[c.n_sites++] = (sim_site_cfg){.name = names[i], .region = "us"};
  }
  c.sites[2].drop_after_accept = true;
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.rounds_committed, 2);
  assert_int_equal(r.sites[2].trained, 0);
}

static void a_silent_site_is_dropped_at_the_confirmation_window(void **state) {
  (void)state;
  sim_config c;
  base(&c, 1);
  for (int i = 0; i < 3; i++) {
    static const char *const names[] = {"a1", "a2", "a3"};
    c.sites[c.n_sites++] = (sim_site_cfg){.name = names[i], .region = "us"};
  }
  c.sites[1].silent = true;
  c.spec.round_deadline_s = 40; /* confirmation window 10 s */
  sim_result r;
  run_ok(&c, &r);
  assert_int_equal(r.rounds_committed, 1);
  assert_int_equal(r.sites[1].trained, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(a_job_waits_for_sites_and_opens_when_they_come),
      cmocka_unit_test(nobody_trains_until_every_site_answered_then_all_go),
      cmocka_unit_test(too_few_acceptances_retry_without_a_go),
      cmocka_unit_test(an_aggregator_answering_for_too_few_sites_retries_without_a_go),
      cmocka_unit_test(a_policy_that_no_longer_allows_pauses_and_one_that_does_resumes),
      cmocka_unit_test(a_spent_budget_fails_the_job_without_retrying),
      cmocka_unit_test(a_lost_link_is_waited_for_then_dropped_and_a_return_is_offered_again),
      cmocka_unit_test(a_relay_answers_upstream_and_trains_only_on_its_go),
      cmocka_unit_test(a_relay_keeps_an_aggregate_made_while_upstream_is_away_for_its_new_go),
      cmocka_unit_test(a_relay_sends_its_aggregate_again_only_to_an_upstream_that_holds_the_task),
      cmocka_unit_test(a_relay_waits_for_a_restarted_upstreams_go_before_its_sites_train),
      cmocka_unit_test(a_relay_below_its_cohort_refuses_upstream_before_anyone_trains),
      cmocka_unit_test(noise_in_the_sum_stops_before_the_round_that_would_pass_the_target),
      cmocka_unit_test(min_sites_counts_the_sites_behind_regional_aggregators),
      cmocka_unit_test(a_refusal_behind_an_aggregator_reaches_the_coordinator_in_the_sites_words),
      cmocka_unit_test(secure_aggregation_runs_over_a_cohort_the_policy_mixes),
      cmocka_unit_test(a_site_refusing_the_survivor_set_leaves_and_t_signers_still_unmask),
      cmocka_unit_test(refusals_that_leave_fewer_than_t_signers_fail_the_job_in_the_sites_words),
      cmocka_unit_test(median_across_regions_weighs_each_region_by_its_sites),
      cmocka_unit_test(an_attempt_the_region_cannot_release_spends_no_budget),
      cmocka_unit_test(counts_shown_are_sites_whatever_stands_between),
      cmocka_unit_test(a_site_that_leaves_after_accepting_is_counted_out_and_the_round_goes_on),
      cmocka_unit_test(a_silent_site_is_dropped_at_the_confirmation_window),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
