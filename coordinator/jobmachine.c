/* SPDX-License-Identifier: Apache-2.0 */
/* The job machine (coordinator/jobmachine.h): a job's phases over the round
 * machine (sites) and the secure-aggregation phases, with carriers (sites,
 * or regional aggregators answering for the sites behind them) between
 * the sites and this aggregator. */
#include "coordinator/jobmachine.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/alloc.h"
#include "base/text.h"
#include "job/jobprivacy.h"

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

  /* the attempt (or the evaluation) */
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
};

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

/* ---- the action list ------------------------------------------------------------------------------ */

static void begin_call(xf_jobm *m) {
  m->n_acts = 0;
  m->arena_len = 0;
  m->bytes_len = 0;
  m->oom = false;
}

/* Points each action's arrays into the arenas (which may have moved while
 * they grew). */
static xf_err end_call(xf_jobm *m, xf_errctx *err) {
  for (size_t i = 0; i < m->n_acts; i++) {
    xf_jobm_action *a = &m->acts[i];
    const jm_off *o = &m->offs[i];
    a->sites = a->n_sites ? m->arena + o->sites : NULL;
    a->blob = a->blob_len ? m->bytes + o->blob : NULL;
    a->u = a->n_u ? (const uint32_t *)(const void *)(m->bytes + o->u) : NULL;
    a->from = a->n_from ? (const uint32_t *)(const void *)(m->bytes + o->from) : NULL;
    a->sigs = a->n_sigs ? m->bytes + o->sigs : NULL;
    a->certs = a->certs_len ? m->bytes + o->certs : NULL;
    a->cert_lens = a->kind == XF_JOBM_SA_KEYS && a->n_sigs
                       ? (const uint32_t *)(const void *)(m->bytes + o->cert_lens)
                       : NULL;
  }
  if (m->oom) return xf_fail(err, XF_ENOMEM, "out of memory in the job machine");
  return XF_OK;
}

static xf_jobm_action *push(xf_jobm *m, xf_jobm_action_kind kind, uint64_t carrier) {
  static xf_jobm_action sink;
  if (m->n_acts == m->cap_acts) {
    size_t cap = m->cap_acts ? 2 * m->cap_acts : 16;
    xf_jobm_action *a = xf_realloc(m->acts, cap * sizeof(*a));
    if (a) m->acts = a;
    jm_off *o = a ? xf_realloc(m->offs, cap * sizeof(*o)) : NULL;
    if (o) m->offs = o;
    if (!a || !o) {
      m->oom = true;
      memset(&sink, 0, sizeof(sink));
      return &sink;
    }
    m->cap_acts = cap;
  }
  xf_jobm_action *a = &m->acts[m->n_acts];
  memset(a, 0, sizeof(*a));
  memset(&m->offs[m->n_acts], 0, sizeof(m->offs[0]));
  m->n_acts++;
  a->kind = kind;
  a->carrier = carrier;
  a->round = xf_round_number(m->r);
  a->attempt = xf_round_attempt(m->r);
  return a;
}

static jm_off *off_of(xf_jobm *m, const xf_jobm_action *a) {
  if (m->n_acts == 0 || a < m->acts || a >= m->acts + m->n_acts) return NULL;
  return &m->offs[a - m->acts];
}

/* Gives action a n sites (copied into the arena). */
static void set_sites(xf_jobm *m, xf_jobm_action *a, const uint64_t *sites, size_t n) {
  jm_off *o = off_of(m, a);
  if (!n || !o) return;
  if (m->arena_len + n > m->arena_cap) {
    size_t cap = m->arena_cap ? m->arena_cap : 64;
    while (cap < m->arena_len + n) cap *= 2;
    uint64_t *g = xf_realloc(m->arena, cap * sizeof(*g));
    if (!g) {
      m->oom = true;
      return;
    }
    m->arena = g;
    m->arena_cap = cap;
  }
  memcpy(m->arena + m->arena_len, sites, n * sizeof(*sites));
  o->sites = m->arena_len;
  a->n_sites = n;
  m->arena_len += n;
}

/* Copies len bytes into the byte arena (8-aligned); SIZE_MAX on failure. */
static size_t put_bytes(xf_jobm *m, const void *data, size_t len) {
  size_t at = (m->bytes_len + 7) & ~(size_t)7;
  if (at + len > m->bytes_cap) {
    size_t cap = m->bytes_cap ? m->bytes_cap : 4096;
    while (cap < at + len) cap *= 2;
    uint8_t *g = xf_realloc(m->bytes, cap);
    if (!g) {
      m->oom = true;
      return SIZE_MAX;
    }
    m->bytes = g;
    m->bytes_cap = cap;
  }
  if (len) memcpy(m->bytes + at, data, len);
  m->bytes_len = at + len;
  return at;
}

static void note(xf_jobm_action *a, const char *fmt, ...) XF_PRINTF(2, 3);
static void note(xf_jobm_action *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(a->note, sizeof(a->note), fmt, ap);
  va_end(ap);
}

static void set_msg(xf_jobm *m, const char *fmt, ...) XF_PRINTF(2, 3);
static void set_msg(xf_jobm *m, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->msg, sizeof(m->msg), fmt, ap);
  va_end(ap);
}

/* ---- what goes upstream (relay) ----------------------------------------------------------------- */

/* The sites the relay names upstream: those that accepted, then those its
 * aggregate sums. */
static void keep_up_sites(xf_jobm *m, const uint64_t *sites, size_t n) {
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
  xf_jobm_action *a = push(m, XF_JOBM_FORWARD, 0);
  set_sites(m, a, m->up_sites, m->n_up_sites);
  a->weight = m->up_weight;
  a->resend = m->forwarded;
  m->forward_due = false;
  m->forwarded = true;
}

/* ---- lookups ------------------------------------------------------------------------------------ */

static const jm_site *plan_site(const xf_jobm *m, uint64_t id) {
  for (size_t i = 0; i < m->n_sites; i++)
    if (m->sites[i].id == id) return &m->sites[i];
  return NULL;
}

static jm_carrier *carrier_of(xf_jobm *m, uint64_t id) {
  for (size_t i = 0; i < m->n_carriers; i++)
    if (m->carriers[i].id == id) return &m->carriers[i];
  return NULL;
}

static bool carries(const jm_carrier *c, uint64_t site) {
  for (size_t i = 0; i < c->n_sites; i++)
    if (c->sites[i] == site) return true;
  return false;
}

/* The carrier whose attempt holds `site`. */
static jm_carrier *carrier_holding(xf_jobm *m, uint64_t site) {
  for (size_t i = 0; i < m->n_carriers; i++)
    if (carries(&m->carriers[i], site)) return &m->carriers[i];
  return NULL;
}

static bool pending_state(xf_participant_state s) {
  return s == XF_PARTICIPANT_INVITED || s == XF_PARTICIPANT_ACCEPTED ||
         s == XF_PARTICIPANT_REPORTING;
}

static bool site_state(const xf_jobm *m, uint64_t site, xf_participant_state *st) {
  return xf_round_site(m->r, site, st, NULL, NULL) == XF_OK;
}

static bool site_pending(const xf_jobm *m, uint64_t site) {
  xf_participant_state st;
  return site_state(m, site, &st) && pending_state(st);
}

static bool carrier_pending(const xf_jobm *m, const jm_carrier *c) {
  for (size_t i = 0; i < c->n_sites; i++)
    if (site_pending(m, c->sites[i])) return true;
  return false;
}

static bool attempt_open(const xf_jobm *m) {
  return m->phase == XF_JOBM_CONFIRMING || m->phase == XF_JOBM_AWAIT_GO ||
         m->phase == XF_JOBM_TRAINING || m->phase == XF_JOBM_UNMASKING;
}

/* A direct site: one that reports straight to this aggregator. */
static bool direct(const xf_jobm *m, uint64_t site) {
  const jm_site *s = plan_site(m, site);
  return s && s->carrier == s->id;
}

