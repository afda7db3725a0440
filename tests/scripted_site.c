/* SPDX-License-Identifier: Apache-2.0 */
/* xfed-scripted-site: a site for integration tests that speaks the protocol
 * with a real site certificate but reports what its script says instead of
 * training: a liar (accuracy 7.5, then NaN, then more samples than its
 * dataset holds, and 7.5 again in the evaluation), a sender of a stream
 * whose digest is wrong, one whose first update claims the weight of more
 * records than its dataset holds, a site that restarts mid-upload and seals its
 * update again to a new key, or one that trains honestly and reports a NaN
 * accuracy for the final evaluation. It announces one dataset of 28x28 grey images
 * and 10 classes (Fashion-MNIST's shape) and sends zero deltas, sealed as
 * a real site seals them. Everything it sees is printed to stdout as
 * `event=NAME key=value` lines for the test script to read
 * (tests/integration/integrity.sh). Not installed. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "base/alloc.h"
#include "crypto/seal.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

/* Every read waits this long; then a Heartbeat goes out (the coordinator
 * closes a session it hears nothing from for 30 s). */
#define READ_SLICE_S 1
/* The whole run ends after this long whatever happens. */
#define RUN_LIMIT_S 600

typedef enum script { MODE_LIAR, MODE_BAD_DIGEST, MODE_HEAVY, MODE_RESEAL, MODE_NAN_EVALUATION } script;

