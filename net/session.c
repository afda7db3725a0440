/* SPDX-License-Identifier: Apache-2.0 */
/* The Hello exchange and the common replies (net/session.h). */
#include "net/session.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "net/frame.h"
#include "net/hello.h"

#define XF_AGENT "xfed/0.1.0"

xf_err xf_session_start(xf_session *s, xf_conn *c, const char *role, size_t max_frame,
                        xf_errctx *err) {
  memset(s, 0, sizeof(*s));
  s->max_frame = max_frame ? max_frame : XF_FRAME_MAX_DEFAULT;
  /* Announced now, applied once the session opens: until then the
   * connection accepts only the small frames of the hello. */
  XF_ENSURE(s->max_frame <= XF_FRAME_MAX_LIMIT, err, XF_EINVAL,
            "frame maximum of %zu bytes is above %u", s->max_frame, XF_FRAME_MAX_LIMIT);
  static char *caps[] = {"tensor-resume"};
  Xfed__Hello hello = XFED__HELLO__INIT;
  hello.protocol_version = XF_PROTOCOL_VERSION;
  hello.min_protocol_version = XF_PROTOCOL_MIN_VERSION;
  hello.role = (char *)role;
  hello.agent = XF_AGENT;
  hello.max_frame = (uint32_t)s->max_frame;
  hello.n_capabilities = 1;
  hello.capabilities = caps;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO;
  env.hello = &hello;
  XF_GUARD(xf_conn_send(c, &env, err));
  s->hello_sent = true;
  return XF_OK;
}

static xf_err send_ack(xf_session *s, xf_conn *c, xf_errctx *err) {
  static char *caps[] = {"tensor-resume"};
  Xfed__HelloAck ack = XFED__HELLO_ACK__INIT;
  ack.protocol_version = s->version;
  ack.n_capabilities = 1;
  ack.capabilities = caps;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_HELLO_ACK;
  env.hello_ack = &ack;
  return xf_conn_send(c, &env, err);
}

static void copy_text(char *dst, size_t n, const char *src) {
  snprintf(dst, n, "%s", src ? src : "");
}

/* A Hello or HelloAck the session cannot take: the peer gets Error(code)
 * with the reason before the caller closes, and err the same reason. */
static xf_err hello_fault(xf_conn *c, xf_errctx *err, xf_err code, const char *fmt, ...)
    XF_PRINTF(4, 5);
static xf_err hello_fault(xf_conn *c, xf_errctx *err, xf_err code, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  xf_session_send_error(c, code, "%s", msg);
  return xf_fail(err, code, "%s", msg);
}

