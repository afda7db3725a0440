/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's replies (TaskAccept, TaskRefusal, Error) queued for
 * the coordinator; its half of each task (the update sender, the sealing
 * key and stream id); and the task set's actions performed
 * (site/taskset.h, site/daemon_internal.h). On the loop thread. */
#include "site/daemon_internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "crypto/seal.h"
#include "net/conn.h"
#include "net/tensor.h"
#include "update/update.h"

/* ---- replies --------------------------------------------------------------------- */

static reply *reply_slot(daemon_t *d) {
  if (d->n_replies == REPLIES_MAX) {
    XF_ERROR("site_replies_overflow", "coordinator=%s pending=%d", d->cfg.coordinator,
             d->n_replies);
    snprintf(d->close_reason, sizeof(d->close_reason),
             "more than %d replies waiting for the coordinator to read", REPLIES_MAX);
    if (d->conn) xf_conn_close(d->conn);
    return NULL;
  }
  reply *r = &d->replies[d->n_replies++];
  memset(r, 0, sizeof(*r));
  return r;
}

void xf__site_send_error(daemon_t *d, xf_err code, const char *fmt, ...) {
  if (!d->conn) return;
  reply *r = reply_slot(d);
  if (!r) return;
  r->kind = XFED__ENVELOPE__BODY_ERROR;
  r->code = (uint32_t)code;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->text, sizeof(r->text), fmt, ap);
  va_end(ap);
  char q[600];
  XF_WARN("site_error_sent", "code=%s message=\"%s\"", xf_err_name(code),
          xf__site_logq(q, sizeof(q), r->text));
}

void xf__site_send_accept(daemon_t *d, const task *t) {
  if (!d->conn) return;
  reply *r = reply_slot(d);
  if (!r) return;
  r->kind = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  snprintf(r->job_id, sizeof(r->job_id), "%s", t->job_id);
  r->round = t->round;
  r->attempt = t->attempt;
}

void xf__site_send_refusal(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                           Xfed__TaskRefusal__Reason reason, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  char q[1024], qj[JOB_ID_MAX];
  XF_WARN("task_refused", "job=%s round=%u attempt=%u reason=%s details=\"%s\"",
          xf__site_logq(qj, sizeof(qj), job), (unsigned)round, (unsigned)attempt,
          xf_task_refusal_reason_name(reason), xf__site_logq(q, sizeof(q), text));
  if (!d->conn) return;
  reply *r = reply_slot(d);
  if (!r) return;
  r->kind = XFED__ENVELOPE__BODY_TASK_REFUSAL;
  snprintf(r->job_id, sizeof(r->job_id), "%s", job);
  r->round = round;
  r->attempt = attempt;
  r->reason = (int)reason;
  snprintf(r->text, sizeof(r->text), "%s", text);
}

/* Sends the queued replies in order. False while the write queue is full
 * (on_drain calls xf__site_pump again) or the connection is not open. */
bool xf__site_flush_replies(daemon_t *d) {
  int sent = 0;
  bool ok = true;
  while (sent < d->n_replies) {
    reply *r = &d->replies[sent];
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    Xfed__TaskAccept acc = XFED__TASK_ACCEPT__INIT;
    Xfed__TaskRefusal ref = XFED__TASK_REFUSAL__INIT;
    Xfed__Error e = XFED__ERROR__INIT;
    env.body_case = r->kind;
    switch (r->kind) {
    case XFED__ENVELOPE__BODY_TASK_ACCEPT:
      acc.job_id = r->job_id;
      acc.round = r->round;
      acc.attempt = r->attempt;
      env.task_accept = &acc;
      break;
    case XFED__ENVELOPE__BODY_TASK_REFUSAL:
      ref.job_id = r->job_id;
      ref.round = r->round;
      ref.attempt = r->attempt;
      ref.reason = (Xfed__TaskRefusal__Reason)r->reason;
      ref.details = r->text;
      env.task_refusal = &ref;
      break;
    default:
      e.code = r->code;
      e.message = r->text;
      env.error = &e;
      break;
    }
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_conn_send(d->conn, &env, &err);
    if (rc == XF_ERANGE) {
      ok = false;
      break;
    }
    if (rc != XF_OK) {
      char q[600];
      XF_WARN("site_reply_lost", "body=%s reason=\"%s\"",
              xf_envelope_body_name(&env), xf__site_logq(q, sizeof(q), err.msg));
      if (!xf_conn_is_open(d->conn)) {
        ok = false;
        break;
      }
    }
    sent++;
  }
  memmove(d->replies, d->replies + sent, (size_t)(d->n_replies - sent) * sizeof(reply));
  d->n_replies -= sent;
  return ok;
}

