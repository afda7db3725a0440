/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine (coordinator/jobmachine.h): a job's life, its plan, and
 * the handlers of the caller's events that coordinator/jobm_table.c's rows
 * name, with carriers (sites, or regional aggregators answering for the
 * sites behind them) between the sites and this aggregator. The attempt
 * itself is coordinator/jobm_attempt.c's; secure aggregation
 * coordinator/jobm_secagg.c's. */
#include "coordinator/jobmachine.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/text.h"
#include "coordinator/jobm_internal.h"
#include "job/jobprivacy.h"

/* ---- names -------------------------------------------------------------------------------------- */

const char *xf_jobm_phase_name(xf_jobm_phase p) {
  static const char *const names[] = {"waiting",  "paused",    "confirming", "await-go",
                                      "training", "unmasking", "committing", "evaluating",
                                      "done",     "failed",    "cancelled"};
  return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "unknown";
}

const char *xf_jobm_action_name(xf_jobm_action_kind k) {
  static const char *const names[] = {
      "opened",   "offer",  "go",    "cancel",  "discard", "sa_keys", "sa_routed",
      "sa_unmask", "participant", "commit", "retry", "pause", "resume", "stop",
      "fail",     "evaluate", "finish", "accept_up", "refuse_up", "forward", "sa_check"};
  return (unsigned)k < sizeof(names) / sizeof(names[0]) ? names[k] : "unknown";
}

/* ---- what goes upstream (relay) ----------------------------------------------------------------- */

/* The sites the relay names upstream: those that accepted, then those its
 * aggregate sums. */
void xf__jm_keep_up_sites(xf_jobm *m, const uint64_t *sites, size_t n) {
  uint64_t *v = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
  if (!v) {
    m->oom = true;
    return;
  }
  if (n) memcpy(v, sites, n * sizeof(uint64_t));
  xf_free(m->up_sites);
  m->up_sites = v;
  m->n_up_sites = n;
}

/* The aggregate goes up once it is made, is due, and upstream holds the
 * task; before that it waits (a restarted upstream would refuse it, and it
 * is sealed to the key of the offer that holds the task). */
static void forward_if_held(xf_jobm *m) {
  if (!m->made || !m->forward_due || !m->up_holds) return;
  xf_jobm_action *a = xf__jm_push(m, XF_JOBM_FORWARD, 0);
  xf__jm_set_sites(m, a, m->up_sites, m->n_up_sites);
  a->weight = m->up_weight;
  a->resend = m->forwarded;
  m->forward_due = false;
  m->forwarded = true;
}

/* ---- life cycle ---------------------------------------------------------------------------------- */

static void copy_release(xf_jobm *m, const xf_release_rule *r) {
  m->has_release = r != NULL;
  if (!r) return;
  m->release = *r;
  snprintf(m->rel_rule, sizeof(m->rel_rule), "%s", r->rule ? r->rule : "");
  snprintf(m->rel_from, sizeof(m->rel_from), "%s", r->from ? r->from : "");
  snprintf(m->rel_to, sizeof(m->rel_to), "%s", r->to ? r->to : "");
  m->release.rule = m->rel_rule;
  m->release.from = m->rel_from;
  m->release.to = m->rel_to;
}

/* The fewest sites a relay's round can run with: the release condition's
 * cohort, and 2 under secure aggregation. */
static uint32_t relay_quorum(const xf_jobm *m) {
  uint32_t q = 1;
  if (m->has_release && m->release.min_cohort > q) q = m->release.min_cohort;
  if (m->spec.secure_aggregation.enabled && q < 2) q = 2;
  return q;
}

xf_err xf_jobm_create(const xf_jobm_config *cfg, xf_jobm **out, xf_errctx *err) {
  *out = NULL;
  XF_ENSURE(cfg->spec, err, XF_EINVAL, "the job machine needs a job spec");
  xf_jobm *m = xf_calloc(1, sizeof(*m));
  if (!m) return xf_fail(err, XF_ENOMEM, "out of memory creating the job machine");
  m->role = cfg->role;
  m->spec = *cfg->spec;
  m->round_spec = m->spec;
  m->n_params = cfg->n_params;
  m->rounds_committed = cfg->rounds_committed;
  m->resume_until = cfg->resume_until;
  m->resume_wait_for = cfg->resume_wait_for;
  m->eval_timeout_s = cfg->eval_timeout_s > 0 ? cfg->eval_timeout_s : 120;
  m->evaluate_only = cfg->evaluate_only;
  m->deadline = cfg->deadline;
  m->answer_by = cfg->answer_by;
  copy_release(m, cfg->release);
  uint32_t round = cfg->round ? cfg->round : 1, attempt = cfg->attempt ? cfg->attempt : 1;
  uint32_t max_attempts = cfg->max_attempts;
  if (cfg->role == XF_JOBM_RELAY) {
    if (cfg->n_cohort) {
      m->cohort = xf_mallocarray(cfg->n_cohort, sizeof(uint64_t));
      if (!m->cohort) {
        xf_jobm_free(m);
        return xf_fail(err, XF_ENOMEM, "out of memory creating the job machine");
      }
      memcpy(m->cohort, cfg->cohort, cfg->n_cohort * sizeof(uint64_t));
      m->n_cohort = cfg->n_cohort;
    }
    /* One round among this region's sites: all of them that may take
     * part, no draw, at least the release condition's cohort. */
    xf_jobspec *sub = &m->round_spec;
    sub->sites_per_round = 1.0;
    sub->over_selection = 1.0;
    sub->min_sites = relay_quorum(m);
    if (sub->rounds < round) sub->rounds = round;
    attempt = 1;
    max_attempts = 1;
  }
  xf_err rc = xf_round_create(&m->round_spec, round, attempt, max_attempts, &m->r, err);
  if (rc != XF_OK) {
    xf_jobm_free(m);
    return rc;
  }
  m->phase = cfg->role == XF_JOBM_RELAY && cfg->evaluate_only ? XF_JOBM_EVALUATING
              : cfg->paused                                   ? XF_JOBM_PAUSED
                                                              : XF_JOBM_WAITING;
  *out = m;
  return XF_OK;
}

