/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of the site daemon: the real `xfed-site run`, started in
 * the background on a site directory made with `xfed-site init` and
 * `dataset add`, against a fake coordinator in this process (a libuv loop
 * with xf_listen and the session layer, real certificates from the PKI
 * library, real TLS on loopback). Covers the announce, a trained task whose
 * update matches local training bit for bit, evaluate-only offers, the
 * frames of refused offers' streams, an upload resumed after a dropped link, tasks queued while
 * one trains and BUSY once the queue is full, TaskCancel while training,
 * held tasks and TaskGo (with and without a secure-aggregation setup, and
 * cancelled before it without a privacy charge), two jobs reporting in
 * turn, the offered update stream id, bad frames, a refused session and the redial backoff, and SIGTERM and
 * SIGINT. What an offer's or a go's refusal says, and the plan's release
 * conditions, are site/offer.c's decisions: tests/test_site_offer.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <uv.h>

#include "secagg_setup.h"
#include "support.h"

#include "base/alloc.h"
#include "job/jobmodel.h"
#include "job/jobspec.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "crypto/seal.h"
#include "crypto/secagg.h"
#include "crypto/secagg_guard.h"
#include "crypto/secagg_x509.h"
#include "kernels/backend.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "net/conn.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"
#include "data/dataset.h"

#define MIB (1u << 20)
#define RUN_DEADLINE_S 120
/* A bound on waits that no load reaches: the sanitized build on a busy
 * two-core machine has taken 38 s to train two queued jobs. */
#define WAIT_MS 180000

extern char **environ;

static char xfed_site[1024];
static char root[256];    /* the group's scratch directory */
static char fed_dir[512]; /* federation acme: coord (global), eu-berlin (site, eu) */

/* The job specs the tests offer. tiny: 6 train and 3 test records of 2
 * features, labels 0..2, registered with tag t1. */
/* AdamW with a step schedule halving lr every round: round 2 trains at 0.05. */
#define SPEC_ADAMW                                                                    \
  "{\"name\": \"tiny-adamw\", \"model\": {\"arch\": \"logreg\"},"                     \
  " \"data\": {\"dataset\": \"tiny\", \"tags\": [\"t1\"]}, \"rounds\": 3,"            \
  " \"min_sites\": 1, \"local\": {\"epochs\": 3, \"batch_size\": 4, \"lr\": 0.1,"       \
  " \"optimizer\": \"adamw\", \"beta2\": 0.99, \"weight_decay\": 0.01, \"clip_norm\": 1,"\
  " \"lr_schedule\": {\"kind\": \"step\", \"every\": 1, \"gamma\": 0.5}}, \"seed\": 42}"
#define SPEC_LOGREG                                                                   \
  "{\"name\": \"tiny-logreg\", \"model\": {\"arch\": \"logreg\"},"                    \
  " \"data\": {\"dataset\": \"tiny\", \"tags\": [\"t1\"]}, \"rounds\": 3,"            \
  " \"min_sites\": 1, \"strategy\": {\"name\": \"fedprox\"},"                          \
  " \"local\": {\"epochs\": 3, \"batch_size\": 4, \"lr\": 0.1, \"momentum\": 0.9,"    \
  " \"weight_decay\": 0.0001, \"prox_mu\": 0.01}, \"seed\": 42}"
/* A declared model: flatten, then a hidden layer and the output. */
#define SPEC_DECLARED                                                                  \
  "{\"name\": \"tiny-declared\", \"model\": {\"layers\": [{\"kind\": \"flatten\"},"      \
  " {\"kind\": \"dense\", \"units\": 5}, {\"kind\": \"relu\"},"                          \
  " {\"kind\": \"dense\", \"units\": 3}]},"                                                \
  " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 3, \"min_sites\": 1,"                 \
  " \"local\": {\"epochs\": 2, \"batch_size\": 4, \"lr\": 0.1}, \"seed\": 5}"
/* About a million parameters: an update of five 1 MiB chunks. */
#define SPEC_MLP_BIG                                                                   \
  "{\"name\": \"tiny-mlp\", \"model\": {\"arch\": \"mlp\", \"hidden\": [1024, 1024]}," \
  " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 2, \"min_sites\": 1,"                \
  " \"local\": {\"epochs\": 1, \"batch_size\": 6, \"lr\": 0.05}, \"seed\": 7}"
/* The same model trained for far longer than any test waits. */
#define SPEC_MLP_LONG                                                                  \
  "{\"name\": \"tiny-long\", \"model\": {\"arch\": \"mlp\", \"hidden\": [1024, 1024]}," \
  " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 2, \"min_sites\": 1,"                \
  " \"local\": {\"epochs\": 10000, \"batch_size\": 6, \"lr\": 0.01}, \"seed\": 8}"

/* ---- the group: one federation ----------------------------------------------------- */

static void issue(xf_federation *fed, xf_pki_kind kind, const char *name, const char *region) {
  xf_pki_issue_opts o = {.kind = kind, .name = name, .region = region};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) fail_msg("issue %s: %s", name, err.msg);
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_site_daemon: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(xfed_site, sizeof(xfed_site), "%s/site/xfed-site", build);
  if (access(xfed_site, X_OK) != 0) {
    fprintf(stderr, "test_site_daemon: %s is not an executable: build xfed-site\n", xfed_site);
    return -1;
  }
  if (xf_test_mkdtemp(root, sizeof(root), "site-daemon") != 0) return -1;
  if (xf_crypto_init() != XF_OK) return -1;
  snprintf(fed_dir, sizeof(fed_dir), "%s/fed", root);
  xf_federation *fed = NULL;
  if (xf_federation_init(fed_dir, "acme", 0, &fed, NULL) != XF_OK) return -1;
  issue(fed, XF_PKI_KIND_COORDINATOR, "coord", NULL);
  issue(fed, XF_PKI_KIND_SITE, "eu-berlin", "eu");
  xf_federation_close(fed);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(root);
  return 0;
}

/* ---- the fake coordinator and the site process ---------------------------------------- */

#define INBOX_MAX 256

typedef struct fake {
  /* the loop and the listener */
  uv_loop_t loop;
  uv_timer_t tick;
  bool loop_ready;
  xf_tls *tls;
  xf_listener *listener;
  int port;
  /* the current connection */
  xf_conn *conn;
  xf_session session;
  int sessions, closes;
  /* application frames received, as copies; TensorChunks are not kept */
  Xfed__Envelope *inbox[INBOX_MAX];
  bool taken[INBOX_MAX];
  int n_inbox;
  /* the MODEL stream we send (its id: the last offer's) */
  uint64_t model_stream;
  uint8_t *model;
  size_t model_len;
  xf_digest model_digest;
  xf_tensor_sender *model_tx;
  xf_tensor_msg model_msg;
  bool model_has_msg, model_await_ack;
  int model_final_acks;
  /* the UPDATE stream we receive: the latest one (of update_job round
   * update_round); a completed one is replaced by another task's */
  xf_tensor_receiver *update_rx;
  char update_job[64];
  uint32_t update_round;
  int updates_complete;
  uint8_t *update;
  uint64_t update_len;
  int update_begins, chunks_this_conn;
  uint64_t first_offset_this_conn;
  int drop_after_chunks; /* close the link once this many chunks came, once */
  int refuse_sessions;   /* answer this many SiteAnnounces with a Refusal */
  int refuse_updates;    /* answer this many update TensorBegins with Error{stream_id} */
  bool dropped, update_complete;
  char rx_error[512];
  /* the site */
  char dir[512];
  char site_dir[600], data_dir[600], log_path[600];
  pid_t pid;
  int exit_status; /* once reaped; -1 before */
  bool passed;
} fake;

static fake *cur; /* the test's fixture, for the callbacks */

static void store(fake *f, const Xfed__Envelope *env) {
  assert_true(f->n_inbox < INBOX_MAX);
  size_t n = xfed__envelope__get_packed_size(env);
  uint8_t *buf = malloc(n ? n : 1);
  assert_non_null(buf);
  xfed__envelope__pack(env, buf);
  Xfed__Envelope *copy = xfed__envelope__unpack(NULL, n, buf);
  free(buf);
  assert_non_null(copy);
  f->inbox[f->n_inbox++] = copy;
}

static void fake_send(fake *f, const Xfed__Envelope *env) {
  assert_non_null(f->conn);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_conn_send(f->conn, env, &err) != XF_OK) fail_msg("fake coordinator send: %s", err.msg);
}

static void send_ack(fake *f, const xf_tensor_receiver *r) {
  Xfed__TensorAck a;
  xf_tensor_receiver_ack(r, &a);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &a;
  fake_send(f, &env);
}

/* Sends the model stream's next messages until it waits for an ack, the
 * queue is full (on_drain resumes) or it is done. */
static void model_pump(fake *f) {
  while (f->model_tx && f->conn && !f->model_await_ack) {
    if (!f->model_has_msg) {
      if (xf_tensor_sender_next(f->model_tx, &f->model_msg) != XF_OK) return;
      f->model_has_msg = true;
    }
    xf_err rc = xf_conn_send(f->conn, &f->model_msg.env, NULL);
    if (rc == XF_ERANGE) return;
    assert_int_equal(rc, XF_OK);
    f->model_has_msg = false;
    if (f->model_msg.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) f->model_await_ack = true;
  }
}

static xf_err update_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                          xf_errctx *ctx) {
  fake *f = user;
  if (!f->update || offset + len > f->update_len) return xf_fail(ctx, XF_ERANGE, "overflow");
  memcpy(f->update + offset, data, len);
  return XF_OK;
}

