/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's bounds on its peers, end to end: the real xfed-coord on
 * loopback with a federation made by the real `xfed pki`, and the real
 * `xfed job list` of a researcher. The daemon runs with 700 descriptors, so
 * its caps come from that limit (636 in all, half of it unauthenticated, a
 * quarter of that per address). 500 TCP connections from five addresses
 * drip a real ClientHello a byte every 2 s and are each closed at the
 * handshake deadline or dropped for a newer one, while the CLI is answered
 * throughout; 500 from one address are held up to its unauthenticated cap,
 * older ones dropped for newer ones and none refused, and the CLI still
 * answered; 750 idle connections meet the unauthenticated total, dropped
 * and counted while the CLI answers; a certified
 * peer that sends a 4 MiB length prefix before its Hello is refused at once;
 * and 100 certified sessions that each announce a 4 MiB frame and send all
 * of it but 1,000 bytes, then a byte every 15 s, hold no more of the
 * coordinator's memory than its buffer budget plus a fixed allowance, and
 * are closed by the progress rule. The daemon's config tightens the
 * deadline, the budget and the progress rule (handshake 5 s, budget 32 MiB,
 * 64 KiB/s over 1 s) so that this takes under a minute. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "support.h"

#include "base/alloc.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "net/conn.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/tls.h"

/* The daemon's settings in this test (its --config). */
#define HANDSHAKE_S 5
#define BUDGET_BYTES (32u << 20)
#define MIN_RATE 65536
#define WINDOW_S 1
/* Each wait (a port file, a reply, a close) gives up after this long, and a
 * drip must be closed within the deadline plus this: generous, since a
 * loaded two-core machine, or the sanitized build, is slow. */
#define STEP_TIMEOUT_S 30.0
#define SLACK_S 25.0
/* The daemon's descriptor limit (soft and hard), and the caps it implies. */
#define DAEMON_FDS 700u
#define CAP_TOTAL (DAEMON_FDS - XF_CONN_FD_RESERVE)
#define CAP_UNAUTH (CAP_TOTAL / 2 < XF_CONN_MAX_UNAUTH ? CAP_TOTAL / 2 : XF_CONN_MAX_UNAUTH)
#define CAP_UNAUTH_PER_ADDRESS \
  (CAP_UNAUTH / 4 < XF_CONN_MAX_UNAUTH_PER_ADDR ? CAP_UNAUTH / 4 : XF_CONN_MAX_UNAUTH_PER_ADDR)
#define DRIPS 500
#define DRIP_SOURCES 5
#define DRIP_EVERY_S 2.0
/* Idle connections meeting the unauthenticated caps: from five addresses,
 * each beyond the cap per address, all of them beyond the total. */
#define IDLERS 750
#define IDLE_SOURCES 5
#define FLOOD_MAX IDLERS
#define HOLDERS 100
#define HOLDER_CERTS 10
#define FRAME_ANNOUNCED (4u << 20)
#define FRAME_SENT (FRAME_ANNOUNCED - 1000u)
/* What 100 sessions cost beyond the budget: their TLS state, connection
 * structs, a read of ciphertext each, the daemon's peers, and the heap's
 * slack (about 11 MiB measured). With a budget of 1 GiB instead, the same
 * peers took the daemon up by 282 MiB before the progress rule closed
 * them. */
#define RSS_ALLOWANCE (48u << 20)

static struct {
  char coord_bin[1024], xfed_bin[1024];
  char root[256];
  char fed[320], state[320], log_path[320], port_path[320], config[320];
  char ca[400], crl[400];
  pid_t daemon;
  int port;
  char addr[32];
  xf_tls *rita, *sites[HOLDER_CERTS];
  uint8_t client_hello[4096];
  size_t client_hello_len;
} fx;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void issued(char *buf, size_t n, const char *name, const char *ext) {
  snprintf(buf, n, "%s/issued/%s.%s", fx.fed, name, ext);
}

/* ---- the daemon's log ---------------------------------------------------------- */

