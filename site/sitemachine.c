/* SPDX-License-Identifier: Apache-2.0 */
/* The site machine's table and its driver (site/sitemachine.h). */
#include "site/sitemachine.h"

#include <string.h>

#define T(from, event, when, to, action)                                                     \
  {XF_SITEM_##from, XF_SITEM_##event, XF_SITEM_##when, XF_SITEM_##to, XF_SITEM_##action}

/* docs/site-machine.md lists these rows in this order, and
 * tests/test_site_machine.c checks that it does. */
static const xf_sitem_transition transitions[] = {
    T(MODEL, MODEL_IN, IF_HELD, HELD, WAIT_GO),
    T(MODEL, MODEL_IN, IF_FREE, QUEUED, QUEUE),
    T(HELD, GO, ALWAYS, QUEUED, QUEUE),
    T(HELD, UNHOLD, ALWAYS, QUEUED, QUEUE),
    T(QUEUED, WORKER, ALWAYS, WORKING, TRAIN),
    T(WORKING, TRAINED, ALWAYS, REPORTING, REPORT),
    T(WORKING, FAILED, ALWAYS, GONE, FORGET),
    T(REPORTING, GO, ALWAYS, REPORTING, REPORT),
    T(REPORTING, FAILED, ALWAYS, GONE, FORGET),
    T(REPORTING, DELIVERED, ALWAYS, GONE, FORGET),
    T(MODEL, DROP, ALWAYS, GONE, FORGET),
    T(HELD, DROP, ALWAYS, GONE, FORGET),
    T(QUEUED, DROP, ALWAYS, GONE, FORGET),
    T(WORKING, DROP, ALWAYS, GONE, ABANDON),
    T(REPORTING, DROP, ALWAYS, GONE, FORGET),
};

#undef T

const xf_sitem_transition *xf_sitem_transitions(size_t *n) {
  *n = sizeof(transitions) / sizeof(transitions[0]);
  return transitions;
}

static bool applies(xf_sitem_when when, bool held) {
  switch (when) {
  case XF_SITEM_IF_HELD: return held;
  case XF_SITEM_IF_FREE: return !held;
  default: return true;
  }
}

bool xf_sitem_step(xf_sitem_phase *phase, xf_sitem_event event, bool held,
                   xf_sitem_action *action) {
  *action = XF_SITEM_NOTHING;
  for (size_t i = 0; i < sizeof(transitions) / sizeof(transitions[0]); i++) {
    const xf_sitem_transition *t = &transitions[i];
    if (t->from != *phase || t->event != event || !applies(t->when, held)) continue;
    *phase = t->to;
    *action = t->action;
    return true;
  }
  return false;
}

const char *xf_sitem_phase_name(xf_sitem_phase p) {
  static const char *const names[] = {"model", "held", "queued", "training", "reporting", "gone"};
  return (unsigned)p < XF_SITEM_PHASES ? names[p] : "?";
}

const char *xf_sitem_event_name(xf_sitem_event e) {
  static const char *const names[] = {"model-in", "go",        "unhold", "worker",
                                      "trained",  "failed",    "delivered", "drop"};
  return (unsigned)e < XF_SITEM_EVENTS ? names[e] : "?";
}

const char *xf_sitem_when_name(xf_sitem_when w) {
  static const char *const names[] = {"always", "held", "free"};
  return (unsigned)w <= XF_SITEM_IF_FREE ? names[w] : "?";
}

const char *xf_sitem_action_name(xf_sitem_action a) {
  static const char *const names[] = {"-",      "wait-go", "queue",  "train",
                                      "report", "forget",  "abandon"};
  return (unsigned)a < XF_SITEM_ACTIONS ? names[a] : "?";
}

bool xf_sitem_stale(bool offered_now, bool on_worker, uint64_t deadline_ms, uint64_t now_ms) {
  return !on_worker && !offered_now && (deadline_ms == 0 || deadline_ms <= now_ms);
}

void xf_sitem_reoffer_decide(const xf_sitem_held *t, const xf_sitem_again *o,
                             xf_sitem_reoffer *out) {
  memset(out, 0, sizeof(*out));
  if (!t->same_model) {
    out->kind = t->phase == XF_SITEM_WORKING ? XF_SITEM_BUSY : XF_SITEM_OTHER_MODEL;
    return;
  }
  out->kind = XF_SITEM_RESUME;
  out->reseal = t->sealed && o->seal_key &&
                memcmp(t->seal_pk, o->seal_key, XF_SEAL_PUBLICKEYBYTES) != 0;
  out->model_stream = o->model_stream_id && t->phase == XF_SITEM_MODEL;
  /* A restarted aggregator may name another stream for the update. */
  out->update_stream = o->update_stream_id && o->update_stream_id != t->update_stream_id;
  /* One that no longer holds the task lets it train. */
  out->unhold = !o->hold && t->hold && !t->go;
  /* One that holds it again (it restarted and confirms its cohort anew)
   * gets what was made before once it says go. A masked update cannot
   * wait: its masks belong to the session the restart lost. */
  if (o->hold && t->go && !t->evaluate_only) {
    if (t->secagg) out->kind = XF_SITEM_SESSION_LOST;
    else out->rehold = true;
  }
}