static void on_update_frame(fake *f, xf_conn *c, const Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = XF_OK;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
    store(f, env);
    f->update_begins++;
    f->chunks_this_conn = 0;
    f->first_offset_this_conn = UINT64_MAX;
    if (f->refuse_updates > 0) { /* a coordinator that does not hold the task now */
      f->refuse_updates--;
      xf_session_refuse_stream(c, env->tensor_begin->stream_id, XF_EINVAL,
                               "job %s round %u is not a task you hold here now",
                               env->tensor_begin->job_id, (unsigned)env->tensor_begin->round);
      break;
    }
    if (f->update_rx && f->update_complete &&
        (strcmp(f->update_job, env->tensor_begin->job_id) != 0 ||
         f->update_round != env->tensor_begin->round)) {
      /* Another task's update, after the last one was delivered. */
      xf_tensor_receiver_free(f->update_rx);
      f->update_rx = NULL;
      free(f->update);
      f->update = NULL;
      f->update_complete = false;
    }
    if (!f->update_rx) {
      assert_int_equal(xf_tensor_receiver_new(64u * MIB, update_sink, f, &f->update_rx, NULL),
                       XF_OK);
      f->update_len = env->tensor_begin->total_bytes;
      f->update = calloc(1, f->update_len ? f->update_len : 1);
      snprintf(f->update_job, sizeof(f->update_job), "%s", env->tensor_begin->job_id);
      f->update_round = env->tensor_begin->round;
    }
    rc = xf_tensor_receiver_begin(f->update_rx, env->tensor_begin, &err);
    if (rc == XF_OK) send_ack(f, f->update_rx);
    break;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    if (f->first_offset_this_conn == UINT64_MAX)
      f->first_offset_this_conn = env->tensor_chunk->offset;
    rc = xf_tensor_receiver_chunk(f->update_rx, env->tensor_chunk, &err);
    f->chunks_this_conn++;
    if (rc == XF_OK && f->drop_after_chunks && !f->dropped &&
        f->chunks_this_conn == f->drop_after_chunks) {
      f->dropped = true;
      xf_conn_close(c);
    }
    break;
  default: /* TensorEnd */
    store(f, env);
    rc = xf_tensor_receiver_end(f->update_rx, env->tensor_end, &err);
    if (rc == XF_OK) {
      f->update_complete = true;
      f->updates_complete++;
      send_ack(f, f->update_rx);
    }
    break;
  }
  if (rc != XF_OK) snprintf(f->rx_error, sizeof(f->rx_error), "%s", err.msg);
}

static xf_err fk_connect(xf_conn *c, const xf_spiffe_id *peer) {
  fake *f = cur;
  assert_int_equal(peer->kind, XF_PKI_KIND_SITE);
  assert_string_equal(peer->name, "eu-berlin");
  /* A site's new session replaces its old one (docs/protocol.md). */
  if (f->conn) xf_conn_close(f->conn);
  f->conn = c;
  return xf_session_start(&f->session, c, "coordinator", 0, NULL);
}

static void fk_frame(xf_conn *c, const Xfed__Envelope *env) {
  fake *f = cur;
  if (c != f->conn) return;
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(&f->session, c, env, &ev, &err) != XF_OK)
    fail_msg("fake coordinator session: %s", err.msg);
  if (ev == XF_SESSION_OPENED) f->sessions++;
  if (ev != XF_SESSION_FRAME) return;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_ACK:
    if (f->model_tx && env->tensor_ack->stream_id == f->model_stream) {
      assert_int_equal(xf_tensor_sender_resume(f->model_tx, env->tensor_ack->next_offset, NULL),
                       XF_OK);
      if (f->model_await_ack) {
        f->model_await_ack = false;
        model_pump(f);
      } else if (env->tensor_ack->next_offset == f->model_len) {
        f->model_final_acks++;
      }
      return;
    }
    store(f, env);
    return;
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_END:
    on_update_frame(f, c, env);
    return;
  case XFED__ENVELOPE__BODY_SITE_ANNOUNCE:
    store(f, env);
    if (f->refuse_sessions > 0) {
      f->refuse_sessions--;
      xf_session_refuse(c, XFED__REFUSAL__REASON__NOT_AUTHORIZED,
                        "site eu-berlin may not join today");
    }
    return;
  default:
    store(f, env);
    return;
  }
}

static void fk_drain(xf_conn *c) {
  (void)c;
  model_pump(cur);
}

static void fk_close(xf_conn *c, const xf_conn_reason *why) {
  (void)why;
  fake *f = cur;
  f->closes++;
  if (c == f->conn) {
    f->conn = NULL;
    f->model_has_msg = false;
    f->model_await_ack = false;
  }
}

static void on_tick(uv_timer_t *t) { (void)t; }

/* Prints the site's log when a test fails, so the reason is in the output. */
static void show_log(const fake *f) {
  FILE *in = fopen(f->log_path, "r");
  if (!in) return;
  fprintf(stderr, "--- the site's log (%s):\n", f->log_path);
  char line[2048];
  while (fgets(line, sizeof(line), in)) fputs(line, stderr);
  fprintf(stderr, "---\n");
  fclose(in);
}

static char *read_log(const fake *f) {
  FILE *in = fopen(f->log_path, "r");
  if (!in) return strdup("");
  char *text = NULL;
  size_t cap = 0, len = 0;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) {
    if (len + n + 1 > cap) {
      cap = (len + n + 1) * 2;
      text = realloc(text, cap);
      assert_non_null(text);
    }
    memcpy(text + len, buf, n);
    len += n;
  }
  fclose(in);
  if (!text) return strdup("");
  text[len] = '\0';
  return text;
}

static int count_in_log(const fake *f, const char *needle) {
  char *text = read_log(f);
  int n = 0;
  for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
  free(text);
  return n;
}

/* Reaps the site if it has exited; true when it has. */
static bool site_reaped(fake *f) {
  if (f->pid <= 0) return true;
  int ws;
  pid_t got = waitpid(f->pid, &ws, WNOHANG);
  if (got != f->pid) return false;
  f->exit_status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
  f->pid = 0;
  return true;
}

typedef bool (*fake_pred)(fake *f, const void *arg);

/* Runs the fake coordinator's loop until pred holds; fails the test (with
 * the site's log) after timeout_ms or when the site exits meanwhile. */
static void run_until(fake *f, fake_pred pred, const void *arg, int timeout_ms, const char *what) {
  uint64_t end = uv_hrtime() / 1000000u + (uint64_t)timeout_ms;
  while (!pred(f, arg)) {
    if (site_reaped(f)) {
      show_log(f);
      fail_msg("waiting for %s: the site exited with status %d", what, f->exit_status);
    }
    if (uv_hrtime() / 1000000u > end) {
      show_log(f);
      fail_msg("waiting for %s: nothing after %d ms", what, timeout_ms);
    }
    uv_run(&f->loop, UV_RUN_ONCE);
  }
}

/* Runs the loop for ms milliseconds. */
static void run_for(fake *f, int ms) {
  uint64_t end = uv_hrtime() / 1000000u + (uint64_t)ms;
  while (uv_hrtime() / 1000000u < end) uv_run(&f->loop, UV_RUN_ONCE);
}

static bool has_body(fake *f, const void *arg) {
  Xfed__Envelope__BodyCase want = *(const Xfed__Envelope__BodyCase *)arg;
  for (int i = 0; i < f->n_inbox; i++)
    if (!f->taken[i] && f->inbox[i]->body_case == want) return true;
  return false;
}

/* The first unread frame with that body, waiting for it; owned by f. */
static const Xfed__Envelope *expect_body(fake *f, Xfed__Envelope__BodyCase want) {
  char what[64];
  snprintf(what, sizeof(what), "a frame with body %d", (int)want);
  run_until(f, has_body, &want, WAIT_MS, what);
  for (int i = 0; i < f->n_inbox; i++)
    if (!f->taken[i] && f->inbox[i]->body_case == want) {
      f->taken[i] = true;
      return f->inbox[i];
    }
  return NULL;
}

static int count_body(const fake *f, Xfed__Envelope__BodyCase want) {
  int n = 0;
  for (int i = 0; i < f->n_inbox; i++) n += f->inbox[i]->body_case == want;
  return n;
}

static bool session_count_at_least(fake *f, const void *arg) {
  return f->sessions >= *(const int *)arg && f->conn;
}

static bool update_complete(fake *f, const void *arg) {
  (void)arg;
  return f->update_complete;
}

static bool site_exited(fake *f, const void *arg) {
  (void)arg;
  return site_reaped(f);
}

static bool log_has(fake *f, const void *arg) { return count_in_log(f, arg) > 0; }

static int write_file(const char *path, const char *text) {
  FILE *out = fopen(path, "w");
  if (!out) return -1;
  int ok = fputs(text, out) >= 0;
  return fclose(out) == 0 && ok ? 0 : -1;
}

static void copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb");
  assert_non_null(in);
  int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  assert_true(fd >= 0);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), in)) > 0) assert_int_equal(write(fd, buf, n), (ssize_t)n);
  fclose(in);
  assert_int_equal(close(fd), 0);
}

/* Runs xfed-site in cwd (NULL: this process's) and fails the test unless it
 * exits 0. */
static void site_cmd_in(fake *f, const char *cwd, const char *arg, ...) {
  xf_test_run r = {0};
  xf_test_exec_opts o = {.path = xfed_site, .unset = "XFED_SITE_DIR", .cwd = cwd,
                         .deadline_s = RUN_DEADLINE_S};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, &r, "xfed-site", arg, ap);
  va_end(ap);
  if (r.status != 0) {
    xf_test_run_show(&r);
    xf_test_run_free(&r);
    fail_msg("xfed-site %s failed in %s", arg, f->dir);
  }
  xf_test_run_free(&r);
}

#define site_cmd(f, ...) site_cmd_in(f, NULL, __VA_ARGS__)

/* Starts `xfed-site run` in the background with its output in log_path,
 * XF_LOG_LEVEL=info and no XF_BACKEND (site.json says cpu, 1 thread). */