void xf_jobm_free(xf_jobm *m) {
  if (!m) return;
  xf__jm_end_attempt(m);
  xf_round_free(m->r);
  xf_free(m->sites);
  xf_free(m->groups);
  xf_free(m->cohort);
  xf_free(m->absent);
  xf_free(m->up_sites);
  xf_free(m->acts);
  xf_free(m->offs);
  xf_free(m->arena);
  xf_free(m->bytes);
  xf_free(m->sa_mean);
  xf_free(m);
}

/* ---- the job's end ------------------------------------------------------------------------------- */

/* FAIL: the job (relay: the task) cannot go on, for a->text. */
xf_err xf__jm_fail(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)err;
  const char *why = a->text;
  xf__jm_cancel_carriers(m, why);
  xf__jm_end_attempt(m);
  xf__jm_set_msg(m, "%s", why);
  *next = XF_JOBM_FAILED;
  xf_jobm_action *o;
  if (m->role == XF_JOBM_RELAY) {
    o = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    o->refusal = strncmp(why, "held back", 9) == 0 ? XF_JOBM_REFUSED_POLICY : XF_JOBM_REFUSED_OTHER;
  } else {
    o = xf__jm_push(m, XF_JOBM_FAIL, 0);
  }
  xf__jm_note(o, "%s", why);
  return XF_OK;
}

void xf__jm_fail_job(xf_jobm *m, const char *why) {
  xf__jm_step(m, XF_JOBM_EV_FAIL, &(xf__jm_args){.text = why});
}

/* ---- the plan ------------------------------------------------------------------------------------ */

static bool named(const xf_jobm *m, uint64_t id) {
  if (m->role != XF_JOBM_RELAY || !m->n_cohort) return true;
  for (size_t k = 0; k < m->n_cohort; k++)
    if (m->cohort[k] == id) return true;
  return false;
}

static xf_err take_plan(xf_jobm *m, const xf_admission *p) {
  jm_site *sites = xf_calloc(p->n_sites ? p->n_sites : 1, sizeof(*sites));
  jm_group *groups = xf_calloc(p->n_groups ? p->n_groups : 1, sizeof(*groups));
  jm_absent *absent = xf_calloc(p->n_sites ? p->n_sites : 1, sizeof(*absent));
  if (!sites || !groups || !absent) {
    xf_free(sites);
    xf_free(groups);
    xf_free(absent);
    return XF_ENOMEM;
  }
  size_t n = 0, na = 0;
  for (size_t i = 0; i < p->n_sites; i++) {
    const xf_admit_site *s = &p->sites[i];
    if (!named(m, s->id)) continue;
    if (!s->eligible) {
      absent[na].id = s->id;
      snprintf(absent[na].why, sizeof(absent[na].why), "%s", s->why);
      na++;
      continue;
    }
    sites[n++] = (jm_site){.id = s->id,
                           .carrier = s->via_id ? s->via_id : s->id,
                           .group = s->group,
                           .records = s->records ? s->records : 1};
  }
  for (size_t g = 0; g < p->n_groups; g++) {
    const xf_admit_group *ag = &p->groups[g];
    jm_group *o = &groups[g];
    o->via = ag->via_id;
    o->secagg = ag->secagg;
    o->min_sites = ag->min_sites;
    xf_admit_group_release(ag, &o->release);
    snprintf(o->rule, sizeof(o->rule), "%s", ag->rule);
    snprintf(o->from, sizeof(o->from), "%s", ag->region);
    snprintf(o->to, sizeof(o->to), "%s", ag->to);
    o->release.rule = o->rule;
    o->release.from = o->from;
    o->release.to = o->to;
    o->has_release = ag->via[0] != '\0';
  }
  xf_free(m->sites);
  xf_free(m->groups);
  xf_free(m->absent);
  m->sites = sites;
  m->n_sites = n;
  m->groups = groups;
  m->n_groups = p->n_groups;
  m->absent = absent;
  m->n_absent = na;
  m->has_plan = true;
  m->verdict = p->verdict;
  snprintf(m->plan_reason, sizeof(m->plan_reason), "%s", p->reason);
  return XF_OK;
}

static void offer_evaluation(xf_jobm *m, double now);

/* Noise in the sum accounted at the coordinator: stop before a round that
 * would take epsilon past the target. True when the job stopped. */
static bool target_stop(xf_jobm *m, double now) {
  const xf_privacy_spec *pv = &m->spec.privacy;
  double eps;
  if (m->role != XF_JOBM_GLOBAL || !pv->has_target_epsilon ||
      !xf_job_epsilon(&m->spec, xf_round_number(m->r), &eps) || !(eps > pv->target_epsilon))
    return false;
  xf_jobm_action *a = xf__jm_push(m, XF_JOBM_STOP, 0);
  xf__jm_note(a,
       "stopped before round %u: it would bring epsilon to %.4g, above the target %.4g (delta "
       "%g)",
       (unsigned)xf_round_number(m->r), eps, pv->target_epsilon, pv->delta);
  xf__jm_set_msg(m, "%s", a->note);
  xf__jm_step(m, XF_JOBM_EV_EVALUATE, &(xf__jm_args){.now = now});
  return true;
}

/* A relay tells upstream, once, which of the sites it named cannot take part. */
static void tell_absent(xf_jobm *m) {
  if (m->role != XF_JOBM_RELAY || m->absent_told) return;
  m->absent_told = true;
  for (size_t i = 0; i < m->n_absent; i++) {
    xf_jobm_action *a = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = m->absent[i].id;
    a->refusal = XF_JOBM_REFUSED_OTHER;
    xf__jm_note(a, "%s", m->absent[i].why);
  }
  /* Named but unknown here at all. */
  for (size_t k = 0; k < m->n_cohort; k++) {
    bool known = xf__jm_plan_site(m, m->cohort[k]) != NULL;
    for (size_t i = 0; i < m->n_absent && !known; i++) known = m->absent[i].id == m->cohort[k];
    if (known) continue;
    xf_jobm_action *a = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = m->cohort[k];
    a->refusal = XF_JOBM_REFUSED_OTHER;
    xf__jm_note(a, "not connected to its regional aggregator, or holds no data of the job");
  }
}

