/* SPDX-License-Identifier: Apache-2.0 */
/* The TLS baseline of xfed-bench-round (round_bench.c, step 5): a server
 * in a forked child with the coordinator's certificate, clients in this
 * process with the sites' certificates, and TLS alone carrying a round's
 * bytes between them. The tiered mode runs one per region at once
 * (round_tiered.c). */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <uv.h>

#include "base/alloc.h"
#include "bench/round_bench.h"
#include "net/conn.h"
#include "net/tls.h"

/* ---- the TLS baseline ----------------------------------------------------------------------- */

/* One side of a baseline connection. */
typedef struct tls_peer {
  xf_conn *conn;
  uint64_t sent, received;
  bool sending, closed;
} tls_peer;

typedef struct tls_run {
  uv_loop_t loop;
  uv_timer_t watchdog;
  xf_tls *tls;
  xf_listener *listener;
  bool server, failed;
  char why[512];
  int n, connected, closed, rep, reps, done;
  size_t down_len, up_len; /* server to client, client to server */
  tls_peer *peers;
  double t0;
  double *times;
  double cpu0, cpu; /* this process's CPU seconds: at the first repetition, over all of them */
  int port_fd, result_fd;
  int region;       /* whose sites' certificates: -1 in the flat mode */
  const char *host; /* the server's address */
  /* The tiered mode: the server says "ready" once every client is in and
   * "T0 T1" (monotonic seconds) after each repetition on sync_fd, and starts
   * each repetition only on a "go" line on go_fd; -1 in the flat mode. */
  int sync_fd, go_fd;
} tls_run;

static tls_run *g_tls;
static uint8_t g_payload[CHUNK];

static void tls_fail(tls_run *r, const char *what, const char *msg) {
  if (!r->failed) snprintf(r->why, sizeof(r->why), "%.100s: %.400s", what, msg);
  r->failed = true;
  for (int i = 0; i < r->n; i++)
    if (r->peers[i].conn) xf_conn_close(r->peers[i].conn);
  if (r->listener) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
  }
}

/* Sends the rest of this peer's share of a repetition while the
 * connection takes it. */
static void tls_pump(tls_run *r, tls_peer *p) {
  size_t total = r->server ? r->down_len : r->up_len;
  while (p->sending && p->conn && p->sent < total) {
    size_t len = total - p->sent < CHUNK ? (size_t)(total - p->sent) : CHUNK;
    Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
    chunk.stream_id = 1;
    chunk.index = p->sent / CHUNK;
    chunk.offset = p->sent;
    chunk.data.data = g_payload;
    chunk.data.len = len;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
    env.tensor_chunk = &chunk;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_conn_send(p->conn, &env, &err);
    if (rc == XF_ERANGE) return;
    if (rc != XF_OK) {
      tls_fail(r, "send", err.msg);
      return;
    }
    p->sent += len;
  }
  if (p->sent >= total) p->sending = false;
}

static void tls_start_rep(tls_run *r) {
  r->done = 0;
  r->t0 = xf_bench_now();
  if (r->rep == 0) r->cpu0 = xf_rb_self_cpu_s();
  for (int i = 0; i < r->n; i++) {
    r->peers[i].sent = r->peers[i].received = 0;
    r->peers[i].sending = true;
  }
  for (int i = 0; i < r->n; i++) tls_pump(r, &r->peers[i]);
}

/* The server: the next repetition, in the tiered mode once the orchestrator
 * says go (the loop waits here; the clients are idle until then). */
static void tls_next_rep(tls_run *r) {
  char line[16];
  if (r->go_fd >= 0 && !xf_rb_read_line(r->go_fd, line, sizeof(line), 600)) {
    tls_fail(r, "baseline", "no go from the orchestrator");
    return;
  }
  tls_start_rep(r);
}

static xf_err tls_on_connect(xf_conn *c, const xf_spiffe_id *peer) {
  tls_run *r = g_tls;
  (void)peer;
  /* No hello in the baseline: the peer is trusted as soon as TLS is up. */
  XF_GUARD(xf_conn_authenticated(c, 0, NULL));
  if (!r->server) return XF_OK;
  if (r->connected >= r->n) return XF_EDENIED;
  tls_peer *p = &r->peers[r->connected++];
  p->conn = c;
  xf_conn_set_user(c, p);
  if (r->connected == r->n) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
    if (r->sync_fd >= 0 && dprintf(r->sync_fd, "ready\n") < 0) {
      tls_fail(r, "baseline", "cannot tell the orchestrator");
      return XF_OK;
    }
    tls_next_rep(r);
  }
  return XF_OK;
}

