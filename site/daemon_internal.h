/* SPDX-License-Identifier: Apache-2.0 */
/* The site daemon's files among themselves (site/daemon.h): the state
 * they share (the daemon, its tasks, queued replies, ignored model
 * streams and the dataset cache); then, under a banner naming each
 * defining file, that file's functions and nothing else
 * (tests/internal_header.sh checks it). Everything but training runs on
 * the loop thread. Internal to the daemon. */
#ifndef XF_SITE_DAEMON_INTERNAL_H
#define XF_SITE_DAEMON_INTERNAL_H

#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <uv.h>

#include "base/rng.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/seal.h"
#include "crypto/secagg_x509.h"
#include "data/dataset.h"
#include "http/http.h"
#include "job/jobspec.h"
#include "kernels/backend.h"
#include "net/conn.h"
#include "net/notify.h"
#include "net/session.h"
#include "net/tensor.h"
#include "privacy/plan.h"
#include "site/daemon.h"
#include "site/offer.h"
#include "site/registry.h"
#include "site/residency.h"
#include "site/siteagg.h"
#include "site/sitemachine.h"
#include "site/taskset.h"
#include "update/update.h"


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

/* ---- the state ----------------------------------------------------------------- */

typedef struct xf_site_daemon daemon_t;

/* One task: an accepted offer, from its model to the final TensorAck of its
 * update; the daemon's half of it. Which tasks the site holds and what
 * becomes of them is the task set's (site/taskset.h): entry is this task's
 * there (its phase, hold and go, order, deadline), NULL once the set let
 * it go; the set's entry points back here. job_id, round and attempt are
 * the offer's, as the entry's are. The worker owns the fields marked
 * (worker) while the task is on it (d->worker_task); the loop owns
 * everything else, and those fields too at any other time. */
typedef struct task {
  xf_site_task *entry;
  char job_id[JOB_ID_MAX];
  uint32_t round, attempt, model_round;
  bool evaluate_only;
  xf_digest model_digest;
  uint64_t model_stream_id; /* from the offer; 0 until a matching TensorBegin names it */
  xf_jobspec spec;
  xf_site_dataset dataset; /* the registry's record, read at the offer */
  size_t n_params;         /* the model's size for this dataset, from the offer's checks */
  uint64_t shuffle_seed;
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

  /* tasks: the set decides (site/taskset.h), the daemon performs */
  xf_site_tasks *set;
  bool performing; /* xf__site_perform is taking the set's actions */
  xf_site_sa *sa; /* this site's rounds of secure aggregation */
  task *worker_task; /* the task on the worker (a live one or an abandoned one) */
  /* The worker: one thread for the daemon's life, so that the per-thread
   * state of training (OpenBLAS's GEMM buffers, the allocator's arena) is
   * kept once, not once per thread of libuv's pool. worker_mu guards the
   * flags; worker_back wakes the loop when a task is done. */
  uv_thread_t worker_thread;
  uv_mutex_t worker_mu;
  uv_cond_t worker_cv;
  uv_async_t worker_back;
  bool worker_go, worker_done, worker_quit; /* (worker_mu) */
  bool worker_running;                      /* the thread was started, not yet joined */
  bool worker_closing;                      /* stopping: close once the task is back */
  data_cache cache;
  ignored_stream ignored[IGNORED_MAX];
  int next_ignored;

  /* /metrics and /healthz (NULL without --metrics), and the TLS bytes of
   * connections that have closed. */
  xf_http *http;
  uint64_t bytes_in_closed, bytes_out_closed;
  uint64_t sessions_opened;
};

/* ---- daemon.c: the session, dialing, offers and secure aggregation, start and stop ------ */
uint64_t xf__site_wall_ms(void);
double xf__site_mono_s(void);
const char *xf__site_logq(char *buf, size_t n, const char *s);
bool xf__site_session_open(const daemon_t *d);
bool xf__site_sa_mask_and_stream(daemon_t *d, task *t);
void xf__site_sa_advertise(daemon_t *d, const task *t);

/* ---- tasks.c: replies, the daemon's tasks and the set's actions -------------------------- */
void xf__site_send_error(daemon_t *d, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
void xf__site_send_accept(daemon_t *d, const task *t);
void xf__site_send_refusal(daemon_t *d, const char *job, uint32_t round, uint32_t attempt,
                           Xfed__TaskRefusal__Reason reason, const char *fmt, ...) XF_PRINTF(6, 7);
bool xf__site_flush_replies(daemon_t *d);
void xf__site_task_free(task *t);
task *xf__site_task_find(daemon_t *d, const char *job, uint32_t round, uint32_t attempt);
task *xf__site_task_of_job(daemon_t *d, const char *job);
void xf__site_ignore_stream(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round);
bool xf__site_stream_ignored(daemon_t *d, uint64_t stream_id, const char *job, uint32_t round);
void xf__site_task_drop(daemon_t *d, task *t, const char *why);
xf_err xf__site_stream_update(task *t, xf_errctx *err);
uint64_t xf__site_update_bytes(const task *t);
size_t xf__site_seal_context(const daemon_t *d, const task *t, char *buf, size_t cap);
bool xf__site_seal_key_changed(daemon_t *d, task *t, const uint8_t *pk);
void xf__site_update_stream_changed(daemon_t *d, task *t, uint64_t id);
void xf__site_perform(daemon_t *d);

/* ---- worker.c: the dataset and training, on the worker ---------------------------------- */
void xf__site_cache_free(data_cache *c);
bool xf__site_charge_ledger(daemon_t *d, task *t);
void xf__site_task_failed(daemon_t *d, task *t, bool tell);
/* The worker thread and the loop's handle for it: xf__site_worker_init once
 * the loop is ready; xf__site_worker_stop when the daemon stops (the handle
 * closes once the task on the worker, if any, is back); xf__site_worker_join
 * after the loop has run out. */
xf_err xf__site_worker_init(daemon_t *d, xf_errctx *err) XF_WARN_UNUSED;
void xf__site_worker_stop(daemon_t *d);
void xf__site_worker_join(daemon_t *d);
void xf__site_worker_start(daemon_t *d, task *t);

/* ---- streams.c: the report and update stream out, the model stream in ------------------- */
void xf__site_pump(daemon_t *d);
void xf__site_on_update_refused(daemon_t *d, uint64_t stream_id);
void xf__site_on_tensor_ack(daemon_t *d, const Xfed__TensorAck *a);
xf_err xf__site_model_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                           xf_errctx *ctx);
void xf__site_on_tensor_begin(daemon_t *d, const Xfed__TensorBegin *b);
void xf__site_on_tensor_chunk(daemon_t *d, const Xfed__TensorChunk *c);
void xf__site_on_tensor_end(daemon_t *d, const Xfed__TensorEnd *e);

/* ---- sitehttp.c: /metrics and /healthz -------------------------------------------------- */
xf_err xf__site_metrics_start(daemon_t *d, const xf_site_daemon_opts *opts, xf_errctx *err);
void xf__site_metrics_stop(daemon_t *d);

#endif