static struct {
  script mode;
  const char *host, *site, *region, *dataset, *tag;
  int port;
  uint32_t train_records, test_records;
  xf_tls *tls;
  int fd;
  SSL *ssl;
  xf_frame_decoder *decoder;
  uint8_t plain[16384];
  size_t off, len;
  uint64_t heartbeat_seq;
  double started;
  /* The task in hand (one job at a time). */
  char job[64];
  uint32_t round, attempt, model_round;
  bool evaluate_only, sealed;
  uint8_t seal_pk[XF_SEAL_PUBLICKEYBYTES];
  uint64_t update_stream;
  xf_jobspec spec;
  bool restarted; /* reseal: the restart is behind it */
} sx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void event(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void event(const char *name, const char *fmt, ...) {
  printf("event=%s site=%s ", name, sx.site);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  fflush(stdout);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  unsigned long e = ERR_get_error();
  char tls[256] = "";
  if (e) ERR_error_string_n(e, tls, sizeof(tls));
  event("failed", "reason=\"%s%s%s\"", msg, tls[0] ? ": " : "", tls);
  exit(1);
}

/* ---- the connection: TLS over a blocking socket ---------------------------------------------- */

static void send_env(const Xfed__Envelope *env) {
  uint8_t *frame = NULL;
  size_t len = 0;
  xf_errctx err = {0};
  if (xf_frame_encode(env, 0, &frame, &len, &err) != XF_OK) die("encode: %s", err.msg);
  ERR_clear_error();
  if (SSL_write(sx.ssl, frame, (int)len) != (int)len) die("write");
  xf_free(frame);
}

static void send_heartbeat(void) {
  Xfed__Heartbeat hb = XFED__HEARTBEAT__INIT;
  hb.seq = ++sx.heartbeat_seq;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HEARTBEAT;
  env.heartbeat = &hb;
  send_env(&env);
}

/* The next Envelope (caller frees), or NULL when the coordinator closed the
 * session. Heartbeats are answered by our own. */
static Xfed__Envelope *next_env(void) {
  for (;;) {
    if (now_s() - sx.started > RUN_LIMIT_S) die("ran past %d s", RUN_LIMIT_S);
    if (sx.off == sx.len) {
      ERR_clear_error();
      errno = 0;
      int n = SSL_read(sx.ssl, sx.plain, (int)sizeof(sx.plain));
      if (n <= 0) {
        int e = SSL_get_error(sx.ssl, n);
        if (e == SSL_ERROR_SYSCALL && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          send_heartbeat();
          continue;
        }
        if (e == SSL_ERROR_WANT_READ) {
          send_heartbeat();
          continue;
        }
        return NULL;
      }
      sx.off = 0;
      sx.len = (size_t)n;
    }
    size_t used = 0;
    Xfed__Envelope *env = NULL;
    xf_errctx err = {0};
    if (xf_frame_decoder_feed(sx.decoder, sx.plain + sx.off, sx.len - sx.off, &used, &env, &err) !=
        XF_OK)
      die("the coordinator sent a bad frame: %s", err.msg);
    sx.off += used;
    if (env && env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      xf_envelope_free(env);
      continue;
    }
    if (env) return env;
  }
}

static void announce(void) {
  Xfed__SiteAnnounce__Dataset ds = XFED__SITE_ANNOUNCE__DATASET__INIT;
  char *tags[1] = {(char *)sx.tag};
  ds.name = (char *)sx.dataset;
  ds.tags = tags;
  ds.n_tags = 1;
  ds.classification = "internal";
  ds.train_records = sx.train_records;
  ds.test_records = sx.test_records;
  ds.classes = 10;
  ds.height = 28;
  ds.width = 28;
  ds.channels = 1;
  Xfed__SiteAnnounce__Dataset *list[1] = {&ds};
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = (char *)sx.site;
  a.region = (char *)sx.region;
  a.datasets = list;
  a.n_datasets = 1;
  a.backend = "cpu";
  a.threads = 1;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  send_env(&env);
}

/* Dials, runs the hello as a site and announces itself. */
static void connect_site(void) {
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
  char port[16];
  snprintf(port, sizeof(port), "%d", sx.port);
  if (getaddrinfo(sx.host, port, &hints, &ai) != 0 || !ai) die("cannot resolve %s", sx.host);
  sx.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sx.fd < 0 || connect(sx.fd, ai->ai_addr, ai->ai_addrlen) != 0)
    die("connect %s:%d: %s", sx.host, sx.port, strerror(errno));
  freeaddrinfo(ai);
  struct timeval tv = {.tv_sec = READ_SLICE_S};
  setsockopt(sx.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sx.ssl = SSL_new(xf_tls_ctx(sx.tls));
  if (!sx.ssl || SSL_set_fd(sx.ssl, sx.fd) != 1) die("SSL_new");
  ERR_clear_error();
  if (SSL_connect(sx.ssl) != 1) die("TLS handshake");
  xf_errctx err = {0};
  if (xf_frame_decoder_new(0, &sx.decoder, &err) != XF_OK) die("decoder: %s", err.msg);
  sx.off = sx.len = 0;
  Xfed__Hello hello = XFED__HELLO__INIT;
  hello.protocol_version = XF_PROTOCOL_VERSION;
  hello.min_protocol_version = XF_PROTOCOL_MIN_VERSION;
  hello.role = "site";
  hello.agent = "xfed-scripted-site";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &hello;
  send_env(&env);
  bool got_hello = false, got_ack = false;
  while (!got_hello || !got_ack) {
    Xfed__Envelope *in = next_env();
    if (!in) die("the coordinator closed during the hello");
    if (in->body_case == XFED__ENVELOPE__BODY_HELLO) {
      got_hello = true;
      Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
      ack.protocol_version = XF_PROTOCOL_VERSION;
      Xfed__Envelope out = XFED__ENVELOPE__INIT;
      out.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
      out.hello_ack = &ack;
      send_env(&out);
    } else if (in->body_case == XFED__ENVELOPE__BODY_HELLO_ACK) {
      got_ack = true;
    } else if (in->body_case == XFED__ENVELOPE__BODY_REFUSAL) {
      die("refused: %s", in->refusal->text ? in->refusal->text : "");
    }
    xf_envelope_free(in);
  }
  announce();
  event("connected", "coordinator=%s:%d", sx.host, sx.port);
}

/* Drops the connection with no goodbye, as a killed process would. */
static void drop_connection(void) {
  SSL_free(sx.ssl);
  sx.ssl = NULL;
  close(sx.fd);
  sx.fd = -1;
  xf_frame_decoder_free(sx.decoder);
  sx.decoder = NULL;
}

/* ---- reports ----------------------------------------------------------------------------------- */

typedef struct lie {
  double accuracy;
  uint64_t samples;
  const char *what;
} lie;

/* What the liar reports for its n-th training report (0-based), and for
 * its evaluation. */
static lie lie_of(int n, bool evaluation) {
  lie l = {.accuracy = 0.5, .samples = sx.train_records, .what = "honest"};
  if (sx.mode == MODE_NAN_EVALUATION && evaluation) {
    l.accuracy = NAN; /* honest training, a NaN for the final evaluation */
    l.what = "accuracy=nan";
  }
  if (sx.mode != MODE_LIAR) return l;
  if (evaluation || n % 3 == 0) {
    l.accuracy = 7.5;
    l.what = "accuracy=7.5";
  } else if (n % 3 == 1) {
    l.accuracy = NAN;
    l.what = "accuracy=nan";
  } else {
    l.samples = (uint64_t)sx.train_records + 1;
    l.what = "samples_beyond_dataset";
  }
  return l;
}

static void send_metrics(bool train, const lie *l) {
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.job_id = sx.job;
  m.round = sx.round;
  m.attempt = sx.attempt;
  m.site = (char *)sx.site;
  m.region = (char *)sx.region;
  m.has_train = train;
  m.train_loss = train ? 0.7 : 0;
  m.has_test = true;
  m.test_loss = 0.9;
  m.test_accuracy = l->accuracy;
  m.samples = l->samples;
  m.model_round = sx.model_round;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  send_env(&env);
  event("metrics_sent", "job=%s round=%u attempt=%u train=%d lie=%s", sx.job,
        (unsigned)sx.round, (unsigned)sx.attempt, train ? 1 : 0, l->what);
}

/* ---- the update ------------------------------------------------------------------------------- */

typedef struct update {
  uint8_t *wire;
  size_t len;
  xf_tensor_sender *tx;
} update;

/* A zero delta of the job's model, sealed to the round's key with a fresh
 * ephemeral key; with wrong_digest, its TensorBegin announces the digest of
 * other bytes; with heavy, the weight of one record more than it has. */
static update make_update(bool wrong_digest, bool heavy) {
  uint64_t n = 0;
  xf_errctx err = {0};
  if (xf_jobspec_model_params(&sx.spec, 28, 28, 1, 10, &n, &err) != XF_OK)
    die("model: %s", err.msg);
  size_t plain_len = (size_t)n * sizeof(float);
  uint8_t *plain = xf_calloc(plain_len, 1);
  if (!plain || !sx.sealed) die("a float32 update needs the offer's sealing key");
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), sx.job, sx.round, sx.attempt, sx.site);
  xf_seal_sender *seal = NULL;
  uint8_t epk[XF_SEAL_PUBLICKEYBYTES];
  if (xf_seal_sender_new(sx.seal_pk, (const uint8_t *)ctx, ctx_len, &seal, epk) != XF_OK)
    die("seal sender");
  update u = {0};
  if (xf_seal_stream(seal, plain, plain_len, XF_SEAL_STREAM_CHUNK, &u.wire, &u.len) != XF_OK)
    die("seal");
  xf_seal_sender_free(seal);
  xf_free(plain);
  xf_tensor_desc d = {.stream_id = sx.update_stream,
                      .kind = XFED__TENSOR_BEGIN__KIND__UPDATE,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__F32,
                      .element_count = n,
                      .job_id = sx.job,
                      .round = sx.round,
                      .attempt = sx.attempt,
                      .weight = (uint64_t)sx.train_records + (heavy ? 1 : 0),
                      .sealed_by = epk,
                      .sealed_chunk = XF_SEAL_STREAM_CHUNK};
  size_t chunk = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
  xf_err rc;
  if (wrong_digest) {
    xf_digest other;
    memset(&other, 0x5a, sizeof(other));
    rc = xf_tensor_sender_new_hashed(&d, u.wire, u.len, chunk, &other, &u.tx, &err);
  } else {
    rc = xf_tensor_sender_new(&d, u.wire, u.len, chunk, &u.tx, &err);
  }
  if (rc != XF_OK) die("tensor sender: %s", err.msg);
  return u;
}

