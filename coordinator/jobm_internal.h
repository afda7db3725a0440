/* SPDX-License-Identifier: Apache-2.0 */
/* Inside the job machine (coordinator/jobmachine.h): its state, and per
 * file the functions the others call. The files of xf_jobm are views of one
 * job's state by idea (the table, the attempt, secure aggregation, the
 * action list), so the struct is defined here once for them; every other
 * module sees only the opaque xf_jobm. */
#ifndef XF_COORDINATOR_JOBM_INTERNAL_H
#define XF_COORDINATOR_JOBM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "coordinator/jobm_table.h"
#include "coordinator/jobmachine.h"

/* ---- state -------------------------------------------------------------------------------------- */

typedef struct jm_site {
  uint64_t id;
  uint64_t carrier; /* its regional aggregator, or itself */
  uint32_t group;
  uint64_t records;
} jm_site;

typedef struct jm_group {
  uint64_t via; /* 0: the sites straight to this aggregator */
  bool secagg;
  unsigned min_sites;
  bool has_release;
  xf_release_rule release;
  char rule[XF_POLICY_NAME_MAX], from[XF_ADMIT_NAME_MAX], to[XF_ADMIT_NAME_MAX];
} jm_group;

/* A site upstream named that cannot take part here, and why. */
typedef struct jm_absent {
  uint64_t id;
  char why[320];
} jm_absent;

typedef enum jm_cstate {
  C_OFFERED = 0, /* task out, no answer yet */
  C_ANSWERED,    /* it answered: some of its sites accepted, waiting for GO */
  C_GO,          /* told to train */
  C_REPORTED,    /* its update is in */
  C_GONE         /* out of the attempt */
} jm_cstate;

typedef struct jm_carrier {
  uint64_t id;
  bool regional;   /* carries sites other than itself */
  uint64_t *sites; /* its sites in the attempt (or the evaluation) */
  size_t n_sites;
  jm_cstate state;
  bool down;
  double down_since;
  bool eval_pending;
  bool has_secagg; /* its GO carried a secure-aggregation setup */
  xf_update_secagg secagg;
} jm_carrier;

/* Where an action's arrays live in the call's arenas. */
typedef struct jm_off {
  size_t sites, blob, u, from, sigs, certs, cert_lens;
} jm_off;

struct xf_jobm {
  xf_jobm_role role;
  xf_jobspec spec;       /* the job's */
  xf_jobspec round_spec; /* what the round machine runs (a relay's one-round view) */
  size_t n_params;
  xf_round *r;
  uint32_t rounds_committed;
  double resume_until;
  uint32_t resume_wait_for;
  double eval_timeout_s;
  /* relay */
  bool evaluate_only;
  double deadline, answer_by;
  bool has_release;
  xf_release_rule release;
  char rel_rule[XF_POLICY_NAME_MAX], rel_from[XF_ADMIT_NAME_MAX], rel_to[XF_ADMIT_NAME_MAX];
  uint64_t *cohort;
  size_t n_cohort;
  jm_absent *absent;
  size_t n_absent;
  bool absent_told;
  bool go_up;          /* upstream's go came: the sites may train */
  /* What goes up goes to an upstream that holds the task: one that offered
   * it on the current link and said go. After the link drops (upstream may
   * have restarted) or upstream refused the aggregate, nothing goes until
   * it offers the task again. */
  bool up_holds;
  bool up_answered;    /* ACCEPT_UP was said: up_sites (the aggregate's once it is made) */
  uint64_t *up_sites;
  size_t n_up_sites;
  bool made;           /* the region's aggregate is made and may leave, with up_weight */
  uint64_t up_weight;
  bool forward_due;    /* ... and upstream must get it (again) once it holds the task */
  bool forwarded;      /* ... and it went up before */

  /* the plan */
  bool has_plan;
  xf_admit_verdict verdict;
  char plan_reason[1536];
  jm_site *sites;
  size_t n_sites;
  jm_group *groups;
  size_t n_groups;

  /* the attempt (or the evaluation); phase is set by xf__jm_drive alone */
  xf_jobm_phase phase;
  jm_carrier *carriers;
  size_t n_carriers;
  xf_saphase *sa;
  uint64_t *go_sites; /* relay: the GO held until upstream's go */
  size_t n_go_sites;
  float *sa_mean;
  uint64_t sa_weight;
  uint32_t sa_sites;
  uint32_t lost_sites; /* reported sites whose secure sum could not be unmasked */
  double eval_deadline;
  bool eval_started;
  xf_jobm_refusal privacy_refusal; /* BUDGET wins over TARGET; OTHER: none */
  char privacy_note[XF_JOBM_MSG_MAX];
  char refusals[XF_JOBM_MSG_MAX];  /* the open attempt's refusals, in the sites' words */
  char msg[XF_JOBM_MSG_MAX];

