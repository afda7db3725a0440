/* SPDX-License-Identifier: Apache-2.0 */
/* Version negotiation on a peer's Hello. */
#include "net/hello.h"

#include "net/frame.h"

xf_err xf_hello_negotiate(uint32_t our_min, uint32_t our_max, const Xfed__Hello *peer,
                          uint32_t *version, xf_errctx *ctx) {
  *version = 0;
  XF_ENSURE(our_min >= 1 && our_min <= our_max, ctx, XF_EINVAL,
            "our protocol range %u..%u is empty", (unsigned)our_min, (unsigned)our_max);
  uint32_t peer_max = peer->protocol_version;
  uint32_t peer_min = peer->min_protocol_version ? peer->min_protocol_version : peer_max;
  XF_ENSURE(peer_min >= 1 && peer_min <= peer_max, ctx, XF_EFORMAT,
            "peer's Hello names the empty protocol range %u..%u", (unsigned)peer_min,
            (unsigned)peer_max);
  uint32_t high = our_max < peer_max ? our_max : peer_max;
  uint32_t low = our_min > peer_min ? our_min : peer_min;
  XF_ENSURE(low <= high, ctx, XF_EUNSUPPORTED,
            "no common protocol version: we speak %u..%u, the peer %u..%u; upgrade the "
            "older side", (unsigned)our_min, (unsigned)our_max, (unsigned)peer_min,
            (unsigned)peer_max);
  *version = high;
  return XF_OK;
}

size_t xf_hello_peer_max_frame(const Xfed__Hello *peer) {
  if (!peer->max_frame) return XF_FRAME_MAX_DEFAULT;
  /* A maximum above the largest frame any side sends is that largest frame. */
  return peer->max_frame < XF_FRAME_MAX_LIMIT ? peer->max_frame : XF_FRAME_MAX_LIMIT;
}