static const jm_group *group_of(const xf_jobm *m, uint64_t site) {
  const jm_site *s = plan_site(m, site);
  return s && s->group < m->n_groups ? &m->groups[s->group] : NULL;
}

static void free_carriers(xf_jobm *m) {
  for (size_t i = 0; i < m->n_carriers; i++) xf_free(m->carriers[i].sites);
  xf_free(m->carriers);
  m->carriers = NULL;
  m->n_carriers = 0;
}

static void end_attempt(xf_jobm *m) {
  xf_saphase_free(m->sa);
  m->sa = NULL;
  xf_free(m->go_sites);
  m->go_sites = NULL;
  m->n_go_sites = 0;
  free_carriers(m);
  m->go_up = false;
}

static void participant(xf_jobm *m, uint64_t site, xf_participant_state st, uint64_t samples) {
  xf_jobm_action *a = push(m, XF_JOBM_PARTICIPANT, 0);
  a->site = site;
  a->state = st;
  a->samples = samples;
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

static double confirm_window(const xf_jobspec *spec) {
  double w = spec->round_deadline_s / 4;
  return w < XF_JOBM_CONFIRM_MAX_S ? w : XF_JOBM_CONFIRM_MAX_S;
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
  end_attempt(m);
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

/* Tells every carrier with a task in the attempt (or the evaluation) that
 * it is over. */
static void cancel_carriers(xf_jobm *m, const char *why) {
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state == C_GONE || (c->state == C_REPORTED && !c->eval_pending)) continue;
    /* A carrier whose every site refused has nothing to be told. */
    if (!c->eval_pending && !carrier_pending(m, c)) continue;
    xf_jobm_action *a = push(m, XF_JOBM_CANCEL, c->id);
    note(a, "%s", why);
    c->state = C_GONE;
    c->eval_pending = false;
  }
}

static void fail(xf_jobm *m, const char *why) {
  cancel_carriers(m, why);
  end_attempt(m);
  set_msg(m, "%s", why);
  m->phase = XF_JOBM_FAILED;
  if (m->role == XF_JOBM_RELAY) {
    xf_jobm_action *a = push(m, XF_JOBM_REFUSE_UP, 0);
    a->refusal = strncmp(why, "held back", 9) == 0 ? XF_JOBM_REFUSED_POLICY : XF_JOBM_REFUSED_OTHER;
    note(a, "%s", why);
    return;
  }
  xf_jobm_action *a = push(m, XF_JOBM_FAIL, 0);
  note(a, "%s", why);
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

static void process_round(xf_jobm *m, double now);
static void open_attempt(xf_jobm *m, double now);
static void start_evaluation(xf_jobm *m, double now);
static void offer_evaluation(xf_jobm *m, double now);

/* Noise in the sum accounted at the coordinator: stop before a round that
 * would take epsilon past the target. True when the job stopped. */
static bool target_stop(xf_jobm *m, double now) {
  const xf_privacy_spec *pv = &m->spec.privacy;
  double eps;
  if (m->role != XF_JOBM_GLOBAL || !pv->has_target_epsilon ||
      !xf_job_epsilon(&m->spec, xf_round_number(m->r), &eps) || !(eps > pv->target_epsilon))
    return false;
  xf_jobm_action *a = push(m, XF_JOBM_STOP, 0);
  note(a,
       "stopped before round %u: it would bring epsilon to %.4g, above the target %.4g (delta "
       "%g)",
       (unsigned)xf_round_number(m->r), eps, pv->target_epsilon, pv->delta);
  set_msg(m, "%s", a->note);
  start_evaluation(m, now);
  return true;
}

/* A relay tells upstream, once, which of the sites it named cannot take part. */
static void tell_absent(xf_jobm *m) {
  if (m->role != XF_JOBM_RELAY || m->absent_told) return;
  m->absent_told = true;
  for (size_t i = 0; i < m->n_absent; i++) {
    xf_jobm_action *a = push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = m->absent[i].id;
    a->refusal = XF_JOBM_REFUSED_OTHER;
    note(a, "%s", m->absent[i].why);
  }
  /* Named but unknown here at all. */
  for (size_t k = 0; k < m->n_cohort; k++) {
    bool known = plan_site(m, m->cohort[k]) != NULL;
    for (size_t i = 0; i < m->n_absent && !known; i++) known = m->absent[i].id == m->cohort[k];
    if (known) continue;
    xf_jobm_action *a = push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = m->cohort[k];
    a->refusal = XF_JOBM_REFUSED_OTHER;
    note(a, "not connected to its regional aggregator, or holds no data of the job");
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
      fail(m, why);
      return;
    }
    open_attempt(m, now);
    return;
  }
  if (m->verdict != XF_ADMIT_RUNS) return; /* the message was set with the plan */
  size_t eligible = m->n_sites;
  if (now < m->resume_until && eligible < m->resume_wait_for) {
    set_msg(m, "resuming: waiting for the %u sites of the interrupted round (%zu back)",
            (unsigned)m->resume_wait_for, eligible);
    return;
  }
  m->resume_until = 0;
  open_attempt(m, now);
}

xf_err xf_jobm_plan(xf_jobm *m, const xf_admission *plan, double now, xf_errctx *err) {
  begin_call(m);
  if (take_plan(m, plan) != XF_OK) return xf_fail(err, XF_ENOMEM, "out of memory taking the plan");
  bool stop_policy = plan->verdict == XF_ADMIT_DENIED || plan->verdict == XF_ADMIT_UNRUNNABLE;
  if (m->role == XF_JOBM_GLOBAL) {
    if (m->phase == XF_JOBM_PAUSED && !stop_policy) {
      m->phase = XF_JOBM_WAITING;
      push(m, XF_JOBM_RESUME, 0);
      m->msg[0] = '\0';
    }
    if (m->phase == XF_JOBM_WAITING && stop_policy) {
      m->phase = XF_JOBM_PAUSED;
      xf_jobm_action *a = push(m, XF_JOBM_PAUSE, 0);
      note(a, "paused before round %u: %s", (unsigned)xf_round_number(m->r), plan->reason);
      set_msg(m, "%s", a->note);
    } else if (m->phase == XF_JOBM_PAUSED) {
      set_msg(m, "paused before round %u: %s", (unsigned)xf_round_number(m->r), plan->reason);
    } else if (m->phase == XF_JOBM_WAITING && plan->verdict != XF_ADMIT_RUNS) {
      set_msg(m, "waiting for sites: %s", plan->reason);
    } else if (m->phase == XF_JOBM_WAITING) {
      m->msg[0] = '\0';
    }
  }
  if (m->phase == XF_JOBM_WAITING) try_open(m, now);
  else if (m->phase == XF_JOBM_EVALUATING && !m->eval_started) offer_evaluation(m, now);
  return end_call(m, err);
}

/* ---- opening an attempt -------------------------------------------------------------------------- */

