/* SPDX-License-Identifier: Apache-2.0 */
/* The round state machine: cohort draw, event handling and the close rules of
 * docs/rounds.md, reporting its decisions as an action list. */
#include "coordinator/round.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"

/* The cohort's RNG stream: a tag apart from the init (1) and shuffle (2)
 * streams of kernels/, with the round and the attempt below it. Rounds are
 * at most 10^6 < 2^20 and attempts at most 255, so (round, attempt) pairs
 * never share a stream. */
#define XF__RNG_STREAM_COHORT (3ull << 48)

#define XF__REASON_MAX 128

typedef struct xf__member {
  uint64_t site;
  xf_participant_state state;
  uint64_t samples;
  char reason[XF__REASON_MAX];
} xf__member;

struct xf_round {
  xf_jobspec spec;
  uint32_t max_attempts;
  uint32_t round;
  uint32_t attempt;
  xf_round_state state;

  /* The last opened attempt. `closed` tells events that arrive for it after
   * its closure (the state has then moved on). */
  uint32_t open_round;
  uint32_t open_attempt;
  bool closed;
  xf__member *cohort;   /* sorted by site, for lookups */
  uint64_t *cohort_ids; /* draw order */
  uint32_t invited;
  uint32_t target;
  uint32_t reported;
  uint32_t pending; /* cohort sites invited, accepted or reporting */
  uint32_t accepted; /* cohort sites that accepted (any state since) */
  double deadline;
  double confirm_s;        /* 0: no confirmation */
  bool confirming;         /* the open attempt waits for its answers */
  double confirm_deadline;

  xf_round_action *actions;
  size_t n_actions;
  size_t cap_actions;
  char failure[XF_ROUND_MSG_MAX];
};

/* ---- names ----------------------------------------------------------------- */

const char *xf_participant_state_name(xf_participant_state s) {
  switch (s) {
  case XF_PARTICIPANT_INVITED: return "invited";
  case XF_PARTICIPANT_REFUSED: return "refused";
  case XF_PARTICIPANT_REPORTING: return "reporting";
  case XF_PARTICIPANT_REPORTED: return "reported";
  case XF_PARTICIPANT_DROPPED: return "dropped";
  case XF_PARTICIPANT_ACCEPTED: return "accepted";
  }
  return "unknown";
}

const char *xf_round_state_name(xf_round_state s) {
  switch (s) {
  case XF_ROUND_READY: return "ready";
  case XF_ROUND_OPEN: return "open";
  case XF_ROUND_COMMITTING: return "committing";
  case XF_ROUND_DONE: return "done";
  case XF_ROUND_FAILED: return "failed";
  }
  return "unknown";
}

/* ---- actions ----------------------------------------------------------------- */

/* The action list never grows during an event: open reserves room for the
 * worst case (one action per cohort site plus the closing one). */
static xf_err xf__reserve(xf_round *r, size_t need) {
  if (need <= r->cap_actions) return XF_OK;
  xf_round_action *a = xf_mallocarray(need, sizeof(*a));
  if (!a) return XF_ENOMEM;
  xf_free(r->actions);
  r->actions = a;
  r->cap_actions = need;
  return XF_OK;
}

static xf_round_action *xf__push(xf_round *r, xf_round_action_kind kind, uint64_t site) {
  /* Room was reserved for every action an event can queue (see xf__reserve);
   * running out would be a bug in the counting, so it aborts rather than
   * silently losing an instruction to the caller. */
  if (r->n_actions >= r->cap_actions) abort();
  xf_round_action *a = &r->actions[r->n_actions++];
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  a->site = site;
  a->attempt = r->attempt;
  return a;
}

static void xf__note(xf_round_action *a, const char *fmt, ...) XF_PRINTF(2, 3);
static void xf__note(xf_round_action *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->note, sizeof(a->note), fmt, ap);
  va_end(ap);
}

/* ---- life cycle ---------------------------------------------------------------- */

