/* SPDX-License-Identifier: Apache-2.0 */
/* DOCUMENT streams (net/document.h): a message too large for one frame as a
 * tensor stream of its packed bytes, and the receiver that gathers one and
 * unpacks it. */
#include "net/document.h"

#include <string.h>

#include "base/alloc.h"
#include "net/frame.h"
#include "net/session.h"

/* Room a TensorChunk's frame needs besides its data: the Envelope's tag and
 * length, the stream id, index and offset (varints of up to 10 bytes each,
 * with their tags) and the data's tag and length. */
#define XF__CHUNK_OVERHEAD 64u

bool xf_document_fits(const Xfed__Envelope *env, size_t max_frame) {
  return protobuf_c_message_get_packed_size(&env->base) <= max_frame;
}

size_t xf_document_chunk(size_t max_frame) {
  if (max_frame <= 2 * XF__CHUNK_OVERHEAD) return XF__CHUNK_OVERHEAD;
  size_t n = max_frame - XF__CHUNK_OVERHEAD;
  return n < XF_TENSOR_CHUNK_MAX ? n : XF_TENSOR_CHUNK_MAX;
}

xf_err xf_document_pack(const Xfed__Envelope *env, uint8_t **bytes, size_t *len,
                        xf_errctx *err) {
  *bytes = NULL;
  *len = 0;
  size_t n = protobuf_c_message_get_packed_size(&env->base);
  if (n > XF_DOCUMENT_MAX)
    return xf_fail(err, XF_ERANGE,
                   "%s is %zu bytes encoded, more than the %u bytes one message may have",
                   xf_envelope_body_name(env), n, XF_DOCUMENT_MAX);
  uint8_t *b = xf_malloc(n ? n : 1);
  if (!b) return xf_fail(err, XF_ENOMEM, "cannot encode %s of %zu bytes",
                         xf_envelope_body_name(env), n);
  protobuf_c_message_pack(&env->base, b);
  *bytes = b;
  *len = n;
  return XF_OK;
}

xf_tensor_desc xf_document_desc(uint64_t stream_id, size_t len) {
  xf_tensor_desc d = {.stream_id = stream_id,
                      .kind = XFED__TENSOR_BEGIN__KIND__DOCUMENT,
                      .dtype = XFED__TENSOR_BEGIN__DTYPE__U8,
                      .element_count = len};
  return d;
}

bool xf_document_frame(const Xfed__Envelope *env) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
    return env->tensor_begin->kind == XFED__TENSOR_BEGIN__KIND__DOCUMENT;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_END: return true;
  default: return false;
  }
}

/* ---- receiving ------------------------------------------------------------------------- */

struct xf_document_rx {
  uint64_t max_total;
  xf_tensor_receiver *rx; /* the open stream, or NULL */
  uint8_t *buf;           /* what arrived of it, grown as chunks come */
  size_t cap;
  uint64_t total;
};

/* Grows the buffer as bytes arrive rather than to the announced size at
 * TensorBegin: an announcement alone costs the receiver nothing. */
static xf_err sink(void *user, uint64_t offset, const uint8_t *data, size_t len,
                   xf_errctx *ctx) {
  xf_document_rx *d = user;
  uint64_t end = offset + len;
  XF_ENSURE(end <= d->total, ctx, XF_EFORMAT, "chunk at %llu beyond the announced %llu bytes",
            (unsigned long long)offset, (unsigned long long)d->total);
  if (end > d->cap) {
    size_t cap = d->cap ? d->cap : 64u << 10;
    while (cap < end) cap *= 2;
    if (cap > d->total) cap = (size_t)d->total;
    uint8_t *grown = xf_realloc(d->buf, cap);
    XF_ENSURE(grown, ctx, XF_ENOMEM, "cannot hold a message of %llu bytes",
              (unsigned long long)d->total);
    d->buf = grown;
    d->cap = cap;
  }
  memcpy(d->buf + offset, data, len);
  return XF_OK;
}

static void drop_stream(xf_document_rx *d) {
  xf_tensor_receiver_free(d->rx);
  d->rx = NULL;
  xf_free(d->buf);
  d->buf = NULL;
  d->cap = 0;
  d->total = 0;
}