/* In WAITING: opens the next attempt when the plan lets it, else says why
 * the job waits. */
static void try_open(xf_jobm *m, double now) {
  if (m->phase != XF_JOBM_WAITING || !m->has_plan) return;
  if (target_stop(m, now)) return;
  if (m->role == XF_JOBM_RELAY) {
    tell_absent(m);
    uint32_t q = relay_quorum(m);
    if (m->n_sites < q) {
      char why[600];
      snprintf(why, sizeof(why),
               "%zu of the sites named can take part here, and this region's aggregate needs "
               "at least %u",
               m->n_sites, (unsigned)q);
      xf__jm_fail_job(m, why);
      return;
    }
    xf__jm_open_attempt(m, now);
    return;
  }
  if (m->verdict != XF_ADMIT_RUNS) return; /* the message was set with the plan */
  size_t eligible = m->n_sites;
  if (now < m->resume_until && eligible < m->resume_wait_for) {
    xf__jm_set_msg(m, "resuming: waiting for the %u sites of the interrupted round (%zu back)",
            (unsigned)m->resume_wait_for, eligible);
    return;
  }
  m->resume_until = 0;
  xf__jm_open_attempt(m, now);
}

static bool plan_stops(const xf_admission *plan) {
  return plan->verdict == XF_ADMIT_DENIED || plan->verdict == XF_ADMIT_UNRUNNABLE;
}

/* plan where it is only kept for the next attempt (or the evaluation). */
xf_err xf__jm_plan_kept(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)next;
  if (take_plan(m, a->plan) != XF_OK)
    return xf_fail(err, XF_ENOMEM, "out of memory taking the plan");
  return XF_OK;
}

/* WAITING, with the plan taken: a global job the policy no longer allows
 * pauses, else it says why it waits; then the attempt opens if it can. */
static void plan_in_waiting(xf_jobm *m, const xf_admission *plan, double now) {
  if (m->role == XF_JOBM_GLOBAL) {
    if (plan_stops(plan)) {
      xf__jm_step(m, XF_JOBM_EV_PAUSE, &(xf__jm_args){.now = now, .plan = plan});
      return;
    }
    if (plan->verdict != XF_ADMIT_RUNS) xf__jm_set_msg(m, "waiting for sites: %s", plan->reason);
    else m->msg[0] = '\0';
  }
  try_open(m, now);
}

xf_err xf__jm_plan_waiting(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  xf_err rc = xf__jm_plan_kept(m, a, next, err);
  if (rc != XF_OK) return rc;
  plan_in_waiting(m, a->plan, a->now);
  return XF_OK;
}

/* PAUSED: a plan the policy allows again resumes the job (a relay is never
 * paused by policy: it keeps the plan). */
xf_err xf__jm_plan_paused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  xf_err rc = xf__jm_plan_kept(m, a, next, err);
  if (rc != XF_OK || m->role != XF_JOBM_GLOBAL) return rc;
  if (plan_stops(a->plan)) {
    xf__jm_set_msg(m, "paused before round %u: %s", (unsigned)xf_round_number(m->r),
                   a->plan->reason);
    return XF_OK;
  }
  xf__jm_step(m, XF_JOBM_EV_RESUME, a);
  plan_in_waiting(m, a->plan, a->now);
  return XF_OK;
}

xf_err xf__jm_plan_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  xf_err rc = xf__jm_plan_kept(m, a, next, err);
  if (rc == XF_OK && !m->eval_started) offer_evaluation(m, a->now);
  return rc;
}

/* RESUME: the plan allows the paused job again. */
xf_err xf__jm_resume(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  xf__jm_push(m, XF_JOBM_RESUME, 0);
  m->msg[0] = '\0';
  return XF_OK;
}

/* PAUSE: the plan (a->plan) does not allow the job now. */
xf_err xf__jm_pause(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_PAUSE, 0);
  xf__jm_note(o, "paused before round %u: %s", (unsigned)xf_round_number(m->r), a->plan->reason);
  xf__jm_set_msg(m, "%s", o->note);
  return XF_OK;
}

xf_err xf_jobm_plan(xf_jobm *m, const xf_admission *plan, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_PLAN, &(xf__jm_args){.now = now, .plan = plan}, err);
}

/* ---- a carrier's answer ------------------------------------------------------------------------- */

static bool in_list(const uint64_t *v, size_t n, uint64_t x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

/* accepted where nothing of the carrier is open here: it must let the task go. */
xf_err xf__jm_accepted_unheld(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_CANCEL, a->carrier);
  xf__jm_note(o, "no task of this job is open for it here");
  return XF_OK;
}

/* accepted in EVALUATING: a carrier that takes the evaluation has nothing to answer. */
xf_err xf__jm_accepted_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                  xf_errctx *err) {
  jm_carrier *e = xf__jm_carrier_of(m, a->carrier);
  if (e && e->eval_pending) return XF_OK;
  return xf__jm_accepted_unheld(m, a, next, err);
}

/* accepted in an open attempt. */
xf_err xf__jm_on_accepted(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                          xf_errctx *err) {
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || c->state == C_GONE) return xf__jm_accepted_unheld(m, a, next, err);
  if (c->state != C_OFFERED) {
    /* Answered again after a resend: it may have lost its GO with the link. */
    if (c->state == C_GO) {
      xf_jobm_action *o = xf__jm_push(m, XF_JOBM_GO, c->id);
      o->deadline = xf_round_deadline(m->r);
      o->has_secagg = c->has_secagg;
      o->secagg = c->secagg;
    }
    return XF_OK;
  }
  c->state = C_ANSWERED;
  uint64_t self = a->carrier;
  const uint64_t *sites = c->regional ? a->sites : &self;
  size_t n = c->regional ? a->n : 1;
  double now = a->now;
  /* Its sites that it does not name are out (a regional's refusals came
   * before, one per site). A drop may close the attempt, which frees the
   * carriers: the attempt is checked before c is read again. */
  for (size_t i = 0; xf__jm_attempt_open(m) && i < c->n_sites; i++) {
    uint64_t s = c->sites[i];
    xf_participant_state st;
    if (!xf__jm_site_state(m, s, &st) || st != XF_PARTICIPANT_INVITED) continue;
    if (in_list(sites, n, s)) continue;
    xf__jm_drop_site(m, s, "its regional aggregator did not answer for it", now);
  }
  for (size_t i = 0; i < n && xf__jm_attempt_open(m); i++) {
    if (!xf__jm_carries(c, sites[i])) continue;
    xf_participant_state st;
    if (!xf__jm_site_state(m, sites[i], &st) || st != XF_PARTICIPANT_INVITED) continue;
    xf_errctx e = {0};
    xf__jm_participant(m, sites[i], XF_PARTICIPANT_ACCEPTED, 0);
    if (xf_round_site_accepted(m->r, sites[i], &e) == XF_OK) xf__jm_process_round(m, now);
  }
  return XF_OK;
}