xf_err xf_round_create(const xf_jobspec *spec, uint32_t round, uint32_t attempt,
                       uint32_t max_attempts, xf_round **out, xf_errctx *err) {
  *out = NULL;
  if (max_attempts == 0) max_attempts = XF_ROUND_DEFAULT_ATTEMPTS;
  XF_ENSURE(max_attempts <= XF_ROUND_MAX_ATTEMPTS, err, XF_EINVAL,
            "max_attempts %u is above %u", max_attempts, XF_ROUND_MAX_ATTEMPTS);
  XF_ENSURE(spec->rounds >= 1 && spec->rounds <= XF_JOB_ROUNDS_MAX, err, XF_EINVAL,
            "the job has %u rounds; 1..%u are allowed", spec->rounds, XF_JOB_ROUNDS_MAX);
  XF_ENSURE(round >= 1 && round <= spec->rounds, err, XF_EINVAL,
            "round %u is outside the job's rounds 1..%u", round, spec->rounds);
  XF_ENSURE(attempt >= 1 && attempt <= max_attempts, err, XF_EINVAL,
            "attempt %u is outside 1..%u", attempt, max_attempts);
  xf_round *r = xf_calloc(1, sizeof(*r));
  if (!r) return xf_fail(err, XF_ENOMEM, "out of memory creating the round state");
  r->spec = *spec;
  r->max_attempts = max_attempts;
  r->round = round;
  r->attempt = attempt;
  r->state = XF_ROUND_READY;
  r->closed = true;
  if (xf__reserve(r, 2) != XF_OK) {
    xf_free(r);
    return xf_fail(err, XF_ENOMEM, "out of memory creating the round state");
  }
  *out = r;
  return XF_OK;
}

void xf_round_free(xf_round *r) {
  if (!r) return;
  xf_free(r->cohort);
  xf_free(r->cohort_ids);
  xf_free(r->actions);
  xf_free(r);
}

static int xf__cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int xf__cmp_member(const void *a, const void *b) {
  return xf__cmp_u64(&((const xf__member *)a)->site, &((const xf__member *)b)->site);
}

static xf__member *xf__find(const xf_round *r, uint64_t site) {
  if (!r->cohort) return NULL;
  xf__member key = {.site = site};
  return bsearch(&key, r->cohort, r->invited, sizeof(key), xf__cmp_member);
}

static bool xf__pending(xf_participant_state s) {
  return s == XF_PARTICIPANT_INVITED || s == XF_PARTICIPANT_REPORTING ||
         s == XF_PARTICIPANT_ACCEPTED;
}

/* Closes the open attempt: cancels the sites still pending, then decides.
 * Quorum → COMMITTING; below it → another attempt (READY) or, after the
 * last one, the job fails. */
static void xf__close(xf_round *r, const char *why) {
  r->closed = true;
  r->confirming = false;
  for (uint32_t i = 0; i < r->invited; i++) {
    const xf__member *m = xf__find(r, r->cohort_ids[i]);
    if (xf__pending(m->state)) xf__push(r, XF_ROUND_ACT_CANCEL, m->site);
  }
  uint32_t min_sites = r->spec.min_sites;
  if (r->reported >= min_sites) {
    r->state = XF_ROUND_COMMITTING;
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_COMMIT, 0);
    a->reported = r->reported;
    return;
  }
  if (r->attempt < r->max_attempts) {
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_RETRY, 0);
    a->reported = r->reported;
    xf__note(a,
             "round %u attempt %u closed (%s) with %u of %u invited sites reported, "
             "below min_sites %u; trying attempt %u of %u",
             r->round, r->attempt, why, r->reported, r->invited, min_sites, r->attempt + 1,
             r->max_attempts);
    r->attempt++;
    r->state = XF_ROUND_READY;
    return;
  }
  xf_round_action *a = xf__push(r, XF_ROUND_ACT_FAIL_JOB, 0);
  a->reported = r->reported;
  xf__note(a,
           "round %u failed: attempt %u of %u closed (%s) with %u of %u invited sites "
           "reported, below min_sites %u",
           r->round, r->attempt, r->max_attempts, why, r->reported, r->invited, min_sites);
  snprintf(r->failure, sizeof(r->failure), "%s", a->note);
  r->state = XF_ROUND_FAILED;
}

/* With a confirmation, once no site of the cohort is left unanswered: GO
 * to every accepted site when they are enough, else the attempt closes
 * with nobody having trained. */
static void xf__confirm_check(xf_round *r) {
  for (uint32_t i = 0; i < r->invited; i++)
    if (r->cohort[i].state == XF_PARTICIPANT_INVITED) return;
  r->confirming = false;
  uint32_t waiting = 0;
  for (uint32_t i = 0; i < r->invited; i++)
    waiting += r->cohort[i].state == XF_PARTICIPANT_ACCEPTED;
  if (waiting < r->spec.min_sites) {
    xf__close(r, waiting == 0 ? "no site accepted" : "too few sites accepted");
    return;
  }
  for (uint32_t i = 0; i < r->invited; i++) {
    xf__member *m = xf__find(r, r->cohort_ids[i]);
    if (m->state != XF_PARTICIPANT_ACCEPTED) continue;
    m->state = XF_PARTICIPANT_REPORTING;
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_GO, m->site);
    a->deadline = r->deadline;
  }
}

