/* SPDX-License-Identifier: Apache-2.0 */
/* The round state machine of one job: picks each round's cohort, follows the
 * sites' answers and reports, and tells the caller what to do next; it owns
 * no sockets, timers or threads (docs/rounds.md). */
#ifndef XF_COORDINATOR_ROUND_H
#define XF_COORDINATOR_ROUND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"

/* Attempts a round gets when the caller passes 0 for max_attempts: a round
 * that closes below min_sites is tried again with a fresh cohort, and after
 * this many attempts the job fails. */
#define XF_ROUND_DEFAULT_ATTEMPTS 3u
/* Upper bound on max_attempts, which keeps the cohort's RNG stream (round,
 * attempt) unique. */
#define XF_ROUND_MAX_ATTEMPTS 255u

/* Room for a message of the machine (a failure, a note on an action),
 * terminator included. */
#define XF_ROUND_MSG_MAX 192

/* Times are seconds on the caller's clock (a double, e.g. CLOCK_MONOTONIC or
 * Unix time); the machine only compares and adds them. */

typedef enum xf_round_state {
  XF_ROUND_READY = 0,  /* no round open: call xf_round_open */
  XF_ROUND_OPEN,       /* collecting answers and reports */
  XF_ROUND_COMMITTING, /* closed with quorum: the caller aggregates, journals
                          the result, then calls xf_round_committed */
  XF_ROUND_DONE,       /* every round of the job committed */
  XF_ROUND_FAILED      /* the job failed: xf_round_failure says why */
} xf_round_state;

/* A site's part in the current attempt; the journal stores the same states
 * (participants.state). */
typedef enum xf_participant_state {
  XF_PARTICIPANT_INVITED = 0, /* task sent, no answer yet */
  XF_PARTICIPANT_REFUSED,     /* said no (policy, budget, busy) */
  XF_PARTICIPANT_REPORTING,   /* accepted, training */
  XF_PARTICIPANT_REPORTED,    /* its update counts in this round */
  XF_PARTICIPANT_DROPPED,     /* went away, or was still pending at closure */
  XF_PARTICIPANT_ACCEPTED     /* with a confirmation: accepted, waiting for GO */
} xf_participant_state;

/* Spellings: "invited", "refused", "reporting", "reported", "dropped",
 * "accepted"; "unknown" outside the enum; never NULL. The journal stores
 * an accepted site as "reporting" (it has taken the task). */
const char *xf_participant_state_name(xf_participant_state s);
/* "ready", "open", "committing", "done", "failed"; never NULL. */
const char *xf_round_state_name(xf_round_state s);

/* What the caller must do, in the order given. */
typedef enum xf_round_action_kind {
  XF_ROUND_ACT_SEND_TASK = 0, /* send this round's task to `site`, due by
                                 `deadline` */
  XF_ROUND_ACT_CANCEL,        /* tell `site` the round closed without it */
  XF_ROUND_ACT_DISCARD,       /* drop `site`'s update (and abort its stream in
                                 the aggregator): it came after the round had
                                 closed; `note` says so */
  XF_ROUND_ACT_COMMIT,        /* finish the aggregate of the `reported` sites,
                                 journal the new model with the round's closure
                                 (one transaction), then xf_round_committed */
  XF_ROUND_ACT_RETRY,         /* journal the round's closure as retried, then
                                 xf_round_open again (the attempt is already
                                 counted up) */
  XF_ROUND_ACT_FAIL_JOB,      /* journal the job as failed with `note` */
  XF_ROUND_ACT_FINISH_JOB,    /* every round committed: the job is done */
  XF_ROUND_ACT_GO             /* with a confirmation: every invited site has
                                 answered and enough accepted; tell `site` to
                                 train now */
} xf_round_action_kind;

typedef struct xf_round_action {
  xf_round_action_kind kind;
  uint64_t site;                /* SEND_TASK, CANCEL, DISCARD; else 0 */
  uint32_t attempt;             /* the attempt the action belongs to (a CANCEL queued
                                   by a close names the attempt that closed, not the
                                   one a RETRY moves on to) */
  double deadline;              /* SEND_TASK: when the round closes */
  uint32_t reported;            /* COMMIT, RETRY, FAIL_JOB: reports counted */
  char note[XF_ROUND_MSG_MAX];  /* DISCARD, RETRY, FAIL_JOB: for the log and
                                   the user; else "" */
} xf_round_action;

typedef struct xf_round xf_round;

/* Creates the machine for one job at `round` (1-based, 1..spec->rounds) and
 * `attempt` (1-based, 1..max_attempts): 1 and 1 for a new job, or what
 * xf_journal_job_load says for a resumed one. max_attempts 0 means
 * XF_ROUND_DEFAULT_ATTEMPTS. spec is copied; it should have passed
 * xf_jobspec_validate. Returns XF_EINVAL for numbers out of range, XF_ENOMEM.
 * The caller owns *out and frees it with xf_round_free; NULL on failure. */
xf_err xf_round_create(const xf_jobspec *spec, uint32_t round, uint32_t attempt,
                       uint32_t max_attempts, xf_round **out, xf_errctx *err) XF_WARN_UNUSED;

/* Frees r; NULL is allowed. */
void xf_round_free(xf_round *r);

/* Makes every attempt opened from now on confirm its cohort before anyone
 * trains: sites answer (accept or refuse) and wait; once no invited site is
 * left unanswered — or `window_s` after the attempt opened, when the ones
 * still silent are dropped — the attempt goes on (a GO per accepted site)
 * if at least min_sites accepted, and otherwise closes at once, without a
 * site having trained, as a close below quorum does (RETRY or FAIL_JOB).
 * window_s 0 turns the confirmation off (the default: sites train as soon
 * as they accept). XF_EINVAL for a negative or non-finite window. */