static jm_carrier *add_carrier(xf_jobm *m, uint64_t id) {
  jm_carrier *c = carrier_of(m, id);
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

static void carrier_add_site(xf_jobm *m, jm_carrier *c, uint64_t site) {
  if (carries(c, site)) return;
  uint64_t *g = xf_realloc(c->sites, (c->n_sites + 1) * sizeof(*g));
  if (!g) {
    m->oom = true;
    return;
  }
  c->sites = g;
  c->sites[c->n_sites++] = site;
  if (site != c->id) c->regional = true;
}

static void open_attempt(xf_jobm *m, double now) {
  end_attempt(m);
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
      fail(m, e.msg);
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
    fail(m, err.msg);
    return;
  }
  m->phase = XF_JOBM_CONFIRMING;
  m->msg[0] = '\0';
  size_t n;
  const uint64_t *cohort = xf_round_cohort(m->r, &n);
  xf_jobm_action *a = push(m, XF_JOBM_OPENED, 0);
  set_sites(m, a, cohort, n);
  a->deadline = xf_round_deadline(m->r);
  process_round(m, now);
  /* A draw that leaves a group below its fewest sites keeps the group out
   * of this attempt. */
  for (size_t gi = 0; gi < m->n_groups && m->phase == XF_JOBM_CONFIRMING; gi++) {
    const jm_group *g = &m->groups[gi];
    unsigned drawn = 0;
    for (size_t i = 0; i < n; i++) {
      const jm_site *s = plan_site(m, cohort[i]);
      drawn += s && s->group == gi;
    }
    if (drawn == 0 || drawn >= g->min_sites) continue;
    for (size_t i = 0; i < n && m->phase == XF_JOBM_CONFIRMING; i++) {
      const jm_site *s = plan_site(m, cohort[i]);
      if (!s || s->group != gi || !site_pending(m, cohort[i])) continue;
      xf_errctx e = {0};
      participant(m, cohort[i], XF_PARTICIPANT_DROPPED, 0);
      if (xf_round_site_dropped(m->r, cohort[i], &e) == XF_OK) process_round(m, now);
    }
  }
  if (m->phase != XF_JOBM_CONFIRMING) return;
  /* One offer per carrier, naming the sites drawn behind it. */
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state != C_OFFERED || !carrier_pending(m, c)) continue;
    xf_jobm_action *o = push(m, XF_JOBM_OFFER, c->id);
    o->deadline = xf_round_deadline(m->r);
    o->answer_by = xf_round_confirm_deadline(m->r);
    if (c->regional) set_sites(m, o, c->sites, c->n_sites);
  }
}

/* ---- secure aggregation among the direct sites ---------------------------------------------------- */

static void run_sa(xf_jobm *m, double now);

/* Starts secure aggregation over the direct sites told GO (n >= 2). */
static bool sa_start(xf_jobm *m, const uint64_t *sites, size_t n, double now) {
  uint64_t *w = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
  if (!w) {
    m->oom = true;
    return false;
  }
  for (size_t i = 0; i < n; i++) {
    const jm_site *s = plan_site(m, sites[i]);
    w[i] = s ? s->records : 1;
  }
  uint8_t graph_seed[32];
  randombytes_buf(graph_seed, sizeof(graph_seed));
  uint64_t subset_seed;
  randombytes_buf(&subset_seed, sizeof(subset_seed));
  double phase = m->round_spec.round_deadline_s / 4;
  xf_saphase_config cfg = {
      .n = (uint32_t)n,
      .sites = sites,
      .weights = xf_job_noise_in_sum(&m->spec) ? NULL : w,
      .threshold = m->spec.secure_aggregation.threshold,
      .bits = m->spec.secure_aggregation.bits,
      .n_params = m->n_params,
      .clip = m->spec.privacy.clip,
      .noise_multiplier = m->spec.privacy.mode == XF_PRIVACY_DISTRIBUTED
                              ? m->spec.privacy.noise_multiplier
                              : 0,
      .quant_bits = m->spec.compression.uplink.quant_bits,
      .topk_fraction = m->spec.compression.uplink.topk_fraction,
      .phase_s = phase < XF_SAPHASE_PHASE_MAX_S ? phase : XF_SAPHASE_PHASE_MAX_S,
      .graph_seed = graph_seed,
      .subset_seed = subset_seed};
  xf_errctx err = {0};
  xf_err rc = xf_saphase_create(&cfg, now, &m->sa, &err);
  xf_free(w);
  sodium_memzero(graph_seed, sizeof(graph_seed));
  if (rc != XF_OK) {
    char why[600];
    snprintf(why, sizeof(why), "secure aggregation cannot run: %s", err.msg);
    fail(m, why);
    return false;
  }
  return true;
}

/* ---- GO ------------------------------------------------------------------------------------------ */

static void drop_site(xf_jobm *m, uint64_t site, const char *why, double now) {
  if (!site_pending(m, site)) return;
  xf_text_append(m->refusals, sizeof(m->refusals), "%s", why);
  participant(m, site, XF_PARTICIPANT_DROPPED, 0);
  if (m->sa) xf_saphase_gone(m->sa, site, now);
  xf_errctx e = {0};
  if (xf_round_site_dropped(m->r, site, &e) == XF_OK) process_round(m, now);
}

/* Everybody answered and enough accepted: GO, per carrier, with secure
 * aggregation set up over the direct sites that accepted. */
