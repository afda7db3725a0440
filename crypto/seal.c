/* SPDX-License-Identifier: Apache-2.0 */
/* Sealed update streams: ephemeral-static X25519, a stream key bound to both
 * public keys and the context, and XChaCha20-Poly1305 per chunk with a nonce
 * and associated data derived from the chunk's place in the stream. */
#include "crypto/seal.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"

#define KEY_BYTES 32
#define NONCE_BYTES crypto_aead_xchacha20poly1305_ietf_NPUBBYTES
#define AD_BYTES (KEY_BYTES + 16)

_Static_assert(XF_SEAL_ABYTES == crypto_aead_xchacha20poly1305_ietf_ABYTES, "Poly1305 tag");
_Static_assert(XF_SEAL_PUBLICKEYBYTES == crypto_scalarmult_BYTES, "X25519 sizes");
_Static_assert(NONCE_BYTES == 24, "XChaCha20 nonce");

/* The stream key and the hash of the context; sodium_malloc memory. Both
 * ends hold the same. */
typedef struct stream_keys {
  uint8_t key[KEY_BYTES];
  uint8_t context[KEY_BYTES];
} stream_keys;

struct xf_seal_sender {
  stream_keys k;
};
struct xf_seal_receiver {
  stream_keys k;
};

xf_err xf_seal_keypair(uint8_t pk[XF_SEAL_PUBLICKEYBYTES], uint8_t sk[XF_SEAL_SECRETKEYBYTES]) {
  if (!pk || !sk) return XF_EINVAL;
  if (sodium_init() < 0) return XF_EINTERNAL;
  randombytes_buf(sk, XF_SEAL_SECRETKEYBYTES);
  crypto_scalarmult_base(pk, sk);
  return XF_OK;
}

/* key = BLAKE2b-256 keyed with X25519(sk, peer_pk), over a label, the
 * ephemeral and the recipient public keys and the context's hash. */
static xf_err derive(stream_keys *k, const uint8_t *sk, const uint8_t *peer_pk, const uint8_t *epk,
                     const uint8_t *rpk, const uint8_t *context, size_t ctx_len) {
  uint8_t dh[KEY_BYTES];
  if (crypto_scalarmult(dh, sk, peer_pk) != 0) {
    sodium_memzero(dh, sizeof(dh));
    return XF_EINTEGRITY;
  }
  crypto_generichash(k->context, KEY_BYTES, context, ctx_len, (const uint8_t *)"xf-seal context v1",
                     18);
  crypto_generichash_state h;
  crypto_generichash_init(&h, dh, sizeof(dh), KEY_BYTES);
  crypto_generichash_update(&h, (const uint8_t *)"xf-seal v1", 10);
  crypto_generichash_update(&h, epk, KEY_BYTES);
  crypto_generichash_update(&h, rpk, KEY_BYTES);
  crypto_generichash_update(&h, k->context, KEY_BYTES);
  crypto_generichash_final(&h, k->key, KEY_BYTES);
  sodium_memzero(dh, sizeof(dh));
  sodium_memzero(&h, sizeof(h));
  return XF_OK;
}

static void put_u64(uint8_t *q, uint64_t v) {
  for (size_t b = 0; b < 8; b++) q[b] = (uint8_t)(v >> (56 - 8 * b));
}

/* nonce = "xf-seal1" || offset || len and ad = context hash || offset ||
 * len (big-endian): a chunk's nonce is unique to its place in the stream
 * and the stream key is unique to the ephemeral key. */
static void chunk_params(const stream_keys *k, uint64_t offset, uint64_t len,
                         uint8_t nonce[NONCE_BYTES], uint8_t ad[AD_BYTES]) {
  memcpy(nonce, "xf-seal1", 8);
  put_u64(nonce + 8, offset);
  put_u64(nonce + 16, len);
  memcpy(ad, k->context, KEY_BYTES);
  put_u64(ad + KEY_BYTES, offset);
  put_u64(ad + KEY_BYTES + 8, len);
}

static xf_err check_range(uint64_t offset, size_t len) {
  if (len > XF_SEAL_MAX_CHUNK || offset > UINT64_MAX - len) return XF_ERANGE;
  return XF_OK;
}

xf_err xf_seal_sender_new(const uint8_t recipient_pk[XF_SEAL_PUBLICKEYBYTES],
                          const uint8_t *context, size_t ctx_len, xf_seal_sender **out,
                          uint8_t ephemeral_pk[XF_SEAL_PUBLICKEYBYTES]) {
  if (!out) return XF_EINVAL;
  *out = NULL;
  if (!recipient_pk || !ephemeral_pk || (ctx_len && !context)) return XF_EINVAL;
  if (sodium_init() < 0) return XF_EINTERNAL;
  xf_seal_sender *s = sodium_malloc(sizeof(*s));
  uint8_t *esk = sodium_malloc(KEY_BYTES);
  xf_err rc = XF_OK;
  if (!s || !esk) {
    rc = XF_ENOMEM;
    goto out;
  }
  randombytes_buf(esk, KEY_BYTES);
  crypto_scalarmult_base(ephemeral_pk, esk);
  rc = derive(&s->k, esk, recipient_pk, ephemeral_pk, recipient_pk, context, ctx_len);
out:
  if (esk) sodium_free(esk);
  if (rc != XF_OK && s) {
    sodium_free(s);
    s = NULL;
  }
  *out = s;
  return rc;
}