static void tls_on_frame(xf_conn *c, const Xfed__Envelope *env) {
  tls_run *r = g_tls;
  tls_peer *p = xf_conn_user(c);
  if (env->body_case != XFED__ENVELOPE__BODY_TENSOR_CHUNK || !p) return;
  p->received += env->tensor_chunk->data.len;
  if (!r->server) {
    if (p->received == r->down_len) { /* all of it: answer with the update */
      p->received = 0;
      p->sent = 0;
      p->sending = true;
      tls_pump(r, p);
    }
    return;
  }
  if (p->received != r->up_len) return;
  if (++r->done < r->n) return;
  double t1 = xf_bench_now();
  r->times[r->rep++] = t1 - r->t0;
  if (r->rep == r->reps) r->cpu = xf_rb_self_cpu_s() - r->cpu0;
  if (r->sync_fd >= 0 && dprintf(r->sync_fd, "%.9f %.9f\n", r->t0, t1) < 0) {
    tls_fail(r, "baseline", "cannot tell the orchestrator");
    return;
  }
  if (r->rep < r->reps) {
    tls_next_rep(r);
    return;
  }
  for (int i = 0; i < r->n; i++) xf_conn_close(r->peers[i].conn);
}

static void tls_on_drain(xf_conn *c) {
  tls_peer *p = xf_conn_user(c);
  if (p) tls_pump(g_tls, p);
}

/* Once every connection has closed, nothing but the watchdog is left. */
static void tls_maybe_finish(tls_run *r) {
  if (r->closed < r->n) return;
  if (!uv_is_closing((uv_handle_t *)&r->watchdog)) uv_close((uv_handle_t *)&r->watchdog, NULL);
  if (r->listener) {
    xf_listener_close(r->listener, NULL);
    r->listener = NULL;
  }
}

static void tls_on_close(xf_conn *c, const xf_conn_reason *why) {
  tls_run *r = g_tls;
  tls_peer *p = xf_conn_user(c);
  if (p && p != (void *)r) {
    p->conn = NULL;
    p->closed = true;
  }
  bool clean = why->end == XF_CONN_END_CLOSED || why->end == XF_CONN_END_PEER_CLOSED;
  if (!clean) tls_fail(r, "connection", why->msg);
  r->closed++;
  tls_maybe_finish(r);
}

static void tls_on_watchdog(uv_timer_t *t) {
  tls_run *r = t->data;
  tls_fail(r, "baseline", "took longer than its time limit");
  if (!uv_is_closing((uv_handle_t *)&r->watchdog)) uv_close((uv_handle_t *)&r->watchdog, NULL);
}

static xf_conn_opts tls_opts(void *user) {
  xf_conn_opts o = {.on_connect = tls_on_connect, .on_frame = tls_on_frame,
                    .on_drain = tls_on_drain, .on_close = tls_on_close, .user = user,
                    .handshake_timeout_ms = BENCH_HANDSHAKE_MS,
                    .idle_timeout_ms = BENCH_HANDSHAKE_MS};
  return o;
}

/* The baseline's server, in the forked child: returns the exit status. */
static int tls_server_main(tls_run *r, const bench_paths *p, double timeout_s) {
  xf_errctx err;
  xf_errctx_clear(&err);
  g_tls = r;
  r->server = true;
  if (uv_loop_init(&r->loop) != 0) return 1;
  if (xf_rb_make_tls(p, "coord", &r->tls, &err) != XF_OK) {
    fprintf(stderr, "baseline server: %s\n", err.msg);
    return 1;
  }
  xf_conn_opts o = tls_opts(r);
  if (xf_listen(&r->loop, r->tls, r->host, 0, &o, &r->listener, &err) != XF_OK) {
    fprintf(stderr, "baseline server: %s\n", err.msg);
    return 1;
  }
  char line[64];
  int len = snprintf(line, sizeof(line), "%d\n", xf_listener_port(r->listener));
  if (!xf_rb_write_all(r->port_fd, line, (size_t)len)) return 1;
  close(r->port_fd);
  uv_timer_init(&r->loop, &r->watchdog);
  r->watchdog.data = r;
  uv_timer_start(&r->watchdog, tls_on_watchdog, (uint64_t)(timeout_s * 1000), 0);
  uv_run(&r->loop, UV_RUN_DEFAULT);
  uv_loop_close(&r->loop);
  xf_tls_free(r->tls);
  if (r->failed || r->rep < r->reps) {
    fprintf(stderr, "baseline server: %s\n", r->failed ? r->why : "ended early");
    return 1;
  }
  /* The times, in text, one line. */
  char *out = xf_malloc((size_t)r->reps * 32 + 64);
  if (!out) return 1;
  size_t at = 0;
  for (int i = 0; i < r->reps; i++) at += (size_t)sprintf(out + at, "%.9f ", r->times[i]);
  at += (size_t)sprintf(out + at, "cpu=%.6f\n", r->cpu);
  bool ok = xf_rb_write_all(r->result_fd, out, at);
  xf_free(out);
  return ok ? 0 : 1;
}
/* Runs `reps` repetitions of the baseline: times[reps] in seconds and *cpu, the CPU seconds of
 * the server over its repetitions plus those of the clients over the whole
 * run (their handshakes included); false with why on failure. */