static char *log_read(void) {
  FILE *f = fopen(fx.log_path, "rb");
  if (!f) return calloc(1, 1);
  size_t cap = 1 << 20, n = 0, got;
  char *buf = malloc(cap);
  assert_non_null(buf);
  while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (cap - n < 65536) {
      cap *= 2;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
  }
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* Lines of the log holding every string of the NULL-terminated list. */
static size_t log_count(const char *const *needles) {
  char *text = log_read();
  size_t count = 0;
  for (char *l = text; l && *l;) {
    char *end = strchr(l, '\n');
    if (end) *end = '\0';
    bool all = true;
    for (size_t i = 0; needles[i] && all; i++) all = strstr(l, needles[i]) != NULL;
    if (all) count++;
    l = end ? end + 1 : NULL;
  }
  free(text);
  return count;
}

static void log_show(void) {
  char *text = log_read();
  size_t len = strlen(text);
  /* The warnings matter; the tail shows where it stood. */
  fprintf(stderr, "--- the last of xfed-coord's log (%zu bytes):\n%s---\n", len,
          len > 8000 ? text + len - 8000 : text);
  free(text);
}

static void log_assert_no_sanitizer_report(void) {
  char *text = log_read();
  bool report = strstr(text, "Sanitizer") || strstr(text, "runtime error:");
  free(text);
  if (report) {
    log_show();
    fail_msg("xfed-coord's log holds a sanitizer report");
  }
}

/* ---- the daemon and the CLI ------------------------------------------------------ */

static bool daemon_alive(void) {
  if (!fx.daemon) return false;
  int ws;
  if (waitpid(fx.daemon, &ws, WNOHANG) == 0) return true;
  fprintf(stderr, "test_coord_limits: xfed-coord has exited\n");
  fx.daemon = 0;
  return false;
}

static int daemon_start(void) {
  int logfd = open(fx.log_path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (logfd < 0 || devnull < 0) return -1;
  char cert[400], key[400];
  issued(cert, sizeof(cert), "coord", "crt");
  issued(key, sizeof(key), "coord", "key");
  char *const argv[] = {"xfed-coord", "run", "--config", fx.config, "--listen", "127.0.0.1:0",
                        "--port-file", fx.port_path, "--cert", cert, "--key", key, "--ca", fx.ca,
                        "--crl", fx.crl, "--state", fx.state, "--residency-policy", "off", NULL};
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    (void)setpgid(0, 0);
    (void)prctl(PR_SET_PDEATHSIG, SIGKILL); /* ctest's timeout runs no teardown */
    if (getppid() == 1) _exit(126);
    if (dup2(devnull, 0) < 0 || dup2(logfd, 1) < 0 || dup2(logfd, 2) < 0) _exit(126);
    struct rlimit fds = {DAEMON_FDS, DAEMON_FDS};
    if (setrlimit(RLIMIT_NOFILE, &fds) != 0) _exit(126);
    setenv("XF_LOG_LEVEL", "info", 1);
    execv(fx.coord_bin, argv);
    _exit(127);
  }
  (void)setpgid(pid, pid);
  close(logfd);
  close(devnull);
  fx.daemon = pid;
  double deadline = now_s() + STEP_TIMEOUT_S;
  while (now_s() < deadline && daemon_alive()) {
    FILE *f = fopen(fx.port_path, "r");
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
    usleep(20000);
  }
  fprintf(stderr, "test_coord_limits: xfed-coord did not write its port file\n");
  log_show();
  return -1;
}

static int daemon_stop(int sig) {
  if (!fx.daemon) return -1;
  pid_t pid = fx.daemon;
  fx.daemon = 0;
  return xf_test_stop_group(pid, sig, STEP_TIMEOUT_S);
}

/* A line of /proc/PID/status in bytes: "VmRSS:" (resident now) or
 * "VmHWM:" (the most resident since the start or daemon_peak_reset). */
static size_t daemon_status_bytes(const char *key) {
  char path[64], line[256];
  snprintf(path, sizeof(path), "/proc/%d/status", (int)fx.daemon);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t kib = 0, klen = strlen(key);
  while (fgets(line, sizeof(line), f))
    if (strncmp(line, key, klen) == 0 && sscanf(line + klen, " %zu kB", &kib) == 1) break;
  fclose(f);
  return kib * 1024u;
}

static size_t daemon_rss(void) { return daemon_status_bytes("VmRSS:"); }

/* Starts VmHWM again from the resident size now (Linux's clear_refs 5):
 * true when it did, and VmHWM is then the exact peak from here on. */
static bool daemon_peak_reset(void) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/clear_refs", (int)fx.daemon);
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, "5", 1) == 1;
  close(fd);
  return ok;
}

static void run_xfed(xf_test_run *r, ...) {
  xf_test_exec_opts o = {.path = fx.xfed_bin, .cwd = fx.root, .deadline_s = 60};
  va_list ap;
  va_start(ap, r);
  const char *first = va_arg(ap, const char *);
  xf_test_vexec(&o, r, "xfed", first, ap);
  va_end(ap);
}

/* `xfed job list` as rita, the researcher: its exit status (0: answered)
 * and in *secs how long it took; on a failure its output is shown. */
static int cli_job_list_run(double *secs) {
  char cert[400], key[400];
  issued(cert, sizeof(cert), "rita", "crt");
  issued(key, sizeof(key), "rita", "key");
  xf_test_run r = {0};
  double t0 = now_s();
  run_xfed(&r, "job", "list", "--coordinator", fx.addr, "--cert", cert, "--key", key, "--ca",
           fx.ca, "--crl", fx.crl, NULL);
  *secs = now_s() - t0;
  int status = r.status;
  if (status != 0) xf_test_run_show(&r);
  xf_test_run_free(&r);
  return status;
}

/* `xfed job list` must answer (exit 0). */
static void cli_job_list(const char *when) {
  double secs;
  int status = cli_job_list_run(&secs);
  if (status != 0) {
    log_show();
    fail_msg("xfed job list %s: exit %d", when, status);
  }
}

/* ---- raw TLS peers ---------------------------------------------------------------- */

/* A blocking TLS client of the daemon with reads and writes that time out
 * after `timeout_s` (then OpenSSL says WANT_READ / WANT_WRITE, and the call
 * is made again). */
typedef struct peer {
  int fd;
  SSL *ssl;
  xf_frame_decoder *decoder;
  uint8_t plain[16384];
  size_t off, len;
} peer;

