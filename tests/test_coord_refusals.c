/* SPDX-License-Identifier: Apache-2.0 */
/* What the coordinator refuses, end to end: the real xfed-coord daemon on
 * loopback with a federation's real certificates, probed by `openssl
 * s_client` (no certificate, another CA, TLS 1.2, a certificate revoked
 * while the daemon runs, before and after SIGHUP) and by small in-test
 * clients (a site speaking for another site, a frame above the maximum, a
 * malformed frame, a compliance user submitting a job, a site certificate
 * taking the role "cli", a request larger than a frame from a researcher,
 * above its size limit or beyond what all sessions together may gather).
 * Each refusal must leave its key=value line in the daemon's log, and the
 * daemon must go on serving: a site session held from the first test to the
 * last stays open, and after every refusal a new site session is taken and
 * a researcher's JobQuery is answered. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "support.h"

#include "base/alloc.h"
#include "job/jobspec.h"
#include "coordinator/journal.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "policy/audit.h"
#include "net/conn.h"
#include "net/document.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/session.h"
#include "net/tls.h"

/* Every wait (a log line, a session, a reply, the daemon's start and stop)
 * gives up after this long; on loopback each takes milliseconds, even in the
 * sanitized build. */
#define STEP_TIMEOUT_S 10.0
/* An `openssl s_client` run that takes longer is killed and reported. */
#define OPENSSL_DEADLINE_S 15

/* ---- the fixture ------------------------------------------------------------- */

/* One in-test client on the shared loop: xf_dial, the session as `role`,
 * and what came back. Heap-allocated and kept on fx.clients until the group
 * ends, so that a test failing with a connection still open leaves no
 * dangling user pointer behind. */
typedef struct client {
  const char *role;
  const char *announce_site, *announce_region; /* SiteAnnounce once open, or NULL */
  xf_conn *conn;                               /* NULL once closed */
  xf_session session;
  bool opened, closed;
  xf_conn_reason why;
  bool refused;
  Xfed__Refusal__Reason refusal;
  char refusal_text[512];
  int errors;
  uint32_t error_code;
  char error_msg[512];
  int job_lists;
  int acks; /* TensorAck frames */
  char session_error[512];
  struct client *next;
} client;

static struct {
  char coord_bin[1024];
  char openssl[1024];
  char root[256];
  char acme[320], other[320];
  char state[320], log_path[320], port_path[320];
  char ca[400], crl[400];
  xf_federation *fed; /* acme, open for the revocation */
  pid_t daemon;       /* leader of the daemon's process group; 0 when not running */
  int port;
  char addr[32];
  uv_loop_t loop;
  bool loop_up;
  uv_timer_t tick;
  xf_tls *tls_austin, *tls_tokyo, *tls_berlin, *tls_rome, *tls_alice, *tls_carol;
  client *clients;
  client *keeper; /* ap-tokyo's session, open from the first test to the last */
  bool stopped;   /* the daemon was stopped on purpose: waits no longer need it */
} fx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void issued(char *buf, size_t n, const char *fed_dir, const char *name, const char *ext) {
  snprintf(buf, n, "%s/issued/%s.%s", fed_dir, name, ext);
}

/* The first executable `name` on PATH, into buf; false when there is none. */
static bool find_on_path(const char *name, char *buf, size_t n) {
  const char *path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  while (*path) {
    const char *colon = strchr(path, ':');
    size_t len = colon ? (size_t)(colon - path) : strlen(path);
    if (len > 0 && (size_t)snprintf(buf, n, "%.*s/%s", (int)len, path, name) < n &&
        access(buf, X_OK) == 0)
      return true;
    path += len + (colon ? 1 : 0);
  }
  return false;
}

static bool issue(xf_federation *fed, xf_pki_kind kind, const char *name, const char *region,
                  xf_pki_role role) {
  xf_pki_issue_opts o = {.kind = kind, .name = name, .region = region, .role = role};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_issue(fed, &o, NULL, &err) == XF_OK) return true;
  fprintf(stderr, "test_coord_refusals: issue %s: %s\n", name, err.msg);
  return false;
}

/* A client context presenting NAME's certificate from fed_dir and trusting
 * acme's CA and CRL; NULL (after a message) on failure. */
static xf_tls *client_tls(const char *fed_dir, const char *name) {
  char cert[400], key[400];
  issued(cert, sizeof(cert), fed_dir, name, "crt");
  issued(key, sizeof(key), fed_dir, name, "key");
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = fx.ca, .crl_path = fx.crl};
  xf_tls *tls = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tls_new(&cfg, &tls, &err) != XF_OK)
    fprintf(stderr, "test_coord_refusals: TLS context for %s: %s\n", name, err.msg);
  return tls;
}

/* ---- the daemon's log ---------------------------------------------------------- */