static void site_spawn(fake *f) {
  char *env[256];
  int n = 0;
  for (char **e = environ; *e && n < 250; e++)
    if (strncmp(*e, "XF_LOG_LEVEL=", 13) != 0 && strncmp(*e, "XF_BACKEND=", 11) != 0 &&
        strncmp(*e, "XFED_SITE_DIR=", 14) != 0)
      env[n++] = *e;
  env[n++] = "XF_LOG_LEVEL=info";
  env[n] = NULL;
  char *argv[] = {"xfed-site", "run", "--dir", f->site_dir, NULL};
  int fd = open(f->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fd >= 0 && devnull >= 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    if (dup2(devnull, 0) < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
    execve(xfed_site, argv, env);
    _exit(127);
  }
  close(fd);
  close(devnull);
  f->pid = pid;
  f->exit_status = -1;
}

/* Sends SIGTERM (or SIGINT) and waits for the site to exit: status 0
 * within within_ms, the stop logged, and no sanitizer report. */
static void site_stop_with(fake *f, int signum, int within_ms) {
  assert_true(f->pid > 0);
  uint64_t t0 = uv_hrtime();
  assert_int_equal(kill(f->pid, signum), 0);
  run_until(f, site_exited, NULL, within_ms, "the site to exit after the signal");
  double took = (double)(uv_hrtime() - t0) / 1e9;
  if (f->exit_status != 0) {
    show_log(f);
    fail_msg("the site exited with status %d after SIGTERM", f->exit_status);
  }
  if (count_in_log(f, "Sanitizer") || count_in_log(f, "runtime error:")) {
    show_log(f);
    fail_msg("the sanitizer reported a problem in the site");
  }
  assert_true(count_in_log(f, signum == SIGTERM ? "event=site_stopping signal=TERM"
                                                : "event=site_stopping signal=INT") == 1);
  assert_true(count_in_log(f, "event=site_stopped") == 1);
  fprintf(stderr, "  site stopped %.2f s after SIG%s\n", took, signum == SIGTERM ? "TERM" : "INT");
}

static void site_stop(fake *f, int within_ms) { site_stop_with(f, SIGTERM, within_ms); }

static int fixture_setup(void **state) {
  fake *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  f->exit_status = -1;
  *state = f;
  cur = f;
  return 0;
}

static int fixture_teardown(void **state) {
  fake *f = *state;
  if (!f) return 0;
  if (f->pid > 0) {
    kill(f->pid, SIGKILL);
    waitpid(f->pid, NULL, 0);
  }
  if (!f->passed && f->log_path[0]) show_log(f);
  if (f->loop_ready) {
    if (f->conn) xf_conn_close(f->conn);
    if (f->listener) xf_listener_close(f->listener, NULL);
    f->listener = NULL;
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_loop_close(&f->loop);
  }
  xf_tls_free(f->tls);
  for (int i = 0; i < f->n_inbox; i++) xfed__envelope__free_unpacked(f->inbox[i], NULL);
  xf_tensor_sender_free(f->model_tx);
  xf_tensor_receiver_free(f->update_rx);
  free(f->model);
  free(f->update);
  if (f->dir[0]) xf_test_remove_tree(f->dir);
  free(f);
  cur = NULL;
  return 0;
}

/* Listens, makes the site directory (init with this port, dataset tiny with
 * tag t1) and starts the site; returns once its session is open. */
static void fake_start(fake *f) {
  assert_int_equal(xf_test_mkdtemp(f->dir, sizeof(f->dir), "site-daemon-t"), 0);
  assert_int_equal(uv_loop_init(&f->loop), 0);
  f->loop_ready = true;
  uv_timer_init(&f->loop, &f->tick);
  uv_timer_start(&f->tick, on_tick, 20, 20);
  char cert[700], key[700], ca[700], crl[700];
  snprintf(cert, sizeof(cert), "%s/issued/coord.crt", fed_dir);
  snprintf(key, sizeof(key), "%s/issued/coord.key", fed_dir);
  snprintf(ca, sizeof(ca), "%s/ca.crt", fed_dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", fed_dir);
  xf_tls_config tc = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tls_new(&tc, &f->tls, &err) != XF_OK) fail_msg("tls: %s", err.msg);
  xf_conn_opts o = {.on_connect = fk_connect, .on_frame = fk_frame, .on_drain = fk_drain,
                    .on_close = fk_close, .user = f};
  if (xf_listen(&f->loop, f->tls, "127.0.0.1", 0, &o, &f->listener, &err) != XF_OK)
    fail_msg("listen: %s", err.msg);
  f->port = xf_listener_port(f->listener);

  snprintf(f->site_dir, sizeof(f->site_dir), "%s/site", f->dir);
  snprintf(f->data_dir, sizeof(f->data_dir), "%s/data", f->dir);
  snprintf(f->log_path, sizeof(f->log_path), "%s/site.log", f->dir);
  char p[700];
  assert_int_equal(mkdir(f->data_dir, 0755), 0);
  snprintf(p, sizeof(p), "%s/train.csv", f->data_dir);
  assert_int_equal(write_file(p, "a,b,label\n1,0,0\n0,1,1\n1,1,2\n2,0,0\n0,2,1\n2,2,2\n"), 0);
  snprintf(p, sizeof(p), "%s/test.csv", f->data_dir);
  assert_int_equal(write_file(p, "a,b,label\n1,0.5,0\n0,1,1\n1,1.5,2\n"), 0);
  char coord[64];
  snprintf(coord, sizeof(coord), "127.0.0.1:%d", f->port);
  /* The site's certificate and key are kept in the site directory, as an
   * operator keeps them, and given to init relative to where it runs there:
   * init stores them absolute, so the daemon finds them whatever its
   * working directory. */
  assert_int_equal(mkdir(f->site_dir, 0700), 0);
  static const char *const names[] = {"eu-berlin.crt", "eu-berlin.key"};
  for (int i = 0; i < 2; i++) {
    char from[700], to[700];
    snprintf(from, sizeof(from), "%s/issued/%s", fed_dir, names[i]);
    snprintf(to, sizeof(to), "%s/%s", f->site_dir, names[i]);
    copy_file(from, to);
  }
  site_cmd_in(f, f->site_dir, "init", "--dir", f->site_dir, "--name", "eu-berlin", "--region",
              "eu", "--coordinator", coord, "--cert", "eu-berlin.crt", "--key", "eu-berlin.key",
              "--ca", ca, "--crl", crl, "--threads", "1", "--backend", "cpu", NULL);
  site_cmd(f, "dataset", "add", "--dir", f->site_dir, "--name", "tiny", "--path", f->data_dir,
           "--tag", "t1", "--tag", "demo", "--classification", "public", NULL);
  site_spawn(f);
  int one = 1;
  run_until(f, session_count_at_least, &one, WAIT_MS, "the site's session");
}

/* ---- models, offers and the expected result ---------------------------------------------- */

static void parse_spec(const char *json, xf_jobspec *spec) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(json, strlen(json), "test spec", spec, &err) != XF_OK)
    fail_msg("test spec: %s: %s", err.field, err.msg);
}

/* The global model of a spec for the tiny data (1x1x2, 3 classes), as a
 * model file in f->model. */
static void make_model(fake *f, const char *spec_json, uint64_t init_seed) {
  xf_jobspec spec;
  parse_spec(spec_json, &spec);
  xf_model_spec ms;
  assert_int_equal(xf_jobspec_model_spec(&spec, 1, 1, 2, 3, &ms, NULL), XF_OK);
  xf_model *m;
  assert_int_equal(xf_model_create(&ms, &m, NULL), XF_OK);
  size_t n = xf_model_num_params(m);
  float *params = malloc(n * sizeof(float));
  assert_non_null(params);
  xf_model_init_params(m, init_seed, params);
  xf_params_digest(params, n, &f->model_digest);
  uint8_t *bytes;
  size_t len;
  assert_int_equal(xf_checkpoint_encode(m, params, &bytes, &len, NULL), XF_OK);
  free(f->model);
  f->model = malloc(len);
  assert_non_null(f->model);
  memcpy(f->model, bytes, len);
  f->model_len = len;
  xf_free(bytes);
  free(params);
  xf_model_free(m);
}

typedef struct offer {
  const char *job;
  uint32_t round, attempt, model_round;
  const char *spec;
  bool evaluate_only;
  int64_t deadline_in_ms; /* 0: none */
  bool send_model;
  const uint8_t *digest; /* NULL: the model's */
  Xfed__Residency *residency; /* NULL: a coordinator without a policy */
  const uint8_t *seal_key;    /* the aggregator's sealing key (32 bytes), or NULL */
  bool hold;                  /* wait for TaskGo before training */
  uint64_t model_stream_id;   /* 0: 500 */
  uint64_t update_stream_id;  /* 0: the site's default */
  Xfed__SecAggSetup *secagg;  /* NULL: none in the offer */
} offer;

/* Sends TaskOffer and, when asked, the MODEL stream (id 500 unless the
 * offer names another) after it. */
static void send_offer(fake *f, const offer *o) {
  Xfed__TaskOffer t = XFED__TASK_OFFER__INIT;
  t.job_id = (char *)o->job;
  t.round = o->round;
  t.attempt = o->attempt;
  t.model_round = o->model_round;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  t.deadline_unix_ms = o->deadline_in_ms ? (uint64_t)(now + o->deadline_in_ms) : 0;
  t.model_digest.len = XF_DIGEST_BYTES;
  t.model_digest.data = (uint8_t *)(o->digest ? o->digest : f->model_digest.bytes);
  t.params_json = (char *)o->spec;
  t.evaluate_only = o->evaluate_only;
  t.model_stream_id = o->model_stream_id ? o->model_stream_id : 500;
  t.residency = o->residency;
  t.hold = o->hold;
  t.update_stream_id = o->update_stream_id;
  t.secagg = o->secagg;
  if (o->seal_key) {
    t.seal_key.data = (uint8_t *)o->seal_key;
    t.seal_key.len = XF_SEAL_PUBLICKEYBYTES;
  }
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_OFFER;
  env.task_offer = &t;
  fake_send(f, &env);
  if (!o->send_model) return;
  xf_tensor_sender_free(f->model_tx);
  f->model_tx = NULL;
  f->model_stream = t.model_stream_id;
  xf_tensor_desc desc = {.stream_id = t.model_stream_id, .kind = XFED__TENSOR_BEGIN__KIND__MODEL,
                         .dtype = XFED__TENSOR_BEGIN__DTYPE__U8, .element_count = f->model_len,
                         .job_id = o->job, .round = o->round, .attempt = o->attempt};
  assert_int_equal(xf_tensor_sender_new(&desc, f->model, f->model_len, 0, &f->model_tx, NULL),
                   XF_OK);
  f->model_has_msg = f->model_await_ack = false;
  model_pump(f);
}