/* The close rules after any change to an open round: the early target is
 * met, no site is pending, or the pending ones can no longer bring the
 * reports up to min_sites. */
static void xf__check(xf_round *r) {
  if (r->state != XF_ROUND_OPEN) return;
  uint32_t pending = r->pending;
  if (r->invited > 0 && r->reported >= r->target)
    xf__close(r, "target reached");
  else if (pending == 0)
    xf__close(r, "no site pending");
  else if (r->reported + pending < r->spec.min_sites)
    xf__close(r, "min_sites out of reach");
  else if (r->confirming)
    xf__confirm_check(r);
}

xf_err xf_round_open(xf_round *r, const uint64_t *eligible, size_t n, double now,
                     xf_errctx *err) {
  r->n_actions = 0;
  XF_ENSURE(r->state == XF_ROUND_READY, err, XF_EINVAL,
            "round %u cannot open: it is %s", r->round, xf_round_state_name(r->state));
  /* xf_jobspec_cohort counts sites in 32 bits. */
  XF_ENSURE(n <= UINT32_MAX, err, XF_EINVAL,
            "%zu eligible sites is more than a round can draw from", n);
  uint64_t *sorted = xf_mallocarray(n ? n : 1, sizeof(*sorted));
  if (!sorted) return xf_fail(err, XF_ENOMEM, "out of memory drawing the cohort");
  if (n) memcpy(sorted, eligible, n * sizeof(*sorted));
  qsort(sorted, n, sizeof(*sorted), xf__cmp_u64);
  for (size_t i = 1; i < n; i++) {
    if (sorted[i] == sorted[i - 1]) {
      uint64_t dup = sorted[i];
      xf_free(sorted);
      return xf_fail(err, XF_EINVAL, "site %llu is listed twice among the eligible sites",
                     (unsigned long long)dup);
    }
  }

  uint32_t target = 0, invite = 0;
  xf_jobspec_cohort(&r->spec, (uint32_t)n, &target, &invite);
  xf__member *cohort = xf_calloc(invite ? invite : 1, sizeof(*cohort));
  uint64_t *ids = xf_mallocarray(invite ? invite : 1, sizeof(*ids));
  if (!cohort || !ids || xf__reserve(r, 2 * (size_t)invite + 2) != XF_OK) {
    xf_free(cohort);
    xf_free(ids);
    xf_free(sorted);
    return xf_fail(err, XF_ENOMEM, "out of memory drawing the cohort");
  }

  /* A partial Fisher-Yates over the sorted ids: the first `invite` slots are
   * the cohort, in draw order. */
  xf_rng rng;
  xf_rng_seed(&rng, r->spec.seed,
              XF__RNG_STREAM_COHORT | ((uint64_t)r->round << 8) | (uint64_t)r->attempt);
  for (uint32_t i = 0; i < invite; i++) {
    uint64_t j = i + xf_rng_below(&rng, (uint64_t)n - i);
    uint64_t t = sorted[i];
    sorted[i] = sorted[j];
    sorted[j] = t;
    cohort[i].site = sorted[i];
    cohort[i].state = XF_PARTICIPANT_INVITED;
    ids[i] = sorted[i];
  }
  xf_free(sorted);
  qsort(cohort, invite, sizeof(*cohort), xf__cmp_member);

  xf_free(r->cohort);
  xf_free(r->cohort_ids);
  r->cohort = cohort;
  r->cohort_ids = ids;
  r->invited = invite;
  r->target = target > r->spec.min_sites ? target : r->spec.min_sites;
  if (r->target > invite) r->target = invite;
  r->reported = 0;
  r->pending = invite;
  r->accepted = 0;
  r->deadline = now + r->spec.round_deadline_s;
  r->confirming = r->confirm_s > 0;
  r->confirm_deadline = now + (r->confirm_s < r->spec.round_deadline_s ? r->confirm_s
                                                                        : r->spec.round_deadline_s);
  r->open_round = r->round;
  r->open_attempt = r->attempt;
  r->closed = false;
  r->state = XF_ROUND_OPEN;

  if (invite < r->spec.min_sites) {
    /* Quorum cannot be reached: no task goes out, the attempt is spent. */
    xf__close(r, invite == 0 ? "no eligible site" : "fewer eligible sites than min_sites");
    return XF_OK;
  }
  for (uint32_t i = 0; i < invite; i++) {
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_SEND_TASK, ids[i]);
    a->deadline = r->deadline;
  }
  return XF_OK;
}