/* Bytes in the log so far: a test looks only at what came after its mark. */
static size_t log_mark(void) {
  struct stat st;
  return stat(fx.log_path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* The log from byte `from` on, NUL-terminated; the caller frees it. */
static char *log_read(size_t from) {
  FILE *f = fopen(fx.log_path, "rb");
  if (!f) return calloc(1, 1);
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  assert_non_null(buf);
  if (fseek(f, (long)from, SEEK_SET) == 0) {
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
      n += got;
      if (cap - n < 4096) {
        cap *= 2;
        buf = realloc(buf, cap);
        assert_non_null(buf);
      }
    }
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static void log_show(size_t from) {
  char *text = log_read(from);
  size_t len = strlen(text);
  const char *tail = len > 6000 ? text + len - 6000 : text;
  fprintf(stderr, "--- xfed-coord's log (%s%zu bytes since the mark):\n%s---\n",
          tail == text ? "" : "the last 6000 of ", len, tail);
  free(text);
}

/* True when one line of the log after `from` holds every string of the
 * NULL-terminated list. */
static bool log_has_line(size_t from, const char *const *needles) {
  char *text = log_read(from);
  bool found = false;
  for (char *l = text; l && *l && !found;) {
    char *end = strchr(l, '\n');
    if (end) *end = '\0';
    found = true;
    for (size_t i = 0; needles[i] && found; i++) found = strstr(l, needles[i]) != NULL;
    l = end ? end + 1 : NULL;
  }
  free(text);
  return found;
}

/* A sanitized daemon reports to the same log; any report is a failure. */
static void log_assert_no_sanitizer_report(void) {
  char *text = log_read(0);
  bool report = strstr(text, "Sanitizer") || strstr(text, "runtime error:");
  free(text);
  if (report) {
    log_show(0);
    fail_msg("xfed-coord's log holds a sanitizer report");
  }
}

/* ---- the daemon ------------------------------------------------------------------ */

static bool daemon_alive(void) {
  if (!fx.daemon) return false;
  int ws;
  pid_t r = waitpid(fx.daemon, &ws, WNOHANG);
  if (r == 0) return true;
  fprintf(stderr, "test_coord_refusals: xfed-coord (pid %d) has exited (%s %d)\n",
          (int)fx.daemon, r > 0 && WIFSIGNALED(ws) ? "signal" : "status",
          r > 0 ? (WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws)) : -1);
  fx.daemon = 0;
  return false;
}

/* Starts xfed-coord in a process group of its own (so that teardown can end
 * it and anything it started), its stdout and stderr appended to the log,
 * and waits for its port file. 0, or -1 after a message. */
static int daemon_start(void) {
  int logfd = open(fx.log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || devnull < 0) {
    fprintf(stderr, "test_coord_refusals: cannot open %s: %s\n", fx.log_path, strerror(errno));
    return -1;
  }
  char cert[400], key[400];
  issued(cert, sizeof(cert), fx.acme, "coord", "crt");
  issued(key, sizeof(key), fx.acme, "coord", "key");
  char *const argv[] = {"xfed-coord", "run",       "--listen", "127.0.0.1:0", "--port-file",
                        fx.port_path, "--cert",    cert,       "--key",       key,
                        "--ca",       fx.ca,       "--crl",    fx.crl,        "--state",
                        fx.state,     "--residency-policy", "off", NULL};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    fprintf(stderr, "test_coord_refusals: fork: %s\n", strerror(errno));
    close(logfd);
    close(devnull);
    return -1;
  }
  if (pid == 0) {
    (void)setpgid(0, 0);
    /* A test killed by ctest's timeout runs no teardown, and this process
     * group is out of ctest's reach: the kernel ends the daemon with us. */
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(126); /* we were already gone */
    if (dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) _exit(126);
    /* info: the accepted sessions (peer_connected, site_announced) are
     * part of what the tests read. */
    setenv("XF_LOG_LEVEL", "info", 1);
    execv(fx.coord_bin, argv);
    _exit(127);
  }
  (void)setpgid(pid, pid); /* whichever of parent and child runs first */
  close(logfd);
  close(devnull);
  fx.daemon = pid;
  double deadline = now_s() + STEP_TIMEOUT_S;
  while (now_s() < deadline) {
    FILE *f = fopen(fx.port_path, "r"); /* written atomically: whole or absent */
    if (f) {
      int port = 0;
      bool ok = fscanf(f, "%d", &port) == 1 && port > 0 && port < 65536;
      fclose(f);
      if (ok) {
        fx.port = port;
        snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", port);
        return 0;
      }
    }
    if (!daemon_alive()) break;
    usleep(20000);
  }
  fprintf(stderr, "test_coord_refusals: xfed-coord did not write its port file %s\n",
          fx.port_path);
  log_show(0);
  return -1;
}

/* Sends sig to the daemon's group and waits for the daemon; SIGKILL after
 * the step timeout. Returns its wait status, or -1 when none was running. */
static int daemon_stop(int sig) {
  if (!fx.daemon) return -1;
  pid_t pid = fx.daemon;
  fx.daemon = 0;
  return xf_test_stop_group(pid, sig, STEP_TIMEOUT_S);
}

/* ---- the shared loop ----------------------------------------------------------- */

static void on_tick(uv_timer_t *t) { (void)t; }

typedef bool (*done_fn)(const void *arg);

/* Runs the loop until done(arg), failing the test with `what` and the log
 * after the step timeout or when the daemon has died. */
static void wait_until(done_fn done, const void *arg, size_t mark, const char *what) {
  double deadline = now_s() + STEP_TIMEOUT_S;
  uv_timer_start(&fx.tick, on_tick, 10, 10); /* keeps each UV_RUN_ONCE short */
  while (!done(arg)) {
    if ((!fx.stopped && !daemon_alive()) || now_s() > deadline) {
      uv_timer_stop(&fx.tick);
      log_show(mark);
      fail_msg("%s while waiting for %s",
               fx.daemon || fx.stopped ? "timed out" : "xfed-coord died", what);
    }
    uv_run(&fx.loop, UV_RUN_ONCE);
  }
  uv_timer_stop(&fx.tick);
}

typedef struct log_wait {
  size_t from;
  const char *needles[8];
} log_wait;

static bool log_wait_done(const void *arg) {
  const log_wait *w = arg;
  return log_has_line(w->from, w->needles);
}

/* Waits for a log line after `from` holding every string given (at most 7,
 * the list ending with NULL). */
static void wait_log(size_t from, ...) {
  log_wait w = {.from = from};
  va_list ap;
  va_start(ap, from);
  size_t k = 0;
  for (const char *s; (s = va_arg(ap, const char *)) != NULL;) {
    assert_true(k < 7);
    w.needles[k++] = s;
  }
  va_end(ap);
  char what[512] = "a log line with";
  for (size_t i = 0; i < k; i++) {
    size_t used = strlen(what);
    snprintf(what + used, sizeof(what) - used, " '%s'", w.needles[i]);
  }
  wait_until(log_wait_done, &w, from, what);
}

/* ---- in-test clients ------------------------------------------------------------ */

static void client_send(client *cl, const Xfed__Envelope *env) {
  assert_non_null(cl->conn);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_conn_send(cl->conn, env, &err) != XF_OK) fail_msg("send: %s", err.msg);
}

static void client_announce(client *cl) {
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = (char *)cl->announce_site;
  a.region = (char *)cl->announce_region;
  a.backend = "cpu";
  a.threads = 1;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  client_send(cl, &env);
}

static void client_job_query(client *cl) {
  Xfed__JobQuery q = XFED__JOB_QUERY__INIT;
  q.job_id = "";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
  env.job_query = &q;
  client_send(cl, &env);
}

static xf_err client_on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  client *cl = xf_conn_user(c);
  cl->conn = c;
  if (peer->kind != XF_PKI_KIND_COORDINATOR) return XF_EDENIED;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_session_start(&cl->session, c, cl->role, 0, &err);
  if (rc != XF_OK) snprintf(cl->session_error, sizeof(cl->session_error), "%s", err.msg);
  return rc;
}

static void client_on_frame(xf_conn *c, const Xfed__Envelope *env) {
  client *cl = xf_conn_user(c);
  if (env->body_case == XFED__ENVELOPE__BODY_REFUSAL) {
    cl->refused = true;
    cl->refusal = env->refusal->reason;
    snprintf(cl->refusal_text, sizeof(cl->refusal_text), "%s",
             env->refusal->text ? env->refusal->text : "");
  } else if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
    cl->errors++;
    cl->error_code = env->error->code;
    snprintf(cl->error_msg, sizeof(cl->error_msg), "%s",
             env->error->message ? env->error->message : "");
  }
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(&cl->session, c, env, &ev, &err) != XF_OK) {
    snprintf(cl->session_error, sizeof(cl->session_error), "%s", err.msg);
    xf_conn_close(c);
    return;
  }
  if (ev == XF_SESSION_OPENED) {
    cl->opened = true;
    if (cl->announce_site) client_announce(cl);
  } else if (ev == XF_SESSION_FRAME && env->body_case == XFED__ENVELOPE__BODY_JOB_LIST) {
    cl->job_lists++;
  } else if (ev == XF_SESSION_FRAME && env->body_case == XFED__ENVELOPE__BODY_TENSOR_ACK) {
    cl->acks++;
  }
}

