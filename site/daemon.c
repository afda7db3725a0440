/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon: dialing and redialing, the session, task offers, the
 * model stream, training on the worker pool, and the update stream
 * (site/daemon.h). Everything but training runs on the loop thread. */
#include "site/daemon.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <uv.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/rng.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "privacy/noise.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "crypto/pki.h"
#include "kernels/backend.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "codec/codec.h"
#include "policy/release.h"
#include "update/update.h"
#include "net/conn.h"
#include "net/notify.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"
#include "http/http.h"
#include "http/prom.h"
#include "privacy/ledger.h"
#include "base/file.h"
#include "data/dataset.h"
#include "site/offer.h"
#include "site/siteagg.h"
#include "site/sitemachine.h"
#include "site/registry.h"
#include "site/residency.h"
#include "site/trainer.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "updates travel as float32 little-endian; add byte swapping for this host");

#define JOB_ID_MAX XF_SITE_JOB_ID_MAX
/* Replies (TaskAccept, TaskRefusal, Error) waiting for room in the write
 * queue. They only wait behind our own update chunks, so a handful is
 * plenty; a peer that makes us answer more than this without reading is
 * cut off. */
#define REPLIES_MAX 32
/* Addresses of the coordinator's name tried in turn before backing off. */
#define ADDRS_MAX 8
/* Model streams of refused or dropped tasks, whose frames are let go
 * quietly: the coordinator may have sent them before it read our answer.
 * Twice the tasks a site holds: each may have had a predecessor. */
#define IGNORED_MAX (2 * XF_SITE_TASKS_MAX)
/* Secure-aggregation rounds kept: one per job, and it outlives its task
 * (the unmasking comes after the update is delivered), so room for a
 * finished round of every job the site holds besides their live ones. */
#define SA_SLOTS (2 * XF_SITE_TASKS_MAX)

/* ---- small helpers ------------------------------------------------------------ */

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A copy of s fit for a quoted log value: quotes become apostrophes and
 * control characters spaces, so one event stays one parsable line. */
static const char *logq(char *buf, size_t n, const char *s) {
  size_t i = 0;
  for (; s && s[i] && i + 1 < n; i++) {
    char ch = s[i];
    buf[i] = ch == '"' ? '\'' : ((unsigned char)ch < 0x20 ? ' ' : ch);
  }
  buf[i] = '\0';
  return buf;
}

static const char *end_name(xf_conn_end end) {
#define XF__END_NAME(name, msg) #name,
  static const char *const names[] = {XF_CONN_END_MAP(XF__END_NAME)};
#undef XF__END_NAME
  return (unsigned)end < XF_CONN_END_COUNT ? names[end] : "UNKNOWN";
}

/* The share of the last round's top-k residual a site carries into the next
 * update. Measured on the quickstart job with topk:0.01+q8 (final accuracy
 * for 0, 0.3, 0.5, 0.7 and 1: 0.8387, 0.8425, 0.8478, 0.8482, 0.8393). */
#define XF_SITE_RESIDUAL_DISCOUNT 0.7f

/* ---- the state ----------------------------------------------------------------- */

typedef struct xf_site_daemon daemon_t;

/* One task: an accepted offer, from its model to the final TensorAck of its
 * update. The worker owns the fields marked (worker) while the task is in
 * XF_SITEM_WORKING; the loop owns everything else, and those fields too at any
 * other time. */
typedef struct task {
  char job_id[JOB_ID_MAX];
  uint32_t round, attempt, model_round;
  uint64_t deadline_ms;
  bool evaluate_only;
  bool hold;               /* the offer asked to wait for TaskGo before training */
  bool go;                 /* TaskGo received */
  uint64_t ready_seq;      /* when it became ready: the worker takes the lowest first */
  uint64_t report_seq;     /* when its result was ready: reports go out in this order */
  xf_digest model_digest;
  uint64_t model_stream_id; /* from the offer; 0 until a matching TensorBegin names it */
  xf_jobspec spec;
  xf_site_dataset dataset; /* the registry's record, read at the offer */
  size_t n_params;         /* the model's size for this dataset, from the offer's checks */
  uint64_t shuffle_seed;
  xf_sitem_phase phase;
  bool offered_now;        /* offered on the current session: its results may go out */
  atomic_bool abandoned;   /* cancelled, replaced or shutting down: stop and drop */
  xf_site_plan residency; /* the offer's residency plan */

  /* the model stream */
  xf_tensor_receiver *model_rx;
  uint8_t *model_bytes;
  uint64_t model_len;

  /* What the task said about the update (update/update.h): the sealing key,
   * the rounding seed and, under secure aggregation, this site's setup for
   * the round (from the offer, or from TaskGo). Set on the loop before the
   * task is ready; read by the worker. */
  bool secagg;             /* the job's update goes out masked */
  xf_update_offer uo;

  /* (worker) the outcome */
  bool failed;
  xf_err fail_code;
  Xfed__TaskRefusal__Reason fail_reason;
  char fail_detail[600];
  bool has_train;
  double train_loss, test_loss, test_accuracy, seconds;
  uint64_t samples;
  xf_update_payload payload; /* the update as it travels (or, masked, waits for its masks) */
  float *residual;     /* top-k or shared-subset error feedback: n_params floats, or NULL */
  /* A new key offered while the worker holds the task (loop only): applied
   * when the worker is done. */
  bool seal_next_set;
  uint8_t seal_next[XF_SEAL_PUBLICKEYBYTES];
  uint64_t update_stream_next; /* likewise a new update stream id (0: none) */
  bool sa_waiting;     /* trained, waiting for the shares to be routed */

  /* privacy the site accounts for (unit record, or unit site mode local) */
  xf_privacy_plan plan;
  xf_privacy_charge charge;     /* what releasing this round's update costs the dataset */
  bool charged;                 /* the ledger holds the release (once, before it goes out) */
  bool has_epsilon;
  double epsilon;            /* this job's spend on the dataset once the update is out */
  double ledger_epsilon;     /* the dataset's spend across jobs, at its budget's delta */

  /* residency: the update leaves this site's region for crossing_to (an
   * aggregator's region), recorded in the site's audit trail once delivered */
  bool crossing;
  char crossing_to[XF_POLICY_NAME_MAX];

  /* the report */
  bool metrics_sent;
  xf_tensor_sender *sender;
  uint64_t update_stream_id; /* the offer's, or xf_site_update_stream_id */
  xf_tensor_msg msg; /* the next message, when has_msg */
  bool has_msg, awaiting_ack, end_sent;
  bool streaming;    /* its TensorBegin went out on this link: the one stream in flight */
} task;

/* A reply to queue when the write queue is full. */
typedef struct reply {
  Xfed__Envelope__BodyCase kind; /* TASK_ACCEPT, TASK_REFUSAL or ERROR */
  char job_id[JOB_ID_MAX];
  uint32_t round, attempt;
  int reason;   /* TaskRefusal */
  uint32_t code; /* Error */
  char text[1024]; /* a refusal's details: a local policy's names the rule and the fix */
} reply;

typedef struct ignored_stream {
  uint64_t stream_id; /* 0: not known yet, match job and round */
  char job_id[JOB_ID_MAX];
  uint32_t round;
} ignored_stream;

/* The dataset the worker trained on last, kept across rounds. Worker-owned;
 * the loop reads it only after the worker has stopped for good. */
typedef struct data_cache {
  bool loaded;
  char name[XF_SITE_NAME_MAX + 1];
  char digest[XF_DIGEST_HEX];
  char *path;
  xf_dataset train, test;
} data_cache;

struct xf_site_daemon {
  uv_loop_t loop;
  char dir[PATH_MAX];
  xf_site_config cfg;
  char port_text[8];
  xf_tls *tls;
  /* Secure aggregation signs with the site's certificate key and checks
   * its peers against the CA and CRL (reloaded with the TLS ones). */
  xf_pki_trust *sa_trust;
  xf_secagg_x509 *sa_identity;
  uint8_t *sa_cert; /* our certificate, DER, sent with our keys */
  size_t sa_cert_len;
  char ca_path[PATH_MAX + 16], crl_path[PATH_MAX + 16];
  xf_site_registry *reg;
  xf_backend *backend;
  xf_site_offer_env offer_env; /* the registry, ledger and local rules the checks read */
  xf_rng jitter;

  /* dialing */
  uv_timer_t redial;
  uv_getaddrinfo_t resolver;
  bool resolving;
  struct sockaddr_storage addrs[ADDRS_MAX];
  int n_addrs, next_addr;
  uint32_t backoff_ms;
  uint32_t backoff_before_open; /* restored when the session ends in a Refusal */
  bool refused;                 /* the coordinator refused the current session */
  unsigned long attempts;

  /* the connection */
  xf_conn *conn;
  bool connected; /* on_connect happened for conn */
  xf_session session;
  char close_reason[600]; /* why we closed it, for the log */
  reply replies[REPLIES_MAX];
  int n_replies;

  /* signals */
  uv_signal_t sigterm, sigint, sighup;
  xf_notify notify; /* systemd: readiness, reloads, the watchdog */
  bool stopping;

  /* tasks: the accepted ones in the order they came, at most one per job */
  task *tasks[XF_SITE_TASKS_MAX];
  int n_tasks;
  uint64_t ready_count, report_count; /* the last ready_seq and report_seq handed out */
  xf_site_sa *sa; /* this site's rounds of secure aggregation */
  task *worker_task; /* the task on the worker (a live one or an abandoned one) */
  uv_work_t work;
  data_cache cache;
  ignored_stream ignored[IGNORED_MAX];
  int next_ignored;

  /* /metrics and /healthz (NULL without --metrics), and the TLS bytes of
   * connections that have closed. */
  xf_http *http;
  uint64_t bytes_in_closed, bytes_out_closed;
  uint64_t sessions_opened;
};

static void pump(daemon_t *d);
static bool sa_mask_and_stream(daemon_t *d, task *t);
static void schedule_redial(daemon_t *d);
static void maybe_start_worker(daemon_t *d);
static void on_redial_timer(uv_timer_t *timer);
static void dial_next(daemon_t *d);

static bool session_open(const daemon_t *d) {
  return d->conn && xf_conn_is_open(d->conn) && d->session.open;
}

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

static void send_error(daemon_t *d, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
static void send_error(daemon_t *d, xf_err code, const char *fmt, ...) {
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
          logq(q, sizeof(q), r->text));
}

static void send_accept(daemon_t *d, const task *t) {
  if (!d->conn) return;
  reply *r = reply_slot(d);
  if (!r) return;
  r->kind = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  snprintf(r->job_id, sizeof(r->job_id), "%s", t->job_id);
  r->round = t->round;
  r->attempt = t->attempt;
}

