/* SPDX-License-Identifier: Apache-2.0 */
/* Framing of the transport: each frame is a 4-byte big-endian payload length
 * followed by that many bytes of one serialized Envelope (net/xfed.proto);
 * an incremental decoder for bytes as a socket delivers them, and the
 * encoder. */
#ifndef XF_NET_FRAME_H
#define XF_NET_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "net/xfed.pb-c.h"

/* Bytes of the length prefix. */
#define XF_FRAME_HEADER 4u
/* The default largest payload a decoder accepts (PRODUCT.md: 4 MiB). A
 * tensor chunk of 1 MiB plus its fields fits with room to spare. */
#define XF_FRAME_MAX_DEFAULT (4u * 1024u * 1024u)
/* The largest payload any decoder may be configured for: the length prefix
 * is 32 bits, and above 256 MiB one frame would be a model, which the tensor
 * streams exist to avoid. */
#define XF_FRAME_MAX_LIMIT (256u * 1024u * 1024u)

/* An incremental frame decoder. It holds at most one partial frame, so it
 * never buffers more than XF_FRAME_HEADER + its maximum payload bytes. */
typedef struct xf_frame_decoder xf_frame_decoder;

/* Payloads of at most this many bytes are granted by a budget even beyond
 * its limit: the hello, heartbeats, acknowledgements and the CLI's requests
 * are this small, so a budget spent on large frames never stops them. What
 * they hold is a fixed cost per connection, bounded by the number of
 * connections (the payloads accepted before the hello exchange completes,
 * XF_CONN_PREAUTH_MAX_FRAME, are smaller still). */
#define XF_FRAME_BUDGET_SMALL (16u * 1024u)

/* A process's budget of the payload bytes its frame decoders buffer
 * (docs/protocol.md, "Backpressure"). A decoder reserves the whole payload
 * of a frame it must buffer before it reads any of it, and gives it back
 * when the frame completes or the decoder ends; a frame that does not fit
 * waits (xf_frame_decoder_waiting) instead of allocating. Reserving whole
 * frames, not the bytes as they come, means a frame that was granted can
 * always complete: peers that each hold part of a frame can never wait on
 * one another. The owner zeroes it, sets limit (and on_release), and keeps
 * it until every decoder that uses it is freed. Single-threaded, like the
 * loop that drives the decoders. */
typedef struct xf_frame_budget {
  size_t limit;   /* bytes granted at once; 0: no limit */
  size_t used;    /* bytes reserved now */
  size_t peak;    /* the most reserved at once */
  uint64_t waits; /* frames that had to wait for room */
  /* Called after bytes are given back (may be NULL): waiting decoders can
   * try again. It must not feed a decoder from within the call. */
  void (*on_release)(struct xf_frame_budget *b);
  void *user;     /* for on_release */
} xf_frame_budget;

/* Reserves n bytes: true when granted (n at most XF_FRAME_BUDGET_SMALL,
 * nothing reserved yet, or used + n within the limit), false otherwise.
 * Decoders call it; an owner may too, to hold room for something else. */
bool xf_frame_budget_take(xf_frame_budget *b, size_t n);
/* Gives back n bytes taken before, then calls on_release. */
void xf_frame_budget_give(xf_frame_budget *b, size_t n);

/* Creates a decoder accepting payloads of at most max_frame bytes (0 means
 * XF_FRAME_MAX_DEFAULT). XF_EINVAL when max_frame exceeds XF_FRAME_MAX_LIMIT;
 * XF_ENOMEM. The caller owns *out and frees it with xf_frame_decoder_free. */
xf_err xf_frame_decoder_new(size_t max_frame, xf_frame_decoder **out,
                            xf_errctx *ctx) XF_WARN_UNUSED;

/* Frees d and any partial frame it holds; NULL is ignored. */
void xf_frame_decoder_free(xf_frame_decoder *d);

