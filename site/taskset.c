/* SPDX-License-Identifier: Apache-2.0 */
/* The site's task set and its decisions (site/taskset.h). */
#include "site/taskset.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "crypto/digest.h"

struct xf_site_task {
  char job[XF_SITE_JOB_ID_MAX];
  uint32_t round, attempt;
  xf_sitem_phase phase;
  bool hold;          /* the offer asked to wait for TaskGo before training */
  bool go;            /* its TaskGo came */
  bool offered_now;   /* offered on the current link: its results may go out */
  bool evaluate_only;
  bool secagg;        /* its update goes out masked */
  bool sealed;        /* its update is sealed to seal_pk */
  uint8_t model_digest[XF_DIGEST_BYTES];
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint64_t update_stream_id;
  uint64_t deadline_ms;
  uint64_t ready_seq;  /* when it became ready: the worker takes the lowest first */
  uint64_t report_seq; /* when its result came: reports go out in this order */
  void *user;
  struct xf_site_task *next_gone; /* let go, freed once the actions are all taken */
};

/* Actions wait in a ring. An event queues at most one action per task
 * held and a dozen of its own, and the actions it causes while they are
 * taken are again one per task; a ring of 16 per task and 32 more never
 * fills. */
#define ACTIONS_PER_TASK 16

struct xf_site_tasks {
  int max, n;
  xf_site_task **tasks; /* in the order they were accepted */
  uint64_t ready_count, report_count; /* the last ready_seq and report_seq handed out */
  void *worker;               /* the user on the worker, or NULL */
  xf_site_task *worker_task;  /* its task while it is still the set's */
  bool stopping;
  xf_site_tasks_action *ring;
  size_t cap, head, len;
  size_t before; /* how many of them earlier events queued */
  xf_site_task *gone; /* tasks let go whose actions may still be pending */
};

const char *xf_site_tasks_action_name(xf_site_tasks_action_kind k) {
  static const char *const names[] = {
      "accept",        "refuse",         "tell-failed", "ignore-stream",  "reseal",
      "model-stream",  "update-stream",  "held",        "go",             "go-repeated",
      "go-unknown",    "cancelled",      "cancel-unknown", "sa-forget",   "start",
      "report",        "restart-stream", "drop",        "abandon",        "forget",
      "result-dropped"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == XF_SITE_TASKS_ACTIONS, "one name each");
  return (unsigned)k < XF_SITE_TASKS_ACTIONS ? names[k] : "?";
}

xf_err xf_site_tasks_new(int max, xf_site_tasks **out, xf_errctx *err) {
  *out = NULL;
  XF_ENSURE(max >= 1 && max <= 64, err, XF_EINVAL, "a site holds 1 to 64 tasks, not %d", max);
  xf_site_tasks *s = xf_calloc(1, sizeof(*s));
  if (s) {
    s->max = max;
    s->cap = (size_t)max * ACTIONS_PER_TASK + 32;
    s->tasks = xf_calloc((size_t)max, sizeof(*s->tasks));
    s->ring = xf_calloc(s->cap, sizeof(*s->ring));
  }
  if (!s || !s->tasks || !s->ring) {
    xf_site_tasks_free(s);
    return xf_fail(err, XF_ENOMEM, "cannot hold the site's tasks");
  }
  *out = s;
  return XF_OK;
}

static void bury_all(xf_site_tasks *s) {
  while (s->gone) {
    xf_site_task *t = s->gone;
    s->gone = t->next_gone;
    xf_free(t);
  }
}

void xf_site_tasks_free(xf_site_tasks *s) {
  if (!s) return;
  bury_all(s);
  for (int i = 0; i < s->n; i++) xf_free(s->tasks[i]);
  xf_free(s->tasks);
  xf_free(s->ring);
  xf_free(s);
}

/* ---- the actions -------------------------------------------------------------------- */

/* A new action at the back, naming t when there is one. */
static xf_site_tasks_action *push(xf_site_tasks *s, xf_site_tasks_action_kind kind,
                                  const xf_site_task *t) {
  if (s->len == s->cap) abort(); /* beyond the bound above: a bug in this file */
  xf_site_tasks_action *a = &s->ring[(s->head + s->len++) % s->cap];
  memset(a, 0, sizeof(*a));
  a->kind = kind;
  if (t) {
    a->user = t->user;
    a->task = (xf_site_task *)t;
    snprintf(a->job, sizeof(a->job), "%s", t->job);
    a->round = t->round;
    a->attempt = t->attempt;
    a->phase = t->phase;
  }
  return a;
}