xf_err xf_document_rx_new(uint64_t max_total, xf_document_rx **out, xf_errctx *err) {
  *out = xf_calloc(1, sizeof(**out));
  if (!*out) return xf_fail(err, XF_ENOMEM, "cannot allocate a document receiver");
  (*out)->max_total = max_total ? max_total : XF_DOCUMENT_MAX;
  return XF_OK;
}

void xf_document_rx_free(xf_document_rx *d) {
  if (!d) return;
  drop_stream(d);
  xf_free(d);
}

static xf_err begin(xf_document_rx *d, const Xfed__TensorBegin *b, xf_document_step *step,
                    xf_errctx *err) {
  if (b->kind != XFED__TENSOR_BEGIN__KIND__DOCUMENT || b->dtype != XFED__TENSOR_BEGIN__DTYPE__U8)
    return xf_fail(err, XF_EFORMAT,
                   "stream %llu is of kind %d and dtype %d; only DOCUMENT streams of U8 carry "
                   "messages here",
                   (unsigned long long)b->stream_id, (int)b->kind, (int)b->dtype);
  const xf_tensor_info *had = d->rx ? xf_tensor_receiver_info(d->rx) : NULL;
  if (had && had->stream_id != b->stream_id) drop_stream(d); /* the sender started over */
  if (!d->rx) XF_GUARD(xf_tensor_receiver_new(d->max_total, sink, d, &d->rx, err));
  XF_GUARD(xf_tensor_receiver_begin(d->rx, b, err));
  d->total = b->total_bytes;
  step->ack = true;
  xf_tensor_receiver_ack(d->rx, &step->tensor_ack);
  return XF_OK;
}

static xf_err end(xf_document_rx *d, const Xfed__TensorEnd *e, xf_document_step *step,
                  xf_errctx *err) {
  xf_err rc = xf_tensor_receiver_end(d->rx, e, err);
  if (rc == XF_ETRUNCATED) {
    /* Chunks went missing: the ack tells the sender where to resume. */
    step->ack = true;
    xf_tensor_receiver_ack(d->rx, &step->tensor_ack);
    return XF_OK;
  }
  XF_GUARD(rc);
  Xfed__Envelope *m = NULL;
  XF_GUARD(xf_envelope_unpack(d->buf ? (const void *)d->buf : (const void *)"", (size_t)d->total,
                              &m, err));
  switch (m->body_case) {
  case XFED__ENVELOPE__BODY_HELLO:
  case XFED__ENVELOPE__BODY_HELLO_ACK:
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
  case XFED__ENVELOPE__BODY_TENSOR_ACK:
  case XFED__ENVELOPE__BODY_TENSOR_END:
  case XFED__ENVELOPE__BODY_HEARTBEAT:
    rc = xf_fail(err, XF_EFORMAT, "a DOCUMENT stream carries a request or an answer, not %s",
                 xf_envelope_body_name(m));
    xf_envelope_free(m);
    return rc;
  default: break;
  }
  step->ack = true;
  xf_tensor_receiver_ack(d->rx, &step->tensor_ack);
  step->message = m;
  drop_stream(d);
  return XF_OK;
}

xf_err xf_document_rx_take(xf_document_rx *d, const Xfed__Envelope *env, xf_document_step *step,
                           xf_errctx *err) {
  memset(step, 0, sizeof(*step));
  xf_err rc;
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN: rc = begin(d, env->tensor_begin, step, err); break;
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    rc = d->rx ? xf_tensor_receiver_chunk(d->rx, env->tensor_chunk, err)
               : xf_fail(err, XF_EFORMAT, "TensorChunk of stream %llu, which is not open",
                         (unsigned long long)env->tensor_chunk->stream_id);
    break;
  case XFED__ENVELOPE__BODY_TENSOR_END:
    rc = d->rx ? end(d, env->tensor_end, step, err)
               : xf_fail(err, XF_EFORMAT, "TensorEnd of stream %llu, which is not open",
                         (unsigned long long)env->tensor_end->stream_id);
    break;
  default:
    rc = xf_fail(err, XF_EINVAL, "%s is not part of a DOCUMENT stream",
                 xf_envelope_body_name(env));
    break;
  }
  if (rc != XF_OK) {
    drop_stream(d);
    step->ack = false;
  }
  return rc;
}
