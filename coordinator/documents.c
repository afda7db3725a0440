/* SPDX-License-Identifier: Apache-2.0 */
/* Messages larger than a frame on the CLI's sessions (docs/protocol.md,
 * "Messages larger than a frame"): an answer that does not fit goes out as
 * a DOCUMENT stream through the peer's stream queue, and a request that
 * came as one is gathered and then handled like any other. */
#include <inttypes.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/log.h"
#include "coordinator/daemon_internal.h"
#include "net/frame.h"

size_t xf__frame_limit(const xf__peer *p) {
  size_t peer = xf_conn_peer_max_frame(p->conn);
  size_t own = p->co->cfg.max_frame ? p->co->cfg.max_frame : XF_FRAME_MAX_DEFAULT;
  return p->kind == XF__PEER_CLI && own < peer ? own : peer;
}

xf_err xf__send_document(xf__peer *p, const Xfed__Envelope *env) {
  xf_errctx err = {0};
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_err rc = xf_document_pack(env, &bytes, &len, &err);
  if (rc != XF_OK) {
    XF_WARN("send_failed", "peer=%s body=%s reason=\"%s\"", xf_conn_peer_addr(p->conn),
            xf_envelope_body_name(env), err.msg);
    xf_session_send_error(p->conn, rc, "%s", err.msg);
    return rc;
  }
  const xf_tensor_desc d = xf_document_desc(xf__stream_id(p->co, false), len);
  /* Acknowledged, so that the answer is paced by the CLI taking it and a
   * TensorAck short of the end makes us resume rather than start over. */
  const xf__stream_opts o = {.await_ack = true};
  XF_DEBUG("document_send", "peer=%s body=%s bytes=%zu stream=%" PRIu64,
           xf_conn_peer_addr(p->conn), xf_envelope_body_name(env), len, d.stream_id);
  return xf__stream_queue(p, &d, NULL, bytes, len, xf_document_chunk(xf__frame_limit(p)), &o);
}

/* What the DOCUMENT streams coming in on all sessions together may
 * announce: two of the largest at once. However many sessions peers open,
 * requests larger than a frame make the coordinator hold no more than this;
 * one more is refused until one of them ends. */
#define XF__DOCUMENTS_HELD_MAX (2ull * XF_DOCUMENT_MAX)

static void send_ack(xf__peer *p, Xfed__TensorAck *ack) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  env.body_case = XFED__ENVELOPE__BODY_TENSOR_ACK;
  env.tensor_ack = ack;
  (void)xf__send(p, &env);
}

/* Only a policy document (an import, a push) is larger than a frame: a job
 * spec, a rule, a query all fit one. So only the identities that may change
 * the policy send DOCUMENT streams, and no one else can make the
 * coordinator gather one. */
static bool may_send_documents(const xf__peer *p) {
  return p->id.role == XF_PKI_ROLE_COMPLIANCE || p->id.role == XF_PKI_ROLE_ADMIN;
}

/* The stream p had open is gone (done, refused, replaced): its size no
 * longer counts. */
static void release(xf__peer *p) {
  p->co->doc_held -= p->doc_held;
  p->doc_held = 0;
}

void xf__document_drop(xf__peer *p) {
  xf_document_rx_free(p->doc_in);
  p->doc_in = NULL;
  release(p);
}

/* Whether a TensorBegin may open (or reopen) p's stream: the sender's role,
 * the size of one request, and what the streams of every session hold. */
static bool admit(xf__coord *co, xf__peer *p, const Xfed__TensorBegin *b) {
  char user[XF_SPIFFE_MAX];
  if (xf_spiffe_format(&p->id, user, NULL) != XF_OK) snprintf(user, sizeof(user), "?");
  if (!may_send_documents(p)) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " reason=role",
            xf_conn_peer_addr(p->conn), user, b->total_bytes);
    xf_session_send_error(p->conn, XF_EDENIED,
                          "a request larger than one frame is a policy document, which only "
                          "a compliance or admin identity sends; %s is a %s",
                          user, xf_pki_role_name(p->id.role));
    return false;
  }
  if (b->total_bytes > XF_DOCUMENT_MAX) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " reason=size",
            xf_conn_peer_addr(p->conn), user, b->total_bytes);
    xf_session_send_error(p->conn, XF_ERANGE,
                          "the request announced is %" PRIu64 " bytes, more than the %u bytes "
                          "one request may have",
                          b->total_bytes, XF_DOCUMENT_MAX);
    return false;
  }
  uint64_t others = co->doc_held - p->doc_held;
  if (others + b->total_bytes > XF__DOCUMENTS_HELD_MAX) {
    XF_WARN("document_refused", "peer=%s user=%s bytes=%" PRIu64 " held=%" PRIu64
            " reason=busy",
            xf_conn_peer_addr(p->conn), user, b->total_bytes, others);
    xf_session_send_error(p->conn, XF_ERANGE,
                          "the coordinator is taking in %" PRIu64 " bytes of other requests "
                          "larger than a frame and holds at most %llu at once; send this one "
                          "(%" PRIu64 " bytes) again when they are done",
                          others, XF__DOCUMENTS_HELD_MAX, b->total_bytes);
    return false;
  }
  return true;
}

void xf__document_on_frame(xf__coord *co, xf__peer *p, const Xfed__Envelope *env) {
  if (!xf_document_frame(env)) {
    xf_session_send_error(p->conn, XF_EUNSUPPORTED,
                          "%s: a user sends no tensors here; a request too large for one frame "
                          "comes as a DOCUMENT stream",
                          xf_envelope_body_name(env));
    return;
  }
  const Xfed__TensorBegin *b =
      env->body_case == XFED__ENVELOPE__BODY_TENSOR_BEGIN ? env->tensor_begin : NULL;
  if (b && !admit(co, p, b)) {
    xf__document_drop(p); /* a stream it had open ends here too */
    return;
  }
  xf_errctx err = {0};
  if (!p->doc_in && xf_document_rx_new(XF_DOCUMENT_MAX, &p->doc_in, &err) != XF_OK) {
    xf_session_send_error(p->conn, XF_ENOMEM, "%s", err.msg);
    return;
  }
  xf_document_step step;
  xf_err rc = xf_document_rx_take(p->doc_in, env, &step, &err);
  if (rc != XF_OK) {
    release(p); /* the receiver dropped the stream */
    XF_WARN("document_refused", "peer=%s code=%s reason=\"%s\"", xf_conn_peer_addr(p->conn),
            xf_strerror(rc), err.msg);
    xf_session_send_error(p->conn, rc, "%s", err.msg);
    return;
  }
  if (b) {
    /* Counted from the announcement on: the receiver never holds more. */
    co->doc_held += b->total_bytes - p->doc_held;
    p->doc_held = b->total_bytes;
  }
  if (step.ack) send_ack(p, &step.tensor_ack);
  if (!step.message) return;
  release(p);
  XF_DEBUG("document_received", "peer=%s body=%s", xf_conn_peer_addr(p->conn),
           xf_envelope_body_name(step.message));
  xf__cli_on_frame(co, p, step.message);
  xf_envelope_free(step.message);
}
