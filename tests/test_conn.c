/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the connection layer on loopback with real certificates: mutual
 * TLS 1.3 with SPIFFE identities, the Hello exchange, a 5 MB tensor stream
 * under backpressure, refusal of revoked, foreign and TLS 1.2 peers, the
 * frame limit, heartbeats and the idle timeout, paused reading, the CRL
 * reload, and the bounds on peers: the handshake deadline, the frame limit
 * before the session opens, the Error answering a malformed Hello, the
 * listener's caps with their counts, and a frame waiting for the buffer
 * budget. Every test runs its loop until no handle is left. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/ssl.h>
#include <uv.h>

#include "support.h"

#include "base/alloc.h"
#include "crypto/digest.h"
#include "crypto/pki.h"
#include "net/conn.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/session.h"
#include "net/tensor.h"
#include "net/tls.h"

/* ---- the federations ------------------------------------------------------- */

static char test_root[256];
static char acme_dir[512];  /* federation acme: coord, eu-berlin, eu-paris (revoked), eu-rome */
static char other_dir[512]; /* another CA that also calls itself acme: eu-berlin */
static xf_federation *acme;

static void issue(xf_federation *fed, xf_pki_kind kind, const char *name, const char *region) {
  xf_pki_issue_opts o = {.kind = kind, .name = name, .region = region};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_federation_issue(fed, &o, NULL, &err) != XF_OK) fail_msg("issue %s: %s", name, err.msg);
}

static int group_setup(void **state) {
  (void)state;
  if (xf_test_mkdtemp(test_root, sizeof(test_root), "conn") != 0) return -1;
  if (xf_crypto_init() != XF_OK) return -1;
  snprintf(acme_dir, sizeof(acme_dir), "%s/acme", test_root);
  snprintf(other_dir, sizeof(other_dir), "%s/other", test_root);
  if (xf_federation_init(acme_dir, "acme", 0, &acme, NULL) != XF_OK) return -1;
  issue(acme, XF_PKI_KIND_COORDINATOR, "coord", NULL);
  issue(acme, XF_PKI_KIND_SITE, "eu-berlin", "eu");
  issue(acme, XF_PKI_KIND_SITE, "eu-paris", "eu");
  issue(acme, XF_PKI_KIND_SITE, "eu-rome", "eu");
  if (xf_federation_revoke(acme, "eu-paris", XF_PKI_REASON_KEY_COMPROMISE, NULL, NULL) != XF_OK)
    return -1;
  xf_federation *other = NULL;
  if (xf_federation_init(other_dir, "acme", 0, &other, NULL) != XF_OK) return -1;
  issue(other, XF_PKI_KIND_SITE, "eu-berlin", "eu");
  xf_federation_close(other);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_federation_close(acme);
  xf_test_remove_tree(test_root);
  return 0;
}

/* A context presenting NAME's certificate from cert_dir and trusting acme. */
static xf_tls *make_tls(const char *cert_dir, const char *name) {
  char cert[1024], key[1024], ca[1024], crl[1024];
  snprintf(cert, sizeof(cert), "%s/issued/%s.crt", cert_dir, name);
  snprintf(key, sizeof(key), "%s/issued/%s.key", cert_dir, name);
  snprintf(ca, sizeof(ca), "%s/ca.crt", acme_dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", acme_dir);
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  xf_tls *tls = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_tls_new(&cfg, &tls, &err) != XF_OK) fail_msg("tls %s: %s", name, err.msg);
  return tls;
}

/* ---- the harness: one listener, one or two dials, one loop ------------------ */

typedef struct harness harness;

/* One end of a connection, as its callbacks saw it. */
typedef struct side {
  harness *h;
  bool server;
  xf_conn *conn;
  bool connected, closed;
  xf_spiffe_id peer;
  xf_conn_reason why;
  int frames;
  uint64_t closed_at_ms;
  /* Hello exchange */
  bool got_hello, got_ack;
  uint32_t version;
  /* Error frames received */
  uint32_t error_code;
  char error_msg[512];
  /* session scenarios */
  xf_session session;
  char session_error[512];
  int app_frames;
  /* pause test: Metrics.samples in arrival order */
  uint64_t samples[16];
} side;

struct harness {
  uv_loop_t loop;
  uv_timer_t watchdog;
  uv_timer_t timer;
  bool timed_out;
  xf_tls *server_tls, *client_tls;
  xf_listener *listener;
  xf_conn_opts sopts, copts;
  side server, client, client2;
  uint64_t started_ms;
  /* scenario hooks; NULL does nothing */
  void (*on_connected)(harness *h, side *s);
  void (*on_frame)(harness *h, side *s, const Xfed__Envelope *env);
  void (*on_drain)(harness *h, side *s);
  void (*on_timer)(harness *h);
  /* called when the server's connection has closed; NULL closes the listener */
  void (*after_server_close)(harness *h);
  /* tensor scenario */
  xf_tensor_sender *sender;
  xf_tensor_msg pending;
  bool has_pending, begin_acked, delivered;
  int busy, drains;
  xf_tensor_receiver *receiver;
  uint8_t *sent, *received;
  size_t tensor_len;
  /* pause scenario */
  int frames_when_timer_fired;
  /* reload scenario */
  int phase;
  side server1;
  /* Without a hello the harness trusts each peer once TLS is up
   * (xf_conn_authenticated in cb_connect); these keep a side from it. */
  bool server_unauthenticated, client_unauthenticated;
  /* the malformed Hello the client sends: 1 version 0, 2 min > max */
  int bad_hello;
  /* guard scenarios: server sides the guard let authenticate, and refused */
  int sessions_taken, sessions_refused;
  /* raw TCP scenarios */
  int raw_fd;
  size_t raw_sent;
  xf_conn_guard guard;
};

static xf_err cb_connect(xf_conn *c, const xf_spiffe_id *peer) {
  side *s = xf_conn_user(c);
  s->conn = c;
  s->connected = true;
  s->peer = *peer;
  if (!(s->server ? s->h->server_unauthenticated : s->h->client_unauthenticated))
    assert_int_equal(xf_conn_authenticated(c, 0, NULL), XF_OK);
  if (s->h->on_connected) s->h->on_connected(s->h, s);
  return XF_OK;
}

static void cb_frame(xf_conn *c, const Xfed__Envelope *env) {
  side *s = xf_conn_user(c);
  s->frames++;
  if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
    s->error_code = env->error->code;
    snprintf(s->error_msg, sizeof(s->error_msg), "%s",
             env->error->message ? env->error->message : "");
  }
  if (s->h->on_frame) s->h->on_frame(s->h, s, env);
}

static void cb_drain(xf_conn *c) {
  side *s = xf_conn_user(c);
  s->h->drains++;
  if (s->h->on_drain) s->h->on_drain(s->h, s);
}

static void cb_close(xf_conn *c, const xf_conn_reason *why) {
  side *s = xf_conn_user(c);
  harness *h = s->h;
  s->conn = NULL;
  s->closed = true;
  s->why = *why;
  s->closed_at_ms = uv_now(&h->loop);
  if (s->server) {
    if (h->after_server_close) h->after_server_close(h);
    else if (h->listener) {
      xf_listener_close(h->listener, NULL);
      h->listener = NULL;
    }
  }
}

static void on_watchdog(uv_timer_t *t) {
  harness *h = t->data;
  h->timed_out = true;
  side *sides[] = {&h->server, &h->client, &h->client2, &h->server1};
  for (size_t i = 0; i < 4; i++)
    if (sides[i]->conn) xf_conn_close(sides[i]->conn);
  h->after_server_close = NULL;
  if (h->listener) {
    xf_listener_close(h->listener, NULL);
    h->listener = NULL;
  }
}

static void on_scenario_timer(uv_timer_t *t) {
  harness *h = t->data;
  if (h->on_timer) h->on_timer(h);
}

static void harness_init(harness *h) {
  memset(h, 0, sizeof(*h));
  assert_int_equal(uv_loop_init(&h->loop), 0);
  uv_timer_init(&h->loop, &h->watchdog);
  uv_timer_init(&h->loop, &h->timer);
  h->watchdog.data = h->timer.data = h;
  uv_timer_start(&h->watchdog, on_watchdog, 10000, 0);
  uv_unref((uv_handle_t *)&h->watchdog); /* it must not keep a finished loop alive */
  h->server.h = h->client.h = h->client2.h = h->server1.h = h;
  h->server.server = h->server1.server = true;
  xf_conn_opts base = {.on_connect = cb_connect, .on_frame = cb_frame, .on_drain = cb_drain,
                       .on_close = cb_close};
  h->sopts = base;
  h->sopts.user = &h->server;
  h->copts = base;
  h->copts.user = &h->client;
  h->server_tls = make_tls(acme_dir, "coord");
  h->client_tls = make_tls(acme_dir, "eu-berlin");
  h->started_ms = uv_now(&h->loop);
}

