/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of `xfed job`: the real binary, run as a researcher runs
 * it, against a fake coordinator in a thread of this test: a libuv loop that
 * listens on loopback with a real coordinator certificate of a federation
 * made here, runs the hello as the coordinator does (net/session.h), and
 * answers the CLI's requests with canned but well-formed replies, among
 * them a MODEL tensor stream of a real model file. Covers local spec
 * checks, submit/list/status/cancel, watch to done and to failure, metrics
 * as CSV, export as an xfed model file and as .npy (also across a dropped
 * connection), refusals (authorization: exit 1; policy: exit 3), and where
 * the CLI finds its coordinator and identity (flags, environment, profile). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "support.h"

#include "base/alloc.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "kernels/checkpoint.h"
#include "kernels/export.h"
#include "kernels/model.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

/* A run of xfed that takes longer than this is killed and reported. */
#define RUN_DEADLINE_S 60
/* Chunks of the model stream: small, so that one model takes many. */
#define MODEL_CHUNK 16384

/* ---- the fixture ---------------------------------------------------------------- */

static struct {
  char xfed[1024];
  char root[512];
  char fed[600];                 /* federation acme: coord, alice, carol, eu-berlin */
  char ca[700], crl[700];
  char alice_crt[700], alice_key[700]; /* researcher */
  char carol_crt[700], carol_key[700]; /* compliance */
  char site_crt[700], site_key[700];   /* a site: not for the CLI */
  char coordinator[64];          /* 127.0.0.1:PORT of the fake */
  uint8_t *model;                /* a real lenet5 model file */
  size_t model_len;
  float *params;
  size_t n_params;
} fx;

static void issue(xf_federation *fed, xf_pki_kind kind, const char *name, const char *region,
                  xf_pki_role role) {
  xf_pki_issue_opts o = {.kind = kind, .name = name, .region = region, .role = role};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) fail_msg("issue %s: %s", name, err.msg);
}

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = (size_t)n;
  return buf;
}

/* ---- the fake coordinator ---------------------------------------------------------- */

/* What the fake has seen and how it behaves; guarded by mu. */
typedef struct fake_state {
  int connects;         /* sessions that got to on_connect */
  int closes;           /* connections that ended, handshake or not */
  int requests;         /* application frames */
  int submits;
  char origin[256];     /* of the last JobSubmit */
  char *spec;           /* its spec_json (malloc) */
  int queries_7, queries_8; /* JobQuery of job 7 and 8, which move on with each */
  bool deny_all;        /* answer every request with Error(XF_EDENIED) */
  int busy;             /* refuse so many sessions with Refusal BUSY */
  bool drop_after_first_query; /* close the session after answering job 7's first query */
  int drop_after_chunks;  /* > 0: close a model stream's connection after so many chunks, once */
  int model_queries;
  uint32_t last_model_round; /* ModelQuery.round of the last query */
  uint64_t begin_ack_offset; /* where the client's ack of the last TensorBegin resumed */
} fake_state;

static struct {
  uv_loop_t loop;
  uv_async_t stop;
  xf_tls *tls;
  xf_listener *listener;
  pthread_t thread;
  pthread_mutex_t mu;
  fake_state st;
} fk;

/* A broken invariant in the fake's thread, where cmocka cannot fail a test. */
#define FK_CHECK(cond)                                                                      \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      fprintf(stderr, "fake coordinator: %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
      abort();                                                                              \
    }                                                                                       \
  } while (0)

/* One connection of the fake. */
typedef struct fconn {
  xf_conn *conn;
  xf_session session;
  struct fconn *next;
  /* a model stream */
  xf_tensor_sender *tx;
  xf_tensor_msg pending;
  bool has_pending, begin_acked;
  int chunks_sent;
  int drop_after;
} fconn;

static fconn *fk_conns;

static void fk_send(xf_conn *c, Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_conn_send(c, env, &err) != XF_OK) fprintf(stderr, "fake: send: %s\n", err.msg);
}

static void fk_send_jobs(xf_conn *c, Xfed__JobInfo **jobs, size_t n) {
  Xfed__JobList list = XFED__JOB_LIST__INIT;
  list.jobs = jobs;
  list.n_jobs = n;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_LIST;
  env.job_list = &list;
  fk_send(c, &env);
}

/* Job 7 runs three rounds over three queries; job 8 (record-level privacy:
 * its sites keep their train loss) fails on its second. Once a job is over
 * no attempt is open: its sites are those of its last committed round. */
static void job7(Xfed__JobInfo *j, int n) {
  xfed__job_info__init(j);
  j->job_id = "7";
  j->name = "fmnist-mlp";
  j->rounds = 3;
  j->created = 1700000000.0;
  j->updated = 1700000100.0;
  j->submitter = "spiffe://acme/user/alice/role/researcher";
  j->spec_json = "{\"name\": \"fmnist-mlp\", \"rounds\": 3}";
  j->target = 3;
  j->attempt = 1;
  j->test_accuracy = NAN;
  j->test_loss = NAN;
  if (n <= 1) {
    j->state = "running";
    j->round = 1;
    j->invited = 3;
    j->accepted = 2;
    j->reported = 1;
    j->bytes_up = 1000;
  } else if (n == 2) {
    j->state = "running";
    j->round = 2;
    j->rounds_committed = 1;
    j->last_invited = 3;
    j->last_reported = 3;
    j->invited = 3;
    j->accepted = 3;
    j->reported = 2;
    j->eval_round = 1;
    j->test_accuracy = 0.5;
    j->test_loss = 1.5;
    j->train_loss = 1.25;
    j->bytes_up = 60000;
    j->bytes_down = 90000;
  } else {
    j->state = "done";
    j->round = 4;
    j->rounds_committed = 3;
    j->last_invited = 3;
    j->last_reported = 3;
    j->eval_round = 3;
    j->test_accuracy = 0.87654;
    j->test_loss = 0.35;
    j->train_loss = 0.3;
    j->bytes_up = 123456;
    j->bytes_down = 234567;
    j->model_digest = "ab12";
  }
}

static void job8(Xfed__JobInfo *j, int n) {
  xfed__job_info__init(j);
  j->job_id = "8";
  j->name = "dp-run";
  j->rounds = 10;
  j->has_epsilon = true;
  j->epsilon = 1.5;
  j->test_accuracy = NAN;
  j->train_loss = NAN;
  j->train_loss_kept = true;
  j->created = 1700000200.0;
  j->rounds_committed = 1;
  j->last_invited = 4;
  j->last_reported = 3;
  if (n <= 1) {
    j->state = "running";
    j->round = 2;
    j->invited = 4;
    j->accepted = 4;
  } else {
    j->state = "failed";
    j->round = 2;
    j->message = "fewer than min_sites reported in 3 attempts of round 2";
  }
}

/* Job 9 ended with every evaluation refused: no accuracy, and why. */
static void job9(Xfed__JobInfo *j) {
  xfed__job_info__init(j);
  j->job_id = "9";
  j->name = "refused-evals";
  j->state = "done";
  j->rounds = 1;
  j->round = 2;
  j->rounds_committed = 1;
  j->test_accuracy = NAN;
  j->test_loss = NAN;
  j->train_loss = 0.7;
  j->bytes_up = 500;
  j->bytes_down = 900;
  j->accuracy_note = "no site's evaluation was accepted: 1 report refused (the newest: site "
                     "liar's evaluation report, test_accuracy nan must be a number from 0 to 1)";
}

/* The job's three rows, a page of one row at a time when the query asks
 * for pages (as the coordinator pages a long report): after the row the
 * cursor names, in the order they are kept. */