/* ---- tasks ------------------------------------------------------------------------ */

void xf__site_task_free(task *t) {
  if (!t) return;
  xf_tensor_receiver_free(t->model_rx);
  xf_free(t->model_bytes);
  xf_update_payload_free(&t->payload);
  xf_free(t->residual);
  xf_tensor_sender_free(t->sender);
  xf_site_dataset_free(&t->dataset);
  xf_free(t);
}

static task *user_of(const xf_site_task *e) { return e ? xf_site_task_user(e) : NULL; }

/* The task of (job, round, attempt), or NULL. */
task *xf__site_task_find(daemon_t *d, const char *job, uint32_t round, uint32_t attempt) {
  return user_of(xf_site_tasks_find(d->set, job, round, attempt));
}

/* The task of a job, whatever its round (a site holds one per job), or NULL. */
task *xf__site_task_of_job(daemon_t *d, const char *job) {
  return user_of(xf_site_tasks_of_job(d->set, job));
}

void xf__site_ignore_stream(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round) {
  ignored_stream *s = &d->ignored[d->next_ignored++ % IGNORED_MAX];
  s->stream_id = stream_id;
  snprintf(s->job_id, sizeof(s->job_id), "%s", job);
  s->round = round;
}

/* Whether a MODEL stream's frame belongs to a refused or dropped task.
 * Begin names the job and round (job non-NULL); chunks and ends only the
 * stream, which a Begin matched by job and round has recorded by then. */
bool xf__site_stream_ignored(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round) {
  for (int i = 0; i < IGNORED_MAX; i++) {
    ignored_stream *s = &d->ignored[i];
    if (!s->job_id[0]) continue;
    if (s->stream_id == stream_id) return true;
    if (job && s->stream_id == 0 && s->round == round && strcmp(s->job_id, job) == 0) {
      s->stream_id = stream_id;
      return true;
    }
  }
  return false;
}

/* Lets go of a live task for the daemon's own reason: freed now, or,
 * while the worker holds it, told to stop and freed when the worker hands
 * it back. Its model stream is ignored from now on. */
void xf__site_task_drop(daemon_t *d, task *t, const char *why) {
  if (!t || !t->entry || xf_site_task_phase(t->entry) == XF_SITEM_GONE) return;
  xf_site_tasks_drop(d->set, t->entry, why);
  xf__site_perform(d);
}

/* The update stream starts again with TensorBegin (its bytes or its id
 * changed, or the link dropped). */
static void task_stream_restart(task *t) {
  t->has_msg = false;
  t->awaiting_ack = false;
  t->end_sent = false;
  t->streaming = false;
  if (t->sender) xf_tensor_sender_rewind(t->sender);
}

/* Makes the UPDATE stream's sender over the payload's wire bytes,
 * replacing any earlier one (which must not outlive the bytes it read). The
 * sender hashes the bytes once: on the worker for float32 and encoded
 * updates, on the loop for masked ones and after a new key or stream id. */