static void harness_listen(harness *h) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_listen(&h->loop, h->server_tls, "127.0.0.1", 0, &h->sopts, &h->listener, &err) != XF_OK)
    fail_msg("listen: %s", err.msg);
  assert_true(xf_listener_port(h->listener) > 0);
}

static void harness_dial(harness *h, side *s) {
  xf_conn_opts o = h->copts;
  o.user = s;
  xf_conn *c = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_dial(&h->loop, h->client_tls, "127.0.0.1", xf_listener_port(h->listener), &o, &c, &err) !=
      XF_OK)
    fail_msg("dial: %s", err.msg);
  s->conn = c;
}

/* Runs the loop until every connection and the listener have closed, then
 * checks that nothing is left on it. */
static void harness_run(harness *h) {
  uv_run(&h->loop, UV_RUN_DEFAULT);
  uv_close((uv_handle_t *)&h->watchdog, NULL);
  uv_close((uv_handle_t *)&h->timer, NULL);
  uv_run(&h->loop, UV_RUN_DEFAULT);
  assert_int_equal(uv_loop_close(&h->loop), 0);
  xf_tls_free(h->server_tls);
  xf_tls_free(h->client_tls);
  assert_false(h->timed_out);
}

static void send_env(xf_conn *c, Xfed__Envelope *env) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_conn_send(c, env, &err) != XF_OK) fail_msg("send: %s", err.msg);
}

/* ---- handshake and hello ---------------------------------------------------- */

static void hello_send(harness *h, side *s) {
  (void)h;
  Xfed__Hello hello = XFED__HELLO__INIT;
  hello.protocol_version = XF_PROTOCOL_VERSION;
  hello.min_protocol_version = XF_PROTOCOL_MIN_VERSION;
  hello.role = s->server ? "coordinator" : "site";
  hello.agent = "xfed-test";
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &hello;
  send_env(s->conn, &env);
}

static void hello_frame(harness *h, side *s, const Xfed__Envelope *env) {
  (void)h;
  if (env->body_case == XFED__ENVELOPE__BODY_HELLO) {
    assert_false(s->got_hello);
    s->got_hello = true;
    assert_int_equal(xf_hello_negotiate(XF_PROTOCOL_MIN_VERSION, XF_PROTOCOL_VERSION, env->hello,
                                        &s->version, NULL),
                     XF_OK);
    Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
    ack.protocol_version = s->version;
    Xfed__Envelope out = XFED__ENVELOPE__INIT;
    out.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
    out.hello_ack = &ack;
    send_env(s->conn, &out);
  } else if (env->body_case == XFED__ENVELOPE__BODY_HELLO_ACK) {
    assert_true(s->got_hello); /* the peer's Hello went out before its ack */
    s->got_ack = true;
    assert_int_equal(env->hello_ack->protocol_version, XF_PROTOCOL_VERSION);
    if (!s->server) xf_conn_close(s->conn); /* the dialer ends the session */
  } else {
    fail_msg("unexpected body %d", (int)env->body_case);
  }
}

static void handshake_shows_both_identities_and_hello_is_exchanged(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.on_connected = hello_send;
  h.on_frame = hello_frame;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);

  assert_true(h.client.connected && h.server.connected);
  assert_int_equal(h.client.peer.kind, XF_PKI_KIND_COORDINATOR);
  assert_string_equal(h.client.peer.name, "coord");
  assert_string_equal(h.client.peer.federation, "acme");
  assert_int_equal(h.server.peer.kind, XF_PKI_KIND_SITE);
  assert_string_equal(h.server.peer.name, "eu-berlin");
  assert_string_equal(h.server.peer.region, "eu");
  assert_true(h.client.got_hello && h.client.got_ack);
  assert_true(h.server.got_hello && h.server.got_ack);
  assert_int_equal(h.client.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.server.why.end, XF_CONN_END_PEER_CLOSED);
  assert_int_equal(h.server.why.code, XF_OK);
}

/* ---- a 5 MB tensor ---------------------------------------------------------- */

static void tensor_pump(harness *h) {
  xf_conn *c = h->client.conn;
  for (;;) {
    if (!h->has_pending) {
      xf_err rc = xf_tensor_sender_next(h->sender, &h->pending);
      if (rc == XF_ENOENT) return;
      assert_int_equal(rc, XF_OK);
      h->has_pending = true;
    }
    xf_err rc = xf_conn_send(c, &h->pending.env, NULL);
    if (rc == XF_ERANGE) {
      h->busy++; /* on_drain calls again */
      return;
    }
    assert_int_equal(rc, XF_OK);
    h->has_pending = false;
    if (h->pending.env.body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN) return; /* await the ack */
  }
}

static void tensor_connected(harness *h, side *s) {
  if (!s->server) tensor_pump(h);
}

static void tensor_drain(harness *h, side *s) {
  if (!s->server) tensor_pump(h);
}

static xf_err tensor_sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                          xf_errctx *ctx) {
  (void)ctx;
  harness *h = user;
  memcpy(h->received + offset, data, len);
  return XF_OK;
}

static void send_ack(harness *h, xf_conn *c) {
  Xfed__TensorAck ack;
  xf_tensor_receiver_ack(h->receiver, &ack);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = &ack;
  send_env(c, &env);
}

static void tensor_frame(harness *h, side *s, const Xfed__Envelope *env) {
  if (s->server) {
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_tensor_receiver_handle(h->receiver, env, &err) != XF_OK) fail_msg("receiver: %s", err.msg);
    if (env->body_case != XFED__ENVELOPE__BODY_TENSOR_CHUNK) send_ack(h, s->conn);
    return;
  }
  assert_int_equal(env->body_case, XFED__ENVELOPE__BODY_TENSOR_ACK);
  if (!h->begin_acked) {
    h->begin_acked = true;
    assert_int_equal(xf_tensor_sender_resume(h->sender, env->tensor_ack->next_offset, NULL), XF_OK);
    tensor_pump(h);
    return;
  }
  assert_int_equal(env->tensor_ack->next_offset, h->tensor_len);
  h->delivered = true;
  xf_conn_close(s->conn);
}

static void tensor_of_5mb_crosses_with_its_digest_under_backpressure(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.tensor_len = 5u * 1024u * 1024u + 4096u;
  h.sent = xf_malloc(h.tensor_len);
  h.received = xf_calloc(1, h.tensor_len);
  assert_non_null(h.sent);
  assert_non_null(h.received);
  uint32_t x = 2463534242u;
  for (size_t i = 0; i < h.tensor_len; i++) {
    x ^= x << 13, x ^= x >> 17, x ^= x << 5;
    h.sent[i] = (uint8_t)x;
  }
  xf_tensor_desc desc = {.stream_id = 7, .kind = XFED__TENSOR_BEGIN__KIND__UPDATE,
                         .dtype = XFED__TENSOR_BEGIN__DTYPE__F32,
                         .element_count = h.tensor_len / 4, .job_id = "job-1", .round = 3};
  assert_int_equal(xf_tensor_sender_new(&desc, h.sent, h.tensor_len, 0, &h.sender, NULL), XF_OK);
  assert_int_equal(xf_tensor_receiver_new(h.tensor_len, tensor_sink, &h, &h.receiver, NULL), XF_OK);
  /* A small high-water mark, so that sending waits for on_drain. */
  h.copts.write_high_water = 256u * 1024u;
  h.on_connected = tensor_connected;
  h.on_frame = tensor_frame;
  h.on_drain = tensor_drain;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);

  assert_true(h.delivered);
  assert_true(xf_tensor_receiver_complete(h.receiver));
  assert_memory_equal(h.sent, h.received, h.tensor_len);
  assert_true(h.busy > 0);
  assert_true(h.drains > 0);
  assert_int_equal(h.client.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.server.why.end, XF_CONN_END_PEER_CLOSED);
  xf_tensor_sender_free(h.sender);
  xf_tensor_receiver_free(h.receiver);
  xf_free(h.sent);
  xf_free(h.received);
}

/* ---- refusals --------------------------------------------------------------- */

