/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine's attempt (coordinator/jobm_internal.h): its carriers
 * and their sites, opening it, GO, and the round machine's actions
 * (coordinator/round.h) as the job machine's steps and actions. */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/text.h"
#include "coordinator/jobm_internal.h"

/* ---- lookups ------------------------------------------------------------------------------------ */

const jm_site *xf__jm_plan_site(const xf_jobm *m, uint64_t id) {
  for (size_t i = 0; i < m->n_sites; i++)
    if (m->sites[i].id == id) return &m->sites[i];
  return NULL;
}

jm_carrier *xf__jm_carrier_of(xf_jobm *m, uint64_t id) {
  for (size_t i = 0; i < m->n_carriers; i++)
    if (m->carriers[i].id == id) return &m->carriers[i];
  return NULL;
}

bool xf__jm_carries(const jm_carrier *c, uint64_t site) {
  for (size_t i = 0; i < c->n_sites; i++)
    if (c->sites[i] == site) return true;
  return false;
}

/* The carrier whose attempt holds `site`. */
jm_carrier *xf__jm_carrier_holding(xf_jobm *m, uint64_t site) {
  for (size_t i = 0; i < m->n_carriers; i++)
    if (xf__jm_carries(&m->carriers[i], site)) return &m->carriers[i];
  return NULL;
}

bool xf__jm_pending_state(xf_participant_state s) {
  return s == XF_PARTICIPANT_INVITED || s == XF_PARTICIPANT_ACCEPTED ||
         s == XF_PARTICIPANT_REPORTING;
}

bool xf__jm_site_state(const xf_jobm *m, uint64_t site, xf_participant_state *st) {
  return xf_round_site(m->r, site, st, NULL, NULL) == XF_OK;
}

bool xf__jm_site_pending(const xf_jobm *m, uint64_t site) {
  xf_participant_state st;
  return xf__jm_site_state(m, site, &st) && xf__jm_pending_state(st);
}

bool xf__jm_carrier_pending(const xf_jobm *m, const jm_carrier *c) {
  for (size_t i = 0; i < c->n_sites; i++)
    if (xf__jm_site_pending(m, c->sites[i])) return true;
  return false;
}

bool xf__jm_attempt_open(const xf_jobm *m) {
  return m->phase == XF_JOBM_CONFIRMING || m->phase == XF_JOBM_AWAIT_GO ||
         m->phase == XF_JOBM_TRAINING || m->phase == XF_JOBM_UNMASKING;
}

/* A direct site: one that reports straight to this aggregator. */
static bool direct(const xf_jobm *m, uint64_t site) {
  const jm_site *s = xf__jm_plan_site(m, site);
  return s && s->carrier == s->id;
}

const jm_group *xf__jm_group_of(const xf_jobm *m, uint64_t site) {
  const jm_site *s = xf__jm_plan_site(m, site);
  return s && s->group < m->n_groups ? &m->groups[s->group] : NULL;
}

void xf__jm_free_carriers(xf_jobm *m) {
  for (size_t i = 0; i < m->n_carriers; i++) xf_free(m->carriers[i].sites);
  xf_free(m->carriers);
  m->carriers = NULL;
  m->n_carriers = 0;
}

void xf__jm_end_attempt(xf_jobm *m) {
  xf_saphase_free(m->sa);
  m->sa = NULL;
  xf_free(m->go_sites);
  m->go_sites = NULL;
  m->n_go_sites = 0;
  xf__jm_free_carriers(m);
  m->go_up = false;
}

static double confirm_window(const xf_jobspec *spec) {
  double w = spec->round_deadline_s / 4;
  return w < XF_JOBM_CONFIRM_MAX_S ? w : XF_JOBM_CONFIRM_MAX_S;
}

/* Tells every carrier with a task in the attempt (or the evaluation) that
 * it is over. */