static void free_update(update *u) {
  xf_tensor_sender_free(u->tx);
  xf_free(u->wire);
  memset(u, 0, sizeof(*u));
}

/* Sends the stream's next message; false once TensorEnd is out. */
static bool send_next(update *u) {
  xf_tensor_msg msg;
  if (xf_tensor_sender_next(u->tx, &msg) != XF_OK) return false;
  send_env(&msg.env);
  return msg.env.body_case != XFED__ENVELOPE__BODY_TENSOR_END;
}

/* Waits for what answers our stream: a TensorAck (its offset into *acked,
 * true) or an Error (printed, false). Other frames are handled as usual. */
static bool handle(Xfed__Envelope *env);
static bool await_answer(uint64_t *acked) {
  for (;;) {
    Xfed__Envelope *env = next_env();
    if (!env) die("the coordinator closed while the update was in flight");
    if (env->body_case == XFED__ENVELOPE__BODY_TENSOR_ACK &&
        env->tensor_ack->stream_id == sx.update_stream) {
      *acked = env->tensor_ack->next_offset;
      event("update_ack", "job=%s round=%u stream=%" PRIu64 " offset=%" PRIu64, sx.job,
            (unsigned)sx.round, sx.update_stream, *acked);
      xf_envelope_free(env);
      return true;
    }
    bool error = env->body_case == XFED__ENVELOPE__BODY_ERROR;
    handle(env);
    if (error) return false;
  }
}