static void refused_client(xf_tls *client_tls, xf_conn_reason *server_why, xf_conn_reason *client_why,
                           bool *server_connected) {
  harness h;
  harness_init(&h);
  xf_tls_free(h.client_tls);
  h.client_tls = client_tls;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server.closed && h.client.closed);
  *server_why = h.server.why;
  *client_why = h.client.why;
  *server_connected = h.server.connected;
}

static void revoked_client_is_refused_with_its_verdict(void **state) {
  (void)state;
  xf_conn_reason s, c;
  bool connected;
  refused_client(make_tls(acme_dir, "eu-paris"), &s, &c, &connected);
  assert_false(connected);
  assert_int_equal(s.end, XF_CONN_END_TLS);
  assert_int_equal(s.verdict, XF_PKI_REVOKED);
  assert_non_null(strstr(s.msg, "revoked"));
  /* TLS 1.3 lets the client finish first; the server's alert then ends it. */
  assert_int_equal(c.end, XF_CONN_END_TLS);
  assert_non_null(strstr(c.msg, "revoked"));
}

static void client_of_another_ca_is_refused(void **state) {
  (void)state;
  xf_conn_reason s, c;
  bool connected;
  refused_client(make_tls(other_dir, "eu-berlin"), &s, &c, &connected);
  assert_false(connected);
  assert_int_equal(s.end, XF_CONN_END_TLS);
  assert_int_equal(s.verdict, XF_PKI_UNTRUSTED);
  assert_int_equal(c.end, XF_CONN_END_TLS);
}

static void client_offering_only_tls12_is_refused(void **state) {
  (void)state;
  xf_tls *tls = make_tls(acme_dir, "eu-berlin");
  SSL_CTX *ctx = xf_tls_ctx(tls);
  assert_int_equal(SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION), 1);
  assert_int_equal(SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION), 1);
  xf_conn_reason s, c;
  bool connected;
  refused_client(tls, &s, &c, &connected);
  assert_false(connected);
  assert_int_equal(s.end, XF_CONN_END_TLS);
  assert_non_null(strstr(s.msg, "protocol"));
  assert_int_equal(c.end, XF_CONN_END_TLS);
}

static void on_connect_may_refuse_a_peer(void **state);

/* ---- limits, heartbeats, backpressure --------------------------------------- */

static void oversized_send(harness *h, side *s) {
  (void)h;
  if (s->server) return;
  static uint8_t big[100 * 1024];
  Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
  chunk.stream_id = 1;
  chunk.data.data = big;
  chunk.data.len = sizeof(big);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &chunk;
  send_env(s->conn, &env);
}

static void frame_above_the_maximum_closes_with_an_error_frame(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.max_frame = 64u * 1024u;
  h.on_connected = oversized_send;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.server.why.end, XF_CONN_END_FRAME);
  assert_int_equal(h.server.why.code, XF_ERANGE);
  assert_int_equal(h.server.frames, 0);
  assert_int_equal(h.client.error_code, XF_ERANGE);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

static void sender_refuses_a_frame_above_the_peers_maximum(void **state);

static void silent_peer_is_closed_after_the_idle_timeout(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.idle_timeout_ms = 300;
  h.copts.heartbeat_ms = 60000; /* the client never speaks */
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server.connected);
  assert_int_equal(h.server.why.end, XF_CONN_END_IDLE);
  uint64_t after = h.server.closed_at_ms - h.started_ms;
  assert_true(after >= 290);
  assert_true(after < 3000);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

/* ---- a late loop ---------------------------------------------------------------------- */

/* The client of the late-loop scenario, in a process of its own: it sends
 * one Metrics frame when the parent writes to go_fd, says so on sent_fd,
 * and exits 0 when the parent closes the session. */
typedef struct late_client {
  uv_loop_t loop;
  uv_poll_t go;
  int go_fd, sent_fd;
  xf_conn *conn;
  bool ended_by_peer;
} late_client;

static void late_on_go(uv_poll_t *p, int status, int events) {
  late_client *lc = p->data;
  (void)status;
  (void)events;
  char b;
  if (read(lc->go_fd, &b, 1) != 1) _exit(3);
  uv_poll_stop(p);
  uv_close((uv_handle_t *)p, NULL);
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.samples = 7;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_METRICS;
  env.metrics = &m;
  /* An empty write queue: uv_write hands the record to the kernel now. */
  if (!lc->conn || xf_conn_send(lc->conn, &env, NULL) != XF_OK) _exit(4);
  if (write(lc->sent_fd, "s", 1) != 1) _exit(5);
}

static xf_err late_connect(xf_conn *c, const xf_spiffe_id *peer) {
  (void)peer;
  late_client *lc = xf_conn_user(c);
  lc->conn = c;
  if (xf_conn_authenticated(c, 0, NULL) != XF_OK) _exit(6);
  uv_poll_init(&lc->loop, &lc->go, lc->go_fd);
  lc->go.data = lc;
  uv_poll_start(&lc->go, UV_READABLE, late_on_go);
  return XF_OK;
}

static void late_frame(xf_conn *c, const Xfed__Envelope *env) {
  (void)c;
  (void)env;
}

static void late_close(xf_conn *c, const xf_conn_reason *why) {
  late_client *lc = xf_conn_user(c);
  lc->conn = NULL;
  lc->ended_by_peer = why->end == XF_CONN_END_PEER_CLOSED;
}

static void late_client_run(int port, int go_fd, int sent_fd) {
  late_client lc = {.go_fd = go_fd, .sent_fd = sent_fd};
  if (uv_loop_init(&lc.loop) != 0) _exit(2);
  xf_tls *tls = make_tls(acme_dir, "eu-berlin");
  xf_conn_opts o = {.on_connect = late_connect, .on_frame = late_frame, .on_close = late_close,
                    .user = &lc, .heartbeat_ms = 60000 /* silent but for its one frame */};
  xf_conn *c = NULL;
  if (xf_dial(&lc.loop, tls, "127.0.0.1", port, &o, &c, NULL) != XF_OK) _exit(2);
  uv_run(&lc.loop, UV_RUN_DEFAULT);
  _exit(lc.ended_by_peer ? 0 : 7);
}

static int late_go_fd, late_sent_fd;

/* The server's loop stalls in a callback of its poll phase (here the one
 * that reports the session up; on a loaded machine, any): the client sends
 * its frame meanwhile, and the stall lasts until well past the server's
 * idle deadline, so that the loop's next turn runs the due idle timer
 * before it polls the socket again. */
static void late_stall(harness *h) {
  uint64_t t0 = uv_hrtime();
  if (write(late_go_fd, "g", 1) != 1) fail_msg("cannot signal the client");
  struct pollfd pf = {.fd = late_sent_fd, .events = POLLIN};
  if (poll(&pf, 1, 20000) != 1) fail_msg("the client did not send its frame");
  char b;
  if (read(late_sent_fd, &b, 1) != 1) fail_msg("cannot read the client's signal");
  const uint64_t stall_ns = 3ull * h->sopts.idle_timeout_ms * 1000000ull;
  while (uv_hrtime() - t0 < stall_ns) usleep(10000);
}

static void late_connected(harness *h, side *s) {
  if (s->server) late_stall(h);
}

static void late_got_frame(harness *h, side *s, const Xfed__Envelope *env) {
  (void)h;
  assert_true(s->server);
  assert_int_equal(env->body_case, XFED__ENVELOPE__BODY_METRICS);
  assert_int_equal(env->metrics->samples, 7);
  xf_conn_close(s->conn);
}

static void a_late_loop_does_not_blame_a_peer_whose_bytes_wait_unread(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.idle_timeout_ms = 300;
  h.on_connected = late_connected;
  h.on_frame = late_got_frame;
  harness_listen(&h);
  int go[2], sent[2];
  assert_int_equal(pipe(go), 0);
  assert_int_equal(pipe(sent), 0);
  int port = xf_listener_port(h.listener);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(go[1]);
    close(sent[0]);
    late_client_run(port, go[0], sent[1]);
  }
  close(go[0]);
  close(sent[1]);
  late_go_fd = go[1];
  late_sent_fd = sent[0];
  harness_run(&h);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(go[1]);
  close(sent[0]);
  assert_true(h.server.connected);
  assert_int_equal(h.server.frames, 1);
  assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
  assert_true(WIFEXITED(status));
  assert_int_equal(WEXITSTATUS(status), 0);
}

