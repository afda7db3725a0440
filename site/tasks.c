/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's task list and the replies (TaskAccept, TaskRefusal,
 * Error) queued for the coordinator; a task's update sender, its sealing
 * key and stream id (site/daemon_internal.h). On the loop thread. */
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

static bool task_is(const task *t, const char *job, uint32_t round, uint32_t attempt) {
  return t && strcmp(t->job_id, job) == 0 && t->round == round && t->attempt == attempt;
}

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

/* The task of (job, round, attempt), or NULL. */
task *xf__site_task_find(daemon_t *d, const char *job, uint32_t round, uint32_t attempt) {
  for (int i = 0; i < d->n_tasks; i++)
    if (task_is(d->tasks[i], job, round, attempt)) return d->tasks[i];
  return NULL;
}

/* The task of a job, whatever its round (a site holds one per job), or NULL. */
task *xf__site_task_of_job(daemon_t *d, const char *job) {
  for (int i = 0; i < d->n_tasks; i++)
    if (strcmp(d->tasks[i]->job_id, job) == 0) return d->tasks[i];
  return NULL;
}

/* Whether t is still among the site's tasks (not dropped or done). */
bool xf__site_task_live(const daemon_t *d, const task *t) {
  for (int i = 0; i < d->n_tasks; i++)
    if (d->tasks[i] == t) return true;
  return false;
}

/* Takes t out of the list, keeping the order of the others. */
void xf__site_task_remove(daemon_t *d, const task *t) {
  for (int i = 0; i < d->n_tasks; i++) {
    if (d->tasks[i] != t) continue;
    memmove(d->tasks + i, d->tasks + i + 1, (size_t)(d->n_tasks - i - 1) * sizeof(task *));
    d->n_tasks--;
    return;
  }
}

/* Ends a task that is done (ev DELIVERED) or failed (FAILED): out of the
 * list and freed (the worker never holds a task that is done). */
void xf__site_task_done(daemon_t *d, task *t, xf_sitem_event ev) {
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, ev, t->hold && !t->go, &act);
  xf__site_task_remove(d, t);
  xf__site_task_free(t);
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

/* Lets go of a live task: freed now, or, while the worker holds it, told
 * to stop and freed when the worker hands it back. Its model stream is
 * ignored from now on. */
void xf__site_task_drop(daemon_t *d, task *t, const char *why) {
  if (!t) return;
  char qj[JOB_ID_MAX];
  XF_INFO("task_dropped", "job=%s round=%u attempt=%u phase=%s why=\"%s\"",
          xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          xf_sitem_phase_name(t->phase), why);
  xf__site_ignore_stream(d, t->model_stream_id, t->job_id, t->round);
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, XF_SITEM_DROP, t->hold && !t->go, &act);
  xf__site_task_remove(d, t);
  /* ABANDON: the worker frees it once it hands it back (it may have) */
  if (act == XF_SITEM_ABANDON && t == d->worker_task) atomic_store(&t->abandoned, true);
  else xf__site_task_free(t);
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

/* The stream state that a dropped link loses: the sender starts again with
 * TensorBegin once the task is offered again. */
void xf__site_task_link_lost(task *t) {
  t->offered_now = false;
  task_stream_restart(t);
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
 * is gone with it, so bytes sealed to it could never be opened). */
void xf__site_seal_key_changed(daemon_t *d, task *t, const uint8_t *pk) {
  if (d->worker_task == t) { /* the worker may be sealing: after it */
    memcpy(t->seal_next, pk, XF_SEAL_PUBLICKEYBYTES);
    t->seal_next_set = true;
    return;
  }
  memcpy(t->uo.seal_pk, pk, XF_SEAL_PUBLICKEYBYTES);
  if (!t->sender) return; /* not sealed yet: the worker will use the new key */
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
    return;
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
    return;
  }
  task_stream_restart(t);
  XF_INFO("update_resealed", "job=%s round=%u attempt=%u why=\"the aggregator's key changed\"",
          qj, (unsigned)t->round, (unsigned)t->attempt);
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
    char qj[JOB_ID_MAX];
    XF_ERROR("update_stream_kept", "job=%s round=%u stream=%llu reason=\"%s\"",
             xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round,
             (unsigned long long)before, err.msg);
  }
  task_stream_restart(t);
}
