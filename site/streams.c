/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's streams: a task's report (its Metrics, then the update
 * stream out, one at a time) and the model stream in
 * (site/daemon_internal.h). On the loop thread. */
#include "site/daemon_internal.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "net/conn.h"
#include "net/tensor.h"
#include "site/residency.h"

/* ---- the report: Metrics, then the update stream ------------------------------------------ */

static xf_err send_metrics(daemon_t *d, task *t, xf_errctx *err) {
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = t->job_id;
  m.round = t->round;
  m.attempt = t->attempt;
  m.site = d->cfg.site;
  m.region = d->cfg.region;
  m.has_train = t->has_train;
  m.train_loss = t->has_train ? t->train_loss : 0;
  m.has_test = true;
  m.test_loss = t->test_loss;
  m.test_accuracy = t->test_accuracy;
  m.samples = t->samples;
  m.bytes_down = t->model_len;
  m.bytes_up = t->has_train ? xf__site_update_bytes(t) : 0;
  m.model_round = t->model_round;
  m.seconds = t->seconds;
  if (t->has_train && t->has_epsilon) {
    m.has_epsilon = true;
    m.epsilon = t->epsilon;
    m.dataset = t->dataset.name;
    m.noise_multiplier = t->plan.noise_multiplier;
    m.ledger_epsilon = t->ledger_epsilon;
    m.budget_epsilon = t->dataset.has_budget ? t->dataset.budget_epsilon : 0;
  }
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  return xf_conn_send(d->conn, &env, err);
}

typedef enum report_outcome {
  REPORT_SENT = 0, /* the Metrics are out; the update follows */
  REPORT_WAIT,     /* the write queue is full, or the send failed */
  REPORT_GONE,     /* the task is done (an evaluation) or refused */
} report_outcome;

/* Sends t's Metrics once (charging the privacy ledger first when the site
 * accounts for the release). */
static report_outcome report_metrics(daemon_t *d, task *t) {
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  if (t->has_train && t->plan.site_noise && !t->charged && !xf__site_charge_ledger(d, t)) {
    xf__site_task_failed(d, t, false);
    return REPORT_GONE;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = send_metrics(d, t, &err);
  if (rc == XF_ERANGE) return REPORT_WAIT;
  if (rc != XF_OK) {
    char q[600];
    XF_ERROR("metrics_not_sent", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
             xf__site_logq(q, sizeof(q), err.msg));
    return REPORT_WAIT;
  }
  t->metrics_sent = true;
  XF_INFO("metrics_sent", "job=%s round=%u attempt=%u", qj, (unsigned)t->round,
          (unsigned)t->attempt);
  if (t->sender || t->sa_waiting) return REPORT_SENT; /* the update follows (masked: its routing) */
  XF_INFO("task_done", "job=%s round=%u attempt=%u", qj, (unsigned)t->round, (unsigned)t->attempt);
  xf_site_tasks_delivered(d->set, t->entry);
  return REPORT_GONE;
}

/* Sends t's update stream from where it stands until the write queue is
 * full, it waits for a TensorAck, or TensorEnd is out. */
static void report_stream(daemon_t *d, task *t) {
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (t->awaiting_ack || t->end_sent) return;
  for (;;) {
    if (!t->has_msg) {
      if (xf_tensor_sender_next(t->sender, &t->msg) != XF_OK) return;
      t->has_msg = true;
    }
    xf_err rc = xf_conn_send(d->conn, &t->msg.env, &err);
    if (rc == XF_ERANGE) return;
    if (rc != XF_OK) {
      char q[600];
      XF_ERROR("update_not_sent", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
               xf__site_logq(q, sizeof(q), err.msg));
      snprintf(d->close_reason, sizeof(d->close_reason), "cannot send the update: %s", err.msg);
      xf_conn_close(d->conn);
      return;
    }
    t->has_msg = false;
    if (t->msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) {
      t->awaiting_ack = true;
      t->streaming = true;
      XF_INFO("update_begin", "job=%s round=%u attempt=%u stream=%llu bytes=%llu weight=%llu",
              qj, (unsigned)t->round, (unsigned)t->attempt,
              (unsigned long long)t->update_stream_id, (unsigned long long)xf__site_update_bytes(t),
              (unsigned long long)t->samples);
      return;
    }
    if (t->msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_END) {
      t->end_sent = true;
      return;
    }
  }
}

static void pump(daemon_t *d) {
  if (!xf__site_session_open(d) || !xf__site_flush_replies(d)) return;
  task *ready[XF_SITE_TASKS_MAX];
  int n = xf_site_tasks_reporting(d->set, (void **)ready, XF_SITE_TASKS_MAX);
  for (int i = 0; i < n; i++) {
    task *t = ready[i];
    if (t->metrics_sent) continue;
    if (report_metrics(d, t) == REPORT_WAIT) return; /* the queue is full */
    if (!xf__site_session_open(d)) return;
  }
  n = xf_site_tasks_reporting(d->set, (void **)ready, XF_SITE_TASKS_MAX);
  task *next = NULL;
  for (int i = 0; i < n && !next; i++)
    if (ready[i]->streaming) next = ready[i];
  for (int i = 0; i < n && !next; i++)
    if (ready[i]->sender && ready[i]->metrics_sent) next = ready[i];
  if (next) report_stream(d, next);
}

/* Sends what can go now: queued replies, then each held result's Metrics
 * and the updates one stream at a time (the stream in flight, else the
 * oldest result's), until the write queue is full (on_drain resumes), the
 * stream waits for a TensorAck, or nothing is left. */
void xf__site_pump(daemon_t *d) {
  pump(d);
  xf__site_perform(d); /* what the reports ended (done, refused) */
}

/* Records in the site's audit trail that t's update left the region. The
 * update is out by now: a trail that cannot take the row is logged loudly,
 * and nothing else can be done about it. */
static void audit_crossing(daemon_t *d, const task *t, uint64_t bytes) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_site_task_ref ref = {.site = d->cfg.site, .region = d->cfg.region, .job = t->job_id,
                          .round = t->round, .attempt = t->attempt};
  char q[600], qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  if (xf_site_audit_crossing(xf_site_registry_db(d->reg), &ref, t->crossing_to, bytes,
                             (double)xf__site_wall_ms() / 1000.0, &err) != XF_OK) {
    XF_ERROR("audit_failed", "job=%s round=%u kind=crossing reason=\"%s\"", qj,
             (unsigned)t->round, xf__site_logq(q, sizeof(q), err.msg));
    return;
  }
  char qto[XF_POLICY_NAME_MAX];
  XF_INFO("update_crossed", "job=%s round=%u attempt=%u from=%s to=%s bytes=%llu", qj,
          (unsigned)t->round, (unsigned)t->attempt, d->cfg.region,
          xf__site_logq(qto, sizeof(qto), t->crossing_to),
          (unsigned long long)bytes);
}