static void send_go(fake *f, const char *job, uint32_t round, uint32_t attempt,
                    Xfed__SecAggSetup *secagg) {
  Xfed__TaskGo g = XFED__TASK_GO__INIT;
  g.job_id = (char *)job;
  g.round = round;
  g.attempt = attempt;
  g.secagg = secagg;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_GO;
  env.task_go = &g;
  fake_send(f, &env);
}

static void send_cancel(fake *f, const char *job, uint32_t round, uint32_t attempt) {
  Xfed__TaskCancel c = XFED__TASK_CANCEL__INIT;
  c.job_id = (char *)job;
  c.round = round;
  c.attempt = attempt;
  c.reason = "round closed without the site";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TASK_CANCEL;
  env.task_cancel = &c;
  fake_send(f, &env);
}

/* What the site must compute: the received model evaluated on the test
 * split, then trained as the spec says with the shuffle seed of
 * docs/protocol.md, on the cpu backend with one thread. */
typedef struct expected {
  double test_loss, test_accuracy, train_loss;
  float *delta;
  size_t n;
} expected;

static void last_loss(const xf_epoch_report *r, void *user) { *(double *)user = r->train_loss; }

/* Options the caller sets beyond the spec's sgd fields (NULL: none). */
typedef void (*adjust_fn)(xf_train_options *o);

static void expect_training_adjusted(const fake *f, const char *spec_json, uint32_t round,
                                     adjust_fn adjust, expected *out);

static void expect_training(const fake *f, const char *spec_json, uint32_t round, expected *out) {
  expect_training_adjusted(f, spec_json, round, NULL, out);
}

static void expect_training_adjusted(const fake *f, const char *spec_json, uint32_t round,
                                     adjust_fn adjust, expected *out) {
  xf_jobspec spec;
  parse_spec(spec_json, &spec);
  /* The seed, computed here from the doc's words, not with the daemon's code. */
  uint8_t seed_in[12 + 9];
  for (int i = 0; i < 8; i++) seed_in[i] = (uint8_t)(spec.seed >> (8 * i));
  for (int i = 0; i < 4; i++) seed_in[8 + i] = (uint8_t)(round >> (8 * i));
  memcpy(seed_in + 12, "eu-berlin", 9);
  xf_digest sd;
  xf_digest_buf(seed_in, sizeof(seed_in), &sd);
  uint64_t seed = 0;
  for (int i = 0; i < 8; i++) seed |= (uint64_t)sd.bytes[i] << (8 * i);

  xf_dataset train = {0}, test = {0};
  assert_int_equal(xf_dataset_load_dir(f->data_dir, &train, &test, NULL), XF_OK);
  xf_model *m;
  float *global;
  assert_int_equal(xf_checkpoint_decode(f->model, f->model_len, &m, &global, NULL), XF_OK);
  xf_backend *b;
  xf_backend_options bo = {XF_BACKEND_CPU, 1, 0};
  assert_int_equal(xf_backend_open(&bo, &b, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(b, m, (int)spec.local.batch_size, &net, NULL), XF_OK);
  assert_int_equal(xf_net_set_params(net, global), XF_OK);
  xf_samples tr = {train.x, train.y, train.n, train.features};
  xf_samples te = {test.x, test.y, test.n, test.features};
  assert_int_equal(xf_evaluate(net, &te, &out->test_loss, &out->test_accuracy, NULL), XF_OK);
  xf_train_options o = {.epochs = (int)spec.local.epochs,
                        .batch_size = (int)spec.local.batch_size,
                        .sgd = {.lr = (float)spec.local.lr,
                                .momentum = (float)spec.local.momentum,
                                .weight_decay = (float)spec.local.weight_decay,
                                .prox_mu = (float)spec.local.prox_mu},
                        .seed = seed,
                        .on_epoch = last_loss,
                        .user = &out->train_loss};
  if (adjust) adjust(&o);
  assert_int_equal(xf_train(net, &tr, &o, NULL), XF_OK);
  out->n = xf_model_num_params(m);
  out->delta = malloc(out->n * sizeof(float));
  assert_non_null(out->delta);
  assert_int_equal(xf_net_get_params(net, out->delta), XF_OK);
  for (size_t i = 0; i < out->n; i++) out->delta[i] -= global[i];
  xf_net_free(net);
  xf_backend_close(b);
  xf_free(global);
  xf_model_free(m);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
}

static void expect_refusal(fake *f, Xfed__TaskRefusal__Reason reason, const char *job,
                           const char *needle) {
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TASK_REFUSAL);
  const Xfed__TaskRefusal *r = e->task_refusal;
  if (r->reason != reason || strcmp(r->job_id, job) != 0 || !strstr(r->details, needle)) {
    show_log(f);
    fail_msg("refusal of job %s: reason %d details \"%s\"; expected reason %d naming \"%s\"",
             r->job_id, (int)r->reason, r->details, (int)reason, needle);
  }
}

static void expect_accept(fake *f, const char *job, uint32_t round, uint32_t attempt) {
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TASK_ACCEPT);
  assert_string_equal(e->task_accept->job_id, job);
  assert_int_equal(e->task_accept->round, round);
  assert_int_equal(e->task_accept->attempt, attempt);
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void announce_lists_the_registry_and_bad_frames_get_errors(void **state) {
  fake *f = *state;
  fake_start(f);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  const Xfed__SiteAnnounce *a = e->site_announce;
  assert_string_equal(a->site, "eu-berlin");
  assert_string_equal(a->region, "eu");
  assert_string_equal(a->backend, "cpu");
  assert_int_equal(a->threads, 1);
  assert_int_equal(a->n_datasets, 1);
  const Xfed__SiteAnnounce__Dataset *ds = a->datasets[0];
  assert_string_equal(ds->name, "tiny");
  assert_string_equal(ds->classification, "public");
  assert_int_equal(ds->n_tags, 2);
  assert_string_equal(ds->tags[0], "demo");
  assert_string_equal(ds->tags[1], "t1");
  assert_int_equal(ds->train_records, 6);
  assert_int_equal(ds->test_records, 3);
  assert_int_equal(ds->classes, 3);
  assert_int_equal(ds->height, 1);
  assert_int_equal(ds->width, 1);
  assert_int_equal(ds->channels, 2);
  assert_int_equal(a->n_sites, 0);

  /* Frames a site does not take, or that match nothing, are answered with
   * Error; the session goes on. */
  Xfed__Metrics m = XFED__METRICS__INIT;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  fake_send(f, &env);
  e = expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(e->error->code, XF_EUNSUPPORTED);
  assert_non_null(strstr(e->error->message, "metrics"));
  uint8_t bytes[4] = {1, 2, 3, 4};
  Xfed__TensorChunk c = XFED__TENSOR_CHUNK__INIT;
  c.stream_id = 999;
  c.data.len = sizeof(bytes);
  c.data.data = bytes;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &c;
  fake_send(f, &env);
  e = expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(e->error->code, XF_EINVAL);
  assert_non_null(strstr(e->error->message, "999"));
  Xfed__TaskOffer o = XFED__TASK_OFFER__INIT;
  o.job_id = "7";
  o.round = 1;
  env.body_case = XFED__ENVELOPE__BODY_TASK_OFFER;
  env.task_offer = &o; /* no model digest */
  fake_send(f, &env);
  e = expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(e->error->code, XF_EFORMAT);
  assert_non_null(strstr(e->error->message, "model_digest"));
  send_cancel(f, "nothing", 1, 1); /* quietly ignored */
  run_for(f, 200);
  assert_non_null(f->conn);
  assert_int_equal(f->sessions, 1);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_ERROR), 3);
  site_stop(f, 10000);
  f->passed = true;
}

static void task_is_trained_and_its_update_matches_local_training(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 11);
  offer o = {.job = "7", .round = 2, .attempt = 1, .model_round = 1, .spec = SPEC_LOGREG,
             .deadline_in_ms = 600000, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "7", 2, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  const Xfed__Metrics *m = e->metrics;
  expected want;
  expect_training(f, SPEC_LOGREG, 2, &want);
  assert_int_equal(f->model_final_acks, 1); /* the model was acknowledged in full */
  assert_string_equal(m->job_id, "7");
  assert_int_equal(m->round, 2);
  assert_int_equal(m->attempt, 1);
  assert_string_equal(m->site, "eu-berlin");
  assert_string_equal(m->region, "eu");
  assert_true(m->has_train && m->has_test);
  assert_int_equal(m->model_round, 1);
  assert_int_equal(m->samples, 6);
  assert_int_equal(m->bytes_down, f->model_len);
  assert_int_equal(m->bytes_up, want.n * sizeof(float));
  assert_true(m->seconds >= 0 && m->seconds < 60);
  /* Bit for bit: the same kernels, data, seed and thread count. */
  assert_true(m->test_loss == want.test_loss);
  assert_true(m->test_accuracy == want.test_accuracy);
  assert_true(m->train_loss == want.train_loss);

  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  const Xfed__TensorBegin *b = e->tensor_begin;
  assert_int_equal(b->stream_id, (2u << 16) | (1u << 1) | 1u);
  assert_int_equal(b->kind, XFED__TENSOR_BEGIN__KIND__UPDATE);
  assert_int_equal(b->dtype, XFED__TENSOR_BEGIN__DTYPE__F32);
  assert_int_equal(b->element_count, want.n);
  assert_int_equal(b->total_bytes, want.n * sizeof(float));
  assert_int_equal(b->weight, 6);
  assert_int_equal(b->attempt, 1);
  assert_int_equal(b->round, 2);
  assert_string_equal(b->job_id, "7");
  run_until(f, update_complete, NULL, WAIT_MS, "the whole update");
  assert_string_equal(f->rx_error, "");
  assert_int_equal(f->update_len, want.n * sizeof(float));
  assert_memory_equal(f->update, want.delta, want.n * sizeof(float));
  free(want.delta);

  /* After the job's last round: evaluate only, Metrics with the test
   * figures and no update. */
  o = (offer){.job = "7", .round = 4, .attempt = 1, .model_round = 3, .spec = SPEC_LOGREG,
              .evaluate_only = true, .deadline_in_ms = 600000, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "7", 4, 1);
  e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  m = e->metrics;
  assert_true(m->has_test && !m->has_train);
  assert_int_equal(m->round, 4);
  assert_int_equal(m->model_round, 3);
  assert_int_equal(m->bytes_up, 0);
  assert_true(m->test_loss == want.test_loss); /* the same model as before */
  run_for(f, 300);
  assert_int_equal(f->update_begins, 1);
  assert_int_equal(count_in_log(f, "event=dataset_loaded"), 1); /* cached across rounds */
  site_stop(f, 10000);
  f->passed = true;
}