static void fk_metrics(xf_conn *c, const Xfed__MetricsQuery *q) {
  const char *job = q->job_id;
  Xfed__MetricsReport__Row r[3];
  Xfed__MetricsReport__Row *rows[3] = {&r[0], &r[1], &r[2]};
  for (int i = 0; i < 3; i++) xfed__metrics_report__row__init(&r[i]);
  /* Out of order on purpose: the CLI sorts by round, then site. */
  r[0].round = 2, r[0].site = "us-ohio", r[0].region = "us", r[0].has_train = true;
  r[0].train_loss = 0.25, r[0].has_test = true, r[0].test_loss = 0.5, r[0].test_accuracy = 0.8;
  r[0].samples = 1200, r[0].bytes_up = 4000, r[0].bytes_down = 8000;
  r[0].has_epsilon = true, r[0].epsilon = 1.5;
  r[1].round = 1, r[1].site = "eu-berlin", r[1].region = "eu", r[1].has_train = true;
  r[1].train_loss = 0.1, r[1].has_test = true, r[1].test_loss = 0.75, r[1].test_accuracy = 0.625;
  r[1].samples = 1000, r[1].bytes_up = 3000, r[1].bytes_down = 7000;
  r[2].round = 2, r[2].site = "eu-berlin", r[2].region = "eu", r[2].has_train = false;
  r[2].has_test = true, r[2].test_loss = 0.375, r[2].test_accuracy = 0.875;
  r[2].samples = 1000, r[2].bytes_up = 0, r[2].bytes_down = 7000;
  Xfed__MetricsReport m = XFED__METRICS_REPORT__INIT;
  m.job_id = (char *)job;
  m.rows = rows;
  m.n_rows = 3;
  if (q->limit) {
    size_t from = 0;
    const char *after = q->after_site ? q->after_site : "";
    if (q->after_round || *after) {
      while (from < 3 && !(r[from].round == q->after_round && !strcmp(r[from].site, after)))
        from++;
      from++;
    }
    m.rows = rows + (from < 3 ? from : 3);
    m.n_rows = from < 3 ? 1 : 0;
    m.more = from + 1 < 3;
  }
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS_REPORT;
  env.metrics_report = &m;
  fk_send(c, &env);
}

/* Sends what the model stream has ready until it must wait: for the ack of
 * TensorBegin, for on_drain, or for the final ack. */
static void fk_pump(fconn *fc) {
  while (fc->tx && fc->conn) {
    if (!fc->has_pending) {
      if (fc->drop_after > 0 && fc->chunks_sent >= fc->drop_after) {
        fc->drop_after = 0;
        xf_conn_close(fc->conn); /* the link drops mid-stream */
        return;
      }
      xf_err rc = xf_tensor_sender_next(fc->tx, &fc->pending);
      if (rc == XF_ENOENT) return;
      FK_CHECK(rc == XF_OK);
      fc->has_pending = true;
    }
    xf_err rc = xf_conn_send(fc->conn, &fc->pending.env, NULL);
    if (rc == XF_ERANGE) return; /* on_drain pumps again */
    FK_CHECK(rc == XF_OK);
    fc->has_pending = false;
    if (fc->pending.env.body_case == XFED__ENVELOPE__BODY_TENSOR_CHUNK) fc->chunks_sent++;
    if (fc->pending.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) return;
  }
}

static void fk_model(fconn *fc, const Xfed__ModelQuery *q) {
  if (strcmp(q->job_id, "7") != 0) {
    xf_session_send_error(fc->conn, XF_ENOENT, "job %s has no model yet", q->job_id);
    return;
  }
  uint32_t round = q->round ? q->round : 3;
  if (round > 3) {
    xf_session_send_error(fc->conn, XF_ERANGE, "job 7 has committed 3 rounds, not %u",
                          (unsigned)round);
    return;
  }
  xf_tensor_desc d = {.stream_id = 0x7000 + round, .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8, .element_count = fx.model_len,
                      .job_id = "7", .round = round};
  xf_tensor_sender_free(fc->tx);
  fc->tx = NULL;
  fc->has_pending = fc->begin_acked = false;
  fc->chunks_sent = 0;
  FK_CHECK(xf_tensor_sender_new(&d, fx.model, fx.model_len, MODEL_CHUNK, &fc->tx, NULL) == XF_OK);
  fk_pump(fc);
}

static void fk_ack(fconn *fc, const Xfed__TensorAck *ack) {
  if (!fc->tx) return;
  if (!fc->begin_acked) {
    fc->begin_acked = true;
    pthread_mutex_lock(&fk.mu);
    fk.st.begin_ack_offset = ack->next_offset;
    pthread_mutex_unlock(&fk.mu);
    FK_CHECK(xf_tensor_sender_resume(fc->tx, ack->next_offset, NULL) == XF_OK);
    fk_pump(fc);
    return;
  }
  if (ack->next_offset == fx.model_len) { /* delivered */
    xf_tensor_sender_free(fc->tx);
    fc->tx = NULL;
  }
}

static bool may_submit(xf_conn *c) {
  const xf_spiffe_id *p = xf_conn_peer(c);
  return p->role == XF_PKI_ROLE_RESEARCHER || p->role == XF_PKI_ROLE_ADMIN;
}

static void fk_request(fconn *fc, const Xfed__Envelope *env) {
  xf_conn *c = fc->conn;
  pthread_mutex_lock(&fk.mu);
  fake_state *st = &fk.st;
  st->requests++;
  bool deny = st->deny_all;
  bool drop = false;
  int n7 = 0, n8 = 0;
  if (env->body_case == XFED__ENVELOPE__BODY_JOB_QUERY) {
    if (strcmp(env->job_query->job_id, "7") == 0) n7 = ++st->queries_7;
    drop = n7 == 1 && st->drop_after_first_query;
    if (strcmp(env->job_query->job_id, "8") == 0) n8 = ++st->queries_8;
  }
  if (env->body_case == XFED__ENVELOPE__BODY_MODEL_QUERY) {
    st->model_queries++;
    st->last_model_round = env->model_query->round;
    fc->drop_after = st->drop_after_chunks;
    st->drop_after_chunks = 0;
  }
  if (env->body_case == XFED__ENVELOPE__BODY_JOB_SUBMIT) {
    st->submits++;
    snprintf(st->origin, sizeof(st->origin), "%s", env->job_submit->origin);
    free(st->spec);
    st->spec = strdup(env->job_submit->spec_json);
  }
  pthread_mutex_unlock(&fk.mu);

  if (deny && env->body_case != XFED__ENVELOPE__BODY_TENSOR_ACK) {
    xf_session_send_error(c, XF_EDENIED, "%s is for researchers and admins",
                          xf_envelope_body_name(env));
    return;
  }
  Xfed__JobInfo a, b;
  Xfed__JobInfo *jobs[2] = {&a, &b};
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_JOB_SUBMIT: {
    if (!may_submit(c)) {
      xf_session_send_error(c, XF_EDENIED, "submitting jobs needs the role researcher or admin");
      return;
    }
    json_t *spec = json_loads(env->job_submit->spec_json, 0, NULL);
    const char *name = json_string_value(json_object_get(spec, "name"));
    if (name && strcmp(name, "forbidden") == 0) {
      xf_session_send_error(c, XF_EDENIED, "policy v3, rule 2: data of class restricted may "
                            "not leave region eu; site eu-berlin is not eligible");
    } else {
      job7(&a, 1);
      a.name = (char *)(name ? name : "?");
      a.state = "queued";
      a.round = 0;
      fk_send_jobs(c, jobs, 1);
    }
    json_decref(spec);
    return;
  }
  case XFED__ENVELOPE__BODY_JOB_QUERY: {
    const char *id = env->job_query->job_id;
    if (!*id) {
      job7(&a, 2);
      job8(&b, 2);
      fk_send_jobs(c, jobs, 2);
    } else if (strcmp(id, "7") == 0) {
      job7(&a, n7);
      fk_send_jobs(c, jobs, 1);
      if (drop) xf_conn_close(c); /* as a coordinator that restarts */
    } else if (strcmp(id, "8") == 0) {
      job8(&a, n8);
      fk_send_jobs(c, jobs, 1);
    } else if (strcmp(id, "9") == 0) {
      job9(&a);
      fk_send_jobs(c, jobs, 1);
    } else {
      xf_session_send_error(c, XF_ENOENT, "no job %s", id);
    }
    return;
  }
  case XFED__ENVELOPE__BODY_JOB_CANCEL:
    if (!may_submit(c)) {
      xf_session_send_error(c, XF_EDENIED, "cancelling jobs needs the role researcher or admin");
      return;
    }
    job7(&a, 2);
    a.state = "cancelled";
    fk_send_jobs(c, jobs, 1);
    return;
  case XFED__ENVELOPE__BODY_METRICS_QUERY: fk_metrics(c, env->metrics_query); return;
  case XFED__ENVELOPE__BODY_MODEL_QUERY: fk_model(fc, env->model_query); return;
  case XFED__ENVELOPE__BODY_TENSOR_ACK: fk_ack(fc, env->tensor_ack); return;
  default:
    xf_session_send_error(c, XF_EUNSUPPORTED, "%s is not a request", xf_envelope_body_name(env));
    return;
  }
}