static void go(xf_jobm *m, double now) {
  uint64_t *sites = m->go_sites;
  size_t n = m->n_go_sites;
  m->go_sites = NULL;
  m->n_go_sites = 0;
  /* Groups that end up below their fewest sites cannot run this attempt. */
  for (size_t gi = 0; gi < m->n_groups && attempt_open(m); gi++) {
    unsigned k = 0;
    for (size_t i = 0; i < n; i++) {
      const jm_site *s = plan_site(m, sites[i]);
      k += s && s->group == gi && site_pending(m, sites[i]);
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
    for (size_t i = 0; i < n && attempt_open(m); i++) {
      const jm_site *s = plan_site(m, sites[i]);
      if (s && s->group == gi) drop_site(m, sites[i], why, now);
    }
  }
  if (!attempt_open(m)) {
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
    const jm_group *g = group_of(m, sites[i]);
    if (g && g->secagg && direct(m, sites[i]) && site_pending(m, sites[i]))
      sa_sites[n_sa++] = sites[i];
  }
  if (n_sa >= 2 && !sa_start(m, sa_sites, n_sa, now)) {
    xf_free(sa_sites);
    xf_free(sites);
    return;
  }
  xf_free(sa_sites);
  m->phase = XF_JOBM_TRAINING;
  for (size_t i = 0; i < m->n_carriers; i++) {
    jm_carrier *c = &m->carriers[i];
    if (c->state != C_ANSWERED || !carrier_pending(m, c)) continue;
    xf_jobm_action *a = push(m, XF_JOBM_GO, c->id);
    a->deadline = xf_round_deadline(m->r);
    if (m->sa && !c->regional && xf_saphase_setup(m->sa, c->id, &c->secagg) == XF_OK) {
      c->has_secagg = true;
      a->has_secagg = true;
      a->secagg = c->secagg;
      set_sites(m, a, xf_saphase_cohort(m->sa), xf_saphase_params(m->sa)->n);
    }
    c->state = C_GO;
  }
  xf_free(sites);
  if (m->sa) run_sa(m, now);
}

/* ---- the secure-aggregation phases' actions ---------------------------------------------------- */

static void commit_now(xf_jobm *m) {
  m->phase = XF_JOBM_COMMITTING;
  xf_jobm_action *o = push(m, XF_JOBM_COMMIT, 0);
  o->samples = xf_round_reported(m->r) - m->lost_sites;
}

/* The round's result cannot be formed: another attempt or the end. */
static void commit_failed(xf_jobm *m, const char *why, double now) {
  xf_errctx e = {0};
  xf_saphase_free(m->sa);
  m->sa = NULL;
  if (xf_round_commit_failed(m->r, why, &e) == XF_OK) process_round(m, now);
  else fail(m, e.msg);
}

static void run_sa(xf_jobm *m, double now) {
  size_t n;
  const xf_saphase_action *sa = xf_saphase_actions(m->sa, &n);
  if (!n) return;
  /* Copy what the actions point to: a drop below calls the phases again. */
  xf_saphase_action *list = xf_mallocarray(n, sizeof(*list));
  if (!list) {
    m->oom = true;
    return;
  }
  memcpy(list, sa, n * sizeof(*list));
  /* Every SEND_KEYS of a call carries the same keys: copied once. */
  size_t keys_at = SIZE_MAX, sigs_at = SIZE_MAX, certs_at = SIZE_MAX, lens_at = SIZE_MAX;
  for (size_t i = 0; i < n; i++) {
    xf_saphase_action *a = &list[i];
    switch (a->kind) {
    case XF_SAPHASE_ACT_SEND_KEYS: {
      xf_jobm_action *o = push(m, XF_JOBM_SA_KEYS, a->site);
      size_t members = a->adverts_len / XF_SECAGG_ADVERT_BYTES;
      if (keys_at == SIZE_MAX) {
        keys_at = put_bytes(m, a->adverts, a->adverts_len);
        sigs_at = put_bytes(m, a->sigs, members * XF_SECAGG_SIG_BYTES);
        certs_at = put_bytes(m, a->certs, a->certs_len);
        lens_at = put_bytes(m, a->cert_lens, members * sizeof(uint32_t));
      }
      jm_off *off = off_of(m, o);
      if (keys_at != SIZE_MAX && sigs_at != SIZE_MAX && certs_at != SIZE_MAX &&
          lens_at != SIZE_MAX && off) {
        off->blob = keys_at;
        o->blob_len = a->adverts_len;
        off->sigs = sigs_at;
        o->n_sigs = members;
        off->certs = certs_at;
        o->certs_len = a->certs_len;
        off->cert_lens = lens_at;
      }
      break;
    }
    case XF_SAPHASE_ACT_SEND_ROUTED: {
      xf_jobm_action *o = push(m, XF_JOBM_SA_ROUTED, a->site);
      jm_off *off = off_of(m, o);
      size_t u = put_bytes(m, a->u2, a->n_u2 * sizeof(uint32_t));
      size_t from = put_bytes(m, a->from, a->n_cts * sizeof(uint32_t));
      size_t sigs = put_bytes(m, a->sigs, a->n_cts * XF_SECAGG_SIG_BYTES);
      size_t blob = put_bytes(m, NULL, 0);
      for (size_t k = 0; k < a->n_cts && blob != SIZE_MAX; k++) {
        size_t at = put_bytes(m, a->cts[k], XF_SECAGG_SHARE_BYTES);
        if (at == SIZE_MAX) blob = SIZE_MAX;
        else if (k == 0) blob = at;
      }
      if (off && u != SIZE_MAX && from != SIZE_MAX && sigs != SIZE_MAX && blob != SIZE_MAX) {
        off->u = u;
        off->from = from;
        off->sigs = sigs;
        off->blob = blob;
        o->n_u = a->n_u2;
        o->n_from = a->n_cts;
        o->n_sigs = a->n_cts;
        o->blob_len = a->n_cts * XF_SECAGG_SHARE_BYTES;
      }
      break;
    }
    case XF_SAPHASE_ACT_SEND_CHECK: {
      xf_jobm_action *o = push(m, XF_JOBM_SA_CHECK, a->site);
      size_t u = put_bytes(m, a->u3, a->n_u3 * sizeof(uint32_t));
      jm_off *off = off_of(m, o);
      if (off && u != SIZE_MAX) {
        off->u = u;
        o->n_u = a->n_u3;
      }
      break;
    }
    case XF_SAPHASE_ACT_SEND_UNMASK: {
      xf_jobm_action *o = push(m, XF_JOBM_SA_UNMASK, a->site);
      size_t u = put_bytes(m, a->u3, a->n_u3 * sizeof(uint32_t));
      size_t from = put_bytes(m, a->signers, a->n_signers * sizeof(uint32_t));
      size_t sigs = put_bytes(m, a->sigs, a->n_signers * XF_SECAGG_SIG_BYTES);
      jm_off *off = off_of(m, o);
      if (off && u != SIZE_MAX && from != SIZE_MAX && sigs != SIZE_MAX) {
        off->u = u;
        o->n_u = a->n_u3;
        off->from = from;
        o->n_from = a->n_signers;
        off->sigs = sigs;
        o->n_sigs = a->n_signers;
      }
      break;
    }
    default: break;
    }
  }
  /* Then what changes the round: drops, and the end of the unmasking. */
  for (size_t i = 0; i < n; i++) {
    xf_saphase_action *a = &list[i];
    if (a->kind == XF_SAPHASE_ACT_DROP) {
      jm_carrier *c = carrier_holding(m, a->site);
      char why[300];
      snprintf(why, sizeof(why), "secure aggregation: %s", a->why);
      if (c && c->state != C_GONE && c->state != C_REPORTED) {
        xf_jobm_action *o = push(m, XF_JOBM_CANCEL, c->id);
        note(o, "%s", why);
        c->state = C_GONE;
      }
      if (m->phase == XF_JOBM_UNMASKING) continue; /* the sum goes on without it */
      drop_site(m, a->site, why, now);
    } else if (a->kind == XF_SAPHASE_ACT_DONE && m->phase == XF_JOBM_UNMASKING) {
      const uint64_t *surv;
      size_t ns;
      xf_errctx e = {0};
      xf_free(m->sa_mean);
      m->sa_mean = NULL;
      if (xf_saphase_take_mean(m->sa, &m->sa_mean, &m->sa_weight, &surv, &ns, &e) != XF_OK) {
        commit_failed(m, e.msg, now);
        break;
      }
      /* Direct sites that reported but are not among the survivors are
       * not in the sum. */
      uint32_t reported_direct = 0;
      for (size_t k = 0; k < m->n_carriers; k++)
        if (!m->carriers[k].regional && m->carriers[k].state == C_REPORTED) reported_direct++;
      m->lost_sites = reported_direct > ns ? reported_direct - (uint32_t)ns : 0;
      m->sa_sites = (uint32_t)ns;
      xf_saphase_free(m->sa);
      m->sa = NULL;
      if (xf_round_reported(m->r) - m->lost_sites < m->round_spec.min_sites)
        commit_failed(m, "too few sites survived secure aggregation", now);
      else
        commit_now(m);
      break;
    } else if (a->kind == XF_SAPHASE_ACT_FAILED && m->phase == XF_JOBM_UNMASKING) {
      char why[300];
      snprintf(why, sizeof(why), "%s", a->why);
      /* The direct sites' updates are lost; the regional ones may do. */
      uint32_t reported_direct = 0;
      for (size_t k = 0; k < m->n_carriers; k++)
        if (!m->carriers[k].regional && m->carriers[k].state == C_REPORTED) reported_direct++;
      m->lost_sites = reported_direct;
      xf_saphase_free(m->sa);
      m->sa = NULL;
      if (xf_round_reported(m->r) - m->lost_sites < m->round_spec.min_sites)
        commit_failed(m, why, now);
      else
        commit_now(m);
      break;
    } else if (a->kind == XF_SAPHASE_ACT_FAILED) {
      char why[400];
      snprintf(why, sizeof(why), "secure aggregation failed: %s", a->why);
      xf_text_append(m->refusals, sizeof(m->refusals), "%s", why);
    }
  }
  xf_free(list);
}

/* ---- translating the round machine's actions ----------------------------------------------------- */

static void privacy_end(xf_jobm *m, bool last, uint32_t attempt, const char *why, double now) {
  bool budget = m->privacy_refusal == XF_JOBM_REFUSED_BUDGET;
  cancel_carriers(m, why);
  end_attempt(m);
  if (m->role == XF_JOBM_RELAY) {
    xf_jobm_action *o = push(m, XF_JOBM_REFUSE_UP, 0);
    o->refusal = m->privacy_refusal;
    note(o, "%s", m->privacy_note);
    set_msg(m, "%s", m->privacy_note);
    m->phase = XF_JOBM_FAILED;
    return;
  }
  /* The attempt closed without a result (journaled as retried), then the job ends. */
  xf_jobm_action *r = push(m, XF_JOBM_RETRY, 0);
  r->attempt = attempt;
  note(r, "%s", why);
  (void)last;
  if (budget) {
    xf_jobm_action *o = push(m, XF_JOBM_FAIL, 0);
    note(o, "round %u cannot run: %s", (unsigned)xf_round_number(m->r), m->privacy_note);
    set_msg(m, "%s", o->note);
    m->phase = XF_JOBM_FAILED;
    return;
  }
  xf_jobm_action *o = push(m, XF_JOBM_STOP, 0);
  note(o, "stopped before round %u: %s", (unsigned)xf_round_number(m->r), m->privacy_note);
  set_msg(m, "%s", o->note);
  start_evaluation(m, now);
}

/* After the round machine moved: its actions, per carrier. Reentrant: a
 * drop while going on starts a fresh pass over the new list. */
static void process_round(xf_jobm *m, double now) {
  size_t n;
  const xf_round_action *ra = xf_round_actions(m->r, &n);
  if (!n) return;
  xf_round_action *acts = xf_mallocarray(n, sizeof(*acts));
  if (!acts) {
    m->oom = true;
    return;
  }
  memcpy(acts, ra, n * sizeof(*acts));
  uint64_t *gos = xf_mallocarray(n, sizeof(uint64_t));
  size_t n_go = 0;
  if (!gos) {
    xf_free(acts);
    m->oom = true;
    return;
  }
  for (size_t i = 0; i < n; i++) {
    const xf_round_action *a = &acts[i];
    switch (a->kind) {
    case XF_ROUND_ACT_SEND_TASK: {
      const jm_site *s = plan_site(m, a->site);
      jm_carrier *c = add_carrier(m, s ? s->carrier : a->site);
      if (c) carrier_add_site(m, c, a->site);
      break;
    }
    case XF_ROUND_ACT_CANCEL:
    case XF_ROUND_ACT_DISCARD: {
      jm_carrier *c = carrier_holding(m, a->site);
      if (!c || c->state == C_GONE) break;
      if (m->sa) xf_saphase_gone(m->sa, a->site, now);
      /* A regional carrier goes when none of its sites is left in it. */
      if (a->kind == XF_ROUND_ACT_CANCEL && carrier_pending(m, c)) break;
      xf_jobm_action *o =
          push(m, a->kind == XF_ROUND_ACT_CANCEL ? XF_JOBM_CANCEL : XF_JOBM_DISCARD, c->id);
      o->attempt = a->attempt;
      if (a->kind == XF_ROUND_ACT_DISCARD)
        note(o, "%s", a->note);
      else
        note(o, "round %u attempt %u closed without this %s", (unsigned)o->round,
             (unsigned)a->attempt, c->regional ? "region" : "site");
      if (c->state != C_REPORTED) c->state = C_GONE;
      break;
    }
    case XF_ROUND_ACT_GO: gos[n_go++] = a->site; break;
    case XF_ROUND_ACT_COMMIT: {
      /* The secure sum is unmasked first (only the direct sites' inputs are
       * in it); without any of those in this attempt it is not needed. */
      bool any_masked = false;
      for (size_t k = 0; k < m->n_carriers && m->sa; k++)
        any_masked |= !m->carriers[k].regional && m->carriers[k].state == C_REPORTED &&
                      xf_saphase_index(m->sa, m->carriers[k].id) != 0;
      if (m->sa && any_masked) {
        m->phase = XF_JOBM_UNMASKING;
        xf_saphase_close(m->sa, now);
        run_sa(m, now);
        /* Sites whose link is down are not waited for. */
        for (size_t k = 0; k < m->n_carriers && m->sa && m->phase == XF_JOBM_UNMASKING; k++)
          if (m->carriers[k].down && !m->carriers[k].regional) {
            xf_saphase_gone(m->sa, m->carriers[k].id, now);
            run_sa(m, now);
          }
      } else {
        xf_saphase_free(m->sa);
        m->sa = NULL;
        commit_now(m);
      }
      break;
    }
    case XF_ROUND_ACT_RETRY:
    case XF_ROUND_ACT_FAIL_JOB: {
      bool last = a->kind == XF_ROUND_ACT_FAIL_JOB;
      char why[XF_JOBM_MSG_MAX];
      snprintf(why, sizeof(why), "%s", a->note);
      if (m->refusals[0]) xf_text_append(why, sizeof(why), "%s", m->refusals);
      if (m->privacy_refusal == XF_JOBM_REFUSED_BUDGET ||
          m->privacy_refusal == XF_JOBM_REFUSED_TARGET) {
        /* A spent budget stays spent: the round is not tried again. */
        privacy_end(m, last, a->attempt, why, now);
        break;
      }
      if (m->role == XF_JOBM_RELAY && m->has_release) {
        /* Say it in the terms of the rule that holds the region back. */
        /* The sites that had not refused or left: what the aggregate could hold. */
        size_t nc;
        const uint64_t *cohort = xf_round_cohort(m->r, &nc);
        unsigned possible = 0;
        for (size_t k = 0; k < nc; k++) {
          xf_participant_state st;
          possible += site_state(m, cohort[k], &st) &&
                      (pending_state(st) || st == XF_PARTICIPANT_REPORTED);
        }
        xf_release_artifact art = {.contributors = possible,
                                   .secagg = m->spec.secure_aggregation.enabled,
                                   .privacy = m->spec.privacy.mode != XF_PRIVACY_NONE,
                                   .has_epsilon = m->spec.privacy.has_target_epsilon,
                                   .epsilon = m->spec.privacy.target_epsilon};
        char held[XF_JOBM_MSG_MAX];
        if (!xf_release_allows(&m->release, &art, held, sizeof(held))) {
          char msg[XF_JOBM_MSG_MAX];
          snprintf(msg, sizeof(msg), "held back before any site trained: %.400s", held);
          if (m->refusals[0]) xf_text_append(msg, sizeof(msg), "%.500s", m->refusals);
          fail(m, msg);
          break;
        }
      }
      if (m->role == XF_JOBM_RELAY || last) {
        fail(m, why);
        break;
      }
      cancel_carriers(m, why);
      end_attempt(m);
      xf_jobm_action *o = push(m, XF_JOBM_RETRY, 0);
      o->attempt = a->attempt;
      note(o, "%s", why);
      set_msg(m, "%s", why);
      m->phase = XF_JOBM_WAITING;
      m->has_plan = false; /* decided again before the next attempt */
      break;
    }
    case XF_ROUND_ACT_FINISH_JOB: start_evaluation(m, now); break;
    }
  }
  xf_free(acts);
  if (n_go && attempt_open(m)) {
    uint64_t *held = xf_realloc(m->go_sites, (m->n_go_sites + n_go) * sizeof(uint64_t));
    if (!held) {
      m->oom = true;
    } else {
      memcpy(held + m->n_go_sites, gos, n_go * sizeof(uint64_t));
      m->go_sites = held;
      m->n_go_sites += n_go;
      if (m->role == XF_JOBM_RELAY) { /* said again if upstream offers the task again */
        keep_up_sites(m, m->go_sites, m->n_go_sites);
        m->up_answered = true;
      }
      if (m->role == XF_JOBM_RELAY && !m->go_up) {
        /* Upstream decides: tell it who is in and wait for its go. */
        m->phase = XF_JOBM_AWAIT_GO;
        xf_jobm_action *o = push(m, XF_JOBM_ACCEPT_UP, 0);
        set_sites(m, o, m->go_sites, m->n_go_sites);
      } else {
        go(m, now);
      }
    }
  }
  xf_free(gos);
}

/* ---- events ------------------------------------------------------------------------------------- */

static bool in_list(const uint64_t *v, size_t n, uint64_t x) {
  for (size_t i = 0; i < n; i++)
    if (v[i] == x) return true;
  return false;
}

xf_err xf_jobm_accepted(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n, double now,
                        xf_errctx *err) {
  begin_call(m);
  if (m->phase == XF_JOBM_EVALUATING) {
    jm_carrier *e = carrier_of(m, carrier);
    if (e && e->eval_pending) return end_call(m, err); /* it takes the evaluation */
  }
  jm_carrier *c = attempt_open(m) ? carrier_of(m, carrier) : NULL;
  if (!c || c->state == C_GONE) {
    /* Nothing of it is open here: it must let the task go. */
    xf_jobm_action *a = push(m, XF_JOBM_CANCEL, carrier);
    note(a, "no task of this job is open for it here");
    return end_call(m, err);
  }
  if (c->state != C_OFFERED) {
    /* Answered again after a resend: it may have lost its GO with the link. */
    if (c->state == C_GO) {
      xf_jobm_action *a = push(m, XF_JOBM_GO, c->id);
      a->deadline = xf_round_deadline(m->r);
      a->has_secagg = c->has_secagg;
      a->secagg = c->secagg;
    }
    return end_call(m, err);
  }
  c->state = C_ANSWERED;
  uint64_t self = carrier;
  if (!c->regional) {
    sites = &self;
    n = 1;
  }
  /* Its sites that it does not name are out (a regional's refusals came
   * before, one per site). A drop may close the attempt, which frees the
   * carriers: the attempt is checked before c is read again. */
  for (size_t i = 0; attempt_open(m) && i < c->n_sites; i++) {
    uint64_t s = c->sites[i];
    xf_participant_state st;
    if (!site_state(m, s, &st) || st != XF_PARTICIPANT_INVITED) continue;
    if (in_list(sites, n, s)) continue;
    drop_site(m, s, "its regional aggregator did not answer for it", now);
  }
  for (size_t i = 0; i < n && attempt_open(m); i++) {
    if (!carries(c, sites[i])) continue;
    xf_participant_state st;
    if (!site_state(m, sites[i], &st) || st != XF_PARTICIPANT_INVITED) continue;
    xf_errctx e = {0};
    participant(m, sites[i], XF_PARTICIPANT_ACCEPTED, 0);
    if (xf_round_site_accepted(m->r, sites[i], &e) == XF_OK) process_round(m, now);
  }
  return end_call(m, err);
}

static void note_refusal(xf_jobm *m, uint64_t site, xf_jobm_refusal why, const char *details) {
  const char *d = details && *details ? details : "refused";
  char who[32];
  snprintf(who, sizeof(who), "site %llu", (unsigned long long)site);
  (void)who;
  xf_text_append(m->refusals, sizeof(m->refusals), "%s", d);
  if (why == XF_JOBM_REFUSED_BUDGET || why == XF_JOBM_REFUSED_TARGET) {
    if (m->privacy_refusal != XF_JOBM_REFUSED_BUDGET) m->privacy_refusal = why;
    xf_text_append(m->privacy_note, sizeof(m->privacy_note), "%s", d);
  }
}

static void refuse_site(xf_jobm *m, uint64_t site, xf_jobm_refusal why, const char *details,
                        double now) {
  xf_participant_state st;
  if (!site_state(m, site, &st) || !pending_state(st)) return;
  note_refusal(m, site, why, details);
  participant(m, site, XF_PARTICIPANT_REFUSED, 0);
  if (m->role == XF_JOBM_RELAY) {
    xf_jobm_action *a = push(m, XF_JOBM_REFUSE_UP, 0);
    a->site = site;
    a->refusal = why;
    note(a, "%s", details ? details : "");
  }
  if (m->sa) xf_saphase_gone(m->sa, site, now);
  xf_errctx e = {0};
  xf_err rc = st == XF_PARTICIPANT_INVITED ? xf_round_site_refused(m->r, site, details, &e)
                                           : xf_round_site_dropped(m->r, site, &e);
  if (rc == XF_OK) process_round(m, now);
}

xf_err xf_jobm_refused(xf_jobm *m, uint64_t carrier, uint64_t site, xf_jobm_refusal why,
                       const char *details, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, carrier);
  if (m->phase == XF_JOBM_EVALUATING && c && c->eval_pending && site == 0) {
    c->eval_pending = false;
    offer_evaluation(m, now); /* may finish it */
    return end_call(m, err);
  }
  if (!attempt_open(m) || !c || c->state == C_GONE) return end_call(m, err);
  if (site) {
    if (carries(c, site)) refuse_site(m, site, why, details, now);
  } else {
    uint64_t *copy = xf_mallocarray(c->n_sites ? c->n_sites : 1, sizeof(uint64_t));
    size_t k = c->n_sites;
    if (!copy) return xf_fail(err, XF_ENOMEM, "out of memory");
    memcpy(copy, c->sites, k * sizeof(uint64_t));
    for (size_t i = 0; i < k && attempt_open(m); i++) refuse_site(m, copy[i], why, details, now);
    xf_free(copy);
  }
  c = carrier_of(m, carrier);
  if (c && !carrier_pending(m, c) && c->state != C_REPORTED) c->state = C_GONE;
  return end_call(m, err);
}