/* Sends the whole update: TensorBegin, the chunks from where the first
 * TensorAck says, TensorEnd, and waits for the last TensorAck. */
static void send_update(update *u) {
  uint64_t acked = 0;
  send_next(u);
  if (!await_answer(&acked)) return;
  xf_errctx err = {0};
  if (xf_tensor_sender_resume(u->tx, acked, &err) != XF_OK) die("resume: %s", err.msg);
  while (send_next(u)) {
  }
  if (await_answer(&acked) && acked == u->len)
    event("update_taken", "job=%s round=%u stream=%" PRIu64 " bytes=%zu", sx.job,
          (unsigned)sx.round, sx.update_stream, u->len);
}

/* The reseal script: TensorBegin sealed to one ephemeral key and the first
 * chunk, then the link is gone as if the process died. After the
 * reconnect, handle() sends the update again, sealed afresh. */
static void send_update_then_die(update *u) {
  uint64_t acked = 0;
  send_next(u);
  if (!await_answer(&acked)) return;
  send_next(u); /* the first chunk */
  event("update_partial", "job=%s round=%u stream=%" PRIu64 " sent=1 chunks=%zu", sx.job,
        (unsigned)sx.round, sx.update_stream,
        (u->len + XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES - 1) / (XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES));
  /* Lets the chunk be taken before the link drops (a heartbeat behind it
   * is answered only once the coordinator read both). */
  send_heartbeat();
  sleep(1);
  drop_connection();
  event("restarting", "job=%s round=%u", sx.job, (unsigned)sx.round);
  sx.restarted = true;
  connect_site();
}

/* ---- the task ----------------------------------------------------------------------------------- */

static int training_reports;

/* A task's GO: its Metrics (once), then its update (once it went through,
 * or was refused). A GO sent again after a reconnect finds the Metrics out
 * and sends what is left. */
static void on_go(void) {
  static uint32_t metrics_round, metrics_attempt, update_round, update_attempt;
  bool first = false;
  if (metrics_round != sx.round || metrics_attempt != sx.attempt) {
    metrics_round = sx.round;
    metrics_attempt = sx.attempt;
    lie l = lie_of(training_reports, false);
    send_metrics(true, &l);
    first = training_reports++ == 0;
  }
  if (update_round == sx.round && update_attempt == sx.attempt) return;
  if (sx.mode == MODE_RESEAL && first) {
    update u = make_update(false, false);
    send_update_then_die(&u); /* the GO comes again on the new link */
    free_update(&u);
    return;
  }
  update_round = sx.round;
  update_attempt = sx.attempt;
  update u = make_update(sx.mode == MODE_BAD_DIGEST && first, sx.mode == MODE_HEAVY && first);
  if (sx.restarted) {
    event("update_resealed", "job=%s round=%u stream=%" PRIu64, sx.job, (unsigned)sx.round,
          sx.update_stream);
    sx.restarted = false;
  }
  send_update(&u);
  free_update(&u);
}

static void on_offer(const Xfed__TaskOffer *o) {
  snprintf(sx.job, sizeof(sx.job), "%s", o->job_id ? o->job_id : "");
  sx.round = o->round;
  sx.attempt = o->attempt;
  sx.model_round = o->model_round;
  sx.evaluate_only = o->evaluate_only;
  sx.sealed = o->seal_key.len == XF_SEAL_PUBLICKEYBYTES;
  if (sx.sealed) memcpy(sx.seal_pk, o->seal_key.data, XF_SEAL_PUBLICKEYBYTES);
  sx.update_stream = o->update_stream_id ? o->update_stream_id
                                         : ((uint64_t)o->round << 16 | (uint64_t)o->attempt << 1 | 1u);
  xf_errctx err = {0};
  const char *json = o->params_json ? o->params_json : "";
  if (xf_jobspec_parse_string(json, strlen(json), "offer", &sx.spec, &err) != XF_OK)
    die("the offer's job spec: %s", err.msg);
  event("offered", "job=%s round=%u attempt=%u evaluate=%d", sx.job, (unsigned)sx.round,
        (unsigned)sx.attempt, sx.evaluate_only ? 1 : 0);
  if (sx.evaluate_only) {
    lie l = lie_of(0, true);
    send_metrics(false, &l);
    return;
  }
  Xfed__TaskAccept a = XFED__TASK_ACCEPT__INIT;
  a.job_id = sx.job;
  a.round = sx.round;
  a.attempt = sx.attempt;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_ACCEPT;
  env.task_accept = &a;
  send_env(&env);
  if (!o->hold) on_go();
}

