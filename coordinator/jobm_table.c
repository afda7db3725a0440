/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's transitions as data (coordinator/jobm_table.h): for
 * each phase, which events it takes, the handler that takes them and the
 * phases they may land in, and the one driver that applies a row. */
#include <stdio.h>

#include "coordinator/jobm_internal.h"

const char *xf_jobm_event_name(xf_jobm_event ev) {
  static const char *const names[] = {
      "plan",        "accepted",      "refused",     "announced",   "reported",
      "dropped",     "link",          "sa_advert",   "sa_shares",   "sa_check_sig",
      "sa_refused",  "sa_masked",     "sa_reveal",   "tick",        "committed",
      "commit_failed", "evaluated",   "go",          "upstream_lost", "reoffered",
      "cancel",      "resume",        "pause",       "open",        "answer_up",
      "train",       "unmask",        "commit",      "next_round",  "retry",
      "evaluate",    "privacy_end",   "fail",        "release",     "finish"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == XF_JOBM_EV_COUNT, "one name per event");
  return (unsigned)ev < XF_JOBM_EV_COUNT ? names[ev] : "unknown";
}

#define P(p) JM_BIT(p)
#define ALL (XF_JOBM_PHASE_BIT(XF_JOBM_CANCELLED + 1) - 1)
#define SA_PHASES (P(TRAINING) | P(UNMASKING))

/* The caller's events first, then the machine's steps (the phase graph,
 * docs/job-machine.md). */
static const xf_jobm_transition rows[] = {
    /* the caller's events: the phase moves only by the steps they take,
     * but for cancel */
    {P(WAITING), XF_JOBM_EV_PLAN, xf__jm_plan_waiting, 0},
    {P(PAUSED), XF_JOBM_EV_PLAN, xf__jm_plan_paused, 0},
    {P(EVALUATING), XF_JOBM_EV_PLAN, xf__jm_plan_evaluating, 0},
    {JM_OPEN, XF_JOBM_EV_ACCEPTED, xf__jm_on_accepted, 0},
    {P(EVALUATING), XF_JOBM_EV_ACCEPTED, xf__jm_accepted_evaluating, 0},
    {JM_OPEN, XF_JOBM_EV_REFUSED, xf__jm_on_refused, 0},
    {P(EVALUATING), XF_JOBM_EV_REFUSED, xf__jm_refused_evaluating, 0},
    {P(TRAINING), XF_JOBM_EV_ANNOUNCED, xf__jm_on_announced, 0},
    {P(TRAINING), XF_JOBM_EV_REPORTED, xf__jm_on_reported, 0},
    {JM_OPEN, XF_JOBM_EV_DROPPED, xf__jm_on_dropped, 0},
    {P(EVALUATING), XF_JOBM_EV_DROPPED, xf__jm_dropped_evaluating, 0},
    {JM_OPEN, XF_JOBM_EV_LINK, xf__jm_link_in_attempt, 0},
    {P(EVALUATING), XF_JOBM_EV_LINK, xf__jm_link_in_evaluation, 0},
    {SA_PHASES, XF_JOBM_EV_SA_ADVERT, xf__jm_on_sa_advert, 0},
    {SA_PHASES, XF_JOBM_EV_SA_SHARES, xf__jm_on_sa_shares, 0},
    {SA_PHASES, XF_JOBM_EV_SA_CHECK_SIG, xf__jm_on_sa_check_sig, 0},
    {SA_PHASES, XF_JOBM_EV_SA_REFUSED, xf__jm_on_sa_refused, 0},
    {P(TRAINING), XF_JOBM_EV_SA_MASKED, xf__jm_on_sa_masked, 0},
    {SA_PHASES, XF_JOBM_EV_SA_REVEAL, xf__jm_on_sa_reveal, 0},
    {JM_OPEN, XF_JOBM_EV_TICK, xf__jm_tick_attempt, 0},
    {P(WAITING), XF_JOBM_EV_TICK, xf__jm_tick_waiting, 0},
    {P(EVALUATING), XF_JOBM_EV_TICK, xf__jm_tick_evaluating, 0},
    {P(COMMITTING), XF_JOBM_EV_COMMITTED, xf__jm_on_committed, 0},
    {P(COMMITTING), XF_JOBM_EV_COMMIT_FAILED, xf__jm_on_commit_failed, 0},
    {P(EVALUATING), XF_JOBM_EV_EVALUATED, xf__jm_on_evaluated, 0},
    {ALL, XF_JOBM_EV_GO, xf__jm_on_go, 0},
    {ALL, XF_JOBM_EV_UPSTREAM_LOST, xf__jm_on_upstream_lost, 0},
    {ALL & ~(P(FAILED) | P(CANCELLED)), XF_JOBM_EV_REOFFERED, xf__jm_on_reoffered, 0},
    {ALL & ~(P(DONE) | P(FAILED) | P(CANCELLED)), XF_JOBM_EV_CANCEL, xf__jm_on_cancel,
     P(CANCELLED)},

    /* the machine's steps */
    {P(PAUSED), XF_JOBM_EV_RESUME, xf__jm_resume, P(WAITING)},
    {P(WAITING), XF_JOBM_EV_PAUSE, xf__jm_pause, P(PAUSED)},
    {P(WAITING), XF_JOBM_EV_OPEN, NULL, P(CONFIRMING)},
    {P(CONFIRMING), XF_JOBM_EV_ANSWER_UP, xf__jm_answer_up, P(AWAIT_GO)},
    {P(CONFIRMING) | P(AWAIT_GO), XF_JOBM_EV_TRAIN, NULL, P(TRAINING)},
    {P(TRAINING), XF_JOBM_EV_UNMASK, NULL, P(UNMASKING)},
    {P(TRAINING) | P(UNMASKING), XF_JOBM_EV_COMMIT, xf__jm_commit, P(COMMITTING)},
    {P(COMMITTING), XF_JOBM_EV_NEXT_ROUND, xf__jm_next_round, P(WAITING)},
    {P(CONFIRMING) | P(TRAINING) | P(UNMASKING) | P(COMMITTING), XF_JOBM_EV_RETRY, xf__jm_retry,
     P(WAITING)},
    {P(WAITING), XF_JOBM_EV_EVALUATE, xf__jm_evaluate, P(EVALUATING)},
    {P(CONFIRMING) | P(TRAINING) | P(UNMASKING) | P(COMMITTING), XF_JOBM_EV_PRIVACY_END,
     xf__jm_privacy_end, P(FAILED) | P(EVALUATING)},
    {P(AWAIT_GO), XF_JOBM_EV_PRIVACY_END, xf__jm_privacy_end, P(FAILED)}, /* a relay's */
    {P(WAITING) | JM_OPEN | P(COMMITTING), XF_JOBM_EV_FAIL, xf__jm_fail, P(FAILED)},
    {P(COMMITTING), XF_JOBM_EV_RELEASE, xf__jm_release, P(DONE) | P(FAILED)},
    {P(EVALUATING), XF_JOBM_EV_FINISH, xf__jm_finish, P(DONE)},
};