static void client_on_close(xf_conn *c, const xf_conn_reason *why) {
  client *cl = xf_conn_user(c);
  cl->conn = NULL;
  cl->closed = true;
  cl->why = *why;
}

/* Dials the daemon as `role` with tls; the session and the announce (when
 * announce_site is set) run from the loop. */
static client *client_dial(xf_tls *tls, const char *role, const char *announce_site,
                           const char *announce_region) {
  client *cl = calloc(1, sizeof(*cl));
  assert_non_null(cl);
  cl->role = role;
  cl->announce_site = announce_site;
  cl->announce_region = announce_region;
  cl->next = fx.clients;
  fx.clients = cl;
  xf_conn_opts o = {.on_connect = client_on_connect,
                    .on_frame = client_on_frame,
                    .on_close = client_on_close,
                    .user = cl};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_dial(&fx.loop, tls, "127.0.0.1", fx.port, &o, &cl->conn, &err) != XF_OK)
    fail_msg("dial %s: %s", fx.addr, err.msg);
  return cl;
}

static bool client_opened_or_closed(const void *arg) {
  const client *cl = arg;
  return cl->opened || cl->closed;
}

static bool client_closed(const void *arg) { return ((const client *)arg)->closed; }

static bool client_has_job_list(const void *arg) {
  const client *cl = arg;
  return cl->job_lists > 0 || cl->closed;
}

static bool client_has_error(const void *arg) {
  const client *cl = arg;
  return cl->errors > 0 || cl->closed;
}

static bool client_has_second_error(const void *arg) {
  const client *cl = arg;
  return cl->errors > 1 || cl->closed;
}

static void client_expect_open(client *cl, size_t mark, const char *who) {
  wait_until(client_opened_or_closed, cl, mark, who);
  if (!cl->opened) {
    log_show(mark);
    fail_msg("%s: the session did not open (%s: %s; session: %s; refusal: %s)", who,
             xf_conn_end_message(cl->why.end), cl->why.msg, cl->session_error,
             cl->refusal_text);
  }
}

static void client_close_and_wait(client *cl, size_t mark) {
  if (cl->conn) xf_conn_close(cl->conn);
  wait_until(client_closed, cl, mark, "our client's close");
}

/* ---- a raw client: TLS over a blocking socket ---------------------------------- */

/* For what xf_conn never sends: a bare length prefix, a payload that is not
 * an Envelope. The TLS context is the same as the in-test clients'. */
typedef struct raw_client {
  int fd;
  SSL *ssl;
  xf_frame_decoder *decoder;
  uint8_t plain[16384];
  size_t off, len;
  bool eof;
} raw_client;

static void raw_fail_tls(const char *what) {
  char reason[256] = "no OpenSSL reason";
  unsigned long e = ERR_get_error();
  if (e) ERR_error_string_n(e, reason, sizeof(reason));
  ERR_clear_error();
  fail_msg("raw client: %s: %s (errno %s)", what, reason, strerror(errno));
}

static void raw_write(raw_client *r, const void *bytes, size_t n) {
  ERR_clear_error();
  if (SSL_write(r->ssl, bytes, (int)n) != (int)n) raw_fail_tls("write");
}

static void raw_send(raw_client *r, const Xfed__Envelope *env) {
  uint8_t *frame = NULL;
  size_t len = 0;
  assert_int_equal(xf_frame_encode(env, 0, &frame, &len, NULL), XF_OK);
  raw_write(r, frame, len);
  xf_free(frame);
}

/* The next Envelope (the caller frees it with xf_envelope_free), or NULL at
 * the end of the session (close_notify or end of stream). Each read waits
 * at most the step timeout (SO_RCVTIMEO). */
static Xfed__Envelope *raw_next(raw_client *r) {
  for (;;) {
    if (r->off == r->len) {
      if (r->eof) return NULL;
      ERR_clear_error();
      errno = 0; /* SSL_ERROR_SYSCALL: 0 is a bare end of stream, EAGAIN the timeout */
      int n = SSL_read(r->ssl, r->plain, (int)sizeof(r->plain));
      if (n <= 0) {
        int e = SSL_get_error(r->ssl, n);
        if (e == SSL_ERROR_ZERO_RETURN || (e == SSL_ERROR_SYSCALL && errno != EAGAIN)) {
          ERR_clear_error();
          r->eof = true;
          return NULL;
        }
        raw_fail_tls("read (nothing within the step timeout?)");
      }
      r->off = 0;
      r->len = (size_t)n;
    }
    size_t used = 0;
    Xfed__Envelope *env = NULL;
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_frame_decoder_feed(r->decoder, r->plain + r->off, r->len - r->off, &used, &env,
                              &err) != XF_OK)
      fail_msg("raw client: the coordinator sent a bad frame: %s", err.msg);
    r->off += used;
    if (env && env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      xf_envelope_free(env);
      continue;
    }
    if (env) return env;
  }
}

/* Connects with tls, runs the hello as a site, announces `site` in `region`
 * and waits until the daemon has logged the announce: the session is open
 * on both sides. */