/* Looks the site up for an event; *late is set when the cohort's attempt has
 * already closed. */
static xf_err xf__event_site(xf_round *r, uint64_t site, xf__member **m, bool *late,
                             xf_errctx *err) {
  *m = xf__find(r, site);
  XF_ENSURE(*m != NULL, err, XF_ENOENT, "site %llu is not in the cohort of round %u attempt %u",
            (unsigned long long)site, r->open_round, r->open_attempt);
  *late = r->closed;
  return XF_OK;
}

static xf_err xf__bad_transition(const xf_round *r, const xf__member *m, const char *event,
                                 xf_errctx *err) {
  return xf_fail(err, XF_EINVAL, "site %llu %s in round %u attempt %u but is already %s",
                 (unsigned long long)m->site, event, r->open_round, r->open_attempt,
                 xf_participant_state_name(m->state));
}

xf_err xf_round_site_accepted(xf_round *r, uint64_t site, xf_errctx *err) {
  r->n_actions = 0;
  xf__member *m = NULL;
  bool late = false;
  XF_GUARD(xf__event_site(r, site, &m, &late, err));
  if (late) {
    xf__push(r, XF_ROUND_ACT_CANCEL, site);
    return XF_OK;
  }
  if (m->state != XF_PARTICIPANT_INVITED) return xf__bad_transition(r, m, "accepted", err);
  r->accepted++;
  if (r->confirming) {
    m->state = XF_PARTICIPANT_ACCEPTED;
    xf__confirm_check(r);
    return XF_OK;
  }
  m->state = XF_PARTICIPANT_REPORTING;
  return XF_OK;
}

xf_err xf_round_site_refused(xf_round *r, uint64_t site, const char *reason, xf_errctx *err) {
  r->n_actions = 0;
  xf__member *m = NULL;
  bool late = false;
  XF_GUARD(xf__event_site(r, site, &m, &late, err));
  if (late) return XF_OK;
  if (m->state != XF_PARTICIPANT_INVITED) return xf__bad_transition(r, m, "refused", err);
  m->state = XF_PARTICIPANT_REFUSED;
  r->pending--;
  snprintf(m->reason, sizeof(m->reason), "%s", reason ? reason : "");
  xf__check(r);
  return XF_OK;
}

xf_err xf_round_update_reported(xf_round *r, uint64_t site, uint64_t samples,
                                xf_errctx *err) {
  r->n_actions = 0;
  xf__member *m = NULL;
  bool late = false;
  XF_GUARD(xf__event_site(r, site, &m, &late, err));
  if (late) {
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_DISCARD, site);
    xf__note(a,
             "update from site %llu ignored: round %u attempt %u already closed with %u "
             "reports (target %u)",
             (unsigned long long)site, r->open_round, r->open_attempt, r->reported, r->target);
    return XF_OK;
  }
  if (!xf__pending(m->state) ||
      ((r->confirming || r->confirm_s > 0) && m->state != XF_PARTICIPANT_REPORTING))
    return xf__bad_transition(r, m, "reported", err);
  if (m->state == XF_PARTICIPANT_INVITED) r->accepted++;
  m->state = XF_PARTICIPANT_REPORTED;
  m->samples = samples;
  r->reported++;
  r->pending--;
  xf__check(r);
  return XF_OK;
}

xf_err xf_round_site_dropped(xf_round *r, uint64_t site, xf_errctx *err) {
  r->n_actions = 0;
  xf__member *m = NULL;
  bool late = false;
  XF_GUARD(xf__event_site(r, site, &m, &late, err));
  if (late) return XF_OK;
  if (!xf__pending(m->state)) return xf__bad_transition(r, m, "dropped", err);
  m->state = XF_PARTICIPANT_DROPPED;
  r->pending--;
  xf__check(r);
  return XF_OK;
}