static xf_site_tasks_action *push_key(xf_site_tasks *s, xf_site_tasks_action_kind kind,
                                      const char *job, uint32_t round, uint32_t attempt) {
  xf_site_tasks_action *a = push(s, kind, NULL);
  snprintf(a->job, sizeof(a->job), "%s", job);
  a->round = round;
  a->attempt = attempt;
  return a;
}

static void refuse_v(xf_site_tasks *s, const char *job, uint32_t round, uint32_t attempt,
                     Xfed__TaskRefusal__Reason reason, const char *text) {
  xf_site_tasks_action *a = push_key(s, XF_SITE_TASKS_REFUSE, job, round, attempt);
  a->reason = reason;
  snprintf(a->text, sizeof(a->text), "%s", text);
}

/* An UNSUPPORTED refusal, the details formatted. */
static void refuse(xf_site_tasks *s, const char *job, uint32_t round, uint32_t attempt,
                   const char *fmt, ...) XF_PRINTF(5, 6);
static void refuse(xf_site_tasks *s, const char *job, uint32_t round, uint32_t attempt,
                   const char *fmt, ...) {
  char text[XF_SITE_WHY_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  refuse_v(s, job, round, attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, text);
}

bool xf_site_tasks_next(xf_site_tasks *s, xf_site_tasks_action *out) {
  if (!s->len) {
    bury_all(s);
    return false;
  }
  *out = s->ring[s->head];
  s->head = (s->head + 1) % s->cap;
  s->len--;
  if (s->before) s->before--;
  return true;
}

/* An event begins: what is pending now, earlier events queued. */
static void begin(xf_site_tasks *s) { s->before = s->len; }

/* Takes back the pending actions earlier events queued for user (its task
 * is let go); what this event queued stays. True when a START was among
 * them: the worker never took it. */
static bool void_pending(xf_site_tasks *s, const void *user) {
  size_t kept = 0, before = s->before;
  bool start = false;
  for (size_t i = 0; i < s->len; i++) {
    xf_site_tasks_action *a = &s->ring[(s->head + i) % s->cap];
    if (i < s->before && a->user == user) {
      before--;
      start = start || a->kind == XF_SITE_TASKS_START;
      continue;
    }
    if (kept != i) s->ring[(s->head + kept) % s->cap] = *a;
    kept++;
  }
  s->len = kept;
  s->before = before;
  return start;
}

/* ---- the set -------------------------------------------------------------------------- */

/* Takes t out of the set, keeping the order of the others; it stays
 * readable (phase GONE) until the actions are all taken. */
static void task_remove(xf_site_tasks *s, xf_site_task *t) {
  for (int i = 0; i < s->n; i++) {
    if (s->tasks[i] != t) continue;
    memmove(s->tasks + i, s->tasks + i + 1, (size_t)(s->n - i - 1) * sizeof(*s->tasks));
    s->n--;
    t->phase = XF_SITEM_GONE;
    t->next_gone = s->gone;
    s->gone = t;
    return;
  }
}

static bool task_held(const xf_site_task *t) { return t->hold && !t->go; }

/* Starts the worker on the ready task that became ready first, when the
 * worker is free. */
static void maybe_start(xf_site_tasks *s) {
  if (s->stopping || s->worker) return;
  xf_site_task *t = NULL;
  for (int i = 0; i < s->n; i++) {
    xf_site_task *c = s->tasks[i];
    if (c->phase == XF_SITEM_QUEUED && (!t || c->ready_seq < t->ready_seq)) t = c;
  }
  if (!t) return;
  xf_sitem_action act; /* TRAIN */
  (void)xf_sitem_step(&t->phase, XF_SITEM_WORKER, task_held(t), &act);
  s->worker = t->user;
  s->worker_task = t;
  push(s, XF_SITE_TASKS_START, t);
}

/* Moves t on ev and queues what its step says. */
static void step(xf_site_tasks *s, xf_site_task *t, xf_sitem_event ev) {
  xf_sitem_action act;
  if (!xf_sitem_step(&t->phase, ev, task_held(t), &act)) return;
  switch (act) {
  case XF_SITEM_WAIT_GO: push(s, XF_SITE_TASKS_HELD, t); break;
  case XF_SITEM_QUEUE:
    t->ready_seq = ++s->ready_count;
    maybe_start(s);
    break;
  case XF_SITEM_REPORT: push(s, XF_SITE_TASKS_REPORT, NULL); break;
  default: break;
  }
}

/* Lets t go: DROP, or ABANDON while the worker holds it (it comes back
 * through xf_site_tasks_worker_back). Its pending actions go with it. */
static void drop(xf_site_tasks *s, xf_site_task *t, const char *why) {
  if (void_pending(s, t->user) && s->worker_task == t) {
    s->worker = NULL;
    s->worker_task = NULL;
  }
  xf_sitem_phase before = t->phase;
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, XF_SITEM_DROP, task_held(t), &act);
  bool on_worker = act == XF_SITEM_ABANDON && s->worker_task == t;
  xf_site_tasks_action *a = push(s, on_worker ? XF_SITE_TASKS_ABANDON : XF_SITE_TASKS_DROP, t);
  a->phase = before;
  a->why = why;
  if (s->worker_task == t) s->worker_task = NULL;
  task_remove(s, t);
}