static void raw_open_site(raw_client *r, xf_tls *tls, const char *site, const char *region) {
  memset(r, 0, sizeof(*r));
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(r->fd >= 0);
  struct timeval tv = {.tv_sec = (time_t)STEP_TIMEOUT_S};
  assert_int_equal(setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
  assert_int_equal(setsockopt(r->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(r->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    fail_msg("raw client: connect %s: %s", fx.addr, strerror(errno));
  assert_int_equal(xf_frame_decoder_new(0, &r->decoder, NULL), XF_OK);
  r->ssl = SSL_new(xf_tls_ctx(tls));
  assert_non_null(r->ssl);
  assert_int_equal(SSL_set_fd(r->ssl, r->fd), 1);
  ERR_clear_error();
  if (SSL_connect(r->ssl) != 1) raw_fail_tls("handshake");

  size_t mark = log_mark();
  Xfed__Hello hello = XFED__HELLO__INIT;
  hello.protocol_version = XF_PROTOCOL_VERSION;
  hello.min_protocol_version = XF_PROTOCOL_MIN_VERSION;
  hello.role = "site";
  hello.agent = "test_coord_refusals";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &hello;
  raw_send(r, &env);
  bool got_hello = false, got_ack = false;
  while (!got_hello || !got_ack) {
    Xfed__Envelope *in = raw_next(r);
    if (!in) fail_msg("raw client: the coordinator closed during the hello");
    if (in->body_case == XFED__ENVELOPE__BODY_HELLO) {
      got_hello = true;
      Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
      ack.protocol_version = XF_PROTOCOL_VERSION;
      Xfed__Envelope out = XFED__ENVELOPE__INIT;
      out.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
      out.hello_ack = &ack;
      raw_send(r, &out);
    } else if (in->body_case == XFED__ENVELOPE__BODY_HELLO_ACK) {
      got_ack = true;
    } else {
      fail_msg("raw client: unexpected %s during the hello", xf_envelope_body_name(in));
    }
    xf_envelope_free(in);
  }
  Xfed__SiteAnnounce a = XFED__SITE_ANNOUNCE__INIT;
  a.site = (char *)site;
  a.region = (char *)region;
  env.body_case = XFED__ENVELOPE__BODY_SITE_ANNOUNCE;
  env.site_announce = &a;
  raw_send(r, &env);
  char who[96];
  snprintf(who, sizeof(who), "site=%s ", site);
  wait_log(mark, "event=site_announced", who, NULL);
}

static void raw_close(raw_client *r) {
  if (r->ssl) SSL_free(r->ssl);
  if (r->fd >= 0) close(r->fd);
  xf_frame_decoder_free(r->decoder);
  ERR_clear_error();
  memset(r, 0, sizeof(*r));
  r->fd = -1;
}

/* ---- openssl s_client ---------------------------------------------------------- */

/* Runs `openssl s_client` against the daemon with TLS `version` ("-tls1_3",
 * "-tls1_2") and, when cert is given, that certificate and key. wait_close:
 * keep reading after the handshake until the server closes (a refused peer
 * sees the server's alert); otherwise quit once connected, as stdin is
 * empty. */
static void s_client(xf_test_run *r, const char *version, bool wait_close, const char *cert,
                     const char *key) {
  xf_test_exec_opts o = {.path = fx.openssl, .cwd = fx.root, .deadline_s = OPENSSL_DEADLINE_S};
  xf_test_exec(&o, r, "openssl", "s_client", "-connect", fx.addr, version, "-CAfile", fx.ca,
               wait_close ? "-ign_eof" : "-no_ign_eof", cert ? "-cert" : NULL, cert, "-key", key,
               NULL);
}

/* Whether s_client printed text, on either stream. */
static bool s_client_says(const xf_test_run *r, const char *text) {
  return strstr(r->out, text) || strstr(r->err, text);
}

/* ---- "the daemon still serves" ---------------------------------------------------- */

/* After a refusal: the site session held since the first test is still
 * open; a new site session opens and its SiteAnnounce is taken; a
 * researcher's JobQuery is answered with a JobList; no sanitizer report. */
static void assert_still_serving(const char *after) {
  char who[160];
  snprintf(who, sizeof(who), "a site session after %s", after);
  if (!fx.keeper || !fx.keeper->opened || fx.keeper->closed)
    fail_msg("after %s: the site session held since the start was closed (%s: %s)", after,
             fx.keeper ? xf_conn_end_message(fx.keeper->why.end) : "never opened",
             fx.keeper ? fx.keeper->why.msg : "");
  size_t mark = log_mark();
  client *site = client_dial(fx.tls_austin, "site", "us-austin", "us");
  client_expect_open(site, mark, who);
  wait_log(mark, "event=site_announced", "site=us-austin ", "region=us ", NULL);
  client_close_and_wait(site, mark);

  snprintf(who, sizeof(who), "a researcher's session after %s", after);
  client *alice = client_dial(fx.tls_alice, "cli", NULL, NULL);
  client_expect_open(alice, mark, who);
  client_job_query(alice);
  wait_until(client_has_job_list, alice, mark, "the JobList answering alice's JobQuery");
  if (alice->job_lists != 1 || alice->errors) {
    log_show(mark);
    fail_msg("after %s: alice's JobQuery got %d JobList and %d Error (%s)", after,
             alice->job_lists, alice->errors, alice->error_msg);
  }
  client_close_and_wait(alice, mark);
  log_assert_no_sanitizer_report();
}

/* ---- group setup and teardown ------------------------------------------------------ */

/* The federations, the clients' contexts, the loop and the daemon. 0, or -1
 * after a message on stderr. */
static int fixture_setup(void) {
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_coord_refusals: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.coord_bin, sizeof(fx.coord_bin), "%s/coordinator/xfed-coord", build);
  if (access(fx.coord_bin, X_OK) != 0) {
    fprintf(stderr, "test_coord_refusals: %s is not an executable: build the xfed-coord target\n",
            fx.coord_bin);
    return -1;
  }
  if (!find_on_path("openssl", fx.openssl, sizeof(fx.openssl))) {
    fprintf(stderr,
            "test_coord_refusals: the openssl command is not installed (not found on PATH); "
            "this test probes the coordinator with `openssl s_client`. Install the Debian "
            "package openssl (deploy/install-deps.sh test does).\n");
    return -1;
  }
  if (xf_crypto_init() != XF_OK) return -1;
  if (xf_test_mkdtemp(fx.root, sizeof(fx.root), "coord-refusals") != 0) return -1;
  snprintf(fx.acme, sizeof(fx.acme), "%s/acme", fx.root);
  snprintf(fx.other, sizeof(fx.other), "%s/other", fx.root);
  snprintf(fx.state, sizeof(fx.state), "%s/state", fx.root);
  snprintf(fx.log_path, sizeof(fx.log_path), "%s/coord.log", fx.root);
  snprintf(fx.port_path, sizeof(fx.port_path), "%s/coord.port", fx.root);
  snprintf(fx.ca, sizeof(fx.ca), "%s/ca.crt", fx.acme);
  snprintf(fx.crl, sizeof(fx.crl), "%s/crl.pem", fx.acme);

  /* acme: the coordinator; us-austin, the site that shows the daemon still
   * serves; ap-tokyo, the session held throughout; eu-berlin, the one that
   * misbehaves; eu-paris, whom it claims to be; eu-rome, revoked while the
   * daemon runs; alice (researcher) and carol (compliance). */
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_init(fx.acme, "acme", 0, &fx.fed, &err) != XF_OK) {
    fprintf(stderr, "test_coord_refusals: federation: %s\n", err.msg);
    return -1;
  }
  if (!issue(fx.fed, XF_PKI_KIND_COORDINATOR, "coord", NULL, XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_SITE, "us-austin", "us", XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_SITE, "ap-tokyo", "ap", XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_SITE, "eu-berlin", "eu", XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_SITE, "eu-paris", "eu", XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_SITE, "eu-rome", "eu", XF_PKI_ROLE_NONE) ||
      !issue(fx.fed, XF_PKI_KIND_USER, "alice", NULL, XF_PKI_ROLE_RESEARCHER) ||
      !issue(fx.fed, XF_PKI_KIND_USER, "carol", NULL, XF_PKI_ROLE_COMPLIANCE))
    return -1;
  /* Another CA, even one that calls its federation acme too. */
  xf_federation *other = NULL;
  if (xf_federation_init(fx.other, "acme", 0, &other, &err) != XF_OK) {
    fprintf(stderr, "test_coord_refusals: second federation: %s\n", err.msg);
    return -1;
  }
  bool ok = issue(other, XF_PKI_KIND_SITE, "eu-berlin", "eu", XF_PKI_ROLE_NONE);
  xf_federation_close(other);
  if (!ok) return -1;

  if (!(fx.tls_austin = client_tls(fx.acme, "us-austin")) ||
      !(fx.tls_tokyo = client_tls(fx.acme, "ap-tokyo")) ||
      !(fx.tls_berlin = client_tls(fx.acme, "eu-berlin")) ||
      !(fx.tls_rome = client_tls(fx.acme, "eu-rome")) ||
      !(fx.tls_alice = client_tls(fx.acme, "alice")) ||
      !(fx.tls_carol = client_tls(fx.acme, "carol")))
    return -1;
  if (uv_loop_init(&fx.loop) != 0) return -1;
  fx.loop_up = true;
  uv_timer_init(&fx.loop, &fx.tick);
  return daemon_start();
}

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Undoes whatever setup and the tests did, however far they got: clients
 * closed, the daemon's process group killed, the scratch tree removed. Safe
 * to call twice. */
static int group_teardown(void **state) {
  (void)state;
  if (fx.loop_up) {
    for (client *cl = fx.clients; cl; cl = cl->next)
      if (cl->conn) xf_conn_close(cl->conn);
    double deadline = now_s() + STEP_TIMEOUT_S;
    while (fx.clients && uv_run(&fx.loop, UV_RUN_NOWAIT) && now_s() < deadline) usleep(5000);
    uv_walk(&fx.loop, close_walk, NULL);
    uv_run(&fx.loop, UV_RUN_DEFAULT);
    (void)uv_loop_close(&fx.loop);
    fx.loop_up = false;
  }
  (void)daemon_stop(SIGKILL); /* only when a failed test left it running */
  while (fx.clients) {
    client *cl = fx.clients;
    fx.clients = cl->next;
    free(cl);
  }
  fx.keeper = NULL;
  xf_tls **all[] = {&fx.tls_austin, &fx.tls_tokyo, &fx.tls_berlin,
                    &fx.tls_rome,   &fx.tls_alice, &fx.tls_carol};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
    xf_tls_free(*all[i]);
    *all[i] = NULL;
  }
  xf_federation_close(fx.fed);
  fx.fed = NULL;
  if (fx.root[0]) xf_test_remove_tree(fx.root);
  fx.root[0] = '\0';
  return 0;
}

static int group_setup(void **state) {
  if (fixture_setup() == 0) return 0;
  (void)group_teardown(state);
  return -1;
}

/* ---- tests ---------------------------------------------------------------------------- */

static void daemon_takes_a_site_session_held_through_every_refusal(void **state) {
  (void)state;
  size_t mark = log_mark();
  wait_log(0, "event=coordinator_started", "role=global", "federation=acme", NULL);
  fx.keeper = client_dial(fx.tls_tokyo, "site", "ap-tokyo", "ap");
  client_expect_open(fx.keeper, mark, "ap-tokyo's session");
  wait_log(mark, "event=site_announced", "site=ap-tokyo ", "region=ap ", NULL);
  assert_still_serving("the start");
}

static void client_without_a_certificate_is_refused(void **state) {
  (void)state;
  xf_test_run r = {0};
  size_t mark = log_mark();
  s_client(&r, "-tls1_3", true, NULL, NULL);
  if (r.status == 0 || !s_client_says(&r, "certificate required")) {
    xf_test_run_show(&r);
    fail_msg("s_client without a certificate: expected a failure with the server's alert "
             "'certificate required'");
  }
  wait_log(mark, "event=peer_refused", "end=\"TLS handshake or record failure\"",
           "peer did not return a certificate", NULL);
  /* Refused in the handshake: no session was ever started for it. */
  assert_false(log_has_line(mark, (const char *const[]){"event=peer_connected", NULL}));
  xf_test_run_free(&r);
  assert_still_serving("a client without a certificate");
}

static void client_of_another_ca_is_refused_as_untrusted(void **state) {
  (void)state;
  char cert[400], key[400];
  issued(cert, sizeof(cert), fx.other, "eu-berlin", "crt");
  issued(key, sizeof(key), fx.other, "eu-berlin", "key");
  xf_test_run r = {0};
  size_t mark = log_mark();
  s_client(&r, "-tls1_3", true, cert, key);
  if (r.status == 0 || !s_client_says(&r, "unknown ca")) {
    xf_test_run_show(&r);
    fail_msg("s_client with another CA's certificate: expected the alert 'unknown ca'");
  }
  wait_log(mark, "event=peer_refused", "verdict=untrusted",
           "not signed by this federation's CA", NULL);
  assert_false(log_has_line(mark, (const char *const[]){"event=peer_connected", NULL}));
  xf_test_run_free(&r);
  assert_still_serving("a client of another CA");
}

static void client_offering_only_tls12_is_refused(void **state) {
  (void)state;
  char cert[400], key[400];
  issued(cert, sizeof(cert), fx.acme, "eu-berlin", "crt");
  issued(key, sizeof(key), fx.acme, "eu-berlin", "key");
  xf_test_run r = {0};
  size_t mark = log_mark();
  /* A valid certificate: the protocol version alone is refused. */
  s_client(&r, "-tls1_2", true, cert, key);
  if (r.status == 0 || !s_client_says(&r, "alert protocol version")) {
    xf_test_run_show(&r);
    fail_msg("s_client -tls1_2: expected the alert 'protocol version'");
  }
  wait_log(mark, "event=peer_refused", "end=\"TLS handshake or record failure\"",
           "unsupported protocol", NULL);
  assert_false(log_has_line(mark, (const char *const[]){"event=peer_connected", NULL}));
  xf_test_run_free(&r);
  assert_still_serving("a TLS 1.2 client");
}

static void revoked_site_is_refused_once_sighup_reloads_the_crl(void **state) {
  (void)state;
  char cert[400], key[400];
  issued(cert, sizeof(cert), fx.acme, "eu-rome", "crt");
  issued(key, sizeof(key), fx.acme, "eu-rome", "key");
  const char *rome = "id=spiffe://acme/region/eu/site/eu-rome";

  /* Revoked in the federation directory, but the daemon still holds the
   * CRL it started with: eu-rome is accepted. */
  xf_pki_entry revoked;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_revoke(fx.fed, "eu-rome", XF_PKI_REASON_KEY_COMPROMISE, &revoked, &err) !=
      XF_OK)
    fail_msg("revoke eu-rome: %s", err.msg);
  xf_test_run r = {0};
  size_t mark = log_mark();
  s_client(&r, "-tls1_3", false, cert, key);
  if (r.status != 0) {
    xf_test_run_show(&r);
    fail_msg("before SIGHUP, eu-rome's handshake should still succeed");
  }
  wait_log(mark, "event=peer_connected", rome, NULL);
  assert_false(log_has_line(mark, (const char *const[]){"event=peer_refused", NULL}));

  /* SIGHUP: the daemon reloads the CRL (and says so); from then on eu-rome
   * fails the handshake with the verdict revoked. */
  mark = log_mark();
  assert_int_equal(kill(fx.daemon, SIGHUP), 0);
  wait_log(mark, "event=tls_crl_reloaded", "federation=acme", NULL);
  mark = log_mark();
  s_client(&r, "-tls1_3", true, cert, key);
  if (r.status == 0 || !s_client_says(&r, "certificate revoked")) {
    xf_test_run_show(&r);
    fail_msg("after SIGHUP, s_client with eu-rome's revoked certificate: expected the alert "
             "'certificate revoked'");
  }
  wait_log(mark, "event=peer_refused", "verdict=revoked", "the certificate is revoked",
           NULL);
  assert_false(log_has_line(mark, (const char *const[]){"event=peer_connected", NULL}));

  /* The daemon's own clients see the same: the handshake fails. */
  mark = log_mark();
  client *cl = client_dial(fx.tls_rome, "site", "eu-rome", "eu");
  wait_until(client_closed, cl, mark, "eu-rome's refused session");
  assert_false(cl->opened);
  assert_int_equal(cl->why.end, XF_CONN_END_TLS);
  if (!strstr(cl->why.msg, "revoked")) fail_msg("eu-rome's client closed with: %s", cl->why.msg);
  wait_log(mark, "event=peer_refused", "verdict=revoked", NULL);
  xf_test_run_free(&r);
  assert_still_serving("a revoked site");

  /* The refusals are in the coordinator's audit trail, which still verifies. */
  char db_path[400];
  snprintf(db_path, sizeof(db_path), "%s/coord.db", fx.state);
  xf_db *db = NULL;
  if (xf_journal_open(db_path, &db, &err) != XF_OK) fail_msg("open %s: %s", db_path, err.msg);
  xf_audit_row *rows = NULL;
  size_t n = 0, revoked_rows = 0;
  if (xf_audit_list(db, 0, 0, &rows, &n, &err) != XF_OK) fail_msg("audit list: %s", err.msg);
  for (size_t i = 0; i < n; i++)
    if (strcmp(rows[i].kind, "refused_connection") == 0 && strstr(rows[i].detail, "revoked"))
      revoked_rows++;
  xf_audit_rows_free(rows, n);
  xf_audit_verdict v;
  if (xf_audit_verify(db, &v, &err) != XF_OK) fail_msg("audit verify: %s", err.msg);
  xf_db_close(db);
  if (revoked_rows < 2) fail_msg("%zu refused_connection rows name the revoked certificate", revoked_rows);
  assert_int_equal(v.fault, XF_AUDIT_INTACT);
}