xf_err xf__site_stream_update(task *t, xf_errctx *err) {
  const xf_update_payload *pl = &t->payload;
  xf_tensor_desc desc = {.stream_id = t->update_stream_id,
                         .kind = XFED__TENSOR_BEGIN__KIND__UPDATE,
                         .dtype = pl->form == XF_UPDATE_FLOAT32 ? XFED__TENSOR_BEGIN__DTYPE__F32
                                                                 : XFED__TENSOR_BEGIN__DTYPE__U8,
                         .element_count = pl->element_count,
                         .job_id = t->job_id,
                         .round = t->round,
                         .attempt = t->attempt,
                         .weight = t->samples};
  size_t chunk = 0;
  if (pl->sealed) {
    desc.sealed_by = pl->sealed_by;
    desc.sealed_chunk = XF_SEAL_STREAM_CHUNK;
    chunk = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  }
  xf_tensor_sender *sender = NULL;
  XF_GUARD(xf_tensor_sender_new(&desc, pl->wire, pl->wire_len, chunk, &sender, err));
  xf_tensor_sender_free(t->sender);
  t->sender = sender;
  return XF_OK;
}

/* The bytes the update costs on the wire (masked: once masked, the same). */
uint64_t xf__site_update_bytes(const task *t) {
  return t->payload.wire ? t->payload.wire_len : t->payload.element_count;
}

size_t xf__site_seal_context(const daemon_t *d, const task *t, char *buf, size_t cap) {
  return xf_seal_stream_context(buf, cap, t->job_id, t->round, t->attempt, d->cfg.site);
}

/* The aggregator offers the task again with another sealing key (it
 * restarted): from now on the update goes sealed to that one (the old key
 * is gone with it, so bytes sealed to it could never be opened). False
 * when the update cannot be streamed sealed to it: t is refused and let go
 * (freed, unless the set's actions are being taken). */
bool xf__site_seal_key_changed(daemon_t *d, task *t, const uint8_t *pk) {
  if (d->worker_task == t) { /* the worker may be sealing: after it */
    memcpy(t->seal_next, pk, XF_SEAL_PUBLICKEYBYTES);
    t->seal_next_set = true;
    return true;
  }
  memcpy(t->uo.seal_pk, pk, XF_SEAL_PUBLICKEYBYTES);
  if (!t->sender) return true; /* not sealed yet: the worker will use the new key */
  xf_errctx err;
  xf_errctx_clear(&err);
  char qj[JOB_ID_MAX], ctx[256];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  size_t ctx_len = xf__site_seal_context(d, t, ctx, sizeof(ctx));
  if (xf_update_seal(&t->payload, pk, ctx, ctx_len, &err) != XF_OK) {
    /* What goes out is sealed to the old key: the aggregator cannot open
     * it and leaves this site out of the round, saying so. */
    XF_ERROR("update_not_resealed", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
             err.msg);
    return true;
  }
  /* The old sender read the bytes just replaced. */
  xf_tensor_sender_free(t->sender);
  t->sender = NULL;
  if (xf__site_stream_update(t, &err) != XF_OK) {
    XF_ERROR("update_not_resealed", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
             err.msg);
    xf__site_send_refusal(d, t->job_id, t->round, t->attempt,
                          XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                          "cannot stream the update sealed to the new key: %s", err.msg);
    xf__site_task_drop(d, t, "the update cannot be sealed again");
    return false;
  }
  task_stream_restart(t);
  XF_INFO("update_resealed", "job=%s round=%u attempt=%u why=\"the aggregator's key changed\"",
          qj, (unsigned)t->round, (unsigned)t->attempt);
  return true;
}

/* The aggregator names another stream id for the update (it restarted):
 * the stream starts again under it. While the worker holds the task (it
 * may be making the sender), after it. A sender that cannot be made again
 * keeps the old id; the aggregator then refuses the stream, saying so. */