bool xf_rb_run_tls_baseline(const bench_opts *o, const bench_paths *p, const tls_plan *plan,
                            size_t down_len, size_t up_len, int reps, double *times, double *cpu,
                            char *why, size_t why_n) {
  for (size_t i = 0; i < sizeof(g_payload); i++) g_payload[i] = (uint8_t)(i * 2654435761u >> 13);
  int port_pipe[2], result_pipe[2];
  if (pipe(port_pipe) != 0 || pipe(result_pipe) != 0) {
    snprintf(why, why_n, "pipe: %s", strerror(errno));
    return false;
  }
  tls_run r;
  memset(&r, 0, sizeof(r));
  r.n = o->sites;
  r.region = plan->region;
  r.host = plan->host;
  r.sync_fd = plan->sync_fd;
  r.go_fd = plan->go_fd;
  r.reps = reps;
  r.down_len = down_len;
  r.up_len = up_len;
  r.peers = xf_calloc((size_t)r.n, sizeof(*r.peers));
  r.times = times;
  if (!r.peers) {
    snprintf(why, why_n, "out of memory");
    return false;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(why, why_n, "fork: %s", strerror(errno));
    xf_free(r.peers);
    return false;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(port_pipe[0]);
    close(result_pipe[0]);
    r.port_fd = port_pipe[1];
    r.result_fd = result_pipe[1];
    _exit(tls_server_main(&r, p, o->timeout_s));
  }
  xf_rb_children[CHILD_TLS] = pid;
  close(port_pipe[1]);
  close(result_pipe[1]);
  bool ok = false;
  char line[8192];
  xf_tls **tls = xf_calloc((size_t)r.n, sizeof(*tls));
  xf_errctx err;
  xf_errctx_clear(&err);
  if (!tls || !xf_rb_read_line(port_pipe[0], line, sizeof(line), 30)) {
    snprintf(why, why_n, "the baseline server did not start");
    goto out;
  }
  int port = atoi(line);
  g_tls = &r;
  r.server = false;
  r.rep = 0;
  if (uv_loop_init(&r.loop) != 0) {
    snprintf(why, why_n, "cannot start the loop");
    goto out;
  }
  uv_timer_init(&r.loop, &r.watchdog);
  r.watchdog.data = &r;
  uv_timer_start(&r.watchdog, tls_on_watchdog, (uint64_t)(o->timeout_s * 1000), 0);
  for (int i = 0; i < r.n; i++) {
    char name[32];
    xf_rb_site_name(r.region, i, name, sizeof(name));
    xf_conn_opts co = tls_opts(&r.peers[i]);
    if (xf_rb_make_tls(p, name, &tls[i], &err) != XF_OK ||
        xf_dial(&r.loop, tls[i], r.host, port, &co, &r.peers[i].conn, &err) != XF_OK) {
      tls_fail(&r, "dial", err.msg);
      r.closed += r.n - i; /* never made; the dialed ones close and end the loop */
      tls_maybe_finish(&r);
      break;
    }
  }
  double cpu0 = xf_rb_self_cpu_s();
  uv_run(&r.loop, UV_RUN_DEFAULT);
  uv_loop_close(&r.loop);
  *cpu = xf_rb_self_cpu_s() - cpu0;
  if (r.failed) {
    snprintf(why, why_n, "baseline client: %s", r.why);
    goto out;
  }
  if (!xf_rb_read_line(result_pipe[0], line, sizeof(line), 30)) {
    snprintf(why, why_n, "the baseline server reported nothing");
    goto out;
  }
  {
    char *at = line;
    for (int i = 0; i < r.reps; i++) {
      char *end;
      times[i] = strtod(at, &end);
      if (end == at) break;
      at = end;
      if (i == r.reps - 1) ok = true;
    }
    char *c = strstr(at, "cpu=");
    if (ok && c) *cpu += strtod(c + 4, NULL);
    if (!ok) snprintf(why, why_n, "the baseline server's report is short: %.400s", line);
  }
out:
  close(port_pipe[0]);
  close(result_pipe[0]);
  {
    int status = 0;
    if (ok) {
      double until = xf_bench_now() + 10;
      while (waitpid(pid, &status, WNOHANG) == 0 && xf_bench_now() < until) xf_rb_sleep_ms(5);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    xf_rb_children[CHILD_TLS] = 0;
  }
  for (int i = 0; tls && i < r.n; i++) xf_tls_free(tls[i]);
  xf_free(tls);
  xf_free(r.peers);
  return ok;
}