void xf__jm_cancel_carriers(xf_jobm *m, const char *why) {
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state == C_GONE || (c->state == C_REPORTED && !c->eval_pending)) continue;
    /* A carrier whose every site refused has nothing to be told. */
    if (!c->eval_pending && !xf__jm_carrier_pending(m, c)) continue;
    xf_jobm_action *a = xf__jm_push(m, XF_JOBM_CANCEL, c->id);
    xf__jm_note(a, "%s", why);
    c->state = C_GONE;
    c->eval_pending = false;
  }
}

/* ---- opening an attempt -------------------------------------------------------------------------- */

jm_carrier *xf__jm_add_carrier(xf_jobm *m, uint64_t id) {
  jm_carrier *c = xf__jm_carrier_of(m, id);
  if (c) return c;
  jm_carrier *g = xf_realloc(m->carriers, (m->n_carriers + 1) * sizeof(*g));
  if (!g) {
    m->oom = true;
    return NULL;
  }
  m->carriers = g;
  c = &g[m->n_carriers++];
  memset(c, 0, sizeof(*c));
  c->id = id;
  return c;
}

void xf__jm_carrier_add_site(xf_jobm *m, jm_carrier *c, uint64_t site) {
  if (xf__jm_carries(c, site)) return;
  uint64_t *g = xf_realloc(c->sites, (c->n_sites + 1) * sizeof(*g));
  if (!g) {
    m->oom = true;
    return;
  }
  c->sites = g;
  c->sites[c->n_sites++] = site;
  if (site != c->id) c->regional = true;
}

void xf__jm_open_attempt(xf_jobm *m, double now) {
  xf__jm_end_attempt(m);
  m->privacy_refusal = XF_JOBM_REFUSED_OTHER;
  m->privacy_note[0] = '\0';
  m->refusals[0] = '\0';
  m->lost_sites = 0;
  xf_free(m->sa_mean);
  m->sa_mean = NULL;
  double window = confirm_window(&m->round_spec);
  if (m->role == XF_JOBM_RELAY) {
    /* Close early enough to forward before upstream's deadline, and
     * answer before upstream needs the answer. */
    double left = m->deadline - now;
    m->round_spec.round_deadline_s = left * 0.9 > 1 ? left * 0.9 : 1;
    xf_round *fresh = NULL;
    xf_errctx e = {0};
    if (xf_round_create(&m->round_spec, xf_round_number(m->r), 1, 1, &fresh, &e) != XF_OK) {
      xf__jm_fail_job(m, e.msg);
      return;
    }
    xf_round_free(m->r);
    m->r = fresh;
    double by = m->answer_by > now ? m->answer_by : now + left / 4;
    window = (by - now) * 0.8;
    if (window < 0.5) window = 0.5;
  }
  uint64_t *ids = xf_mallocarray(m->n_sites ? m->n_sites : 1, sizeof(uint64_t));
  if (!ids) {
    m->oom = true;
    return;
  }
  for (size_t i = 0; i < m->n_sites; i++) ids[i] = m->sites[i].id;
  xf_errctx err = {0};
  xf_err rc = xf_round_set_confirm(m->r, window, &err);
  if (rc == XF_OK) rc = xf_round_open(m->r, ids, m->n_sites, now, &err);
  xf_free(ids);
  if (rc != XF_OK) {
    xf__jm_fail_job(m, err.msg);
    return;
  }
  xf__jm_step(m, XF_JOBM_EV_OPEN, &(xf__jm_args){.now = now});
  m->msg[0] = '\0';
  size_t n;
  const uint64_t *cohort = xf_round_cohort(m->r, &n);
  xf_jobm_action *a = xf__jm_push(m, XF_JOBM_OPENED, 0);
  xf__jm_set_sites(m, a, cohort, n);
  a->deadline = xf_round_deadline(m->r);
  xf__jm_process_round(m, now);
  /* A draw that leaves a group below its fewest sites keeps the group out
   * of this attempt. */
  for (size_t gi = 0; gi < m->n_groups && m->phase == XF_JOBM_CONFIRMING; gi++) {
    const jm_group *g = &m->groups[gi];
    unsigned drawn = 0;
    for (size_t i = 0; i < n; i++) {
      const jm_site *s = xf__jm_plan_site(m, cohort[i]);
      drawn += s && s->group == gi;
    }
    if (drawn == 0 || drawn >= g->min_sites) continue;
    for (size_t i = 0; i < n && m->phase == XF_JOBM_CONFIRMING; i++) {
      const jm_site *s = xf__jm_plan_site(m, cohort[i]);
      if (!s || s->group != gi || !xf__jm_site_pending(m, cohort[i])) continue;
      xf_errctx e = {0};
      xf__jm_participant(m, cohort[i], XF_PARTICIPANT_DROPPED, 0);
      if (xf_round_site_dropped(m->r, cohort[i], &e) == XF_OK) xf__jm_process_round(m, now);
    }
  }
  if (m->phase != XF_JOBM_CONFIRMING) return;
  /* One offer per carrier, naming the sites drawn behind it. */
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state != C_OFFERED || !xf__jm_carrier_pending(m, c)) continue;
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_OFFER, c->id);
    o->deadline = xf_round_deadline(m->r);
    o->answer_by = xf_round_confirm_deadline(m->r);
    if (c->regional) xf__jm_set_sites(m, o, c->sites, c->n_sites);
  }
}