static xf_err fk_on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  pthread_mutex_lock(&fk.mu);
  fk.st.connects++;
  bool busy = fk.st.busy > 0;
  if (busy) fk.st.busy--;
  pthread_mutex_unlock(&fk.mu);
  if (busy) {
    xf_session_refuse(c, XFED__REFUSAL__REASON__BUSY, "too many sessions; retry later");
    return XF_OK;
  }
  if (peer->kind != XF_PKI_KIND_USER) {
    xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED, "role cli needs a user "
                      "certificate");
    return XF_OK;
  }
  fconn *fc = calloc(1, sizeof(*fc));
  FK_CHECK(fc != NULL);
  fc->conn = c;
  fc->next = fk_conns;
  fk_conns = fc;
  xf_conn_set_user(c, fc);
  return xf_session_start(&fc->session, c, "coordinator", 0, NULL);
}

static void fk_on_frame(xf_conn *c, const Xfed__Envelope *env) {
  fconn *fc = xf_conn_user(c);
  if (!fc) return;
  xf_session_event ev;
  if (xf_session_on_frame(&fc->session, c, env, &ev, NULL) != XF_OK) {
    xf_conn_close(c);
    return;
  }
  if (ev == XF_SESSION_FRAME) fk_request(fc, env);
}

static void fk_on_drain(xf_conn *c) {
  fconn *fc = xf_conn_user(c);
  if (fc) fk_pump(fc);
}

static void fk_on_close(xf_conn *c, const xf_conn_reason *why) {
  (void)why;
  pthread_mutex_lock(&fk.mu);
  fk.st.closes++;
  pthread_mutex_unlock(&fk.mu);
  fconn *fc = xf_conn_user(c);
  if (!fc) return;
  for (fconn **p = &fk_conns; *p; p = &(*p)->next)
    if (*p == fc) {
      *p = fc->next;
      break;
    }
  xf_tensor_sender_free(fc->tx);
  free(fc);
}

static void fk_on_stop(uv_async_t *a) {
  xf_listener_close(fk.listener, NULL);
  for (fconn *fc = fk_conns; fc; fc = fc->next) xf_conn_close(fc->conn);
  uv_close((uv_handle_t *)a, NULL);
}

static void *fk_main(void *arg) {
  (void)arg;
  uv_run(&fk.loop, UV_RUN_DEFAULT);
  return NULL;
}

static int fake_start(void) {
  char cert[700], key[700];
  snprintf(cert, sizeof(cert), "%s/issued/coord.crt", fx.fed);
  snprintf(key, sizeof(key), "%s/issued/coord.key", fx.fed);
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = fx.ca, .crl_path = fx.crl};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tls_new(&cfg, &fk.tls, &err) != XF_OK) {
    fprintf(stderr, "fake: tls: %s\n", err.msg);
    return -1;
  }
  if (uv_loop_init(&fk.loop) != 0) return -1;
  uv_async_init(&fk.loop, &fk.stop, fk_on_stop);
  pthread_mutex_init(&fk.mu, NULL);
  xf_conn_opts o = {.on_connect = fk_on_connect, .on_frame = fk_on_frame,
                    .on_drain = fk_on_drain, .on_close = fk_on_close};
  if (xf_listen(&fk.loop, fk.tls, "127.0.0.1", 0, &o, &fk.listener, &err) != XF_OK) {
    fprintf(stderr, "fake: listen: %s\n", err.msg);
    return -1;
  }
  snprintf(fx.coordinator, sizeof(fx.coordinator), "127.0.0.1:%d",
           xf_listener_port(fk.listener));
  return pthread_create(&fk.thread, NULL, fk_main, NULL) == 0 ? 0 : -1;
}

static void fake_stop(void) {
  uv_async_send(&fk.stop);
  pthread_join(fk.thread, NULL);
  uv_run(&fk.loop, UV_RUN_DEFAULT);
  (void)uv_loop_close(&fk.loop);
  xf_tls_free(fk.tls);
  pthread_mutex_destroy(&fk.mu);
  free(fk.st.spec);
}

/* Resets the fake between tests; the thread keeps running. */
static void fake_reset(void) {
  pthread_mutex_lock(&fk.mu);
  free(fk.st.spec);
  memset(&fk.st, 0, sizeof(fk.st));
  pthread_mutex_unlock(&fk.mu);
}

static fake_state fake_seen(void) {
  /* Connections end a moment after the CLI exits: give them that moment. */
  usleep(100 * 1000);
  pthread_mutex_lock(&fk.mu);
  fake_state s = fk.st;
  s.spec = NULL;
  pthread_mutex_unlock(&fk.mu);
  return s;
}

/* ---- group setup ---------------------------------------------------------------------- */

static int make_model(void) {
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5, .in_h = 28, .in_w = 28,
                     .in_c = 1, .classes = 10};
  xf_model *m = NULL;
  if (xf_model_create(&s, &m, NULL) != XF_OK) return -1;
  fx.n_params = xf_model_num_params(m);
  fx.params = xf_malloc(fx.n_params * sizeof(float));
  if (!fx.params) return -1;
  xf_model_init_params(m, 7, fx.params);
  xf_err rc = xf_checkpoint_encode(m, fx.params, &fx.model, &fx.model_len, NULL);
  xf_model_free(m);
  return rc == XF_OK ? 0 : -1;
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_cli_job: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.xfed, sizeof(fx.xfed), "%s/cli/xfed", build);
  if (access(fx.xfed, X_OK) != 0) {
    fprintf(stderr, "test_cli_job: %s is not an executable: build the xfed target\n", fx.xfed);
    return -1;
  }
  if (xf_crypto_init() != XF_OK) return -1;
  if (xf_test_mkdtemp(fx.root, sizeof(fx.root), "cli-job") != 0) return -1;
  snprintf(fx.fed, sizeof(fx.fed), "%s/fed", fx.root);
  xf_federation *fed = NULL;
  if (xf_federation_init(fx.fed, "acme", 0, &fed, NULL) != XF_OK) return -1;
  issue(fed, XF_PKI_KIND_COORDINATOR, "coord", NULL, XF_PKI_ROLE_NONE);
  issue(fed, XF_PKI_KIND_USER, "alice", NULL, XF_PKI_ROLE_RESEARCHER);
  issue(fed, XF_PKI_KIND_USER, "carol", NULL, XF_PKI_ROLE_COMPLIANCE);
  issue(fed, XF_PKI_KIND_SITE, "eu-berlin", "eu", XF_PKI_ROLE_NONE);
  xf_federation_close(fed);
  snprintf(fx.ca, sizeof(fx.ca), "%s/ca.crt", fx.fed);
  snprintf(fx.crl, sizeof(fx.crl), "%s/crl.pem", fx.fed);
  snprintf(fx.alice_crt, sizeof(fx.alice_crt), "%s/issued/alice.crt", fx.fed);
  snprintf(fx.alice_key, sizeof(fx.alice_key), "%s/issued/alice.key", fx.fed);
  snprintf(fx.carol_crt, sizeof(fx.carol_crt), "%s/issued/carol.crt", fx.fed);
  snprintf(fx.carol_key, sizeof(fx.carol_key), "%s/issued/carol.key", fx.fed);
  snprintf(fx.site_crt, sizeof(fx.site_crt), "%s/issued/eu-berlin.crt", fx.fed);
  snprintf(fx.site_key, sizeof(fx.site_key), "%s/issued/eu-berlin.key", fx.fed);
  if (make_model() != 0) return -1;
  return fake_start();
}

