/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine: one job's life at an aggregator, with no sockets, no
 * timers and no clock of its own (docs/job-machine.md). The global
 * coordinator runs one per job; a regional aggregator runs one per task
 * it relays, the same machine in its relay role. Events in — a plan from
 * admission, sites (or aggregators) answering, reporting, leaving, the
 * secure-aggregation messages, the clock, the commit done — and actions
 * out — offer, go, cancel, the secure-aggregation messages, commit, retry,
 * pause, resume, stop on the privacy target, evaluate, finish, and in the
 * relay role what to tell upstream.
 *
 * Counting is in sites: a regional aggregator is a carrier whose answers
 * and reports name the sites behind it, so min_sites, the cohort, every
 * refusal and every figure shown to users are sites, whatever aggregators
 * stand between. The round itself (cohort draw, confirmation, close rules,
 * attempts) is coordinator/round.h's machine over sites; secure
 * aggregation among the sites that report straight to this aggregator is
 * coordinator/saphase.h's. */
#ifndef XF_COORDINATOR_JOBMACHINE_H
#define XF_COORDINATOR_JOBMACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "coordinator/round.h"
#include "coordinator/saphase.h"
#include "job/admission.h"
#include "job/jobspec.h"
#include "policy/release.h"
#include "update/update.h"

/* How long a carrier that lost its link in an attempt may take to come
 * back before the attempt stops waiting for it. */
#define XF_JOBM_RECONNECT_GRACE_S 10.0
/* The longest a confirmation may take (a quarter of the round's deadline
 * when that is shorter). */
#define XF_JOBM_CONFIRM_MAX_S 60.0
/* Room for a message of the machine, terminator included. */
#define XF_JOBM_MSG_MAX 1024

typedef enum xf_jobm_role {
  XF_JOBM_GLOBAL = 0, /* the global coordinator: every round of a job */
  XF_JOBM_RELAY       /* a regional aggregator: one round (or the evaluation) of an
                         upstream task, among its sites */
} xf_jobm_role;

typedef enum xf_jobm_phase {
  XF_JOBM_WAITING = 0, /* no attempt open: waiting for a plan that lets one open */
  XF_JOBM_PAUSED,      /* the residency policy does not allow the job now */
  XF_JOBM_CONFIRMING,  /* tasks offered and held: waiting for the answers */
  XF_JOBM_AWAIT_GO,    /* relay: answered upstream, waiting for its go */
  XF_JOBM_TRAINING,    /* go given: updates coming in */
  XF_JOBM_UNMASKING,   /* the round closed: secure aggregation reveals coming in */
  XF_JOBM_COMMITTING,  /* the caller forms the result (COMMIT) */
  XF_JOBM_EVALUATING,  /* the final model is being evaluated */
  XF_JOBM_DONE,        /* finished (relay: the aggregate is made — it goes up while upstream
                          holds the task — or the evaluation ended) */
  XF_JOBM_FAILED,      /* xf_jobm_message says why (relay: refused or held back) */
  XF_JOBM_CANCELLED
} xf_jobm_phase;

/* "waiting", "paused", "confirming", "await-go", "training", "unmasking",
 * "committing", "evaluating", "done", "failed", "cancelled". */
const char *xf_jobm_phase_name(xf_jobm_phase p);

/* Why a site refused, as far as the machine cares. */
typedef enum xf_jobm_refusal {
  XF_JOBM_REFUSED_OTHER = 0,
  XF_JOBM_REFUSED_POLICY,   /* its local rules, or a release condition */
  XF_JOBM_REFUSED_BUDGET,   /* its dataset's privacy budget is spent: the job cannot go on */
  XF_JOBM_REFUSED_TARGET,   /* the job's own target epsilon would be passed: the job stops */
  XF_JOBM_REFUSED_BUSY
} xf_jobm_refusal;

typedef struct xf_jobm_config {
  xf_jobm_role role;
  const xf_jobspec *spec;    /* copied; it passed xf_jobspec_validate (a relay's names the
                                upstream job) */
  uint32_t round, attempt;   /* where to start: 1, 1 for a new job; the journal's after a
                                restart; a relay's upstream task */
  uint32_t rounds_committed; /* global: rounds with a committed model */
  size_t n_params;           /* the model's parameters (secure aggregation's length) */
  uint32_t max_attempts;     /* 0: XF_ROUND_DEFAULT_ATTEMPTS (a relay makes one) */
  bool paused;               /* global: the journal has the job paused (by policy) */
  double resume_until;       /* global after a restart: until then, wait for */
  uint32_t resume_wait_for;  /* ... this many eligible sites (the interrupted cohort) */
  double eval_timeout_s;     /* the final evaluation's deadline after it starts */
  /* Relay. */
  bool evaluate_only;        /* the upstream task evaluates the model */
  double deadline;           /* the upstream deadline (absolute, the caller's clock) */
  double answer_by;          /* answer upstream by then (0: a quarter of the way) */
  const xf_release_rule *release; /* what the region's aggregate must meet; NULL: nothing.
                                     Copied, strings included. */
  const uint64_t *cohort;    /* the sites upstream drew (ids); NULL: every eligible one */
  size_t n_cohort;
} xf_jobm_config;