/* ---- GO ------------------------------------------------------------------------------------------ */

void xf__jm_drop_site(xf_jobm *m, uint64_t site, const char *why, double now) {
  if (!xf__jm_site_pending(m, site)) return;
  xf_text_append(m->refusals, sizeof(m->refusals), "%s", why);
  xf__jm_participant(m, site, XF_PARTICIPANT_DROPPED, 0);
  if (m->sa) xf_saphase_gone(m->sa, site, now);
  xf_errctx e = {0};
  if (xf_round_site_dropped(m->r, site, &e) == XF_OK) xf__jm_process_round(m, now);
}

/* Everybody answered and enough accepted: GO, per carrier, with secure
 * aggregation set up over the direct sites that accepted. */
void xf__jm_go(xf_jobm *m, double now) {
  uint64_t *sites = m->go_sites;
  size_t n = m->n_go_sites;
  m->go_sites = NULL;
  m->n_go_sites = 0;
  /* Groups that end up below their fewest sites cannot run this attempt. */
  for (size_t gi = 0; gi < m->n_groups && xf__jm_attempt_open(m); gi++) {
    unsigned k = 0;
    for (size_t i = 0; i < n; i++) {
      const jm_site *s = xf__jm_plan_site(m, sites[i]);
      k += s && s->group == gi && xf__jm_site_pending(m, sites[i]);
    }
    if (k == 0 || k >= m->groups[gi].min_sites) continue;
    char why[400];
    if (m->groups[gi].via)
      snprintf(why, sizeof(why),
               "only %u site%s behind the regional aggregator accepted, and its aggregate needs "
               "at least %u",
               k, k == 1 ? "" : "s", m->groups[gi].min_sites);
    else
      snprintf(why, sizeof(why),
               "only %u direct site accepted, and secure aggregation among the direct sites "
               "needs at least 2",
               k);
    for (size_t i = 0; i < n && xf__jm_attempt_open(m); i++) {
      const jm_site *s = xf__jm_plan_site(m, sites[i]);
      if (s && s->group == gi) xf__jm_drop_site(m, sites[i], why, now);
    }
  }
  if (!xf__jm_attempt_open(m)) {
    xf_free(sites);
    return;
  }
  /* Secure aggregation among the direct sites that go on. */
  uint64_t *sa_sites = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
  size_t n_sa = 0;
  if (!sa_sites) {
    xf_free(sites);
    m->oom = true;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const jm_group *g = xf__jm_group_of(m, sites[i]);
    if (g && g->secagg && direct(m, sites[i]) && xf__jm_site_pending(m, sites[i]))
      sa_sites[n_sa++] = sites[i];
  }
  if (n_sa >= 2 && !xf__jm_sa_start(m, sa_sites, n_sa, now)) {
    xf_free(sa_sites);
    xf_free(sites);
    return;
  }
  xf_free(sa_sites);
  xf__jm_step(m, XF_JOBM_EV_TRAIN, &(xf__jm_args){.now = now});
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state != C_ANSWERED || !xf__jm_carrier_pending(m, c)) continue;
    xf_jobm_action *a = xf__jm_push(m, XF_JOBM_GO, c->id);
    a->deadline = xf_round_deadline(m->r);
    if (m->sa && !c->regional && xf_saphase_setup(m->sa, c->id, &c->secagg) == XF_OK) {
      c->has_secagg = true;
      a->has_secagg = true;
      a->secagg = c->secagg;
      xf__jm_set_sites(m, a, xf_saphase_cohort(m->sa), xf_saphase_params(m->sa)->n);
    }
    c->state = C_GO;
  }
  xf_free(sites);
  if (m->sa) xf__jm_run_sa(m, now);
}