xf_err xf_jobm_accepted(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n, double now,
                        xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_ACCEPTED,
                     &(xf__jm_args){.now = now, .carrier = carrier, .sites = sites, .n = n}, err);
}

static void note_refusal(xf_jobm *m, xf_jobm_refusal why, const char *details) {
  const char *d = details && *details ? details : "refused";
  xf_text_append(m->refusals, sizeof(m->refusals), "%s", d);
  if (why == XF_JOBM_REFUSED_BUDGET || why == XF_JOBM_REFUSED_TARGET) {
    if (m->privacy_refusal != XF_JOBM_REFUSED_BUDGET) m->privacy_refusal = why;
    xf_text_append(m->privacy_note, sizeof(m->privacy_note), "%s", d);
  }
}

static void refuse_site(xf_jobm *m, uint64_t site, xf_jobm_refusal why, const char *details,
                        double now) {
  xf_participant_state st;
  if (!xf__jm_site_state(m, site, &st) || !xf__jm_pending_state(st)) return;
  note_refusal(m, why, details);
  xf__jm_participant(m, site, XF_PARTICIPANT_REFUSED, 0);
  if (m->role == XF_JOBM_RELAY) {
    xf_jobm_action *a = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = site;
    a->refusal = why;
    xf__jm_note(a, "%s", details ? details : "");
  }
  if (m->sa) xf_saphase_gone(m->sa, site, now);
  xf_errctx e = {0};
  xf_err rc = st == XF_PARTICIPANT_INVITED ? xf_round_site_refused(m->r, site, details, &e)
                                           : xf_round_site_dropped(m->r, site, &e);
  if (rc == XF_OK) xf__jm_process_round(m, now);
}

/* A copy of the carrier's sites, for a loop whose drops may free it
 * (NULL when out of memory). */
static uint64_t *sites_copy(const jm_carrier *c, size_t *n) {
  *n = c->n_sites;
  uint64_t *copy = xf_mallocarray(c->n_sites ? c->n_sites : 1, sizeof(uint64_t));
  if (copy) memcpy(copy, c->sites, c->n_sites * sizeof(uint64_t));
  return copy;
}

/* A carrier's part of the evaluation is over without its word (refused,
 * dropped): the evaluation may finish. */
static void evaluation_lost(xf_jobm *m, jm_carrier *c, double now) {
  c->eval_pending = false;
  offer_evaluation(m, now);
}

/* refused in EVALUATING: a carrier refusing it whole is not waited for. */
xf_err xf__jm_refused_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err) {
  (void)next;
  (void)err;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (c && c->eval_pending && a->site == 0) evaluation_lost(m, c, a->now);
  return XF_OK;
}

/* refused in an open attempt: for one site behind the carrier, or all. */
xf_err xf__jm_on_refused(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                         xf_errctx *err) {
  (void)next;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || c->state == C_GONE) return XF_OK;
  if (a->site) {
    if (xf__jm_carries(c, a->site)) refuse_site(m, a->site, a->refusal, a->text, a->now);
  } else {
    size_t k;
    uint64_t *copy = sites_copy(c, &k);
    if (!copy) return xf_fail(err, XF_ENOMEM, "out of memory");
    for (size_t i = 0; i < k && xf__jm_attempt_open(m); i++)
      refuse_site(m, copy[i], a->refusal, a->text, a->now);
    xf_free(copy);
  }
  c = xf__jm_carrier_of(m, a->carrier);
  if (c && !xf__jm_carrier_pending(m, c) && c->state != C_REPORTED) c->state = C_GONE;
  return XF_OK;
}

xf_err xf_jobm_refused(xf_jobm *m, uint64_t carrier, uint64_t site, xf_jobm_refusal why,
                       const char *details, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_REFUSED,
                     &(xf__jm_args){.now = now, .carrier = carrier, .site = site,
                                    .refusal = why, .text = details},
                     err);
}

/* dropped in EVALUATING. */
xf_err xf__jm_dropped_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err) {
  (void)next;
  (void)err;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (c && c->eval_pending) evaluation_lost(m, c, a->now);
  return XF_OK;
}

/* dropped in an open attempt: its pending sites leave it. */
xf_err xf__jm_on_dropped(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                         xf_errctx *err) {
  (void)next;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || c->state == C_GONE) return XF_OK;
  size_t k;
  uint64_t *copy = sites_copy(c, &k);
  if (!copy) return xf_fail(err, XF_ENOMEM, "out of memory");
  c->state = C_GONE;
  for (size_t i = 0; i < k && xf__jm_attempt_open(m); i++)
    xf__jm_drop_site(m, copy[i], a->text ? a->text : "dropped", a->now);
  xf_free(copy);
  return XF_OK;
}

xf_err xf_jobm_dropped(xf_jobm *m, uint64_t carrier, const char *why, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_DROPPED,
                     &(xf__jm_args){.now = now, .carrier = carrier, .text = why}, err);
}

/* ---- a carrier's update ------------------------------------------------------------------------- */

/* The announced update is not taken: DISCARD (why), and a carrier told
 * GO leaves the attempt with its sites. */
