/* SPDX-License-Identifier: Apache-2.0 */
/* The site's task set: which tasks a site holds, in which order, and what
 * becomes of each on every event, with no sockets and no clock of its own
 * (docs/site-machine.md, "The task set"). The daemon translates frames and
 * the worker's outcome into events, passing the time in, and performs the
 * actions it gets back: accept or refuse (with the reason), start the
 * worker, report, reseal, let go. Each task's phases are site/sitemachine.h's
 * table; whether an offer or a go is taken is site/offer.h's; a task's
 * heavy state (spec, dataset, model, update) is the daemon's, behind the
 * opaque user pointer each entry carries. On one thread. */
#ifndef XF_SITE_TASKSET_H
#define XF_SITE_TASKSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/seal.h"
#include "site/offer.h"
#include "site/sitemachine.h"

typedef struct xf_site_tasks xf_site_tasks;
/* One task of the set, owned by it. Once let go (DROP, ABANDON, FORGET,
 * RESULT_DROPPED) it reads phase GONE until the actions are all taken
 * (xf_site_tasks_next false), and is freed then. */
typedef struct xf_site_task xf_site_task;

typedef enum xf_site_tasks_action_kind {
  XF_SITE_TASKS_ACCEPT = 0,    /* send TaskAccept for `user` (resumed: taken up where it was;
                                  advertise: its secure-aggregation keys follow) */
  XF_SITE_TASKS_REFUSE,        /* send TaskRefusal for (job, round, attempt): reason, text */
  XF_SITE_TASKS_TELL_FAILED,   /* `user`'s worker failed: tell the coordinator (Error and
                                  TaskRefusal from the task's outcome) */
  XF_SITE_TASKS_IGNORE_STREAM, /* let (job, round)'s model stream `stream_id` go quietly */
  XF_SITE_TASKS_RESEAL,        /* seal `user`'s update to seal_pk from now on */
  XF_SITE_TASKS_MODEL_STREAM,  /* `user`'s model comes on stream_id */
  XF_SITE_TASKS_UPDATE_STREAM, /* `user`'s update goes out on stream_id (the stream starts
                                  again); xf_site_tasks_update_stream_kept if it cannot */
  XF_SITE_TASKS_HELD,          /* `user`'s model is in; it waits for the go (log) */
  XF_SITE_TASKS_GO,            /* `user` follows its go (advertise: its keys go out first) */
  XF_SITE_TASKS_GO_REPEATED,   /* a go for `user` that it had already (log; phase) */
  XF_SITE_TASKS_GO_UNKNOWN,    /* a go for (job, round, attempt), which the site does not hold */
  XF_SITE_TASKS_CANCELLED,     /* `user` is cancelled (log: phase, text the reason) */
  XF_SITE_TASKS_CANCEL_UNKNOWN,/* a cancel for (job, round, attempt): nothing to cancel */
  XF_SITE_TASKS_SA_FORGET,     /* forget (job, round, attempt)'s round of secure aggregation */
  XF_SITE_TASKS_START,         /* start the worker on `user` */
  XF_SITE_TASKS_REPORT,        /* send what can go: Metrics, then updates
                                  (xf_site_tasks_reporting gives the order) */
  XF_SITE_TASKS_RESTART_STREAM,/* `user`'s update stream starts again with TensorBegin */
  XF_SITE_TASKS_DROP,          /* `user` is let go (log: phase, why): ignore its model stream
                                  and free it */
  XF_SITE_TASKS_ABANDON,       /* likewise, but the worker holds it: tell it to stop; it comes
                                  back through xf_site_tasks_worker_back (why NULL: stopping) */
  XF_SITE_TASKS_FORGET,        /* `user` is done (delivered, or failed: `ignore` its model
                                  stream): free it */
  XF_SITE_TASKS_RESULT_DROPPED,/* the worker handed back `user`, which nobody wants: free it */
  XF_SITE_TASKS_ACTIONS
} xf_site_tasks_action_kind;

/* "accept", "refuse", ... as the enum reads, lowercase, '-' for '_'. */
const char *xf_site_tasks_action_name(xf_site_tasks_action_kind k);

/* Pointers in an action point into the set and stay valid until the next
 * action is taken. */