/* ---- translating the round machine's actions ----------------------------------------------------- */

/* COMMIT: form the round's result from the sites that reported (less the
 * ones the secure sum lost). */
xf_err xf__jm_commit(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_COMMIT, 0);
  o->samples = xf_round_reported(m->r) - m->lost_sites;
  return XF_OK;
}

void xf__jm_commit_failed(xf_jobm *m, const char *why, double now) {
  xf_errctx e = {0};
  xf_saphase_free(m->sa);
  m->sa = NULL;
  if (xf_round_commit_failed(m->r, why, &e) == XF_OK) xf__jm_process_round(m, now);
  else xf__jm_fail_job(m, e.msg);
}

/* PRIVACY_END: a site's spent budget fails the job, its target stops it
 * before the round (the evaluation follows); the attempt closed without a
 * result (a->attempt, journaled as retried, for a->text). A relay refuses
 * upstream. */
xf_err xf__jm_privacy_end(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                          xf_errctx *err) {
  (void)err;
  bool budget = m->privacy_refusal == XF_JOBM_REFUSED_BUDGET;
  xf__jm_cancel_carriers(m, a->text);
  xf__jm_end_attempt(m);
  if (m->role == XF_JOBM_RELAY) {
    xf_jobm_action *o = xf__jm_push(m, XF_JOBM_REFUSE_UP, 0);
    o->refusal = m->privacy_refusal;
    xf__jm_note(o, "%s", m->privacy_note);
    xf__jm_set_msg(m, "%s", m->privacy_note);
    *next = XF_JOBM_FAILED;
    return XF_OK;
  }
  xf_jobm_action *r = xf__jm_push(m, XF_JOBM_RETRY, 0);
  r->attempt = a->attempt;
  xf__jm_note(r, "%s", a->text);
  xf_jobm_action *o = xf__jm_push(m, budget ? XF_JOBM_FAIL : XF_JOBM_STOP, 0);
  if (budget)
    xf__jm_note(o, "round %u cannot run: %s", (unsigned)xf_round_number(m->r), m->privacy_note);
  else
    xf__jm_note(o, "stopped before round %u: %s", (unsigned)xf_round_number(m->r),
                m->privacy_note);
  xf__jm_set_msg(m, "%s", o->note);
  if (budget) {
    *next = XF_JOBM_FAILED;
    return XF_OK;
  }
  xf__jm_prepare_evaluation(m);
  *next = XF_JOBM_EVALUATING;
  return XF_OK;
}

/* RETRY (global): the attempt closed without a result (a->attempt, for
 * a->text); the next one is planned afresh. */
xf_err xf__jm_retry(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next, xf_errctx *err) {
  (void)next;
  (void)err;
  xf__jm_cancel_carriers(m, a->text);
  xf__jm_end_attempt(m);
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_RETRY, 0);
  o->attempt = a->attempt;
  xf__jm_note(o, "%s", a->text);
  xf__jm_set_msg(m, "%s", a->text);
  m->has_plan = false; /* decided again before the next attempt */
  return XF_OK;
}

/* ANSWER_UP (relay): upstream decides; it is told who is in (the GO held
 * until its go). */
xf_err xf__jm_answer_up(xf_jobm *m, const xf__jm_args *a, xf_jobm_phase *next,
                        xf_errctx *err) {
  (void)a;
  (void)next;
  (void)err;
  xf_jobm_action *o = xf__jm_push(m, XF_JOBM_ACCEPT_UP, 0);
  xf__jm_set_sites(m, o, m->go_sites, m->n_go_sites);
  return XF_OK;
}