/* ---- the guard's total of queued ciphertext ------------------------------------------------ */

/* The server writes chunks until its connection is busy while the client
 * does not read: the guard's total is the server connection's queue, and a
 * small control frame still goes out where a chunk is refused; once the
 * client reads everything and the session ends, the total is back to zero. */
static void queued_connected(harness *h, side *s) {
  if (!s->server) {
    xf_conn_pause_reading(s->conn);
    return;
  }
  static uint8_t blob[256 * 1024];
  Xfed__TensorChunk ch = XFED__TENSOR_CHUNK__INIT;
  ch.data.data = blob;
  ch.data.len = sizeof(blob);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &ch;
  int sent = 0;
  for (; sent < 400; sent++)
    if (xf_conn_send(s->conn, &env, NULL) != XF_OK) break; /* busy at its high water */
  assert_true(sent > 0 && sent < 400);
  assert_true(xf_conn_write_queued(s->conn) > 0);
  assert_int_equal(h->guard.queued, xf_conn_write_queued(s->conn));
  /* Busy for a chunk, not for a control frame (up to twice the mark). */
  assert_true(xf_conn_write_queued(s->conn) >= h->sopts.write_high_water);
  Xfed__Metrics m = XFED__METRICS__INIT;
  m.samples = 1;
  Xfed__Envelope small = XFED__ENVELOPE__INIT;
  small.body_case = XFED__ENVELOPE__BODY_METRICS;
  small.metrics = &m;
  assert_int_equal(xf_conn_send(s->conn, &small, NULL), XF_OK);
  assert_int_equal(xf_conn_send(s->conn, &env, NULL), XF_ERANGE);
  h->phase = sent + 1;
  uv_timer_start(&h->timer, on_scenario_timer, 50, 0);
}

static void queued_resume(harness *h) { xf_conn_resume_reading(h->client.conn); }

static void queued_frame(harness *h, side *s, const Xfed__Envelope *env) {
  (void)env;
  if (!s->server && s->frames == h->phase) xf_conn_close(s->conn);
}

static void guard_keeps_the_queued_total_and_a_busy_connection_takes_control_frames(
    void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  size_t caps[XF_CONN_CAP_COUNT] = {0};
  xf_conn_guard_init(&h.guard, caps, 0);
  h.sopts.guard = &h.guard;
  h.sopts.max_frame = h.copts.max_frame = 1u << 20;
  h.sopts.write_high_water = 1u << 20;
  h.on_connected = queued_connected;
  h.on_timer = queued_resume;
  h.on_frame = queued_frame;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.client.frames, h.phase);
  assert_int_equal(h.guard.queued, 0);
}

static void heartbeat_check(harness *h) {
  assert_non_null(h->server.conn); /* still open although the client sent no frame */
  assert_true(xf_conn_heartbeats_received(h->server.conn) >= 5);
  assert_int_equal(h->server.frames, 0); /* heartbeats are not delivered */
  xf_conn_close(h->client.conn);
}

static void heartbeat_start_timer(harness *h, side *s) {
  if (!s->server) uv_timer_start(&h->timer, on_scenario_timer, 900, 0);
}

static void heartbeats_keep_a_quiet_peer_alive(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.idle_timeout_ms = 300;
  h.copts.heartbeat_ms = 50;
  h.on_connected = heartbeat_start_timer;
  h.on_timer = heartbeat_check;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.client.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.server.why.end, XF_CONN_END_PEER_CLOSED);
}

#define PAUSE_FRAMES 10

static void pause_send_all(harness *h, side *s) {
  (void)h;
  if (s->server) return;
  for (uint64_t i = 1; i <= PAUSE_FRAMES; i++) {
    Xfed__Metrics m = XFED__METRICS__INIT;
    m.samples = i;
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_METRICS;
    env.metrics = &m;
    send_env(s->conn, &env);
  }
}

static void pause_frame(harness *h, side *s, const Xfed__Envelope *env) {
  assert_true(s->server);
  assert_int_equal(env->body_case, XFED__ENVELOPE__BODY_METRICS);
  s->samples[s->frames - 1] = env->metrics->samples;
  if (s->frames == 1) {
    xf_conn_pause_reading(s->conn);
    uv_timer_start(&h->timer, on_scenario_timer, 150, 0);
  }
  if (s->frames == PAUSE_FRAMES) xf_conn_close(s->conn);
}

static void pause_resume(harness *h) {
  h->frames_when_timer_fired = h->server.frames;
  xf_conn_resume_reading(h->server.conn);
  /* Resuming delivers from the loop, not from within the call. */
  assert_int_equal(h->server.frames, 1);
}

static void paused_reading_holds_frames_until_resumed(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.on_connected = pause_send_all;
  h.on_frame = pause_frame;
  h.on_timer = pause_resume;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.frames_when_timer_fired, 1);
  assert_int_equal(h.server.frames, PAUSE_FRAMES);
  for (int i = 0; i < PAUSE_FRAMES; i++) assert_int_equal(h.server.samples[i], (uint64_t)i + 1);
  assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

/* ---- refusal by the application, dial errors, context errors ---------------- */

static xf_err refuse_sites(xf_conn *c, const xf_spiffe_id *peer) {
  side *s = xf_conn_user(c);
  s->connected = true;
  s->peer = *peer;
  return peer->kind == XF_PKI_KIND_SITE ? XF_EDENIED : XF_OK;
}

static void on_connect_may_refuse_a_peer(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.on_connect = refuse_sites;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server.connected);
  assert_int_equal(h.server.why.end, XF_CONN_END_REFUSED);
  assert_int_equal(h.server.why.code, XF_EDENIED);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

static void sender_refuses_a_frame_above_the_peers_maximum(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.copts.peer_max_frame = 1024;
  h.on_connected = NULL;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  /* Run until the client is open, then try. */
  while (!h.client.connected && uv_run(&h.loop, UV_RUN_ONCE)) {
  }
  assert_true(h.client.connected);
  static uint8_t big[2048];
  Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
  chunk.stream_id = 1;
  chunk.data.data = big;
  chunk.data.len = sizeof(big);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &chunk;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_conn_send(h.client.conn, &env, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "exceeds"));
  assert_true(xf_conn_is_open(h.client.conn));
  xf_conn_close(h.client.conn);
  harness_run(&h);
  assert_int_equal(h.client.why.end, XF_CONN_END_CLOSED);
}

static void dial_to_a_closed_port_reports_connect(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  harness_listen(&h);
  int port = xf_listener_port(h.listener);
  xf_listener_close(h.listener, NULL);
  h.listener = NULL;
  uv_run(&h.loop, UV_RUN_DEFAULT); /* the port is free again */
  xf_conn_opts o = h.copts;
  o.user = &h.client;
  xf_conn *c = NULL;
  assert_int_equal(xf_dial(&h.loop, h.client_tls, "127.0.0.1", port, &o, &c, NULL), XF_OK);
  harness_run(&h);
  assert_false(h.client.connected);
  assert_int_equal(h.client.why.end, XF_CONN_END_CONNECT);
  assert_int_equal(xf_dial(&h.loop, NULL, "localhost", 1, &o, &c, NULL), XF_EINVAL);
  assert_null(c);
}

static void tls_context_refuses_a_key_of_another_certificate(void **state) {
  (void)state;
  char cert[1024], key[1024], ca[1024], crl[1024];
  snprintf(cert, sizeof(cert), "%s/issued/coord.crt", acme_dir);
  snprintf(key, sizeof(key), "%s/issued/eu-berlin.key", acme_dir);
  snprintf(ca, sizeof(ca), "%s/ca.crt", acme_dir);
  snprintf(crl, sizeof(crl), "%s/crl.pem", acme_dir);
  xf_tls_config cfg = {.cert_path = cert, .key_path = key, .ca_path = ca, .crl_path = crl};
  xf_tls *tls = NULL;
  assert_int_equal(xf_tls_new(&cfg, &tls, NULL), XF_EINVAL);
  assert_null(tls);
  snprintf(crl, sizeof(crl), "%s/missing.pem", acme_dir);
  snprintf(key, sizeof(key), "%s/issued/coord.key", acme_dir);
  assert_int_not_equal(xf_tls_new(&cfg, &tls, NULL), XF_OK);
  assert_null(tls);
}

/* ---- the CRL reload ----------------------------------------------------------- */

static void reload_connected(harness *h, side *s) {
  if (s->server && h->phase == 1) xf_conn_close(s->conn);
}

