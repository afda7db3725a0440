/* SPDX-License-Identifier: Apache-2.0 */
/* Messages larger than one frame: an Envelope whose encoding would exceed
 * the receiver's frame maximum travels as a DOCUMENT tensor stream of its
 * packed bytes, cut into chunks that each fit a frame, acknowledged,
 * resumable and checked by length and BLAKE2b digest like any tensor
 * stream; the receiver unpacks it at TensorEnd and takes it as if it had
 * come in one frame (docs/protocol.md, "Messages larger than a frame"). No
 * sockets: the CLI's client and the coordinator drive these with their own
 * connections. */
#ifndef XF_NET_DOCUMENT_H
#define XF_NET_DOCUMENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "net/tensor.h"
#include "net/xfed.pb-c.h"

/* The largest message either side assembles from a DOCUMENT stream. It
 * bounds what a peer can make the receiver hold (the packed bytes, then the
 * unpacked message); a 60,000-site policy document is about 11 MiB, the
 * answer to a policy check against it about 10 MiB. Row sets that can grow
 * without end (audit trail, metrics, jobs) page by cursor well below it. */
#define XF_DOCUMENT_MAX (64u << 20)

/* Whether env's encoding fits one frame of at most max_frame payload
 * bytes, as xf_conn_send would let it out. */
bool xf_document_fits(const Xfed__Envelope *env, size_t max_frame);

/* The chunk size of a DOCUMENT stream whose frames must stay within
 * max_frame: the most that leaves room for a chunk's fields, and never
 * above XF_TENSOR_CHUNK_MAX. */
size_t xf_document_chunk(size_t max_frame);

/* Packs env into a new buffer. The caller frees *bytes with xf_free.
 * XF_ERANGE when the encoding exceeds XF_DOCUMENT_MAX (naming the body and
 * its size); XF_ENOMEM. */
xf_err xf_document_pack(const Xfed__Envelope *env, uint8_t **bytes, size_t *len,
                        xf_errctx *err) XF_WARN_UNUSED;

/* The description of a DOCUMENT stream of len packed bytes under
 * stream_id (nonzero), for xf_tensor_sender_new. */
xf_tensor_desc xf_document_desc(uint64_t stream_id, size_t len);

/* ---- receiving ------------------------------------------------------------------------- */

typedef struct xf_document_rx xf_document_rx;

/* What one frame of a DOCUMENT stream asks of the receiver's owner. */
typedef struct xf_document_step {
  /* Answer with this TensorAck now: after TensorBegin (where to start),
   * after a TensorEnd with bytes missing (where to resume), after the
   * verified TensorEnd (everything). */
  bool ack;
  Xfed__TensorAck tensor_ack;
  /* The message the stream carried, once verified and unpacked: the caller
   * owns it (xf_envelope_free) and takes it as a frame. NULL otherwise. */
  Xfed__Envelope *message;
} xf_document_step;

/* A receiver for DOCUMENT streams of at most max_total bytes (0:
 * XF_DOCUMENT_MAX). It holds one stream at a time: a TensorBegin of
 * another stream id starts over with that one. The caller owns *out
 * (xf_document_rx_free). XF_ENOMEM. */
xf_err xf_document_rx_new(uint64_t max_total, xf_document_rx **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_document_rx_free(xf_document_rx *d);

/* Takes one frame of a DOCUMENT stream (TensorBegin, TensorChunk or
 * TensorEnd) and says in *step what to answer and what arrived. Errors:
 * XF_EFORMAT for a stream that is not a DOCUMENT of U8, a chunk out of
 * order, a frame of no open stream, or packed bytes that are not an
 * Envelope of a request or answer (a stream inside a stream, a hello);
 * XF_ERANGE above max_total; XF_EINTEGRITY for a digest that differs;
 * XF_ENOMEM. After an error the stream is dropped: the sender starts again
 * with a new TensorBegin. */
xf_err xf_document_rx_take(xf_document_rx *d, const Xfed__Envelope *env, xf_document_step *step,
                           xf_errctx *err) XF_WARN_UNUSED;

/* True for the bodies a DOCUMENT stream is made of. */
bool xf_document_frame(const Xfed__Envelope *env);

#endif