static int group_teardown(void **state) {
  (void)state;
  fake_stop();
  xf_free(fx.model);
  xf_free(fx.params);
  xf_test_remove_tree(fx.root);
  return 0;
}

static int test_setup(void **state) {
  (void)state;
  fake_reset();
  return 0;
}

/* ---- running xfed ------------------------------------------------------------------------ */

typedef xf_test_run run;

/* The child's environment: nothing of ours (no XFED_* of the machine running
 * the test), HOME a scratch directory without a profile, and the settings
 * given as "NAME=VALUE" strings. */
typedef struct child_env {
  char *vars[16];
  char store[16][1024];
  int n;
} child_env;

static void env_add(child_env *e, const char *fmt, ...) XF_PRINTF(2, 3);
static void env_add(child_env *e, const char *fmt, ...) {
  assert_true(e->n < 15);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->store[e->n], sizeof(e->store[e->n]), fmt, ap);
  va_end(ap);
  e->vars[e->n] = e->store[e->n];
  e->vars[++e->n] = NULL;
}

/* A bare environment with HOME at root/home-NAME (made here). */
static void env_bare(child_env *e, const char *home) {
  memset(e, 0, sizeof(*e));
  char dir[700];
  snprintf(dir, sizeof(dir), "%s/home-%s", fx.root, home);
  mkdir(dir, 0700);
  env_add(e, "HOME=%s", dir);
  env_add(e, "PATH=/usr/bin:/bin");
  env_add(e, "XF_LOG_LEVEL=error");
  const char *tmp = getenv("TMPDIR");
  if (tmp && *tmp) env_add(e, "TMPDIR=%s", tmp);
}

/* A researcher's (alice) or compliance officer's (carol) environment with
 * every XFED_* variable pointing at the fake. */
static void env_user(child_env *e, const char *who) {
  env_bare(e, who);
  bool alice = strcmp(who, "alice") == 0;
  env_add(e, "XFED_COORDINATOR=%s", fx.coordinator);
  env_add(e, "XFED_CERT=%s", alice ? fx.alice_crt : fx.carol_crt);
  env_add(e, "XFED_KEY=%s", alice ? fx.alice_key : fx.carol_key);
  env_add(e, "XFED_CA=%s", fx.ca);
  env_add(e, "XFED_CRL=%s", fx.crl);
}

static void xfed(run *r, const child_env *e, const char *cwd, const char *arg, ...) {
  xf_test_exec_opts o = {.path = fx.xfed, .env = e->vars, .cwd = cwd,
                         .deadline_s = RUN_DEADLINE_S};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
}

/* XF_TEST_SHOW=1 in the environment shows every run, to read the output. */
static void expect(const run *r, int status, const char *out_has, const char *err_has) {
  if (getenv("XF_TEST_SHOW")) xf_test_run_show(r);
  if (r->status != status || (out_has && !strstr(r->out, out_has)) ||
      (err_has && !strstr(r->err, err_has))) {
    xf_test_run_show(r);
    fail_msg("%s: expected exit %d%s%s%s%s", r->line, status, out_has ? ", stdout with " : "",
             out_has ? out_has : "", err_has ? ", stderr with " : "", err_has ? err_has : "");
  }
}

static json_t *out_json(const run *r) {
  json_error_t je;
  json_t *j = json_loads(r->out, 0, &je);
  if (!json_is_object(j)) {
    xf_test_run_show(r);
    fail_msg("%s: stdout is not one JSON object (%s)", r->line, je.text);
  }
  return j;
}

static run *new_run(void) {
  run *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  return r;
}

static void free_run(run *r) {
  xf_test_run_free(r);
  free(r);
}

static void scratch(char *dir, size_t n, const char *name) {
  snprintf(dir, n, "%s/%s", fx.root, name);
  assert_int_equal(mkdir(dir, 0700), 0);
}

static const char *valid_spec =
    "{\n"
    "  \"name\": \"fmnist-mlp\",\n"
    "  \"model\": {\"arch\": \"mlp\", \"hidden\": [200, 200]},\n"
    "  \"data\": {\"dataset\": \"fmnist\", \"tags\": [\"fmnist\"]},\n"
    "  \"rounds\": 3,\n"
    "  \"min_sites\": 2,\n"
    "  \"seed\": 42\n"
    "}\n";

/* ---- tests --------------------------------------------------------------------------------- */

static void help_lists_the_job_verbs_and_the_connection_flags(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_bare(&e, "help");
  xfed(r, &e, NULL, "job", "--help", NULL);
  expect(r, 0, "submit", NULL);
  static const char *const verbs[] = {"status",  "list",   "watch", "cancel",
                                      "metrics", "export", "report"};
  for (size_t i = 0; i < 7; i++) assert_non_null(strstr(r->out, verbs[i]));
  xfed(r, &e, NULL, "job", "export", "--help", NULL);
  expect(r, 0, "--coordinator HOST:PORT", NULL);
  assert_non_null(strstr(r->out, "XFED_PROFILE"));
  assert_non_null(strstr(r->out, "'<f4'"));
  free_run(r);
}

static void submit_of_an_invalid_spec_fails_locally_naming_the_field(void **state) {
  (void)state;
  char dir[600], spec[700];
  scratch(dir, sizeof(dir), "invalid");
  snprintf(spec, sizeof(spec), "%s/job.json", dir);
  assert_int_equal(write_file(spec, "{\"name\": \"x\", \"model\": {\"arch\": \"logreg\"},\n"
                                    " \"data\": {\"dataset\": \"d\"}, \"rounds\": 0}\n"),
                   0);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "submit", spec, NULL);
  expect(r, 1, NULL, "rounds");
  assert_non_null(strstr(r->err, spec));
  /* A declared layer out of its range: the field names the layer. */
  assert_int_equal(write_file(spec, "{\"name\": \"x\", \"model\": {\"layers\": [{\"kind\": "
                                    "\"conv2d\", \"filters\": 4, \"kernel\": 65}]},\n"
                                    " \"data\": {\"dataset\": \"d\"}, \"rounds\": 1}\n"),
                   0);
  xfed(r, &e, NULL, "job", "submit", spec, NULL);
  expect(r, 1, NULL, "model.layers[0].kernel");
  /* A missing file is refused the same way. */
  xfed(r, &e, dir, "job", "submit", "nowhere.json", NULL);
  expect(r, 1, NULL, "nowhere.json");
  fake_state s = fake_seen();
  assert_int_equal(s.connects, 0);
  assert_int_equal(s.closes, 0);
  free_run(r);
}