static void discard_announced(xf_jobm *m, uint64_t carrier, const char *why,
                              xf_jobm_refusal kind, double now) {
  jm_carrier *c = xf__jm_carrier_of(m, carrier);
  xf_jobm_action *a = xf__jm_push(m, XF_JOBM_DISCARD, carrier);
  a->refusal = kind;
  xf__jm_note(a, "%s", why);
  if (!c || c->state != C_GO) return;
  size_t k;
  uint64_t *copy = sites_copy(c, &k);
  if (!copy) return;
  c->state = C_GONE;
  for (size_t i = 0; i < k && xf__jm_attempt_open(m); i++)
    xf__jm_drop_site(m, copy[i], a->note, now);
  xf_free(copy);
}

/* announced outside TRAINING. */
xf_err xf__jm_announced_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                   xf_errctx *err) {
  (void)next;
  (void)err;
  discard_announced(m, a->carrier, "no update of this job is expected from it now",
                    XF_JOBM_REFUSED_OTHER, a->now);
  return XF_OK;
}

/* Why a regional's aggregate of n sites misses its group's release
 * conditions (into buf), or NULL when it meets them. */
static const char *aggregate_unreleasable(const xf_jobm *m, uint64_t site, size_t n, char *buf,
                                          size_t cap) {
  const jm_group *g = xf__jm_group_of(m, site);
  if (!g || !g->has_release) return NULL;
  const xf_privacy_spec *pv = &m->spec.privacy;
  xf_release_artifact art = {.contributors = (unsigned)n,
                             .secagg = m->spec.secure_aggregation.enabled,
                             .privacy = pv->mode != XF_PRIVACY_NONE,
                             .has_epsilon = pv->has_target_epsilon,
                             .epsilon = pv->target_epsilon};
  return xf_release_allows(&g->release, &art, buf, cap) ? NULL : buf;
}

/* announced in TRAINING: taken, or refused as not in the attempt or (a
 * region's aggregate) not releasable. */
xf_err xf__jm_on_announced(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || c->state != C_GO) return xf__jm_announced_unexpected(m, a, next, err);
  uint64_t self = a->carrier;
  const uint64_t *sites = c->regional ? a->sites : &self;
  size_t n = c->regional ? a->n : 1;
  const char *why = NULL;
  char buf[XF_JOBM_MSG_MAX];
  for (size_t i = 0; !why && i < n; i++)
    if (!xf__jm_carries(c, sites[i]) || !xf__jm_site_pending(m, sites[i]))
      why = "the aggregate names a site that is not in this attempt";
  if (!why && n == 0) why = "the aggregate names no site";
  xf_jobm_refusal kind = XF_JOBM_REFUSED_OTHER;
  if (!why && c->regional) {
    /* The region's aggregate is held to its release conditions at this end too. */
    why = aggregate_unreleasable(m, sites[0], n, buf, sizeof(buf));
    if (why) kind = XF_JOBM_REFUSED_POLICY;
  }
  if (why) discard_announced(m, a->carrier, why, kind, a->now);
  return XF_OK;
}

xf_err xf_jobm_announced(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                         double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_ANNOUNCED,
                     &(xf__jm_args){.now = now, .carrier = carrier, .sites = sites, .n = n}, err);
}

void xf__jm_report_sites(xf_jobm *m, jm_carrier *c, const uint64_t *sites, size_t n,
                         uint64_t weight, double now) {
  c->state = C_REPORTED;
  /* Its sites missing from the aggregate are out (the attempt first: a
   * drop that closes it frees c). */
  for (size_t i = 0; xf__jm_attempt_open(m) && i < c->n_sites; i++)
    if (!in_list(sites, n, c->sites[i]) && xf__jm_site_pending(m, c->sites[i]))
      xf__jm_drop_site(m, c->sites[i], "not in its region's aggregate", now);
  for (size_t i = 0; i < n && xf__jm_attempt_open(m); i++) {
    xf_errctx e = {0};
    uint64_t samples = n ? weight / n : weight;
    xf__jm_participant(m, sites[i], XF_PARTICIPANT_REPORTED, samples);
    if (xf_round_update_reported(m->r, sites[i], samples ? samples : 1, &e) == XF_OK)
      xf__jm_process_round(m, now);
  }
}

/* reported where the attempt is not taking it. */
xf_err xf__jm_reported_unexpected(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                  xf_errctx *err) {
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_DISCARD, a->carrier);
  xf__jm_note(o, "round %u attempt %u is not taking this update", (unsigned)xf_round_number(m->r),
              (unsigned)xf_round_attempt(m->r));
  return XF_OK;
}

/* reported in TRAINING. */
xf_err xf__jm_on_reported(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                          xf_errctx *err) {
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || c->state != C_GO) return xf__jm_reported_unexpected(m, a, next, err);
  uint64_t self = a->carrier;
  if (c->regional) xf__jm_report_sites(m, c, a->sites, a->n, a->weight, a->now);
  else xf__jm_report_sites(m, c, &self, 1, a->weight, a->now);
  return XF_OK;
}

xf_err xf_jobm_reported(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                        uint64_t weight, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_REPORTED,
                     &(xf__jm_args){.now = now, .carrier = carrier, .sites = sites, .n = n,
                                    .weight = weight},
                     err);
}

/* ---- a carrier's link --------------------------------------------------------------------------- */

/* link where nothing is open: the machine only notes it (it may open). */
xf_err xf__jm_link_noted(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                         xf_errctx *err) {
  (void)next;
  (void)err;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c) return XF_OK;
  if (a->up) {
    c->down = false;
  } else {
    if (!c->down) c->down_since = a->now;
    c->down = true;
  }
  return XF_OK;
}

/* link in an open attempt: one back with its task open is offered the same
 * task again; under unmasking, a direct site away is not waited for (the
 * others' shares recover its self mask). */