/* Connects and runs the handshake; false with why on failure. */
static bool peer_open(peer *p, xf_tls *tls, double timeout_s, char *why, size_t n) {
  memset(p, 0, sizeof(*p));
  p->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (p->fd < 0) return snprintf(why, n, "socket: %s", strerror(errno)), false;
  int small = 65536; /* what waits on a held peer stays in its own socket */
  (void)setsockopt(p->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  struct timeval tv = {.tv_sec = (time_t)timeout_s,
                       .tv_usec = (suseconds_t)((timeout_s - (double)(time_t)timeout_s) * 1e6)};
  (void)setsockopt(p->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(p->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(p->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
    return snprintf(why, n, "connect: %s", strerror(errno)), false;
  if (xf_frame_decoder_new(0, &p->decoder, NULL) != XF_OK) return false;
  p->ssl = SSL_new(xf_tls_ctx(tls));
  if (!p->ssl || SSL_set_fd(p->ssl, p->fd) != 1) return snprintf(why, n, "SSL_new"), false;
  double deadline = now_s() + STEP_TIMEOUT_S;
  for (;;) {
    ERR_clear_error();
    int rc = SSL_connect(p->ssl);
    if (rc == 1) return true;
    int e = SSL_get_error(p->ssl, rc);
    if ((e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) || now_s() > deadline) {
      unsigned long oe = ERR_get_error();
      char reason[200] = "";
      if (oe) ERR_error_string_n(oe, reason, sizeof(reason));
      return snprintf(why, n, "TLS handshake: %s (%s)", reason, strerror(errno)), false;
    }
  }
}

static void peer_close(peer *p) {
  if (p->ssl) SSL_free(p->ssl);
  if (p->fd > 0) close(p->fd);
  xf_frame_decoder_free(p->decoder);
  memset(p, 0, sizeof(*p));
}

/* Writes all of bytes, going on after timeouts until stop says so. 1 when
 * written, 0 when stopped, -1 when the daemon ended the session. */
static int peer_write(peer *p, const void *bytes, size_t n, const atomic_bool *stop) {
  for (;;) {
    ERR_clear_error();
    int w = SSL_write(p->ssl, bytes, (int)n);
    if (w == (int)n) return 1;
    int e = SSL_get_error(p->ssl, w);
    if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return -1;
    if (stop && atomic_load(stop)) return 0;
  }
}

/* The next Envelope from the daemon, Heartbeats skipped (the caller frees
 * it); NULL at the end of the session, or after `wait_s` with nothing (then
 * *timed_out is set). */
static Xfed__Envelope *peer_next(peer *p, double wait_s, bool *timed_out) {
  *timed_out = false;
  double deadline = now_s() + wait_s;
  for (;;) {
    if (p->off == p->len) {
      ERR_clear_error();
      errno = 0;
      int n = SSL_read(p->ssl, p->plain, (int)sizeof(p->plain));
      if (n <= 0) {
        int e = SSL_get_error(p->ssl, n);
        if ((e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) && now_s() < deadline) continue;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) *timed_out = true;
        ERR_clear_error();
        return NULL;
      }
      p->off = 0;
      p->len = (size_t)n;
    }
    size_t used = 0;
    Xfed__Envelope *env = NULL;
    if (xf_frame_decoder_feed(p->decoder, p->plain + p->off, p->len - p->off, &used, &env, NULL) !=
        XF_OK)
      return NULL;
    p->off += used;
    if (env && env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      xf_envelope_free(env);
      continue;
    }
    if (env) return env;
  }
}

static bool peer_send(peer *p, const Xfed__Envelope *env) {
  uint8_t *frame = NULL;
  size_t len = 0;
  if (xf_frame_encode(env, 0, &frame, &len, NULL) != XF_OK) return false;
  int rc = peer_write(p, frame, len, NULL);
  xf_free(frame);
  return rc == 1;
}

/* The hello as a site: our Hello, theirs and their HelloAck, our HelloAck.
 * Then the daemon's session is open. */
static bool peer_hello(peer *p, char *why, size_t n) {
  Xfed__Hello hello = XFED__HELLO__INIT;
  hello.protocol_version = XF_PROTOCOL_VERSION;
  hello.min_protocol_version = XF_PROTOCOL_MIN_VERSION;
  hello.role = "site";
  hello.agent = "test_coord_limits";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &hello;
  if (!peer_send(p, &env)) return snprintf(why, n, "sending the Hello failed"), false;
  bool got_hello = false, got_ack = false, timed_out;
  while (!got_hello || !got_ack) {
    Xfed__Envelope *in = peer_next(p, STEP_TIMEOUT_S, &timed_out);
    if (!in)
      return snprintf(why, n, "the hello ended: %s", timed_out ? "timed out" : "closed"), false;
    if (in->body_case == XFED__ENVELOPE__BODY_HELLO) got_hello = true;
    if (in->body_case == XFED__ENVELOPE__BODY_HELLO_ACK) got_ack = true;
    xf_envelope_free(in);
  }
  Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
  ack.protocol_version = XF_PROTOCOL_VERSION;
  env.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
  env.hello_ack = &ack;
  if (!peer_send(p, &env)) return snprintf(why, n, "sending the HelloAck failed"), false;
  return true;
}

/* ---- setup and teardown ---------------------------------------------------------- */

static int pki(const char *what, ...) {
  xf_test_run r = {0};
  xf_test_exec_opts o = {.path = fx.xfed_bin, .cwd = fx.root, .deadline_s = 60};
  va_list ap;
  va_start(ap, what);
  xf_test_vexec(&o, &r, "xfed", "pki", ap);
  va_end(ap);
  int status = r.status;
  if (status != 0) {
    fprintf(stderr, "test_coord_limits: xfed pki %s failed:\n", what);
    xf_test_run_show(&r);
  }
  xf_test_run_free(&r);
  return status;
}

static xf_tls *tls_for(const char *name) {
  char cert[400], key[400];
  issued(cert, sizeof(cert), name, "crt");
  issued(key, sizeof(key), name, "key");
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = fx.ca, .crl_path = fx.crl};
  xf_tls *tls = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tls_new(&cfg, &tls, &err) != XF_OK)
    fprintf(stderr, "test_coord_limits: TLS context for %s: %s\n", name, err.msg);
  return tls;
}

/* A real ClientHello, as a client of rita's context writes it. */
static int capture_client_hello(void) {
  SSL *ssl = SSL_new(xf_tls_ctx(fx.rita));
  BIO *rb = BIO_new(BIO_s_mem()), *wb = BIO_new(BIO_s_mem());
  if (!ssl || !rb || !wb) return -1;
  SSL_set_bio(ssl, rb, wb);
  SSL_set_connect_state(ssl);
  (void)SSL_do_handshake(ssl); /* wants the ServerHello */
  int n = BIO_read(wb, fx.client_hello, (int)sizeof(fx.client_hello));
  SSL_free(ssl);
  ERR_clear_error();
  if (n < 100 || fx.client_hello[0] != 0x16) return -1;
  fx.client_hello_len = (size_t)n;
  return 0;
}

/* 500 drips, 100 sessions, the CLI, the daemon's own: descriptors beyond
 * the usual 1024. Raised for this process only; the daemon inherits it. */
static int raise_descriptor_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return -1;
  rlim_t want = 4096;
  if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want) {
    struct rlimit up = {want, want};
    if (setrlimit(RLIMIT_NOFILE, &up) == 0) return 0;
    want = rl.rlim_max;
  }
  rl.rlim_cur = want;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0 || want < 1024) {
    fprintf(stderr, "test_coord_limits: needs 1024 descriptors; the hard limit is %llu\n",
            (unsigned long long)rl.rlim_max);
    return -1;
  }
  return 0;
}