xf_err xf_round_set_confirm(xf_round *r, double window_s, xf_errctx *err) XF_WARN_UNUSED;

/* Opens the current attempt of the current round (state READY) over the
 * sites eligible now (`eligible`, n ids, borrowed; no repeats). The cohort
 * (xf_jobspec_cohort's `invite` sites) is drawn from the job seed on an RNG
 * stream of its own for (round, attempt), after sorting the ids, so the same
 * seed, round, attempt and set of eligible sites give the same cohort
 * whatever order the set came in. The deadline is now + round_deadline_s.
 * Actions: one SEND_TASK per invited site. With no eligible site, or fewer
 * than min_sites, the round cannot reach quorum and closes at once (RETRY or
 * FAIL_JOB follow the SEND_TASKs). XF_EINVAL when not READY or for a repeated
 * id; XF_ENOMEM. On failure r is unchanged. */
xf_err xf_round_open(xf_round *r, const uint64_t *eligible, size_t n, double now,
                     xf_errctx *err) XF_WARN_UNUSED;

/* Events, each for a site of the current cohort. Deliver xf_round_tick
 * first whenever the clock moved, so that a report past the deadline finds
 * the round closed. Returns XF_ENOENT for a site that was not invited to
 * the current attempt, XF_EINVAL for a transition that cannot happen (a site
 * reporting twice, accepting after it refused); r is then unchanged and no
 * action is queued. Events for a cohort whose round has closed are not
 * errors: a report is answered with DISCARD and an acceptance with CANCEL;
 * a refusal or drop needs nothing. */

/* The site accepted the task. With a confirmation it waits (ACCEPTED) for
 * the GO that the last answer of the cohort brings. */
xf_err xf_round_site_accepted(xf_round *r, uint64_t site, xf_errctx *err) XF_WARN_UNUSED;
/* The site refused; `reason` (may be NULL) is kept for xf_round_site_reason.
 * The round no longer waits for it. */
xf_err xf_round_site_refused(xf_round *r, uint64_t site, const char *reason,
                             xf_errctx *err) XF_WARN_UNUSED;
/* The site's whole update arrived (weight `samples`). Without a
 * confirmation an invited site that reports without an acceptance counts
 * as having accepted; with one, only a site told GO may report (XF_EINVAL
 * otherwise). */
xf_err xf_round_update_reported(xf_round *r, uint64_t site, uint64_t samples,
                                xf_errctx *err) XF_WARN_UNUSED;
/* The site went away (connection lost, error); the round no longer waits. */
xf_err xf_round_site_dropped(xf_round *r, uint64_t site, xf_errctx *err) XF_WARN_UNUSED;
/* The clock reads `now`: closes an open round whose deadline has come, and
 * ends a confirmation whose window has passed. */
xf_err xf_round_tick(xf_round *r, double now, xf_errctx *err) XF_WARN_UNUSED;

/* The caller journaled the result of a COMMITTING round: moves on to the next
 * round (READY), or to DONE with a FINISH_JOB action after the last one.
 * XF_EINVAL when not COMMITTING. */
xf_err xf_round_committed(xf_round *r, xf_errctx *err) XF_WARN_UNUSED;

/* The COMMITTING round's result could not be formed (secure aggregation
 * could not unmask it): like a close below quorum, another attempt (RETRY,
 * READY) or, after the last one, FAIL_JOB; `why` goes into the note.
 * XF_EINVAL when not COMMITTING. */
xf_err xf_round_commit_failed(xf_round *r, const char *why, xf_errctx *err) XF_WARN_UNUSED;

/* The actions queued by the last call on r (open, an event, tick,
 * committed); each call starts a new list. Owned by r, valid until the next
 * call on r. *n gets the count. */
const xf_round_action *xf_round_actions(const xf_round *r, size_t *n);

/* ---- inspection ------------------------------------------------------------ */

xf_round_state xf_round_get_state(const xf_round *r);
uint32_t xf_round_number(const xf_round *r);   /* 1-based */
uint32_t xf_round_attempt(const xf_round *r);  /* 1-based */
double xf_round_deadline(const xf_round *r);   /* of the last opened attempt */
/* Whether the open attempt is still confirming its cohort (no GO yet), and
 * when that ends at the latest. */
bool xf_round_confirming(const xf_round *r);
double xf_round_confirm_deadline(const xf_round *r);
/* Sites that accepted the last opened attempt (waiting, training or
 * reported). */
uint32_t xf_round_accepted(const xf_round *r);
/* Of the last opened attempt: reports that close it early (the larger of
 * xf_jobspec_cohort's target and min_sites, at most the cohort), sites
 * invited, and reports counted so far. */
uint32_t xf_round_target(const xf_round *r);
uint32_t xf_round_invited(const xf_round *r);
uint32_t xf_round_reported(const xf_round *r);
/* The cohort of the last opened attempt in draw order (owned by r, valid
 * until the next xf_round_open); *n gets its size. */
const uint64_t *xf_round_cohort(const xf_round *r, size_t *n);
/* A cohort site's state, samples and refusal reason ("" unless refused with
 * one). XF_ENOENT for a site outside the cohort. */
xf_err xf_round_site(const xf_round *r, uint64_t site, xf_participant_state *state,
                     uint64_t *samples, const char **reason) XF_WARN_UNUSED;
/* Why the job failed (FAILED), else "". Owned by r. */
const char *xf_round_failure(const xf_round *r);

#endif