static void send_refusal(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                         Xfed__TaskRefusal__Reason reason, const char *fmt, ...) XF_PRINTF(6, 7);
static void send_refusal(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                         Xfed__TaskRefusal__Reason reason, const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  char q[1024], qj[JOB_ID_MAX];
  XF_WARN("task_refused", "job=%s round=%u attempt=%u reason=%s details=\"%s\"",
          logq(qj, sizeof(qj), job), (unsigned)round, (unsigned)attempt, xf_task_refusal_reason_name(reason),
          logq(q, sizeof(q), text));
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
 * (on_drain calls pump again) or the connection is not open. */
static bool flush_replies(daemon_t *d) {
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
              xf_envelope_body_name(&env), logq(q, sizeof(q), err.msg));
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

static void task_free(task *t) {
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
static task *task_find(daemon_t *d, const char *job, uint32_t round, uint32_t attempt) {
  for (int i = 0; i < d->n_tasks; i++)
    if (task_is(d->tasks[i], job, round, attempt)) return d->tasks[i];
  return NULL;
}

/* The task of a job, whatever its round (a site holds one per job), or NULL. */
static task *task_of_job(daemon_t *d, const char *job) {
  for (int i = 0; i < d->n_tasks; i++)
    if (strcmp(d->tasks[i]->job_id, job) == 0) return d->tasks[i];
  return NULL;
}

/* Whether t is still among the site's tasks (not dropped or done). */
static bool task_live(const daemon_t *d, const task *t) {
  for (int i = 0; i < d->n_tasks; i++)
    if (d->tasks[i] == t) return true;
  return false;
}

/* Takes t out of the list, keeping the order of the others. */
static void task_remove(daemon_t *d, const task *t) {
  for (int i = 0; i < d->n_tasks; i++) {
    if (d->tasks[i] != t) continue;
    memmove(d->tasks + i, d->tasks + i + 1, (size_t)(d->n_tasks - i - 1) * sizeof(task *));
    d->n_tasks--;
    return;
  }
}

/* Ends a task that is done (ev DELIVERED) or failed (FAILED): out of the
 * list and freed (the worker never holds a task that is done). */
static void task_done(daemon_t *d, task *t, xf_sitem_event ev) {
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, ev, t->hold && !t->go, &act);
  task_remove(d, t);
  task_free(t);
}

static void ignore_stream(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round) {
  ignored_stream *s = &d->ignored[d->next_ignored++ % IGNORED_MAX];
  s->stream_id = stream_id;
  snprintf(s->job_id, sizeof(s->job_id), "%s", job);
  s->round = round;
}

/* Whether a MODEL stream's frame belongs to a refused or dropped task.
 * Begin names the job and round (job non-NULL); chunks and ends only the
 * stream, which a Begin matched by job and round has recorded by then. */
static bool stream_ignored(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round) {
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
static void task_drop(daemon_t *d, task *t, const char *why) {
  if (!t) return;
  char qj[JOB_ID_MAX];
  XF_INFO("task_dropped", "job=%s round=%u attempt=%u phase=%s why=\"%s\"",
          logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          xf_sitem_phase_name(t->phase), why);
  ignore_stream(d, t->model_stream_id, t->job_id, t->round);
  xf_sitem_action act;
  (void)xf_sitem_step(&t->phase, XF_SITEM_DROP, t->hold && !t->go, &act);
  task_remove(d, t);
  /* ABANDON: the worker frees it once it hands it back (it may have) */
  if (act == XF_SITEM_ABANDON && t == d->worker_task) atomic_store(&t->abandoned, true);
  else task_free(t);
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
static void task_link_lost(task *t) {
  t->offered_now = false;
  task_stream_restart(t);
}

/* Makes the UPDATE stream's sender over the payload's wire bytes,
 * replacing any earlier one (which must not outlive the bytes it read). The
 * sender hashes the bytes once: on the worker for float32 and encoded
 * updates, on the loop for masked ones and after a new key or stream id. */
static xf_err stream_update(task *t, xf_errctx *err) {
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
static uint64_t update_bytes(const task *t) {
  return t->payload.wire ? t->payload.wire_len : t->payload.element_count;
}

static size_t seal_context(const daemon_t *d, const task *t, char *buf, size_t cap) {
  return xf_seal_stream_context(buf, cap, t->job_id, t->round, t->attempt, d->cfg.site);
}

/* The aggregator offers the task again with another sealing key (it
 * restarted): from now on the update goes sealed to that one (the old key
 * is gone with it, so bytes sealed to it could never be opened). */
static void seal_key_changed(daemon_t *d, task *t, const uint8_t *pk) {
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
  logq(qj, sizeof(qj), t->job_id);
  size_t ctx_len = seal_context(d, t, ctx, sizeof(ctx));
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
  if (stream_update(t, &err) != XF_OK) {
    XF_ERROR("update_not_resealed", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
             err.msg);
    send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "cannot stream the update sealed to the new key: %s", err.msg);
    task_drop(d, t, "the update cannot be sealed again");
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
static void update_stream_changed(daemon_t *d, task *t, uint64_t id) {
  if (d->worker_task == t) {
    t->update_stream_next = id;
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  uint64_t before = t->update_stream_id;
  t->update_stream_id = id;
  if (t->sender && stream_update(t, &err) != XF_OK) {
    t->update_stream_id = before;
    char qj[JOB_ID_MAX];
    XF_ERROR("update_stream_kept", "job=%s round=%u stream=%llu reason=\"%s\"",
             logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned long long)before,
             err.msg);
  }
  task_stream_restart(t);
}

/* ---- the dataset, on the worker ----------------------------------------------------- */

static void cache_free(data_cache *c) {
  xf_dataset_free(&c->train);
  xf_dataset_free(&c->test);
  xf_free(c->path);
  memset(c, 0, sizeof(*c));
}

/* The registered dataset in memory: loaded once, after its files are checked
 * against the digest taken at registration, and kept while the registry
 * record stays the same. */
static xf_err cache_get(data_cache *c, const xf_site_dataset *ds, xf_errctx *err) {
  if (c->loaded && strcmp(c->name, ds->name) == 0 && strcmp(c->digest, ds->digest) == 0 &&
      strcmp(c->path, ds->path) == 0)
    return XF_OK;
  cache_free(c);
  xf_digest now;
  xf_err rc = xf_site_data_digest(ds->path, ds->layout, &now, err);
  if (rc != XF_OK) return rc;
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(&now, hex);
  if (strcmp(hex, ds->digest) != 0)
    return xf_fail(err, XF_EINTEGRITY,
                   "the files of dataset %s in %s changed since it was registered (digest %.16s..., "
                   "registered %.16s...); check them with 'xfed-site dataset verify', then rm and "
                   "add the dataset again if the change is intended",
                   ds->name, ds->path, hex, ds->digest);
  XF_GUARD(xf_dataset_load_dir(ds->path, &c->train, &c->test, err));
  c->path = xf_strdup(ds->path);
  if (!c->path) {
    cache_free(c);
    return xf_fail(err, XF_ENOMEM, "cannot keep the dataset's path");
  }
  snprintf(c->name, sizeof(c->name), "%s", ds->name);
  snprintf(c->digest, sizeof(c->digest), "%s", ds->digest);
  c->loaded = true;
  XF_INFO("dataset_loaded", "dataset=%s train_records=%u test_records=%u", ds->name, c->train.n,
          c->test.n);
  return XF_OK;
}

/* ---- models ------------------------------------------------------------------------- */

/* Whether the received model is the job's model and takes this data: the
 * architecture the spec names, the records' shape (exactly, for a cnn; the
 * number of features, for dense models) and every label below its classes. */
static xf_err model_fits(const xf_model *m, const xf_jobspec *job, const xf_dataset *train,
                         const xf_dataset *test, xf_errctx *err) {
  const xf_model_spec *ms = xf_model_spec_of(m);
  xf_model_spec want;
  XF_GUARD(xf_jobspec_model_spec(job, train->h, train->w, train->c, train->classes, &want, err));
  bool same_arch = ms->arch == want.arch;
  if (same_arch && ms->arch == XF_ARCH_MLP) {
    same_arch = ms->n_hidden == want.n_hidden;
    for (int i = 0; same_arch && i < ms->n_hidden; i++) same_arch = ms->hidden[i] == want.hidden[i];
  }
  if (same_arch && ms->arch == XF_ARCH_CNN) same_arch = ms->preset == want.preset;
  if (same_arch && ms->arch == XF_ARCH_LAYERS) {
    same_arch = ms->n_layers == want.n_layers;
    for (int i = 0; same_arch && i < ms->n_layers; i++)
      same_arch = xf_layer_decl_equal(&ms->layers[i], &want.layers[i]);
  }
  XF_ENSURE(ms->loss == want.loss, err, XF_EINVAL,
            "the model is trained on %s, but the job spec's model.loss is %s",
            xf_loss_name(ms->loss), xf_loss_name(want.loss));
  XF_ENSURE(same_arch, err, XF_EINVAL, "the model is %s, but the job spec's model section says "
            "otherwise", xf_model_describe(m));
  if (ms->arch == XF_ARCH_CNN || ms->arch == XF_ARCH_LAYERS)
    XF_ENSURE(ms->in_h == (int)train->h && ms->in_w == (int)train->w &&
                  ms->in_c == (int)train->c,
              err, XF_EINVAL, "the model takes %dx%dx%d images, the dataset holds %ux%ux%u",
              ms->in_h, ms->in_w, ms->in_c, train->h, train->w, train->c);
  XF_ENSURE(xf_model_input_size(m) == train->features, err, XF_EINVAL,
            "the model takes %zu features per record, the dataset has %u",
            xf_model_input_size(m), train->features);
  uint32_t classes = train->classes > test->classes ? train->classes : test->classes;
  XF_ENSURE((uint32_t)ms->classes >= classes, err, XF_EINVAL,
            "the model has %d classes, the dataset's labels need %u", ms->classes, classes);
  return XF_OK;
}

/* ---- training, on the worker ------------------------------------------------------------ */

typedef struct train_watch {
  task *t;
  double last_loss;
} train_watch;

static bool train_should_stop(void *user) {
  return atomic_load(&((train_watch *)user)->t->abandoned);
}

static void train_epoch(const xf_epoch_report *r, void *user) {
  train_watch *w = user;
  w->last_loss = r->train_loss;
  XF_DEBUG("task_epoch", "job=%s round=%u epoch=%d epochs=%d seconds=%.3f", w->t->job_id,
           (unsigned)w->t->round, r->epoch, r->epochs, r->seconds);
}

static void task_fail(task *t, Xfed__TaskRefusal__Reason reason, const char *what,
                      const xf_errctx *err) {
  char msg[520];
  xf_errctx_format(err, msg, sizeof(msg));
  t->failed = true;
  t->fail_code = err->code != XF_OK ? err->code : XF_EINTERNAL;
  t->fail_reason = reason;
  snprintf(t->fail_detail, sizeof(t->fail_detail), "%s: %s", what, msg);
}

/* Runs the dataset's external trainer for t on the worker thread: the work
 * directory <site>/trainers/<job>-r<round>-a<attempt>/ with task.json and
 * global.npy, the program under its time limit (stopped when the task is
 * abandoned), its outputs validated and, under record-level privacy, its
 * DP declaration checked against the job's plan; the charge the ledger
 * records becomes what the trainer declared (at most the plan's). On
 * success *local holds the trained weights (the caller frees them). */
static xf_err run_trainer(daemon_t *d, task *t, const xf_model *model, const float *global,
                          float **local, double *loss, xf_errctx *err) {
  const xf_site_dataset *ds = &t->dataset;
  const xf_privacy_spec *pv = &t->spec.privacy;
  bool record = t->plan.site_noise && pv->unit == XF_PRIVACY_UNIT_RECORD;
  XF_ENSURE(!record || ds->trainer_dp_declared, err, XF_EDENIED,
            "dataset '%s' is trained by %s, declared --trainer-dp none, and the job asks for "
            "record-level privacy", ds->name, ds->trainer);
  char base[PATH_MAX], job[JOB_ID_MAX], work[PATH_MAX + 2 * JOB_ID_MAX], log[sizeof(work) + 8];
  if (!realpath(d->dir, base))
    return xf_fail(err, XF_EIO, "cannot resolve the site directory %s: %s", d->dir,
                   strerror(errno));
  size_t k = 0;
  for (const char *c = t->job_id; *c && k + 1 < sizeof(job); c++)
    job[k++] = (isalnum((unsigned char)*c) || *c == '-' || *c == '_') ? *c : '_';
  job[k] = '\0';
  snprintf(work, sizeof(work), "%s/trainers", base);
  if (mkdir(work, 0700) != 0 && errno != EEXIST)
    return xf_fail(err, XF_EIO, "cannot create %s: %s", work, strerror(errno));
  snprintf(work, sizeof(work), "%s/trainers/%s-r%u-a%u", base, job, (unsigned)t->round,
           (unsigned)t->attempt);
  snprintf(log, sizeof(log), "%s.log", work);
  xf_trainer_dir_remove(work);
  if (mkdir(work, 0700) != 0)
    return xf_fail(err, XF_EIO, "cannot create the trainer's work directory %s: %s", work,
                   strerror(errno));
  xf_trainer_dp_need need = {.record = record,
                             .clip = pv->clip,
                             .noise_multiplier = t->plan.accounted_multiplier,
                             .sampling_rate = t->plan.sampling_rate,
                             .steps = t->plan.steps_per_round};
  xf_trainer_task tt = {.job_id = t->job_id,
                        .round = t->round,
                        .seed = t->shuffle_seed,
                        .spec = &t->spec,
                        .lr = xf_jobspec_local_lr(&t->spec, t->round),
                        .dataset_name = ds->name,
                        .dataset_dir = ds->path,
                        .dataset_layout = xf_dataset_layout_name(ds->layout),
                        .train_records = ds->train_records,
                        .test_records = ds->test_records,
                        .features = ds->features,
                        .classes = ds->classes,
                        .h = ds->h,
                        .w = ds->w,
                        .c = ds->c,
                        .model = model,
                        .global = global,
                        .dp = need};
  xf_trainer_result res = {0};
  double t0 = mono_s();
  XF_INFO("trainer_started", "job=%s round=%u attempt=%u dataset=%s program=%s log=%s",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds->name, ds->trainer, log);
  xf_err rc = xf_trainer_write_task(work, &tt, err);
  if (rc == XF_OK)
    rc = xf_trainer_run(ds->trainer, work, log, (double)ds->trainer_timeout, &t->abandoned, err);
  if (rc == XF_OK)
    rc = xf_trainer_read_result(work, xf_model_num_params(model), ds->train_records, &res, err);
  if (rc == XF_OK) rc = xf_trainer_check_dp(&res, &need, err);
  xf_trainer_dir_remove(work);
  if (rc != XF_OK) {
    xf_trainer_result_free(&res);
    return rc;
  }
  if (record)
    t->charge = (xf_privacy_charge){.sampling_rate = res.dp_sampling_rate,
                                    .noise_multiplier = res.dp_noise_multiplier,
                                    .steps = res.dp_steps};
  t->samples = res.samples;
  *loss = res.has_train_loss ? res.train_loss : NAN;
  *local = res.trained;
  res.trained = NULL;
  XF_INFO("trainer_done", "job=%s round=%u attempt=%u dataset=%s samples=%llu seconds=%.3f",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds->name,
          (unsigned long long)res.samples, mono_s() - t0);
  xf_trainer_result_free(&res);
  return XF_OK;
}

/* The task's whole computation: decode and check the model, the dataset,
 * the evaluation of the received model, local training and the delta. The
 * outcome goes into the task's worker fields. */
/* Trains t's model natively (xf_train) from the global parameters in net:
 * *local (xf_free) gets the trained ones. False when it failed (t says
 * why); true, with *local NULL, when it stopped part way (abandoned). */
static bool train_native(task *t, xf_net *net, const xf_samples *train, size_t n, xf_noise *noise,
                         bool record, float **local) {
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_job_local *lc = &t->spec.local;
  train_watch watch = {.t = t, .last_loss = NAN};
  xf_dp_sgd dp = {.clip = t->spec.privacy.clip,
                  .noise_multiplier = t->plan.noise_multiplier,
                  .expected_batch = (int)lc->batch_size,
                  .noise = noise};
  xf_train_options opt = {
      .epochs = (int)lc->epochs,
      .batch_size = (int)lc->batch_size,
      .seed = t->shuffle_seed,
      .on_epoch = train_epoch,
      .should_stop = train_should_stop,
      .user = &watch,
      .dp = record ? &dp : NULL};
  /* The round's learning rate comes from the task's round number, so every
   * site of a round trains at the same rate; the optimizer's state starts
   * fresh in every round (xf_train). */
  xf_jobspec_train_options(&t->spec, t->round, &opt);
  if (xf_train(net, train, &opt, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "training failed", &err);
    return false;
  }
  if (atomic_load(&t->abandoned)) return true;
  *local = xf_mallocarray(n, sizeof(float));
  if (!*local || xf_net_get_params(net, *local) != XF_OK) {
    xf_fail(&err, XF_ENOMEM, "cannot read back %zu parameters", n);
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "training failed", &err);
    return false;
  }
  /* Under record-level privacy the loss measured on the sampled training
   * batches is not noised, so it does not leave the site. */
  t->train_loss = record ? NAN : watch.last_loss;
  return true;
}

/* The rest is the update pipeline (update/update.h) on the delta in local:
 * clip and noise for the site unit, then masked under secure aggregation
 * (once the shares are routed, on the loop: sa_mask_and_stream), else
 * encoded for the uplink, else float32; sealed to the aggregator that
 * folds it. *noise is started when the plan needs one. False when it
 * failed (t says why). */
static bool update_prepare(daemon_t *d, task *t, size_t n, float *local, xf_noise **noise) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_update_plan up;
  if (xf_update_plan_site(&t->spec, &t->plan, n, &t->uo,
                          (unsigned)xf_backend_threads(d->backend), &up, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the update does not fit the task",
              &err);
    return false;
  }
  if ((up.noise_sd > 0 || up.share_sd > 0) && !*noise && xf_noise_new_random(noise) != XF_OK) {
    xf_fail(&err, XF_ENOMEM, "cannot start the noise generator (secure memory)");
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "privacy noise", &err);
    return false;
  }
  char ctx[256];
  size_t ctx_len = seal_context(d, t, ctx, sizeof(ctx));
  if (xf_update_prepare(&up, local, t->residual, *noise, ctx, ctx_len, &t->payload, &err) !=
      XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot prepare the update", &err);
    return false;
  }
  if (t->payload.clipped)
    XF_WARN("secagg_clipped", "job=%s round=%u values=%zu why=\"beyond the shared scale\"",
            t->job_id, (unsigned)t->round, t->payload.clipped);
  if (up.form != XF_UPDATE_MASKED && stream_update(t, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot stream the update", &err);
    return false;
  }
  return true;
}

static void task_compute(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_model *model = NULL;
  float *global = NULL, *local = NULL;
  xf_net *net = NULL;
  xf_noise *noise = NULL;

  if (xf_checkpoint_decode(t->model_bytes, (size_t)t->model_len, &model, &global, &err) !=
      XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the model file does not decode", &err);
    goto out;
  }
  size_t n = xf_model_num_params(model);
  xf_digest got;
  xf_params_digest(global, n, &got);
  if (memcmp(got.bytes, t->model_digest.bytes, XF_DIGEST_BYTES) != 0) {
    char got_hex[XF_DIGEST_HEX], want_hex[XF_DIGEST_HEX];
    xf_digest_hex(&got, got_hex);
    xf_digest_hex(&t->model_digest, want_hex);
    xf_fail(&err, XF_EINTEGRITY, "the model's parameter digest is %s, the offer's model_digest %s",
            got_hex, want_hex);
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "model digest mismatch", &err);
    goto out;
  }
  if (cache_get(&d->cache, &t->dataset, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__NO_DATASET, "dataset unusable", &err);
    char q[600];
    XF_ERROR("dataset_unusable", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
             (unsigned)t->round, t->dataset.name, logq(q, sizeof(q), err.msg));
    goto out;
  }
  const xf_dataset *tr = &d->cache.train, *te = &d->cache.test;
  if (model_fits(model, &t->spec, tr, te, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the model does not fit the data", &err);
    goto out;
  }

  double t0 = mono_s();
  if (xf_net_create(d->backend, model, (int)t->spec.local.batch_size, &net, &err) != XF_OK ||
      xf_net_set_params(net, global) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "cannot set up the model", &err);
    goto out;
  }
  xf_samples train = {tr->x, tr->y, tr->n, tr->features};
  xf_samples test = {te->x, te->y, te->n, te->features};
  if (xf_evaluate(net, &test, &t->test_loss, &t->test_accuracy, &err) != XF_OK) {
    task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "evaluation failed", &err);
    goto out;
  }
  t->samples = tr->n;
  if (!t->evaluate_only) {
    const xf_privacy_spec *pv = &t->spec.privacy;
    bool record = t->plan.site_noise && pv->unit == XF_PRIVACY_UNIT_RECORD;
    if (t->plan.site_noise && xf_noise_new_random(&noise) != XF_OK) {
      xf_fail(&err, XF_ENOMEM, "cannot start the noise generator (secure memory)");
      task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "privacy noise", &err);
      goto out;
    }
    if (t->dataset.trainer) {
      /* An external trainer (docs/trainers.md): the program trains, the
       * site keeps everything from the delta on. */
      double loss = NAN;
      if (run_trainer(d, t, model, global, &local, &loss, &err) != XF_OK) {
        task_fail(t, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "the external trainer failed",
                  &err);
        goto out;
      }
      if (atomic_load(&t->abandoned)) goto out;
      t->train_loss = record ? NAN : loss;
    } else {
      if (!train_native(t, net, &train, n, noise, record, &local)) goto out;
      if (atomic_load(&t->abandoned)) goto out; /* stopped part way: nobody wants the result */
    }
    xf_update_delta(local, global, n);
    t->has_train = true;
    if (!update_prepare(d, t, n, local, &noise)) goto out;
  }
  t->seconds = mono_s() - t0;
out:
  xf_noise_free(noise);
  xf_free(local);
  xf_net_free(net);
  xf_free(global);
  xf_model_free(model);
}

