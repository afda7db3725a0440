/* SPDX-License-Identifier: Apache-2.0 */
/* The site machine: one task's life at a site as data, with no sockets and
 * no clock (docs/site-machine.md). A task moves through its phases on
 * events — its model in, the aggregator's go, offered again without a
 * hold, the worker free, the result in, delivered, dropped — and each step
 * names what follows (the task set, site/taskset.h, steps each task it
 * holds and turns these into the daemon's actions). The transitions are
 * one table, driven by xf_sitem_step and exported for the documentation
 * test; whether an offer is taken is site/offer.h's. */
#ifndef XF_SITE_SITEMACHINE_H
#define XF_SITE_SITEMACHINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypto/seal.h"

typedef enum xf_sitem_phase {
  XF_SITEM_MODEL = 0, /* receiving the model stream */
  XF_SITEM_HELD,      /* the model is in; held until the aggregator's TaskGo */
  XF_SITEM_QUEUED,    /* ready: waiting for the worker */
  XF_SITEM_WORKING,   /* on the worker */
  XF_SITEM_REPORTING, /* the result is held: Metrics and the update to send */
  XF_SITEM_GONE,      /* no longer the site's (delivered, failed, dropped) */
  XF_SITEM_PHASES
} xf_sitem_phase;

typedef enum xf_sitem_event {
  XF_SITEM_MODEL_IN = 0, /* the model stream ended and matched the offer's digest */
  XF_SITEM_GO,           /* the aggregator's TaskGo, followed */
  XF_SITEM_UNHOLD,       /* offered again without a hold: the aggregator no longer holds it */
  XF_SITEM_WORKER,       /* the worker is free and this is the ready task that waited longest */
  XF_SITEM_TRAINED,      /* the worker's result is in */
  XF_SITEM_FAILED,       /* the worker could not finish it, or its result cannot go out */
  XF_SITEM_DELIVERED,    /* the aggregator acknowledged the whole update */
  XF_SITEM_DROP,         /* cancelled, replaced, refused or its session lost */
  XF_SITEM_EVENTS
} xf_sitem_event;

/* When a transition applies, besides its phase and event. */
typedef enum xf_sitem_when {
  XF_SITEM_ALWAYS = 0,
  XF_SITEM_IF_HELD,  /* the offer said hold and no go has come */
  XF_SITEM_IF_FREE,  /* not held, or its go came */
} xf_sitem_when;

typedef enum xf_sitem_action {
  XF_SITEM_NOTHING = 0,
  XF_SITEM_WAIT_GO, /* hold the model until the go */
  XF_SITEM_QUEUE,   /* join the worker's queue behind the tasks ready before it */
  XF_SITEM_TRAIN,   /* start the worker on it */
  XF_SITEM_REPORT,  /* send its Metrics, then its update, once the link allows */
  XF_SITEM_FORGET,  /* free it now */
  XF_SITEM_ABANDON, /* tell the worker to stop; freed when the worker hands it back */
  XF_SITEM_ACTIONS
} xf_sitem_action;

typedef struct xf_sitem_transition {
  xf_sitem_phase from;
  xf_sitem_event event;
  xf_sitem_when when;
  xf_sitem_phase to;
  xf_sitem_action action;
} xf_sitem_transition;

/* The table, in the order xf_sitem_step reads it (the first entry that
 * matches applies); *n gets its length. Every (phase, event) pair it does
 * not list leaves the task as it is. */
const xf_sitem_transition *xf_sitem_transitions(size_t *n);

/* One step: the transition of (*phase, event) for a task that is `held`
 * (the offer said hold and no go has come). True with *phase moved and
 * *action set when the table has one; false, nothing changed and *action
 * NOTHING, when it has none. */
bool xf_sitem_step(xf_sitem_phase *phase, xf_sitem_event event, bool held,
                   xf_sitem_action *action);

/* "model", "held", "queued", "training", "reporting", "gone" (the daemon's
 * logs say phase=NAME). */
const char *xf_sitem_phase_name(xf_sitem_phase p);
/* "model-in", "go", "unhold", "worker", "trained", "failed", "delivered",
 * "drop". */
const char *xf_sitem_event_name(xf_sitem_event e);
/* "always", "held", "free". */
const char *xf_sitem_when_name(xf_sitem_when w);
/* "-", "wait-go", "queue", "train", "report", "forget", "abandon". */
const char *xf_sitem_action_name(xf_sitem_action a);

/* Whether a task has outlived its round: held from an earlier session (not
 * offered again on this one), not on the worker, and past its deadline by
 * now_ms (or it had none). An offer that needs room drops such tasks, so
 * that a task whose aggregator is gone does not keep a place for good. */
bool xf_sitem_stale(bool offered_now, bool on_worker, uint64_t deadline_ms, uint64_t now_ms);

/* ---- an offer of a task the site holds ------------------------------------------- */

/* What the site holds of the task offered again. */
typedef struct xf_sitem_held {
  xf_sitem_phase phase;
  bool same_model;    /* the offer's model digest and evaluate_only are the task's */
  bool hold, go;      /* the offer it was taken at said hold; its go came */
  bool evaluate_only;
  bool secagg;        /* its update goes out masked */
  bool sealed;        /* its update is sealed to seal_pk */
  const uint8_t *seal_pk;
  uint64_t update_stream_id;
} xf_sitem_held;

/* What the offer says this time. */
typedef struct xf_sitem_again {
  bool hold;
  const uint8_t *seal_key; /* NULL: none, or not a key */
  uint64_t model_stream_id, update_stream_id;
} xf_sitem_again;

typedef enum xf_sitem_reoffer_kind {
  XF_SITEM_RESUME = 0,   /* taken up where it was, and accepted again */
  XF_SITEM_OTHER_MODEL,  /* another model: the task is dropped and the offer decided anew */
  XF_SITEM_BUSY,         /* another model while the worker trains this one: refused BUSY */
  XF_SITEM_SESSION_LOST, /* held again after its go with a masked update: its masks belong
                            to the session the aggregator lost; refused and dropped */
} xf_sitem_reoffer_kind;

typedef struct xf_sitem_reoffer {
  xf_sitem_reoffer_kind kind;
  /* RESUME and SESSION_LOST: what changes, in this order (SESSION_LOST
   * then refuses and drops the task) */
  bool reseal;             /* seal the result again to the offer's new key */
  bool model_stream;       /* the model stream has the offer's id now */
  bool update_stream;      /* the update goes out on the offer's stream id */
  bool unhold;             /* the aggregator no longer holds it: it trains (XF_SITEM_UNHOLD) */
  bool rehold;             /* held again: what was made goes out after the next go */
} xf_sitem_reoffer;

/* Decides an offer of (job, round, attempt) that the site holds a task of.
 * A restarted aggregator offers its tasks again: the task resumes, with
 * its result resealed to the new key and sent on the new stream without
 * training again. */
void xf_sitem_reoffer_decide(const xf_sitem_held *t, const xf_sitem_again *o,
                             xf_sitem_reoffer *out);

#endif
