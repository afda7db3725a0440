/* SPDX-License-Identifier: Apache-2.0 */
/* BLAKE2b digests over libsodium. */
#include "crypto/digest.h"

#include <sodium.h>
#include <string.h>

_Static_assert(sizeof(crypto_generichash_state) <= sizeof(((xf_digest_ctx *)0)->state),
               "xf_digest_ctx too small for crypto_generichash_state");

xf_err xf_crypto_init(void) {
  /* sodium_init is itself thread-safe and idempotent (returns 1 when done). */
  return sodium_init() < 0 ? XF_EINTERNAL : XF_OK;
}

void xf_digest_init(xf_digest_ctx *ctx) {
  crypto_generichash_init((crypto_generichash_state *)ctx->state, NULL, 0, XF_DIGEST_BYTES);
}

void xf_digest_update(xf_digest_ctx *ctx, const void *data, size_t n) {
  crypto_generichash_update((crypto_generichash_state *)ctx->state, data, n);
}

void xf_digest_final(xf_digest_ctx *ctx, xf_digest *out) {
  crypto_generichash_final((crypto_generichash_state *)ctx->state, out->bytes, XF_DIGEST_BYTES);
  sodium_memzero(ctx, sizeof(*ctx));
}

void xf_digest_buf(const void *data, size_t n, xf_digest *out) {
  crypto_generichash(out->bytes, XF_DIGEST_BYTES, data, n, NULL, 0);
}

void xf_digest_hex(const xf_digest *d, char hex[XF_DIGEST_HEX]) {
  sodium_bin2hex(hex, XF_DIGEST_HEX, d->bytes, XF_DIGEST_BYTES);
}

xf_err xf_digest_parse(const char *hex, xf_digest *out) {
  size_t bin_len = 0;
  const char *end = NULL;
  if (strlen(hex) != 2 * XF_DIGEST_BYTES) return XF_EFORMAT;
  if (sodium_hex2bin(out->bytes, XF_DIGEST_BYTES, hex, 2 * XF_DIGEST_BYTES, NULL, &bin_len,
                     &end) != 0 ||
      bin_len != XF_DIGEST_BYTES || *end != '\0')
    return XF_EFORMAT;
  return XF_OK;
}