static void site_announcing_another_site_is_refused_not_authorized(void **state) {
  (void)state;
  size_t mark = log_mark();
  client *cl = client_dial(fx.tls_berlin, "site", "eu-paris", "eu");
  wait_until(client_closed, cl, mark, "the refusal of eu-berlin announcing itself as eu-paris");
  assert_true(cl->opened); /* the session opened; the announce is what was refused */
  if (!cl->refused || cl->refusal != XFED__REFUSAL__REASON__NOT_AUTHORIZED) {
    log_show(mark);
    fail_msg("expected Refusal NOT_AUTHORIZED; got %s (%s)", cl->refused ? "another" : "none",
             cl->refusal_text);
  }
  assert_non_null(strstr(cl->refusal_text, "eu-berlin"));
  assert_non_null(strstr(cl->refusal_text, "eu-paris"));
  wait_log(mark, "event=peer_refused", "announces itself as eu-paris",
           "certificate names eu-berlin", NULL);
  /* The coordinator closed the connection after its Refusal. */
  wait_log(mark, "event=peer_closed", "id=spiffe://acme/region/eu/site/eu-berlin",
           "end=\"closed by this side\"", NULL);
  assert_false(log_has_line(
      mark, (const char *const[]){"event=site_announced", "site=eu-paris", NULL}));
  assert_still_serving("a site claiming another site");
}