/* SPEC_ADAMW's optimizer, written out from jobs.md: round 2 of a step
 * schedule with gamma 0.5 every round trains at lr 0.1 * 0.5. */
static void adamw_round_two(xf_train_options *o) {
  o->optimizer = XF_OPTIMIZER_ADAMW;
  o->sgd = (xf_sgd_params){.lr = 0.05f, .weight_decay = 0.01f};
  o->beta1 = 0.9f;
  o->beta2 = 0.99f;
  o->eps = 1e-8f;
  o->clip_norm = 1.0;
}

static void adamw_task_trains_at_its_rounds_scheduled_rate(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_ADAMW, 13);
  offer o = {.job = "9", .round = 2, .attempt = 1, .model_round = 1, .spec = SPEC_ADAMW,
             .deadline_in_ms = 600000, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "9", 2, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  expected want;
  expect_training_adjusted(f, SPEC_ADAMW, 2, adamw_round_two, &want);
  assert_true(e->metrics->train_loss == want.train_loss);
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->element_count, want.n);
  run_until(f, update_complete, NULL, WAIT_MS, "the whole update");
  assert_int_equal(f->update_len, want.n * sizeof(float));
  /* Bit for bit: AdamW at round 2's rate, not round 1's. */
  assert_memory_equal(f->update, want.delta, want.n * sizeof(float));
  free(want.delta);
  site_stop(f, 10000);
  f->passed = true;
}

/* A declared model travels and trains as a preset does: the site rebuilds
 * it from the model file's layer list, checks it is the spec's, and its
 * update is local training's, bit for bit. */
static void declared_model_task_trains_like_local_training(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_DECLARED, 14);
  offer o = {.job = "11", .round = 1, .attempt = 1, .model_round = 0, .spec = SPEC_DECLARED,
             .deadline_in_ms = 600000, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "11", 1, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  expected want;
  expect_training(f, SPEC_DECLARED, 1, &want);
  assert_true(e->metrics->train_loss == want.train_loss);
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->element_count, want.n);
  assert_int_equal(want.n, 2 * 5 + 5 + 5 * 3 + 3);
  run_until(f, update_complete, NULL, WAIT_MS, "the whole update");
  assert_int_equal(f->update_len, want.n * sizeof(float));
  assert_memory_equal(f->update, want.delta, want.n * sizeof(float));
  free(want.delta);
  site_stop(f, 10000);
  f->passed = true;
}

static void refused_offers_streams_draw_no_error_and_a_wrong_digest_is_refused(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 12);
  /* Each refused offer's model stream follows it, as a coordinator sends
   * it before it reads the refusal: the site lets it go without an Error. */
  char spec[1024];
  snprintf(spec, sizeof(spec), "%s", SPEC_LOGREG);
  char *at = strstr(spec, "\"tiny\"");
  memcpy(at, "\"huge\"", 6);
  offer o = {.job = "1", .round = 1, .attempt = 1, .spec = spec, .send_model = true};
  send_offer(f, &o);
  expect_refusal(f, XFED__TASK_REFUSAL__REASON__NO_DATASET, "1", "huge");

  /* What each refusal says is site/offer.c's (tests/test_site_offer.c);
   * here, that the frames of refused offers' streams draw no Error. */
  o = (offer){.job = "3", .round = 1, .attempt = 1, .spec = SPEC_LOGREG,
              .deadline_in_ms = -5000, .send_model = true};
  send_offer(f, &o);
  expect_refusal(f, XFED__TASK_REFUSAL__REASON__DEADLINE_TOO_SHORT, "3", "deadline");

  /* A model whose parameters are not the offer's digest: accepted (the
   * model comes after the answer), then refused once it is checked. */
  uint8_t wrong[XF_DIGEST_BYTES];
  memset(wrong, 0xab, sizeof(wrong));
  o = (offer){.job = "8", .round = 1, .attempt = 1, .spec = SPEC_LOGREG, .send_model = true,
              .digest = wrong};
  send_offer(f, &o);
  expect_accept(f, "8", 1, 1);
  expect_refusal(f, XFED__TASK_REFUSAL__REASON__UNSUPPORTED, "8", "digest");
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(e->error->code, XF_EINTEGRITY);
  assert_non_null(strstr(e->error->message, "job 8 round 1"));
  run_for(f, 200);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_ERROR), 1); /* nothing for the streams */
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 0);
  assert_int_equal(f->update_begins, 0);
  assert_int_equal(f->sessions, 1);
  site_stop(f, 10000);
  f->passed = true;
}

static void dropped_link_mid_upload_resumes_from_the_acknowledged_offset(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_MLP_BIG, 13);
  expected want;
  expect_training(f, SPEC_MLP_BIG, 1, &want);
  size_t total = want.n * sizeof(float);
  assert_true(total > 4u * MIB); /* five chunks */
  f->drop_after_chunks = 2;
  offer o = {.job = "9", .round = 1, .attempt = 2, .spec = SPEC_MLP_BIG, .deadline_in_ms = 600000,
             .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "9", 1, 2);
  expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  uint64_t stream = e->tensor_begin->stream_id;
  assert_int_equal(stream, (1u << 16) | (2u << 1) | 1u);
  /* We close the link after two chunks; the site redials after its
   * backoff (0.5 s +- 25 %) and opens a second session. */
  int two = 2;
  run_until(f, session_count_at_least, &two, WAIT_MS, "the site's second session");
  assert_true(f->dropped);
  assert_int_equal(xf_tensor_receiver_next_offset(f->update_rx), 2u * MIB);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  /* The same job, round, attempt and model again: the site accepts, sends
   * TensorBegin again and goes on from our acknowledgement. */
  send_offer(f, &o);
  expect_accept(f, "9", 1, 2);
  run_until(f, update_complete, NULL, WAIT_MS, "the resumed update");
  assert_string_equal(f->rx_error, "");
  assert_int_equal(f->update_begins, 2);
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->stream_id, stream);
  assert_int_equal(e->tensor_begin->weight, 6);
  assert_int_equal(f->first_offset_this_conn, 2u * MIB);
  assert_int_equal(f->chunks_this_conn, 3);
  assert_memory_equal(f->update, want.delta, total);
  free(want.delta);
  /* Trained once; Metrics once; the re-sent model was acknowledged in full
   * at once. */
  assert_int_equal(count_in_log(f, "event=task_training"), 1);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 1);
  assert_int_equal(count_in_log(f, "event=session_open"), 2);
  assert_int_equal(count_in_log(f, "event=redial"), 1);
  site_stop(f, 10000);
  f->passed = true;
}

/* A restarted aggregator offers the task again with a new sealing key (the
 * old one died with it): the site seals its update again, to the new key,
 * and sends it from the start. */
static void sealed_update_follows_a_new_key_after_the_aggregator_restarts(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_MLP_BIG, 13);
  expected want;
  expect_training(f, SPEC_MLP_BIG, 1, &want);
  size_t total = want.n * sizeof(float);
  uint8_t pk_a[XF_SEAL_PUBLICKEYBYTES], sk_a[XF_SEAL_SECRETKEYBYTES];
  uint8_t pk_b[XF_SEAL_PUBLICKEYBYTES], sk_b[XF_SEAL_SECRETKEYBYTES];
  assert_int_equal(xf_seal_keypair(pk_a, sk_a), XF_OK);
  assert_int_equal(xf_seal_keypair(pk_b, sk_b), XF_OK);
  f->drop_after_chunks = 2;
  offer o = {.job = "9", .round = 1, .attempt = 2, .spec = SPEC_MLP_BIG, .deadline_in_ms = 600000,
             .send_model = true, .seal_key = pk_a};
  send_offer(f, &o);
  expect_accept(f, "9", 1, 2);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->sealed_by.len, XF_SEAL_PUBLICKEYBYTES);
  uint8_t epk_a[XF_SEAL_PUBLICKEYBYTES];
  memcpy(epk_a, e->tensor_begin->sealed_by.data, sizeof(epk_a));
  int two = 2;
  run_until(f, session_count_at_least, &two, WAIT_MS, "the site's second session");
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  /* "Restarted": nothing of the first stream is kept, and a new key. */
  xf_tensor_receiver_free(f->update_rx);
  f->update_rx = NULL;
  free(f->update);
  f->update = NULL;
  o.seal_key = pk_b;
  send_offer(f, &o);
  expect_accept(f, "9", 1, 2);
  run_until(f, update_complete, NULL, WAIT_MS, "the update sealed to the new key");
  assert_string_equal(f->rx_error, "");
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->sealed_by.len, XF_SEAL_PUBLICKEYBYTES);
  assert_memory_not_equal(e->tensor_begin->sealed_by.data, epk_a, XF_SEAL_PUBLICKEYBYTES);
  /* It opens with the new key, chunk by chunk, to the update trained once. */
  char ctx[256];
  size_t ctx_len = xf_seal_stream_context(ctx, sizeof(ctx), "9", 1, 2, "eu-berlin");
  xf_seal_receiver *rx = NULL;
  assert_int_equal(xf_seal_receiver_new(sk_b, e->tensor_begin->sealed_by.data,
                                        (const uint8_t *)ctx, ctx_len, &rx),
                   XF_OK);
  uint8_t *plain = malloc(total);
  assert_non_null(plain);
  uint64_t at = 0, sealed_at = 0;
  while (sealed_at < f->update_len) {
    size_t chunk = (size_t)(f->update_len - sealed_at);
    if (chunk > XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES) chunk = XF_SEAL_STREAM_CHUNK + XF_SEAL_ABYTES;
    assert_true(at + chunk - XF_SEAL_ABYTES <= total);
    assert_int_equal(xf_seal_open_chunk(rx, at, f->update + sealed_at, chunk, plain + at), XF_OK);
    at += chunk - XF_SEAL_ABYTES;
    sealed_at += chunk;
  }
  xf_seal_receiver_free(rx);
  assert_int_equal(at, total);
  assert_memory_equal(plain, want.delta, total);
  free(plain);
  free(want.delta);
  assert_int_equal(count_in_log(f, "event=task_training"), 1);
  assert_int_equal(count_in_log(f, "event=update_resealed"), 1);
  site_stop(f, 10000);
  f->passed = true;
}