/* Ends t done (DELIVERED) or failed (FAILED): FORGET. */
static void done(xf_site_tasks *s, xf_site_task *t, xf_sitem_event ev, bool ignore) {
  (void)void_pending(s, t->user);
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, ev, task_held(t), &act);
  xf_site_tasks_action *a = push(s, XF_SITE_TASKS_FORGET, t);
  a->ignore = ignore;
  task_remove(s, t);
}

static bool task_is(const xf_site_task *t, const char *job, uint32_t round, uint32_t attempt) {
  return strcmp(t->job, job) == 0 && t->round == round && t->attempt == attempt;
}

xf_site_task *xf_site_tasks_find(const xf_site_tasks *s, const char *job, uint32_t round,
                                 uint32_t attempt) {
  for (int i = 0; i < s->n; i++)
    if (task_is(s->tasks[i], job, round, attempt)) return s->tasks[i];
  return NULL;
}

xf_site_task *xf_site_tasks_of_job(const xf_site_tasks *s, const char *job) {
  for (int i = 0; i < s->n; i++)
    if (strcmp(s->tasks[i]->job, job) == 0) return s->tasks[i];
  return NULL;
}

int xf_site_tasks_count(const xf_site_tasks *s) { return s->n; }
xf_site_task *xf_site_tasks_at(const xf_site_tasks *s, int i) {
  return i >= 0 && i < s->n ? s->tasks[i] : NULL;
}
void *xf_site_tasks_worker(const xf_site_tasks *s) { return s->worker; }
void *xf_site_task_user(const xf_site_task *t) { return t->user; }
uint64_t xf_site_task_update_stream(const xf_site_task *t) { return t->update_stream_id; }
xf_sitem_phase xf_site_task_phase(const xf_site_task *t) { return t->phase; }
bool xf_site_task_offered_now(const xf_site_task *t) { return t->offered_now; }
bool xf_site_task_held(const xf_site_task *t) { return task_held(t); }

int xf_site_tasks_reporting(const xf_site_tasks *s, void **out, int max) {
  const xf_site_task *order[64];
  int n = 0;
  for (int i = 0; i < s->n; i++) {
    const xf_site_task *t = s->tasks[i];
    if (t->phase != XF_SITEM_REPORTING || !t->offered_now || task_held(t)) continue;
    int j = n++;
    for (; j > 0 && order[j - 1]->report_seq > t->report_seq; j--) order[j] = order[j - 1];
    order[j] = t;
  }
  if (n > max) n = max;
  for (int i = 0; i < n; i++) out[i] = order[i]->user;
  return n;
}

/* ---- offers ------------------------------------------------------------------------------ */

/* The refusal's details when every place is taken: the tasks held. */
static void busy_details(const xf_site_tasks *s, char *why, size_t why_len) {
  size_t used = (size_t)snprintf(why, why_len, "this site holds %d tasks:", s->n);
  for (int i = 0; i < s->n && used < why_len; i++) {
    const xf_site_task *t = s->tasks[i];
    used += (size_t)snprintf(why + used, why_len - used, "%s job %s round %u attempt %u (%s)",
                             i ? "," : "", t->job, (unsigned)t->round, (unsigned)t->attempt,
                             xf_sitem_phase_name(t->phase));
  }
  if (used < why_len)
    snprintf(why + used, why_len - used, "; offer it again once one of them is done");
}