static void work_run(uv_work_t *w) {
  daemon_t *d = w->data;
  task *t = d->worker_task;
  if (atomic_load(&t->abandoned)) return;
  char qj[JOB_ID_MAX];
  XF_INFO("task_training", "job=%s round=%u attempt=%u dataset=%s evaluate_only=%s",
          logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          t->dataset.name, t->evaluate_only ? "true" : "false");
  task_compute(d, t);
}

/* Keeps what t's top-k update left out for the job's next round. False when
 * it cannot be saved: the update is then withheld (sending it would lose
 * the residual for good) and the task refused. */
static bool save_residual(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_residual_save(d->reg, t->job_id, t->dataset.name, t->round, t->residual,
                            t->n_params, (int64_t)time(NULL), &err) == XF_OK) {
    XF_INFO("residual_saved", "job=%s round=%u dataset=%s values=%zu", t->job_id,
             (unsigned)t->round, t->dataset.name, t->n_params);
    return true;
  }
  char q[600];
  XF_ERROR("residual_not_saved", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
           (unsigned)t->round, t->dataset.name, logq(q, sizeof(q), err.msg));
  if (t->offered_now)
    send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "the site cannot keep the compression residual: %s", err.msg);
  return false;
}

/* Records the release of t's update in the privacy ledger, right before it
 * first goes out (its Metrics carry the spend), and reads back what the job
 * and the dataset have spent. The budget is checked again first: another
 * job's task on the same dataset may have spent since this one was
 * accepted. False when the release must not happen: the update is then
 * withheld and the task refused, since a release the ledger does not know
 * of would escape the budget. */
static bool charge_ledger(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  const xf_privacy_spec *pv = &t->spec.privacy;
  const char *ds = t->dataset.name;
  char why[1024];
  xf_privacy_plan plan;
  xf_privacy_charge charge;
  Xfed__TaskRefusal__Reason reason =
      xf_site_privacy_check(&d->offer_env, t->job_id, t->round, &t->spec, &t->dataset,
                            t->residency.present ? &t->residency.res : NULL, t->n_params, &plan,
                            &charge, why, sizeof(why));
  if (reason != XFED__TASK_REFUSAL__REASON__UNSPECIFIED) {
    char q[1024];
    XF_WARN("privacy_release_refused", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
            (unsigned)t->round, ds, logq(q, sizeof(q), why));
    send_refusal(d, t->job_id, t->round, t->attempt, reason, "%s", why);
    return false;
  }
  double budget_delta = t->dataset.budget_delta > 0 ? t->dataset.budget_delta
                                                    : XF_SITE_BUDGET_DELTA_DEFAULT;
  if (xf_ledger_charge(xf_site_registry_db(d->reg), ds, t->job_id, t->round, t->attempt, &t->charge,
                            (int64_t)time(NULL), &err) != XF_OK ||
      xf_ledger_epsilon(xf_site_registry_db(d->reg), ds, t->job_id, NULL, pv->delta, &t->epsilon, &err) !=
          XF_OK ||
      xf_ledger_epsilon(xf_site_registry_db(d->reg), ds, NULL, NULL, budget_delta, &t->ledger_epsilon, &err) !=
          XF_OK) {
    char q[600];
    XF_ERROR("ledger_failed", "job=%s round=%u dataset=%s reason=\"%s\"", t->job_id,
             (unsigned)t->round, ds, logq(q, sizeof(q), err.msg));
    send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "the site's privacy ledger cannot record the release: %s", err.msg);
    return false;
  }
  t->charged = true;
  t->has_epsilon = true;
  XF_INFO("privacy_charged", "job=%s round=%u attempt=%u dataset=%s sampling_rate=%.6g "
          "noise_multiplier=%.6g steps=%llu job_epsilon=%.6g dataset_epsilon=%.6g budget=%g",
          t->job_id, (unsigned)t->round, (unsigned)t->attempt, ds, t->charge.sampling_rate,
          t->charge.noise_multiplier, (unsigned long long)t->charge.steps, t->epsilon,
          t->ledger_epsilon, t->dataset.has_budget ? t->dataset.budget_epsilon : 0.0);
  return true;
}

/* A task the worker could not finish, or whose result cannot go out:
 * its model stream is let go and the task ended. */
static void task_failed(daemon_t *d, task *t) {
  ignore_stream(d, t->model_stream_id, t->job_id, t->round);
  task_done(d, t, XF_SITEM_FAILED);
}

static void work_done(uv_work_t *w, int status) {
  daemon_t *d = w->data;
  task *t = d->worker_task;
  d->worker_task = NULL;
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), t->job_id);
  xf_free(t->model_bytes); /* decoded by now; a repeat of the stream never reaches the sink */
  t->model_bytes = NULL;
  if (status != 0 || atomic_load(&t->abandoned) || !task_live(d, t)) {
    XF_INFO("task_result_dropped", "job=%s round=%u attempt=%u why=%s", qj, (unsigned)t->round,
            (unsigned)t->attempt, d->stopping ? "stopping" : "withdrawn");
    task_remove(d, t);
    task_free(t);
    maybe_start_worker(d);
    return;
  }
  if (t->failed) {
    char q[600];
    XF_ERROR("task_failed", "job=%s round=%u attempt=%u reason=%s details=\"%s\"", qj,
             (unsigned)t->round, (unsigned)t->attempt, xf_task_refusal_reason_name(t->fail_reason),
             logq(q, sizeof(q), t->fail_detail));
    /* A refusal after the acceptance, so that the round stops waiting for
     * us; an Error too, which a coordinator whose round machine takes no
     * refusal after an acceptance reads as this site dropping out. */
    if (t->offered_now) {
      send_error(d, t->fail_code, "job %s round %u attempt %u: %s", t->job_id,
                 (unsigned)t->round, (unsigned)t->attempt, t->fail_detail);
      send_refusal(d, t->job_id, t->round, t->attempt, t->fail_reason, "%s", t->fail_detail);
    }
    task_failed(d, t);
    pump(d);
    maybe_start_worker(d);
    return;
  }
  if (t->has_train && t->residual && !save_residual(d, t)) {
    task_failed(d, t);
    pump(d);
    maybe_start_worker(d);
    return;
  }
  if (t->seal_next_set) {
    t->seal_next_set = false;
    seal_key_changed(d, t, t->seal_next);
    if (!task_live(d, t)) {
      pump(d);
      maybe_start_worker(d);
      return;
    }
  }
  if (t->update_stream_next) {
    uint64_t id = t->update_stream_next;
    t->update_stream_next = 0;
    update_stream_changed(d, t, id);
  }
  xf_sitem_action act; /* REPORT: below, once the result is logged */
  (void)xf_sitem_step(&t->phase, XF_SITEM_TRAINED, t->hold && !t->go, &act);
  t->report_seq = ++d->report_count;
  if (t->has_train)
    XF_INFO("task_trained", "job=%s round=%u attempt=%u samples=%llu train_loss=%.6g "
            "test_loss=%.6g test_accuracy=%.4f seconds=%.3f update_bytes=%llu", qj,
            (unsigned)t->round, (unsigned)t->attempt, (unsigned long long)t->samples,
            t->train_loss, t->test_loss, t->test_accuracy, t->seconds,
            (unsigned long long)update_bytes(t));
  else
    XF_INFO("task_evaluated", "job=%s round=%u attempt=%u test_loss=%.6g test_accuracy=%.4f "
            "seconds=%.3f", qj, (unsigned)t->round, (unsigned)t->attempt, t->test_loss,
            t->test_accuracy, t->seconds);
  if (!t->offered_now)
    XF_INFO("task_result_held", "job=%s round=%u attempt=%u why=\"not connected; sent when the "
            "coordinator offers the task again\"", qj, (unsigned)t->round, (unsigned)t->attempt);
  if (t->has_train && t->payload.form == XF_UPDATE_MASKED) {
    t->sa_waiting = true;
    if (xf_site_sa_routed(d->sa, t->job_id, t->round, t->attempt))
      sa_mask_and_stream(d, t); /* pumps, or drops t */
  }
  pump(d);
  maybe_start_worker(d);
}