xf_err xf_jobm_dropped(xf_jobm *m, uint64_t carrier, const char *why, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, carrier);
  if (m->phase == XF_JOBM_EVALUATING && c && c->eval_pending) {
    c->eval_pending = false;
    offer_evaluation(m, now);
    return end_call(m, err);
  }
  if (!attempt_open(m) || !c || c->state == C_GONE) return end_call(m, err);
  uint64_t *copy = xf_mallocarray(c->n_sites ? c->n_sites : 1, sizeof(uint64_t));
  size_t k = c->n_sites;
  if (!copy) return xf_fail(err, XF_ENOMEM, "out of memory");
  memcpy(copy, c->sites, k * sizeof(uint64_t));
  c->state = C_GONE;
  for (size_t i = 0; i < k && attempt_open(m); i++) drop_site(m, copy[i], why ? why : "dropped", now);
  xf_free(copy);
  return end_call(m, err);
}

xf_err xf_jobm_announced(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                         double now, xf_errctx *err) {
  begin_call(m);
  (void)now;
  jm_carrier *c = carrier_of(m, carrier);
  uint64_t self = carrier;
  if (c && !c->regional) {
    sites = &self;
    n = 1;
  }
  const char *why = NULL;
  char buf[XF_JOBM_MSG_MAX];
  if (!c || !(m->phase == XF_JOBM_TRAINING) || c->state != C_GO)
    why = "no update of this job is expected from it now";
  for (size_t i = 0; !why && i < n; i++)
    if (!carries(c, sites[i]) || !site_pending(m, sites[i]))
      why = "the aggregate names a site that is not in this attempt";
  if (!why && n == 0) why = "the aggregate names no site";
  xf_jobm_refusal kind = XF_JOBM_REFUSED_OTHER;
  if (!why && c->regional) {
    /* The region's aggregate is held to its release conditions at this end too. */
    const jm_group *g = group_of(m, sites[0]);
    if (g && g->has_release) {
      const xf_privacy_spec *pv = &m->spec.privacy;
      xf_release_artifact art = {.contributors = (unsigned)n,
                                 .secagg = m->spec.secure_aggregation.enabled,
                                 .privacy = pv->mode != XF_PRIVACY_NONE,
                                 .has_epsilon = pv->has_target_epsilon,
                                 .epsilon = pv->target_epsilon};
      if (!xf_release_allows(&g->release, &art, buf, sizeof(buf))) {
        why = buf;
        kind = XF_JOBM_REFUSED_POLICY;
      }
    }
  }
  if (!why) return end_call(m, err);
  xf_jobm_action *a = push(m, XF_JOBM_DISCARD, carrier);
  a->refusal = kind;
  note(a, "%s", why);
  if (c && c->state == C_GO) {
    uint64_t *copy = xf_mallocarray(c->n_sites ? c->n_sites : 1, sizeof(uint64_t));
    size_t k = c->n_sites;
    if (copy) {
      memcpy(copy, c->sites, k * sizeof(uint64_t));
      c->state = C_GONE;
      for (size_t i = 0; i < k && attempt_open(m); i++) drop_site(m, copy[i], a->note, now);
      xf_free(copy);
    }
  }
  return end_call(m, err);
}