/* The site machine's view of an offer of t (site/sitemachine.h). */
static void reoffer_of(const xf_site_task *t, const xf_site_tasks_offer *o, xf_sitem_reoffer *r) {
  xf_sitem_held held = {
      .phase = t->phase,
      .same_model = memcmp(t->model_digest, o->model_digest, XF_DIGEST_BYTES) == 0 &&
                    t->evaluate_only == o->evaluate_only,
      .hold = t->hold,
      .go = t->go,
      .evaluate_only = t->evaluate_only,
      .secagg = t->secagg,
      .sealed = t->sealed,
      .seal_pk = t->seal_pk,
      .update_stream_id = t->update_stream_id};
  xf_sitem_again again = {.hold = o->hold,
                          .seal_key = o->seal_key,
                          .model_stream_id = o->model_stream_id,
                          .update_stream_id = o->update_stream_id};
  xf_sitem_reoffer_decide(&held, &again, r);
}

/* An offer of a task the site holds, with the same model: offered again
 * after a reconnect, taken up where it was (r: what changes). */
static void offer_resumed(xf_site_tasks *s, xf_site_task *t, const xf_site_tasks_offer *o,
                          const xf_sitem_reoffer *r) {
  if (r->reseal) {
    memcpy(t->seal_pk, o->seal_key, XF_SEAL_PUBLICKEYBYTES);
    memcpy(push(s, XF_SITE_TASKS_RESEAL, t)->seal_pk, o->seal_key, XF_SEAL_PUBLICKEYBYTES);
  }
  t->offered_now = true;
  t->deadline_ms = o->deadline_ms;
  if (r->model_stream) push(s, XF_SITE_TASKS_MODEL_STREAM, t)->stream_id = o->model_stream_id;
  if (r->update_stream) {
    t->update_stream_id = o->update_stream_id;
    push(s, XF_SITE_TASKS_UPDATE_STREAM, t)->stream_id = o->update_stream_id;
  }
  if (r->unhold) {
    t->hold = false;
    step(s, t, XF_SITEM_UNHOLD);
  }
  if (r->kind == XF_SITEM_SESSION_LOST) {
    refuse(s, t->job, o->round, o->attempt,
           "the task's update is bound to a secure-aggregation session the coordinator no "
           "longer holds; the round goes on without this site");
    push(s, XF_SITE_TASKS_SA_FORGET, t);
    drop(s, t, "its secure-aggregation session was lost with the coordinator");
    return;
  }
  if (r->rehold) {
    t->hold = true;
    t->go = false;
  }
  xf_site_tasks_action *a = push(s, XF_SITE_TASKS_ACCEPT, t);
  a->round = o->round;
  a->attempt = o->attempt;
  a->resumed = true;
}

static void drop_stale(xf_site_tasks *s, uint64_t now_ms) {
  for (int i = s->n - 1; i >= 0; i--) {
    xf_site_task *u = s->tasks[i];
    if (xf_sitem_stale(u->offered_now, u == s->worker_task, u->deadline_ms, now_ms))
      drop(s, u, "its deadline passed without the coordinator offering it again");
  }
}

xf_site_tasks_offer_next xf_site_tasks_offer_in(xf_site_tasks *s, const xf_site_tasks_offer *o,
                                                uint64_t now_ms, char *busy, size_t busy_len) {
  begin(s);
  if (busy_len) busy[0] = '\0';
  xf_site_task *t = xf_site_tasks_find(s, o->job, o->round, o->attempt);
  if (t) {
    xf_sitem_reoffer r;
    reoffer_of(t, o, &r);
    if (r.kind == XF_SITEM_RESUME || r.kind == XF_SITEM_SESSION_LOST) {
      offer_resumed(s, t, o, &r);
      return XF_SITE_TASKS_ANSWERED;
    }
    if (r.kind == XF_SITEM_BUSY) {
      char text[XF_SITE_WHY_MAX];
      snprintf(text, sizeof(text),
               "this site is training job %s round %u attempt %u from another model", t->job,
               (unsigned)t->round, (unsigned)t->attempt);
      refuse_v(s, o->job, o->round, o->attempt, XFED__TASK_REFUSAL__REASON__BUSY, text);
      return XF_SITE_TASKS_ANSWERED;
    }
    drop(s, t, "offered again with another model");
  } else if ((t = xf_site_tasks_of_job(s, o->job)) != NULL) {
    drop(s, t, "superseded by another round or attempt of its job");
  }
  drop_stale(s, now_ms);
  if (s->n >= s->max && busy_len) busy_details(s, busy, busy_len);
  return XF_SITE_TASKS_CHECK;
}