/* Starts the worker on the ready task that became ready first. */
static void maybe_start_worker(daemon_t *d) {
  if (d->stopping || d->worker_task) return;
  task *t = NULL;
  for (int i = 0; i < d->n_tasks; i++) {
    task *c = d->tasks[i];
    if (c->phase == XF_SITEM_QUEUED && (!t || c->ready_seq < t->ready_seq)) t = c;
  }
  if (!t) return;
  xf_sitem_action act; /* TRAIN */
  (void)xf_sitem_step(&t->phase, XF_SITEM_WORKER, t->hold && !t->go, &act);
  d->worker_task = t;
  d->work.data = d;
  int rc = uv_queue_work(&d->loop, &d->work, work_run, work_done);
  if (rc != 0) { /* only for a bad argument: report it rather than hang the task */
    d->worker_task = NULL;
    XF_ERROR("task_failed", "job=%s round=%u reason=\"cannot queue the work: %s\"", t->job_id,
             (unsigned)t->round, uv_strerror(rc));
    send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "cannot start training: %s", uv_strerror(rc));
    task_drop(d, t, "worker pool refused");
  }
}

/* Moves t on ev (site/sitemachine.h) and performs the step's action: a
 * task is ready once its model is in and, when held, its Go came, and
 * joins the worker's queue behind the tasks ready before it; a result made
 * before the hold goes out once the Go comes. */
static void task_step(daemon_t *d, task *t, xf_sitem_event ev) {
  xf_sitem_action act;
  if (!xf_sitem_step(&t->phase, ev, t->hold && !t->go, &act)) return;
  char qj[JOB_ID_MAX];
  switch (act) {
  case XF_SITEM_WAIT_GO:
    XF_INFO("task_held", "job=%s round=%u attempt=%u why=\"waiting for the aggregator's go\"",
            logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt);
    break;
  case XF_SITEM_QUEUE:
    t->ready_seq = ++d->ready_count;
    maybe_start_worker(d);
    break;
  case XF_SITEM_REPORT: pump(d); break;
  default: break;
  }
}

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
  m.bytes_up = t->has_train ? update_bytes(t) : 0;
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

/* Sends t's Metrics once (charging the privacy ledger first when the site
 * accounts for the release). False while the write queue is full, or when
 * t is gone (done: an evaluation; or refused). */
static bool report_metrics(daemon_t *d, task *t) {
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), t->job_id);
  if (t->has_train && t->plan.site_noise && !t->charged && !charge_ledger(d, t)) {
    task_failed(d, t);
    return false;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = send_metrics(d, t, &err);
  if (rc == XF_ERANGE) return false;
  if (rc != XF_OK) {
    char q[600];
    XF_ERROR("metrics_not_sent", "job=%s round=%u reason=\"%s\"", qj, (unsigned)t->round,
             logq(q, sizeof(q), err.msg));
    return false;
  }
  t->metrics_sent = true;
  XF_INFO("metrics_sent", "job=%s round=%u attempt=%u", qj, (unsigned)t->round,
          (unsigned)t->attempt);
  if (t->sender || t->sa_waiting) return true; /* the update follows (masked: its routing) */
  XF_INFO("task_done", "job=%s round=%u attempt=%u", qj, (unsigned)t->round, (unsigned)t->attempt);
  task_done(d, t, XF_SITEM_DELIVERED);
  return false;
}

/* Sends t's update stream from where it stands until the write queue is
 * full, it waits for a TensorAck, or TensorEnd is out. */
static void report_stream(daemon_t *d, task *t) {
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), t->job_id);
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
               logq(q, sizeof(q), err.msg));
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
              (unsigned long long)t->update_stream_id, (unsigned long long)update_bytes(t),
              (unsigned long long)t->samples);
      return;
    }
    if (t->msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_END) {
      t->end_sent = true;
      return;
    }
  }
}

/* The tasks whose results are held, in the order they were ready, into
 * out (XF_SITE_TASKS_MAX entries); returns their number. */
static int reporting_tasks(const daemon_t *d, task **out) {
  int n = 0;
  for (int i = 0; i < d->n_tasks; i++) {
    task *t = d->tasks[i];
    if (t->phase != XF_SITEM_REPORTING || !t->offered_now || (t->hold && !t->go)) continue;
    int j = n++;
    for (; j > 0 && out[j - 1]->report_seq > t->report_seq; j--) out[j] = out[j - 1];
    out[j] = t;
  }
  return n;
}

/* Sends what can go now: queued replies, then each held result's Metrics
 * and the updates one stream at a time (the stream in flight, else the
 * oldest result's), until the write queue is full (on_drain resumes), the
 * stream waits for a TensorAck, or nothing is left. */
static void pump(daemon_t *d) {
  if (!session_open(d) || !flush_replies(d)) return;
  task *ready[XF_SITE_TASKS_MAX];
  int n = reporting_tasks(d, ready);
  for (int i = 0; i < n; i++) {
    task *t = ready[i];
    if (t->metrics_sent) continue;
    if (!report_metrics(d, t) && task_live(d, t)) return; /* the queue is full */
    if (!session_open(d)) return;
  }
  n = reporting_tasks(d, ready);
  task *next = NULL;
  for (int i = 0; i < n && !next; i++)
    if (ready[i]->streaming) next = ready[i];
  for (int i = 0; i < n && !next; i++)
    if (ready[i]->sender && ready[i]->metrics_sent) next = ready[i];
  if (next) report_stream(d, next);
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
  logq(qj, sizeof(qj), t->job_id);
  if (xf_site_audit_crossing(xf_site_registry_db(d->reg), &ref, t->crossing_to, bytes,
                             (double)wall_ms() / 1000.0, &err) != XF_OK) {
    XF_ERROR("audit_failed", "job=%s round=%u kind=crossing reason=\"%s\"", qj,
             (unsigned)t->round, logq(q, sizeof(q), err.msg));
    return;
  }
  char qto[XF_POLICY_NAME_MAX];
  XF_INFO("update_crossed", "job=%s round=%u attempt=%u from=%s to=%s bytes=%llu", qj,
          (unsigned)t->round, (unsigned)t->attempt, d->cfg.region,
          logq(qto, sizeof(qto), t->crossing_to),
          (unsigned long long)bytes);
}

/* The task whose update stream is in flight under that id, or NULL. Two
 * jobs' updates may share an id (the default one is the round's and
 * attempt's); one stream at a time keeps them apart. */
static task *update_task(daemon_t *d, uint64_t stream_id) {
  for (int i = 0; i < d->n_tasks; i++) {
    task *t = d->tasks[i];
    if (t->sender && t->streaming && t->update_stream_id == stream_id) return t;
  }
  return NULL;
}

/* The coordinator does not take t's update now (say a restarted one that
 * has not offered the task again yet): no TensorAck will come for it. The
 * update is kept and waits, as after a lost link, for the task to be
 * offered again; the other tasks' results go on meanwhile. */
static void on_update_refused(daemon_t *d, uint64_t stream_id) {
  task *t = update_task(d, stream_id);
  if (!t) return;
  char qj[JOB_ID_MAX];
  XF_WARN("update_kept", "job=%s round=%u attempt=%u why=\"the coordinator does not hold the "
          "task now; it goes again once the task is offered again\"",
          logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt);
  task_link_lost(t);
}

static void on_tensor_ack(daemon_t *d, const Xfed__TensorAck *a) {
  task *t = update_task(d, a->stream_id);
  if (!t) {
    XF_DEBUG("ack_ignored", "stream=%llu why=\"no update of this site has that stream\"",
             (unsigned long long)a->stream_id);
    return;
  }
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), t->job_id);
  uint64_t total = t->payload.wire_len;
  if (t->awaiting_ack) {
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_tensor_sender_resume(t->sender, a->next_offset, &err) != XF_OK) {
      send_error(d, XF_ERANGE, "TensorAck for update stream %llu of job %s round %u: %s",
                 (unsigned long long)a->stream_id, t->job_id, (unsigned)t->round, err.msg);
      snprintf(d->close_reason, sizeof(d->close_reason), "bad TensorAck: %s", err.msg);
      pump(d);
      xf_conn_close(d->conn);
      return;
    }
    t->awaiting_ack = false;
    XF_INFO("update_resume", "job=%s round=%u attempt=%u offset=%llu bytes=%llu", qj,
            (unsigned)t->round, (unsigned)t->attempt, (unsigned long long)a->next_offset,
            (unsigned long long)total);
    pump(d);
    return;
  }
  if (t->end_sent && a->next_offset == total) {
    XF_INFO("update_delivered", "job=%s round=%u attempt=%u bytes=%llu", qj, (unsigned)t->round,
            (unsigned)t->attempt, (unsigned long long)total);
    if (t->crossing) audit_crossing(d, t, total);
    task_done(d, t, XF_SITEM_DELIVERED);
    pump(d); /* the next update's turn */
    maybe_start_worker(d);
    return;
  }
  XF_DEBUG("update_progress", "job=%s round=%u offset=%llu", qj, (unsigned)t->round,
           (unsigned long long)a->next_offset);
}

/* ---- the model stream ---------------------------------------------------------------------- */

static xf_err model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
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
            logq(q, sizeof(q), err.msg));
  }
}

/* The task whose model a stream carries, by stream id. Should two tasks
 * name the same id, the one whose receiver took that stream's TensorBegin
 * and is still receiving comes first. */
static task *model_task(daemon_t *d, uint64_t stream_id) {
  task *found = NULL;
  for (int i = 0; i < d->n_tasks; i++) {
    task *t = d->tasks[i];
    if (!t->model_stream_id || t->model_stream_id != stream_id) continue;
    const xf_tensor_info *info = xf_tensor_receiver_info(t->model_rx);
    if (t->phase == XF_SITEM_MODEL && info && info->stream_id == stream_id) return t;
    if (!found) found = t;
  }
  return found;
}

/* Fails a task after its acceptance: Error for the stream, a refusal so
 * the round stops waiting, and the task dropped. */
static void model_failed(daemon_t *d, task *t, xf_err code, const char *msg) {
  send_error(d, code, "model stream of job %s round %u: %s", t->job_id, (unsigned)t->round, msg);
  send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
               "the model stream failed: %s", msg);
  task_drop(d, t, "model stream failed");
}

