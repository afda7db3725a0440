/* SPDX-License-Identifier: Apache-2.0 */
/* BLAKE2b-256 digests (libsodium's crypto_generichash) for content addressing
 * and model fingerprints, and their lowercase hex form. */
#ifndef XF_CRYPTO_DIGEST_H
#define XF_CRYPTO_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_DIGEST_BYTES 32
#define XF_DIGEST_HEX (2 * XF_DIGEST_BYTES + 1)

typedef struct xf_digest {
  uint8_t bytes[XF_DIGEST_BYTES];
} xf_digest;

/* Streaming state; opaque storage large enough for libsodium's state. */
typedef struct xf_digest_ctx {
  _Alignas(64) uint8_t state[384];
} xf_digest_ctx;

/* Initializes libsodium once per process; safe to call from any thread.
 * XF_EINTERNAL if libsodium cannot start (no entropy source). */
xf_err xf_crypto_init(void) XF_WARN_UNUSED;

void xf_digest_init(xf_digest_ctx *ctx);
void xf_digest_update(xf_digest_ctx *ctx, const void *data, size_t n);
void xf_digest_final(xf_digest_ctx *ctx, xf_digest *out);
void xf_digest_buf(const void *data, size_t n, xf_digest *out);

/* hex must hold XF_DIGEST_HEX bytes. */
void xf_digest_hex(const xf_digest *d, char hex[XF_DIGEST_HEX]);
/* Parses 64 lowercase or uppercase hex digits; XF_EFORMAT otherwise. */
xf_err xf_digest_parse(const char *hex, xf_digest *out) XF_WARN_UNUSED;

#endif