void xf__site_update_stream_changed(daemon_t *d, task *t, uint64_t id) {
  if (d->worker_task == t) {
    t->update_stream_next = id;
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  uint64_t before = t->update_stream_id;
  t->update_stream_id = id;
  if (t->sender && xf__site_stream_update(t, &err) != XF_OK) {
    t->update_stream_id = before;
    xf_site_tasks_update_stream_kept(d->set, t->entry, before);
    char qj[JOB_ID_MAX];
    XF_ERROR("update_stream_kept", "job=%s round=%u stream=%llu reason=\"%s\"",
             xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round,
             (unsigned long long)before, err.msg);
  }
  task_stream_restart(t);
}

/* ---- the set's actions -------------------------------------------------------------------- */

static void perform_accept(daemon_t *d, task *t, const xf_site_tasks_action *a) {
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  t->entry = a->task;
  if (a->resumed) {
    XF_INFO("task_resumed", "job=%s round=%u attempt=%u phase=%s", qj, (unsigned)a->round,
            (unsigned)a->attempt, xf_sitem_phase_name(a->phase));
    xf__site_send_accept(d, t);
    return;
  }
  t->update_stream_id = xf_site_task_update_stream(a->task);
  XF_INFO("task_accepted", "job=%s round=%u attempt=%u dataset=%s hold=%s queued=%d", qj,
          (unsigned)t->round, (unsigned)t->attempt, t->dataset.name,
          xf_site_task_held(a->task) ? "true" : "false", xf_site_tasks_count(d->set));
  xf__site_send_accept(d, t);
  if (a->advertise) {
    (void)xf__site_flush_replies(d); /* the acceptance first, then our keys */
    xf__site_sa_advertise(d, t);
  }
}

/* The log lines of a go, a cancel and the worker handing back a result
 * nobody wants. */
static void perform_note(daemon_t *d, const xf_site_tasks_action *a) {
  char qj[JOB_ID_MAX], q[600];
  xf__site_logq(qj, sizeof(qj), a->job);
  unsigned round = (unsigned)a->round, attempt = (unsigned)a->attempt;
  switch (a->kind) {
  case XF_SITE_TASKS_HELD:
    XF_INFO("task_held", "job=%s round=%u attempt=%u why=\"waiting for the aggregator's go\"",
            qj, round, attempt);
    break;
  case XF_SITE_TASKS_GO:
    XF_INFO("task_go", "job=%s round=%u attempt=%u phase=%s secagg=%s", qj, round, attempt,
            xf_sitem_phase_name(a->phase), a->secagg ? "true" : "false");
    if (a->advertise) {
      (void)xf__site_flush_replies(d);
      xf__site_sa_advertise(d, a->user);
    }
    break;
  case XF_SITE_TASKS_GO_REPEATED:
    XF_INFO("task_go_repeated", "job=%s round=%u attempt=%u phase=%s", qj, round, attempt,
            xf_sitem_phase_name(a->phase));
    break;
  case XF_SITE_TASKS_GO_UNKNOWN:
    XF_WARN("task_go_unknown", "job=%s round=%u attempt=%u why=\"no such task here\"", qj, round,
            attempt);
    xf__site_send_error(d, XF_ENOENT,
                        "TaskGo for job %s round %u attempt %u names no task of this site; "
                        "offer it first", a->job, round, attempt);
    break;
  case XF_SITE_TASKS_CANCELLED:
    XF_INFO("task_cancelled", "job=%s round=%u attempt=%u phase=%s reason=\"%s\"", qj, round,
            attempt, xf_sitem_phase_name(a->phase), xf__site_logq(q, sizeof(q), a->text));
    break;
  case XF_SITE_TASKS_CANCEL_UNKNOWN:
    XF_INFO("task_cancel_ignored", "job=%s round=%u attempt=%u why=\"no such task here\"", qj,
            round, attempt);
    break;
  default: break;
  }
}

/* Lets t go: DROP frees it; ABANDON tells the worker holding it to stop. */
static void perform_let_go(daemon_t *d, task *t, const xf_site_tasks_action *a) {
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  switch (a->kind) {
  case XF_SITE_TASKS_DROP:
  case XF_SITE_TASKS_ABANDON:
    if (a->why) {
      XF_INFO("task_dropped", "job=%s round=%u attempt=%u phase=%s why=\"%s\"", qj,
              (unsigned)t->round, (unsigned)t->attempt, xf_sitem_phase_name(a->phase), a->why);
      xf__site_ignore_stream(d, t->model_stream_id, t->job_id, t->round);
      t->entry = NULL;
    }
    if (a->kind == XF_SITE_TASKS_ABANDON) atomic_store(&t->abandoned, true);
    else xf__site_task_free(t);
    break;
  case XF_SITE_TASKS_FORGET:
    if (a->ignore) xf__site_ignore_stream(d, t->model_stream_id, t->job_id, t->round);
    xf__site_task_free(t);
    break;
  case XF_SITE_TASKS_RESULT_DROPPED:
    XF_INFO("task_result_dropped", "job=%s round=%u attempt=%u why=%s", qj, (unsigned)t->round,
            (unsigned)t->attempt, d->stopping ? "stopping" : "withdrawn");
    xf__site_task_free(t);
    break;
  default: break;
  }
}

/* A task whose worker failed (t->failed: an Error too), or whose result
 * cannot go out: the refusal, so that the round stops waiting for it. An
 * Error as well, which a coordinator whose round machine takes no refusal
 * after an acceptance reads as this site dropping out. */
static void perform_tell_failed(daemon_t *d, const task *t) {
  if (t->failed)
    xf__site_send_error(d, t->fail_code, "job %s round %u attempt %u: %s", t->job_id,
                        (unsigned)t->round, (unsigned)t->attempt, t->fail_detail);
  xf__site_send_refusal(d, t->job_id, t->round, t->attempt, t->fail_reason, "%s",
                        t->fail_detail);
}

static void perform(daemon_t *d, const xf_site_tasks_action *a) {
  task *t = a->user;
  switch (a->kind) {
  case XF_SITE_TASKS_ACCEPT: perform_accept(d, t, a); break;
  case XF_SITE_TASKS_REFUSE:
    xf__site_send_refusal(d, a->job, a->round, a->attempt, a->reason, "%s", a->text);
    break;
  case XF_SITE_TASKS_TELL_FAILED: perform_tell_failed(d, t); break;
  case XF_SITE_TASKS_IGNORE_STREAM: xf__site_ignore_stream(d, a->stream_id, a->job, a->round); break;
  case XF_SITE_TASKS_RESEAL: (void)xf__site_seal_key_changed(d, t, a->seal_pk); break;
  case XF_SITE_TASKS_MODEL_STREAM: t->model_stream_id = a->stream_id; break;
  case XF_SITE_TASKS_UPDATE_STREAM: xf__site_update_stream_changed(d, t, a->stream_id); break;
  case XF_SITE_TASKS_SA_FORGET: xf_site_sa_forget(d->sa, a->job, a->round, a->attempt); break;
  case XF_SITE_TASKS_START: xf__site_worker_start(d, t); break;
  case XF_SITE_TASKS_REPORT: xf__site_pump(d); break;
  case XF_SITE_TASKS_RESTART_STREAM: task_stream_restart(t); break;
  case XF_SITE_TASKS_DROP:
  case XF_SITE_TASKS_ABANDON:
  case XF_SITE_TASKS_FORGET:
  case XF_SITE_TASKS_RESULT_DROPPED:
    if (t) perform_let_go(d, t, a);
    break;
  default: perform_note(d, a); break;
  }
}

/* Takes the set's actions in order. The events they cause queue behind
 * them and are taken by the same loop: a call while it runs returns. */
void xf__site_perform(daemon_t *d) {
  if (d->performing) return;
  d->performing = true;
  xf_site_tasks_action a;
  while (xf_site_tasks_next(d->set, &a)) perform(d, &a);
  d->performing = false;
}