static void on_tensor_begin(daemon_t *d, const Xfed__TensorBegin *b) {
  const char *job = b->job_id ? b->job_id : "";
  if (b->kind != XFED__TENSOR_BEGIN__KIND__MODEL) {
    send_error(d, XF_EUNSUPPORTED, "a site receives MODEL streams only; stream %llu is of kind %d",
               (unsigned long long)b->stream_id, (int)b->kind);
    return;
  }
  task *t = task_of_job(d, job);
  bool mine = t && b->round == t->round &&
              (b->attempt == 0 || b->attempt == t->attempt) &&
              (t->model_stream_id == 0 || t->model_stream_id == b->stream_id);
  if (!mine) {
    if (stream_ignored(d, b->stream_id, job, b->round)) return;
    send_error(d, XF_EINVAL, "MODEL stream %llu of job %s round %u matches no task of this site",
               (unsigned long long)b->stream_id, job, (unsigned)b->round);
    return;
  }
  t->model_stream_id = b->stream_id;
  if (t->phase != XF_SITEM_MODEL) {
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
    if (xf_tensor_receiver_new(XF_SITE_MODEL_MAX, model_sink, t, &rx, &err) != XF_OK) {
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
    send_error(d, rc, "%s", err.msg);
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

static void on_tensor_chunk(daemon_t *d, const Xfed__TensorChunk *c) {
  task *t = model_task(d, c->stream_id);
  if (!t) {
    if (stream_ignored(d, c->stream_id, NULL, 0)) return;
    send_error(d, XF_EINVAL, "TensorChunk of stream %llu, which this site does not receive",
               (unsigned long long)c->stream_id);
    return;
  }
  if (t->phase != XF_SITEM_MODEL) return; /* a resend of a model we hold */
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_tensor_receiver_chunk(t->model_rx, c, &err);
  if (rc == XF_OK) return;
  /* A gap or a malformed chunk leaves the receiver as it was: say where to
   * resume. */
  send_error(d, rc, "%s", err.msg);
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(t->model_rx, &a);
  send_ack(d, a.stream_id, a.next_offset);
}

static void on_tensor_end(daemon_t *d, const Xfed__TensorEnd *e) {
  task *t = model_task(d, e->stream_id);
  if (!t) {
    if (stream_ignored(d, e->stream_id, NULL, 0)) return;
    send_error(d, XF_EINVAL, "TensorEnd of stream %llu, which this site does not receive",
               (unsigned long long)e->stream_id);
    return;
  }
  if (t->phase != XF_SITEM_MODEL) {
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
          logq(qj, sizeof(qj), t->job_id), (unsigned)t->round, (unsigned)t->attempt,
          (unsigned long long)t->model_len);
  task_step(d, t, XF_SITEM_MODEL_IN);
}

/* ---- offers and cancellations --------------------------------------------------------------- */

/* ---- secure aggregation (the rounds are site/siteagg.c's) ---------------------------------- */

static void sa_send(daemon_t *d, Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (!session_open(d) || xf_conn_send(d->conn, env, &err) != XF_OK) {
    char q[600];
    XF_WARN("secagg_not_sent", "body=%s reason=\"%s\"", xf_envelope_body_name(env),
            logq(q, sizeof(q), err.msg[0] ? err.msg : "not connected"));
  }
}

/* This site leaves (job, round, attempt)'s round of secure aggregation
 * because a check in `phase` failed (err says which member and why): the
 * aggregator is told (SecAggRefusal), the round forgotten, and a task still
 * training or waiting to send its masked update dropped, so nothing more of
 * it goes out. */
static void sa_refuse(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                      const char *phase, const xf_errctx *err) {
  uint32_t peer = xf_site_sa_peer(d->sa, job, round, attempt, err->peer);
  char q[600], qj[JOB_ID_MAX];
  XF_WARN("secagg_round_refused", "job=%s round=%u attempt=%u phase=%s peer=%s reason=\"%s\"",
          logq(qj, sizeof(qj), job), (unsigned)round, (unsigned)attempt, phase,
          peer ? err->peer : "-", logq(q, sizeof(q), err->msg[0] ? err->msg : "malformed"));
  Xfed__SecAggRefusal r = XFED__SEC_AGG_REFUSAL__INIT;
  r.job_id = (char *)job;
  r.round = round;
  r.attempt = attempt;
  r.phase = (char *)phase;
  r.peer = peer;
  r.peer_name = peer ? (char *)err->peer : "";
  r.reason = (char *)(err->msg[0] ? err->msg : "a malformed secure-aggregation message");
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_REFUSAL;
  env.secagg_refusal = &r;
  sa_send(d, &env);
  task *t = task_find(d, job, round, attempt);
  xf_site_sa_forget(d->sa, job, round, attempt);
  if (t) task_drop(d, t, "it refused the round's secure aggregation");
}

static bool sa_holds(void *user, const char *job) { return task_of_job(user, job) != NULL; }

/* Begins t's round of secure aggregation with the setup in t->uo.sa and
 * the cohort's names, signing with the site's certificate key. */
static xf_err sa_begin(daemon_t *d, const task *t, const char *const *cohort, xf_errctx *err) {
  xf_secagg_identity id = xf_secagg_x509_identity(d->sa_identity);
  return xf_site_sa_begin(d->sa, t->job_id, t->round, t->attempt, &t->uo.sa, cohort, &id,
                          sa_holds, d, err);
}

static void sa_advertise(daemon_t *d, const task *t) {
  uint8_t advert[XF_SECAGG_ADVERT_BYTES], sig[XF_SECAGG_SIG_BYTES];
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_advertise(d->sa, t->job_id, t->round, t->attempt, advert, sig, &err) != XF_OK) {
    sa_refuse(d, t->job_id, t->round, t->attempt, "keys", &err);
    return;
  }
  Xfed__SecAggAdvert a = XFED__SEC_AGG_ADVERT__INIT;
  a.job_id = (char *)t->job_id;
  a.round = t->round;
  a.attempt = t->attempt;
  a.advert.data = advert;
  a.advert.len = sizeof(advert);
  a.signature.data = sig;
  a.signature.len = sizeof(sig);
  a.certificate.data = d->sa_cert;
  a.certificate.len = d->sa_cert_len;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_ADVERT;
  env.secagg_advert = &a;
  sa_send(d, &env);
}

/* Masks t's quantized update and starts its stream (the shares are
 * routed). False when that fails: the task is refused and dropped. */
static bool sa_mask_and_stream(daemon_t *d, task *t) {
  xf_errctx err;
  xf_errctx_clear(&err);
  t->sa_waiting = false;
  uint32_t bits = 0;
  xf_secagg_client *client = xf_site_sa_client(d->sa, t->job_id, t->round, t->attempt, &bits);
  if (xf_update_mask(&t->payload, client, bits, &err) != XF_OK ||
      stream_update(t, &err) != XF_OK) {
    char q[600];
    XF_ERROR("secagg_mask_failed", "job=%s round=%u reason=\"%s\"", t->job_id,
             (unsigned)t->round, logq(q, sizeof(q), err.msg));
    send_refusal(d, t->job_id, t->round, t->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "cannot mask the update: %s", err.msg);
    task_drop(d, t, "secure aggregation failed");
    return false;
  }
  pump(d);
  return true;
}

static void on_sa_keys(daemon_t *d, const Xfed__SecAggKeys *k) {
  if (!xf_site_sa_has(d->sa, k->job_id, k->round, k->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_secagg_signed_share *msgs = NULL;
  size_t count = 0;
  if (xf_site_sa_keys(d->sa, k, &msgs, &count, &err) != XF_OK) {
    sa_refuse(d, k->job_id, k->round, k->attempt, "keys", &err);
    return;
  }
  uint32_t *to = xf_mallocarray(count ? count : 1, sizeof(uint32_t));
  ProtobufCBinaryData *cts = xf_mallocarray(count ? count : 1, sizeof(*cts));
  ProtobufCBinaryData *sigs = xf_mallocarray(count ? count : 1, sizeof(*sigs));
  if (to && cts && sigs) {
    for (size_t i = 0; i < count; i++) {
      to[i] = msgs[i].to;
      cts[i].data = msgs[i].ciphertext;
      cts[i].len = sizeof(msgs[i].ciphertext);
      sigs[i].data = msgs[i].sig;
      sigs[i].len = sizeof(msgs[i].sig);
    }
    Xfed__SecAggShares m = XFED__SEC_AGG_SHARES__INIT;
    m.job_id = k->job_id;
    m.round = k->round;
    m.attempt = k->attempt;
    m.n_to = count;
    m.to = to;
    m.n_ciphertexts = count;
    m.ciphertexts = cts;
    m.n_signatures = count;
    m.signatures = sigs;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_SECAGG_SHARES;
    env.secagg_shares = &m;
    sa_send(d, &env);
  }
  xf_free(to);
  xf_free(cts);
  xf_free(sigs);
  xf_site_sa_shares_free(msgs, count);
}

static void on_sa_routed(daemon_t *d, const Xfed__SecAggRouted *r) {
  if (!xf_site_sa_has(d->sa, r->job_id, r->round, r->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_sa_routed_in(d->sa, r, &err) != XF_OK) {
    sa_refuse(d, r->job_id, r->round, r->attempt, "routed", &err);
    return;
  }
  task *t = task_find(d, r->job_id, r->round, r->attempt);
  if (t && t->sa_waiting && t->phase == XF_SITEM_REPORTING) sa_mask_and_stream(d, t);
}

/* The consistency round: signs the survivor set the aggregator claims,
 * once per round. */
static void on_sa_check(daemon_t *d, const Xfed__SecAggCheck *c) {
  if (!xf_site_sa_has(d->sa, c->job_id, c->round, c->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint8_t sig[XF_SECAGG_SIG_BYTES];
  if (xf_site_sa_check(d->sa, c, sig, &err) != XF_OK) {
    sa_refuse(d, c->job_id, c->round, c->attempt, "check", &err);
    return;
  }
  Xfed__SecAggCheckSig m = XFED__SEC_AGG_CHECK_SIG__INIT;
  m.job_id = c->job_id;
  m.round = c->round;
  m.attempt = c->attempt;
  m.signature.data = sig;
  m.signature.len = sizeof(sig);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_CHECK_SIG;
  env.secagg_check_sig = &m;
  sa_send(d, &env);
}

static void on_sa_unmask(daemon_t *d, const Xfed__SecAggUnmask *u) {
  if (!xf_site_sa_has(d->sa, u->job_id, u->round, u->attempt)) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  uint8_t *out = NULL;
  size_t len = 0, cap = 0;
  if (xf_site_sa_unmask(d->sa, u, &out, &len, &cap, &err) != XF_OK) {
    sa_refuse(d, u->job_id, u->round, u->attempt, "unmask", &err);
    return;
  }
  Xfed__SecAggReveal r = XFED__SEC_AGG_REVEAL__INIT;
  r.job_id = u->job_id;
  r.round = u->round;
  r.attempt = u->attempt;
  r.reveal.data = out;
  r.reveal.len = len;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_REVEAL;
  env.secagg_reveal = &r;
  sa_send(d, &env);
  XF_INFO("secagg_revealed", "job=%s round=%u attempt=%u survivors=%zu", u->job_id,
          (unsigned)u->round, (unsigned)u->attempt, u->n_u3);
  xf_site_sa_reveal_free(out, cap);
}

/* The refusal's details when every place is taken: the tasks held. */
static void busy_details(const daemon_t *d, char *why, size_t why_len) {
  size_t used = (size_t)snprintf(why, why_len, "this site holds %d tasks:", d->n_tasks);
  for (int i = 0; i < d->n_tasks && used < why_len; i++) {
    const task *t = d->tasks[i];
    used += (size_t)snprintf(why + used, why_len - used, "%s job %s round %u attempt %u (%s)",
                             i ? "," : "", t->job_id, (unsigned)t->round, (unsigned)t->attempt,
                             xf_sitem_phase_name(t->phase));
  }
  if (used < why_len)
    snprintf(why + used, why_len - used, "; offer it again once one of them is done");
}

/* ---- offers --------------------------------------------------------------------------------------- */

static xf_err env_dataset(void *user, const char *name, xf_site_dataset *out, xf_errctx *err) {
  daemon_t *d = user;
  return xf_site_registry_get(d->reg, name, out, err);
}

static xf_err env_ledger_epsilon(void *user, const char *dataset, const char *job,
                                 const xf_privacy_charge *charge, double delta, double *out,
                                 xf_errctx *err) {
  daemon_t *d = user;
  return xf_ledger_epsilon(xf_site_registry_db(d->reg), dataset, job, charge, delta, out, err);
}

/* The site's own residency rules, checked and recorded in its audit trail
 * at this moment. */
static xf_err env_local_rules(void *user, const xf_site_task_ref *ref, const xf_site_residency *res,
                              const xf_jobspec *spec, const xf_site_dataset *ds,
                              xf_site_residency_verdict *v, xf_errctx *err) {
  daemon_t *d = user;
  double now = (double)wall_ms() / 1000.0;
  xf_db *db = xf_site_registry_db(d->reg);
  XF_GUARD(xf_site_residency_check(db, ref, res, spec, now, v, err));
  return xf_site_residency_audit(db, ref, ds->name, res, v, now, err);
}

static void offer_env_init(daemon_t *d) {
  d->offer_env = (xf_site_offer_env){.site = d->cfg.site,
                                     .region = d->cfg.region,
                                     .threads = (unsigned)xf_backend_threads(d->backend),
                                     .user = d,
                                     .dataset = env_dataset,
                                     .ledger_epsilon = env_ledger_epsilon,
                                     .local_rules = env_local_rules};
}

/* The log line of the local rules' verdict on an offer. */
static void log_local_rules(const Xfed__TaskOffer *o, const xf_site_offer_verdict *v) {
  char q[600], qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), o->job_id);
  if (v->step == XF_SITE_OFFER_LOCAL_ERROR) {
    XF_ERROR("local_policy_failed", "job=%s round=%u reason=\"%s\"", qj, (unsigned)o->round,
             logq(q, sizeof(q), v->local_err.msg));
    return;
  }
  const xf_site_residency_verdict *l = &v->local;
  XF_INFO("local_policy", "job=%s round=%u attempt=%u version=%llu allowed=%s rule=%s path=%s "
          "why=\"%s\"", qj, (unsigned)o->round, (unsigned)o->attempt,
          (unsigned long long)l->policy_version, l->allowed ? "true" : "false", l->rule, l->path,
          logq(q, sizeof(q), l->why));
}

/* An offer of a task the site holds, with the same model: offered again
 * after a reconnect, taken up where it was (r: what changes). */
static void offer_resumed(daemon_t *d, task *t, const Xfed__TaskOffer *o,
                          const xf_sitem_reoffer *r) {
  if (r->reseal) {
    seal_key_changed(d, t, o->seal_key.data);
    if (!task_live(d, t)) return;
  }
  t->offered_now = true;
  t->deadline_ms = o->deadline_unix_ms;
  if (r->model_stream) t->model_stream_id = o->model_stream_id;
  if (r->update_stream) update_stream_changed(d, t, o->update_stream_id);
  if (r->unhold) {
    t->hold = false;
    task_step(d, t, XF_SITEM_UNHOLD);
  }
  if (r->kind == XF_SITEM_SESSION_LOST) {
    send_refusal(d, t->job_id, o->round, o->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED,
                 "the task's update is bound to a secure-aggregation session the "
                 "coordinator no longer holds; the round goes on without this site");
    xf_site_sa_forget(d->sa, t->job_id, t->round, t->attempt);
    task_drop(d, t, "its secure-aggregation session was lost with the coordinator");
    return;
  }
  if (r->rehold) {
    t->hold = true;
    t->go = false;
  }
  char qj[JOB_ID_MAX];
  XF_INFO("task_resumed", "job=%s round=%u attempt=%u phase=%s", logq(qj, sizeof(qj), t->job_id),
          (unsigned)o->round, (unsigned)o->attempt, xf_sitem_phase_name(t->phase));
  send_accept(d, t);
}

/* The site machine's view of an offer of t (site/sitemachine.h). */
static void reoffer_of(const task *t, const Xfed__TaskOffer *o, xf_sitem_reoffer *r) {
  xf_sitem_held held = {
      .phase = t->phase,
      .same_model = memcmp(t->model_digest.bytes, o->model_digest.data, XF_DIGEST_BYTES) == 0 &&
                    t->evaluate_only == o->evaluate_only,
      .hold = t->hold,
      .go = t->go,
      .evaluate_only = t->evaluate_only,
      .secagg = t->secagg,
      .sealed = t->uo.sealed,
      .seal_pk = t->uo.seal_pk,
      .update_stream_id = t->update_stream_id};
  xf_sitem_again again = {
      .hold = o->hold,
      .seal_key = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES ? o->seal_key.data : NULL,
      .model_stream_id = o->model_stream_id,
      .update_stream_id = o->update_stream_id};
  xf_sitem_reoffer_decide(&held, &again, r);
}

/* Makes room for an offer of job: the job's earlier task (another model,
 * round or attempt) and other jobs' tasks held from an earlier session
 * past their deadline (their rounds have closed, and they must not keep a
 * place for good) are dropped. False when the offer is answered already
 * (resumed, or refused because the worker trains the job's other model). */
static bool offer_makes_room(daemon_t *d, const Xfed__TaskOffer *o, uint64_t now) {
  const char *job = o->job_id;
  task *t = task_find(d, job, o->round, o->attempt);
  if (t) {
    xf_sitem_reoffer r;
    reoffer_of(t, o, &r);
    if (r.kind == XF_SITEM_RESUME || r.kind == XF_SITEM_SESSION_LOST) {
      offer_resumed(d, t, o, &r);
      return false;
    }
    if (r.kind == XF_SITEM_BUSY) {
      send_refusal(d, job, o->round, o->attempt, XFED__TASK_REFUSAL__REASON__BUSY,
                   "this site is training job %s round %u attempt %u from another model",
                   t->job_id, (unsigned)t->round, (unsigned)t->attempt);
      return false;
    }
    task_drop(d, t, "offered again with another model");
  } else if ((t = task_of_job(d, job)) != NULL) {
    task_drop(d, t, "superseded by another round or attempt of its job");
  }
  for (int i = d->n_tasks - 1; i >= 0; i--) {
    task *u = d->tasks[i];
    if (xf_sitem_stale(u->offered_now, u == d->worker_task, u->deadline_ms, now))
      task_drop(d, u, "its deadline passed without the coordinator offering it again");
  }
  return true;
}

/* A new task of an offer the checks took (v's dataset moves into it), in
 * XF_SITEM_MODEL; NULL when out of memory (v's dataset is then freed). */
static task *task_new(daemon_t *d, const Xfed__TaskOffer *o, xf_site_offer_verdict *v) {
  xf_errctx err;
  xf_errctx_clear(&err);
  task *t = xf_calloc(1, sizeof(*t));
  if (t && xf_tensor_receiver_new(XF_SITE_MODEL_MAX, model_sink, t, &t->model_rx, &err) != XF_OK) {
    xf_free(t);
    t = NULL;
  }
  if (!t) {
    xf_site_dataset_free(&v->dataset);
    return NULL;
  }
  snprintf(t->job_id, sizeof(t->job_id), "%s", o->job_id);
  t->round = o->round;
  t->attempt = o->attempt;
  t->model_round = o->model_round;
  t->deadline_ms = o->deadline_unix_ms;
  t->evaluate_only = o->evaluate_only;
  t->hold = o->hold;
  memcpy(t->model_digest.bytes, o->model_digest.data, XF_DIGEST_BYTES);
  t->model_stream_id = o->model_stream_id;
  t->spec = v->spec;
  t->dataset = v->dataset;
  memset(&v->dataset, 0, sizeof(v->dataset));
  t->n_params = v->n_params;
  t->plan = v->plan;
  t->charge = v->charge;
  xf_site_plan_keep(&t->residency, o->residency);
  const char *to = o->residency ? o->residency->aggregator_region : NULL;
  if (to && *to && strcmp(to, d->cfg.region) != 0) {
    t->crossing = true;
    snprintf(t->crossing_to, sizeof(t->crossing_to), "%s", to);
  }
  t->shuffle_seed = v->shuffle_seed;
  t->update_stream_id = o->update_stream_id ? o->update_stream_id
                                            : xf_site_update_stream_id(o->round, o->attempt);
  t->phase = XF_SITEM_MODEL;
  t->offered_now = true;
  atomic_init(&t->abandoned, false);
  t->secagg = v->secagg;
  t->uo = v->uo;
  return t;
}

/* The top-k or shared-subset residual the task starts from. NULL when it
 * is read (or there is none), else what failed, with err. */
static const char *task_residual_load(daemon_t *d, task *t, xf_errctx *err) {
  if (t->evaluate_only || t->spec.compression.uplink.topk_fraction <= 0) return NULL;
  bool found = false;
  t->residual = xf_mallocarray(t->n_params, sizeof(float));
  if (!t->residual) {
    xf_fail(err, XF_ENOMEM, "out of memory");
    return "cannot read the compression residual";
  }
  if (xf_site_residual_load(d->reg, t->job_id, t->dataset.name, t->round, t->residual,
                            t->n_params, &found, err) != XF_OK)
    return "cannot read the compression residual";
  /* Error feedback, discounted: the next local training starts from a
   * global model that lacks what this site left out, so it re-derives
   * part of it; carrying the whole residual over would count that part
   * twice (docs/compression.md). */
  for (size_t i = 0; i < t->n_params; i++) t->residual[i] *= XF_SITE_RESIDUAL_DISCOUNT;
  return NULL;
}

/* An offer of a task the site does not hold: decided by the checks
 * (site/offer.h), then taken: its round of secure aggregation begun and
 * its residual read. */
static void offer_take(daemon_t *d, const Xfed__TaskOffer *o, uint64_t now) {
  const char *job = o->job_id;
  char busy[1024];
  bool full = d->n_tasks >= XF_SITE_TASKS_MAX;
  if (full) busy_details(d, busy, sizeof(busy));
  xf_site_offer_room room = {.now_ms = now, .busy = full ? busy : NULL};
  xf_site_offer_verdict v;
  xf_site_offer_check(&d->offer_env, o, &room, &v);
  if (v.local_ran) log_local_rules(o, &v);
  if (v.step != XF_SITE_OFFER_TAKEN) {
    ignore_stream(d, o->model_stream_id, job, o->round);
    send_refusal(d, job, o->round, o->attempt, v.reason, "%s", v.why);
    if (v.step == XF_SITE_OFFER_SETUP && v.uo.secagg) xf_site_sa_forget(d->sa, job, o->round, o->attempt);
    return;
  }
  task *t = task_new(d, o, &v);
  if (!t) {
    send_error(d, XF_ENOMEM, "the site cannot take job %s round %u: out of memory", job,
               (unsigned)o->round);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  const char *fail = NULL;
  if (t->uo.secagg && sa_begin(d, t, (const char *const *)o->secagg->cohort, &err) != XF_OK)
    fail = "secure aggregation";
  if (!fail) fail = task_residual_load(d, t, &err);
  if (fail) {
    char msg[600];
    snprintf(msg, sizeof(msg), "%s", err.msg);
    ignore_stream(d, o->model_stream_id, job, o->round);
    send_refusal(d, job, o->round, o->attempt, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "%s: %s",
                 fail, msg);
    if (t->uo.secagg) xf_site_sa_forget(d->sa, job, o->round, o->attempt);
    task_free(t);
    return;
  }
  d->tasks[d->n_tasks++] = t;
  char qj[JOB_ID_MAX];
  XF_INFO("task_accepted", "job=%s round=%u attempt=%u dataset=%s hold=%s queued=%d",
          logq(qj, sizeof(qj), job), (unsigned)t->round, (unsigned)t->attempt, t->dataset.name,
          t->hold ? "true" : "false", d->n_tasks);
  send_accept(d, t);
  if (t->uo.secagg) {
    (void)flush_replies(d); /* the acceptance first, then our keys */
    sa_advertise(d, t);
  }
}

static void on_offer(daemon_t *d, const Xfed__TaskOffer *o) {
  char msg[600];
  if (xf_site_offer_malformed(o, msg, sizeof(msg))) {
    send_error(d, XF_EFORMAT, "%s", msg);
    return;
  }
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), o->job_id);
  uint64_t now = wall_ms();
  /* answer_by_unix_ms is the aggregator's own deadline for the answer; a
   * site answers at once, so it is only logged. */
  XF_INFO("task_offer", "job=%s round=%u attempt=%u model_round=%u evaluate_only=%s hold=%s "
          "deadline_in_s=%.1f answer_by_in_s=%.1f", qj, (unsigned)o->round, (unsigned)o->attempt,
          (unsigned)o->model_round, o->evaluate_only ? "true" : "false",
          o->hold ? "true" : "false",
          o->deadline_unix_ms ? ((double)o->deadline_unix_ms - (double)now) / 1000.0 : -1.0,
          o->answer_by_unix_ms ? ((double)o->answer_by_unix_ms - (double)now) / 1000.0 : -1.0);
  if (offer_makes_room(d, o, now)) offer_take(d, o, now);
}

/* The aggregator confirms a held task: enough sites accepted. With secure
 * aggregation it carries this site's setup for the round's cohort. */
static void on_go(daemon_t *d, const Xfed__TaskGo *g) {
  const char *job = g->job_id ? g->job_id : "";
  char qj[JOB_ID_MAX];
  logq(qj, sizeof(qj), job);
  task *t = task_find(d, job, g->round, g->attempt);
  if (!t) {
    XF_WARN("task_go_unknown", "job=%s round=%u attempt=%u why=\"no such task here\"", qj,
            (unsigned)g->round, (unsigned)g->attempt);
    send_error(d, XF_ENOENT, "TaskGo for job %s round %u attempt %u names no task of this site; "
               "offer it first", job, (unsigned)g->round, (unsigned)g->attempt);
    return;
  }
  if (t->go || !t->hold) {
    XF_INFO("task_go_repeated", "job=%s round=%u attempt=%u phase=%s", qj, (unsigned)g->round,
            (unsigned)g->attempt, xf_sitem_phase_name(t->phase));
    return;
  }
  xf_site_go_task held = {.spec = &t->spec, .plan_kept = &t->residency, .privacy = &t->plan,
                          .n_params = t->n_params, .evaluate_only = t->evaluate_only,
                          .secagg = t->secagg};
  xf_site_go_verdict v;
  xf_site_go_check(&d->offer_env, &held, g, &t->uo, &v);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (v.begin && sa_begin(d, t, (const char *const *)g->secagg->cohort, &err) != XF_OK) {
    char msg[600];
    snprintf(msg, sizeof(msg), "%s", err.msg);
    v.step = XF_SITE_GO_SETUP;
    v.reason = XFED__TASK_REFUSAL__REASON__UNSUPPORTED;
    snprintf(v.why, sizeof(v.why), "secure aggregation: %s", msg);
  }
  if (v.step != XF_SITE_GO_FOLLOWED) {
    send_refusal(d, t->job_id, t->round, t->attempt, v.reason, "%s", v.why);
    if (v.step == XF_SITE_GO_RELEASE) {
      task_drop(d, t, "the aggregator's cohort is smaller than the plan allows");
      return;
    }
    xf_site_sa_forget(d->sa, t->job_id, t->round, t->attempt);
    task_drop(d, t, "its go cannot be followed");
    return;
  }
  t->go = true;
  XF_INFO("task_go", "job=%s round=%u attempt=%u phase=%s secagg=%s", qj, (unsigned)t->round,
          (unsigned)t->attempt, xf_sitem_phase_name(t->phase), g->secagg ? "true" : "false");
  if (g->secagg && t->secagg) {
    (void)flush_replies(d);
    sa_advertise(d, t);
  }
  task_step(d, t, XF_SITEM_GO);
}

static void on_cancel(daemon_t *d, const Xfed__TaskCancel *c) {
  const char *job = c->job_id ? c->job_id : "";
  char qj[JOB_ID_MAX], q[600];
  logq(qj, sizeof(qj), job);
  task *t = task_find(d, job, c->round, c->attempt);
  if (!t) {
    XF_INFO("task_cancel_ignored", "job=%s round=%u attempt=%u why=\"no such task here\"", qj,
            (unsigned)c->round, (unsigned)c->attempt);
    return;
  }
  XF_INFO("task_cancelled", "job=%s round=%u attempt=%u phase=%s reason=\"%s\"", qj,
          (unsigned)c->round, (unsigned)c->attempt, xf_sitem_phase_name(t->phase),
          logq(q, sizeof(q), c->reason));
  xf_site_sa_forget(d->sa, job, c->round, c->attempt);
  task_drop(d, t, "cancelled by the coordinator");
  maybe_start_worker(d);
}

/* ---- the session ------------------------------------------------------------------------------ */

static void send_announce(daemon_t *d) {
  xf_site_dataset *list = NULL;
  size_t listed = 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_registry_list(d->reg, &list, &listed, &err) != XF_OK) {
    char q[600];
    XF_ERROR("announce_failed", "reason=\"%s\"", logq(q, sizeof(q), err.msg));
    list = NULL;
    listed = 0;
  }
  size_t n = listed;
  Xfed__SiteAnnounce__Dataset *sets = n ? xf_calloc(n, sizeof(*sets)) : NULL;
  Xfed__SiteAnnounce__Dataset **ptrs = n ? xf_calloc(n, sizeof(*ptrs)) : NULL;
  if (n && (!sets || !ptrs)) n = 0;
  for (size_t i = 0; i < n; i++) {
    Xfed__SiteAnnounce__Dataset init = XFED__SITE_ANNOUNCE__DATASET__INIT;
    sets[i] = init;
    sets[i].name = list[i].name;
    sets[i].n_tags = list[i].n_tags;
    sets[i].tags = list[i].tags;
    sets[i].classification = (char *)xf_site_class_name(list[i].classification);
    sets[i].train_records = list[i].train_records;
    sets[i].test_records = list[i].test_records;
    sets[i].classes = list[i].classes;
    sets[i].height = list[i].h;
    sets[i].width = list[i].w;
    sets[i].channels = list[i].c;
    ptrs[i] = &sets[i];
  }
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = d->cfg.site;
  a.region = d->cfg.region;
  a.n_datasets = n;
  a.datasets = ptrs;
  a.backend = (char *)xf_backend_name(d->backend);
  a.threads = (uint32_t)xf_backend_threads(d->backend);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  xf_err rc = xf_conn_send(d->conn, &env, &err);
  if (rc != XF_OK) {
    char q[600];
    XF_ERROR("announce_failed", "reason=\"%s\"", logq(q, sizeof(q), err.msg));
  } else {
    XF_INFO("site_announced", "site=%s region=%s datasets=%zu backend=%s threads=%u",
            d->cfg.site, d->cfg.region, n, a.backend, (unsigned)a.threads);
  }
  xf_free(ptrs);
  xf_free(sets);
  xf_site_dataset_list_free(list, listed);
}

static xf_err on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  daemon_t *d = xf_conn_user(c);
  d->connected = true;
  /* A site talks to a coordinator: the global one, or the regional
   * aggregator of its own region. Anything else would take the update
   * somewhere the operator did not send it. */
  if (peer->kind != XF_PKI_KIND_COORDINATOR ||
      (peer->region[0] && strcmp(peer->region, d->cfg.region) != 0)) {
    snprintf(d->close_reason, sizeof(d->close_reason),
             "the peer at %s is %s %s%s%s, not a coordinator of region %s or the global one",
             xf_conn_peer_addr(c), xf_pki_kind_name(peer->kind), peer->name,
             peer->region[0] ? " of region " : "", peer->region, d->cfg.region);
    return XF_EDENIED;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_session_start(&d->session, c, "site", 0, &err);
  if (rc != XF_OK) snprintf(d->close_reason, sizeof(d->close_reason), "%s", err.msg);
  else XF_INFO("site_connected", "coordinator=%s peer=%s address=%s", d->cfg.coordinator,
               peer->name, xf_conn_peer_addr(c));
  return rc;
}

static void on_session_open(daemon_t *d) {
  d->backoff_before_open = d->backoff_ms;
  d->backoff_ms = XF_SITE_BACKOFF_MIN_MS;
  d->sessions_opened++;
  XF_INFO("session_open", "coordinator=%s version=%u peer_role=%s", d->cfg.coordinator,
          (unsigned)d->session.version, d->session.peer_role);
  xf_notify_status("site %s: session open with %s", d->cfg.site, d->cfg.coordinator);
  send_announce(d);
}

static void on_frame(xf_conn *c, const Xfed__Envelope *env) {
  daemon_t *d = xf_conn_user(c);
  if (d->stopping) return;
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(&d->session, c, env, &ev, &err) != XF_OK) {
    snprintf(d->close_reason, sizeof(d->close_reason), "%s", err.msg);
    d->refused = env->body_case == XFED__ENVELOPE__BODY_REFUSAL;
    xf_conn_close(c);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    on_session_open(d);
    pump(d);
    return;
  }
  if (ev != XF_SESSION_FRAME) return;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(d, env->task_offer); break;
  case XFED__ENVELOPE__BODY_TASK_CANCEL: on_cancel(d, env->task_cancel); break;
  case XFED__ENVELOPE__BODY_TASK_GO: on_go(d, env->task_go); break;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: on_tensor_begin(d, env->tensor_begin); break;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK: on_tensor_chunk(d, env->tensor_chunk); break;
  case XFED__ENVELOPE__BODY_TENSOR_END: on_tensor_end(d, env->tensor_end); break;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: on_tensor_ack(d, env->tensor_ack); break;
  case XFED__ENVELOPE__BODY_SECAGG_KEYS: on_sa_keys(d, env->secagg_keys); break;
  case XFED__ENVELOPE__BODY_SECAGG_ROUTED: on_sa_routed(d, env->secagg_routed); break;
  case XFED__ENVELOPE__BODY_SECAGG_CHECK: on_sa_check(d, env->secagg_check); break;
  case XFED__ENVELOPE__BODY_SECAGG_UNMASK: on_sa_unmask(d, env->secagg_unmask); break;
  case XFED__ENVELOPE__BODY_ERROR: {
    char q[600];
    XF_WARN("coordinator_error", "code=%s message=\"%s\"", xf_err_name((xf_err)env->error->code),
            logq(q, sizeof(q), env->error->message));
    if (env->error->stream_id) on_update_refused(d, env->error->stream_id);
    break;
  }
  default:
    send_error(d, XF_EUNSUPPORTED, "a site does not take %s messages",
               xf_envelope_body_name(env));
    break;
  }
  pump(d);
}

static void on_drain(xf_conn *c) { pump(xf_conn_user(c)); }

static void on_close(xf_conn *c, const xf_conn_reason *why) {
  daemon_t *d = xf_conn_user(c);
  bool was_connected = d->connected, was_open = d->session.open;
  d->bytes_in_closed += xf_conn_bytes_in(c);
  d->bytes_out_closed += xf_conn_bytes_out(c);
  d->conn = NULL;
  d->connected = false;
  d->n_replies = 0;
  memset(&d->session, 0, sizeof(d->session));
  for (int i = 0; i < d->n_tasks; i++) task_link_lost(d->tasks[i]);
  if (!was_connected && why->end == XF_CONN_END_CONNECT && !d->stopping &&
      d->next_addr + 1 < d->n_addrs) {
    d->next_addr++; /* the name has more addresses: try the next one now */
    uv_timer_start(&d->redial, on_redial_timer, 0, 0);
    return;
  }
  char q[600];
  const char *reason = d->close_reason[0] ? d->close_reason : why->msg;
  bool expected = d->stopping || (why->end == XF_CONN_END_CLOSED && !d->close_reason[0]);
  xf_log(expected ? XF_LOG_INFO : XF_LOG_WARN,
         "session_closed", "coordinator=%s end=%s was_open=%s reason=\"%s\"", d->cfg.coordinator,
         end_name(why->end), was_open ? "true" : "false",
         logq(q, sizeof(q), reason[0] ? reason : xf_conn_end_message(why->end)));
  d->close_reason[0] = '\0';
  if (!d->stopping)
    xf_notify_status("site %s: no session with %s (%s); dialing again",
                     d->cfg.site, d->cfg.coordinator, end_name(why->end));
  /* A session the coordinator refused (after our announce, say) does not
   * count as opened: the delays keep growing, so a site it will not take
   * does not knock every half second. */
  if (d->refused && was_open && d->backoff_before_open > d->backoff_ms)
    d->backoff_ms = d->backoff_before_open;
  d->refused = false;
  if (!d->stopping) schedule_redial(d);
}

/* ---- dialing ------------------------------------------------------------------------------------ */

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res) {
  daemon_t *d = req->data;
  d->resolving = false;
  if (status == UV_ECANCELED || d->stopping) {
    uv_freeaddrinfo(res);
    return;
  }
  if (status < 0) {
    XF_WARN("resolve_failed", "coordinator=%s reason=\"%s\"", d->cfg.coordinator,
            uv_strerror(status));
    uv_freeaddrinfo(res);
    schedule_redial(d);
    return;
  }
  d->n_addrs = 0;
  for (struct addrinfo *a = res; a && d->n_addrs < ADDRS_MAX; a = a->ai_next)
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        a->ai_addrlen <= sizeof(d->addrs[0]))
      memcpy(&d->addrs[d->n_addrs++], a->ai_addr, a->ai_addrlen);
  uv_freeaddrinfo(res);
  d->next_addr = 0;
  dial_next(d);
}