static void submit_list_status_cancel_round_trip(void **state) {
  (void)state;
  char dir[600], spec[700];
  scratch(dir, sizeof(dir), "roundtrip");
  snprintf(spec, sizeof(spec), "%s/job.json", dir);
  assert_int_equal(write_file(spec, valid_spec), 0);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");

  xfed(r, &e, dir, "job", "submit", "job.json", NULL);
  expect(r, 0, NULL, "job 7 'fmnist-mlp' is queued");
  assert_string_equal(r->out, "7\n");
  pthread_mutex_lock(&fk.mu);
  assert_string_equal(fk.st.origin, "job.json");
  assert_non_null(fk.st.spec);
  assert_string_equal(fk.st.spec, valid_spec); /* the text as written */
  pthread_mutex_unlock(&fk.mu);

  xfed(r, &e, dir, "job", "submit", "job.json", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  assert_string_equal(json_string_value(json_object_get(j, "job_id")), "7");
  assert_string_equal(json_string_value(json_object_get(j, "state")), "queued");
  json_decref(j);

  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 0, "fmnist-mlp", NULL);
  assert_non_null(strstr(r->out, "ID"));
  assert_non_null(strstr(r->out, "ACCURACY"));
  assert_non_null(strstr(r->out, "2/3")); /* job 7: round 2 of 3, 2 of 3 sites */
  assert_non_null(strstr(r->out, "0.5000"));
  assert_non_null(strstr(r->out, "dp-run"));
  assert_non_null(strstr(r->out, "failed"));
  assert_non_null(strstr(r->out, "2023-11-14T22:13:20Z"));

  xfed(r, &e, NULL, "job", "list", "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  json_t *jobs = json_object_get(j, "jobs");
  assert_int_equal(json_array_size(jobs), 2);
  json_t *j8 = json_array_get(jobs, 1);
  assert_string_equal(json_string_value(json_object_get(j8, "state")), "failed");
  assert_true(json_is_null(json_object_get(j8, "test_accuracy")));
  assert_true(json_real_value(json_object_get(j8, "epsilon")) == 1.5);
  json_decref(j);

  xfed(r, &e, NULL, "job", "status", "7", NULL);
  expect(r, 0, "fmnist-mlp", NULL);
  assert_non_null(strstr(r->out, "running"));
  assert_non_null(strstr(r->out, "epsilon     none"));
  xfed(r, &e, NULL, "job", "status", "7", "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  assert_string_equal(json_string_value(json_object_get(j, "submitter")),
                      "spiffe://acme/user/alice/role/researcher");
  assert_true(json_is_object(json_object_get(j, "spec")));
  assert_true(json_is_null(json_object_get(j, "epsilon")));
  json_decref(j);
  xfed(r, &e, NULL, "job", "status", "404", NULL);
  expect(r, 1, NULL, "no job 404");

  xfed(r, &e, NULL, "job", "cancel", "7", NULL);
  expect(r, 0, "cancelled", NULL);

  fake_state s = fake_seen();
  assert_int_equal(s.submits, 2);
  /* One session per command, each closed: nothing is left open. */
  assert_int_equal(s.connects, 8);
  assert_int_equal(s.closes, 8);
  free_run(r);
}

static void watch_follows_a_job_until_done_and_sums_it_up(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "watch", "7", "--interval", "0.05", NULL);
  expect(r, 0, NULL, "round 1/3");
  assert_string_equal(r->out, "final accuracy=0.8765 rounds=3 epsilon=none uplink_bytes=123456\n");
  /* Not a terminal: one line per change, the first with no figures yet;
   * the open attempt's sites, then, once done, the last round's. */
  assert_non_null(
      strstr(r->err, "round 1/3  sites 3 invited, 2 accepted, 1 reported  train loss -  accuracy -"));
  assert_non_null(strstr(r->err, "round 2/3  sites 3 invited, 3 accepted, 2 reported  "
                                 "train loss 1.2500  accuracy 0.5000"));
  assert_non_null(strstr(r->err, "round 3/3  sites 3 invited, 3 reported in round 3  "
                                 "train loss 0.3000  accuracy 0.8765"));
  assert_non_null(strstr(r->err, "done"));
  fake_state s = fake_seen();
  assert_int_equal(s.queries_7, 3);
  assert_int_equal(s.connects, 1);

  /* A job that fails ends the watch with exit 1 and its reason. */
  xfed(r, &e, NULL, "job", "watch", "8", "--interval", "0.05", NULL);
  expect(r, 1, NULL, "fewer than min_sites");
  assert_non_null(strstr(r->err, "epsilon 1.5"));
  /* Record-level privacy: the train loss stays at the sites, and says so. */
  assert_non_null(strstr(r->err, "round 2/10  sites 4 invited, 4 accepted, 0 reported  "
                                 "train loss kept at the sites  accuracy -"));
  assert_non_null(strstr(r->err, "round 2/10  sites 4 invited, 3 reported in round 1  "
                                 "train loss kept at the sites"));
  assert_string_equal(r->out, "");
  free_run(r);
}

static void status_gives_the_open_attempts_sites_then_the_last_rounds(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "status", "8", NULL);
  expect(r, 0, "sites       4 invited, 4 accepted, 0 reported (attempt", NULL);
  assert_non_null(strstr(r->out, "train loss  kept at the sites\n"));
  xfed(r, &e, NULL, "job", "status", "8", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  assert_int_equal(json_integer_value(json_object_get(j, "last_invited")), 4);
  assert_int_equal(json_integer_value(json_object_get(j, "last_reported")), 3);
  assert_true(json_is_true(json_object_get(j, "train_loss_kept")));
  assert_true(json_is_null(json_object_get(j, "train_loss")));
  json_decref(j);
  /* Failed: no attempt is open, the last committed round's sites are shown. */
  xfed(r, &e, NULL, "job", "status", "8", NULL);
  expect(r, 0, "state       failed", NULL);
  assert_non_null(strstr(r->out, "sites       4 invited, 3 reported in round 1 (counted in "
                                 "sites)\n"));
  /* list: the same counts, reported of invited. */
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 0, NULL, NULL);
  const char *row8 = strstr(r->out, "\n8 ");
  assert_non_null(row8);
  assert_non_null(strstr(row8, " 3/4 "));
  free_run(r);
}

/* A job whose every evaluation was refused has no accuracy: "none", as
 * epsilon=none, never "nan" (which reads as a NaN accepted), and status
 * says why. */
static void job_without_an_accepted_evaluation_says_none_and_why(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "watch", "9", "--interval", "0.05", NULL);
  expect(r, 0, NULL, NULL);
  assert_string_equal(r->out, "final accuracy=none rounds=1 epsilon=none uplink_bytes=500\n");
  xfed(r, &e, NULL, "job", "status", "9", NULL);
  expect(r, 0, "accuracy    none: no site's evaluation was accepted: 1 report refused", NULL);
  assert_null(strstr(r->out, "nan\n"));
  xfed(r, &e, NULL, "job", "status", "9", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = json_loads(r->out, 0, NULL);
  assert_non_null(j);
  assert_true(json_is_null(json_object_get(j, "test_accuracy")));
  assert_non_null(strstr(json_string_value(json_object_get(j, "accuracy_note")), "refused"));
  json_decref(j);
  free_run(r);
}

static void watch_dials_again_after_the_connection_drops(void **state) {
  (void)state;
  pthread_mutex_lock(&fk.mu);
  fk.st.drop_after_first_query = true;
  pthread_mutex_unlock(&fk.mu);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "watch", "7", "--interval", "0.05", NULL);
  expect(r, 0, "final accuracy=0.8765", "reconnecting");
  assert_non_null(strstr(r->err, "reconnected"));
  fake_state s = fake_seen();
  assert_int_equal(s.connects, 2);
  assert_int_equal(s.queries_7, 3);
  free_run(r);
}

static void submit_wait_follows_the_new_job(void **state) {
  (void)state;
  char dir[600], spec[700];
  scratch(dir, sizeof(dir), "wait");
  snprintf(spec, sizeof(spec), "%s/job.json", dir);
  assert_int_equal(write_file(spec, valid_spec), 0);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "submit", spec, "--wait", "--interval", "0.05", NULL);
  expect(r, 0, "7\nfinal accuracy=0.8765 rounds=3 epsilon=none uplink_bytes=123456\n", NULL);
  free_run(r);
}