xf_err xf__jm_link_in_attempt(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  xf__jm_link_noted(m, a, next, err);
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c) return XF_OK;
  if (!a->up) {
    if (m->sa && m->phase == XF_JOBM_UNMASKING && !c->regional) {
      xf_saphase_gone(m->sa, c->id, a->now);
      xf__jm_run_sa(m, a->now);
    }
    return XF_OK;
  }
  if (c->state == C_GONE || c->state == C_REPORTED || !xf__jm_carrier_pending(m, c)) return XF_OK;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_OFFER, c->id);
  o->deadline = xf_round_deadline(m->r);
  o->answer_by = xf_round_confirm_deadline(m->r);
  o->resend = true;
  if (c->regional) xf__jm_set_sites(m, o, c->sites, c->n_sites);
  return XF_OK;
}

/* link in EVALUATING: one back is offered the evaluation again. */
xf_err xf__jm_link_in_evaluation(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                 xf_errctx *err) {
  xf__jm_link_noted(m, a, next, err);
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (!c || !a->up || !c->eval_pending) return XF_OK;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_EVALUATE, c->id);
  o->deadline = m->eval_deadline;
  o->resend = true;
  if (c->regional) xf__jm_set_sites(m, o, c->sites, c->n_sites);
  return XF_OK;
}

xf_err xf_jobm_link(xf_jobm *m, uint64_t carrier, bool up, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_LINK,
                     &(xf__jm_args){.now = now, .carrier = carrier, .up = up}, err);
}

/* ---- secure aggregation events (coordinator/jobm_secagg.c) ------------------------------------- */

xf_err xf_jobm_sa_advert(xf_jobm *m, uint64_t site, const xf_saphase_keys *keys, double now,
                         xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_ADVERT,
                     &(xf__jm_args){.now = now, .site = site, .keys = keys}, err);
}

xf_err xf_jobm_sa_shares(xf_jobm *m, uint64_t site, const xf_saphase_shares_msg *msg,
                         double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_SHARES,
                     &(xf__jm_args){.now = now, .site = site, .shares = msg}, err);
}

xf_err xf_jobm_sa_check_sig(xf_jobm *m, uint64_t site, const uint8_t *sig, size_t len,
                            double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_CHECK_SIG,
                     &(xf__jm_args){.now = now, .site = site, .bytes = sig, .len = len}, err);
}

xf_err xf_jobm_sa_refused(xf_jobm *m, uint64_t site, const char *why, double now,
                          xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_REFUSED,
                     &(xf__jm_args){.now = now, .site = site, .text = why}, err);
}

xf_err xf_jobm_sa_masked(xf_jobm *m, uint64_t site, uint32_t **words, size_t n_words,
                         uint64_t weight, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_MASKED,
                     &(xf__jm_args){.now = now, .site = site, .words = words,
                                    .n_words = n_words, .weight = weight},
                     err);
}

xf_err xf_jobm_sa_reveal(xf_jobm *m, uint64_t site, const uint8_t *msg, size_t len, double now,
                         xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_SA_REVEAL,
                     &(xf__jm_args){.now = now, .site = site, .bytes = msg, .len = len}, err);
}

/* ---- the clock ------------------------------------------------------------------------------------ */

/* tick in an open attempt: carriers away too long are out, then the
 * round's and the secure aggregation's deadlines. */
xf_err xf__jm_tick_attempt(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  double now = a->now;
  for (size_t i = 0; i < m->n_carriers && xf__jm_attempt_open(m); i++) {
    jm_carrier *c = &m->carriers[i];
    if (!c->down || c->state == C_GONE || c->state == C_REPORTED ||
        now - c->down_since < XF_JOBM_RECONNECT_GRACE_S || !xf__jm_carrier_pending(m, c))
      continue;
    size_t k;
    uint64_t *copy = sites_copy(c, &k);
    if (!copy) break;
    c->state = C_GONE;
    for (size_t j = 0; j < k && xf__jm_attempt_open(m); j++)
      xf__jm_drop_site(m, copy[j], "lost its link and did not come back in time", now);
    xf_free(copy);
  }
  xf_errctx e = {0};
  if (xf__jm_attempt_open(m) && xf_round_tick(m->r, now, &e) == XF_OK)
    xf__jm_process_round(m, now);
  if (m->sa && (m->phase == XF_JOBM_TRAINING || m->phase == XF_JOBM_UNMASKING)) {
    xf_saphase_tick(m->sa, now);
    xf__jm_run_sa(m, now);
  }
  return XF_OK;
}

/* tick in WAITING: after a restart the grace for the interrupted cohort ends. */
xf_err xf__jm_tick_waiting(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  if (m->resume_until > 0 && a->now >= m->resume_until) try_open(m, a->now);
  return XF_OK;
}

/* tick in EVALUATING: past its deadline nobody is waited for. */
xf_err xf__jm_tick_evaluating(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  (void)next;
  (void)err;
  if (!m->eval_started || a->now < m->eval_deadline) return XF_OK;
  for (size_t i = 0; i < m->n_carriers; i++) m->carriers[i].eval_pending = false;
  offer_evaluation(m, a->now);
  return XF_OK;
}

xf_err xf_jobm_tick(xf_jobm *m, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_TICK, &(xf__jm_args){.now = now}, err);
}

/* ---- commit --------------------------------------------------------------------------------------- */

/* committed outside COMMITTING: the caller's mistake. */
xf_err xf__jm_nothing_to_commit(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                                xf_errctx *err) {
  (void)a;
  (void)next;
  return xf_fail(err, XF_EINVAL, "no result to commit: the job is %s",
                 xf_jobm_phase_name(m->phase));
}

/* commit_failed outside COMMITTING: the caller's mistake. */
xf_err xf__jm_nothing_to_fail(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                              xf_errctx *err) {
  (void)a;
  (void)next;
  return xf_fail(err, XF_EINVAL, "no result that could fail: the job is %s",
                 xf_jobm_phase_name(m->phase));
}

/* RELEASE (relay): the last hop inside the region holds the aggregate to
 * the plan; made, it goes up once upstream holds the task, else it is held
 * back. */