static int fixture_setup(void) {
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_coord_limits: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.coord_bin, sizeof(fx.coord_bin), "%s/coordinator/xfed-coord", build);
  snprintf(fx.xfed_bin, sizeof(fx.xfed_bin), "%s/cli/xfed", build);
  if (access(fx.coord_bin, X_OK) != 0 || access(fx.xfed_bin, X_OK) != 0) {
    fprintf(stderr, "test_coord_limits: build the xfed-coord and xfed targets first\n");
    return -1;
  }
  if (raise_descriptor_limit() != 0) return -1;
  if (xf_crypto_init() != XF_OK) return -1;
  if (xf_test_mkdtemp(fx.root, sizeof(fx.root), "coord-limits") != 0) return -1;
  snprintf(fx.fed, sizeof(fx.fed), "%s/acme", fx.root);
  snprintf(fx.state, sizeof(fx.state), "%s/state", fx.root);
  snprintf(fx.log_path, sizeof(fx.log_path), "%s/coord.log", fx.root);
  snprintf(fx.port_path, sizeof(fx.port_path), "%s/coord.port", fx.root);
  snprintf(fx.config, sizeof(fx.config), "%s/coord.json", fx.root);
  snprintf(fx.ca, sizeof(fx.ca), "%s/ca.crt", fx.fed);
  snprintf(fx.crl, sizeof(fx.crl), "%s/crl.pem", fx.fed);
  if (pki("init", "init", "--dir", fx.fed, "--federation", "acme", NULL) != 0 ||
      pki("issue coord", "issue", "--dir", fx.fed, "--kind", "coordinator", "--name", "coord",
          NULL) != 0 ||
      pki("issue rita", "issue", "--dir", fx.fed, "--kind", "user", "--name", "rita", "--role",
          "researcher", NULL) != 0)
    return -1;
  for (int i = 0; i < HOLDER_CERTS; i++) {
    char name[32];
    snprintf(name, sizeof(name), "eu-site-%d", i);
    if (pki(name, "issue", "--dir", fx.fed, "--kind", "site", "--name", name, "--region", "eu",
            NULL) != 0)
      return -1;
    if (!(fx.sites[i] = tls_for(name))) return -1;
  }
  if (!(fx.rita = tls_for("rita")) || capture_client_hello() != 0) return -1;
  FILE *f = fopen(fx.config, "w");
  if (!f) return -1;
  fprintf(f,
          "{\"handshake_timeout_s\": %d, \"buffer_budget\": %u, \"min_frame_rate\": %d,\n"
          " \"frame_rate_window_s\": %d, \"frame_grace_s\": %d}\n",
          HANDSHAKE_S, BUDGET_BYTES, MIN_RATE, WINDOW_S, WINDOW_S);
  fclose(f);
  return daemon_start();
}

static int group_teardown(void **state) {
  (void)state;
  (void)daemon_stop(SIGKILL); /* only when a failed test left it running */
  xf_tls_free(fx.rita);
  fx.rita = NULL;
  for (int i = 0; i < HOLDER_CERTS; i++) {
    xf_tls_free(fx.sites[i]);
    fx.sites[i] = NULL;
  }
  if (fx.root[0]) xf_test_remove_tree(fx.root);
  fx.root[0] = '\0';
  return 0;
}

static int group_setup(void **state) {
  if (fixture_setup() == 0) return 0;
  (void)group_teardown(state);
  return -1;
}

/* ---- floods of raw connections ---------------------------------------------------- */

/* One raw TCP connection of a flood, as the test sees it. */
typedef struct raw {
  int fd; /* -1 once the daemon has ended it */
  double opened, closed, next;
  size_t sent; /* bytes of the ClientHello dripped */
} raw;

/* per_source connections from each of `sources` loopback addresses
 * (127.0.0.first, the next, ...), opened at once by a thread of their own,
 * which then drips the ClientHello into each (when `drip`) and watches for
 * the daemon to end them, while the test's own thread runs the CLI. */
typedef struct flood {
  unsigned first;
  int sources, per_source;
  bool drip;
  raw c[FLOOD_MAX];
  size_t n;
  size_t most_open; /* the most open at once, as this side saw them */
  atomic_bool opened, done, stop;
  char error[256];
  pthread_t thread;
  /* the CLI meanwhile */
  size_t cli_calls;
  double cli_worst_s, cli_total_s;
} flood;

static flood the_flood; /* 750 entries: not on a stack */

static void flood_open_one(flood *f, unsigned source) {
  raw *r = &f->c[f->n];
  memset(r, 0, sizeof(*r));
  r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (r->fd < 0) {
    snprintf(f->error, sizeof(f->error), "socket: %s", strerror(errno));
    return;
  }
  f->n++;
  struct sockaddr_in src = {.sin_family = AF_INET};
  src.sin_addr.s_addr = htonl(0x7f000000u | source);
  if (bind(r->fd, (struct sockaddr *)&src, sizeof(src)) != 0) {
    snprintf(f->error, sizeof(f->error),
             "bind 127.0.0.%u: %s (the test needs the loopback net 127.0.0.0/8)", source,
             strerror(errno));
    return;
  }
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)fx.port)};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(r->fd, (struct sockaddr *)&to, sizeof(to)) != 0 && errno != EINPROGRESS) {
    snprintf(f->error, sizeof(f->error), "connect %s from 127.0.0.%u: %s", fx.addr, source,
             strerror(errno));
    return;
  }
  r->opened = r->next = now_s();
}

/* One turn: a byte to each dripping connection whose time has come, and
 * the ends seen within wait_s. Returns the connections still open. */