static void reload_after_server_close(harness *h) {
  if (h->phase == 1) {
    /* Revoke the client while the listener runs, reload, and dial again. */
    h->server1 = h->server;
    memset(&h->server, 0, sizeof(h->server));
    h->server.h = h;
    h->server.server = true;
    assert_int_equal(
        xf_federation_revoke(acme, "eu-rome", XF_PKI_REASON_KEY_COMPROMISE, NULL, NULL), XF_OK);
    xf_errctx err;
    xf_errctx_clear(&err);
    if (xf_tls_reload_crl(h->server_tls, &err) != XF_OK) fail_msg("reload: %s", err.msg);
    h->phase = 2;
    harness_dial(h, &h->client2);
    return;
  }
  xf_listener_close(h->listener, NULL);
  h->listener = NULL;
}

static void crl_reload_refuses_a_client_revoked_after_start(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  xf_tls_free(h.client_tls);
  h.client_tls = make_tls(acme_dir, "eu-rome");
  h.phase = 1;
  h.on_connected = reload_connected;
  h.after_server_close = reload_after_server_close;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server1.connected);
  assert_int_equal(h.server1.why.end, XF_CONN_END_CLOSED);
  assert_false(h.server.connected);
  assert_int_equal(h.server.why.end, XF_CONN_END_TLS);
  assert_int_equal(h.server.why.verdict, XF_PKI_REVOKED);
  assert_true(h.client2.closed);
  assert_int_equal(h.client2.why.end, XF_CONN_END_TLS);
}

/* ---- bounds on peers ----------------------------------------------------------- */

static void heartbeats_do_not_extend_the_handshake_deadline(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  /* The client never opens a session, but talks all the time: each
   * heartbeat restarts the server's idle timer, not its deadline. */
  h.server_unauthenticated = true;
  h.sopts.handshake_timeout_ms = 300;
  h.copts.heartbeat_ms = 50;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server.connected);
  assert_int_equal(h.server.why.end, XF_CONN_END_HANDSHAKE);
  assert_non_null(strstr(h.server.why.msg, "hello exchange"));
  assert_non_null(strstr(h.server.why.msg, "300 ms"));
  assert_true(h.server.closed_at_ms - h.started_ms >= 290);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

/* A ClientHello's first bytes, one every 50 ms, from a plain TCP socket. */
static void raw_drip(harness *h) {
  static const uint8_t hello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03,
                                  0x03, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99};
  if (h->server.closed || h->raw_sent >= sizeof(hello)) return;
  if (write(h->raw_fd, hello + h->raw_sent, 1) == 1) h->raw_sent++;
  uv_timer_start(&h->timer, on_scenario_timer, 50, 0);
}

static int raw_connect(const char *ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  struct sockaddr_in src = {.sin_family = AF_INET};
  assert_int_equal(inet_pton(AF_INET, ip, &src.sin_addr), 1);
  if (bind(fd, (struct sockaddr *)&src, sizeof(src)) != 0)
    fail_msg("bind %s: %s (the loopback net 127.0.0.0/8 is needed)", ip, strerror(errno));
  struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0)
    fail_msg("connect 127.0.0.1:%d: %s", port, strerror(errno));
  return fd;
}

/* True once the server has ended the socket (end of stream or reset). */
static bool raw_ended(int fd) {
  char b[256];
  (void)fcntl(fd, F_SETFL, O_NONBLOCK);
  ssize_t n = read(fd, b, sizeof(b));
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

static void dripping_clienthello_is_closed_at_the_handshake_deadline(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.sopts.handshake_timeout_ms = 300;
  h.on_timer = raw_drip;
  harness_listen(&h);
  h.raw_fd = raw_connect("127.0.0.1", xf_listener_port(h.listener));
  uv_timer_start(&h.timer, on_scenario_timer, 0, 0);
  harness_run(&h);
  assert_false(h.server.connected);
  assert_int_equal(h.server.why.end, XF_CONN_END_HANDSHAKE);
  assert_non_null(strstr(h.server.why.msg, "TLS handshake"));
  assert_true(h.server.closed_at_ms - h.started_ms >= 290);
  assert_true(h.raw_sent > 0);
  assert_true(raw_ended(h.raw_fd));
  close(h.raw_fd);
}

static void frame_before_the_session_opens_is_limited_to_4_kib(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.server_unauthenticated = true;
  h.on_connected = oversized_send; /* 100 KiB, before any hello */
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.server.why.end, XF_CONN_END_FRAME);
  assert_int_equal(h.server.why.code, XF_ERANGE);
  assert_int_equal(h.server.frames, 0);
  assert_int_equal(h.client.error_code, XF_ERANGE);
  if (!strstr(h.client.error_msg, "exceeds the maximum of 4096 bytes before the hello"))
    fail_msg("the Error says: %s", h.client.error_msg);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

/* Both sides run the session, except a client told to open it badly (1:
 * a Hello of version 0, 2: of the range 3..2, 3: two good Hellos, 4: a
 * HelloAck first); once
 * open, the client sends a 100 KiB frame and the server closes on it. */
static void session_connected(harness *h, side *s) {
  if (!s->server && h->bad_hello) {
    Xfed__Hello hello = XFED__HELLO__INIT;
    hello.protocol_version = h->bad_hello == 1 ? 0 : h->bad_hello == 2 ? 2 : XF_PROTOCOL_VERSION;
    hello.min_protocol_version = h->bad_hello == 1 ? 0 : h->bad_hello == 2 ? 3 : 0;
    hello.role = "site";
    Xfed__Envelope env = XFED__ENVELOPE__INIT;
    env.body_case = XFED__ENVELOPE__BODY_HELLO;
    env.hello = &hello;
    Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
    if (h->bad_hello == 4) {
      ack.protocol_version = XF_PROTOCOL_VERSION;
      env.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
      env.hello_ack = &ack;
    }
    send_env(s->conn, &env);
    if (h->bad_hello == 3) send_env(s->conn, &env);
    return;
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_start(&s->session, s->conn, s->server ? "coordinator" : "site", 0, &err) != XF_OK)
    fail_msg("session: %s", err.msg);
}

static void session_frame(harness *h, side *s, const Xfed__Envelope *env) {
  if (!s->server && h->bad_hello) return; /* cb_frame kept the Error */
  xf_session_event ev;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_session_on_frame(&s->session, s->conn, env, &ev, &err) != XF_OK) {
    snprintf(s->session_error, sizeof(s->session_error), "%s", err.msg);
    xf_conn_close(s->conn);
    return;
  }
  if (ev == XF_SESSION_OPENED && !s->server) oversized_send(h, s);
  if (ev == XF_SESSION_FRAME && s->server) {
    s->app_frames++;
    xf_conn_close(s->conn);
  }
}

static void hello_with_version_0_or_an_empty_range_gets_an_error_frame(void **state) {
  (void)state;
  for (int bad = 1; bad <= 2; bad++) {
    harness h;
    harness_init(&h);
    h.server_unauthenticated = h.client_unauthenticated = true;
    h.bad_hello = bad;
    h.on_connected = session_connected;
    h.on_frame = session_frame;
    harness_listen(&h);
    harness_dial(&h, &h.client);
    harness_run(&h);
    assert_int_equal(h.client.error_code, XF_EFORMAT);
    if (!strstr(h.client.error_msg, bad == 1 ? "empty protocol range 0..0"
                                             : "empty protocol range 3..2"))
      fail_msg("the Error says: %s", h.client.error_msg);
    assert_non_null(strstr(h.server.session_error, "empty protocol range"));
    assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
    assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
  }
}

static void hello_traffic_out_of_turn_gets_an_error_frame(void **state) {
  (void)state;
  static const struct {
    int bad;
    xf_err code;
    const char *says;
  } cases[] = {{3, XF_EFORMAT, "received a second Hello"},
               {4, XF_EFORMAT, "received a HelloAck before the Hello"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    harness h;
    harness_init(&h);
    h.server_unauthenticated = h.client_unauthenticated = true;
    h.bad_hello = cases[i].bad;
    h.on_connected = session_connected;
    h.on_frame = session_frame;
    harness_listen(&h);
    harness_dial(&h, &h.client);
    harness_run(&h);
    assert_int_equal(h.client.error_code, cases[i].code);
    if (!strstr(h.client.error_msg, cases[i].says))
      fail_msg("case %d: the Error says: %s", cases[i].bad, h.client.error_msg);
    assert_non_null(strstr(h.server.session_error, cases[i].says));
    assert_false(h.server.session.open);
    assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
    assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
  }
}

static void open_session_lifts_the_hello_frame_limit(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  h.server_unauthenticated = h.client_unauthenticated = true;
  h.on_connected = session_connected;
  h.on_frame = session_frame;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_true(h.server.session.open && h.client.session.open);
  assert_int_equal(h.server.app_frames, 1); /* the 100 KiB frame */
  assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.client.why.end, XF_CONN_END_PEER_CLOSED);
}

