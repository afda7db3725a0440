/* SPDX-License-Identifier: Apache-2.0 */
/* Tensor streams without sockets: the sender cuts a buffer into TensorBegin,
 * TensorChunk and TensorEnd messages and resumes from an acknowledged offset;
 * the receiver checks their order, hands each new chunk to a sink, hashes as
 * it goes and verifies length and BLAKE2b digest at the end. No message is
 * ever larger than one chunk plus a few dozen bytes. */
#ifndef XF_NET_TENSOR_H
#define XF_NET_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/digest.h"
#include "net/xfed.pb-c.h"

/* The largest chunk (PRODUCT.md: chunks of at most 1 MiB), also the default.
 * With its fields a chunk's frame stays far below the 4 MiB frame limit. */
#define XF_TENSOR_CHUNK_MAX (1u << 20)

/* What a stream carries, besides its bytes. */
typedef struct xf_tensor_desc {
  uint64_t stream_id;             /* nonzero; the same across reconnects */
  Xfed__TensorBegin__Kind kind;   /* MODEL, UPDATE, AGGREGATE or DOCUMENT */
  Xfed__TensorBegin__Dtype dtype;
  uint64_t element_count;
  const char *job_id;             /* copied; NULL means "" */
  uint32_t round;
  uint32_t attempt;               /* the round's attempt (TaskOffer.attempt); 0: not given */
  uint64_t weight;                /* UPDATE, AGGREGATE: the records behind it */
  uint32_t contributors;          /* AGGREGATE: the sites it sums */
  const uint8_t *sealed_by;       /* sealed streams: the sender's ephemeral key (32 bytes,
                                     copied), else NULL */
  uint32_t sealed_chunk;          /* sealed streams: plaintext bytes per chunk */
} xf_tensor_desc;

/* Storage for one outgoing message: env is the Envelope to encode, and its
 * body points into body (so the struct must not be moved while in use) and,
 * for a chunk, into the sender's buffer. Valid until the next call on the
 * sender that filled it. */
typedef struct xf_tensor_msg {
  Xfed__Envelope env;
  union {
    Xfed__TensorBegin begin;
    Xfed__TensorChunk chunk;
    Xfed__TensorEnd end;
  } body;
} xf_tensor_msg;

/* ---- sender ------------------------------------------------------------- */

typedef struct xf_tensor_sender xf_tensor_sender;

/* Creates a sender for the len bytes at data, which it borrows: they must stay
 * unchanged until the sender is freed. It hashes them once here. chunk_bytes
 * is the chunk size (0 means XF_TENSOR_CHUNK_MAX). XF_EINVAL for a zero stream
 * id, an unknown kind or a chunk size above XF_TENSOR_CHUNK_MAX; XF_ENOMEM.
 * The caller owns *out (xf_tensor_sender_free). */
xf_err xf_tensor_sender_new(const xf_tensor_desc *desc, const void *data, size_t len,
                            size_t chunk_bytes, xf_tensor_sender **out,
                            xf_errctx *ctx) XF_WARN_UNUSED;

/* The same for bytes whose BLAKE2b-256 the caller already holds (a model
 * sent to many sites is hashed once, not once per site). digest must be
 * that of data[0..len): a wrong one makes every receiver refuse the stream
 * at its end with XF_EINTEGRITY. */
xf_err xf_tensor_sender_new_hashed(const xf_tensor_desc *desc, const void *data, size_t len,
                                   size_t chunk_bytes, const xf_digest *digest,
                                   xf_tensor_sender **out, xf_errctx *ctx) XF_WARN_UNUSED;
void xf_tensor_sender_free(xf_tensor_sender *s);

/* Fills *msg with the stream's next message: TensorBegin, then one
 * TensorChunk per chunk from the current offset, then TensorEnd. XF_ENOENT
 * once TensorEnd has been produced (nothing left to send). */
xf_err xf_tensor_sender_next(xf_tensor_sender *s, xf_tensor_msg *msg) XF_WARN_UNUSED;

/* After a reconnect: the next message is TensorBegin again. The receiver
 * answers it with TensorAck, which goes to xf_tensor_sender_resume. */
void xf_tensor_sender_rewind(xf_tensor_sender *s);

/* Takes a TensorAck's next_offset: the chunks that follow start there (a
 * stream already finished and acknowledged in full stays finished). XF_ERANGE
 * when the offset is beyond the tensor or not on a chunk boundary; the sender
 * is then unchanged. */
xf_err xf_tensor_sender_resume(xf_tensor_sender *s, uint64_t next_offset,
                               xf_errctx *ctx) XF_WARN_UNUSED;

/* The offset of the next chunk to send, and the highest offset the receiver
 * acknowledged (xf_tensor_sender_resume). The stream is delivered when
 * acked equals the tensor's length after TensorEnd went out. */
