/* SPDX-License-Identifier: Apache-2.0 */
/* Sealing an update stream to the aggregator that folds it: an ephemeral
 * X25519 key agreement with the aggregator's per-round key, then each chunk
 * sealed on its own with XChaCha20-Poly1305, so relays in between read
 * nothing and chunks can be resent and opened in any order. See
 * docs/secure-aggregation.md. */
#ifndef XF_CRYPTO_SEAL_H
#define XF_CRYPTO_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_SEAL_PUBLICKEYBYTES 32
#define XF_SEAL_SECRETKEYBYTES 32
/* Bytes a sealed chunk adds to its plaintext (the Poly1305 tag). */
#define XF_SEAL_ABYTES 16
/* Largest chunk: keeps offset + len far from overflow and one chunk in
 * memory. */
#define XF_SEAL_MAX_CHUNK ((size_t)1 << 30)

/* A fresh X25519 key pair for the aggregator of one round: pk is published,
 * sk stays with the aggregator (keep it in sodium_malloc memory and wipe it
 * when the round ends). XF_EINTERNAL when libsodium cannot start. */
xf_err xf_seal_keypair(uint8_t pk[XF_SEAL_PUBLICKEYBYTES],
                       uint8_t sk[XF_SEAL_SECRETKEYBYTES]) XF_WARN_UNUSED;

typedef struct xf_seal_sender xf_seal_sender;
typedef struct xf_seal_receiver xf_seal_receiver;

/* A sender for one stream to the holder of recipient_pk. Draws an ephemeral
 * X25519 pair (its secret is wiped at once), writes the public half to
 * ephemeral_pk (send it with the stream) and keeps only the derived stream
 * key, in sodium_malloc memory. context (ctx_len bytes, may be empty)
 * names the stream: the job, round and site, in a fixed encoding both ends
 * share; every chunk is bound to it. *out is owned by the caller, released
 * with xf_seal_sender_free (wipes the key). XF_EINTEGRITY for a low-order
 * recipient key, XF_ENOMEM, XF_EINVAL. */
xf_err xf_seal_sender_new(const uint8_t recipient_pk[XF_SEAL_PUBLICKEYBYTES],
                          const uint8_t *context, size_t ctx_len, xf_seal_sender **out,
                          uint8_t ephemeral_pk[XF_SEAL_PUBLICKEYBYTES]) XF_WARN_UNUSED;
void xf_seal_sender_free(xf_seal_sender *s);

/* Seals the stream's bytes offset..offset+len-1 (in, len bytes) into out
 * (len + XF_SEAL_ABYTES bytes; no overlap with in). The nonce is derived
 * from (offset, len) and the associated data binds the context, offset and
 * len, so a chunk opens only at its own place in its own stream. The same
 * (offset, len) must always carry the same bytes: a resent chunk is then
 * sealed identically. XF_ERANGE when len > XF_SEAL_MAX_CHUNK or the range
 * overflows. */
xf_err xf_seal_chunk(const xf_seal_sender *s, uint64_t offset, const uint8_t *in, size_t len,
                     uint8_t *out) XF_WARN_UNUSED;

/* The aggregator's side of one stream: its secret key, the sender's
 * ephemeral public key and the same context. Same ownership and errors as
 * xf_seal_sender_new. */
xf_err xf_seal_receiver_new(const uint8_t recipient_sk[XF_SEAL_SECRETKEYBYTES],
                            const uint8_t ephemeral_pk[XF_SEAL_PUBLICKEYBYTES],
                            const uint8_t *context, size_t ctx_len,
                            xf_seal_receiver **out) XF_WARN_UNUSED;
void xf_seal_receiver_free(xf_seal_receiver *r);

/* Opens a sealed chunk of sealed_len bytes (plaintext + XF_SEAL_ABYTES) that
 * claims to hold the stream's bytes from offset on, into out
 * (sealed_len - XF_SEAL_ABYTES bytes; no overlap). XF_EINTEGRITY on any
 * change to the bytes, the offset, the length, the context or the keys (out
 * is then zeroed); XF_ETRUNCATED when sealed_len < XF_SEAL_ABYTES. */
xf_err xf_seal_open_chunk(const xf_seal_receiver *r, uint64_t offset, const uint8_t *sealed,
                          size_t sealed_len, uint8_t *out) XF_WARN_UNUSED;

/* ---- whole streams in chunks ---------------------------------------------- */

/* The plaintext bytes per chunk the daemons seal update streams in: a sealed
 * chunk (plus XF_SEAL_ABYTES) then fills one 1 MiB tensor chunk, and chunks
 * stay whole float32 values. */
#define XF_SEAL_STREAM_CHUNK ((size_t)(1u << 20) - XF_SEAL_ABYTES)

/* The stream context the daemons bind sealed update streams to (job, round,
 * attempt and the sender's name, as both ends know them), written to buf
 * (cap bytes, NUL-terminated); returns its length without the NUL. */
size_t xf_seal_stream_context(char *buf, size_t cap, const char *job, uint32_t round,
                              uint32_t attempt, const char *sender);

/* Seals len bytes (the whole stream) in chunks of `chunk` plaintext bytes,
 * the last one shorter: *out (xf_malloc'ed, caller-owned) receives each
 * chunk sealed at its plaintext offset, back to back, *out_len their total.
 * XF_EINVAL for chunk 0, XF_ENOMEM, or what xf_seal_chunk returns. */
xf_err xf_seal_stream(const xf_seal_sender *s, const uint8_t *in, size_t len, size_t chunk,
                      uint8_t **out, size_t *out_len) XF_WARN_UNUSED;

/* The plaintext length of a sealed stream of sealed_len bytes in chunks of
 * `chunk` plaintext bytes; false when no plaintext length gives that size. */
bool xf_seal_stream_plain_length(uint64_t sealed_len, size_t chunk, uint64_t *plain);

#endif