/* A task of another job while one trains is queued behind it (its model
 * in, waiting for the worker); once the site holds XF_SITE_TASKS_MAX tasks
 * the next offer is refused BUSY, naming them. Withdrawn, the training
 * stops and the queued task trains and reports. */
static void busy_while_training_and_cancel_frees_the_site(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_MLP_LONG, 14);
  offer o = {.job = "20", .round = 1, .attempt = 1, .spec = SPEC_MLP_LONG, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "20", 1, 1);
  run_until(f, log_has, "event=task_training", WAIT_MS, "training to start");
  /* Another job while training: accepted and queued with its model. */
  make_model(f, SPEC_LOGREG, 15);
  o = (offer){.job = "21", .round = 1, .attempt = 1, .spec = SPEC_LOGREG, .send_model = true,
              .model_stream_id = 501};
  send_offer(f, &o);
  expect_accept(f, "21", 1, 1);
  run_until(f, log_has, "event=model_received job=21", WAIT_MS, "job 21's model");
  /* Six more without their models: eight tasks held. */
  for (int i = 0; i < 6; i++) {
    char job[8];
    snprintf(job, sizeof(job), "%d", 22 + i);
    o = (offer){.job = job, .round = 1, .attempt = 1, .spec = SPEC_LOGREG,
                .model_stream_id = 502 + (uint64_t)i};
    send_offer(f, &o);
    expect_accept(f, job, 1, 1);
  }
  o = (offer){.job = "28", .round = 1, .attempt = 1, .spec = SPEC_LOGREG,
              .model_stream_id = 510};
  send_offer(f, &o);
  expect_refusal(f, XFED__TASK_REFUSAL__REASON__BUSY, "28", "this site holds 8 tasks");
  assert_int_equal(count_in_log(f, "job 20 round 1 attempt 1 (training)"), 1);
  assert_int_equal(count_in_log(f, "job 21 round 1 attempt 1 (queued)"), 1);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 0);
  /* Withdrawn: the site stops training, and the queued task goes next. */
  send_cancel(f, "20", 1, 1);
  run_until(f, log_has, "event=task_result_dropped", WAIT_MS, "the cancelled training to stop");
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_string_equal(e->metrics->job_id, "21");
  run_until(f, update_complete, NULL, WAIT_MS, "the queued task's update");
  assert_string_equal(f->update_job, "21");
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 1);
  site_stop(f, 10000);
  f->passed = true;
}

/* hold: the site answers at once and takes the model, but trains only
 * once TaskGo names the task; a Go for a task it does not hold is an Error
 * naming that task. */
static void held_task_waits_for_go_then_trains(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 11);
  expected want;
  expect_training(f, SPEC_LOGREG, 2, &want);
  offer o = {.job = "40", .round = 2, .attempt = 3, .spec = SPEC_LOGREG, .deadline_in_ms = 600000,
             .send_model = true, .hold = true};
  send_offer(f, &o);
  expect_accept(f, "40", 2, 3);
  run_until(f, log_has, "event=task_held job=40", WAIT_MS, "the model of the held task");
  run_for(f, 500);
  assert_int_equal(f->model_final_acks, 1); /* the model is in */
  assert_int_equal(count_in_log(f, "event=task_training"), 0);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 0);

  send_go(f, "40", 2, 2, NULL); /* another attempt: no such task */
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(e->error->code, XF_ENOENT);
  assert_non_null(strstr(e->error->message, "job 40 round 2 attempt 2"));
  assert_int_equal(count_in_log(f, "event=task_training"), 0);

  send_go(f, "40", 2, 3, NULL);
  e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_string_equal(e->metrics->job_id, "40");
  assert_true(e->metrics->train_loss == want.train_loss);
  run_until(f, update_complete, NULL, WAIT_MS, "the held task's update");
  assert_string_equal(f->rx_error, "");
  assert_int_equal(f->update_len, want.n * sizeof(float));
  assert_memory_equal(f->update, want.delta, want.n * sizeof(float));
  free(want.delta);
  assert_int_equal(count_in_log(f, "event=task_training"), 1);
  site_stop(f, 10000);
  f->passed = true;
}

/* Site-unit privacy with local noise: the site charges its ledger for each
 * update it releases. A held task cancelled before its Go trains nothing and
 * charges nothing; the next round, confirmed, is charged once. */
#define SPEC_LOCAL_DP                                                                    \
  "{\"name\": \"ldp\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 1, \"local\": {\"epochs\": 1,"        \
  " \"batch_size\": 2, \"lr\": 0.1}, \"privacy\": {\"unit\": \"site\", \"mode\": \"local\"," \
  " \"clip\": 1.0, \"noise_multiplier\": 1.0}, \"seed\": 4}"

static char *site_output(fake *f, int want_status, const char *arg, ...);

/* The rounds the site's ledger holds for job on dataset tiny. */
static int ledger_rounds(fake *f, const char *job) {
  char *out = site_output(f, 0, "ledger", "--dir", f->site_dir, "--json", NULL);
  json_error_t je;
  json_t *doc = json_loads(out, 0, &je);
  if (!doc) fail_msg("ledger --json: %s\n%s", je.text, out);
  int rounds = 0;
  for (size_t i = 0; i < json_array_size(doc); i++) {
    json_t *ds = json_array_get(doc, i);
    if (strcmp(json_string_value(json_object_get(ds, "dataset")), "tiny") != 0) continue;
    json_t *jobs = json_object_get(ds, "jobs");
    for (size_t j = 0; j < json_array_size(jobs); j++) {
      json_t *r = json_array_get(jobs, j);
      if (strcmp(json_string_value(json_object_get(r, "job")), job) == 0)
        rounds += (int)json_integer_value(json_object_get(r, "rounds"));
    }
  }
  json_decref(doc);
  free(out);
  return rounds;
}

static void held_task_cancelled_before_go_charges_nothing(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOCAL_DP, 21);
  offer o = {.job = "41", .round = 1, .attempt = 1, .spec = SPEC_LOCAL_DP,
             .deadline_in_ms = 600000, .send_model = true, .hold = true};
  send_offer(f, &o);
  expect_accept(f, "41", 1, 1);
  run_until(f, log_has, "event=task_held job=41", WAIT_MS, "the model of the held task");
  send_cancel(f, "41", 1, 1);
  run_until(f, log_has, "event=task_dropped job=41", WAIT_MS, "the held task to go");
  send_go(f, "41", 1, 1, NULL); /* too late: nothing of it is left */
  expect_body(f, XFED__ENVELOPE__BODY_ERROR);
  assert_int_equal(count_in_log(f, "event=task_training"), 0);
  assert_int_equal(count_in_log(f, "event=privacy_charged"), 0);
  assert_int_equal(ledger_rounds(f, "41"), 0);

  /* The next round, confirmed: trained, charged once, delivered. */
  o.round = 2;
  send_offer(f, &o);
  expect_accept(f, "41", 2, 1);
  run_until(f, log_has, "event=task_held job=41 round=2", WAIT_MS, "round 2's model");
  send_go(f, "41", 2, 1, NULL);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_true(e->metrics->has_epsilon);
  run_until(f, update_complete, NULL, WAIT_MS, "round 2's update");
  assert_int_equal(count_in_log(f, "event=privacy_charged"), 1);
  assert_int_equal(ledger_rounds(f, "41"), 1);
  site_stop(f, 10000);
  f->passed = true;
}

/* Two jobs' tasks at once: each has its own model stream, the worker takes
 * them in the order they became ready, and both updates arrive whole, one
 * stream after the other (here under the same default stream id). */
static void two_jobs_queue_and_both_report(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_MLP_BIG, 31);
  expected want_a, want_b;
  expect_training(f, SPEC_MLP_BIG, 1, &want_a);
  offer o = {.job = "50", .round = 1, .attempt = 1, .spec = SPEC_MLP_BIG, .deadline_in_ms = 600000,
             .send_model = true, .model_stream_id = 600};
  send_offer(f, &o);
  expect_accept(f, "50", 1, 1);
  run_until(f, log_has, "event=model_received job=50", WAIT_MS, "job 50's model");
  make_model(f, SPEC_LOGREG, 32);
  expect_training(f, SPEC_LOGREG, 1, &want_b);
  o = (offer){.job = "51", .round = 1, .attempt = 1, .spec = SPEC_LOGREG,
              .deadline_in_ms = 600000, .send_model = true, .model_stream_id = 601};
  send_offer(f, &o);
  expect_accept(f, "51", 1, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_string_equal(e->metrics->job_id, "50");
  e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_string_equal(e->metrics->job_id, "51");
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_string_equal(e->tensor_begin->job_id, "50");
  uint64_t stream = e->tensor_begin->stream_id;
  assert_int_equal(stream, (1u << 16) | (1u << 1) | 1u);
  bool two = false;
  for (uint64_t end = uv_hrtime() / 1000000u + WAIT_MS; !two;) {
    if (f->updates_complete == 1 && f->update_complete && strcmp(f->update_job, "50") == 0) {
      assert_string_equal(f->rx_error, "");
      assert_int_equal(f->update_len, want_a.n * sizeof(float));
      assert_memory_equal(f->update, want_a.delta, want_a.n * sizeof(float));
      /* Checked: the next update may take its place now. */
      f->updates_complete = 10;
    }
    two = f->updates_complete == 11;
    if (uv_hrtime() / 1000000u > end) {
      show_log(f);
      fail_msg("both updates: %d complete", f->updates_complete);
    }
    uv_run(&f->loop, UV_RUN_ONCE);
  }
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_string_equal(e->tensor_begin->job_id, "51");
  assert_int_equal(e->tensor_begin->stream_id, stream);
  assert_string_equal(f->update_job, "51");
  assert_string_equal(f->rx_error, "");
  assert_int_equal(f->update_len, want_b.n * sizeof(float));
  assert_memory_equal(f->update, want_b.delta, want_b.n * sizeof(float));
  free(want_a.delta);
  free(want_b.delta);
  char *log = read_log(f);
  const char *a = strstr(log, "event=task_training job=50");
  const char *b = strstr(log, "event=task_training job=51");
  assert_true(a && b && a < b);
  free(log);
  site_stop(f, 10000);
  f->passed = true;
}

