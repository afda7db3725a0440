/* SPDX-License-Identifier: Apache-2.0 */
/* Tensor stream sender and receiver state machines. */
#include "net/tensor.h"

#include <string.h>

#include "base/alloc.h"

static bool xf__kind_known(int kind) {
  return kind == XFED__TENSOR_BEGIN__KIND__MODEL || kind == XFED__TENSOR_BEGIN__KIND__UPDATE ||
         kind == XFED__TENSOR_BEGIN__KIND__AGGREGATE || kind == XFED__TENSOR_BEGIN__KIND__DOCUMENT;
}

/* ---- sender ------------------------------------------------------------- */

typedef enum xf__send_phase {
  XF__SEND_BEGIN,
  XF__SEND_CHUNKS,
  XF__SEND_END,
  XF__SEND_DONE,
} xf__send_phase;

struct xf_tensor_sender {
  xf_tensor_desc desc; /* job_id owned */
  const uint8_t *data; /* borrowed */
  uint64_t total;
  uint64_t chunk;
  xf_digest digest;
  xf__send_phase phase;
  uint64_t offset; /* next chunk to send */
  uint64_t acked;
  uint8_t sealed_by[32]; /* desc.sealed_by points here when set */
};

xf_err xf_tensor_sender_new(const xf_tensor_desc *desc, const void *data, size_t len,
                            size_t chunk_bytes, xf_tensor_sender **out, xf_errctx *ctx) {
  return xf_tensor_sender_new_hashed(desc, data, len, chunk_bytes, NULL, out, ctx);
}

xf_err xf_tensor_sender_new_hashed(const xf_tensor_desc *desc, const void *data, size_t len,
                                   size_t chunk_bytes, const xf_digest *digest,
                                   xf_tensor_sender **out, xf_errctx *ctx) {
  *out = NULL;
  if (chunk_bytes == 0) chunk_bytes = XF_TENSOR_CHUNK_MAX;
  XF_ENSURE(desc->stream_id != 0, ctx, XF_EINVAL, "a tensor stream needs a nonzero id");
  XF_ENSURE(xf__kind_known((int)desc->kind), ctx, XF_EINVAL,
            "tensor kind %d is not model, update, aggregate or document", (int)desc->kind);
  XF_ENSURE(chunk_bytes <= XF_TENSOR_CHUNK_MAX, ctx, XF_EINVAL,
            "chunk size %zu is above the limit of %u bytes", chunk_bytes, XF_TENSOR_CHUNK_MAX);
  XF_ENSURE(len == 0 || data, ctx, XF_EINVAL, "a tensor of %zu bytes needs its data", len);
  XF_GUARD(xf_crypto_init());
  xf_tensor_sender *s = xf_calloc(1, sizeof(*s));
  XF_ENSURE(s, ctx, XF_ENOMEM, "cannot allocate a tensor sender");
  s->desc = *desc;
  if (desc->sealed_by) {
    memcpy(s->sealed_by, desc->sealed_by, sizeof(s->sealed_by));
    s->desc.sealed_by = s->sealed_by;
  }
  s->desc.job_id = xf_strdup(desc->job_id ? desc->job_id : "");
  if (!s->desc.job_id) {
    xf_free(s);
    return xf_fail(ctx, XF_ENOMEM, "cannot allocate a tensor sender");
  }
  s->data = data;
  s->total = len;
  s->chunk = chunk_bytes;
  if (digest)
    s->digest = *digest;
  else
    xf_digest_buf(data, len, &s->digest);
  s->phase = XF__SEND_BEGIN;
  *out = s;
  return XF_OK;
}

void xf_tensor_sender_free(xf_tensor_sender *s) {
  if (!s) return;
  xf_free((char *)s->desc.job_id);
  xf_free(s);
}