/* The task whose update stream is in flight under that id, or NULL. Two
 * jobs' updates may share an id (the default one is the round's and
 * attempt's); one stream at a time keeps them apart. */
static task *update_task(daemon_t *d, uint64_t stream_id) {
  for (int i = 0; i < xf_site_tasks_count(d->set); i++) {
    task *t = xf_site_task_user(xf_site_tasks_at(d->set, i));
    if (t->sender && t->streaming && t->update_stream_id == stream_id) return t;
  }
  return NULL;
}

/* The coordinator does not take t's update now (say a restarted one that
 * has not offered the task again yet): no TensorAck will come for it. The
 * update is kept and waits, as after a lost link, for the task to be
 * offered again; the other tasks' results go on meanwhile. */
void xf__site_on_update_refused(daemon_t *d, uint64_t stream_id) {
  task *t = update_task(d, stream_id);
  if (!t) return;
  char qj[JOB_ID_MAX];
  XF_WARN("update_kept", "job=%s round=%u attempt=%u why=\"the coordinator does not hold the "
          "task now; it goes again once the task is offered again\"",
          xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt);
  xf_site_tasks_update_refused(d->set, t->entry);
  xf__site_perform(d);
}

void xf__site_on_tensor_ack(daemon_t *d, const Xfed__TensorAck *a) {
  task *t = update_task(d, a->stream_id);
  if (!t) {
    XF_DEBUG("ack_ignored", "stream=%llu why=\"no update of this site has that stream\"",
             (unsigned long long)a->stream_id);
    return;
  }
  char qj[JOB_ID_MAX];
  xf__site_logq(qj, sizeof(qj), t->job_id);
  uint64_t total = t->payload.wire_len;
  if (t->awaiting_ack) {
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_tensor_sender_resume(t->sender, a->next_offset, &err) != XF_OK) {
      xf__site_send_error(d, XF_ERANGE, "TensorAck for update stream %llu of job %s round %u: %s",
                          (unsigned long long)a->stream_id, t->job_id, (unsigned)t->round, err.msg);
      snprintf(d->close_reason, sizeof(d->close_reason), "bad TensorAck: %s", err.msg);
      xf__site_pump(d);
      xf_conn_close(d->conn);
      return;
    }
    t->awaiting_ack = false;
    XF_INFO("update_resume", "job=%s round=%u attempt=%u offset=%llu bytes=%llu", qj,
            (unsigned)t->round, (unsigned)t->attempt, (unsigned long long)a->next_offset,
            (unsigned long long)total);
    xf__site_pump(d);
    return;
  }
  if (t->end_sent && a->next_offset == total) {
    XF_INFO("update_delivered", "job=%s round=%u attempt=%u bytes=%llu", qj, (unsigned)t->round,
            (unsigned)t->attempt, (unsigned long long)total);
    if (t->crossing) audit_crossing(d, t, total);
    xf_site_tasks_delivered(d->set, t->entry);
    xf__site_pump(d); /* the next update's turn, after t is let go */
    return;
  }
  XF_DEBUG("update_progress", "job=%s round=%u offset=%llu", qj, (unsigned)t->round,
           (unsigned long long)a->next_offset);
}