/* The round's SEND_TASK: the site joins its carrier's offer. */
static void round_task(xf_jobm *m, const xf_round_action *a) {
  const jm_site *s = xf__jm_plan_site(m, a->site);
  jm_carrier *c = xf__jm_add_carrier(m, s ? s->carrier : a->site);
  if (c) xf__jm_carrier_add_site(m, c, a->site);
}

/* The round's CANCEL or DISCARD of a site: its carrier is told once none
 * of its sites is left in the attempt (a discard at once). */
static void round_withdraw(xf_jobm *m, const xf_round_action *a, double now) {
  jm_carrier *c = xf__jm_carrier_holding(m, a->site);
  if (!c || c->state == C_GONE) return;
  if (m->sa) xf_saphase_gone(m->sa, a->site, now);
  if (a->kind == XF_ROUND_ACT_CANCEL && xf__jm_carrier_pending(m, c)) return;
  xf_jobm_action *o =
      xf__jm_push(m, a->kind == XF_ROUND_ACT_CANCEL ? XF_JOBM_CANCEL : XF_JOBM_DISCARD, c->id);
  o->attempt = a->attempt;
  if (a->kind == XF_ROUND_ACT_DISCARD)
    xf__jm_note(o, "%s", a->note);
  else
    xf__jm_note(o, "round %u attempt %u closed without this %s", (unsigned)o->round,
                (unsigned)a->attempt, c->regional ? "region" : "site");
  if (c->state != C_REPORTED) c->state = C_GONE;
}

/* The round's COMMIT: the secure sum is unmasked first (only the direct
 * sites' inputs are in it); without any of those in this attempt it is not
 * needed. */
static void round_closed(xf_jobm *m, double now) {
  bool any_masked = false;
  for (size_t k = 0; k < m->n_carriers && m->sa; k++)
    any_masked |= !m->carriers[k].regional && m->carriers[k].state == C_REPORTED &&
                  xf_saphase_index(m->sa, m->carriers[k].id) != 0;
  if (!m->sa || !any_masked) {
    xf_saphase_free(m->sa);
    m->sa = NULL;
    xf__jm_step(m, XF_JOBM_EV_COMMIT, &(xf__jm_args){.now = now});
    return;
  }
  xf__jm_step(m, XF_JOBM_EV_UNMASK, &(xf__jm_args){.now = now});
  xf_saphase_close(m->sa, now);
  xf__jm_run_sa(m, now);
  /* Sites whose link is down are not waited for. */
  for (size_t k = 0; k < m->n_carriers && m->sa && m->phase == XF_JOBM_UNMASKING; k++)
    if (m->carriers[k].down && !m->carriers[k].regional) {
      xf_saphase_gone(m->sa, m->carriers[k].id, now);
      xf__jm_run_sa(m, now);
    }
}

/* A relay's attempt lost before anyone trained, said in the terms of the
 * rule that holds the region back when the sites still in it could not
 * make a releasable aggregate. True when it said so (and failed). */
static bool relay_held_back(xf_jobm *m) {
  size_t nc;
  const uint64_t *cohort = xf_round_cohort(m->r, &nc);
  unsigned possible = 0;
  for (size_t k = 0; k < nc; k++) {
    xf_participant_state st;
    possible += xf__jm_site_state(m, cohort[k], &st) &&
                (xf__jm_pending_state(st) || st == XF_PARTICIPANT_REPORTED);
  }
  xf_release_artifact art = {.contributors = possible,
                             .secagg = m->spec.secure_aggregation.enabled,
                             .privacy = m->spec.privacy.mode != XF_PRIVACY_NONE,
                             .has_epsilon = m->spec.privacy.has_target_epsilon,
                             .epsilon = m->spec.privacy.target_epsilon};
  char held[XF_JOBM_MSG_MAX];
  if (xf_release_allows(&m->release, &art, held, sizeof(held))) return false;
  char msg[XF_JOBM_MSG_MAX];
  snprintf(msg, sizeof(msg), "held back before any site trained: %.400s", held);
  if (m->refusals[0]) xf_text_append(msg, sizeof(msg), "%.500s", m->refusals);
  xf__jm_fail_job(m, msg);
  return true;
}