void xf_site_tasks_offer_checked(xf_site_tasks *s, const xf_site_tasks_offer *o,
                                 const xf_site_tasks_checked *c) {
  begin(s);
  const xf_site_offer_verdict *v = c->verdict;
  if (v->step != XF_SITE_OFFER_TAKEN) {
    push_key(s, XF_SITE_TASKS_IGNORE_STREAM, o->job, o->round, o->attempt)->stream_id =
        o->model_stream_id;
    refuse_v(s, o->job, o->round, o->attempt, v->reason, v->why);
    if (v->step == XF_SITE_OFFER_SETUP && v->uo.secagg)
      push_key(s, XF_SITE_TASKS_SA_FORGET, o->job, o->round, o->attempt);
    return;
  }
  if (c->out_of_memory) return;
  xf_site_task *t = c->setup_failed || s->n >= s->max ? NULL : xf_calloc(1, sizeof(*t));
  if (!t) {
    push_key(s, XF_SITE_TASKS_IGNORE_STREAM, o->job, o->round, o->attempt)->stream_id =
        o->model_stream_id;
    if (c->setup_failed) {
      refuse(s, o->job, o->round, o->attempt, "%s: %s", c->setup_failed, c->setup_err);
    } else if (s->n >= s->max) { /* the checks were not told the set is full */
      char busy[XF_SITE_WHY_MAX];
      busy_details(s, busy, sizeof(busy));
      refuse_v(s, o->job, o->round, o->attempt, XFED__TASK_REFUSAL__REASON__BUSY, busy);
    } else {
      refuse(s, o->job, o->round, o->attempt, "the site cannot hold another task: out of memory");
    }
    if (v->uo.secagg) push_key(s, XF_SITE_TASKS_SA_FORGET, o->job, o->round, o->attempt);
    push_key(s, XF_SITE_TASKS_FORGET, o->job, o->round, o->attempt)->user = c->user;
    return;
  }
  snprintf(t->job, sizeof(t->job), "%s", o->job);
  t->round = o->round;
  t->attempt = o->attempt;
  t->phase = XF_SITEM_MODEL;
  t->hold = o->hold;
  t->offered_now = true;
  t->evaluate_only = o->evaluate_only;
  t->secagg = v->secagg;
  t->sealed = v->uo.sealed;
  memcpy(t->seal_pk, v->uo.seal_pk, XF_SEAL_PUBLICKEYBYTES);
  memcpy(t->model_digest, o->model_digest, XF_DIGEST_BYTES);
  t->update_stream_id = o->update_stream_id ? o->update_stream_id
                                            : xf_site_update_stream_id(o->round, o->attempt);
  t->deadline_ms = o->deadline_ms;
  t->user = c->user;
  s->tasks[s->n++] = t;
  push(s, XF_SITE_TASKS_ACCEPT, t)->advertise = v->uo.secagg;
}

/* ---- go and cancel ---------------------------------------------------------------------- */

xf_site_task *xf_site_tasks_go_in(xf_site_tasks *s, const char *job, uint32_t round,
                                  uint32_t attempt) {
  begin(s);
  xf_site_task *t = xf_site_tasks_find(s, job, round, attempt);
  if (!t) {
    push_key(s, XF_SITE_TASKS_GO_UNKNOWN, job, round, attempt);
    return NULL;
  }
  if (!task_held(t)) {
    push(s, XF_SITE_TASKS_GO_REPEATED, t);
    return NULL;
  }
  return t;
}

void xf_site_tasks_go_checked(xf_site_tasks *s, xf_site_task *t, xf_site_go_step gs,
                              Xfed__TaskRefusal__Reason reason, const char *why, bool go_secagg) {
  begin(s);
  if (gs != XF_SITE_GO_FOLLOWED) {
    refuse_v(s, t->job, t->round, t->attempt, reason, why);
    if (gs == XF_SITE_GO_RELEASE) {
      drop(s, t, "the aggregator's cohort is smaller than the plan allows");
      return;
    }
    push(s, XF_SITE_TASKS_SA_FORGET, t);
    drop(s, t, "its go cannot be followed");
    return;
  }
  t->go = true;
  xf_site_tasks_action *a = push(s, XF_SITE_TASKS_GO, t);
  a->secagg = go_secagg;
  a->advertise = go_secagg && t->secagg;
  step(s, t, XF_SITEM_GO);
}