static size_t flood_turn(flood *f, double wait_s) {
  static struct pollfd pfd[FLOOD_MAX];
  static size_t idx[FLOOD_MAX];
  double t = now_s();
  size_t k = 0;
  for (size_t i = 0; i < f->n; i++) {
    raw *r = &f->c[i];
    if (r->fd < 0) continue;
    /* Until the connect completes the write fails, and is tried again. */
    if (f->drip && t >= r->next && r->sent < fx.client_hello_len &&
        write(r->fd, fx.client_hello + r->sent, 1) == 1) {
      r->sent++;
      r->next = t + DRIP_EVERY_S;
    }
    pfd[k] = (struct pollfd){.fd = r->fd, .events = POLLIN};
    idx[k++] = i;
  }
  if (k > f->most_open) f->most_open = k;
  if (k == 0) return 0;
  (void)poll(pfd, k, (int)(wait_s * 1000));
  t = now_s();
  size_t open = k;
  for (size_t j = 0; j < k; j++) {
    if (!(pfd[j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    char b[512];
    ssize_t n = read(pfd[j].fd, b, sizeof(b));
    if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
    raw *r = &f->c[idx[j]];
    close(r->fd);
    r->fd = -1;
    r->closed = t;
    open--;
  }
  return open;
}

static void *flood_main(void *arg) {
  flood *f = arg;
  for (int s = 0; s < f->sources && !f->error[0]; s++)
    for (int i = 0; i < f->per_source && !f->error[0]; i++)
      flood_open_one(f, f->first + (unsigned)s);
  atomic_store(&f->opened, true);
  double give_up = now_s() + HANDSHAKE_S + SLACK_S + STEP_TIMEOUT_S;
  while (!f->error[0] && !atomic_load(&f->stop) && now_s() < give_up && flood_turn(f, 0.2) > 0) {
  }
  atomic_store(&f->done, true);
  return NULL;
}

/* Runs a flood to its end: with `cli`, `xfed job list` again and again
 * until the daemon has ended every connection, each call answered. Fails
 * unless the daemon ended every one of them, each within the handshake
 * deadline and the slack. */
static flood *flood_run(unsigned first, int sources, int per_source, bool drip, bool cli) {
  flood *f = &the_flood;
  memset(f, 0, sizeof(*f));
  f->first = first;
  f->sources = sources;
  f->per_source = per_source;
  f->drip = drip;
  atomic_init(&f->opened, false);
  atomic_init(&f->done, false);
  atomic_init(&f->stop, false);
  assert_int_equal(pthread_create(&f->thread, NULL, flood_main, f), 0);
  while (!atomic_load(&f->opened)) usleep(10000);
  int failed = 0;
  while (!atomic_load(&f->done)) {
    if (!daemon_alive()) {
      failed = -1;
      break;
    }
    if (!cli) {
      usleep(50000);
      continue;
    }
    double secs;
    if ((failed = cli_job_list_run(&secs)) != 0) break;
    f->cli_calls++;
    f->cli_total_s += secs;
    if (secs > f->cli_worst_s) f->cli_worst_s = secs;
  }
  atomic_store(&f->stop, true);
  pthread_join(f->thread, NULL);
  if (failed) {
    log_show();
    if (failed < 0) fail_msg("xfed-coord died during the flood");
    fail_msg("xfed job list failed (exit %d) during the flood", failed);
  }
  if (f->error[0]) fail_msg("%s", f->error);
  size_t open = 0, late = 0;
  double worst = 0;
  for (size_t i = 0; i < f->n; i++) {
    if (f->c[i].fd >= 0) {
      open++;
      close(f->c[i].fd);
      continue;
    }
    double lived = f->c[i].closed - f->c[i].opened;
    if (lived > worst) worst = lived;
    if (lived > HANDSHAKE_S + SLACK_S) late++;
    /* A ClientHello dripped at a byte every 2 s takes many minutes. */
    assert_true(f->c[i].sent < fx.client_hello_len);
  }
  if (open) {
    log_show();
    fail_msg("%zu of %zu connections are still open", open, f->n);
  }
  if (late)
    fail_msg("%zu connections outlived the handshake deadline of %d s by more than %.0f s (the "
             "longest lived %.1f s)",
             late, HANDSHAKE_S, SLACK_S, worst);
  if (cli && f->cli_calls == 0) fail_msg("no xfed job list call completed during the flood");
  fprintf(stderr,
          "test_coord_limits: %zu connections from %d address(es): at most %zu open at once, "
          "the longest lived %.1f s; %zu CLI calls answered meanwhile (%.2f s on average, "
          "%.2f s at most)\n",
          f->n, sources, f->most_open, worst, f->cli_calls,
          f->cli_calls ? f->cli_total_s / (double)f->cli_calls : 0.0, f->cli_worst_s);
  return f;
}

/* Ends by the handshake deadline, drops for a newer connection, and
 * refusals at accept by each cap, of the connections from 127.0.0.first
 * and the next sources - 1 addresses. */
typedef struct flood_ends {
  size_t deadline, dropped, refused_total, refused_per_address;
} flood_ends;

static flood_ends flood_count(unsigned first, int sources) {
  flood_ends e = {0};
  for (int s = 0; s < sources; s++) {
    char addr[40], source[40];
    snprintf(addr, sizeof(addr), "addr=127.0.0.%u:", first + (unsigned)s);
    snprintf(source, sizeof(source), "source=127.0.0.%u ", first + (unsigned)s);
    e.deadline += log_count((const char *const[]){"event=conn_closed", addr, "reason=HANDSHAKE",
                                                  "within the handshake deadline", NULL});
    e.dropped += log_count((const char *const[]){"event=conn_closed", addr, "reason=DROPPED",
                                                 "dropped for a newer connection", NULL});
    e.refused_total += log_count(
        (const char *const[]){"event=connection_refused", source, "cap=max_connections ", NULL});
    e.refused_per_address +=
        log_count((const char *const[]){"event=connection_refused", source,
                                        "cap=max_connections_per_address ", NULL});
  }
  return e;
}

/* The number after `key` on the log's last line of `event`; 0 if none. */
static unsigned long long log_last_number(const char *event, const char *key) {
  char *text = log_read();
  unsigned long long v = 0;
  for (char *l = strstr(text, event); l; l = strstr(l + 1, event)) {
    char *end = strchr(l, '\n');
    char *k = strstr(l, key);
    if (k && (!end || k < end)) v = strtoull(k + strlen(key), NULL, 10);
  }
  free(text);
  return v;
}

static void connection_caps_follow_the_descriptor_limit(void **state) {
  (void)state;
  char total[64], per_address[64], unauth[64], unauth_per_address[80], auth[80];
  snprintf(total, sizeof(total), "max_connections=%u ", (unsigned)CAP_TOTAL);
  snprintf(per_address, sizeof(per_address), "max_connections_per_address=%u ",
           (unsigned)CAP_TOTAL);
  snprintf(unauth, sizeof(unauth), "max_unauthenticated_connections=%u ", (unsigned)CAP_UNAUTH);
  snprintf(unauth_per_address, sizeof(unauth_per_address),
           "max_unauthenticated_connections_per_address=%u ", (unsigned)CAP_UNAUTH_PER_ADDRESS);
  snprintf(auth, sizeof(auth), "max_authenticated_connections_per_address=%u ",
           (unsigned)CAP_TOTAL);
  if (log_count((const char *const[]){"event=connection_limits", total, per_address, unauth,
                                      unauth_per_address, auth, NULL}) != 1 ||
      log_count((const char *const[]){"event=connection_cap_lowered", total, "LimitNOFILE",
                                      NULL}) != 1) {
    log_show();
    fail_msg("expected the caps %u, %u unauthenticated and %u of them per address from %u "
             "descriptors",
             (unsigned)CAP_TOTAL, (unsigned)CAP_UNAUTH, (unsigned)CAP_UNAUTH_PER_ADDRESS,
             DAEMON_FDS);
  }
}

static void dripped_clienthellos_end_at_the_handshake_deadline_while_the_cli_answers(
    void **state) {
  (void)state;
  /* 100 from each of 127.0.0.2-6: beyond the unauthenticated caps, so
   * each one lives until the deadline ends it or a newer one drops it;
   * none is refused. */
  (void)flood_run(2, DRIP_SOURCES, DRIPS / DRIP_SOURCES, true, true);
  flood_ends e = flood_count(2, DRIP_SOURCES);
  if (e.deadline + e.dropped != DRIPS || e.dropped < DRIPS - CAP_UNAUTH || e.refused_total ||
      e.refused_per_address) {
    log_show();
    fail_msg("%zu closed by the handshake deadline, %zu dropped, %zu + %zu refused at accept; "
             "expected %d closed by the deadline or dropped, at least %d of them dropped",
             e.deadline, e.dropped, e.refused_total, e.refused_per_address, DRIPS,
             DRIPS - (int)CAP_UNAUTH);
  }
  cli_job_list("after the drips");
}

static void clienthello_drips_from_one_address_meet_its_cap_and_the_cli_answers(void **state) {
  (void)state;
  /* 500 from 127.0.0.7: at most CAP_UNAUTH_PER_ADDRESS of them are held
   * until the deadline, older ones dropped for newer ones; none refused. */
  (void)flood_run(7, 1, DRIPS, true, true);
  flood_ends e = flood_count(7, 1);
  char limit[64];
  snprintf(limit, sizeof(limit), "limit=%u ", (unsigned)CAP_UNAUTH_PER_ADDRESS);
  size_t with_limit = log_count(
      (const char *const[]){"event=connection_dropped", "source=127.0.0.7 ",
                            "cap=max_unauthenticated_connections_per_address ", limit, NULL});
  if (e.deadline + e.dropped != DRIPS || e.dropped < DRIPS - CAP_UNAUTH_PER_ADDRESS || e.refused_total || e.refused_per_address ||
      with_limit != e.dropped) {
    log_show();
    fail_msg("%zu closed by the handshake deadline, %zu dropped (%zu by the unauthenticated cap "
             "per address %u), %zu + %zu refused",
             e.deadline, e.dropped, with_limit, (unsigned)CAP_UNAUTH_PER_ADDRESS,
             e.refused_total, e.refused_per_address);
  }
  /* The running count on the last drop is every drop by that cap so far. */
  const char *key = "dropped_max_unauthenticated_connections_per_address=";
  unsigned long long counted = log_last_number("event=connection_dropped", key);
  size_t lines = log_count((const char *const[]){"event=connection_dropped",
                                                 "cap=max_unauthenticated_connections_per_address ",
                                                 NULL});
  if (counted != lines)
    fail_msg("the last drop counts %llu drops by the cap per address; the log has %zu", counted,
             lines);
  fprintf(stderr, "test_coord_limits: %d drips from one address: %zu held until the deadline, "
                  "%zu dropped for newer ones by the unauthenticated cap per address (%u)\n",
          DRIPS, e.deadline, e.dropped, (unsigned)CAP_UNAUTH_PER_ADDRESS);
}

static void idle_connections_beyond_the_unauthenticated_caps_are_dropped_while_the_cli_answers(
    void **state) {
  (void)state;
  /* 150 from each of 127.0.0.8-12, sending nothing: beyond the cap per
   * address and the total of unauthenticated ones. Newer ones drop older
   * ones, so the CLI is answered meanwhile and nobody is refused. */
  (void)flood_run(8, IDLE_SOURCES, IDLERS / IDLE_SOURCES, false, true);
  flood_ends e = flood_count(8, IDLE_SOURCES);
  if (e.deadline + e.dropped != IDLERS || e.dropped < IDLERS - CAP_UNAUTH || e.refused_total ||
      e.refused_per_address) {
    log_show();
    fail_msg("%zu closed by the handshake deadline, %zu dropped, %zu + %zu refused; expected "
             "%d closed by the deadline or dropped, at least %d of them dropped",
             e.deadline, e.dropped, e.refused_total, e.refused_per_address, IDLERS,
             IDLERS - (int)CAP_UNAUTH);
  }
  /* Never out of descriptors: the caps kept the reserve free. */
  if (log_count((const char *const[]){"too many open files", NULL}) != 0) {
    log_show();
    fail_msg("xfed-coord ran out of descriptors");
  }
  fprintf(stderr, "test_coord_limits: %d idle connections: %zu held until the deadline, %zu "
                  "dropped for newer ones (unauthenticated caps %u, %u per address)\n",
          IDLERS, e.deadline, e.dropped, (unsigned)CAP_UNAUTH, (unsigned)CAP_UNAUTH_PER_ADDRESS);
  cli_job_list("after the unauthenticated caps");
}

/* ---- a 4 MiB prefix before the hello ----------------------------------------------- */

static void megabyte_prefix_before_the_hello_is_refused_at_once(void **state) {
  (void)state;
  peer p;
  char why[256];
  if (!peer_open(&p, fx.sites[0], STEP_TIMEOUT_S, why, sizeof(why))) fail_msg("%s", why);
  static const uint8_t prefix[4] = {0x00, 0x40, 0x00, 0x00}; /* 4 MiB */
  assert_int_equal(peer_write(&p, prefix, sizeof(prefix), NULL), 1);
  bool timed_out;
  Xfed__Envelope *env = peer_next(&p, STEP_TIMEOUT_S, &timed_out);
  /* The coordinator's own Hello went out as the session started. */
  if (env && env->body_case == XFED__ENVELOPE__BODY_HELLO) {
    xf_envelope_free(env);
    env = peer_next(&p, STEP_TIMEOUT_S, &timed_out);
  }
  if (!env || env->body_case != XFED__ENVELOPE__BODY_ERROR) {
    log_show();
    fail_msg("expected Error(XF_ERANGE) for the prefix; got %s",
             env ? "another message" : timed_out ? "nothing" : "the end of the session");
  }
  assert_int_equal(env->error->code, XF_ERANGE);
  if (!strstr(env->error->message,
              "frame of 4194304 bytes exceeds the maximum of 4096 bytes before the hello"))
    fail_msg("the Error says: %s", env->error->message);
  xf_envelope_free(env);
  assert_null(peer_next(&p, STEP_TIMEOUT_S, &timed_out)); /* then closed */
  assert_false(timed_out);
  peer_close(&p);
  assert_int_not_equal(log_count((const char *const[]){"event=conn_closed", "reason=FRAME",
                                                       "code=XF_ERANGE", "4096 bytes", NULL}),
                       0);
  cli_job_list("after the prefix");
}

/* ---- 100 sessions holding 4 MiB frames ---------------------------------------------- */

enum { H_START, H_OPEN, H_SENT, H_CLOSED, H_FAILED };

typedef struct holder {
  int index;
  pthread_t thread;
  atomic_int phase;
  bool closed_in_trickle; /* the daemon ended it after the frame's bulk */
  char why[256];
} holder;

static atomic_bool holders_stop;

/* Announces a 4 MiB frame, sends all of it but 1,000 bytes, then a byte
 * every 15 s, until the daemon closes the session. */
static void *holder_main(void *arg) {
  holder *h = arg;
  peer p;
  if (!peer_open(&p, fx.sites[h->index % HOLDER_CERTS], 1.0, h->why, sizeof(h->why)) ||
      !peer_hello(&p, h->why, sizeof(h->why))) {
    atomic_store(&h->phase, H_FAILED);
    peer_close(&p);
    return NULL;
  }
  atomic_store(&h->phase, H_OPEN);
  static const uint8_t prefix[4] = {(uint8_t)(FRAME_ANNOUNCED >> 24),
                                    (uint8_t)(FRAME_ANNOUNCED >> 16),
                                    (uint8_t)(FRAME_ANNOUNCED >> 8), (uint8_t)FRAME_ANNOUNCED};
  static const uint8_t zeros[16384];
  int rc = peer_write(&p, prefix, sizeof(prefix), &holders_stop);
  for (size_t sent = 0; rc == 1 && sent < FRAME_SENT;) {
    size_t n = FRAME_SENT - sent < sizeof(zeros) ? FRAME_SENT - sent : sizeof(zeros);
    rc = peer_write(&p, zeros, n, &holders_stop);
    sent += n;
  }
  if (rc == 1) {
    atomic_store(&h->phase, H_SENT);
    double next = now_s() + 15.0;
    bool timed_out = true;
    while (!atomic_load(&holders_stop)) {
      Xfed__Envelope *env = peer_next(&p, 0.5, &timed_out);
      if (!env && !timed_out) break; /* the daemon ended it */
      xf_envelope_free(env);
      if (now_s() >= next) {
        if (peer_write(&p, zeros, 1, &holders_stop) != 1) {
          timed_out = false;
          break;
        }
        next = now_s() + 15.0;
      }
    }
    h->closed_in_trickle = !timed_out;
  }
  atomic_store(&h->phase, rc < 0 || h->closed_in_trickle ? H_CLOSED : H_FAILED);
  if (rc == 0 || (rc == 1 && !h->closed_in_trickle))
    snprintf(h->why, sizeof(h->why), "still open when the test gave up");
  peer_close(&p);
  return NULL;
}

static void held_frames_stay_within_the_budget_and_tricklers_are_closed(void **state) {
  (void)state;
  static holder hs[HOLDERS];
  /* The peak is VmHWM from a reset here where the kernel has clear_refs,
   * else the most of VmRSS sampled every few milliseconds. */
  bool exact_peak = daemon_peak_reset();
  size_t base = daemon_rss();
  size_t peak = base;
  atomic_store(&holders_stop, false);
  /* One at a time through the hello, so that none meets the handshake
   * deadline only because a hundred handshakes share two cores. */
  for (int i = 0; i < HOLDERS; i++) {
    hs[i] = (holder){.index = i};
    atomic_init(&hs[i].phase, H_START);
    assert_int_equal(pthread_create(&hs[i].thread, NULL, holder_main, &hs[i]), 0);
    double deadline = now_s() + STEP_TIMEOUT_S;
    while (atomic_load(&hs[i].phase) == H_START && now_s() < deadline) {
      size_t rss = daemon_rss();
      if (rss > peak) peak = rss;
      usleep(2000);
    }
  }
  /* Then until the progress rule has closed every one of them. */
  double give_up = now_s() + 180.0;
  bool cli_done = false;
  for (;;) {
    size_t rss = daemon_rss();
    if (rss > peak) peak = rss;
    int done = 0, sent = 0;
    for (int i = 0; i < HOLDERS; i++) {
      int ph = atomic_load(&hs[i].phase);
      done += ph == H_CLOSED || ph == H_FAILED;
      sent += ph == H_SENT;
    }
    if (!cli_done && sent > 0) {
      cli_job_list("while sessions hold 4 MiB frames");
      cli_done = true;
    }
    if (done == HOLDERS || now_s() > give_up || !daemon_alive()) break;
    usleep(50000);
  }
  atomic_store(&holders_stop, true);
  for (int i = 0; i < HOLDERS; i++) pthread_join(hs[i].thread, NULL);
  size_t closed = 0;
  for (int i = 0; i < HOLDERS; i++) {
    if (atomic_load(&hs[i].phase) == H_CLOSED) {
      closed++;
      continue;
    }
    log_show();
    fail_msg("holder %d: %s", i, hs[i].why);
  }
  assert_int_equal(closed, HOLDERS);
  size_t slow = log_count((const char *const[]){"event=conn_closed", "reason=SLOW",
                                                "below the minimum of 65536 bytes/s", NULL});
  if (slow != HOLDERS) {
    log_show();
    fail_msg("%zu sessions were closed by the progress rule, not %d", slow, HOLDERS);
  }
  if (exact_peak) {
    size_t hwm = daemon_status_bytes("VmHWM:");
    if (hwm > peak) peak = hwm;
  }
  size_t after = daemon_rss();
  size_t growth = peak > base ? peak - base : 0;
  fprintf(stderr, "test_coord_limits: %d sessions announcing 4 MiB each: RSS %zu MiB before, "
                  "%zu MiB at the most (%s), %zu MiB after (+%zu MiB at the most; budget %u MiB, "
                  "allowance %u MiB)\n",
          HOLDERS, base >> 20, peak >> 20, exact_peak ? "VmHWM" : "sampled", after >> 20,
          growth >> 20, BUDGET_BYTES >> 20, RSS_ALLOWANCE >> 20);
#if defined(__SANITIZE_ADDRESS__)
  /* AddressSanitizer keeps freed memory in quarantine and adds shadow
   * memory: the bound is checked in the normal build. */
  (void)growth;
#else
  if (growth > (size_t)BUDGET_BYTES + RSS_ALLOWANCE)
    fail_msg("the coordinator grew by %zu MiB holding frames: more than the budget (%u MiB) and "
             "the allowance (%u MiB)",
             growth >> 20, BUDGET_BYTES >> 20, RSS_ALLOWANCE >> 20);
#endif
  cli_job_list("after the sessions");
}

static void daemon_stops_cleanly_with_its_totals_and_no_sanitizer_report(void **state) {
  (void)state;
  int ws = daemon_stop(SIGTERM);
  if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
    log_show();
    fail_msg("xfed-coord did not exit 0 after SIGTERM (wait status %d)", ws);
  }
  log_assert_no_sanitizer_report();
  /* The totals agree with what the tests saw: the holders alone were
   * closed by the progress rule, their frames waited for the budget, and
   * the budget never held more than its limit beyond the small frames
   * (at most 16 KiB a connection) it grants regardless. */
  const char *ev = "event=connection_totals";
  if (log_count((const char *const[]){ev, NULL}) != 1) {
    log_show();
    fail_msg("no connection_totals line at the stop");
  }
  unsigned long long slow = log_last_number(ev, "ended_slow=");
  unsigned long long waits = log_last_number(ev, "budget_waits=");
  unsigned long long peak = log_last_number(ev, "budget_peak=");
  unsigned long long refused = log_last_number(ev, "refused_max_connections=") +
                               log_last_number(ev, "refused_max_connections_per_address=");
  unsigned long long dropped = log_last_number(ev, "dropped_unauthenticated=");
  unsigned long long small_frames = (unsigned long long)(HOLDERS + 8) * XF_FRAME_BUDGET_SMALL;
  fprintf(stderr, "test_coord_limits: totals: %llu closed by the progress rule, %llu frames "
                  "waited for the budget, its peak %llu bytes (limit %u), %llu refused at accept, "
                  "%llu dropped unauthenticated\n",
          slow, waits, peak, BUDGET_BYTES, refused, dropped);
  assert_int_equal(slow, HOLDERS);
  assert_true(waits > 0);
  assert_true(peak >= FRAME_ANNOUNCED);
  assert_true(peak <= (unsigned long long)BUDGET_BYTES + small_frames);
  assert_int_equal(refused, 0);
  assert_true(dropped > 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(connection_caps_follow_the_descriptor_limit),
      /* First, while the daemon's heap holds nothing freed by the floods. */
      cmocka_unit_test(held_frames_stay_within_the_budget_and_tricklers_are_closed),
      cmocka_unit_test(megabyte_prefix_before_the_hello_is_refused_at_once),
      cmocka_unit_test(dripped_clienthellos_end_at_the_handshake_deadline_while_the_cli_answers),
      cmocka_unit_test(clienthello_drips_from_one_address_meet_its_cap_and_the_cli_answers),
      cmocka_unit_test(
          idle_connections_beyond_the_unauthenticated_caps_are_dropped_while_the_cli_answers),
      cmocka_unit_test(daemon_stops_cleanly_with_its_totals_and_no_sanitizer_report),
  };
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  OPENSSL_cleanup();
  return failed;
}