  /* the action list of the current call, and its arenas */
  xf_jobm_action *acts;
  jm_off *offs;
  size_t n_acts, cap_acts;
  uint64_t *arena;
  size_t arena_len, arena_cap;
  uint8_t *bytes;
  size_t bytes_len, bytes_cap;
  bool oom;
  bool refused_step; /* the driver refused a move its table does not have (a bug) */
  char refused_what[96];
};

/* An event's arguments, as the event function got them (the ones it has). */
typedef struct xf__jm_args {
  double now;
  uint64_t carrier, site;
  const uint64_t *sites;
  size_t n;
  xf_jobm_refusal refusal;
  const char *text; /* details, why */
  uint64_t weight;
  bool up, held;
  uint32_t attempt;
  const xf_admission *plan;
  const xf_saphase_keys *keys;
  const xf_saphase_shares_msg *shares;
  const uint8_t *bytes;
  size_t len;
  uint32_t **words;
  size_t n_words;
} xf__jm_args;

#define JM_BIT(p) XF_JOBM_PHASE_BIT(XF_JOBM_##p)
/* The phases with an attempt open. */
#define JM_OPEN (JM_BIT(CONFIRMING) | JM_BIT(AWAIT_GO) | JM_BIT(TRAINING) | JM_BIT(UNMASKING))

/* ---- jobm_table.c: the transition table and its driver ---------------------------------------- */

/* Takes ev in m's phase: runs the row's handler and sets the phase it
 * lands in, or gives the event's answer where no row has it. The only
 * place the phase changes after creation. */
xf_err xf__jm_drive(xf_jobm *m, xf_jobm_event ev, const xf__jm_args *a, xf_errctx *err);
/* A caller's event: a fresh action list, the drive, then the list. */
xf_err xf__jm_call(xf_jobm *m, xf_jobm_event ev, const xf__jm_args *a, xf_errctx *err);
/* One of the machine's own steps, while it handles an event. A step the
 * table has no row for is refused: the phase stays and the event's call
 * ends with XF_EINTERNAL. */
void xf__jm_step(xf_jobm *m, xf_jobm_event step, const xf__jm_args *a);
bool xf__jm_attempt_open(const xf_jobm *m);

/* ---- jobm_actions.c: the action list of a call, and its arenas -------------------------------- */

void xf__jm_begin_call(xf_jobm *m);
/* Points each action's arrays into the arenas; XF_ENOMEM when an
 * allocation of the call failed, XF_EINTERNAL for a refused step. */
xf_err xf__jm_end_call(xf_jobm *m, xf_errctx *err);
/* A new action of the call (a sink that is not listed when out of memory). */
xf_jobm_action *xf__jm_push(xf_jobm *m, xf_jobm_action_kind kind, uint64_t carrier);
jm_off *xf__jm_off_of(xf_jobm *m, const xf_jobm_action *a);
void xf__jm_set_sites(xf_jobm *m, xf_jobm_action *a, const uint64_t *sites, size_t n);
/* Copies len bytes into the byte arena (8-aligned); SIZE_MAX on failure. */
size_t xf__jm_put_bytes(xf_jobm *m, const void *data, size_t len);
void xf__jm_note(xf_jobm_action *a, const char *fmt, ...) XF_PRINTF(2, 3);
void xf__jm_set_msg(xf_jobm *m, const char *fmt, ...) XF_PRINTF(2, 3);
void xf__jm_participant(xf_jobm *m, uint64_t site, xf_participant_state st, uint64_t samples);

/* ---- jobm_secagg.c: secure aggregation among the direct sites --------------------------------- */

/* Starts it over the direct sites told GO (n >= 2); false when it cannot
 * (the job failed, or out of memory). */
bool xf__jm_sa_start(xf_jobm *m, const uint64_t *sites, size_t n, double now);
/* The secure-aggregation phases' actions: what to send, then what changes
 * the round (drops, the end of the unmasking). */