static void frame_above_the_maximum_ends_the_session_with_an_error(void **state) {
  (void)state;
  raw_client r;
  raw_open_site(&r, fx.tls_berlin, "eu-berlin", "eu");
  size_t mark = log_mark();
  /* Only the length prefix: the daemon must refuse on the 4 bytes, before
   * it buffers any payload. */
  uint32_t over = XF_FRAME_MAX_DEFAULT + 1;
  uint8_t head[4] = {(uint8_t)(over >> 24), (uint8_t)(over >> 16), (uint8_t)(over >> 8),
                     (uint8_t)over};
  raw_write(&r, head, sizeof(head));
  Xfed__Envelope *env = raw_next(&r);
  if (!env || env->body_case != XFED__ENVELOPE__BODY_ERROR) {
    log_show(mark);
    fail_msg("expected Error(XF_ERANGE) before the close; got %s",
             env ? xf_envelope_body_name(env) : "the end of the session");
  }
  assert_int_equal(env->error->code, XF_ERANGE);
  assert_non_null(strstr(env->error->message, "exceeds the maximum of 4194304 bytes"));
  xf_envelope_free(env);
  assert_null(raw_next(&r)); /* and nothing after it: closed */
  wait_log(mark, "event=peer_closed", "id=spiffe://acme/region/eu/site/eu-berlin",
           "end=\"the peer sent a frame that is too large or malformed\"",
           "frame of 4194305 bytes exceeds the maximum of 4194304 bytes", NULL);
  wait_log(mark, "event=conn_closed", "reason=FRAME", "code=XF_ERANGE", NULL);
  raw_close(&r);
  assert_still_serving("a frame above the maximum");
}

static void malformed_frame_ends_the_session_with_an_error(void **state) {
  (void)state;
  raw_client r;
  raw_open_site(&r, fx.tls_berlin, "eu-berlin", "eu");
  size_t mark = log_mark();
  /* A valid length, then field 1 (hello) claiming 127 bytes of which 3
   * follow: not an Envelope. */
  static const uint8_t bad[] = {0, 0, 0, 5, 0x0a, 0x7f, 'x', 'y', 'z'};
  raw_write(&r, bad, sizeof(bad));
  Xfed__Envelope *env = raw_next(&r);
  if (!env || env->body_case != XFED__ENVELOPE__BODY_ERROR) {
    log_show(mark);
    fail_msg("expected Error(XF_EFORMAT) before the close; got %s",
             env ? xf_envelope_body_name(env) : "the end of the session");
  }
  assert_int_equal(env->error->code, XF_EFORMAT);
  assert_non_null(strstr(env->error->message, "not a valid Envelope"));
  xf_envelope_free(env);
  assert_null(raw_next(&r));
  wait_log(mark, "event=peer_closed", "id=spiffe://acme/region/eu/site/eu-berlin",
           "end=\"the peer sent a frame that is too large or malformed\"",
           "frame payload of 5 bytes is not a valid Envelope", NULL);
  wait_log(mark, "event=conn_closed", "reason=FRAME", "code=XF_EFORMAT", NULL);
  raw_close(&r);
  assert_still_serving("a malformed frame");
}