static void report_sites(xf_jobm *m, jm_carrier *c, const uint64_t *sites, size_t n,
                         uint64_t weight, double now) {
  c->state = C_REPORTED;
  /* Its sites missing from the aggregate are out (the attempt first: a
   * drop that closes it frees c). */
  for (size_t i = 0; attempt_open(m) && i < c->n_sites; i++)
    if (!in_list(sites, n, c->sites[i]) && site_pending(m, c->sites[i]))
      drop_site(m, c->sites[i], "not in its region's aggregate", now);
  for (size_t i = 0; i < n && attempt_open(m); i++) {
    xf_errctx e = {0};
    uint64_t samples = n ? weight / n : weight;
    participant(m, sites[i], XF_PARTICIPANT_REPORTED, samples);
    if (xf_round_update_reported(m->r, sites[i], samples ? samples : 1, &e) == XF_OK)
      process_round(m, now);
  }
}

xf_err xf_jobm_reported(xf_jobm *m, uint64_t carrier, const uint64_t *sites, size_t n,
                        uint64_t weight, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, carrier);
  if (!c || m->phase != XF_JOBM_TRAINING || c->state != C_GO) {
    xf_jobm_action *a = push(m, XF_JOBM_DISCARD, carrier);
    note(a, "round %u attempt %u is not taking this update", (unsigned)xf_round_number(m->r),
         (unsigned)xf_round_attempt(m->r));
    return end_call(m, err);
  }
  uint64_t self = carrier;
  if (!c->regional) {
    sites = &self;
    n = 1;
  }
  report_sites(m, c, sites, n, weight, now);
  return end_call(m, err);
}

