/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's transition table, read-only, for the tests that hold
 * docs/job-machine.md to it: which events each phase takes, and where they
 * may take the job. Not the daemons' interface (that is
 * coordinator/jobmachine.h). */
#ifndef XF_COORDINATOR_JOBM_TABLE_H
#define XF_COORDINATOR_JOBM_TABLE_H

#include <stddef.h>

#include "base/result.h"
#include "coordinator/jobmachine.h"

/* What the machine is driven by: the caller's events (one per event
 * function of jobmachine.h), then the steps the machine takes while it
 * handles one of them — each step is one move of the phase graph. */
typedef enum xf_jobm_event {
  XF_JOBM_EV_PLAN = 0,
  XF_JOBM_EV_ACCEPTED,
  XF_JOBM_EV_REFUSED,
  XF_JOBM_EV_ANNOUNCED,
  XF_JOBM_EV_REPORTED,
  XF_JOBM_EV_DROPPED,
  XF_JOBM_EV_LINK,
  XF_JOBM_EV_SA_ADVERT,
  XF_JOBM_EV_SA_SHARES,
  XF_JOBM_EV_SA_CHECK_SIG,
  XF_JOBM_EV_SA_REFUSED,
  XF_JOBM_EV_SA_MASKED,
  XF_JOBM_EV_SA_REVEAL,
  XF_JOBM_EV_TICK,
  XF_JOBM_EV_COMMITTED,
  XF_JOBM_EV_COMMIT_FAILED,
  XF_JOBM_EV_EVALUATED,
  XF_JOBM_EV_GO,
  XF_JOBM_EV_UPSTREAM_LOST,
  XF_JOBM_EV_REOFFERED,
  XF_JOBM_EV_CANCEL,
  /* the machine's own steps (XF_JOBM_EV_FIRST_STEP on) */
  XF_JOBM_EV_RESUME,      /* the plan allows the paused job again */
  XF_JOBM_EV_PAUSE,       /* the plan does not allow the job now */
  XF_JOBM_EV_OPEN,        /* the plan runs: an attempt opens, its tasks offered held */
  XF_JOBM_EV_ANSWER_UP,   /* relay: its sites answered; upstream is told, its go awaited */
  XF_JOBM_EV_TRAIN,       /* enough accepted (and, relay, upstream said go): GO */
  XF_JOBM_EV_UNMASK,      /* the round closed over masked inputs: the reveals come in */
  XF_JOBM_EV_COMMIT,      /* the round closed (and its secure sum is unmasked): COMMIT */
  XF_JOBM_EV_NEXT_ROUND,  /* global: the round is committed; the next one waits for a plan */
  XF_JOBM_EV_RETRY,       /* global: the attempt closed without a result; another follows */
  XF_JOBM_EV_EVALUATE,    /* the last round is committed, or the privacy target is reached */
  XF_JOBM_EV_PRIVACY_END, /* a site's budget or target ends the job: fails or evaluates */
  XF_JOBM_EV_FAIL,        /* the job (relay: the task) cannot go on */
  XF_JOBM_EV_RELEASE,     /* relay: the aggregate is made, and released or held back */
  XF_JOBM_EV_FINISH,      /* every carrier's evaluation is in, or its time is up */
  XF_JOBM_EV_COUNT,
  XF_JOBM_EV_FIRST_STEP = XF_JOBM_EV_RESUME
} xf_jobm_event;

/* "plan", "accepted", ..., "cancel", "resume", ..., "finish": the
 * functions' names without xf_jobm_, and the steps' as the enum reads,
 * lowercase. */
const char *xf_jobm_event_name(xf_jobm_event ev);

struct xf__jm_args;
/* A row's handler: takes the event in the row's phase. Where the row
 * lists next phases it says in *next which of them the job lands in;
 * errors are for the caller (jobmachine.h's XF_EINVAL, XF_ENOMEM). */
typedef xf_err (*xf__jm_run)(xf_jobm *m, const struct xf__jm_args *a, xf_jobm_phase *next,
                             xf_errctx *err);

#define XF_JOBM_PHASE_BIT(p) (1u << (p))

/* One row: `event` in any phase of `phases` runs `run` (NULL: nothing but
 * the move) and lands in one of `next` — the driver refuses any other.
 * next 0: the phase stays, but for the steps the handler takes (each its
 * own row). An event in a phase with no row gets the event's answer for
 * phases that do not take it (a CANCEL or DISCARD to the carrier, XF_EINVAL,
 * or nothing, as jobmachine.h says); a step with no row is refused. */
typedef struct xf_jobm_transition {
  unsigned phases; /* XF_JOBM_PHASE_BIT of each phase the row is for */
  xf_jobm_event event;
  xf__jm_run run;
  unsigned next;   /* XF_JOBM_PHASE_BIT of each phase it may land in */
} xf_jobm_transition;

/* The table, in its order; no two rows share a (phase, event). Static
 * storage, never NULL. */
const xf_jobm_transition *xf_jobm_transitions(size_t *n);

#endif
