/* SPDX-License-Identifier: Apache-2.0 */
/* The protocol versions this build speaks and the negotiation both sides of
 * a connection run on the peer's Hello (net/xfed.proto, docs/protocol.md). */
#ifndef XF_NET_HELLO_H
#define XF_NET_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "net/xfed.pb-c.h"

/* The range of protocol versions this build speaks. A change an old peer
 * would misread raises XF_PROTOCOL_VERSION; dropping support for an old
 * version raises XF_PROTOCOL_MIN_VERSION. */
#define XF_PROTOCOL_VERSION 1u
#define XF_PROTOCOL_MIN_VERSION 1u

/* Picks the session's version: the highest one inside both [our_min, our_max]
 * and the peer Hello's [min_protocol_version, protocol_version] (a
 * min_protocol_version of 0 means the peer speaks protocol_version only),
 * which is the lower of the two maxima when the ranges overlap. Writes it to
 * *version. XF_EUNSUPPORTED when the ranges do not overlap (answer with
 * Refusal NO_COMMON_VERSION and close); XF_EFORMAT when the peer's range is
 * empty or names version 0; XF_EINVAL when ours is. */
xf_err xf_hello_negotiate(uint32_t our_min, uint32_t our_max, const Xfed__Hello *peer,
                          uint32_t *version, xf_errctx *ctx) XF_WARN_UNUSED;

/* The largest frame payload the peer of this Hello accepts: its max_frame,
 * or XF_FRAME_MAX_DEFAULT when it sent 0 (not given), and at most
 * XF_FRAME_MAX_LIMIT (no side sends a larger frame, so a larger maximum is
 * not an error). Senders encode with it as max_frame. */
size_t xf_hello_peer_max_frame(const Xfed__Hello *peer);

#endif