uint64_t xf_tensor_sender_offset(const xf_tensor_sender *s);
uint64_t xf_tensor_sender_acked(const xf_tensor_sender *s);

/* ---- receiver ----------------------------------------------------------- */

/* Takes the len bytes of the tensor starting at offset. Chunks arrive in
 * order, each exactly once, so a sink can fold them into an aggregate without
 * holding the tensor. data is valid only during the call. A sink error is
 * returned by xf_tensor_receiver_chunk with the receiver unchanged, so the
 * sink must take a chunk whole or not at all. */
typedef xf_err (*xf_tensor_sink)(void *user, uint64_t offset, const uint8_t *data,
                                 size_t len, xf_errctx *ctx);

/* What the stream's TensorBegin announced. */
typedef struct xf_tensor_info {
  uint64_t stream_id;
  Xfed__TensorBegin__Kind kind;
  Xfed__TensorBegin__Dtype dtype;
  uint64_t element_count;
  uint64_t total_bytes;
  uint32_t chunk_bytes;
  xf_digest digest;
  char *job_id; /* owned by the receiver */
  uint32_t round;
  uint32_t attempt;
  uint64_t weight;
  uint32_t contributors;
  bool sealed;               /* TensorBegin named a sealing key */
  uint8_t sealed_by[32];
  uint32_t sealed_chunk;
} xf_tensor_info;

typedef struct xf_tensor_receiver xf_tensor_receiver;

/* Creates a receiver for one stream that accepts at most max_total bytes and
 * passes them to sink(user, ...). The receiver outlives connections: keep it
 * across a reconnect to resume. The caller owns *out
 * (xf_tensor_receiver_free). XF_EINVAL without a sink; XF_ENOMEM. */
xf_err xf_tensor_receiver_new(uint64_t max_total, xf_tensor_sink sink, void *user,
                              xf_tensor_receiver **out, xf_errctx *ctx) XF_WARN_UNUSED;

void xf_tensor_receiver_free(xf_tensor_receiver *r);

/* Takes TensorBegin. The first one fixes the stream; a later one (after a
 * reconnect) must announce the same tensor and changes nothing. Answer it
 * with xf_tensor_receiver_ack. XF_EFORMAT for a zero stream id, an unknown
 * kind, a chunk size outside 1..XF_TENSOR_CHUNK_MAX, a digest that is not 32
 * bytes, or a repeat that differs; XF_ERANGE when total_bytes exceeds
 * max_total; XF_ENOMEM. */
xf_err xf_tensor_receiver_begin(xf_tensor_receiver *r, const Xfed__TensorBegin *m,
                                xf_errctx *ctx) XF_WARN_UNUSED;

/* Takes TensorChunk. The chunk at the expected offset goes to the sink and
 * into the digest; a chunk wholly before it (a resend) is ignored. XF_EFORMAT,
 * with the receiver unchanged, for a chunk before TensorBegin, of another
 * stream, beyond the expected offset (a gap: chunks lost or reordered), off a
 * chunk boundary, with a wrong index or a wrong length; the sink's error
 * otherwise. */
xf_err xf_tensor_receiver_chunk(xf_tensor_receiver *r, const Xfed__TensorChunk *m,
                                xf_errctx *ctx) XF_WARN_UNUSED;

/* Takes TensorEnd and verifies the whole: XF_OK when every byte arrived and
 * the BLAKE2b digest matches (a repeated TensorEnd on a verified stream is
 * XF_OK too). XF_ETRUNCATED, with the receiver unchanged, when bytes are
 * missing (answer with TensorAck so the sender resumes). XF_EINTEGRITY when
 * the digest differs: the receiver is then spent (every later call fails with
 * XF_EINTEGRITY) and what the sink took must be discarded. XF_EFORMAT before
 * TensorBegin or for another stream. */
xf_err xf_tensor_receiver_end(xf_tensor_receiver *r, const Xfed__TensorEnd *m,
                              xf_errctx *ctx) XF_WARN_UNUSED;

/* Routes an Envelope carrying TensorBegin, TensorChunk or TensorEnd to the
 * function above; XF_EINVAL for any other body. */
xf_err xf_tensor_receiver_handle(xf_tensor_receiver *r, const Xfed__Envelope *env,
                                 xf_errctx *ctx) XF_WARN_UNUSED;

/* The resume point: every byte before it has reached the sink. */
uint64_t xf_tensor_receiver_next_offset(const xf_tensor_receiver *r);

/* Fills *ack (initializing it) with the stream id and the resume point. */
void xf_tensor_receiver_ack(const xf_tensor_receiver *r, Xfed__TensorAck *ack);

/* True once TensorEnd verified the stream. */
bool xf_tensor_receiver_complete(const xf_tensor_receiver *r);

/* The announced stream, or NULL before TensorBegin. Owned by the receiver. */
const xf_tensor_info *xf_tensor_receiver_info(const xf_tensor_receiver *r);

#endif