xf_err xf_tensor_sender_next(xf_tensor_sender *s, xf_tensor_msg *msg) {
  Xfed__Envelope env = XFED__ENVELOPE__INIT;
  msg->env = env;
  switch (s->phase) {
  case XF__SEND_BEGIN: {
    Xfed__TensorBegin b = XFED__TENSOR_BEGIN__INIT;
    b.stream_id = s->desc.stream_id;
    b.kind = s->desc.kind;
    b.total_bytes = s->total;
    b.chunk_bytes = (uint32_t)s->chunk;
    b.dtype = s->desc.dtype;
    b.element_count = s->desc.element_count;
    b.digest.len = XF_DIGEST_BYTES;
    b.digest.data = s->digest.bytes;
    b.job_id = (char *)s->desc.job_id;
    b.round = s->desc.round;
    b.attempt = s->desc.attempt;
    b.weight = s->desc.weight;
    b.contributors = s->desc.contributors;
    if (s->desc.sealed_by) {
      b.sealed_by.data = (uint8_t *)s->desc.sealed_by;
      b.sealed_by.len = sizeof(s->sealed_by);
      b.sealed_chunk = s->desc.sealed_chunk;
    }
    msg->body.begin = b;
    msg->env.body_case = XFED__ENVELOPE__BODY_TENSOR_BEGIN;
    msg->env.tensor_begin = &msg->body.begin;
    s->phase = s->offset < s->total ? XF__SEND_CHUNKS : XF__SEND_END;
    return XF_OK;
  }
  case XF__SEND_CHUNKS: {
    Xfed__TensorChunk c = XFED__TENSOR_CHUNK__INIT;
    uint64_t n = s->total - s->offset < s->chunk ? s->total - s->offset : s->chunk;
    c.stream_id = s->desc.stream_id;
    c.index = s->offset / s->chunk;
    c.offset = s->offset;
    c.data.len = (size_t)n;
    c.data.data = (uint8_t *)s->data + s->offset;
    msg->body.chunk = c;
    msg->env.body_case = XFED__ENVELOPE__BODY_TENSOR_CHUNK;
    msg->env.tensor_chunk = &msg->body.chunk;
    s->offset += n;
    if (s->offset == s->total) s->phase = XF__SEND_END;
    return XF_OK;
  }
  case XF__SEND_END: {
    Xfed__TensorEnd e = XFED__TENSOR_END__INIT;
    e.stream_id = s->desc.stream_id;
    msg->body.end = e;
    msg->env.body_case = XFED__ENVELOPE__BODY_TENSOR_END;
    msg->env.tensor_end = &msg->body.end;
    s->phase = XF__SEND_DONE;
    return XF_OK;
  }
  case XF__SEND_DONE:
    break;
  }
  return XF_ENOENT;
}

void xf_tensor_sender_rewind(xf_tensor_sender *s) { s->phase = XF__SEND_BEGIN; }

xf_err xf_tensor_sender_resume(xf_tensor_sender *s, uint64_t next_offset, xf_errctx *ctx) {
  XF_ENSURE(next_offset <= s->total, ctx, XF_ERANGE,
            "acknowledged offset %llu is beyond the tensor's %llu bytes",
            (unsigned long long)next_offset, (unsigned long long)s->total);
  XF_ENSURE(next_offset % s->chunk == 0 || next_offset == s->total, ctx, XF_ERANGE,
            "acknowledged offset %llu is not on a %llu-byte chunk boundary",
            (unsigned long long)next_offset, (unsigned long long)s->chunk);
  if (next_offset > s->acked) s->acked = next_offset;
  if (s->phase == XF__SEND_DONE && next_offset == s->total) return XF_OK;
  s->offset = next_offset;
  s->phase = next_offset < s->total ? XF__SEND_CHUNKS : XF__SEND_END;
  return XF_OK;
}

uint64_t xf_tensor_sender_offset(const xf_tensor_sender *s) { return s->offset; }
uint64_t xf_tensor_sender_acked(const xf_tensor_sender *s) { return s->acked; }

/* ---- receiver ----------------------------------------------------------- */

struct xf_tensor_receiver {
  uint64_t max_total;
  xf_tensor_sink sink;
  void *user;
  bool announced; /* a TensorBegin fixed info */
  xf_tensor_info info;
  uint64_t next;  /* resume point */
  xf_digest_ctx hash; /* over bytes [0, next) */
  bool complete;
  bool spent;     /* the digest failed */
};

xf_err xf_tensor_receiver_new(uint64_t max_total, xf_tensor_sink sink, void *user,
                              xf_tensor_receiver **out, xf_errctx *ctx) {
  *out = NULL;
  XF_ENSURE(sink, ctx, XF_EINVAL, "a tensor receiver needs a sink");
  XF_GUARD(xf_crypto_init());
  xf_tensor_receiver *r = xf_calloc(1, sizeof(*r));
  XF_ENSURE(r, ctx, XF_ENOMEM, "cannot allocate a tensor receiver");
  r->max_total = max_total;
  r->sink = sink;
  r->user = user;
  xf_digest_init(&r->hash);
  *out = r;
  return XF_OK;
}

void xf_tensor_receiver_free(xf_tensor_receiver *r) {
  if (!r) return;
  xf_free(r->info.job_id);
  xf_free(r);
}