void xf__jm_run_sa(xf_jobm *m, double now);
xf_err xf__jm_on_sa_advert(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_sa_shares(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_sa_check_sig(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_on_sa_refused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_sa_masked(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_masked_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                xf_errctx *err);
xf_err xf__jm_on_sa_reveal(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);

/* ---- jobm_attempt.c: the attempt, its carriers and sites, and the round's actions ------------- */

const jm_site *xf__jm_plan_site(const xf_jobm *m, uint64_t id);
jm_carrier *xf__jm_carrier_of(xf_jobm *m, uint64_t id);
bool xf__jm_carries(const jm_carrier *c, uint64_t site);
/* The carrier whose attempt holds `site`. */
jm_carrier *xf__jm_carrier_holding(xf_jobm *m, uint64_t site);
/* INVITED, ACCEPTED or REPORTING: still to answer or report. */
bool xf__jm_pending_state(xf_participant_state s);
/* False when the round does not know the site. */
bool xf__jm_site_state(const xf_jobm *m, uint64_t site, xf_participant_state *st);
bool xf__jm_site_pending(const xf_jobm *m, uint64_t site);
bool xf__jm_carrier_pending(const xf_jobm *m, const jm_carrier *c);
/* CONFIRMING, AWAIT_GO, TRAINING or UNMASKING. */
bool xf__jm_attempt_open(const xf_jobm *m);
const jm_group *xf__jm_group_of(const xf_jobm *m, uint64_t site);
/* The carrier (added when new; NULL when out of memory), and a site it carries. */
jm_carrier *xf__jm_add_carrier(xf_jobm *m, uint64_t id);
void xf__jm_carrier_add_site(xf_jobm *m, jm_carrier *c, uint64_t site);
void xf__jm_free_carriers(xf_jobm *m);
/* Frees what the attempt holds: its secure aggregation, held GOs, carriers. */
void xf__jm_end_attempt(xf_jobm *m);
/* Tells every carrier with a task in the attempt (or the evaluation) that
 * it is over. */
void xf__jm_cancel_carriers(xf_jobm *m, const char *why);
/* In WAITING with a plan that runs: the OPEN step, OPENED and the offers. */
void xf__jm_open_attempt(xf_jobm *m, double now);
/* Everybody answered and enough accepted (relay: and upstream said go):
 * the TRAIN step and GO per carrier, with secure aggregation over the
 * direct sites that accepted. */
void xf__jm_go(xf_jobm *m, double now);
/* The site leaves the open attempt (why joins its refusals). */
void xf__jm_drop_site(xf_jobm *m, uint64_t site, const char *why, double now);
/* The round's result cannot be formed: another attempt, or the end. */
void xf__jm_commit_failed(xf_jobm *m, const char *why, double now);
/* After the round machine moved: its actions, per carrier. Reentrant: a
 * drop while going on starts a fresh pass over the new list. */
void xf__jm_process_round(xf_jobm *m, double now);

/* ---- jobmachine.c: the job's life, the plan, the events, the evaluation, upstream --------------- */

/* The FAIL step, for why. */
void xf__jm_fail_job(xf_jobm *m, const char *why);
/* The carrier's update is in: its sites reported (the ones it leaves out dropped). */
void xf__jm_report_sites(xf_jobm *m, jm_carrier *c, const uint64_t *sites, size_t n,
                         uint64_t weight, double now);
/* The sites the relay names upstream: those that accepted, then those its
 * aggregate sums (copied). */
void xf__jm_keep_up_sites(xf_jobm *m, const uint64_t *sites, size_t n);
/* What every way into EVALUATING does: the attempt is over, and the
 * evaluation waits for a fresh plan. */
void xf__jm_prepare_evaluation(xf_jobm *m);

/* The handlers of jobm_table.c's rows (the caller's events, and the steps). */
xf_err xf__jm_fail(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_plan_kept(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_plan_waiting(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_plan_paused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_plan_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_resume(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_pause(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_commit(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_privacy_end(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_retry(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_answer_up(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_accepted_unheld(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_accepted_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                  xf_errctx *err);
xf_err xf__jm_on_accepted(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_refused_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err);
xf_err xf__jm_on_refused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_dropped_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err);
xf_err xf__jm_on_dropped(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_announced_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                   xf_errctx *err);
xf_err xf__jm_on_announced(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_reported_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                  xf_errctx *err);
xf_err xf__jm_on_reported(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_link_noted(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_link_in_attempt(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_link_in_evaluation(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err);
xf_err xf__jm_tick_attempt(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_tick_waiting(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_tick_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_nothing_to_commit(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                xf_errctx *err);
xf_err xf__jm_nothing_to_fail(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err);
xf_err xf__jm_release(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_next_round(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_committed(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_commit_failed(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                               xf_errctx *err);
xf_err xf__jm_evaluate(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_finish(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_evaluated(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_go(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_upstream_lost(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                               xf_errctx *err);
xf_err xf__jm_on_reoffered(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);
xf_err xf__jm_on_cancel(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err);

#endif