static void keep_listener(harness *h) { (void)h; }

/* Runs the loop until the guard has seen n connections arrive. */
static void guard_wait_arrivals(harness *h, uint64_t n) {
  for (;;) {
    uint64_t seen = h->guard.accepted;
    for (int c = 0; c < XF_CONN_CAP_COUNT; c++) seen += h->guard.refused[c];
    if (seen >= n) return;
    uv_run(&h->loop, UV_RUN_ONCE);
  }
}

/* Caps of a guard for a test: those named, every other 0 (none), and no
 * early drop, so that each cap acts at its value only. */
static void guard_caps(harness *h, size_t total, size_t per_address, size_t unauth,
                       size_t unauth_per_address) {
  size_t caps[XF_CONN_CAP_COUNT] = {0};
  caps[XF_CONN_CAP_TOTAL] = total;
  caps[XF_CONN_CAP_PER_ADDRESS] = per_address;
  caps[XF_CONN_CAP_UNAUTHENTICATED] = unauth;
  caps[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS] = unauth_per_address;
  xf_conn_guard_init(&h->guard, caps, 0);
  h->guard.early_drop_start = 100;
  h->sopts.guard = &h->guard;
  h->after_server_close = keep_listener;
}

/* Closes the raw sockets, waits for the guard to let go of every
 * connection, and ends the harness. */
static void guard_finish(harness *h, int *fd, int n) {
  for (int i = 0; i < n; i++) close(fd[i]);
  while (h->guard.open > 0) uv_run(&h->loop, UV_RUN_ONCE);
  xf_listener_close(h->listener, NULL);
  h->listener = NULL;
  harness_run(h);
}

static void unauthenticated_over_the_cap_per_address_drops_the_oldest_of_that_address(
    void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  guard_caps(&h, 0, 0, 0, 2);
  harness_listen(&h);
  int port = xf_listener_port(h.listener);
  /* Two from 127.0.0.1 fill its cap; one from 127.0.0.2 is of another
   * address; the next from 127.0.0.1 drops the oldest of 127.0.0.1. */
  const char *from[] = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.1"};
  int fd[4];
  for (int i = 0; i < 4; i++) {
    fd[i] = raw_connect(from[i], port);
    guard_wait_arrivals(&h, (uint64_t)i + 1);
  }
  while (!raw_ended(fd[0])) uv_run(&h.loop, UV_RUN_NOWAIT);
  for (int i = 1; i < 4; i++) assert_false(raw_ended(fd[i])); /* the newcomer too */
  assert_int_equal(h.guard.accepted, 4);
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS], 1);
  for (int c = 0; c < XF_CONN_CAP_COUNT; c++) assert_int_equal(h.guard.refused[c], 0);
  while (h.guard.ended[XF_CONN_END_DROPPED] == 0) uv_run(&h.loop, UV_RUN_ONCE);
  assert_int_equal(h.guard.open, 3);
  assert_int_equal(h.guard.unauthenticated, 3);
  guard_finish(&h, fd, 4);
  assert_int_equal(h.guard.ended[XF_CONN_END_DROPPED], 1);
}

static void listener_makes_room_at_its_caps_by_dropping_older_unauthenticated_ones(
    void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  guard_caps(&h, 3, 2, 0, 0);
  harness_listen(&h);
  int port = xf_listener_port(h.listener);
  /* The third from 127.0.0.1 meets the cap per address and drops the
   * first; the one from 127.0.0.3 meets the total and drops the oldest of
   * all, the second. Nobody is refused: none of them is authenticated. */
  const char *from[] = {"127.0.0.1", "127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.3"};
  int fd[5];
  for (int i = 0; i < 5; i++) {
    fd[i] = raw_connect(from[i], port);
    guard_wait_arrivals(&h, (uint64_t)i + 1);
  }
  while (!raw_ended(fd[0]) || !raw_ended(fd[1])) uv_run(&h.loop, UV_RUN_NOWAIT);
  for (int i = 2; i < 5; i++) assert_false(raw_ended(fd[i]));
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_PER_ADDRESS], 1);
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_TOTAL], 1);
  assert_int_equal(h.guard.refused[XF_CONN_CAP_TOTAL] + h.guard.refused[XF_CONN_CAP_PER_ADDRESS],
                   0);
  assert_string_equal(xf_conn_cap_name(XF_CONN_CAP_PER_ADDRESS), "max_connections_per_address");
  guard_finish(&h, fd, 5);
  assert_int_equal(h.guard.ended[XF_CONN_END_DROPPED], 2);
  assert_int_equal(h.guard.ended[XF_CONN_END_TLS], 3); /* gone during the handshake */
}

static void a_burst_at_the_total_drops_one_older_connection_for_each_newcomer(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  guard_caps(&h, 2, 0, 0, 0);
  harness_listen(&h);
  int port = xf_listener_port(h.listener);
  int fd[6];
  for (int i = 0; i < 2; i++) {
    fd[i] = raw_connect("127.0.0.1", port);
    guard_wait_arrivals(&h, (uint64_t)i + 1);
  }
  /* Four at once, accepted in one turn of the loop before the sockets
   * dropped for the first of them have finished closing: each still finds
   * one to drop, and none is refused. */
  for (int i = 2; i < 6; i++) fd[i] = raw_connect("127.0.0.1", port);
  guard_wait_arrivals(&h, 6);
  for (int i = 0; i < 4; i++)
    while (!raw_ended(fd[i])) uv_run(&h.loop, UV_RUN_NOWAIT);
  assert_false(raw_ended(fd[4]) || raw_ended(fd[5]));
  assert_int_equal(h.guard.refused[XF_CONN_CAP_TOTAL], 0);
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_TOTAL], 4);
  guard_finish(&h, fd, 6);
}

/* The dialled sides stay open (no hello: each trusts the other once TLS is
 * up, see cb_connect) until the scenario closes them. */
static void keep_open(harness *h, side *s) {
  (void)h;
  (void)s;
}

static void authenticated_connections_are_not_dropped_for_unauthenticated_pressure(
    void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  guard_caps(&h, 3, 0, 0, 0);
  h.on_connected = keep_open;
  harness_listen(&h);
  int port = xf_listener_port(h.listener);
  /* Two authenticated sessions from 127.0.0.1. */
  harness_dial(&h, &h.client);
  harness_dial(&h, &h.client2);
  while (h.guard.open - h.guard.unauthenticated < 2 || !h.client.connected ||
         !h.client2.connected)
    uv_run(&h.loop, UV_RUN_ONCE);
  /* Raw connections of the same address meet the total: each newcomer
   * drops the one before it, never a session. */
  int fd[3];
  for (int i = 0; i < 3; i++) {
    fd[i] = raw_connect("127.0.0.1", port);
    guard_wait_arrivals(&h, 3 + (uint64_t)i);
  }
  while (!raw_ended(fd[0]) || !raw_ended(fd[1])) uv_run(&h.loop, UV_RUN_NOWAIT);
  assert_false(raw_ended(fd[2]));
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_TOTAL], 2);
  assert_true(h.client.conn && xf_conn_is_open(h.client.conn));
  assert_true(h.client2.conn && xf_conn_is_open(h.client2.conn));
  assert_int_equal(h.guard.refused[XF_CONN_CAP_TOTAL], 0);
  /* With the places taken by sessions and a handshake in flight that is
   * dropped for it, one more is admitted; with nothing unauthenticated
   * left to drop it would be refused, which the guard's decision says. */
  xf_conn_load full = {.open = 3, .from_address = 3};
  xf_conn_admission a = xf_conn_guard_admit(&h.guard, &full);
  assert_false(a.admit);
  assert_int_equal(a.refused, XF_CONN_CAP_TOTAL);
  assert_false(a.drop_any || a.drop_from_address);
  xf_conn_close(h.client.conn);
  xf_conn_close(h.client2.conn);
  guard_finish(&h, fd, 3);
  assert_int_equal(h.guard.ended[XF_CONN_END_DROPPED], 2);
}