xf_err xf__jm_release(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)a;
  size_t n = 0;
  for (size_t i = 0; i < m->n_carriers; i++)
    if (m->carriers[i].state == C_REPORTED) n++;
  uint64_t *sites = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
  if (!sites) return xf_fail(err, XF_ENOMEM, "out of memory");
  n = 0;
  uint64_t weight = 0;
  for (size_t i = 0; i < m->n_carriers; i++) {
    if (m->carriers[i].state != C_REPORTED) continue;
    sites[n++] = m->carriers[i].id;
    uint64_t w = 0;
    if (xf_round_site(m->r, m->carriers[i].id, NULL, &w, NULL) == XF_OK) weight += w;
  }
  const xf_privacy_spec *pv = &m->spec.privacy;
  unsigned in_sum = (unsigned)(n - (m->lost_sites < n ? m->lost_sites : n));
  xf_release_artifact art = {.contributors = in_sum,
                             .secagg = m->spec.secure_aggregation.enabled,
                             .privacy = pv->mode != XF_PRIVACY_NONE,
                             .has_epsilon = pv->has_target_epsilon,
                             .epsilon = pv->target_epsilon};
  char why[XF_JOBM_MSG_MAX];
  if (m->has_release && !xf_release_allows(&m->release, &art, why, sizeof(why))) {
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    o->refusal = XF_JOBM_REFUSED_POLICY;
    xf__jm_note(o, "%s", why);
    xf__jm_set_msg(m, "held back: %s", why);
    *next = XF_JOBM_FAILED;
  } else {
    xf__jm_keep_up_sites(m, sites, n);
    m->up_weight = weight;
    m->made = true;
    m->forward_due = true;
    *next = XF_JOBM_DONE;
    if (!m->up_holds)
      xf__jm_set_msg(m, "the region's aggregate is made and waits for upstream to offer the task "
                        "again");
    forward_if_held(m);
  }
  xf_free(sites);
  xf__jm_free_carriers(m);
  return XF_OK;
}

/* NEXT_ROUND (global): the round is committed; the next is planned afresh. */
xf_err xf__jm_next_round(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                         xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  m->rounds_committed++;
  xf__jm_free_carriers(m);
  m->has_plan = false; /* decided again before the next attempt */
  return XF_OK;
}

/* committed in COMMITTING. */
xf_err xf__jm_on_committed(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  if (m->role == XF_JOBM_RELAY) return xf__jm_drive(m, XF_JOBM_EV_RELEASE, a, err);
  xf_errctx e = {0};
  if (xf_round_committed(m->r, &e) != XF_OK) {
    xf__jm_fail_job(m, e.msg);
    return XF_OK;
  }
  xf__jm_step(m, XF_JOBM_EV_NEXT_ROUND, a);
  xf__jm_process_round(m, a->now); /* the last round's: the evaluation */
  return XF_OK;
}

xf_err xf_jobm_committed(xf_jobm *m, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_COMMITTED, &(xf__jm_args){.now = now}, err);
}

/* commit_failed in COMMITTING. */
xf_err xf__jm_on_commit_failed(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                               xf_errctx *err) {
  (void)next;
  (void)err;
  xf__jm_commit_failed(m, a->text, a->now);
  return XF_OK;
}

xf_err xf_jobm_commit_failed(xf_jobm *m, const char *why, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_COMMIT_FAILED, &(xf__jm_args){.now = now, .text = why},
                     err);
}

/* ---- the evaluation ------------------------------------------------------------------------------- */

void xf__jm_prepare_evaluation(xf_jobm *m) {
  xf__jm_end_attempt(m);
  m->eval_started = false;
  m->has_plan = false; /* the evaluation goes to the sites eligible now */
}

/* EVALUATE: the last round is committed, or the privacy target is reached. */
xf_err xf__jm_evaluate(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                       xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  xf__jm_prepare_evaluation(m);
  return XF_OK;
}

/* FINISH: nothing of the evaluation is pending. */
xf_err xf__jm_finish(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  xf__jm_free_carriers(m);
  xf__jm_push(m, XF_JOBM_FINISH, 0);
  return XF_OK;
}

/* With a fresh plan: offers the evaluation to every carrier of its eligible
 * sites; later calls finish it once nothing is pending. */
static void offer_evaluation(xf_jobm *m, double now) {
  if (!m->eval_started) {
    if (!m->has_plan) return;
    m->eval_started = true;
    m->eval_deadline = now + m->eval_timeout_s;
    if (m->role == XF_JOBM_RELAY && m->deadline > now) m->eval_deadline = m->deadline;
    xf__jm_free_carriers(m);
    if (m->role == XF_JOBM_RELAY) tell_absent(m);
    for (size_t i = 0; i < m->n_sites; i++) {
      jm_carrier *c = xf__jm_add_carrier(m, m->sites[i].carrier);
      if (c) xf__jm_carrier_add_site(m, c, m->sites[i].id);
    }
    for (size_t i = 0; i < m->n_carriers; i++) {
      jm_carrier *c = &m->carriers[i];
      c->eval_pending = true;
      c->state = C_REPORTED; /* nothing to train */
      xf_jobm_action *o = xf__jm_push(m, XF_JOBM_EVALUATE, c->id);
      o->deadline = m->eval_deadline;
      if (c->regional) xf__jm_set_sites(m, o, c->sites, c->n_sites);
    }
  }
  for (size_t i = 0; i < m->n_carriers; i++)
    if (m->carriers[i].eval_pending) return;
  xf__jm_step(m, XF_JOBM_EV_FINISH, &(xf__jm_args){.now = now});
}

/* evaluated in EVALUATING. */
xf_err xf__jm_on_evaluated(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  jm_carrier *c = xf__jm_carrier_of(m, a->carrier);
  if (m->eval_started && c && c->eval_pending) {
    c->eval_pending = false;
    offer_evaluation(m, a->now);
  }
  return XF_OK;
}

xf_err xf_jobm_evaluated(xf_jobm *m, uint64_t carrier, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_EVALUATED, &(xf__jm_args){.now = now, .carrier = carrier},
                     err);
}

/* ---- relay and cancel ---------------------------------------------------------------------------- */

static void relay_go(xf_jobm *m, double now) {
  m->up_holds = true;
  if (m->phase == XF_JOBM_AWAIT_GO) {
    m->go_up = true;
    xf__jm_go(m, now);
  } else if (xf__jm_attempt_open(m)) {
    m->go_up = true; /* came early: the GO goes out as soon as the sites answered */
  }
  if (m->made) m->msg[0] = '\0';
  forward_if_held(m);
}

