/* SPDX-License-Identifier: Apache-2.0 */
/* The session on top of a connection: the Hello exchange every xfed
 * process runs first (version negotiation, frame limits, roles), and small
 * helpers to send the common replies. The daemons and the CLI keep one
 * xf_session per connection and pass every received frame through
 * xf_session_on_frame, which swallows the hello traffic and hands on the
 * rest once the session is open (docs/protocol.md, "Sessions"). */
#ifndef XF_NET_SESSION_H
#define XF_NET_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "net/conn.h"
#include "net/xfed.pb-c.h"

/* Room for a role name ("site", "coordinator", "regional", "cli"). */
#define XF_SESSION_ROLE_MAX 16

typedef struct xf_session {
  bool hello_sent;      /* our Hello went out */
  bool hello_received;  /* the peer's Hello arrived and was accepted */
  bool ack_received;    /* the peer's HelloAck arrived */
  bool open;            /* all three: application frames may flow */
  uint32_t version;     /* the negotiated protocol version */
  size_t max_frame;     /* what we accept (announced in our Hello) */
  char peer_role[XF_SESSION_ROLE_MAX];
  char peer_agent[64];
} xf_session;

/* What a frame meant to the session. */
typedef enum xf_session_event {
  XF_SESSION_HANDLED = 0, /* hello traffic, handled: nothing to do */
  XF_SESSION_OPENED,      /* this frame completed the exchange: the session
                             is open now (the frame itself is handled) */
  XF_SESSION_FRAME        /* an application frame of an open session */
} xf_session_event;

/* Sends our Hello (role, max_frame: 0 means XF_FRAME_MAX_DEFAULT). The
 * connection applies max_frame once the session opens (xf_conn_authenticated);
 * until then it accepts only XF_CONN_PREAUTH_MAX_FRAME. Call it from
 * on_connect. */
xf_err xf_session_start(xf_session *s, xf_conn *c, const char *role, size_t max_frame,
                        xf_errctx *err) XF_WARN_UNUSED;

/* Passes one received frame through the session. Returns XF_OK with *ev
 * set, or an error after which the caller closes the connection (the
 * session has already told the peer why where the protocol says to):
 *   XF_EUNSUPPORTED  no common protocol version (a Refusal was sent);
 *   XF_EDENIED       the peer refused the session (its Refusal's text is in
 *                    err), or sent an application frame before the hello
 *                    (an Error was sent);
 *   XF_EFORMAT       a second Hello, a HelloAck out of turn or naming another
 *                    version, or a Hello with a bad version range (version
 *                    0, min > max) (an Error was sent). */
xf_err xf_session_on_frame(xf_session *s, xf_conn *c, const Xfed__Envelope *env,
                           xf_session_event *ev, xf_errctx *err) XF_WARN_UNUSED;

/* Sends Error{code, message} (printf-style); failures to queue are logged
 * and otherwise ignored: the reply is best effort. */
void xf_session_send_error(xf_conn *c, xf_err code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Sends Error{code, message, stream_id}: the answer to an upload's
 * TensorBegin that the receiver does not take now (no TensorAck follows).
 * Best effort, as xf_session_send_error. */
void xf_session_refuse_stream(xf_conn *c, uint64_t stream_id, xf_err code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Sends Refusal{reason, text} and closes the connection after it. */
void xf_session_refuse(xf_conn *c, Xfed__Refusal__Reason reason, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* "hello", "task_offer", ... for an Envelope's body; "none" when unset. */
const char *xf_envelope_body_name(const Xfed__Envelope *env);

/* "POLICY_DENIED", "BUDGET_EXHAUSTED", ... for a TaskRefusal's reason, as
 * logs and messages show it; "UNKNOWN" for a number the .proto does not
 * name (a newer peer). */
const char *xf_task_refusal_reason_name(int reason);

/* "NOT_AUTHORIZED", "BUSY", ... for a session Refusal's reason; "UNKNOWN"
 * for a number the .proto does not name. */
const char *xf_session_refusal_reason_name(int reason);

#endif