static xf_err xf__spent(const xf_tensor_receiver *r, xf_errctx *ctx) {
  return xf_fail(ctx, XF_EINTEGRITY, "tensor stream %llu failed its digest check; start "
                 "a new receiver to retry it", (unsigned long long)r->info.stream_id);
}

/* Checks that a message after TensorBegin belongs to this stream. */
static xf_err xf__same_stream(const xf_tensor_receiver *r, uint64_t stream_id,
                              const char *what, xf_errctx *ctx) {
  XF_ENSURE(r->announced, ctx, XF_EFORMAT, "%s of stream %llu before its TensorBegin", what,
            (unsigned long long)stream_id);
  XF_ENSURE(stream_id == r->info.stream_id, ctx, XF_EFORMAT,
            "%s of stream %llu sent to the receiver of stream %llu", what,
            (unsigned long long)stream_id, (unsigned long long)r->info.stream_id);
  return XF_OK;
}

xf_err xf_tensor_receiver_begin(xf_tensor_receiver *r, const Xfed__TensorBegin *m,
                                xf_errctx *ctx) {
  if (r->spent) return xf__spent(r, ctx);
  XF_ENSURE(m->stream_id != 0, ctx, XF_EFORMAT, "TensorBegin with stream id 0");
  XF_ENSURE(xf__kind_known((int)m->kind), ctx, XF_EFORMAT,
            "TensorBegin of stream %llu has unknown kind %d", (unsigned long long)m->stream_id,
            (int)m->kind);
  XF_ENSURE(m->chunk_bytes >= 1 && m->chunk_bytes <= XF_TENSOR_CHUNK_MAX, ctx, XF_EFORMAT,
            "TensorBegin of stream %llu has chunk size %lu outside 1..%u",
            (unsigned long long)m->stream_id, (unsigned long)m->chunk_bytes,
            XF_TENSOR_CHUNK_MAX);
  XF_ENSURE(m->digest.len == XF_DIGEST_BYTES, ctx, XF_EFORMAT,
            "TensorBegin of stream %llu has a digest of %zu bytes, not %d",
            (unsigned long long)m->stream_id, m->digest.len, XF_DIGEST_BYTES);
  XF_ENSURE(m->total_bytes <= r->max_total, ctx, XF_ERANGE,
            "tensor stream %llu of %llu bytes exceeds the %llu bytes this receiver accepts",
            (unsigned long long)m->stream_id, (unsigned long long)m->total_bytes,
            (unsigned long long)r->max_total);
  const char *job = m->job_id ? m->job_id : "";
  if (r->announced) {
    const xf_tensor_info *i = &r->info;
    XF_ENSURE(m->stream_id == i->stream_id && m->kind == i->kind && m->dtype == i->dtype &&
                  m->element_count == i->element_count && m->total_bytes == i->total_bytes &&
                  m->chunk_bytes == i->chunk_bytes && m->round == i->round &&
                  m->attempt == i->attempt && m->weight == i->weight &&
                  m->contributors == i->contributors &&
                  memcmp(m->digest.data, i->digest.bytes, XF_DIGEST_BYTES) == 0 &&
                  strcmp(job, i->job_id) == 0,
              ctx, XF_EFORMAT,
              "TensorBegin of stream %llu announces a different tensor than the stream's "
              "first TensorBegin", (unsigned long long)m->stream_id);
    return XF_OK;
  }
  char *job_copy = xf_strdup(job);
  XF_ENSURE(job_copy, ctx, XF_ENOMEM, "cannot allocate a tensor stream's job id");
  r->info.stream_id = m->stream_id;
  r->info.kind = m->kind;
  r->info.dtype = m->dtype;
  r->info.element_count = m->element_count;
  r->info.total_bytes = m->total_bytes;
  r->info.chunk_bytes = m->chunk_bytes;
  memcpy(r->info.digest.bytes, m->digest.data, XF_DIGEST_BYTES);
  r->info.job_id = job_copy;
  r->info.round = m->round;
  r->info.attempt = m->attempt;
  r->info.weight = m->weight;
  r->info.contributors = m->contributors;
  r->info.sealed = m->sealed_by.len == sizeof(r->info.sealed_by);
  if (r->info.sealed) memcpy(r->info.sealed_by, m->sealed_by.data, sizeof(r->info.sealed_by));
  r->info.sealed_chunk = m->sealed_chunk;
  r->announced = true;
  return XF_OK;
}