typedef enum xf_jobm_action_kind {
  XF_JOBM_OPENED = 0,   /* an attempt opened over sites[] (the cohort): journal it */
  XF_JOBM_OFFER,        /* offer the attempt's task (held for go) to `carrier`; behind a
                           regional the drawn sites[]; deadline, answer_by; `resend` when
                           it is the same task again after the carrier came back */
  XF_JOBM_GO,           /* `carrier` may train; has_secagg: its secure-aggregation setup,
                           and sites[] the cohort's sites in index order (their names go
                           into the setup) */
  XF_JOBM_CANCEL,       /* withdraw `carrier`'s task of (round, attempt); note */
  XF_JOBM_DISCARD,      /* `carrier`'s update is not taken (late, or not releasable:
                           refusal POLICY, to be audited): abort its stream, tell it why
                           (note) */
  XF_JOBM_SA_KEYS,      /* secure aggregation: send `carrier` the adverts (blob), their
                           signatures (sigs) and certificates (certs, cert_lens) */
  XF_JOBM_SA_ROUTED,    /* ... U2 (u) and its shares: n_from of them, share k from
                           from[k], XF_SECAGG_SHARE_BYTES each, back to back in blob,
                           signature k in sigs */
  XF_JOBM_SA_UNMASK,    /* ... ask it to reveal for survivors U3 (u), with the n_from
                           signatures of U3 (from[k] made signature k in sigs) */
  XF_JOBM_PARTICIPANT,  /* journal `site`'s state in the open attempt (state, samples) */
  XF_JOBM_COMMIT,       /* form the attempt's result from the updates taken (and the
                           secure sum: xf_jobm_take_secure_mean), then xf_jobm_committed
                           or xf_jobm_commit_failed; sites: reporting sites (central noise
                           divides by their count) */
  XF_JOBM_RETRY,        /* journal the attempt closed as retried (note) */
  XF_JOBM_PAUSE,        /* journal the job paused (note says why) */
  XF_JOBM_RESUME,       /* journal it running again */
  XF_JOBM_STOP,         /* the privacy target (or a site's) stops the job before `round`:
                           journal it done with note; the evaluation follows */
  XF_JOBM_FAIL,         /* journal the job failed (note) */
  XF_JOBM_EVALUATE,     /* offer `carrier` the final evaluation (behind a regional:
                           sites[]); deadline */
  XF_JOBM_FINISH,       /* the job (relay: the task) is over */
  XF_JOBM_ACCEPT_UP,    /* relay: tell upstream sites[] accepted */
  XF_JOBM_REFUSE_UP,    /* relay: tell upstream `site` refused (0: the whole task, or the
                           aggregate is held back): refusal, note */
  XF_JOBM_FORWARD,      /* relay: the region's aggregate may leave: send it up, summing
                           sites[] with `weight`; `resend` when it is the one sent before,
                           again (upstream offered the task again and holds it) */
  XF_JOBM_SA_CHECK      /* secure aggregation: ask `carrier` to sign survivors U3 (u) */
} xf_jobm_action_kind;

/* "opened", "offer", ... as the enum reads, lowercase. */
const char *xf_jobm_action_name(xf_jobm_action_kind k);

/* Pointers in an action point into the machine and stay valid until the
 * next call on it: carry out the whole list before the next event (a send
 * that fails becomes an event after the list is done). */
typedef struct xf_jobm_action {
  xf_jobm_action_kind kind;
  uint64_t carrier;
  uint64_t site;
  uint32_t round, attempt;
  double deadline, answer_by;
  const uint64_t *sites;
  size_t n_sites;
  bool resend;
  bool has_secagg;
  xf_update_secagg secagg;
  const uint8_t *blob;
  size_t blob_len;
  const uint32_t *u, *from;
  size_t n_u, n_from;
  /* SA_KEYS: n_sigs signatures, one per cohort index; SA_ROUTED: one per
   * share; SA_UNMASK: one per signer. XF_SECAGG_SIG_BYTES each. */
  const uint8_t *sigs;
  size_t n_sigs;
  /* SA_KEYS: the cohort's certificates (DER) back to back, cert_lens[i]
   * bytes for index i + 1 (0: it sent no keys); n_sigs of them. */
  const uint8_t *certs;
  size_t certs_len;
  const uint32_t *cert_lens;
  xf_participant_state state;
  uint64_t samples;
  xf_jobm_refusal refusal;
  uint64_t weight;
  char note[XF_JOBM_MSG_MAX];
} xf_jobm_action;