/* One frame from the coordinator; false when it ends the run. */
static bool handle(Xfed__Envelope *env) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TASK_OFFER: on_offer(env->task_offer); break;
  case XFED__ENVELOPE__BODY_TASK_GO:
    if (env->task_go->round == sx.round && env->task_go->attempt == sx.attempt) on_go();
    break;
  case XFED__ENVELOPE__BODY_TASK_CANCEL:
    event("cancelled", "job=%s round=%u reason=\"%s\"", env->task_cancel->job_id,
          (unsigned)env->task_cancel->round,
          env->task_cancel->reason ? env->task_cancel->reason : "");
    break;
  case XFED__ENVELOPE__BODY_ERROR:
    event("error", "code=%s message=\"%s\"", xf_err_name((xf_err)env->error->code),
          env->error->message ? env->error->message : "");
    break;
  default: break; /* the model stream, acks of other streams */
  }
  xf_envelope_free(env);
  return true;
}

static void usage(void) {
  fprintf(stderr,
          "usage: xfed-scripted-site --mode liar|bad-digest|heavy|reseal|nan-evaluation\n"
          "         --coordinator HOST:PORT\n"
          "         --cert F --key F --ca F --crl F --site NAME --region R\n"
          "         --dataset NAME --tag T --records TRAIN:TEST\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *cert = NULL, *key = NULL, *ca = NULL, *crl = NULL, *coord = NULL, *mode = NULL;
  const char *records = "20000:3000";
  sx.dataset = "fmnist";
  sx.tag = "fmnist";
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--mode")) mode = v;
    else if (!strcmp(k, "--coordinator")) coord = v;
    else if (!strcmp(k, "--cert")) cert = v;
    else if (!strcmp(k, "--key")) key = v;
    else if (!strcmp(k, "--ca")) ca = v;
    else if (!strcmp(k, "--crl")) crl = v;
    else if (!strcmp(k, "--site")) sx.site = v;
    else if (!strcmp(k, "--region")) sx.region = v;
    else if (!strcmp(k, "--dataset")) sx.dataset = v;
    else if (!strcmp(k, "--tag")) sx.tag = v;
    else if (!strcmp(k, "--records")) records = v;
    else usage();
  }
  if (!mode || !coord || !cert || !key || !ca || !crl || !sx.site || !sx.region) usage();
  if (!strcmp(mode, "liar")) sx.mode = MODE_LIAR;
  else if (!strcmp(mode, "bad-digest")) sx.mode = MODE_BAD_DIGEST;
  else if (!strcmp(mode, "heavy")) sx.mode = MODE_HEAVY;
  else if (!strcmp(mode, "reseal")) sx.mode = MODE_RESEAL;
  else if (!strcmp(mode, "nan-evaluation")) sx.mode = MODE_NAN_EVALUATION;
  else usage();
  if (sscanf(records, "%" SCNu32 ":%" SCNu32, &sx.train_records, &sx.test_records) != 2) usage();
  static char host[256];
  const char *colon = strrchr(coord, ':');
  if (!colon || (size_t)(colon - coord) >= sizeof(host)) usage();
  memcpy(host, coord, (size_t)(colon - coord));
  sx.host = host;
  sx.port = atoi(colon + 1);
  signal(SIGPIPE, SIG_IGN);
  xf_tls_config tc = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  xf_errctx err = {0};
  if (xf_tls_new(&tc, &sx.tls, &err) != XF_OK) die("TLS: %s", err.msg);
  sx.started = now_s();
  connect_site();
  for (;;) {
    Xfed__Envelope *env = next_env();
    if (!env) {
      event("closed", "by=coordinator");
      drop_connection();
      xf_tls_free(sx.tls);
      return 0;
    }
    handle(env);
  }
}