/* ---- the model stream ---------------------------------------------------------------------- */

xf_err xf__site_model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                           xf_errctx *ctx) {
  task *t = user;
  XF_ENSURE(t->model_bytes && offset <= t->model_len && len <= t->model_len - offset, ctx,
            XF_ERANGE, "model chunk at %llu is outside the %llu-byte model",
            (unsigned long long)offset, (unsigned long long)t->model_len);
  memcpy(t->model_bytes + offset, data, len);
  return XF_OK;
}

static void send_ack(daemon_t *d, uint64_t stream_id, uint64_t next_offset) {
  Xfed__TensorAck a = XFED__TENSOR_ACK__INIT;
  a.stream_id = stream_id;
  a.next_offset = next_offset;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &a;
  xf_errctx err;
  xf_errctx_clear(&err);
  /* An ack is a few bytes and the only thing that lets the coordinator go
   * on: it waits behind nothing, since we never fill the queue while a
   * model is coming in. A failure is logged; the coordinator resends. */
  if (xf_conn_send(d->conn, &env, &err) != XF_OK) {
    char q[600];
    XF_WARN("ack_not_sent", "stream=%llu reason=\"%s\"", (unsigned long long)stream_id,
            xf__site_logq(q, sizeof(q), err.msg));
  }
}

/* Whether t's model is still coming in. */
static bool receiving(const task *t) { return xf_site_task_phase(t->entry) == XF_SITEM_MODEL; }

/* The task whose model a stream carries, by stream id. Should two tasks
 * name the same id, the one whose receiver took that stream's TensorBegin
 * and is still receiving comes first. */
static task *model_task(daemon_t *d, uint64_t stream_id) {
  task *found = NULL;
  for (int i = 0; i < xf_site_tasks_count(d->set); i++) {
    task *t = xf_site_task_user(xf_site_tasks_at(d->set, i));
    if (!t->model_stream_id || t->model_stream_id != stream_id) continue;
    const xf_tensor_info *info = xf_tensor_receiver_info(t->model_rx);
    if (receiving(t) && info && info->stream_id == stream_id) return t;
    if (!found) found = t;
  }
  return found;
}

/* Fails a task after its acceptance: Error for the stream, a refusal so
 * the round stops waiting, and the task dropped. */
static void model_failed(daemon_t *d, task *t, xf_err code, const char *msg) {
  xf__site_send_error(d, code, "model stream of job %s round %u: %s", t->job_id, (unsigned)t->round,
                      msg);
  xf__site_send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                        "the model stream failed: %s", msg);
  xf__site_task_drop(d, t, "model stream failed");
}