/* A valid job (checked below): only the submitter's role is wrong. */
static const char valid_spec[] =
    "{\"name\": \"refused-job\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},"
    " \"data\": {\"dataset\": \"fmnist\"}, \"rounds\": 1, \"min_sites\": 1, \"seed\": 1}";

static void compliance_user_submitting_or_cancelling_a_job_is_denied_and_stays_connected(void **state) {
  (void)state;
  xf_jobspec spec;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(valid_spec, strlen(valid_spec), "refused-job.json", &spec, &err) !=
      XF_OK)
    fail_msg("the test's job spec is not valid: %s: %s", err.field, err.msg);
  size_t mark = log_mark();
  client *carol = client_dial(fx.tls_carol, "cli", NULL, NULL);
  client_expect_open(carol, mark, "carol's session");
  Xfed__JobSubmit submit = XFED__JOB_SUBMIT__INIT;
  submit.spec_json = (char *)valid_spec;
  submit.origin = "refused-job.json";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_JOB_SUBMIT;
  env.job_submit = &submit;
  client_send(carol, &env);
  wait_until(client_has_error, carol, mark, "the Error answering carol's JobSubmit");
  if (carol->errors != 1 || carol->error_code != XF_EDENIED) {
    log_show(mark);
    fail_msg("expected Error(XF_EDENIED); got %d errors, code %u: %s", carol->errors,
             (unsigned)carol->error_code, carol->error_msg);
  }
  assert_non_null(strstr(carol->error_msg, "role compliance"));
  assert_non_null(strstr(carol->error_msg, "researchers"));
  wait_log(mark, "event=request_denied", "user=spiffe://acme/user/carol/role/compliance",
           "request=job_submit", NULL);
  assert_false(log_has_line(mark, (const char *const[]){"event=job_submitted", NULL}));

  /* Cancelling is the researchers' too: denied and logged the same way. */
  assert_false(carol->closed);
  Xfed__JobCancel cancel = XFED__JOB_CANCEL__INIT;
  cancel.job_id = "1";
  env.body_case = XFED__ENVELOPE__BODY_JOB_CANCEL;
  env.job_cancel = &cancel;
  client_send(carol, &env);
  wait_until(client_has_second_error, carol, mark, "the Error answering carol's JobCancel");
  if (carol->errors != 2 || carol->error_code != XF_EDENIED ||
      !strstr(carol->error_msg, "role compliance")) {
    log_show(mark);
    fail_msg("JobCancel: expected Error(XF_EDENIED) naming the role; got code %u: %s",
             (unsigned)carol->error_code, carol->error_msg);
  }
  wait_log(mark, "event=request_denied", "user=spiffe://acme/user/carol/role/compliance",
           "request=job_cancel", NULL);

  /* The session stays open: the same connection is answered next. */
  assert_false(carol->closed);
  client_job_query(carol);
  wait_until(client_has_job_list, carol, mark, "the JobList answering carol's JobQuery");
  assert_int_equal(carol->job_lists, 1);
  assert_false(carol->closed);
  client_close_and_wait(carol, mark);
  assert_int_equal(carol->why.end, XF_CONN_END_CLOSED);
  assert_still_serving("a compliance user's job submission");
}

/* ---- requests larger than a frame ---------------------------------------------------- */

typedef struct answered {
  const client *cl;
  int want; /* TensorAck and Error frames, together */
} answered;

static bool client_answered(const void *arg) {
  const answered *a = arg;
  return a->cl->acks + a->cl->errors >= a->want || a->cl->closed;
}

/* Sends the TensorBegin of a DOCUMENT stream of `total` bytes (a request
 * larger than a frame) and waits for its answer: a TensorAck or an Error. */
static void document_begin(client *cl, uint64_t stream_id, uint64_t total, size_t mark) {
  static uint8_t digest[XF_DIGEST_BYTES];
  Xfed__TensorBegin b = XFED__TENSOR_BEGIN__INIT;
  b.stream_id = stream_id;
  b.kind = XFED__TENSOR_BEGIN__KIND__DOCUMENT;
  b.dtype = XFED__TENSOR_BEGIN__DTYPE__U8;
  b.total_bytes = total;
  b.element_count = total;
  b.chunk_bytes = 65536;
  b.digest.data = digest;
  b.digest.len = sizeof(digest);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_BEGIN;
  env.tensor_begin = &b;
  answered w = {cl, cl->acks + cl->errors + 1};
  client_send(cl, &env);
  wait_until(client_answered, &w, mark, "the answer to a DOCUMENT stream's TensorBegin");
  if (cl->closed) {
    log_show(mark);
    fail_msg("the session closed after the TensorBegin of a %llu-byte DOCUMENT stream (%s: %s)",
             (unsigned long long)total, xf_conn_end_message(cl->why.end), cl->why.msg);
  }
}

/* An Error answered the last TensorBegin: code and words. */
static void expect_error(const client *cl, int errors, xf_err code, const char *words,
                         size_t mark) {
  if (cl->errors != errors || cl->error_code != (uint32_t)code || !strstr(cl->error_msg, words)) {
    log_show(mark);
    fail_msg("expected Error(%s) saying '%s'; got %d errors, the last code %u: %s",
             xf_strerror(code), words, cl->errors, (unsigned)cl->error_code, cl->error_msg);
  }
  assert_false(cl->closed);
}

/* A request larger than a frame is a DOCUMENT stream, and its TensorBegin
 * is refused before anything is gathered: from a researcher (only a policy
 * document needs one), above XF_DOCUMENT_MAX, and when the streams of every
 * session together would announce more than two of the largest. A stream
 * replaced by a smaller one counts only the smaller. Each refusal is logged
 * with its reason, and every session stays open. */