xf_err xf_tensor_receiver_chunk(xf_tensor_receiver *r, const Xfed__TensorChunk *m,
                                xf_errctx *ctx) {
  if (r->spent) return xf__spent(r, ctx);
  XF_GUARD(xf__same_stream(r, m->stream_id, "TensorChunk", ctx));
  const xf_tensor_info *i = &r->info;
  unsigned long long off = m->offset;
  XF_ENSURE(m->offset < i->total_bytes, ctx, XF_EFORMAT,
            "chunk at offset %llu is beyond the tensor's %llu bytes", off,
            (unsigned long long)i->total_bytes);
  XF_ENSURE(m->offset % i->chunk_bytes == 0 && m->index == m->offset / i->chunk_bytes, ctx,
            XF_EFORMAT, "chunk %llu at offset %llu is not chunk %llu of %lu bytes",
            (unsigned long long)m->index, off,
            (unsigned long long)(m->offset / i->chunk_bytes), (unsigned long)i->chunk_bytes);
  uint64_t rest = i->total_bytes - m->offset;
  uint64_t want = rest < i->chunk_bytes ? rest : i->chunk_bytes;
  XF_ENSURE(m->data.len == want, ctx, XF_EFORMAT,
            "chunk at offset %llu carries %zu bytes, not %llu", off, m->data.len,
            (unsigned long long)want);
  if (m->offset < r->next) return XF_OK; /* a resend of a chunk already taken */
  XF_ENSURE(m->offset == r->next, ctx, XF_EFORMAT,
            "chunk at offset %llu leaves a gap: the next expected offset is %llu", off,
            (unsigned long long)r->next);
  XF_GUARD(r->sink(r->user, m->offset, m->data.data, m->data.len, ctx));
  xf_digest_update(&r->hash, m->data.data, m->data.len);
  r->next += m->data.len;
  return XF_OK;
}

xf_err xf_tensor_receiver_end(xf_tensor_receiver *r, const Xfed__TensorEnd *m,
                              xf_errctx *ctx) {
  if (r->spent) return xf__spent(r, ctx);
  XF_GUARD(xf__same_stream(r, m->stream_id, "TensorEnd", ctx));
  if (r->complete) return XF_OK;
  XF_ENSURE(r->next == r->info.total_bytes, ctx, XF_ETRUNCATED,
            "tensor stream %llu ended after %llu of its %llu bytes",
            (unsigned long long)r->info.stream_id, (unsigned long long)r->next,
            (unsigned long long)r->info.total_bytes);
  xf_digest got;
  xf_digest_final(&r->hash, &got);
  if (memcmp(got.bytes, r->info.digest.bytes, XF_DIGEST_BYTES) != 0) {
    r->spent = true;
    char want_hex[XF_DIGEST_HEX], got_hex[XF_DIGEST_HEX];
    xf_digest_hex(&r->info.digest, want_hex);
    xf_digest_hex(&got, got_hex);
    return xf_fail(ctx, XF_EINTEGRITY,
                   "tensor stream %llu has digest %s, but its TensorBegin announced %s",
                   (unsigned long long)r->info.stream_id, got_hex, want_hex);
  }
  r->complete = true;
  return XF_OK;
}

xf_err xf_tensor_receiver_handle(xf_tensor_receiver *r, const Xfed__Envelope *env,
                                 xf_errctx *ctx) {
  switch (env->body_case) {
  case XFED__ENVELOPE__BODY_TENSOR_BEGIN:
    return xf_tensor_receiver_begin(r, env->tensor_begin, ctx);
  case XFED__ENVELOPE__BODY_TENSOR_CHUNK:
    return xf_tensor_receiver_chunk(r, env->tensor_chunk, ctx);
  case XFED__ENVELOPE__BODY_TENSOR_END:
    return xf_tensor_receiver_end(r, env->tensor_end, ctx);
  default:
    return xf_fail(ctx, XF_EINVAL, "message %d is not part of a tensor stream",
                   (int)env->body_case);
  }
}

uint64_t xf_tensor_receiver_next_offset(const xf_tensor_receiver *r) { return r->next; }

void xf_tensor_receiver_ack(const xf_tensor_receiver *r, Xfed__TensorAck *ack) {
  Xfed__TensorAck init = XFED__TENSOR_ACK__INIT;
  *ack = init;
  ack->stream_id = r->info.stream_id;
  ack->next_offset = r->next;
}

bool xf_tensor_receiver_complete(const xf_tensor_receiver *r) { return r->complete; }

const xf_tensor_info *xf_tensor_receiver_info(const xf_tensor_receiver *r) {
  return r->announced ? &r->info : NULL;
}