/* The server side takes each peer at the end of TLS (no hello here) and
 * counts what the guard said. */
static void authenticate_counted(harness *h, side *s) {
  if (!s->server) return;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_conn_authenticated(s->conn, 0, &err) == XF_OK) {
    h->sessions_taken++;
  } else {
    assert_non_null(strstr(err.msg, "max_authenticated_connections_per_address=1"));
    h->sessions_refused++;
  }
}

static void session_beyond_the_authenticated_cap_per_address_is_refused_naming_the_key(
    void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  size_t caps[XF_CONN_CAP_COUNT] = {[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] = 1};
  xf_conn_guard_init(&h.guard, caps, 0);
  h.sopts.guard = &h.guard;
  h.after_server_close = keep_listener;
  h.server_unauthenticated = true;
  h.on_connected = authenticate_counted;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_dial(&h, &h.client2);
  /* One of the two is refused as its session would open: it gets an Error
   * naming the key and is closed; the other stays open. */
  while (!h.client.closed && !h.client2.closed) uv_run(&h.loop, UV_RUN_ONCE);
  side *refused = h.client.closed ? &h.client : &h.client2;
  side *kept = refused == &h.client ? &h.client2 : &h.client;
  assert_int_equal(h.sessions_taken, 1);
  assert_int_equal(h.sessions_refused, 1);
  assert_int_equal(h.guard.refused[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS], 1);
  assert_int_equal(refused->error_code, XF_ERANGE);
  if (!strstr(refused->error_msg, "max_authenticated_connections_per_address=1"))
    fail_msg("the Error says: %s", refused->error_msg);
  assert_true(kept->conn && xf_conn_is_open(kept->conn));
  assert_int_equal(h.guard.open - h.guard.unauthenticated, 1);
  xf_conn_close(kept->conn);
  guard_finish(&h, NULL, 0);
  assert_int_equal(h.guard.ended[XF_CONN_END_REFUSED], 1);
}

static void dual_stack_listener_counts_ipv4_peers_by_their_own_address(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  guard_caps(&h, 0, 0, 0, 2);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_listen(&h.loop, h.server_tls, "::", 0, &h.sopts, &h.listener, &err) != XF_OK) {
    harness_run(&h);
    skip(); /* no IPv6 here */
  }
  int port = xf_listener_port(h.listener);
  /* They arrive as ::ffff:127.0.0.x: each IPv4 address counts alone, not
   * as one /64 of IPv4-mapped addresses, so only the fourth, the third from
   * 127.0.0.1, drops one (the first). */
  const char *from[] = {"127.0.0.1", "127.0.0.1", "127.0.0.2", "127.0.0.1"};
  int fd[4];
  for (int i = 0; i < 4; i++) {
    fd[i] = raw_connect(from[i], port);
    guard_wait_arrivals(&h, (uint64_t)i + 1);
  }
  assert_int_equal(h.guard.accepted, 4);
  assert_int_equal(h.guard.dropped[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS], 1);
  while (!raw_ended(fd[0])) uv_run(&h.loop, UV_RUN_NOWAIT);
  for (int i = 1; i < 4; i++) assert_false(raw_ended(fd[i]));
  guard_finish(&h, fd, 4);
}

/* ---- the guard's decisions, without sockets ------------------------------------ */

static xf_conn_guard decision_guard(size_t total, size_t per_address, size_t unauth,
                                    size_t unauth_per_address, uint64_t seed) {
  size_t caps[XF_CONN_CAP_COUNT] = {0};
  caps[XF_CONN_CAP_TOTAL] = total;
  caps[XF_CONN_CAP_PER_ADDRESS] = per_address;
  caps[XF_CONN_CAP_UNAUTHENTICATED] = unauth;
  caps[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS] = unauth_per_address;
  xf_conn_guard g;
  xf_conn_guard_init(&g, caps, 0);
  xf_rng_seed(&g.rng, seed, 0);
  return g;
}

static void guard_drops_at_an_unauthenticated_cap_and_never_below_its_start(void **state) {
  (void)state;
  xf_conn_guard g = decision_guard(1000, 1000, 100, 10, 1);
  /* Below both starts (half of each cap): admitted, nothing dropped. */
  for (int i = 0; i < 1000; i++) {
    xf_conn_load l = {.open = 600, .from_address = 400, .unauthenticated = 49,
                      .unauthenticated_from_address = 4};
    xf_conn_admission a = xf_conn_guard_admit(&g, &l);
    assert_true(a.admit && !a.drop_from_address && !a.drop_any);
  }
  /* At the cap per address: the oldest of the address, always. */
  for (int i = 0; i < 1000; i++) {
    xf_conn_load l = {.open = 600, .from_address = 400, .unauthenticated = 10,
                      .unauthenticated_from_address = 10};
    xf_conn_admission a = xf_conn_guard_admit(&g, &l);
    assert_true(a.admit && a.drop_from_address && !a.drop_any);
    assert_int_equal(a.drop_from_address_cap, XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS);
  }
  /* At the cap of all: one of any address, always. */
  for (int i = 0; i < 1000; i++) {
    xf_conn_load l = {.open = 600, .from_address = 1, .unauthenticated = 100,
                      .unauthenticated_from_address = 1};
    xf_conn_admission a = xf_conn_guard_admit(&g, &l);
    assert_true(a.admit && a.drop_any && !a.drop_from_address);
    assert_int_equal(a.drop_any_cap, XF_CONN_CAP_UNAUTHENTICATED);
  }
}

static void guard_drops_between_start_and_cap_with_a_probability_rising_to_one(void **state) {
  (void)state;
  /* Cap 100 per address: start 50 at rate 30%, so a drop with
   * probability 30% at 50, 65% at 75, 98.6% at 99 (1,000 draws each). */
  static const struct {
    size_t n;
    int low, high;
  } at[] = {{49, 0, 0}, {50, 240, 360}, {75, 590, 710}, {99, 960, 1000}, {100, 1000, 1000}};
  uint64_t trace[2] = {0, 0};
  for (int run = 0; run < 2; run++) {
    xf_conn_guard g = decision_guard(0, 0, 0, 100, 42);
    for (size_t k = 0; k < sizeof(at) / sizeof(at[0]); k++) {
      int drops = 0;
      for (int i = 0; i < 1000; i++) {
        xf_conn_load l = {.open = at[k].n, .from_address = at[k].n, .unauthenticated = at[k].n,
                          .unauthenticated_from_address = at[k].n};
        xf_conn_admission a = xf_conn_guard_admit(&g, &l);
        assert_true(a.admit && !a.drop_any);
        drops += a.drop_from_address;
        trace[run] = trace[run] * 31u + (uint64_t)a.drop_from_address;
      }
      if (drops < at[k].low || drops > at[k].high)
        fail_msg("%d drops in 1000 at %zu of 100; expected %d to %d", drops, at[k].n, at[k].low,
                 at[k].high);
    }
  }
  /* One seed, one sequence of decisions. */
  assert_true(trace[0] == trace[1]);
}

static void guard_totals_drop_any_at_the_total_and_refuse_when_nothing_is_unauthenticated(
    void **state) {
  (void)state;
  xf_conn_guard g = decision_guard(10, 4, 0, 0, 7);
  /* The total is full, three of them unauthenticated: the oldest of all. */
  xf_conn_load l = {.open = 10, .from_address = 1, .unauthenticated = 3,
                    .unauthenticated_from_address = 0};
  xf_conn_admission a = xf_conn_guard_admit(&g, &l);
  assert_true(a.admit && a.drop_any && !a.drop_from_address);
  assert_int_equal(a.drop_any_cap, XF_CONN_CAP_TOTAL);
  /* Full and all authenticated: refused, nothing dropped. */
  l.unauthenticated = 0;
  a = xf_conn_guard_admit(&g, &l);
  assert_false(a.admit || a.drop_any || a.drop_from_address);
  assert_int_equal(a.refused, XF_CONN_CAP_TOTAL);
  /* The address full: one of its own unauthenticated, which also makes
   * room in the total; authenticated only, refused by the cap per address. */
  l = (xf_conn_load){.open = 10, .from_address = 4, .unauthenticated = 2,
                     .unauthenticated_from_address = 1};
  a = xf_conn_guard_admit(&g, &l);
  assert_true(a.admit && a.drop_from_address && !a.drop_any);
  assert_int_equal(a.drop_from_address_cap, XF_CONN_CAP_PER_ADDRESS);
  l.unauthenticated_from_address = 0;
  a = xf_conn_guard_admit(&g, &l);
  assert_false(a.admit);
  assert_int_equal(a.refused, XF_CONN_CAP_PER_ADDRESS);
  /* Authenticated ones are bounded when their hello completes. */
  size_t caps[XF_CONN_CAP_COUNT] = {0};
  caps[XF_CONN_CAP_AUTHENTICATED] = 5;
  caps[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] = 2;
  xf_conn_guard_init(&g, caps, 0);
  assert_int_equal(xf_conn_guard_authenticate(&g, 4, 1), XF_CONN_CAP_COUNT);
  assert_int_equal(xf_conn_guard_authenticate(&g, 4, 2), XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS);
  assert_int_equal(xf_conn_guard_authenticate(&g, 5, 0), XF_CONN_CAP_AUTHENTICATED);
}