typedef struct xf_site_tasks_action {
  xf_site_tasks_action_kind kind;
  void *user;
  xf_site_task *task;         /* the set's entry, when the action names one */
  char job[XF_SITE_JOB_ID_MAX];
  uint32_t round, attempt;
  xf_sitem_phase phase;       /* the task's phase when the action was decided */
  Xfed__TaskRefusal__Reason reason;
  char text[XF_SITE_WHY_MAX]; /* REFUSE: details; CANCELLED: the coordinator's reason */
  const char *why;            /* DROP, ABANDON: why, for the log */
  uint64_t stream_id;
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  bool resumed;   /* ACCEPT: taken up where it was */
  bool advertise; /* ACCEPT, GO: its secure-aggregation keys go out next */
  bool secagg;    /* GO: the go carries a secure-aggregation setup */
  bool ignore;    /* FORGET: let its model stream go quietly */
} xf_site_tasks_action;

/* An empty set holding at most `max` tasks (1..64). XF_EINVAL, XF_ENOMEM.
 * The caller owns *out (xf_site_tasks_free, which frees no user state). */
xf_err xf_site_tasks_new(int max, xf_site_tasks **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_site_tasks_free(xf_site_tasks *s);

/* The next action to take, in the order they were decided; false when
 * none is left. Events may come while actions are taken: their actions go
 * behind, and a task they let go takes with it the actions earlier events
 * queued for it (a resumed task whose update cannot be sealed again is not
 * accepted). */
bool xf_site_tasks_next(xf_site_tasks *s, xf_site_tasks_action *out);

/* ---- events --------------------------------------------------------------------- */

/* A TaskOffer's fields the set decides on (pointers borrowed for the call). */
typedef struct xf_site_tasks_offer {
  const char *job;
  uint32_t round, attempt;
  const uint8_t *model_digest; /* XF_DIGEST_BYTES */
  bool evaluate_only, hold;
  const uint8_t *seal_key;     /* NULL: none, or not a key */
  uint64_t model_stream_id, update_stream_id;
  uint64_t deadline_ms;        /* 0: none */
} xf_site_tasks_offer;

typedef enum xf_site_tasks_offer_next {
  XF_SITE_TASKS_ANSWERED = 0, /* the set answered it (resumed, or refused) */
  XF_SITE_TASKS_CHECK,        /* a new task: run the checks (site/offer.h), then
                                 xf_site_tasks_offer_checked */
} xf_site_tasks_offer_next;

/* An offer at now_ms. A task the site holds of (job, round, attempt) with
 * the same model resumes (reseal, streams, unhold or hold again, as
 * xf_sitem_reoffer_decide says) and is accepted again, or, bound to a
 * secure-aggregation session the aggregator lost, refused and dropped;
 * with another model it is dropped, or refused BUSY while the worker
 * trains it. The job's task of another round or attempt is dropped, and
 * so are stale tasks (xf_sitem_stale). CHECK: the offer is for the checks;
 * when the set is full, busy (busy_len bytes) says so for the check's room,
 * naming the tasks held; otherwise busy[0] is '\0'. */
xf_site_tasks_offer_next xf_site_tasks_offer_in(xf_site_tasks *s, const xf_site_tasks_offer *o,
                                                uint64_t now_ms, char *busy, size_t busy_len);

/* What the daemon made of an offer the set sent to the checks. A user
 * that does not join the set comes back in a FORGET. */
typedef struct xf_site_tasks_checked {
  const xf_site_offer_verdict *verdict; /* xf_site_offer_check's */
  /* Taken by the checks, but the task could not be set up here (secure
   * aggregation, the residual): what failed and why; NULL when it was. */
  const char *setup_failed, *setup_err;
  bool out_of_memory;                   /* no room for the task's state: nothing to say */
  void *user;                           /* the daemon's task, when set up */
} xf_site_tasks_checked;

/* The checks' verdict on an offer xf_site_tasks_offer_in sent to them. A
 * refusal lets the model stream go and forgets a secure-aggregation round
 * begun for it; a task set up joins the set (phase MODEL) and is accepted,
 * its keys advertised when its update goes masked. */
void xf_site_tasks_offer_checked(xf_site_tasks *s, const xf_site_tasks_offer *o,
                                 const xf_site_tasks_checked *c);

/* A TaskGo for (job, round, attempt): the held task it is for, to check
 * (then xf_site_tasks_go_checked); NULL when the set answered it
 * (GO_UNKNOWN: no such task; GO_REPEATED: not held, or its go came). */
xf_site_task *xf_site_tasks_go_in(xf_site_tasks *s, const char *job, uint32_t round,
                                  uint32_t attempt);
/* The go check's verdict on t (xf_site_go_check, and the daemon's
 * secure-aggregation setup folded into step and why). Followed: t goes
 * (GO, then its phase's step); refused: REFUSE, and t is dropped (its
 * secure-aggregation round forgotten unless the cohort was too small).
 * go_secagg: the go carries a secure-aggregation setup. */
void xf_site_tasks_go_checked(xf_site_tasks *s, xf_site_task *t, xf_site_go_step step,
                              Xfed__TaskRefusal__Reason reason, const char *why, bool go_secagg);

/* A TaskCancel for (job, round, attempt); reason is the coordinator's. */
void xf_site_tasks_cancel(xf_site_tasks *s, const char *job, uint32_t round, uint32_t attempt,
                          const char *reason);

/* t's model stream ended and matched the offer. */
void xf_site_tasks_model_in(xf_site_tasks *s, xf_site_task *t);

/* The worker could not be started on t (START): t is refused, text the
 * details, and dropped. */
void xf_site_tasks_start_failed(xf_site_tasks *s, xf_site_task *t, const char *text);

/* The worker handed its task back; finished: it ran to the end (not
 * stopped). The task back, when it is still the set's and finished;
 * otherwise NULL, with RESULT_DROPPED queued. Either way the next ready
 * task may start. */
xf_site_task *xf_site_tasks_worker_back(xf_site_tasks *s, bool finished);

/* t's result is in: it joins the reports (xf_site_tasks_reporting) in the
 * order results came, and the next ready task may start. No REPORT is
 * queued: the daemon logs the result, then sends what can go. */
void xf_site_tasks_trained(xf_site_tasks *s, xf_site_task *t);

/* t could not be finished, or its result cannot go out: when tell, the
 * coordinator is told (TELL_FAILED) if t was offered on this link; then
 * FORGET (its model stream ignored), and the next ready task may start. */
void xf_site_tasks_failed(xf_site_tasks *s, xf_site_task *t, bool tell);

/* The aggregator has all of t (its update acknowledged, or its Metrics of
 * an evaluation): FORGET. */
void xf_site_tasks_delivered(xf_site_tasks *s, xf_site_task *t);

/* t is let go for the daemon's own reason (why, for the log): a failed
 * model stream, a refused round of secure aggregation, an update that
 * cannot be sealed again; the next ready task may start. */
void xf_site_tasks_drop(xf_site_tasks *s, xf_site_task *t, const char *why);

/* The link is down: every task keeps its place and what it made, but none
 * was offered on the next link yet (its results wait for the offer) and
 * every update stream starts again (RESTART_STREAM). */
void xf_site_tasks_link_down(xf_site_tasks *s);
/* A session is open: what waits may go (REPORT). */
void xf_site_tasks_link_up(xf_site_tasks *s);
/* The coordinator does not take t's update now: as for a lost link, for t. */
void xf_site_tasks_update_refused(xf_site_tasks *s, xf_site_task *t);
/* An UPDATE_STREAM the daemon could not make: t keeps the id it had. */
void xf_site_tasks_update_stream_kept(xf_site_tasks *s, xf_site_task *t, uint64_t id);

/* At now_ms: the stale tasks (xf_sitem_stale) are dropped. */
void xf_site_tasks_tick(xf_site_tasks *s, uint64_t now_ms);

/* The site stops: no task starts from now on; the one on the worker is
 * told to stop (ABANDON, why NULL), and comes back through worker_back. */
void xf_site_tasks_stop(xf_site_tasks *s);

/* ---- what the set holds ------------------------------------------------------------ */

int xf_site_tasks_count(const xf_site_tasks *s);
/* The i-th task, in the order they were accepted. */
xf_site_task *xf_site_tasks_at(const xf_site_tasks *s, int i);
xf_site_task *xf_site_tasks_find(const xf_site_tasks *s, const char *job, uint32_t round,
                                 uint32_t attempt);
/* The task of a job, whatever its round (one per job), or NULL. */
xf_site_task *xf_site_tasks_of_job(const xf_site_tasks *s, const char *job);
/* The user of the task on the worker (a live or an abandoned one), or NULL. */
void *xf_site_tasks_worker(const xf_site_tasks *s);
/* The tasks whose results may go out now (reporting, offered on this link,
 * not held), in the order their results came: at most max users into out;
 * returns their number. */
int xf_site_tasks_reporting(const xf_site_tasks *s, void **out, int max);

void *xf_site_task_user(const xf_site_task *t);
/* The stream its update goes out on: the offer's, or xf_site_update_stream_id. */
uint64_t xf_site_task_update_stream(const xf_site_task *t);
xf_sitem_phase xf_site_task_phase(const xf_site_task *t);
/* Whether it was offered on the current link (its results may go out). */
bool xf_site_task_offered_now(const xf_site_task *t);
/* Whether it waits for a go (the offer said hold and no go came). */
bool xf_site_task_held(const xf_site_task *t);

#endif
