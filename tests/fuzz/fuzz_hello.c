/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the session's own messages (net/session.h, net/hello.h):
 * Hello, HelloAck, Refusal, Error and Heartbeat, and an application frame
 * (JobQuery) arriving among them, in any order: the input's first byte
 * sets the frame maximum this side announces (0: the default, else that
 * many 4 KiB), records of tests/fuzz/fuzz_msgs.h follow. Each input runs
 * one session from xf_session_start, with the frames going to
 * xf_session_on_frame as a daemon passes them; a Heartbeat is counted and
 * dropped as the connection does. The connection is a recorder defined
 * here (the session's only contact with the transport is the functions
 * below), so the session's own code runs unchanged.
 *
 * Checked: the session sends nothing but its Hello, one HelloAck once the
 * peer's Hello is accepted, and one Error or Refusal where it refuses: a
 * Hello with no common version is answered with a Refusal and the
 * connection closed, a malformed hello exchange (a bad version range, a
 * second Hello, a HelloAck out of turn or of another version) and a frame
 * before the hello with an Error, a peer's own Refusal or Error with
 * nothing, and no first Hello is refused without the peer being told. It
 * opens once, only after both Hellos and the HelloAck, authenticating the
 * connection with the announced maximum exactly then; application frames
 * pass only once it is open; every refusal has a message. Every Hello is
 * also negotiated against other version ranges, and the version chosen is
 * the highest both speak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/result.h"
#include "fuzz_msgs.h"
#include "net/conn.h"
#include "net/frame.h"
#include "net/hello.h"
#include "net/session.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the connection: a recorder ------------------------------------------------------------ */

struct xf_conn {
  bool closed;
  unsigned hellos, acks, errors, refusals, others;
  unsigned authenticated;
  size_t auth_max, peer_max;
};

xf_err xf_conn_send(xf_conn *c, const Xfed__Envelope *env, xf_errctx *err) {
  if (c->closed) return xf_fail(err, XF_EINVAL, "the connection is closed");
  /* What goes out must be a frame the peer can decode. */
  uint8_t *frame = NULL;
  size_t len = 0;
  if (xf_frame_encode(env, XF_FRAME_MAX_LIMIT, &frame, &len, NULL) != XF_OK) abort();
  Xfed__Envelope *back = NULL;
  if (xf_envelope_unpack(frame + XF_FRAME_HEADER, len - XF_FRAME_HEADER, &back, NULL) != XF_OK)
    abort();
  xf_envelope_free(back);
  xf_free(frame);
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_HELLO: c->hellos++; break;
  case XFED__ENVELOPE__BODY_HELLO_ACK: c->acks++; break;
  case XFED__ENVELOPE__BODY_ERROR:
    if (!env->error->message || !*env->error->message) abort();
    c->errors++;
    break;
  case XFED__ENVELOPE__BODY_REFUSAL:
    if (!env->refusal->text || !*env->refusal->text) abort();
    c->refusals++;
    break;
  default: c->others++; break;
  }
  return XF_OK;
}

void xf_conn_close(xf_conn *c) { c->closed = true; }

xf_err xf_conn_authenticated(xf_conn *c, size_t max_frame, xf_errctx *err) {
  if (max_frame > XF_FRAME_MAX_LIMIT) return xf_fail(err, XF_EINVAL, "frame limit too large");
  c->authenticated++;
  c->auth_max = max_frame;
  return XF_OK;
}

xf_err xf_conn_set_peer_max_frame(xf_conn *c, size_t max_frame, xf_errctx *err) {
  if (max_frame > XF_FRAME_MAX_LIMIT)
    return xf_fail(err, XF_EINVAL, "the peer's frame maximum %zu is above %u", max_frame,
                   XF_FRAME_MAX_LIMIT);
  c->peer_max = max_frame;
  return XF_OK;
}

const char *xf_conn_peer_addr(const xf_conn *c) {
  (void)c;
  return "fuzz:0";
}

/* ---- negotiation alone ------------------------------------------------------------------------- */

/* xf_hello_negotiate over [lo, hi] against the peer's Hello: the version it
 * picks is in both ranges and the highest such. */
static void negotiate(uint32_t lo, uint32_t hi, const Xfed__Hello *h) {
  uint32_t v = 99;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_hello_negotiate(lo, hi, h, &v, &err);
  uint32_t pmax = h->protocol_version;
  uint32_t pmin = h->min_protocol_version ? h->min_protocol_version : pmax;
  if (rc != XF_OK) {
    if (v != 0 || err.code != rc || !err.msg[0]) abort();
    if (rc == XF_EINVAL && !(lo < 1 || lo > hi)) abort();
    if (rc == XF_EFORMAT && !(pmin < 1 || pmin > pmax)) abort();
    if (rc == XF_EUNSUPPORTED && !((lo > pmax) || (pmin > hi))) abort();
    if (rc != XF_EINVAL && rc != XF_EFORMAT && rc != XF_EUNSUPPORTED) abort();
    return;
  }
  if (lo < 1 || lo > hi || pmin < 1 || pmin > pmax) abort();
  if (v < lo || v > hi || v < pmin || v > pmax) abort();
  if (v != (hi < pmax ? hi : pmax)) abort();
}