static void default_caps_let_a_thousand_sites_behind_one_address_connect(void **state) {
  (void)state;
  size_t caps[XF_CONN_CAP_COUNT] = {0};
  xf_conn_caps_default(caps);
  assert_int_equal(caps[XF_CONN_CAP_TOTAL], XF_CONN_MAX_CONNS);
  assert_int_equal(caps[XF_CONN_CAP_UNAUTHENTICATED], XF_CONN_MAX_UNAUTH);
  assert_int_equal(caps[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS], XF_CONN_MAX_UNAUTH_PER_ADDR);
  assert_true(caps[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] >= caps[XF_CONN_CAP_AUTHENTICATED]);
  assert_true(caps[XF_CONN_CAP_PER_ADDRESS] >= caps[XF_CONN_CAP_TOTAL]);
  assert_true(caps[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] >= 1000);
  /* A total lowered by the descriptor limit lowers the rest with it; a
   * configured cap stays. */
  size_t low[XF_CONN_CAP_COUNT] = {[XF_CONN_CAP_TOTAL] = 636,
                                   [XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS] = 9};
  xf_conn_caps_default(low);
  assert_int_equal(low[XF_CONN_CAP_UNAUTHENTICATED], 318);
  assert_int_equal(low[XF_CONN_CAP_UNAUTHENTICATED_PER_ADDRESS], 79);
  assert_int_equal(low[XF_CONN_CAP_AUTHENTICATED], 636);
  assert_int_equal(low[XF_CONN_CAP_AUTHENTICATED_PER_ADDRESS], 9);
  assert_int_equal(xf_conn_cap_by_name("max_authenticated_connections"),
                   XF_CONN_CAP_AUTHENTICATED);
  assert_int_equal(xf_conn_cap_by_name("max_connection"), XF_CONN_CAP_COUNT);
}

/* The coordinator's guide lists every cap's key in its table. */
static void every_cap_key_is_in_the_coordinator_guide(void **state) {
  (void)state;
  const char *src = getenv("XF_SOURCE_DIR");
  if (!src) skip();
  char path[1024];
  snprintf(path, sizeof(path), "%s/docs/coordinator.md", src);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  for (int c = 0; c < XF_CONN_CAP_COUNT; c++) {
    char row[128];
    snprintf(row, sizeof(row), "\n| `%s` |", xf_conn_cap_name((xf_conn_cap)c));
    if (!strstr(text, row)) fail_msg("docs/coordinator.md has no row for %s", row + 3);
  }
}

static void budget_release(harness *h) {
  /* Nothing may be delivered while the budget has no room. */
  assert_int_equal(h->server.frames, 0);
  assert_int_equal(h->guard.budget.waits, 1);
  h->phase = 2;
  xf_frame_budget_give(&h->guard.budget, 900u * 1024u);
}

static void budget_connected(harness *h, side *s) {
  if (s->server) return;
  static uint8_t big[256 * 1024];
  Xfed__TensorChunk chunk = XFED__TENSOR_CHUNK__INIT;
  chunk.stream_id = 1;
  chunk.data.data = big;
  chunk.data.len = sizeof(big);
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
  env.tensor_chunk = &chunk;
  send_env(s->conn, &env);
  uv_timer_start(&h->timer, on_scenario_timer, 500, 0);
}

static void budget_frame(harness *h, side *s, const Xfed__Envelope *env) {
  assert_true(s->server);
  assert_int_equal(h->phase, 2);
  assert_int_equal(env->tensor_chunk->data.len, 256u * 1024u);
  xf_conn_close(s->conn);
}

static void frame_waits_for_the_budget_and_goes_on_when_it_frees(void **state) {
  (void)state;
  harness h;
  harness_init(&h);
  xf_conn_guard_init(&h.guard, NULL, 1024u * 1024u);
  assert_true(xf_frame_budget_take(&h.guard.budget, 900u * 1024u)); /* held elsewhere */
  h.sopts.guard = &h.guard;
  h.phase = 1;
  h.on_connected = budget_connected;
  h.on_frame = budget_frame;
  h.on_timer = budget_release;
  harness_listen(&h);
  harness_dial(&h, &h.client);
  harness_run(&h);
  assert_int_equal(h.phase, 2);
  assert_int_equal(h.server.frames, 1);
  assert_int_equal(h.server.why.end, XF_CONN_END_CLOSED);
  assert_int_equal(h.guard.budget.used, 0);
  assert_int_equal(h.guard.budget.peak, 900u * 1024u); /* never both at once */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(handshake_shows_both_identities_and_hello_is_exchanged),
      cmocka_unit_test(tensor_of_5mb_crosses_with_its_digest_under_backpressure),
      cmocka_unit_test(revoked_client_is_refused_with_its_verdict),
      cmocka_unit_test(client_of_another_ca_is_refused),
      cmocka_unit_test(client_offering_only_tls12_is_refused),
      cmocka_unit_test(on_connect_may_refuse_a_peer),
      cmocka_unit_test(frame_above_the_maximum_closes_with_an_error_frame),
      cmocka_unit_test(sender_refuses_a_frame_above_the_peers_maximum),
      cmocka_unit_test(silent_peer_is_closed_after_the_idle_timeout),
      cmocka_unit_test(a_late_loop_does_not_blame_a_peer_whose_bytes_wait_unread),
      cmocka_unit_test(guard_keeps_the_queued_total_and_a_busy_connection_takes_control_frames),
      cmocka_unit_test(heartbeats_keep_a_quiet_peer_alive),
      cmocka_unit_test(paused_reading_holds_frames_until_resumed),
      cmocka_unit_test(dial_to_a_closed_port_reports_connect),
      cmocka_unit_test(tls_context_refuses_a_key_of_another_certificate),
      cmocka_unit_test(crl_reload_refuses_a_client_revoked_after_start),
      cmocka_unit_test(heartbeats_do_not_extend_the_handshake_deadline),
      cmocka_unit_test(dripping_clienthello_is_closed_at_the_handshake_deadline),
      cmocka_unit_test(frame_before_the_session_opens_is_limited_to_4_kib),
      cmocka_unit_test(hello_with_version_0_or_an_empty_range_gets_an_error_frame),
      cmocka_unit_test(hello_traffic_out_of_turn_gets_an_error_frame),
      cmocka_unit_test(open_session_lifts_the_hello_frame_limit),
      cmocka_unit_test(unauthenticated_over_the_cap_per_address_drops_the_oldest_of_that_address),
      cmocka_unit_test(listener_makes_room_at_its_caps_by_dropping_older_unauthenticated_ones),
      cmocka_unit_test(a_burst_at_the_total_drops_one_older_connection_for_each_newcomer),
      cmocka_unit_test(authenticated_connections_are_not_dropped_for_unauthenticated_pressure),
      cmocka_unit_test(
          session_beyond_the_authenticated_cap_per_address_is_refused_naming_the_key),
      cmocka_unit_test(dual_stack_listener_counts_ipv4_peers_by_their_own_address),
      cmocka_unit_test(guard_drops_at_an_unauthenticated_cap_and_never_below_its_start),
      cmocka_unit_test(guard_drops_between_start_and_cap_with_a_probability_rising_to_one),
      cmocka_unit_test(guard_totals_drop_any_at_the_total_and_refuse_when_nothing_is_unauthenticated),
      cmocka_unit_test(default_caps_let_a_thousand_sites_behind_one_address_connect),
      cmocka_unit_test(every_cap_key_is_in_the_coordinator_guide),
      cmocka_unit_test(frame_waits_for_the_budget_and_goes_on_when_it_frees),
  };
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  OPENSSL_cleanup();
  return failed;
}