/* The round's RETRY or FAIL_JOB: the attempt closed without a result. */
static void round_lost(xf_jobm *m, const xf_round_action *a, double now) {
  bool last = a->kind == XF_ROUND_ACT_FAIL_JOB;
  char why[XF_JOBM_MSG_MAX];
  snprintf(why, sizeof(why), "%s", a->note);
  if (m->refusals[0]) xf_text_append(why, sizeof(why), "%s", m->refusals);
  xf__jm_args args = {.now = now, .text = why, .attempt = a->attempt};
  if (m->privacy_refusal == XF_JOBM_REFUSED_BUDGET ||
      m->privacy_refusal == XF_JOBM_REFUSED_TARGET) {
    /* A spent budget stays spent: the round is not tried again. */
    xf__jm_step(m, XF_JOBM_EV_PRIVACY_END, &args);
    return;
  }
  if (m->role == XF_JOBM_RELAY && m->has_release && relay_held_back(m)) return;
  if (m->role == XF_JOBM_RELAY || last) xf__jm_fail_job(m, why);
  else xf__jm_step(m, XF_JOBM_EV_RETRY, &args);
}

/* The round's GOs (sites[n]): held with the ones before, then GO — or, for
 * a relay before upstream's go, its answer upstream. */
static void round_answered(xf_jobm *m, const uint64_t *sites, size_t n, double now) {
  uint64_t *held = xf_realloc(m->go_sites, (m->n_go_sites + n) * sizeof(uint64_t));
  if (!held) {
    m->oom = true;
    return;
  }
  memcpy(held + m->n_go_sites, sites, n * sizeof(uint64_t));
  m->go_sites = held;
  m->n_go_sites += n;
  if (m->role == XF_JOBM_RELAY) { /* said again if upstream offers the task again */
    xf__jm_keep_up_sites(m, m->go_sites, m->n_go_sites);
    m->up_answered = true;
  }
  if (m->role == XF_JOBM_RELAY && !m->go_up)
    xf__jm_step(m, XF_JOBM_EV_ANSWER_UP, &(xf__jm_args){.now = now});
  else
    xf__jm_go(m, now);
}

/* After the round machine moved: its actions, per carrier. Reentrant: a
 * drop while going on starts a fresh pass over the new list. */
void xf__jm_process_round(xf_jobm *m, double now) {
  size_t n;
  const xf_round_action *ra = xf_round_actions(m->r, &n);
  if (!n) return;
  xf_round_action *acts = xf_mallocarray(n, sizeof(*acts));
  uint64_t *gos = acts ? xf_mallocarray(n, sizeof(uint64_t)) : NULL;
  if (!gos) {
    xf_free(acts);
    m->oom = true;
    return;
  }
  memcpy(acts, ra, n * sizeof(*acts));
  size_t n_go = 0;
  for (size_t i = 0; i < n; i++) {
    const xf_round_action *a = &acts[i];
    switch (a->kind) {
    case XF_ROUND_ACT_SEND_TASK: round_task(m, a); break;
    case XF_ROUND_ACT_CANCEL:
    case XF_ROUND_ACT_DISCARD: round_withdraw(m, a, now); break;
    case XF_ROUND_ACT_GO: gos[n_go++] = a->site; break;
    case XF_ROUND_ACT_COMMIT: round_closed(m, now); break;
    case XF_ROUND_ACT_RETRY:
    case XF_ROUND_ACT_FAIL_JOB: round_lost(m, a, now); break;
    case XF_ROUND_ACT_FINISH_JOB:
      xf__jm_step(m, XF_JOBM_EV_EVALUATE, &(xf__jm_args){.now = now});
      break;
    }
  }
  xf_free(acts);
  if (n_go && xf__jm_attempt_open(m)) round_answered(m, gos, n_go, now);
  xf_free(gos);
}