xf_err xf_session_on_frame(xf_session *s, xf_conn *c, const Xfed__Envelope *env,
                           xf_session_event *ev, xf_errctx *err) {
  *ev = XF_SESSION_HANDLED;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_HELLO: {
    if (s->hello_received)
      return hello_fault(c, err, XF_EFORMAT, "received a second Hello; a session has one");
    uint32_t v;
    xf_errctx why;
    xf_errctx_clear(&why);
    xf_err rc = xf_hello_negotiate(XF_PROTOCOL_MIN_VERSION, XF_PROTOCOL_VERSION, env->hello,
                                   &v, &why);
    if (rc != XF_OK) {
      /* The peer is told why before the caller closes: no common version is
       * a Refusal, a malformed range (version 0, min > max) an Error. */
      if (rc == XF_EUNSUPPORTED)
        xf_session_refuse(c, XFED__REFUSAL__REASON__NO_COMMON_VERSION, "%s", why.msg);
      else if (rc == XF_EFORMAT)
        xf_session_send_error(c, rc, "%s", why.msg);
      return xf_fail(err, rc, "%s", why.msg);
    }
    s->version = v;
    s->hello_received = true;
    copy_text(s->peer_role, sizeof(s->peer_role), env->hello->role);
    copy_text(s->peer_agent, sizeof(s->peer_agent), env->hello->agent);
    XF_GUARD(xf_conn_set_peer_max_frame(c, xf_hello_peer_max_frame(env->hello), err));
    XF_GUARD(send_ack(s, c, err));
    break;
  }
  case XFED__ENVELOPE__BODY_HELLO_ACK:
    if (!s->hello_received || s->ack_received)
      return hello_fault(c, err, XF_EFORMAT, "received %s",
                         s->ack_received ? "a second HelloAck" : "a HelloAck before the Hello");
    if (env->hello_ack->protocol_version != s->version)
      return hello_fault(c, err, XF_EFORMAT,
                         "received a HelloAck naming protocol version %u; the Hellos agreed on %u",
                         (unsigned)env->hello_ack->protocol_version, (unsigned)s->version);
    s->ack_received = true;
    break;
  case XFED__ENVELOPE__BODY_REFUSAL: {
    return xf_fail(err, XF_EDENIED, "the peer refused the session (%s): %s",
                   xf_session_refusal_reason_name((int)env->refusal->reason),
                   env->refusal->text && *env->refusal->text ? env->refusal->text
                                                             : "no reason given");
  }
  default:
    if (s->open) {
      *ev = XF_SESSION_FRAME;
      return XF_OK;
    }
    if (env->body_case == XFED__ENVELOPE__BODY_ERROR)
      return xf_fail(err, XF_EDENIED, "the peer sent an error before the hello: %s",
                     env->error->message ? env->error->message : "");
    xf_session_send_error(c, XF_EDENIED, "%s before the hello exchange",
                          xf_envelope_body_name(env));
    return xf_fail(err, XF_EDENIED, "the peer sent %s before the hello exchange",
                   xf_envelope_body_name(env));
  }
  if (!s->open && s->hello_sent && s->hello_received && s->ack_received) {
    /* Ends the handshake deadline and lifts the frame limit of the hello. */
    XF_GUARD(xf_conn_authenticated(c, s->max_frame, err));
    s->open = true;
    *ev = XF_SESSION_OPENED;
  }
  return XF_OK;
}

static void send_error(xf_conn *c, uint64_t stream_id, xf_err code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
static void send_error(xf_conn *c, uint64_t stream_id, xf_err code, const char *fmt, va_list ap) {
  char msg[512];
  vsnprintf(msg, sizeof(msg), fmt, ap);
  Xfed__Error e = XFED__ERROR__INIT;
  e.code = (uint32_t)code;
  e.message = msg;
  e.stream_id = stream_id;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_ERROR;
  env.error = &e;
  xf_errctx err = {0};
  if (xf_conn_send(c, &env, &err) != XF_OK)
    XF_WARN("error_reply_lost", "peer=%s reason=\"%s\"", xf_conn_peer_addr(c), err.msg);
}

void xf_session_send_error(xf_conn *c, xf_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_error(c, 0, code, fmt, ap);
  va_end(ap);
}

void xf_session_refuse_stream(xf_conn *c, uint64_t stream_id, xf_err code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  send_error(c, stream_id, code, fmt, ap);
  va_end(ap);
}

void xf_session_refuse(xf_conn *c, Xfed__Refusal__Reason reason, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  Xfed__Refusal r = XFED__REFUSAL__INIT;
  r.reason = reason;
  r.text = msg;
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_REFUSAL;
  env.refusal = &r;
  xf_errctx err = {0};
  if (xf_conn_send(c, &env, &err) != XF_OK)
    XF_WARN("refusal_lost", "peer=%s reason=\"%s\"", xf_conn_peer_addr(c), err.msg);
  xf_conn_close(c);
}

const char *xf_task_refusal_reason_name(int reason) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&xfed__task_refusal__reason__descriptor, reason);
  return v ? v->name : "UNKNOWN";
}

const char *xf_session_refusal_reason_name(int reason) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&xfed__refusal__reason__descriptor, reason);
  return v ? v->name : "UNKNOWN";
}

const char *xf_envelope_body_name(const Xfed__Envelope *env) {
  const ProtobufCFieldDescriptor *f =
      protobuf_c_message_descriptor_get_field(&xfed__envelope__descriptor,
                                              (unsigned)env->body_case);
  return f ? f->name : "none";
}