void xf_site_tasks_cancel(xf_site_tasks *s, const char *job, uint32_t round, uint32_t attempt,
                          const char *reason) {
  begin(s);
  xf_site_task *t = xf_site_tasks_find(s, job, round, attempt);
  if (!t) {
    push_key(s, XF_SITE_TASKS_CANCEL_UNKNOWN, job, round, attempt);
    return;
  }
  snprintf(push(s, XF_SITE_TASKS_CANCELLED, t)->text, XF_SITE_WHY_MAX, "%s", reason ? reason : "");
  push(s, XF_SITE_TASKS_SA_FORGET, t);
  drop(s, t, "cancelled by the coordinator");
  maybe_start(s);
}

/* ---- the model, the worker, the report ---------------------------------------------------- */

void xf_site_tasks_model_in(xf_site_tasks *s, xf_site_task *t) {
  begin(s);
  step(s, t, XF_SITEM_MODEL_IN);
}

void xf_site_tasks_start_failed(xf_site_tasks *s, xf_site_task *t, const char *text) {
  begin(s);
  s->worker = NULL;
  s->worker_task = NULL;
  refuse(s, t->job, t->round, t->attempt, "cannot start training: %s", text);
  drop(s, t, "worker pool refused");
}

xf_site_task *xf_site_tasks_worker_back(xf_site_tasks *s, bool finished) {
  begin(s);
  void *user = s->worker;
  xf_site_task *t = s->worker_task;
  s->worker = NULL;
  s->worker_task = NULL;
  if (!user) return NULL;
  if (t && finished) return t;
  if (t) {
    (void)void_pending(s, user);
    task_remove(s, t);
  }
  push(s, XF_SITE_TASKS_RESULT_DROPPED, t)->user = user;
  maybe_start(s);
  return NULL;
}

void xf_site_tasks_trained(xf_site_tasks *s, xf_site_task *t) {
  begin(s);
  xf_sitem_action act; /* REPORT */
  (void)xf_sitem_step(&t->phase, XF_SITEM_TRAINED, task_held(t), &act);
  t->report_seq = ++s->report_count;
  maybe_start(s);
}

void xf_site_tasks_failed(xf_site_tasks *s, xf_site_task *t, bool tell) {
  begin(s);
  if (tell && t->offered_now) push(s, XF_SITE_TASKS_TELL_FAILED, t);
  done(s, t, XF_SITEM_FAILED, true);
  maybe_start(s);
}

void xf_site_tasks_delivered(xf_site_tasks *s, xf_site_task *t) {
  begin(s);
  done(s, t, XF_SITEM_DELIVERED, false);
  maybe_start(s);
}

/* The worker may be free now (t was handed back, or never taken). */
void xf_site_tasks_drop(xf_site_tasks *s, xf_site_task *t, const char *why) {
  begin(s);
  drop(s, t, why);
  maybe_start(s);
}

/* ---- the link and the clock ---------------------------------------------------------------- */

void xf_site_tasks_link_down(xf_site_tasks *s) {
  begin(s);
  for (int i = 0; i < s->n; i++) xf_site_tasks_update_refused(s, s->tasks[i]);
}

void xf_site_tasks_link_up(xf_site_tasks *s) {
  begin(s);
  push(s, XF_SITE_TASKS_REPORT, NULL);
}

void xf_site_tasks_update_refused(xf_site_tasks *s, xf_site_task *t) {
  begin(s);
  t->offered_now = false;
  push(s, XF_SITE_TASKS_RESTART_STREAM, t);
}

void xf_site_tasks_update_stream_kept(xf_site_tasks *s, xf_site_task *t, uint64_t id) {
  (void)s;
  t->update_stream_id = id;
}

void xf_site_tasks_tick(xf_site_tasks *s, uint64_t now_ms) { drop_stale(s, now_ms); }

void xf_site_tasks_stop(xf_site_tasks *s) {
  begin(s);
  begin(s);
  s->stopping = true;
  if (!s->worker) return;
  xf_site_tasks_action *a = push(s, XF_SITE_TASKS_ABANDON, s->worker_task);
  a->user = s->worker;
}