static void metrics_csv_is_rfc4180_with_a_header(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "metrics", "7", "--csv", NULL);
  expect(r, 0, NULL, NULL);
  assert_string_equal(
      r->out,
      "round,site,region,train_loss,test_loss,test_accuracy,samples,bytes_up,bytes_down,"
      "epsilon\r\n"
      "1,eu-berlin,eu,0.1,0.75,0.625,1000,3000,7000,\r\n"
      "2,eu-berlin,eu,,0.375,0.875,1000,0,7000,\r\n"
      "2,us-ohio,us,0.25,0.5,0.8,1200,4000,8000,1.5\r\n");
  xfed(r, &e, NULL, "job", "metrics", "7", NULL);
  expect(r, 0, "TRAIN_LOSS", NULL);
  assert_non_null(strstr(r->out, "us-ohio"));
  assert_non_null(strstr(r->out, "0.8750"));
  xfed(r, &e, NULL, "job", "metrics", "7", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  json_t *rows = json_object_get(j, "rows");
  assert_int_equal(json_array_size(rows), 3);
  assert_true(json_is_null(json_object_get(json_array_get(rows, 1), "train_loss")));
  json_decref(j);
  xfed(r, &e, NULL, "job", "metrics", "7", "--csv", "--json", NULL);
  expect(r, 2, NULL, "exclude");
  free_run(r);
}

/* `job report` draws the rows metrics shows: a PNG and an SVG of the size
 * asked; a --format that disagrees with the extension, or a file without
 * one, is a usage error before the coordinator is asked. */
static void report_draws_the_metrics_as_png_and_svg(void **state) {
  (void)state;
#ifndef XF_HAVE_REPORT
  /* Left out of this build (-DXF_REPORT=OFF); test_features checks the refusal. */
  skip();
#endif
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  char d[1024], png[1100], svg[1100], bare[1100];
  scratch(d, sizeof(d), "report");
  snprintf(png, sizeof(png), "%s/job7.png", d);
  snprintf(svg, sizeof(svg), "%s/job7.svg", d);
  snprintf(bare, sizeof(bare), "%s/job7", d);
  xfed(r, &e, NULL, "job", "report", "7", "--out", png, "--size", "800x600", NULL);
  expect(r, 0, "wrote", NULL);
  assert_non_null(strstr(r->out, "2 rounds"));
  size_t len = 0;
  uint8_t *b = read_file(png, &len);
  assert_non_null(b);
  assert_true(len > 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0);
  /* IHDR: width and height, big-endian, at bytes 16 and 20. */
  assert_int_equal((b[16] << 24 | b[17] << 16 | b[18] << 8 | b[19]), 800);
  assert_int_equal((b[20] << 24 | b[21] << 16 | b[22] << 8 | b[23]), 600);
  free(b);
  xfed(r, &e, NULL, "job", "report", "7", "--out", bare, "--format", "svg", "--json", NULL);
  expect(r, 0, "\"format\": \"svg\"", NULL);
  b = read_file(bare, &len);
  assert_non_null(b);
  assert_non_null(strstr((const char *)b, "<svg"));
  free(b);
  xfed(r, &e, NULL, "job", "report", "7", "--out", svg, "--format", "pdf", NULL);
  expect(r, 2, NULL, "disagrees");
  xfed(r, &e, NULL, "job", "report", "7", "--out", bare, NULL);
  expect(r, 2, NULL, ".png, .svg or .pdf");
  xfed(r, &e, NULL, "job", "report", "7", "--out", png, "--size", "20x20", NULL);
  expect(r, 2, NULL, "--size");
  free_run(r);
}

/* Checks a .npy written by export: header, then float data equal to the
 * model's parameters; and its sidecar's layer table. */
static void check_npy(const char *path) {
  size_t len = 0;
  uint8_t *b = read_file(path, &len);
  assert_non_null(b);
  assert_memory_equal(b, "\x93NUMPY\x01\x00", 8);
  size_t hl = (size_t)b[8] | (size_t)b[9] << 8;
  size_t data = 10 + hl;
  assert_int_equal(data % 64, 0);
  assert_int_equal(b[data - 1], '\n');
  char header[256];
  assert_true(hl < sizeof(header));
  memcpy(header, b + 10, hl);
  header[hl] = '\0';
  char want[128];
  snprintf(want, sizeof(want), "{'descr': '<f4', 'fortran_order': False, 'shape': (%zu,), }",
           fx.n_params);
  assert_memory_equal(header, want, strlen(want));
  assert_int_equal(len, data + fx.n_params * 4);
  assert_memory_equal(b + data, fx.params, fx.n_params * 4); /* little-endian host */
  free(b);

  char side[800];
  snprintf(side, sizeof(side), "%s.json", path);
  json_error_t je;
  json_t *j = json_load_file(side, 0, &je);
  assert_non_null(j);
  assert_int_equal(json_integer_value(json_object_get(j, "params")), (json_int_t)fx.n_params);
  assert_string_equal(json_string_value(json_object_get(j, "arch")), "cnn");
  json_t *layers = json_object_get(j, "layers");
  json_t *conv1 = json_array_get(layers, 0);
  assert_string_equal(json_string_value(json_object_get(conv1, "name")), "conv1.weight");
  json_t *shape = json_object_get(conv1, "shape");
  assert_int_equal(json_integer_value(json_array_get(shape, 0)), 6);
  assert_int_equal(json_integer_value(json_array_get(shape, 1)), 5);
  assert_int_equal(json_integer_value(json_array_get(shape, 3)), 1);
  /* The entries tile the vector: each starts where the one before ended. */
  json_int_t next = 0;
  for (size_t i = 0; i < json_array_size(layers); i++) {
    json_t *l = json_array_get(layers, i);
    json_int_t count = 1;
    json_t *dim;
    size_t k;
    json_array_foreach(json_object_get(l, "shape"), k, dim) count *= json_integer_value(dim);
    assert_int_equal(json_integer_value(json_object_get(l, "offset")), next);
    assert_int_equal(json_integer_value(json_object_get(l, "count")), count);
    next += count;
  }
  assert_int_equal(next, (json_int_t)fx.n_params);
  json_decref(j);
}

static void export_writes_the_model_file_and_npy(void **state) {
  (void)state;
  char dir[600], path[700];
  scratch(dir, sizeof(dir), "export");
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");

  xfed(r, &e, dir, "job", "export", "7", "--out", "model.xfm", NULL);
  expect(r, 0, "wrote model.xfm (xfed)", NULL);
  snprintf(path, sizeof(path), "%s/model.xfm", dir);
  size_t len = 0;
  uint8_t *b = read_file(path, &len);
  assert_non_null(b);
  assert_int_equal(len, fx.model_len);
  assert_memory_equal(b, fx.model, len);
  free(b);

  xfed(r, &e, dir, "job", "export", "7", "--round", "2", "--out", "model.npy", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  assert_string_equal(json_string_value(json_object_get(j, "format")), "npy");
  assert_int_equal(json_integer_value(json_object_get(j, "round")), 2);
  json_decref(j);
  snprintf(path, sizeof(path), "%s/model.npy", dir);
  check_npy(path);
  fake_state s = fake_seen();
  assert_int_equal(s.last_model_round, 2);

  /* --format wins over the extension. */
  xfed(r, &e, dir, "job", "export", "7", "--out", "vector.bin", "--format", "npy", NULL);
  expect(r, 0, "(npy)", NULL);
  snprintf(path, sizeof(path), "%s/vector.bin", dir);
  check_npy(path);

  xfed(r, &e, dir, "job", "export", "9", "--out", "none.xfm", NULL);
  expect(r, 1, NULL, "job 9 has no model yet");
  snprintf(path, sizeof(path), "%s/none.xfm", dir);
  assert_int_not_equal(access(path, F_OK), 0);
  xfed(r, &e, dir, "job", "export", "7", NULL);
  expect(r, 2, NULL, "--out");
  free_run(r);
}

/* The bytes the exporter makes of the fixture's model in format f. */
static uint8_t *exported(xf_export_format f, size_t *len) {
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5, .in_h = 28, .in_w = 28,
                     .in_c = 1, .classes = 10};
  xf_model *m = NULL;
  uint8_t *out = NULL;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  if (f == XF_EXPORT_ONNX) assert_int_equal(xf_export_onnx(m, fx.params, NULL, &out, len, NULL), XF_OK);
  else assert_int_equal(xf_export_npz(m, fx.params, &out, len, NULL), XF_OK);
  xf_model_free(m);
  return out;
}