/* Changes the largest accepted payload, for instance from a small limit
 * before the Hello exchange to the negotiated one after it (0 means
 * XF_FRAME_MAX_DEFAULT). Applies from the next length prefix; a frame whose
 * length was already accepted completes under the old limit. XF_EINVAL above
 * XF_FRAME_MAX_LIMIT. */
xf_err xf_frame_decoder_set_max(xf_frame_decoder *d, size_t max_frame,
                                xf_errctx *ctx) XF_WARN_UNUSED;

/* Bytes of the current partial frame held (length prefix included). */
size_t xf_frame_decoder_buffered(const xf_frame_decoder *d);

/* Makes d reserve the payloads it buffers from b (borrowed; NULL: none).
 * Set it before the first feed. */
void xf_frame_decoder_set_budget(xf_frame_decoder *d, xf_frame_budget *b);

/* True when d has read a length prefix whose payload it must buffer and its
 * budget has no room for it: it reads nothing more until a feed finds room
 * (any feed retries, an empty one included), or the whole payload arrives
 * in one slice and is parsed where it lies. */
bool xf_frame_decoder_waiting(const xf_frame_decoder *d);

/* Feeds the decoder the next len bytes of the stream (any slicing: one byte,
 * several frames, a frame and a half). It consumes bytes up to and including
 * the end of the first frame that completes, sets *used to the number
 * consumed, and sets *env to that frame's Envelope (owned by the caller, freed
 * with xf_envelope_free) or to NULL when data ended inside a frame. Callers
 * loop until all their bytes are used, or until xf_frame_decoder_waiting says
 * the budget has no room (then XF_OK, *env NULL, and *used stops after the
 * length prefix). An Envelope whose body this build does not know comes back
 * with body_case XFED__ENVELOPE__BODY__NOT_SET.
 *
 * Errors: XF_ERANGE as soon as a length prefix above the maximum is seen,
 * before any of its payload is buffered (the message names both numbers);
 * XF_EFORMAT when a payload is not a valid Envelope; XF_ENOMEM. After an error
 * *env is NULL and the decoder is spent: every later call returns the same
 * code, and the connection must be closed. */
xf_err xf_frame_decoder_feed(xf_frame_decoder *d, const void *data, size_t len,
                             size_t *used, Xfed__Envelope **env,
                             xf_errctx *ctx) XF_WARN_UNUSED;

/* Frees an Envelope returned by the decoder or xf_envelope_unpack; NULL is
 * ignored. Never pass it an Envelope the caller built itself. */
void xf_envelope_free(Xfed__Envelope *env);

/* Parses one payload (without the length prefix) into *env, owned by the
 * caller (xf_envelope_free). XF_EFORMAT when it is not a valid Envelope;
 * XF_ENOMEM. */
xf_err xf_envelope_unpack(const void *payload, size_t len, Xfed__Envelope **env,
                          xf_errctx *ctx) XF_WARN_UNUSED;

/* The encoders take a complete message: the body named by env->body_case is
 * set, and every string and bytes field of it points to valid memory. */

/* Size of env's frame, prefix included. */
size_t xf_frame_size(const Xfed__Envelope *env);

/* Writes env's frame into buf (cap bytes) and its size into *len. XF_ERANGE
 * when the payload exceeds max_frame (the receiver's announced maximum; 0
 * means XF_FRAME_MAX_DEFAULT) or the frame does not fit in cap. env is only
 * read, and may point into the caller's own buffers. */
xf_err xf_frame_encode_into(const Xfed__Envelope *env, size_t max_frame,
                            uint8_t *buf, size_t cap, size_t *len,
                            xf_errctx *ctx) XF_WARN_UNUSED;

/* Like xf_frame_encode_into, into a buffer it allocates: *out is owned by the
 * caller and freed with xf_free. XF_ENOMEM as well. */
xf_err xf_frame_encode(const Xfed__Envelope *env, size_t max_frame, uint8_t **out,
                       size_t *len, xf_errctx *ctx) XF_WARN_UNUSED;

#endif