xf_err xf_round_tick(xf_round *r, double now, xf_errctx *err) {
  (void)err;
  r->n_actions = 0;
  if (r->state == XF_ROUND_OPEN && now >= r->deadline) {
    xf__close(r, "deadline");
    return XF_OK;
  }
  if (r->state == XF_ROUND_OPEN && r->confirming && now >= r->confirm_deadline) {
    /* Whoever has not answered by now is left out of the attempt. */
    for (uint32_t i = 0; i < r->invited; i++) {
      xf__member *m = &r->cohort[i];
      if (m->state != XF_PARTICIPANT_INVITED) continue;
      m->state = XF_PARTICIPANT_DROPPED;
      r->pending--;
      xf__push(r, XF_ROUND_ACT_CANCEL, m->site);
    }
    xf__check(r);
    if (r->state == XF_ROUND_OPEN && r->confirming) xf__confirm_check(r);
  }
  return XF_OK;
}

xf_err xf_round_set_confirm(xf_round *r, double window_s, xf_errctx *err) {
  XF_ENSURE(window_s >= 0 && window_s < 1e300, err, XF_EINVAL,
            "the confirmation window %g s must be 0 or more and finite", window_s);
  r->confirm_s = window_s;
  return XF_OK;
}

bool xf_round_confirming(const xf_round *r) { return r->state == XF_ROUND_OPEN && r->confirming; }
double xf_round_confirm_deadline(const xf_round *r) { return r->confirm_deadline; }
uint32_t xf_round_accepted(const xf_round *r) { return r->accepted; }

xf_err xf_round_committed(xf_round *r, xf_errctx *err) {
  r->n_actions = 0;
  XF_ENSURE(r->state == XF_ROUND_COMMITTING, err, XF_EINVAL,
            "round %u has no result to commit: it is %s", r->round,
            xf_round_state_name(r->state));
  if (r->round >= r->spec.rounds) {
    r->state = XF_ROUND_DONE;
    xf__push(r, XF_ROUND_ACT_FINISH_JOB, 0);
    return XF_OK;
  }
  r->round++;
  r->attempt = 1;
  r->state = XF_ROUND_READY;
  return XF_OK;
}

xf_err xf_round_commit_failed(xf_round *r, const char *why, xf_errctx *err) {
  r->n_actions = 0;
  XF_ENSURE(r->state == XF_ROUND_COMMITTING, err, XF_EINVAL,
            "round %u has no result that could fail: it is %s", r->round,
            xf_round_state_name(r->state));
  if (r->attempt < r->max_attempts) {
    xf_round_action *a = xf__push(r, XF_ROUND_ACT_RETRY, 0);
    a->reported = r->reported;
    xf__note(a, "round %u attempt %u could not be aggregated (%s); trying attempt %u of %u",
             r->round, r->attempt, why ? why : "", r->attempt + 1, r->max_attempts);
    r->attempt++;
    r->state = XF_ROUND_READY;
    return XF_OK;
  }
  xf_round_action *a = xf__push(r, XF_ROUND_ACT_FAIL_JOB, 0);
  a->reported = r->reported;
  xf__note(a, "round %u failed: attempt %u of %u could not be aggregated (%s)", r->round,
           r->attempt, r->max_attempts, why ? why : "");
  snprintf(r->failure, sizeof(r->failure), "%s", a->note);
  r->state = XF_ROUND_FAILED;
  return XF_OK;
}

/* ---- inspection ---------------------------------------------------------------- */

const xf_round_action *xf_round_actions(const xf_round *r, size_t *n) {
  *n = r->n_actions;
  return r->actions;
}

xf_round_state xf_round_get_state(const xf_round *r) { return r->state; }
uint32_t xf_round_number(const xf_round *r) { return r->round; }
uint32_t xf_round_attempt(const xf_round *r) { return r->attempt; }
double xf_round_deadline(const xf_round *r) { return r->deadline; }
uint32_t xf_round_target(const xf_round *r) { return r->target; }
uint32_t xf_round_invited(const xf_round *r) { return r->invited; }
uint32_t xf_round_reported(const xf_round *r) { return r->reported; }

const uint64_t *xf_round_cohort(const xf_round *r, size_t *n) {
  *n = r->invited;
  return r->cohort_ids;
}

xf_err xf_round_site(const xf_round *r, uint64_t site, xf_participant_state *state,
                     uint64_t *samples, const char **reason) {
  const xf__member *m = xf__find(r, site);
  if (!m) return XF_ENOENT;
  if (state) *state = m->state;
  if (samples) *samples = m->samples;
  if (reason) *reason = m->reason;
  return XF_OK;
}

const char *xf_round_failure(const xf_round *r) { return r->failure; }