static void export_writes_onnx_and_npz_and_refuses_a_disagreeing_extension(void **state) {
  (void)state;
  char dir[600], path[700];
  scratch(dir, sizeof(dir), "export-onnx");
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  size_t want_len = 0, len = 0;

  xfed(r, &e, dir, "job", "export", "7", "--out", "model.onnx", NULL);
  expect(r, 0, "wrote model.onnx (onnx)", NULL);
  snprintf(path, sizeof(path), "%s/model.onnx", dir);
  uint8_t *want = exported(XF_EXPORT_ONNX, &want_len), *b = read_file(path, &len);
  assert_non_null(b);
  assert_int_equal(len, want_len);
  assert_memory_equal(b, want, len);
  free(b);
  xf_free(want);

  /* --format names a format the extension does not: the flag decides. */
  xfed(r, &e, dir, "job", "export", "7", "--out", "weights.bin", "--format", "npz", "--json",
       NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  assert_string_equal(json_string_value(json_object_get(j, "format")), "npz");
  json_decref(j);
  snprintf(path, sizeof(path), "%s/weights.bin", dir);
  want = exported(XF_EXPORT_NPZ, &want_len);
  b = read_file(path, &len);
  assert_non_null(b);
  assert_int_equal(len, want_len);
  assert_memory_equal(b, want, len);
  assert_memory_equal(b, "PK\x03\x04", 4);
  free(b);
  xf_free(want);

  /* The flag and the extension disagree: refused before the download, with
   * the way out, and nothing written. */
  xfed(r, &e, dir, "job", "export", "7", "--out", "model2.onnx", "--format", "npz", NULL);
  expect(r, 2, NULL, "--format npz disagrees with the extension of 'model2.onnx' (onnx)");
  expect(r, 2, NULL, "name the file .npz");
  snprintf(path, sizeof(path), "%s/model2.onnx", dir);
  assert_int_not_equal(access(path, F_OK), 0);
  xfed(r, &e, dir, "job", "export", "7", "--out", "m.npz", "--format", "tflite", NULL);
  expect(r, 2, NULL, "--format 'tflite' is not onnx, npz, npy or xfed");
  free_run(r);
}

static void export_resumes_after_a_dropped_connection(void **state) {
  (void)state;
  char dir[600], path[700];
  scratch(dir, sizeof(dir), "resume");
  pthread_mutex_lock(&fk.mu);
  fk.st.drop_after_chunks = 4;
  pthread_mutex_unlock(&fk.mu);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, dir, "job", "export", "7", "--out", "model.xfm", NULL);
  expect(r, 0, "after round 3", NULL);
  snprintf(path, sizeof(path), "%s/model.xfm", dir);
  size_t len = 0;
  uint8_t *b = read_file(path, &len);
  assert_non_null(b);
  assert_int_equal(len, fx.model_len);
  assert_memory_equal(b, fx.model, len);
  free(b);
  fake_state s = fake_seen();
  assert_int_equal(s.connects, 2);
  assert_int_equal(s.model_queries, 2);
  assert_int_equal(s.last_model_round, 3); /* asked again for the round it was getting */
  assert_int_equal(s.begin_ack_offset, 4 * MODEL_CHUNK); /* and resumed after 4 chunks */
  free_run(r);
}

static void refusals_exit_1_for_authorization_and_3_for_policy(void **state) {
  (void)state;
  char dir[600], spec[700];
  scratch(dir, sizeof(dir), "refusals");
  snprintf(spec, sizeof(spec), "%s/job.json", dir);
  assert_int_equal(write_file(spec, valid_spec), 0);
  run *r = new_run();
  child_env carol, alice;
  env_user(&carol, "carol");
  env_user(&alice, "alice");

  /* A compliance officer may not submit: exit 1, the coordinator's words. */
  xfed(r, &carol, NULL, "job", "submit", spec, NULL);
  expect(r, 1, NULL, "submitting jobs needs the role researcher or admin");
  assert_non_null(strstr(r->err, "not authorized"));
  assert_non_null(strstr(r->err, "spiffe://acme/user/carol/role/compliance"));
  xfed(r, &carol, NULL, "job", "cancel", "7", "--json", NULL);
  expect(r, 1, "XF_EDENIED", "cancelling jobs needs");

  /* Error(XF_EDENIED) answering any request: exit 1 with the message. */
  pthread_mutex_lock(&fk.mu);
  fk.st.deny_all = true;
  pthread_mutex_unlock(&fk.mu);
  xfed(r, &alice, NULL, "job", "status", "7", NULL);
  expect(r, 1, NULL, "job_query is for researchers and admins");
  pthread_mutex_lock(&fk.mu);
  fk.st.deny_all = false;
  pthread_mutex_unlock(&fk.mu);

  /* A researcher's job that the residency policy refuses: exit 3. */
  char forbidden[700];
  snprintf(forbidden, sizeof(forbidden), "%s/forbidden.json", dir);
  assert_int_equal(write_file(forbidden, "{\"name\": \"forbidden\", \"model\": {\"arch\": "
                                         "\"logreg\"}, \"data\": {\"dataset\": \"d\"}, "
                                         "\"rounds\": 1}\n"),
                   0);
  xfed(r, &alice, NULL, "job", "submit", forbidden, NULL);
  expect(r, 3, NULL, "may not leave region eu");

  /* A site certificate is no identity for the CLI. */
  child_env site;
  env_bare(&site, "site");
  xfed(r, &site, NULL, "job", "list", "--coordinator", fx.coordinator, "--cert", fx.site_crt,
       "--key", fx.site_key, "--ca", fx.ca, "--crl", fx.crl, NULL);
  expect(r, 1, NULL, "user");
  free_run(r);
}

static void missing_coordinator_is_a_usage_error_naming_XFED_COORDINATOR(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_bare(&e, "nothing");
  xfed(r, &e, NULL, "job", "list", "--cert", fx.alice_crt, "--key", fx.alice_key, "--ca", fx.ca,
       "--crl", fx.crl, NULL);
  expect(r, 2, NULL, "XFED_COORDINATOR");
  assert_non_null(strstr(r->err, "--coordinator"));
  /* And a coordinator that is not HOST:PORT says where it came from. */
  env_add(&e, "XFED_COORDINATOR=localhost");
  xfed(r, &e, NULL, "job", "list", "--cert", fx.alice_crt, "--key", fx.alice_key, "--ca", fx.ca,
       "--crl", fx.crl, NULL);
  expect(r, 2, NULL, "XFED_COORDINATOR");
  /* Nothing listening: an error, not a usage error. */
  xfed(r, &e, NULL, "job", "list", "--coordinator", "127.0.0.1:1", "--cert", fx.alice_crt,
       "--key", fx.alice_key, "--ca", fx.ca, "--crl", fx.crl, "--timeout", "5", NULL);
  expect(r, 1, NULL, "127.0.0.1:1");
  free_run(r);
}

/* Ids above 2^63 - 1 were clamped to the largest id (a different job, or
 * "no such job"); every verb that takes an ID refuses them, naming the id
 * and the range, before dialing. */
static void job_ids_beyond_the_range_are_refused_naming_the_range(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  static const char *const verbs[] = {"status", "cancel", "metrics", "export", "watch"};
  for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
    if (strcmp(verbs[i], "export") == 0)
      xfed(r, &e, fx.root, "job", verbs[i], "9223372036854775808", "--out", "m.xfm", NULL);
    else
      xfed(r, &e, NULL, "job", verbs[i], "9223372036854775808", NULL);
    expect(r, 2, NULL, "job id 9223372036854775808 is out of range");
    assert_non_null(strstr(r->err, "1 to 9223372036854775807"));
  }
  xfed(r, &e, NULL, "job", "status", "18446744073709551616", NULL);
  expect(r, 2, NULL, "job id 18446744073709551616 is out of range");
  xfed(r, &e, NULL, "job", "status", "7x", NULL);
  expect(r, 2, NULL, "'7x' is not a job id");
  free_run(r);
}