/* go, in any phase: upstream holds the task from now on. */
xf_err xf__jm_on_go(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)next;
  (void)err;
  if (m->role == XF_JOBM_RELAY) relay_go(m, a->now);
  return XF_OK;
}

xf_err xf_jobm_go(xf_jobm *m, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_GO, &(xf__jm_args){.now = now}, err);
}

/* upstream_lost, in any phase: nothing goes up until upstream holds the task again. */
xf_err xf__jm_on_upstream_lost(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                               xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  if (m->role != XF_JOBM_RELAY) return XF_OK;
  m->up_holds = false;
  if (m->made) {
    m->forward_due = true;
    xf__jm_set_msg(m, "the region's aggregate is made and waits for upstream to offer the "
                      "task again");
  }
  if (m->phase == XF_JOBM_CONFIRMING || m->phase == XF_JOBM_AWAIT_GO) m->go_up = false;
  return XF_OK;
}

xf_err xf_jobm_upstream_lost(xf_jobm *m, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_UPSTREAM_LOST, &(xf__jm_args){.now = now}, err);
}

/* reoffered before the task failed or was cancelled: say again what was said. */
xf_err xf__jm_on_reoffered(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                           xf_errctx *err) {
  (void)next;
  (void)err;
  if (m->role != XF_JOBM_RELAY) return XF_OK;
  m->up_holds = false;
  if (m->made) m->forward_due = true;
  if (m->up_answered) {
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_ACCEPT_UP, 0);
    xf__jm_set_sites(m, o, m->up_sites, m->n_up_sites);
  }
  /* An offer that does not hold the task lets it go on at once. */
  if (!a->held) relay_go(m, a->now);
  return XF_OK;
}

xf_err xf_jobm_reoffered(xf_jobm *m, bool held, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_REOFFERED, &(xf__jm_args){.now = now, .held = held}, err);
}

/* cancel before the job ended: every carrier with a task is told. */
xf_err xf__jm_on_cancel(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                        xf_errctx *err) {
  (void)next;
  (void)err;
  const char *why = a->text ? a->text : "cancelled";
  xf__jm_cancel_carriers(m, why);
  xf__jm_end_attempt(m);
  xf__jm_set_msg(m, "%s", why);
  return XF_OK;
}

xf_err xf_jobm_cancel(xf_jobm *m, const char *why, double now, xf_errctx *err) {
  return xf__jm_call(m, XF_JOBM_EV_CANCEL, &(xf__jm_args){.now = now, .text = why}, err);
}

const xf_jobm_action *xf_jobm_actions(const xf_jobm *m, size_t *n) {
  *n = m->n_acts;
  return m->acts;
}

/* ---- inspection ----------------------------------------------------------------------------------- */

uint64_t xf_jobm_fold_weight(const xf_jobm *m, uint64_t announced, size_t n_sites) {
  if (xf_job_strategy_is_robust(m->spec.strategy.kind) || xf_job_noise_in_sum(&m->spec))
    return n_sites ? n_sites : 1;
  return announced;
}

bool xf_jobm_expects_update(const xf_jobm *m, uint64_t carrier, bool *masked,
                            uint64_t *sa_length, uint32_t *sa_bits) {
  jm_carrier *c = xf__jm_carrier_of((xf_jobm *)m, carrier);
  if (!c || m->phase != XF_JOBM_TRAINING || c->state != C_GO) return false;
  *masked = c->has_secagg && m->sa && xf_saphase_index(m->sa, carrier) != 0;
  if (*masked) {
    *sa_length = xf_saphase_params(m->sa)->length;
    *sa_bits = xf_saphase_params(m->sa)->bits;
  } else {
    *sa_length = 0;
    *sa_bits = 0;
  }
  return true;
}

bool xf_jobm_take_secure_mean(xf_jobm *m, float **mean, uint64_t *weight, uint32_t *sites) {
  if (!m->sa_mean) return false;
  *mean = m->sa_mean;
  *weight = m->sa_weight;
  if (sites) *sites = m->sa_sites;
  m->sa_mean = NULL;
  return true;
}

bool xf_jobm_wants_plan(const xf_jobm *m) {
  return m->phase == XF_JOBM_WAITING || m->phase == XF_JOBM_PAUSED ||
         (m->phase == XF_JOBM_EVALUATING && !m->eval_started);
}

xf_jobm_phase xf_jobm_get_phase(const xf_jobm *m) { return m->phase; }
uint32_t xf_jobm_round(const xf_jobm *m) {
  return m->phase == XF_JOBM_DONE && m->role == XF_JOBM_GLOBAL ? m->spec.rounds + 1
                                                               : xf_round_number(m->r);
}
uint32_t xf_jobm_attempt(const xf_jobm *m) { return xf_round_attempt(m->r); }
uint32_t xf_jobm_rounds_committed(const xf_jobm *m) { return m->rounds_committed; }

void xf_jobm_counts(const xf_jobm *m, uint32_t *invited, uint32_t *accepted, uint32_t *reported,
                    uint32_t *target) {
  bool open = xf__jm_attempt_open(m) || m->phase == XF_JOBM_COMMITTING;
  *invited = open ? xf_round_invited(m->r) : 0;
  *accepted = open ? xf_round_accepted(m->r) : 0;
  *reported = open ? xf_round_reported(m->r) : 0;
  *target = open ? xf_round_target(m->r) : 0;
}

double xf_jobm_deadline(const xf_jobm *m) {
  return m->phase == XF_JOBM_EVALUATING ? m->eval_deadline : xf_round_deadline(m->r);
}

const char *xf_jobm_message(const xf_jobm *m) { return m->msg; }

bool xf_jobm_carrier_sites(const xf_jobm *m, uint64_t carrier, const uint64_t **sites, size_t *n) {
  jm_carrier *c = xf__jm_carrier_of((xf_jobm *)m, carrier);
  if (!c || c->state == C_GONE) return false;
  *sites = c->sites;
  *n = c->n_sites;
  return true;
}