void xf__site_on_tensor_begin(daemon_t *d, const Xfed__TensorBegin *b) {
  const char *job = b->job_id ? b->job_id : "";
  if (b->kind != XFED__TENSOR_BEGIN__KIND__MODEL) {
    xf__site_send_error(d, XF_EUNSUPPORTED,
                        "a site receives MODEL streams only; stream %llu is of kind %d",
                        (unsigned long long)b->stream_id, (int)b->kind);
    return;
  }
  task *t = xf__site_task_of_job(d, job);
  bool mine = t && b->round == t->round &&
              (b->attempt == 0 || b->attempt == t->attempt) &&
              (t->model_stream_id == 0 || t->model_stream_id == b->stream_id);
  if (!mine) {
    if (xf__site_stream_ignored(d, b->stream_id, job, b->round)) return;
    xf__site_send_error(d, XF_EINVAL,
                        "MODEL stream %llu of job %s round %u matches no task of this site",
                        (unsigned long long)b->stream_id, job, (unsigned)b->round);
    return;
  }
  t->model_stream_id = b->stream_id;
  if (!receiving(t)) {
    /* The same model again, after a reconnect: we have it all. */
    send_ack(d, b->stream_id, b->total_bytes);
    return;
  }
  if (b->dtype != XFED__TENSOR_BEGIN__DTYPE__U8) {
    model_failed(d, t, XF_EFORMAT, "a model travels as U8 bytes of a model file");
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_tensor_info *info = xf_tensor_receiver_info(t->model_rx);
  if (info && info->stream_id != b->stream_id) {
    /* Offered again with another model stream: start that one afresh. */
    xf_tensor_receiver *rx = NULL;
    if (xf_tensor_receiver_new(XF_SITE_MODEL_MAX, xf__site_model_sink, t, &rx, &err) != XF_OK) {
      model_failed(d, t, XF_ENOMEM, "the site cannot allocate a model receiver");
      return;
    }
    xf_tensor_receiver_free(t->model_rx);
    t->model_rx = rx;
    xf_free(t->model_bytes);
    t->model_bytes = NULL;
  }
  xf_err rc = xf_tensor_receiver_begin(t->model_rx, b, &err);
  if (rc == XF_ERANGE) {
    model_failed(d, t, rc, err.msg);
    return;
  }
  if (rc != XF_OK) {
    xf__site_send_error(d, rc, "%s", err.msg);
    return;
  }
  if (!t->model_bytes) {
    t->model_len = b->total_bytes;
    t->model_bytes = xf_malloc(t->model_len ? (size_t)t->model_len : 1);
    if (!t->model_bytes) {
      model_failed(d, t, XF_ENOMEM, "the site cannot allocate the model");
      return;
    }
  }
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(t->model_rx, &a);
  send_ack(d, a.stream_id, a.next_offset);
}

void xf__site_on_tensor_chunk(daemon_t *d, const Xfed__TensorChunk *c) {
  task *t = model_task(d, c->stream_id);
  if (!t) {
    if (xf__site_stream_ignored(d, c->stream_id, NULL, 0)) return;
    xf__site_send_error(d, XF_EINVAL,
                        "TensorChunk of stream %llu, which this site does not receive",
                        (unsigned long long)c->stream_id);
    return;
  }
  if (!receiving(t)) return; /* a resend of a model we hold */
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_receiver_chunk(t->model_rx, c, &err);
  if (rc == XF_OK) return;
  /* A gap or a malformed chunk leaves the receiver as it was: say where to
   * resume. */
  xf__site_send_error(d, rc, "%s", err.msg);
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(t->model_rx, &a);
  send_ack(d, a.stream_id, a.next_offset);
}

void xf__site_on_tensor_end(daemon_t *d, const Xfed__TensorEnd *e) {
  task *t = model_task(d, e->stream_id);
  if (!t) {
    if (xf__site_stream_ignored(d, e->stream_id, NULL, 0)) return;
    xf__site_send_error(d, XF_EINVAL, "TensorEnd of stream %llu, which this site does not receive",
                        (unsigned long long)e->stream_id);
    return;
  }
  if (!receiving(t)) {
    send_ack(d, e->stream_id, t->model_len);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_receiver_end(t->model_rx, e, &err);
  if (rc == XF_ETRUNCATED) {
    Xfed__TensorAck a;
    xf_tensor_receiver_ack(t->model_rx, &a);
    send_ack(d, a.stream_id, a.next_offset);
    return;
  }
  if (rc != XF_OK) {
    model_failed(d, t, rc, err.msg);
    return;
  }
  send_ack(d, e->stream_id, t->model_len);
  char qj[JOB_ID_MAX];
  XF_INFO("model_received", "job=%s round=%u attempt=%u bytes=%llu",
          xf__site_logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          (unsigned long long)t->model_len);
  xf_site_tasks_model_in(d->set, t->entry);
  xf__site_perform(d);
}