static void flags_and_environment_find_the_coordinator(void **state) {
  (void)state;
  run *r = new_run();
  child_env e;
  env_bare(&e, "flags");
  xfed(r, &e, NULL, "job", "status", "7", "--coordinator", fx.coordinator, "--cert",
       fx.alice_crt, "--key", fx.alice_key, "--ca", fx.ca, "--crl", fx.crl, NULL);
  expect(r, 0, "fmnist-mlp", NULL);
  /* The connection flags may also stand before the noun. */
  char coord_flag[128];
  snprintf(coord_flag, sizeof(coord_flag), "--coordinator=%s", fx.coordinator);
  xfed(r, &e, NULL, coord_flag, "--cert", fx.alice_crt, "--key", fx.alice_key, "--ca", fx.ca,
       "--crl", fx.crl, "job", "status", "7", "--json", NULL);
  expect(r, 0, "\"job_id\": \"7\"", NULL);
  xfed(r, &e, NULL, "--cert", NULL);
  expect(r, 2, NULL, "--cert needs a value");
  /* A flag wins over the environment. */
  env_bare(&e, "flags");
  env_add(&e, "XFED_COORDINATOR=%s", fx.coordinator);
  env_add(&e, "XFED_CERT=/nonexistent/cert.pem");
  env_add(&e, "XFED_KEY=%s", fx.alice_key);
  env_add(&e, "XFED_CA=%s", fx.ca);
  env_add(&e, "XFED_CRL=%s", fx.crl);
  xfed(r, &e, NULL, "job", "status", "7", NULL);
  expect(r, 1, NULL, "/nonexistent/cert.pem");
  xfed(r, &e, NULL, "job", "status", "7", "--cert", fx.alice_crt, NULL);
  expect(r, 0, "fmnist-mlp", NULL);
  free_run(r);
}

static void busy_coordinator_is_dialed_again(void **state) {
  (void)state;
  pthread_mutex_lock(&fk.mu);
  fk.st.busy = 2;
  pthread_mutex_unlock(&fk.mu);
  run *r = new_run();
  child_env e;
  env_user(&e, "alice");
  xfed(r, &e, NULL, "job", "status", "7", NULL);
  expect(r, 0, "fmnist-mlp", NULL);
  fake_state s = fake_seen();
  assert_int_equal(s.connects, 3);
  /* Not beyond the timeout, though. */
  pthread_mutex_lock(&fk.mu);
  fk.st.busy = 1000;
  pthread_mutex_unlock(&fk.mu);
  xfed(r, &e, NULL, "job", "status", "7", "--timeout", "1", NULL);
  expect(r, 1, NULL, "BUSY");
  free_run(r);
}

static void profile_file_supplies_what_flags_and_environment_do_not(void **state) {
  (void)state;
  char dir[600], profile[700], text[4096];
  scratch(dir, sizeof(dir), "profile");
  /* Relative paths are relative to the profile's directory. */
  snprintf(profile, sizeof(profile), "%s/alice.json", dir);
  snprintf(text, sizeof(text),
           "{\"coordinator\": \"%s\", \"cert\": \"../fed/issued/alice.crt\",\n"
           " \"key\": \"../fed/issued/alice.key\", \"ca\": \"%s\", \"crl\": \"../fed/crl.pem\"}\n",
           fx.coordinator, fx.ca);
  assert_int_equal(write_file(profile, text), 0);
  run *r = new_run();
  child_env e;
  env_bare(&e, "profile");
  env_add(&e, "XFED_PROFILE=%s", profile);
  xfed(r, &e, "/", "job", "status", "7", NULL);
  expect(r, 0, "fmnist-mlp", NULL);

  /* The default place: $HOME/.config/xfed/profile.json. */
  char home[700], cfg[800], deflt[900];
  snprintf(home, sizeof(home), "%s/home-default", fx.root);
  assert_int_equal(mkdir(home, 0700), 0);
  snprintf(cfg, sizeof(cfg), "%s/.config", home);
  assert_int_equal(mkdir(cfg, 0700), 0);
  snprintf(cfg, sizeof(cfg), "%s/.config/xfed", home);
  assert_int_equal(mkdir(cfg, 0700), 0);
  snprintf(deflt, sizeof(deflt), "%s/profile.json", cfg);
  snprintf(text, sizeof(text),
           "{\"coordinator\": \"127.0.0.1:1\", \"cert\": \"%s\", \"key\": \"%s\", \"ca\": \"%s\", "
           "\"crl\": \"%s\"}\n",
           fx.alice_crt, fx.alice_key, fx.ca, fx.crl);
  assert_int_equal(write_file(deflt, text), 0);
  env_bare(&e, "default");
  /* The environment wins over the profile's (dead) coordinator. */
  env_add(&e, "XFED_COORDINATOR=%s", fx.coordinator);
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 0, "fmnist-mlp", NULL);

  /* Strict: an unknown key or a wrong type names the file and the key. */
  assert_int_equal(write_file(deflt, "{\"coordinator\": \"h:1\", \"certificate\": \"x\"}"), 0);
  env_bare(&e, "default");
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 1, NULL, "certificate");
  assert_non_null(strstr(r->err, deflt));
  assert_int_equal(write_file(deflt, "{\"coordinator\": 7}"), 0);
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 1, NULL, "coordinator: must be a non-empty string");
  assert_int_equal(write_file(deflt, "{\"coordinator\": \"h:1\",}"), 0);
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 1, NULL, "line 1");
  /* An XFED_PROFILE that does not exist is an error, not a silent default. */
  env_add(&e, "XFED_PROFILE=%s/missing.json", dir);
  xfed(r, &e, NULL, "job", "list", NULL);
  expect(r, 1, NULL, "missing.json");
  free_run(r);
}

int main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(help_lists_the_job_verbs_and_the_connection_flags, test_setup),
      cmocka_unit_test_setup(submit_of_an_invalid_spec_fails_locally_naming_the_field, test_setup),
      cmocka_unit_test_setup(submit_list_status_cancel_round_trip, test_setup),
      cmocka_unit_test_setup(watch_follows_a_job_until_done_and_sums_it_up, test_setup),
      cmocka_unit_test_setup(status_gives_the_open_attempts_sites_then_the_last_rounds,
                             test_setup),
      cmocka_unit_test_setup(job_without_an_accepted_evaluation_says_none_and_why, test_setup),
      cmocka_unit_test_setup(watch_dials_again_after_the_connection_drops, test_setup),
      cmocka_unit_test_setup(submit_wait_follows_the_new_job, test_setup),
      cmocka_unit_test_setup(metrics_csv_is_rfc4180_with_a_header, test_setup),
      cmocka_unit_test_setup(report_draws_the_metrics_as_png_and_svg, test_setup),
      cmocka_unit_test_setup(export_writes_the_model_file_and_npy, test_setup),
      cmocka_unit_test_setup(export_writes_onnx_and_npz_and_refuses_a_disagreeing_extension,
                             test_setup),
      cmocka_unit_test_setup(export_resumes_after_a_dropped_connection, test_setup),
      cmocka_unit_test_setup(refusals_exit_1_for_authorization_and_3_for_policy, test_setup),
      cmocka_unit_test_setup(missing_coordinator_is_a_usage_error_naming_XFED_COORDINATOR,
                             test_setup),
      cmocka_unit_test_setup(job_ids_beyond_the_range_are_refused_naming_the_range, test_setup),
      cmocka_unit_test_setup(flags_and_environment_find_the_coordinator, test_setup),
      cmocka_unit_test_setup(busy_coordinator_is_dialed_again, test_setup),
      cmocka_unit_test_setup(profile_file_supplies_what_flags_and_environment_do_not, test_setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