typedef struct xf_jobm xf_jobm;

/* Creates the machine (phase WAITING, or EVALUATING-to-be for a relay's
 * evaluation once it has a plan). XF_EINVAL for numbers out of range;
 * XF_ENOMEM. The caller owns *out (xf_jobm_free). */
xf_err xf_jobm_create(const xf_jobm_config *cfg, xf_jobm **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_jobm_free(xf_jobm *m);

/* ---- events ------------------------------------------------------------------------------------
 * Each call starts a new action list (xf_jobm_actions). Events that do not
 * fit the job's state (a carrier outside the attempt, an answer after it
 * closed) are not errors: they queue what the carrier must be told
 * (CANCEL, DISCARD) or nothing. XF_EINVAL is for a call the caller should
 * not have made (a commit when none was asked). */

/* The plan admission gives now (job/admission.h). The machine keeps it for
 * the next attempt: while WAITING it opens one when the plan runs (or
 * waits, saying why); a plan the policy does not allow pauses the job (or
 * keeps it paused) and one that allows it again resumes it. Give a fresh
 * plan whenever the federation or the policy changed and on the clock while
 * xf_jobm_wants_plan. The plan is copied. */
xf_err xf_jobm_plan(xf_jobm *m, const xf_admission *plan, double now,
                    xf_errctx *err) XF_WARN_UNUSED;

/* A carrier answered its offer: sites[] (behind a regional; NULL for a
 * direct site) accepted. Sites of its offer it neither names here nor
 * refused are out of the attempt. */
xf_err xf_jobm_accepted(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                        double now, xf_errctx *err) XF_WARN_UNUSED;
/* A carrier refused for `site` behind it (0: for every site it carries);
 * details are the site's own words. */
xf_err xf_jobm_refused(xf_jobm *m, uint64_t carrier, uint64_t site, xf_jobm_refusal why,
                       const char *details, double now, xf_errctx *err) XF_WARN_UNUSED;
/* A carrier announced its update (before its bytes): the sites it sums
 * (NULL: the carrier itself). The machine takes it (no action) or refuses
 * it (DISCARD with why: not in the attempt, an aggregate that misses its
 * release conditions). */
xf_err xf_jobm_announced(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                         double now, xf_errctx *err) XF_WARN_UNUSED;
/* The carrier's whole update arrived and was taken (weight: what it was
 * folded with, xf_jobm_fold_weight); sites as announced. */
xf_err xf_jobm_reported(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                        uint64_t weight, double now, xf_errctx *err) XF_WARN_UNUSED;
/* The carrier is out of the attempt (an error, a broken stream): its
 * pending sites no longer count. */
xf_err xf_jobm_dropped(xf_jobm *m, uint64_t carrier, const char *why, double now,
                       xf_errctx *err) XF_WARN_UNUSED;
/* The carrier's link went down or came back (any job's carrier may be
 * told; the machine ignores the ones it does not know). One away past
 * XF_JOBM_RECONNECT_GRACE_S is dropped; one back while its task is open is
 * offered the same task again (OFFER with resend). */
xf_err xf_jobm_link(xf_jobm *m, uint64_t carrier, bool up, double now,
                    xf_errctx *err) XF_WARN_UNUSED;

/* Secure aggregation messages of a direct site (coordinator/saphase.h). */
xf_err xf_jobm_sa_advert(xf_jobm *m, uint64_t site, const xf_saphase_keys *keys, double now,
                         xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_jobm_sa_shares(xf_jobm *m, uint64_t site, const xf_saphase_shares_msg *msg,
                         double now, xf_errctx *err) XF_WARN_UNUSED;
/* Its signature of the survivor set (the consistency round). */
xf_err xf_jobm_sa_check_sig(xf_jobm *m, uint64_t site, const uint8_t *sig, size_t len,
                            double now, xf_errctx *err) XF_WARN_UNUSED;
/* The site refused to go on with secure aggregation: one of its checks
 * failed (why: its words, naming the member at fault). It leaves the round
 * like a dropped site (once unmasking began, the unmasking goes on without
 * it) and its words join the attempt's refusals. */
xf_err xf_jobm_sa_refused(xf_jobm *m, uint64_t site, const char *why, double now,
                          xf_errctx *err) XF_WARN_UNUSED;
/* A direct site's whole masked input (*words taken over on success) —
 * its report under secure aggregation. */
xf_err xf_jobm_sa_masked(xf_jobm *m, uint64_t site, uint32_t **words, size_t n_words,
                         uint64_t weight, double now, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_jobm_sa_reveal(xf_jobm *m, uint64_t site, const uint8_t *msg, size_t len, double now,
                         xf_errctx *err) XF_WARN_UNUSED;

/* The clock. */
xf_err xf_jobm_tick(xf_jobm *m, double now, xf_errctx *err) XF_WARN_UNUSED;

/* The caller formed and journaled the result COMMIT asked for (a relay:
 * formed its region's aggregate; the machine then checks the release
 * conditions and FORWARDs or holds it back). */
xf_err xf_jobm_committed(xf_jobm *m, double now, xf_errctx *err) XF_WARN_UNUSED;
/* ... or could not: another attempt, or the job fails after the last. */
xf_err xf_jobm_commit_failed(xf_jobm *m, const char *why, double now,
                             xf_errctx *err) XF_WARN_UNUSED;

/* A carrier's part of the final evaluation is in (a site's test metrics of
 * the final model; a regional's word that its sites are done). */
xf_err xf_jobm_evaluated(xf_jobm *m, uint64_t carrier, double now, xf_errctx *err) XF_WARN_UNUSED;

/* Relay: upstream confirmed the task (its TaskGo). Upstream holds the task
 * from then on: an aggregate made (or made before, and due again) goes up
 * (FORWARD). */
xf_err xf_jobm_go(xf_jobm *m, double now, xf_errctx *err) XF_WARN_UNUSED;
/* Relay: upstream may no longer hold the task — the link to it dropped (it
 * may have restarted and lost the round), or it refused the aggregate as a
 * task this relay does not hold there. Nothing goes up for the task until
 * upstream offers it again (xf_jobm_reoffered) and, when that offer holds
 * it, says go: an aggregate made in between is kept for then (no FORWARD),
 * and one already sent is due again. A go that has not reached the sites
 * yet was the old link's: the next one decides. */
xf_err xf_jobm_upstream_lost(xf_jobm *m, double now, xf_errctx *err) XF_WARN_UNUSED;
/* Relay: upstream offered the same task again (the link came back, or it
 * restarted). The machine says again what it said (ACCEPT_UP with its sites:
 * the aggregate's once it is made); `held`: the aggregate waits for the new
 * go, else it goes at once (FORWARD with resend once it went before). */
xf_err xf_jobm_reoffered(xf_jobm *m, bool held, double now, xf_errctx *err) XF_WARN_UNUSED;

/* The job is cancelled (a researcher, or upstream): every carrier with a
 * task is told (CANCEL); phase CANCELLED. */
xf_err xf_jobm_cancel(xf_jobm *m, const char *why, double now, xf_errctx *err) XF_WARN_UNUSED;

const xf_jobm_action *xf_jobm_actions(const xf_jobm *m, size_t *n);

/* ---- what the caller asks ------------------------------------------------------------------------ */

/* The weight to fold a carrier's update with: one per site it sums under
 * robust strategies (votes) and under noise in the sum (each site moves the
 * mean by at most clip / n); else the records it announced. */
uint64_t xf_jobm_fold_weight(const xf_jobm *m, uint64_t announced, size_t n_sites);

/* What a carrier's update must be in the open attempt: masked (a direct
 * site under secure aggregation), sealed or not is the caller's. False when
 * the carrier has no update to send now. */
bool xf_jobm_expects_update(const xf_jobm *m, uint64_t carrier, bool *masked,
                            uint64_t *sa_length, uint32_t *sa_bits);

/* COMMIT under secure aggregation: the unmasked mean of the direct sites
 * (n_params values, handed over: xf_free), its weight and the sites in it;
 * false when there is none (no direct site reported, or secure aggregation
 * is off). */
bool xf_jobm_take_secure_mean(xf_jobm *m, float **mean, uint64_t *weight, uint32_t *sites);

/* Whether the machine needs a fresh plan now (WAITING or PAUSED, or before
 * its evaluation). */
bool xf_jobm_wants_plan(const xf_jobm *m);

xf_jobm_phase xf_jobm_get_phase(const xf_jobm *m);
uint32_t xf_jobm_round(const xf_jobm *m);   /* the round in progress (rounds + 1 when over) */
uint32_t xf_jobm_attempt(const xf_jobm *m);
uint32_t xf_jobm_rounds_committed(const xf_jobm *m);
/* The open attempt in sites: invited, accepted, reported, and the reports
 * that close it early. */
void xf_jobm_counts(const xf_jobm *m, uint32_t *invited, uint32_t *accepted, uint32_t *reported,
                    uint32_t *target);
double xf_jobm_deadline(const xf_jobm *m);
/* Why the job waits, is paused, stopped or failed, with the sites' words
 * ("" when there is nothing to say). */
const char *xf_jobm_message(const xf_jobm *m);
/* Whether `carrier` has a task in the open attempt (or the evaluation),
 * and the sites it carries there. */
bool xf_jobm_carrier_sites(const xf_jobm *m, uint64_t carrier, const uint64_t **sites, size_t *n);

#endif