static void document_streams_are_bounded_by_role_size_and_in_total(void **state) {
  (void)state;
  size_t mark = log_mark();
  client *alice = client_dial(fx.tls_alice, "cli", NULL, NULL);
  client *carol1 = client_dial(fx.tls_carol, "cli", NULL, NULL);
  client *carol2 = client_dial(fx.tls_carol, "cli", NULL, NULL);
  client *carol3 = client_dial(fx.tls_carol, "cli", NULL, NULL);
  client_expect_open(alice, mark, "alice's session");
  client_expect_open(carol1, mark, "carol's first session");
  client_expect_open(carol2, mark, "carol's second session");
  client_expect_open(carol3, mark, "carol's third session");

  document_begin(alice, 1, 1000, mark);
  expect_error(alice, 1, XF_EDENIED, "only a compliance or admin identity", mark);
  wait_log(mark, "event=document_refused", "user=spiffe://acme/user/alice/role/researcher",
           "reason=role", NULL);

  document_begin(carol1, 1, (uint64_t)XF_DOCUMENT_MAX + 1, mark);
  expect_error(carol1, 1, XF_ERANGE, "more than the 67108864 bytes", mark);
  wait_log(mark, "event=document_refused", "/user/carol/", "reason=size", NULL);

  /* Two of the largest at once are taken; a third stream, however small,
   * waits for one of them to end. */
  document_begin(carol1, 2, XF_DOCUMENT_MAX, mark);
  document_begin(carol2, 1, XF_DOCUMENT_MAX, mark);
  assert_int_equal(carol1->acks, 1);
  assert_int_equal(carol2->acks, 1);
  document_begin(carol3, 1, 1000, mark);
  expect_error(carol3, 1, XF_ERANGE, "send this one (1000 bytes) again when they are done", mark);
  wait_log(mark, "event=document_refused", "/user/carol/", "reason=busy", NULL);
  /* carol1 starts over with a small stream: only that one counts now. */
  document_begin(carol1, 3, 1000, mark);
  assert_int_equal(carol1->acks, 2);
  document_begin(carol3, 1, 1000, mark);
  assert_int_equal(carol3->acks, 1);
  assert_int_equal(carol3->errors, 1);

  client_close_and_wait(alice, mark);
  client_close_and_wait(carol1, mark);
  client_close_and_wait(carol2, mark);
  client_close_and_wait(carol3, mark);
  assert_still_serving("DOCUMENT streams refused by role, size and total");
}

/* A job id above 2^63 - 1 is refused naming the id and the range, never
 * clamped to the largest id: a JobQuery, a MetricsQuery and a ModelQuery
 * each get Error(XF_ERANGE), and the session stays open. */
static void job_id_beyond_the_range_is_refused_not_clamped(void **state) {
  (void)state;
  size_t mark = log_mark();
  client *carol = client_dial(fx.tls_carol, "cli", NULL, NULL);
  client_expect_open(carol, mark, "carol's session");
  static const char *const ids[] = {"9223372036854775808", "18446744073709551616",
                                    "99999999999999999999999"};
  for (size_t i = 0; i < 3; i++) {
    Xfed__JobQuery jq = XFED__JOB_QUERY__INIT;
    Xfed__MetricsQuery mq = XFED__METRICS_QUERY__INIT;
    Xfed__ModelQuery oq = XFED__MODEL_QUERY__INIT;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    if (i == 0) {
      jq.job_id = (char *)ids[i];
      env.body_case = XFED__ENVELOPE__BODY_JOB_QUERY;
      env.job_query = &jq;
    } else if (i == 1) {
      mq.job_id = (char *)ids[i];
      env.body_case = XFED__ENVELOPE__BODY_METRICS_QUERY;
      env.metrics_query = &mq;
    } else {
      oq.job_id = (char *)ids[i];
      env.body_case = XFED__ENVELOPE__BODY_MODEL_QUERY;
      env.model_query = &oq;
    }
    carol->errors = 0;
    client_send(carol, &env);
    wait_until(client_has_error, carol, mark, "the Error answering a query for a job id");
    if (carol->error_code != XF_ERANGE || !strstr(carol->error_msg, ids[i]) ||
        !strstr(carol->error_msg, "1 to 9223372036854775807")) {
      log_show(mark);
      fail_msg("job %s: expected Error(XF_ERANGE) naming the id and the range; got code %u: %s",
               ids[i], (unsigned)carol->error_code, carol->error_msg);
    }
  }
  assert_false(carol->closed);
  client_job_query(carol);
  wait_until(client_has_job_list, carol, mark, "the JobList answering carol's JobQuery");
  client_close_and_wait(carol, mark);
  assert_still_serving("job ids beyond the range");
}

static void site_certificate_taking_the_cli_role_is_refused(void **state) {
  (void)state;
  size_t mark = log_mark();
  client *cl = client_dial(fx.tls_berlin, "cli", NULL, NULL);
  wait_until(client_closed, cl, mark, "the refusal of a site certificate as cli");
  if (!cl->refused || cl->refusal != XFED__REFUSAL__REASON__NOT_AUTHORIZED) {
    log_show(mark);
    fail_msg("expected Refusal NOT_AUTHORIZED; got %s (%s; %s)", cl->refused ? "another" : "none",
             cl->refusal_text, cl->why.msg);
  }
  assert_non_null(strstr(cl->refusal_text, "'cli'"));
  wait_log(mark, "event=peer_refused", "id=spiffe://acme/region/eu/site/eu-berlin",
           "hello role 'cli' does not fit the certificate", NULL);
  wait_log(mark, "event=peer_closed", "id=spiffe://acme/region/eu/site/eu-berlin",
           "end=\"closed by this side\"", NULL);
  assert_still_serving("a site certificate as cli");
}

static void daemon_stops_cleanly_with_no_sanitizer_report(void **state) {
  (void)state;
  size_t mark = log_mark();
  assert_true(fx.keeper && fx.keeper->opened && !fx.keeper->closed);
  assert_true(fx.daemon > 0);
  fx.stopped = true;
  int ws = daemon_stop(SIGTERM);
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    log_show(mark);
    fail_msg("xfed-coord did not exit 0 after SIGTERM (wait status %d)", ws);
  }
  assert_true(log_has_line(mark, (const char *const[]){"event=coordinator_stopped", NULL}));
  log_assert_no_sanitizer_report();
  /* Its clean shutdown ended the held session with close_notify. */
  wait_until(client_closed, fx.keeper, mark, "the end of ap-tokyo's session at shutdown");
  assert_int_equal(fx.keeper->why.end, XF_CONN_END_PEER_CLOSED);
}

int main(void) {
  /* In order: one daemon serves the whole group, and the revocation test
   * changes the CRL it holds. */
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(daemon_takes_a_site_session_held_through_every_refusal),
      cmocka_unit_test(client_without_a_certificate_is_refused),
      cmocka_unit_test(client_of_another_ca_is_refused_as_untrusted),
      cmocka_unit_test(client_offering_only_tls12_is_refused),
      cmocka_unit_test(revoked_site_is_refused_once_sighup_reloads_the_crl),
      cmocka_unit_test(site_announcing_another_site_is_refused_not_authorized),
      cmocka_unit_test(frame_above_the_maximum_ends_the_session_with_an_error),
      cmocka_unit_test(malformed_frame_ends_the_session_with_an_error),
      cmocka_unit_test(compliance_user_submitting_or_cancelling_a_job_is_denied_and_stays_connected),
      cmocka_unit_test(site_certificate_taking_the_cli_role_is_refused),
      cmocka_unit_test(job_id_beyond_the_range_is_refused_not_clamped),
      cmocka_unit_test(document_streams_are_bounded_by_role_size_and_in_total),
      cmocka_unit_test(daemon_stops_cleanly_with_no_sanitizer_report),
  };
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  OPENSSL_cleanup();
  return failed;
}