void xf_seal_sender_free(xf_seal_sender *s) {
  if (s) sodium_free(s);
}

xf_err xf_seal_chunk(const xf_seal_sender *s, uint64_t offset, const uint8_t *in, size_t len,
                     uint8_t *out) {
  if (!s || !out || (len && !in)) return XF_EINVAL;
  XF_GUARD(check_range(offset, len));
  uint8_t nonce[NONCE_BYTES], ad[AD_BYTES];
  chunk_params(&s->k, offset, len, nonce, ad);
  crypto_aead_xchacha20poly1305_ietf_encrypt(out, NULL, in, len, ad, sizeof(ad), NULL, nonce,
                                             s->k.key);
  return XF_OK;
}

xf_err xf_seal_receiver_new(const uint8_t recipient_sk[XF_SEAL_SECRETKEYBYTES],
                            const uint8_t ephemeral_pk[XF_SEAL_PUBLICKEYBYTES],
                            const uint8_t *context, size_t ctx_len, xf_seal_receiver **out) {
  if (!out) return XF_EINVAL;
  *out = NULL;
  if (!recipient_sk || !ephemeral_pk || (ctx_len && !context)) return XF_EINVAL;
  if (sodium_init() < 0) return XF_EINTERNAL;
  xf_seal_receiver *r = sodium_malloc(sizeof(*r));
  if (!r) return XF_ENOMEM;
  uint8_t rpk[KEY_BYTES];
  crypto_scalarmult_base(rpk, recipient_sk);
  xf_err rc = derive(&r->k, recipient_sk, ephemeral_pk, ephemeral_pk, rpk, context, ctx_len);
  if (rc != XF_OK) {
    sodium_free(r);
    return rc;
  }
  *out = r;
  return XF_OK;
}

void xf_seal_receiver_free(xf_seal_receiver *r) {
  if (r) sodium_free(r);
}

xf_err xf_seal_open_chunk(const xf_seal_receiver *r, uint64_t offset, const uint8_t *sealed,
                          size_t sealed_len, uint8_t *out) {
  if (!r || !sealed) return XF_EINVAL;
  if (sealed_len < XF_SEAL_ABYTES) return XF_ETRUNCATED;
  size_t len = sealed_len - XF_SEAL_ABYTES;
  if (len && !out) return XF_EINVAL;
  XF_GUARD(check_range(offset, len));
  uint8_t nonce[NONCE_BYTES], ad[AD_BYTES];
  chunk_params(&r->k, offset, len, nonce, ad);
  if (crypto_aead_xchacha20poly1305_ietf_decrypt(out, NULL, NULL, sealed, sealed_len, ad,
                                                 sizeof(ad), nonce, r->k.key) != 0) {
    if (len) sodium_memzero(out, len);
    return XF_EINTEGRITY;
  }
  return XF_OK;
}

size_t xf_seal_stream_context(char *buf, size_t cap, const char *job, uint32_t round,
                              uint32_t attempt, const char *sender) {
  int n = snprintf(buf, cap, "xfed-update|%s|%u|%u|%s", job ? job : "", (unsigned)round,
                   (unsigned)attempt, sender ? sender : "");
  if (n < 0) return 0;
  return (size_t)n < cap ? (size_t)n : cap - 1;
}

xf_err xf_seal_stream(const xf_seal_sender *s, const uint8_t *in, size_t len, size_t chunk,
                      uint8_t **out, size_t *out_len) {
  *out = NULL;
  *out_len = 0;
  if (chunk == 0 || chunk > XF_SEAL_MAX_CHUNK) return XF_EINVAL;
  size_t chunks = len == 0 ? 0 : (len + chunk - 1) / chunk;
  size_t total = len + chunks * XF_SEAL_ABYTES;
  uint8_t *buf = xf_malloc(total ? total : 1);
  if (!buf) return XF_ENOMEM;
  for (size_t c = 0; c < chunks; c++) {
    size_t off = c * chunk, n = len - off < chunk ? len - off : chunk;
    xf_err rc = xf_seal_chunk(s, off, in + off, n, buf + off + c * XF_SEAL_ABYTES);
    if (rc != XF_OK) {
      xf_free(buf);
      return rc;
    }
  }
  *out = buf;
  *out_len = total;
  return XF_OK;
}

bool xf_seal_stream_plain_length(uint64_t sealed_len, size_t chunk, uint64_t *plain) {
  if (chunk == 0) return false;
  uint64_t full = sealed_len / (chunk + XF_SEAL_ABYTES);
  uint64_t rest = sealed_len % (chunk + XF_SEAL_ABYTES);
  if (rest != 0 && rest <= XF_SEAL_ABYTES) return false;
  *plain = full * chunk + (rest ? rest - XF_SEAL_ABYTES : 0);
  return true;
}