xf_err xf_jobm_link(xf_jobm *m, uint64_t carrier, bool up, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, carrier);
  if (!c) return end_call(m, err);
  if (!up) {
    if (!c->down) c->down_since = now;
    c->down = true;
    /* Its masked input is in the sum; the unmasking does not wait for its
     * reveal (the others' shares recover its self mask). */
    if (m->sa && m->phase == XF_JOBM_UNMASKING && !c->regional) {
      xf_saphase_gone(m->sa, c->id, now);
      run_sa(m, now);
    }
    return end_call(m, err);
  }
  c->down = false;
  if (attempt_open(m) && c->state != C_GONE && c->state != C_REPORTED && carrier_pending(m, c)) {
    xf_jobm_action *o = push(m, XF_JOBM_OFFER, c->id);
    o->deadline = xf_round_deadline(m->r);
    o->answer_by = xf_round_confirm_deadline(m->r);
    o->resend = true;
    if (c->regional) set_sites(m, o, c->sites, c->n_sites);
  } else if (m->phase == XF_JOBM_EVALUATING && c->eval_pending) {
    xf_jobm_action *o = push(m, XF_JOBM_EVALUATE, c->id);
    o->deadline = m->eval_deadline;
    o->resend = true;
    if (c->regional) set_sites(m, o, c->sites, c->n_sites);
  }
  return end_call(m, err);
}

/* ---- secure aggregation events -------------------------------------------------------------------- */