static void update_uses_the_offered_stream_id(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 33);
  offer o = {.job = "52", .round = 1, .attempt = 1, .spec = SPEC_LOGREG, .deadline_in_ms = 600000,
             .send_model = true, .update_stream_id = 777777};
  send_offer(f, &o);
  expect_accept(f, "52", 1, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->stream_id, 777777);
  run_until(f, update_complete, NULL, WAIT_MS, "the update under the offered id");
  assert_string_equal(f->rx_error, "");
  e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_END);
  assert_int_equal(e->tensor_end->stream_id, 777777);
  run_until(f, log_has, "event=update_delivered job=52", WAIT_MS, "the final acknowledgement");
  site_stop(f, 10000);
  f->passed = true;
}

/* A coordinator that does not hold the task now (restarted, not offering
 * it again yet) answers the update's TensorBegin with an Error naming the
 * stream: the site keeps the update, sends nothing of it until the task is
 * offered again, and then sends it whole, trained once. */
static void refused_update_is_kept_until_the_task_is_offered_again(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 34);
  expected want;
  expect_training(f, SPEC_LOGREG, 1, &want);
  f->refuse_updates = 1;
  offer o = {.job = "53", .round = 1, .attempt = 1, .spec = SPEC_LOGREG, .deadline_in_ms = 600000,
             .send_model = true, .update_stream_id = 888889};
  send_offer(f, &o);
  expect_accept(f, "53", 1, 1);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TENSOR_BEGIN);
  assert_int_equal(e->tensor_begin->stream_id, 888889);
  run_until(f, log_has, "event=update_kept job=53 round=1 attempt=1", WAIT_MS,
            "the refused update kept");
  assert_int_equal(f->update_begins, 1);
  assert_false(f->update_complete);
  send_offer(f, &o);
  expect_accept(f, "53", 1, 1);
  run_until(f, update_complete, NULL, WAIT_MS, "the kept update after the new offer");
  assert_string_equal(f->rx_error, "");
  assert_int_equal(f->update_begins, 2);
  assert_int_equal(f->update_len, want.n * sizeof(float));
  assert_memory_equal(f->update, want.delta, want.n * sizeof(float));
  free(want.delta);
  assert_int_equal(count_in_log(f, "event=task_training"), 1);
  site_stop(f, 10000);
  f->passed = true;
}

#define SPEC_SECAGG                                                                      \
  "{\"name\": \"sa\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 2, \"local\": {\"epochs\": 1,"        \
  " \"batch_size\": 4, \"lr\": 0.1}, \"secure_aggregation\": {\"enabled\": true}, \"seed\": 5}"

/* This site's setup in a cohort of n (index 1). */
/* The certificate issued to `name`, DER, in *der (free). */
static void cert_der(const char *name, uint8_t **der, size_t *len) {
  char path[700];
  snprintf(path, sizeof(path), "%s/issued/%s.crt", fed_dir, name);
  X509 *cert = NULL;
  uint8_t *d = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_pki_cert_load(path, &cert, &err) != XF_OK ||
      xf_secagg_x509_cert_der(cert, &d, len, &err) != XF_OK)
    fail_msg("certificate of %s: %s", name, err.msg);
  X509_free(cert);
  *der = malloc(*len);
  assert_non_null(*der);
  memcpy(*der, d, *len);
  xf_free(d);
}

/* The cohort's names: this site first, then sites no certificate was
 * issued to. */
/* A held task of a securely aggregated job has no setup at its offer: the
 * Go brings it, and the site advertises its keys then, training meanwhile. */
static void go_with_secagg_setup_starts_key_exchange(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_SECAGG, 34);
  offer o = {.job = "53", .round = 1, .attempt = 2, .spec = SPEC_SECAGG, .deadline_in_ms = 600000,
             .send_model = true, .hold = true};
  send_offer(f, &o);
  expect_accept(f, "53", 1, 2);
  run_until(f, log_has, "event=task_held job=53", WAIT_MS, "the model of the held task");
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_SECAGG_ADVERT), 0);
  Xfed__SecAggSetup su;
  uint8_t seed[32];
  xf_test_secagg_setup(&su, seed, 2);
  send_go(f, "53", 1, 2, &su);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_SECAGG_ADVERT);
  assert_string_equal(e->secagg_advert->job_id, "53");
  assert_int_equal(e->secagg_advert->round, 1);
  assert_int_equal(e->secagg_advert->attempt, 2);
  assert_int_equal(e->secagg_advert->advert.len, 64);
  /* The keys come signed, with the certificate the other sites check the
   * signature against: the site's own, as issued. */
  assert_int_equal(e->secagg_advert->signature.len, XF_SECAGG_SIG_BYTES);
  uint8_t *der = NULL;
  size_t der_len = 0;
  cert_der("eu-berlin", &der, &der_len);
  assert_int_equal(e->secagg_advert->certificate.len, der_len);
  assert_memory_equal(e->secagg_advert->certificate.data, der, der_len);
  free(der);
  uint8_t own[XF_SECAGG_ADVERT_BYTES], own_sig[XF_SECAGG_SIG_BYTES];
  memcpy(own, e->secagg_advert->advert.data, sizeof(own));
  memcpy(own_sig, e->secagg_advert->signature.data, sizeof(own_sig));
  /* Training goes on while the keys are exchanged: its Metrics come, the
   * masked update waits for the routing. */
  e = expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  assert_string_equal(e->metrics->job_id, "53");
  assert_int_equal(e->metrics->bytes_up, (2 * 3 + 3) * 20 / 8 + 1); /* 9 values of 20 bits */
  run_for(f, 300);
  assert_int_equal(f->update_begins, 0);

  /* The aggregator relays the other member's keys with a certificate that
   * is not that site's (its own): the site refuses to share with it, says
   * so naming the member, and drops the task, so no masked update leaves. */
  uint8_t *own_cert = NULL;
  size_t own_cert_len = 0;
  cert_der("eu-berlin", &own_cert, &own_cert_len);
  cert_der("coord", &der, &der_len);
  uint8_t adverts[2 * XF_SECAGG_ADVERT_BYTES], forged_sig[XF_SECAGG_SIG_BYTES] = {0};
  memcpy(adverts, own, sizeof(own));
  for (size_t i = 0; i < XF_SECAGG_ADVERT_BYTES; i++)
    adverts[XF_SECAGG_ADVERT_BYTES + i] = (uint8_t)(i + 1);
  ProtobufCBinaryData sigs[2] = {{sizeof(own_sig), own_sig}, {sizeof(forged_sig), forged_sig}};
  ProtobufCBinaryData certs[2] = {{own_cert_len, own_cert}, {der_len, der}};
  Xfed__SecAggKeys k = XFED__SEC_AGG_KEYS__INIT;
  k.job_id = "53";
  k.round = 1;
  k.attempt = 2;
  k.adverts.data = adverts;
  k.adverts.len = sizeof(adverts);
  k.n_signatures = 2;
  k.signatures = sigs;
  k.n_certificates = 2;
  k.certificates = certs;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SECAGG_KEYS;
  env.secagg_keys = &k;
  fake_send(f, &env);
  free(der);
  free(own_cert);
  e = expect_body(f, XFED__ENVELOPE__BODY_SECAGG_REFUSAL);
  const Xfed__SecAggRefusal *r = e->secagg_refusal;
  assert_string_equal(r->job_id, "53");
  assert_int_equal(r->round, 1);
  assert_int_equal(r->attempt, 2);
  assert_string_equal(r->phase, "keys");
  assert_int_equal(r->peer, 2);
  assert_string_equal(r->peer_name, "eu-paris");
  if (!strstr(r->reason, "issued to the coordinator 'coord', not to the site 'eu-paris'"))
    fail_msg("refusal: \"%s\"", r->reason);
  run_until(f, log_has, "event=secagg_round_refused job=53", WAIT_MS, "the refusal's log line");
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_SECAGG_SHARES), 0);
  run_for(f, 300);
  assert_int_equal(f->update_begins, 0);
  site_stop(f, 10000);
  f->passed = true;
}

static void sigterm_during_training_exits_zero_quickly(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_MLP_LONG, 16);
  offer o = {.job = "30", .round = 1, .attempt = 1, .spec = SPEC_MLP_LONG, .send_model = true};
  send_offer(f, &o);
  expect_accept(f, "30", 1, 1);
  run_until(f, log_has, "event=task_training", WAIT_MS, "training to start");
  run_for(f, 200);
  /* 10000 epochs would take minutes: the stop must not wait for them. */
  site_stop(f, 5000);
  assert_int_equal(count_in_log(f, "event=task_result_dropped"), 1);
  assert_int_equal(count_body(f, XFED__ENVELOPE__BODY_METRICS), 0);
  f->passed = true;
}