static void start_resolve(daemon_t *d) {
  d->attempts++;
  d->n_addrs = d->next_addr = 0;
  XF_INFO("dial", "coordinator=%s attempt=%lu", d->cfg.coordinator, d->attempts);
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  d->resolver.data = d;
  int rc = uv_getaddrinfo(&d->loop, &d->resolver, on_resolved, d->cfg.coordinator_host,
                          d->port_text, &hints);
  if (rc != 0) {
    XF_WARN("resolve_failed", "coordinator=%s reason=\"%s\"", d->cfg.coordinator,
            uv_strerror(rc));
    schedule_redial(d);
    return;
  }
  d->resolving = true;
}

/* Dials the addresses of the last resolution from next_addr on; backs off
 * when none can be dialed. */
static void dial_next(daemon_t *d) {
  xf_conn_opts opts = {.on_connect = on_connect, .on_frame = on_frame, .on_drain = on_drain,
                       .on_close = on_close, .user = d};
  for (; d->next_addr < d->n_addrs; d->next_addr++) {
    char ip[INET6_ADDRSTRLEN + 1];
    const struct sockaddr_storage *sa = &d->addrs[d->next_addr];
    int rc = sa->ss_family == AF_INET6
                 ? uv_ip6_name((const struct sockaddr_in6 *)sa, ip, sizeof(ip))
                 : uv_ip4_name((const struct sockaddr_in *)sa, ip, sizeof(ip));
    if (rc != 0) continue;
    xf_errctx err;
    xf_errctx_clear(&err);
    d->close_reason[0] = '\0';
    d->connected = false;
    if (xf_dial(&d->loop, d->tls, ip, d->cfg.coordinator_port, &opts, &d->conn, &err) == XF_OK)
      return;
    char q[600];
    XF_WARN("dial_failed", "coordinator=%s address=%s reason=\"%s\"", d->cfg.coordinator, ip,
            logq(q, sizeof(q), err.msg));
  }
  schedule_redial(d);
}