xf_err xf_jobm_sa_advert(xf_jobm *m, uint64_t site, const xf_saphase_keys *keys, double now,
                         xf_errctx *err) {
  begin_call(m);
  xf_errctx e = {0};
  if (m->sa && xf_saphase_advert(m->sa, site, keys, now, &e) != XF_ENOENT) run_sa(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_sa_shares(xf_jobm *m, uint64_t site, const xf_saphase_shares_msg *msg,
                         double now, xf_errctx *err) {
  begin_call(m);
  xf_errctx e = {0};
  if (m->sa && xf_saphase_shares(m->sa, site, msg, now, &e) != XF_ENOENT) run_sa(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_sa_check_sig(xf_jobm *m, uint64_t site, const uint8_t *sig, size_t len,
                            double now, xf_errctx *err) {
  begin_call(m);
  xf_errctx e = {0};
  if (m->sa && xf_saphase_check_sig(m->sa, site, sig, len, now, &e) != XF_ENOENT) run_sa(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_sa_refused(xf_jobm *m, uint64_t site, const char *why, double now,
                          xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, site);
  if (!m->sa || !c || c->regional || !xf_saphase_index(m->sa, site)) return end_call(m, err);
  char text[XF_JOBM_MSG_MAX / 2];
  snprintf(text, sizeof(text), "secure aggregation: refused by the site: %s",
           why && *why ? why : "no reason given");
  bool unmasking = m->phase == XF_JOBM_UNMASKING;
  if (unmasking) xf_text_append(m->refusals, sizeof(m->refusals), "%s", text);
  /* What its leaving moves on (keys, routing, the reveals) goes out first. */
  xf_saphase_refused(m->sa, site, now);
  run_sa(m, now);
  if (unmasking) return end_call(m, err);
  if (c->state != C_GONE && c->state != C_REPORTED) {
    xf_jobm_action *o = push(m, XF_JOBM_CANCEL, c->id);
    note(o, "%s", text);
    c->state = C_GONE;
  }
  drop_site(m, site, text, now);
  return end_call(m, err);
}

xf_err xf_jobm_sa_masked(xf_jobm *m, uint64_t site, uint32_t **words, size_t n_words,
                         uint64_t weight, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, site);
  if (!m->sa || !c || c->regional || m->phase != XF_JOBM_TRAINING || c->state != C_GO) {
    xf_jobm_action *a = push(m, XF_JOBM_DISCARD, site);
    note(a, "no masked input of this job is expected from it now");
    return end_call(m, err);
  }
  xf_errctx e = {0};
  xf_err rc = xf_saphase_masked(m->sa, site, words, n_words, now, &e);
  if (rc != XF_OK) {
    run_sa(m, now);
    if (rc == XF_ENOENT) {
      xf_jobm_action *a = push(m, XF_JOBM_DISCARD, site);
      note(a, "%s", e.msg);
    }
    return end_call(m, err);
  }
  report_sites(m, c, &site, 1, weight, now);
  return end_call(m, err);
}

xf_err xf_jobm_sa_reveal(xf_jobm *m, uint64_t site, const uint8_t *msg, size_t len, double now,
                         xf_errctx *err) {
  begin_call(m);
  xf_errctx e = {0};
  if (m->sa && xf_saphase_reveal(m->sa, site, msg, len, now, &e) != XF_ENOENT) run_sa(m, now);
  return end_call(m, err);
}

/* ---- the clock ------------------------------------------------------------------------------------ */

xf_err xf_jobm_tick(xf_jobm *m, double now, xf_errctx *err) {
  begin_call(m);
  if (attempt_open(m)) {
    /* Carriers away too long are out. */
    for (size_t i = 0; i < m->n_carriers && attempt_open(m); i++) {
      jm_carrier *c = &m->carriers[i];
      if (!c->down || c->state == C_GONE || c->state == C_REPORTED ||
          now - c->down_since < XF_JOBM_RECONNECT_GRACE_S || !carrier_pending(m, c))
        continue;
      uint64_t id = c->id;
      size_t k = c->n_sites;
      uint64_t *copy = xf_mallocarray(k ? k : 1, sizeof(uint64_t));
      if (!copy) break;
      memcpy(copy, c->sites, k * sizeof(uint64_t));
      c->state = C_GONE;
      for (size_t j = 0; j < k && attempt_open(m); j++)
        drop_site(m, copy[j], "lost its link and did not come back in time", now);
      xf_free(copy);
      (void)id;
    }
    xf_errctx e = {0};
    if (attempt_open(m) && xf_round_tick(m->r, now, &e) == XF_OK) process_round(m, now);
    if (m->sa && (m->phase == XF_JOBM_TRAINING || m->phase == XF_JOBM_UNMASKING)) {
      xf_saphase_tick(m->sa, now);
      run_sa(m, now);
    }
  } else if (m->phase == XF_JOBM_WAITING && m->resume_until > 0 && now >= m->resume_until) {
    try_open(m, now);
  } else if (m->phase == XF_JOBM_EVALUATING && m->eval_started && now >= m->eval_deadline) {
    for (size_t i = 0; i < m->n_carriers; i++) m->carriers[i].eval_pending = false;
    offer_evaluation(m, now);
  }
  return end_call(m, err);
}

/* ---- commit --------------------------------------------------------------------------------------- */

xf_err xf_jobm_committed(xf_jobm *m, double now, xf_errctx *err) {
  begin_call(m);
  XF_ENSURE(m->phase == XF_JOBM_COMMITTING, err, XF_EINVAL,
            "no result to commit: the job is %s", xf_jobm_phase_name(m->phase));
  if (m->role == XF_JOBM_RELAY) {
    /* The last hop inside the region: hold the aggregate to the plan. */
    uint64_t *sites = NULL;
    size_t n = 0;
    for (size_t i = 0; i < m->n_carriers; i++)
      if (m->carriers[i].state == C_REPORTED) n++;
    sites = xf_mallocarray(n ? n : 1, sizeof(uint64_t));
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
    xf_release_artifact art = {.contributors = (unsigned)(n - (m->lost_sites < n ? m->lost_sites : n)),
                               .secagg = m->spec.secure_aggregation.enabled,
                               .privacy = pv->mode != XF_PRIVACY_NONE,
                               .has_epsilon = pv->has_target_epsilon,
                               .epsilon = pv->target_epsilon};
    char why[XF_JOBM_MSG_MAX];
    if (m->has_release && !xf_release_allows(&m->release, &art, why, sizeof(why))) {
      xf_jobm_action *a = push(m, XF_JOBM_REFUSE_UP, 0);
      a->refusal = XF_JOBM_REFUSED_POLICY;
      note(a, "%s", why);
      set_msg(m, "held back: %s", why);
      m->phase = XF_JOBM_FAILED;
    } else {
      keep_up_sites(m, sites, n);
      m->up_weight = weight;
      m->made = true;
      m->forward_due = true;
      m->phase = XF_JOBM_DONE;
      if (!m->up_holds)
        set_msg(m, "the region's aggregate is made and waits for upstream to offer the task "
                   "again");
      forward_if_held(m);
    }
    xf_free(sites);
    free_carriers(m);
    return end_call(m, err);
  }
  xf_errctx e = {0};
  xf_err rc = xf_round_committed(m->r, &e);
  if (rc != XF_OK) {
    fail(m, e.msg);
    return end_call(m, err);
  }
  m->rounds_committed++;
  free_carriers(m);
  m->phase = XF_JOBM_WAITING;
  m->has_plan = false; /* decided again before the next attempt */
  process_round(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_commit_failed(xf_jobm *m, const char *why, double now, xf_errctx *err) {
  begin_call(m);
  XF_ENSURE(m->phase == XF_JOBM_COMMITTING, err, XF_EINVAL,
            "no result that could fail: the job is %s", xf_jobm_phase_name(m->phase));
  commit_failed(m, why, now);
  return end_call(m, err);
}

/* ---- the evaluation ------------------------------------------------------------------------------- */

static void start_evaluation(xf_jobm *m, double now) {
  (void)now;
  end_attempt(m);
  m->phase = XF_JOBM_EVALUATING;
  m->eval_started = false;
  m->has_plan = false; /* the evaluation goes to the sites eligible now */
}

/* With a fresh plan: offers the evaluation to every carrier of its eligible
 * sites; later calls finish it once nothing is pending. */
static void offer_evaluation(xf_jobm *m, double now) {
  if (!m->eval_started) {
    if (!m->has_plan) return;
    m->eval_started = true;
    m->eval_deadline = now + m->eval_timeout_s;
    if (m->role == XF_JOBM_RELAY && m->deadline > now) m->eval_deadline = m->deadline;
    free_carriers(m);
    if (m->role == XF_JOBM_RELAY) tell_absent(m);
    for (size_t i = 0; i < m->n_sites; i++) {
      jm_carrier *c = add_carrier(m, m->sites[i].carrier);
      if (c) carrier_add_site(m, c, m->sites[i].id);
    }
    for (size_t i = 0; i < m->n_carriers; i++) {
      jm_carrier *c = &m->carriers[i];
      c->eval_pending = true;
      c->state = C_REPORTED; /* nothing to train */
      xf_jobm_action *o = push(m, XF_JOBM_EVALUATE, c->id);
      o->deadline = m->eval_deadline;
      if (c->regional) set_sites(m, o, c->sites, c->n_sites);
    }
  }
  for (size_t i = 0; i < m->n_carriers; i++)
    if (m->carriers[i].eval_pending) return;
  free_carriers(m);
  m->phase = XF_JOBM_DONE;
  push(m, XF_JOBM_FINISH, 0);
}

xf_err xf_jobm_evaluated(xf_jobm *m, uint64_t carrier, double now, xf_errctx *err) {
  begin_call(m);
  jm_carrier *c = carrier_of(m, carrier);
  if (m->phase == XF_JOBM_EVALUATING && m->eval_started && c && c->eval_pending) {
    c->eval_pending = false;
    offer_evaluation(m, now);
  }
  return end_call(m, err);
}

/* ---- relay and cancel ---------------------------------------------------------------------------- */

static void relay_go(xf_jobm *m, double now) {
  m->up_holds = true;
  if (m->phase == XF_JOBM_AWAIT_GO) {
    m->go_up = true;
    go(m, now);
  } else if (attempt_open(m)) {
    m->go_up = true; /* came early: the GO goes out as soon as the sites answered */
  }
  if (m->made) m->msg[0] = '\0';
  forward_if_held(m);
}

xf_err xf_jobm_go(xf_jobm *m, double now, xf_errctx *err) {
  begin_call(m);
  if (m->role == XF_JOBM_RELAY) relay_go(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_upstream_lost(xf_jobm *m, double now, xf_errctx *err) {
  begin_call(m);
  (void)now;
  if (m->role != XF_JOBM_RELAY) return end_call(m, err);
  m->up_holds = false;
  if (m->made) {
    m->forward_due = true;
    set_msg(m, "the region's aggregate is made and waits for upstream to offer the task again");
  }
  if (m->phase == XF_JOBM_CONFIRMING || m->phase == XF_JOBM_AWAIT_GO) m->go_up = false;
  return end_call(m, err);
}

xf_err xf_jobm_reoffered(xf_jobm *m, bool held, double now, xf_errctx *err) {
  begin_call(m);
  if (m->role != XF_JOBM_RELAY || m->phase == XF_JOBM_FAILED || m->phase == XF_JOBM_CANCELLED)
    return end_call(m, err);
  m->up_holds = false;
  if (m->made) m->forward_due = true;
  if (m->up_answered) {
    xf_jobm_action *a = push(m, XF_JOBM_ACCEPT_UP, 0);
    set_sites(m, a, m->up_sites, m->n_up_sites);
  }
  /* An offer that does not hold the task lets it go on at once. */
  if (!held) relay_go(m, now);
  return end_call(m, err);
}

xf_err xf_jobm_cancel(xf_jobm *m, const char *why, double now, xf_errctx *err) {
  begin_call(m);
  (void)now;
  if (m->phase == XF_JOBM_DONE || m->phase == XF_JOBM_FAILED || m->phase == XF_JOBM_CANCELLED)
    return end_call(m, err);
  cancel_carriers(m, why ? why : "cancelled");
  end_attempt(m);
  set_msg(m, "%s", why ? why : "cancelled");
  m->phase = XF_JOBM_CANCELLED;
  return end_call(m, err);
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
  jm_carrier *c = carrier_of((xf_jobm *)m, carrier);
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
  bool open = attempt_open(m) || m->phase == XF_JOBM_COMMITTING;
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
  jm_carrier *c = carrier_of((xf_jobm *)m, carrier);
  if (!c || c->state == C_GONE) return false;
  *sites = c->sites;
  *n = c->n_sites;
  return true;
}