/* A caller's event in a phase no row has: the answer jobmachine.h gives
 * for it there (NULL: nothing). Steps have none: they are refused. */
static const xf__jm_run unheld[XF_JOBM_EV_COUNT] = {
    [XF_JOBM_EV_PLAN] = xf__jm_plan_kept,
    [XF_JOBM_EV_ACCEPTED] = xf__jm_accepted_unheld,
    [XF_JOBM_EV_ANNOUNCED] = xf__jm_announced_unexpected,
    [XF_JOBM_EV_REPORTED] = xf__jm_reported_unexpected,
    [XF_JOBM_EV_LINK] = xf__jm_link_noted,
    [XF_JOBM_EV_SA_MASKED] = xf__jm_masked_unexpected,
    [XF_JOBM_EV_COMMITTED] = xf__jm_nothing_to_commit,
    [XF_JOBM_EV_COMMIT_FAILED] = xf__jm_nothing_to_fail,
};

const xf_jobm_transition *xf_jobm_transitions(size_t *n) {
  *n = sizeof(rows) / sizeof(rows[0]);
  return rows;
}

static const xf_jobm_transition *row_of(xf_jobm_phase p, xf_jobm_event ev) {
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
    if (rows[i].event == ev && (rows[i].phases & XF_JOBM_PHASE_BIT(p))) return &rows[i];
  return NULL;
}

static void refuse(xf_jobm *m, xf_jobm_event ev, xf_jobm_phase from, xf_jobm_phase to) {
  m->refused_step = true;
  snprintf(m->refused_what, sizeof(m->refused_what), "%s from %s to %s", xf_jobm_event_name(ev),
           xf_jobm_phase_name(from), xf_jobm_phase_name(to));
}

xf_err xf__jm_drive(xf_jobm *m, xf_jobm_event ev, const xf__jm_args *a, xf_errctx *err) {
  xf_jobm_phase from = m->phase, next = from;
  const xf_jobm_transition *row = row_of(from, ev);
  if (!row) {
    if (ev >= XF_JOBM_EV_FIRST_STEP) {
      refuse(m, ev, from, from);
      return XF_OK;
    }
    return unheld[ev] ? unheld[ev](m, a, &next, err) : XF_OK;
  }
  /* A row with one next phase lands there unless its handler says otherwise. */
  if (row->next && (row->next & (row->next - 1)) == 0)
    next = (xf_jobm_phase)__builtin_ctz(row->next);
  xf_err rc = row->run ? row->run(m, a, &next, err) : XF_OK;
  if (rc != XF_OK || !row->next) return rc;
  /* A handler that lands the job itself takes no step of its own. */
  if (!(row->next & XF_JOBM_PHASE_BIT(next)) || m->phase != from) {
    refuse(m, ev, from, next);
    return XF_OK;
  }
  m->phase = next;
  return XF_OK;
}

xf_err xf__jm_call(xf_jobm *m, xf_jobm_event ev, const xf__jm_args *a, xf_errctx *err) {
  xf__jm_begin_call(m);
  xf_err rc = xf__jm_drive(m, ev, a, err);
  if (rc != XF_OK) return rc;
  return xf__jm_end_call(m, err);
}

/* A step's handler fails only for memory (RELEASE's, which committed
 * drives itself to pass the error on): the call ends with XF_ENOMEM. */
void xf__jm_step(xf_jobm *m, xf_jobm_event step, const xf__jm_args *a) {
  xf_errctx e = {0};
  if (xf__jm_drive(m, step, a, &e) != XF_OK) m->oom = true;
}