static void on_redial_timer(uv_timer_t *timer) {
  daemon_t *d = timer->data;
  if (d->stopping) return;
  if (d->next_addr > 0 && d->next_addr < d->n_addrs) dial_next(d);
  else start_resolve(d);
}

static void schedule_redial(daemon_t *d) {
  if (d->stopping) return;
  d->n_addrs = d->next_addr = 0;
  double jitter = 0.75 + 0.5 * xf_rng_uniform(&d->jitter);
  uint64_t delay = (uint64_t)((double)d->backoff_ms * jitter);
  XF_INFO("redial", "coordinator=%s in_ms=%llu attempt=%lu", d->cfg.coordinator,
          (unsigned long long)delay, d->attempts + 1);
  d->backoff_ms = d->backoff_ms >= XF_SITE_BACKOFF_MAX_MS / 2 ? XF_SITE_BACKOFF_MAX_MS
                                                              : d->backoff_ms * 2;
  uv_timer_start(&d->redial, on_redial_timer, delay, 0);
}

/* ---- start and stop ----------------------------------------------------------------------------- */

static void metrics_stop(daemon_t *d); /* below, with /metrics */

static void daemon_stop(daemon_t *d, const char *signal_name) {
  if (d->stopping) return;
  d->stopping = true;
  metrics_stop(d);
  task *t = d->worker_task;
  XF_INFO("site_stopping", "signal=%s training=%s", signal_name,
          t ? "true (told to stop; waiting for it)" : "false");
  if (t) atomic_store(&t->abandoned, true);
  xf_notify_stopping(&d->notify);
  uv_timer_stop(&d->redial);
  uv_close((uv_handle_t *)&d->redial, NULL);
  if (d->resolving) uv_cancel((uv_req_t *)&d->resolver);
  if (d->conn) {
    snprintf(d->close_reason, sizeof(d->close_reason), "the site is stopping (%s)", signal_name);
    xf_conn_close(d->conn);
  }
  uv_close((uv_handle_t *)&d->sigterm, NULL);
  uv_close((uv_handle_t *)&d->sigint, NULL);
  uv_close((uv_handle_t *)&d->sighup, NULL);
}

static void on_signal(uv_signal_t *h, int signum) {
  daemon_t *d = h->data;
  if (signum == SIGHUP) {
    xf_errctx err;
    xf_errctx_clear(&err);
    char q[600];
    xf_pki_trust *trust = NULL;
    xf_notify_reloading();
    /* The trust for secure aggregation is loaded first: when it fails,
     * neither the TLS context nor secure aggregation has changed. */
    if (xf_pki_trust_load(d->ca_path, d->crl_path, &trust, &err) != XF_OK ||
        xf_tls_reload_crl(d->tls, &err) != XF_OK) {
      xf_pki_trust_free(trust);
      XF_ERROR("crl_reload_failed", "reason=\"%s\" kept=\"the CRL loaded before\"",
               logq(q, sizeof(q), err.msg));
      xf_notify_ready("site %s: the CRL reload failed (%s), the previous CRL is in force",
                      d->cfg.site, err.msg);
    } else {
      /* Secure aggregation checks its peers against the new CRL too. */
      xf_secagg_x509_set_trust(d->sa_identity, trust);
      xf_pki_trust_free(d->sa_trust);
      d->sa_trust = trust;
      XF_INFO("crl_reloaded", "ca=%s crl=%s", d->cfg.ca, d->cfg.crl);
      xf_notify_ready("site %s: CRL reloaded", d->cfg.site);
    }
    if (session_open(d)) send_announce(d);
    return;
  }
  daemon_stop(d, signum == SIGTERM ? "TERM" : "INT");
}

/* path, or DIR/path when path is relative. */
static xf_err site_path(const daemon_t *d, const char *field, const char *path, char *out,
                        size_t n, xf_errctx *err) {
  if (!path[0]) {
    xf_errctx_field(err, "%s", field);
    return xf_fail(err, XF_EINVAL, "the daemon needs %s: set it in site.json (xfed-site init "
                   "--%s FILE)", field, field);
  }
  int w = path[0] == '/' ? snprintf(out, n, "%s", path) : snprintf(out, n, "%s/%s", d->dir, path);
  XF_ENSURE(w > 0 && (size_t)w < n, err, XF_EINVAL, "%s: the path is too long", field);
  return XF_OK;
}

/* The site's own certificate must be the site site.json names: a mismatch
 * would only show up as the coordinator's refusal, again and again. */
static xf_err check_own_identity(const daemon_t *d, const char *cert_path, xf_errctx *err) {
  X509 *cert = NULL;
  XF_GUARD(xf_pki_cert_load(cert_path, &cert, err));
  xf_spiffe_id id;
  xf_err rc = xf_pki_peer_identity(cert, &id, err);
  X509_free(cert);
  if (rc != XF_OK) {
    xf_errctx_file(err, cert_path);
    return rc;
  }
  if (id.kind != XF_PKI_KIND_SITE || strcmp(id.name, d->cfg.site) != 0 ||
      strcmp(id.region, d->cfg.region) != 0) {
    xf_errctx_file(err, cert_path);
    return xf_fail(err, XF_EINVAL, "the certificate is for %s %s%s%s, but site.json says site %s "
                   "of region %s", xf_pki_kind_name(id.kind), id.name,
                   id.region[0] ? " of region " : "", id.region, d->cfg.site, d->cfg.region);
  }
  return XF_OK;
}

/* What secure aggregation signs and checks with: the TLS key, the
 * certificate (DER) the site sends with its keys, and its own copy of the
 * CA and CRL, reloaded with the TLS ones on SIGHUP. */
static xf_err sa_identity_load(daemon_t *d, const char *cert_path, const char *key_path,
                               xf_errctx *err) {
  X509 *cert = NULL;
  EVP_PKEY *key = NULL;
  xf_err rc = xf_pki_cert_load(cert_path, &cert, err);
  if (rc == XF_OK) rc = xf_pki_key_load(key_path, &key, err);
  if (rc == XF_OK) rc = xf_secagg_x509_cert_der(cert, &d->sa_cert, &d->sa_cert_len, err);
  if (rc == XF_OK) rc = xf_pki_trust_load(d->ca_path, d->crl_path, &d->sa_trust, err);
  if (rc == XF_OK) rc = xf_secagg_x509_new(d->sa_trust, key, &d->sa_identity, err);
  if (rc != XF_OK && !err->file[0]) xf_errctx_file(err, key_path);
  EVP_PKEY_free(key);
  X509_free(cert);
  return rc;
}