/* ---- the session ------------------------------------------------------------------------------- */

static const unsigned kinds[] = {
    XFED__ENVELOPE__BODY_HELLO,     XFED__ENVELOPE__BODY_HELLO_ACK, XFED__ENVELOPE__BODY_REFUSAL,
    XFED__ENVELOPE__BODY_ERROR,     XFED__ENVELOPE__BODY_HEARTBEAT, XFED__ENVELOPE__BODY_JOB_QUERY,
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  fz_begin(0);
  struct xf_conn conn = {0};
  xf_session s;
  /* The frame maximum we announce: 0 (the default) or that many 4 KiB. */
  size_t ours = (size_t)data[0] * 4096u;
  if (xf_session_start(&s, &conn, "coordinator", ours, NULL) != XF_OK) abort();
  if (conn.hellos != 1 || !s.hello_sent || s.open) abort();
  fz_input in = {data + 1, size - 1};
  fz_record r;
  unsigned opened = 0;
  uint64_t heartbeats = 0;
  while (!conn.closed && fz_next(&in, N_KINDS, &r)) {
    Xfed__Envelope *env = fz_decode(kinds[r.kind], r.body, r.len);
    if (!env) continue;
    if (env->body_case == XFED__ENVELOPE__BODY_HELLO) {
      negotiate(XF_PROTOCOL_MIN_VERSION, XF_PROTOCOL_VERSION, env->hello);
      negotiate(1, 3, env->hello);
      negotiate(2, 2, env->hello);
      negotiate(0, 1, env->hello);
      negotiate(3, 2, env->hello);
      size_t m = xf_hello_peer_max_frame(env->hello), want = env->hello->max_frame;
      if (m != (!want ? XF_FRAME_MAX_DEFAULT : want < XF_FRAME_MAX_LIMIT ? want
                                                                            : XF_FRAME_MAX_LIMIT))
        abort();
    }
    if (env->body_case == XFED__ENVELOPE__BODY_ERROR) {
      /* What a receiver makes of the code: a known error, or internal. */
      uint32_t code = env->error->code;
      xf_err shown = code == 0 || code >= XF_ERR_COUNT ? XF_EINTERNAL : (xf_err)code;
      const char *text = xf_strerror(shown);
      if (!text || !*text) abort();
    }
    if (env->body_case == XFED__ENVELOPE__BODY_HEARTBEAT) {
      heartbeats++; /* the connection counts it; the session never sees it */
      xf_envelope_free(env);
      continue;
    }
    if (strcmp(xf_envelope_body_name(env), "none") == 0) abort();
    struct xf_conn before = conn;
    bool had_hello = s.hello_received;
    xf_session_event ev = XF_SESSION_FRAME;
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_err rc = xf_session_on_frame(&s, &conn, env, &ev, &err);
    if (conn.hellos != 1 || conn.others != 0) abort(); /* only the hello's replies go out */
    if (rc != XF_OK) {
      if (err.code != rc || !err.msg[0]) abort();
      /* The peer is told why (net/session.h): a Refusal when no version
       * is common, an Error for a malformed hello exchange or a frame
       * before it; nothing when it refused or failed itself. */
      unsigned told = conn.errors + conn.refusals - before.errors - before.refusals;
      bool peer_ended = env->body_case == XFED__ENVELOPE__BODY_REFUSAL ||
                        env->body_case == XFED__ENVELOPE__BODY_ERROR;
      if (rc == XF_EUNSUPPORTED && (conn.refusals != before.refusals + 1 || !conn.closed))
        abort();
      if (rc == XF_EFORMAT && conn.errors != before.errors + 1) abort();
      if (rc == XF_EDENIED && !peer_ended && conn.errors != before.errors + 1) abort();
      if (told > 1 || (peer_ended && told != 0)) abort();
      /* Whatever is wrong with a first Hello, the peer is told. */
      if (env->body_case == XFED__ENVELOPE__BODY_HELLO && !had_hello && told == 0) abort();
      if (s.open && opened == 0) abort();
      xf_envelope_free(env);
      break; /* the caller closes the connection */
    }
    if (s.hello_received) {
      if (s.version < XF_PROTOCOL_MIN_VERSION || s.version > XF_PROTOCOL_VERSION) abort();
      if (conn.acks != 1) abort();
      if (strlen(s.peer_role) >= sizeof(s.peer_role) ||
          strlen(s.peer_agent) >= sizeof(s.peer_agent))
        abort();
    } else if (conn.acks != 0) {
      abort();
    }
    if (ev == XF_SESSION_OPENED) {
      opened++;
      if (opened != 1 || !s.open || !s.hello_received || !s.ack_received) abort();
      if (conn.authenticated != 1 || conn.auth_max != s.max_frame) abort();
    } else if (ev == XF_SESSION_FRAME) {
      if (!s.open || opened != 1) abort();
      if (env->body_case == XFED__ENVELOPE__BODY_HELLO ||
          env->body_case == XFED__ENVELOPE__BODY_HELLO_ACK ||
          env->body_case == XFED__ENVELOPE__BODY_REFUSAL)
        abort();
    }
    if (!s.open && conn.authenticated != 0) abort();
    xf_envelope_free(env);
  }
  (void)heartbeats;
  return 0;
}