static void refused_session_is_logged_and_redialed_with_backoff(void **state) {
  fake *f = *state;
  f->refuse_sessions = 2;
  fake_start(f);
  /* Refused twice after the announce; the third session stays. */
  int three = 3;
  run_until(f, session_count_at_least, &three, WAIT_MS, "the site's third session");
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  assert_int_equal(count_in_log(f, "event=session_closed"), 2);
  assert_int_equal(count_in_log(f, "reason=\"the peer refused the session (NOT_AUTHORIZED): "
                                   "site eu-berlin may not join today\""), 2);
  /* The delays: 0.5 s, then 1 s, each within +-25 %. */
  char *log = read_log(f);
  unsigned delays[2];
  const char *p = log;
  for (int i = 0; i < 2; i++) {
    p = strstr(p, "event=redial");
    assert_non_null(p);
    const char *in = strstr(p, "in_ms=");
    assert_non_null(in);
    delays[i] = (unsigned)strtoul(in + 6, NULL, 10);
    p = in;
  }
  free(log);
  assert_true(delays[0] >= 375 && delays[0] <= 625);
  assert_true(delays[1] >= 750 && delays[1] <= 1250);
  site_stop_with(f, SIGINT, 10000);
  f->passed = true;
}

/* The site's own residency rules. Version 1 lets tiny leave eu for us only
 * as a regional aggregate of >= 2 sites with epsilon <= 1; version 2 also
 * lets its updates go to us directly. */
#define LOCAL_POLICY(extra)                                                                \
  "{\"regions\": [{\"name\": \"eu\"}, {\"name\": \"us\"}],"                                \
  " \"sites\": [{\"name\": \"eu-berlin\", \"region\": \"eu\"}],"                           \
  " \"datasets\": [{\"name\": \"tiny\", \"site\": \"eu-berlin\", \"classification\":"      \
  " \"public\", \"tags\": [\"t1\"]}],"                                                     \
  " \"rules\": [{\"id\": \"eu-agg-only\", \"effect\": \"allow\", \"kind\":"                \
  " \"regional_aggregate\", \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"]," \
  " \"conditions\": {\"max_epsilon\": 1, \"min_cohort\": 2}}" extra "]}"
#define SPEC_DP_EPS3                                                                     \
  "{\"name\": \"dp\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 1, \"local\": {\"epochs\": 1,"       \
  " \"batch_size\": 2, \"lr\": 0.1}, \"privacy\": {\"unit\": \"record\", \"mode\":"        \
  " \"local\", \"clip\": 1.0, \"target_epsilon\": 3}, \"seed\": 3}"

static void import_local_policy(fake *f, const char *doc) {
  char path[700];
  snprintf(path, sizeof(path), "%s/local-policy.json", f->dir);
  assert_int_equal(write_file(path, doc), 0);
  site_cmd(f, "policy", "import", path, "--dir", f->site_dir, "--reason", "the DPO's rules",
           "--author", "ops", NULL);
}

/* Runs `xfed-site ARGS...` and returns its stdout (the caller frees it). */
static char *site_output(fake *f, int want_status, const char *arg, ...) {
  xf_test_run r = {0};
  xf_test_exec_opts o = {.path = xfed_site, .unset = "XFED_SITE_DIR", .deadline_s = RUN_DEADLINE_S};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, &r, "xfed-site", arg, ap);
  va_end(ap);
  if (r.status != want_status) {
    xf_test_run_show(&r);
    fail_msg("xfed-site %s exited %d, not %d (in %s)", arg, r.status, want_status, f->dir);
  }
  char *out = strdup(r.out ? r.out : "");
  xf_test_run_free(&r);
  return out;
}

static void local_policy_refuses_what_the_offer_allows_and_audits_it(void **state) {
  fake *f = *state;
  fake_start(f);
  expect_body(f, XFED__ENVELOPE__BODY_SITE_ANNOUNCE);
  make_model(f, SPEC_LOGREG, 13);
  import_local_policy(f, LOCAL_POLICY(""));

  /* The coordinator's plan: a regional aggregate of eu at epsilon 3. The
   * local rule caps epsilon at 1: refused, naming the rule and the fix. */
  Xfed__Residency res = XFED__RESIDENCY__INIT;
  res.policy_version = 4;
  res.coordinator_region = "us";
  res.aggregator_region = "eu";
  res.path = "regional";
  res.rule = "coord-eu";
  res.min_cohort = 2;
  res.epsilon = 3;
  offer o = {.job = "21", .round = 1, .attempt = 1, .spec = SPEC_DP_EPS3,
             .deadline_in_ms = 600000, .send_model = true, .residency = &res};
  send_offer(f, &o);
  const Xfed__Envelope *e = expect_body(f, XFED__ENVELOPE__BODY_TASK_REFUSAL);
  const Xfed__TaskRefusal *ref = e->task_refusal;
  if (ref->reason != XFED__TASK_REFUSAL__REASON__POLICY_DENIED || strcmp(ref->job_id, "21") ||
      !strstr(ref->details, "rule 'eu-agg-only'") || !strstr(ref->details, "epsilon to <= 1"))
    fail_msg("refusal of job %s: reason %d details \"%s\"", ref->job_id, (int)ref->reason,
             ref->details);

  /* Updates straight to us are outside version 1 as well. */
  res.aggregator_region = "us";
  res.path = "direct";
  res.epsilon = 0;
  o = (offer){.job = "22", .round = 1, .attempt = 1, .spec = SPEC_LOGREG,
              .deadline_in_ms = 600000, .send_model = true, .residency = &res};
  send_offer(f, &o);
  expect_refusal(f, XFED__TASK_REFUSAL__REASON__POLICY_DENIED, "22", "eu-agg-only");

  /* Version 2 allows them: accepted, trained, delivered, and the update's
   * crossing from eu to us recorded. */
  import_local_policy(f, LOCAL_POLICY(", {\"id\": \"eu-public-direct\", \"effect\": "
                                      "\"allow\", \"kind\": \"update\", \"select\": "
                                      "{\"classification\": \"public\"}, \"destinations\": "
                                      "[\"us\"]}"));
  o.job = "23";
  send_offer(f, &o);
  expect_accept(f, "23", 1, 1);
  expect_body(f, XFED__ENVELOPE__BODY_METRICS);
  run_until(f, update_complete, NULL, WAIT_MS, "the whole update");
  run_until(f, log_has, "event=update_crossed", WAIT_MS, "the crossing to be recorded");

  char *out = site_output(f, 0, "audit", "list", "--dir", f->site_dir, "--json", NULL);
  json_error_t je;
  json_t *doc = json_loads(out, 0, &je);
  if (!doc) fail_msg("audit list --json: %s\n%s", je.text, out);
  json_t *rows = json_object_get(doc, "rows");
  static const char *const kinds[] = {"policy_change", "refused_task", "refused_task",
                                      "policy_change", "decision", "crossing"};
  if (json_array_size(rows) != 6) fail_msg("audit rows:\n%s", out);
  for (size_t i = 0; i < 6; i++)
    assert_string_equal(json_string_value(json_object_get(json_array_get(rows, i), "kind")),
                        kinds[i]);
  json_t *refused = json_object_get(json_array_get(rows, 1), "detail");
  assert_string_equal(json_string_value(json_object_get(refused, "rule")), "eu-agg-only");
  assert_string_equal(json_string_value(json_object_get(refused, "job")), "21");
  assert_string_equal(json_string_value(json_object_get(refused, "dataset")), "tiny");
  assert_int_equal(json_integer_value(json_object_get(refused, "policy_version")), 1);
  assert_int_equal(json_integer_value(json_object_get(refused, "coordinator_policy_version")), 4);
  json_t *allowed = json_object_get(json_array_get(rows, 4), "detail");
  assert_string_equal(json_string_value(json_object_get(allowed, "rule")), "eu-public-direct");
  assert_string_equal(json_string_value(json_object_get(allowed, "path")), "direct");
  json_t *crossing = json_object_get(json_array_get(rows, 5), "detail");
  assert_string_equal(json_string_value(json_object_get(crossing, "from")), "eu");
  assert_string_equal(json_string_value(json_object_get(crossing, "to")), "us");
  assert_int_equal(json_integer_value(json_object_get(crossing, "bytes")), f->update_len);
  json_decref(doc);
  free(out);

  out = site_output(f, 0, "audit", "verify", "--dir", f->site_dir, NULL);
  assert_non_null(strstr(out, "intact"));
  free(out);
  site_stop(f, 10000);
  f->passed = true;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(announce_lists_the_registry_and_bad_frames_get_errors,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(task_is_trained_and_its_update_matches_local_training,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(adamw_task_trains_at_its_rounds_scheduled_rate,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(declared_model_task_trains_like_local_training,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(
          refused_offers_streams_draw_no_error_and_a_wrong_digest_is_refused, fixture_setup,
          fixture_teardown),
      cmocka_unit_test_setup_teardown(dropped_link_mid_upload_resumes_from_the_acknowledged_offset,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(
          sealed_update_follows_a_new_key_after_the_aggregator_restarts, fixture_setup,
          fixture_teardown),
      cmocka_unit_test_setup_teardown(busy_while_training_and_cancel_frees_the_site,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(sigterm_during_training_exits_zero_quickly, fixture_setup,
                                      fixture_teardown),
      cmocka_unit_test_setup_teardown(local_policy_refuses_what_the_offer_allows_and_audits_it,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(refused_session_is_logged_and_redialed_with_backoff,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(held_task_waits_for_go_then_trains, fixture_setup,
                                      fixture_teardown),
      cmocka_unit_test_setup_teardown(held_task_cancelled_before_go_charges_nothing,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(two_jobs_queue_and_both_report, fixture_setup,
                                      fixture_teardown),
      cmocka_unit_test_setup_teardown(refused_update_is_kept_until_the_task_is_offered_again,
                                      fixture_setup, fixture_teardown),
      cmocka_unit_test_setup_teardown(update_uses_the_offered_stream_id, fixture_setup,
                                      fixture_teardown),
      cmocka_unit_test_setup_teardown(go_with_secagg_setup_starts_key_exchange, fixture_setup,
                                      fixture_teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