static void sa_identity_free(daemon_t *d) {
  xf_secagg_x509_free(d->sa_identity);
  xf_pki_trust_free(d->sa_trust);
  xf_free(d->sa_cert);
  d->sa_identity = NULL;
  d->sa_trust = NULL;
  d->sa_cert = NULL;
}

static xf_err open_backend(daemon_t *d, xf_errctx *err) {
  const char *env = getenv("XF_BACKEND");
  if (env && *env) return xf_backend_open_env((int)d->cfg.threads, &d->backend, err);
  xf_backend_options o = {.threads = (int)d->cfg.threads};
  if (xf_backend_parse_kind(d->cfg.backend, &o.kind) != XF_OK) {
    xf_errctx_field(err, "backend");
    return xf_fail(err, XF_EINVAL, "backend '%s': use auto, cpu or cuda", d->cfg.backend);
  }
  return xf_backend_open(&o, &d->backend, err);
}

static xf_err daemon_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  const char *dir = opts->dir && *opts->dir ? opts->dir : ".";
  XF_ENSURE(strlen(dir) + sizeof("/site.json") < sizeof(d->dir), err, XF_EINVAL,
            "the site directory's path is too long");
  snprintf(d->dir, sizeof(d->dir), "%s", dir);
  char path[PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/site.json", d->dir);
  XF_GUARD(xf_site_config_load(path, &d->cfg, err));
  snprintf(d->port_text, sizeof(d->port_text), "%u", (unsigned)d->cfg.coordinator_port);
  char cert[PATH_MAX + 16], key[PATH_MAX + 16], ca[PATH_MAX + 16], crl[PATH_MAX + 16];
  XF_GUARD(site_path(d, "cert", d->cfg.cert, cert, sizeof(cert), err));
  XF_GUARD(site_path(d, "key", d->cfg.key, key, sizeof(key), err));
  XF_GUARD(site_path(d, "ca", d->cfg.ca, ca, sizeof(ca), err));
  XF_GUARD(site_path(d, "crl", d->cfg.crl, crl, sizeof(crl), err));
  XF_GUARD(check_own_identity(d, cert, err));
  xf_tls_config tc = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  XF_GUARD(xf_tls_new(&tc, &d->tls, err));
  snprintf(d->ca_path, sizeof(d->ca_path), "%s", ca);
  snprintf(d->crl_path, sizeof(d->crl_path), "%s", crl);
  XF_GUARD(sa_identity_load(d, cert, key, err));
  snprintf(path, sizeof(path), "%s/site.db", d->dir);
  XF_GUARD(xf_site_registry_open(path, &d->reg, err));
  XF_GUARD(open_backend(d, err));
  XF_GUARD(xf_site_sa_new(SA_SLOTS, &d->sa, err));
  offer_env_init(d);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  xf_rng_seed(&d->jitter, (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20),
              (uint64_t)getpid());
  d->backoff_ms = XF_SITE_BACKOFF_MIN_MS;
  return XF_OK;
}

/* ---- /metrics and /healthz ------------------------------------------------------------------ */

#ifdef XF_HAVE_HTTP

static void on_metrics(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  daemon_t *d = ctx;
  xf_prom p = {0};
  xf_prom_process(&p, "xfed-site");
  bool up = session_open(d);
  xf_prom_family(&p, "xfed_peers_connected", "gauge",
                 "Open sessions with the coordinator (or regional aggregator): 0 or 1.");
  const char *lk[] = {"kind", "coordinator", NULL};
  xf_prom_sample(&p, "xfed_peers_connected", lk, up ? 1 : 0);
  uint64_t in = d->bytes_in_closed, out = d->bytes_out_closed;
  if (d->conn) {
    in += xf_conn_bytes_in(d->conn);
    out += xf_conn_bytes_out(d->conn);
  }
  xf_prom_family(&p, "xfed_network_bytes_total", "counter",
                 "TLS bytes on the connections to the coordinator, by direction.");
  const char *ls[] = {"direction", "sent", "kind", "coordinator", NULL};
  const char *lr[] = {"direction", "received", "kind", "coordinator", NULL};
  xf_prom_sample(&p, "xfed_network_bytes_total", ls, (double)out);
  xf_prom_sample(&p, "xfed_network_bytes_total", lr, (double)in);
  xf_prom_family(&p, "xfed_sessions_opened_total", "counter",
                 "Sessions opened with the coordinator since the start (reconnects count).");
  xf_prom_sample(&p, "xfed_sessions_opened_total", NULL, (double)d->sessions_opened);
  size_t by_phase[XF_SITEM_REPORTING + 1] = {0};
  for (int i = 0; i < d->n_tasks; i++) by_phase[d->tasks[i]->phase]++;
  xf_prom_family(&p, "xfed_tasks", "gauge",
                 "Tasks the site holds, by phase (reporting: results waiting to be sent, the "
                 "upload queue).");
  for (int ph = 0; ph <= XF_SITEM_REPORTING; ph++) {
    const char *l[] = {"phase", xf_sitem_phase_name((xf_sitem_phase)ph), NULL};
    xf_prom_sample(&p, "xfed_tasks", l, (double)by_phase[ph]);
  }
  /* Privacy each job spent on each dataset, from the ledger (sites that
   * account for themselves: unit record, or unit site with mode local);
   * the newest 32 jobs per dataset keep the series bounded. */
  typedef struct {
    char dataset[XF_JOB_IDENT_MAX], job[64];
    double eps, releases;
  } spend;
  spend *rows = NULL;
  size_t n_rows = 0, cap = 0;
  xf_site_dataset *ds = NULL;
  size_t nds = 0;
  xf_errctx err = {0};
  if (xf_site_registry_list(d->reg, &ds, &nds, &err) == XF_OK) {
    for (size_t i = 0; i < nds; i++) {
      xf_ledger_job *jobs = NULL;
      size_t nj = 0;
      double delta = ds[i].budget_delta > 0 ? ds[i].budget_delta : XF_SITE_BUDGET_DELTA_DEFAULT;
      if (xf_ledger_jobs(xf_site_registry_db(d->reg), ds[i].name, delta, &jobs, &nj, &err) !=
          XF_OK)
        continue;
      for (size_t j = nj > 32 ? nj - 32 : 0; j < nj; j++) {
        if (n_rows == cap) {
          size_t nc = cap ? cap * 2 : 16;
          spend *r = xf_realloc(rows, nc * sizeof(*rows));
          if (!r) break;
          rows = r;
          cap = nc;
        }
        spend *r = &rows[n_rows++];
        snprintf(r->dataset, sizeof(r->dataset), "%s", ds[i].name);
        snprintf(r->job, sizeof(r->job), "%s", jobs[j].job);
        r->eps = jobs[j].epsilon;
        r->releases = jobs[j].rounds;
      }
      xf_free(jobs);
    }
    xf_site_dataset_list_free(ds, nds);
  }
  xf_prom_family(&p, "xfed_dataset_epsilon", "gauge",
                 "Epsilon a job has spent on a dataset (the site's privacy ledger, at the "
                 "dataset's budget delta).");
  for (size_t i = 0; i < n_rows; i++) {
    const char *l[] = {"dataset", rows[i].dataset, "job_id", rows[i].job, NULL};
    xf_prom_sample(&p, "xfed_dataset_epsilon", l, rows[i].eps);
  }
  xf_prom_family(&p, "xfed_dataset_releases_total", "counter",
                 "Updates a job released from a dataset under the site's privacy ledger.");
  for (size_t i = 0; i < n_rows; i++) {
    const char *l[] = {"dataset", rows[i].dataset, "job_id", rows[i].job, NULL};
    xf_prom_sample(&p, "xfed_dataset_releases_total", l, rows[i].releases);
  }
  xf_free(rows);
  resp->body = xf_prom_take(&p, &resp->body_len);
  if (!resp->body) {
    xf_http_reply_text(resp, 500, "out of memory while writing the metrics");
    return;
  }
  resp->content_type = XF_PROM_CONTENT_TYPE;
}

/* 200 while the loop runs and the site's database answers; 503 otherwise. */
static void on_health(void *ctx, const xf_http_request *req, xf_http_response *resp) {
  (void)req;
  daemon_t *d = ctx;
  xf_site_dataset *ds = NULL;
  size_t nds = 0;
  xf_errctx err = {0};
  bool db_ok = xf_site_registry_list(d->reg, &ds, &nds, &err) == XF_OK;
  if (db_ok) xf_site_dataset_list_free(ds, nds);
  bool ok = db_ok && !d->stopping;
  char body[256];
  int n = snprintf(body, sizeof(body),
                   "{\"status\": \"%s\", \"loop\": %s, \"database\": \"%s\", "
                   "\"coordinator\": \"%s\"}\n",
                   ok ? "ok" : "unavailable", d->stopping ? "false" : "true",
                   db_ok ? "ok" : "failing", session_open(d) ? "connected" : "not connected");
  resp->status = ok ? 200 : 503;
  resp->content_type = "application/json";
  resp->body = xf_malloc((size_t)n);
  if (resp->body) {
    memcpy(resp->body, body, (size_t)n);
    resp->body_len = (size_t)n;
  }
}

static xf_err metrics_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  if (!opts->metrics_host || !opts->metrics_host[0]) return XF_OK;
  xf_http_opts o = {.host = opts->metrics_host, .port = opts->metrics_port};
  XF_GUARD(xf_http_start(&d->loop, &o, &d->http, err));
  if (xf_http_route(d->http, "GET", "/metrics", on_metrics, d) != XF_OK ||
      xf_http_route(d->http, "GET", "/healthz", on_health, d) != XF_OK)
    return xf_fail(err, XF_EINTERNAL, "cannot route the metrics endpoints");
  int port = xf_http_port(d->http);
  if (opts->metrics_port_file && opts->metrics_port_file[0]) {
    char buf[16];
    int n = snprintf(buf, sizeof(buf), "%d\n", port);
    XF_GUARD(xf_file_write_atomic(opts->metrics_port_file, buf, (size_t)n, 0644, err));
  }
  XF_INFO("metrics_listening", "address=%s port=%d paths=\"/metrics /healthz\"",
          opts->metrics_host, port);
  return XF_OK;
}

static void metrics_stop(daemon_t *d) {
  xf_http_stop(d->http);
  d->http = NULL;
}
#else
/* Built without the HTTP server (-DXF_HTTP=OFF): `xfed-site run` refuses
 * --metrics before it starts, and a caller that sets it anyway is refused
 * here. */
static xf_err metrics_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err) {
  (void)d;
  XF_ENSURE(!opts->metrics_host || !opts->metrics_host[0], err, XF_EUNSUPPORTED,
            "--metrics: this xfed-site was " XF_HTTP_ABSENT);
  return XF_OK;
}

static void metrics_stop(daemon_t *d) { (void)d; }
#endif

xf_err xf_site_daemon_run(const xf_site_daemon_opts *opts, xf_errctx *err) {
  daemon_t *d = xf_calloc(1, sizeof(*d));
  XF_ENSURE(d, err, XF_ENOMEM, "cannot allocate the site daemon");
  xf_err rc = XF_OK;
  bool loop_ready = false;
  if ((rc = daemon_start(d, opts, err)) != XF_OK) goto out;
  if (uv_loop_init(&d->loop) != 0) {
    rc = xf_fail(err, XF_EIO, "cannot start the event loop");
    goto out;
  }
  loop_ready = true;
  uv_timer_init(&d->loop, &d->redial);
  d->redial.data = d;
  uv_signal_init(&d->loop, &d->sigterm);
  uv_signal_init(&d->loop, &d->sigint);
  uv_signal_init(&d->loop, &d->sighup);
  d->sigterm.data = d->sigint.data = d->sighup.data = d;
  uv_signal_start(&d->sigterm, on_signal, SIGTERM);
  uv_signal_start(&d->sigint, on_signal, SIGINT);
  uv_signal_start(&d->sighup, on_signal, SIGHUP);
  XF_INFO("site_starting", "site=%s region=%s coordinator=%s backend=%s threads=%d dir=%s",
          d->cfg.site, d->cfg.region, d->cfg.coordinator, xf_backend_name(d->backend),
          xf_backend_threads(d->backend), d->dir);
  if ((rc = metrics_start(d, opts, err)) != XF_OK) {
    daemon_stop(d, "none (the metrics endpoint could not start)");
    uv_run(&d->loop, UV_RUN_DEFAULT);
    goto out;
  }
  start_resolve(d);
  /* Configured, identity and backend checked, dialing: ready. A site that
   * waits for its coordinator is up; STATUS says whether a session is open. */
  xf_notify_start(&d->notify, &d->loop);
  xf_notify_ready("site %s: dialing %s", d->cfg.site, d->cfg.coordinator);
  uv_run(&d->loop, UV_RUN_DEFAULT);
  XF_INFO("site_stopped", "site=%s", d->cfg.site);
out:
  if (loop_ready) {
    /* Nothing is left on the loop once uv_run returns: the handles were
     * closed by daemon_stop and the worker handed its task back. */
    int lrc = uv_loop_close(&d->loop);
    if (lrc != 0) XF_WARN("loop_not_empty", "reason=\"%s\"", uv_strerror(lrc));
  }
  for (int i = 0; i < d->n_tasks; i++) task_free(d->tasks[i]);
  d->n_tasks = 0;
  cache_free(&d->cache);
  xf_backend_close(d->backend);
  xf_site_sa_free(d->sa);
  sa_identity_free(d);
  xf_site_registry_close(d->reg);
  xf_tls_free(d->tls);
  xf_free(d);
  return rc;
}
