/* SPDX-License-Identifier: Apache-2.0 */
/* What the message fuzz targets and their seed generator share
 * (tests/fuzz/README.md lists which target takes which message).
 *
 * An input is a sequence of records, each
 *
 *   [type: 1 byte][length: 2 bytes, little-endian][body: length bytes]
 *
 * The low 4 bits of type pick one of the target's message kinds (modulo
 * their count), the high 4 bits a peer where the target has several
 * (modulo their count); the body is that message's protobuf encoding,
 * decoded as every receiver decodes a frame: inside an Envelope, by
 * xf_envelope_unpack (net/frame.h), so a body the wire would refuse is
 * refused here too. A record cut short ends the input. A target that needs
 * a setting of its own reads one byte before the records (its comment says
 * which).
 *
 * Targets draw keys while they run (secure aggregation, sealing): libsodium
 * gets a deterministic randombytes here, reset at the start of every
 * input, so that one input always runs the same way and the generator can
 * write seeds whose signatures and shares hold for the keys a target
 * draws. Nothing outside tests/fuzz/ uses it. */
#ifndef XF_TESTS_FUZZ_MSGS_H
#define XF_TESTS_FUZZ_MSGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/alloc.h"
#include "crypto/digest.h"
#include "net/frame.h"
#include "net/xfed.pb-c.h"

/* ---- deterministic randomness ------------------------------------------------------------- */

static uint64_t fz_rng_state;

static inline uint64_t fz_rng_next(void) {
  /* splitmix64: enough for repeatable keys in a test; never for secrets. */
  uint64_t z = (fz_rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline const char *fz_rng_name(void) { return "xfed-fuzz"; }
static inline uint32_t fz_rng_random(void) { return (uint32_t)fz_rng_next(); }
static inline void fz_rng_buf(void *const buf, const size_t size) {
  uint8_t *p = buf;
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = fz_rng_next();
    memcpy(p + i, &v, size - i < 8 ? size - i : 8);
  }
}

static randombytes_implementation fz_rng_impl = {
    .implementation_name = fz_rng_name, .random = fz_rng_random, .buf = fz_rng_buf};

/* Installs the deterministic randombytes (once) and initializes crypto;
 * then restarts its sequence at `seed`. Call first in every input. */
static inline void fz_begin(uint64_t seed) {
  static bool installed;
  if (!installed) {
    randombytes_set_implementation(&fz_rng_impl);
    installed = true;
  }
  if (xf_crypto_init() != XF_OK) abort();
  fz_rng_state = seed;
}

/* ---- records --------------------------------------------------------------------------------- */

typedef struct fz_input {
  const uint8_t *at;
  size_t left;
} fz_input;

typedef struct fz_record {
  unsigned kind; /* index into the target's kinds */
  unsigned peer; /* the high 4 bits of type, 0..15 */
  const uint8_t *body;
  size_t len;
} fz_record;

/* The next record, its kind taken modulo n_kinds; false at the end. */
static inline bool fz_next(fz_input *in, unsigned n_kinds, fz_record *out) {
  if (in->left < 3) return false;
  size_t len = (size_t)in->at[1] | (size_t)in->at[2] << 8;
  if (in->left - 3 < len) return false;
  out->kind = (in->at[0] & 15u) % n_kinds;
  out->peer = in->at[0] >> 4;
  out->body = in->at + 3;
  out->len = len;
  in->at += 3 + len;
  in->left -= 3 + len;
  return true;
}

/* The Envelope whose body field number `body_case` holds the len bytes of
 * body, decoded as a frame's payload is; NULL when the wire would refuse
 * it. The caller frees it with xf_envelope_free. */
static inline Xfed__Envelope *fz_decode(unsigned body_case, const uint8_t *body, size_t len) {
  uint8_t *buf = malloc(len + 16);
  if (!buf) abort();
  size_t n = 0;
  for (uint64_t v = (uint64_t)body_case << 3 | 2; ; v >>= 7) { /* tag, wire type 2 */
    buf[n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
    if (v <= 0x7f) break;
  }
  for (uint64_t v = len; ; v >>= 7) {
    buf[n++] = (uint8_t)(v & 0x7f) | (v > 0x7f ? 0x80 : 0);
    if (v <= 0x7f) break;
  }
  if (len) memcpy(buf + n, body, len);
  Xfed__Envelope *env = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_envelope_unpack(buf, n + len, &env, &err);
  free(buf);
  if (rc != XF_OK) {
    if (rc != XF_EFORMAT || !err.msg[0]) abort(); /* malformed, and said so */
    return NULL;
  }
  if (env->body_case != (Xfed__Envelope__BodyCase)body_case) abort();
  return env;
}

/* ---- writing seeds ----------------------------------------------------------------------------- */

/* Appends one record of kind `kind` for peer `peer` holding the len bytes
 * of body to f. */
static inline void fz_write_raw(FILE *f, unsigned kind, unsigned peer, const void *body,
                                size_t len) {
  if (kind > 15 || peer > 15 || len > 0xffff) abort();
  uint8_t head[3] = {(uint8_t)(peer << 4 | kind), (uint8_t)(len & 0xff), (uint8_t)(len >> 8)};
  if (fwrite(head, 1, 3, f) != 3 || (len && fwrite(body, 1, len, f) != len)) abort();
}

/* Appends one record holding message m's encoding. */
static inline void fz_write(FILE *f, unsigned kind, unsigned peer, const ProtobufCMessage *m) {
  size_t len = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(len ? len : 1);
  if (!buf) abort();
  protobuf_c_message_pack(m, buf);
  fz_write_raw(f, kind, peer, buf, len);
  free(buf);
}

#endif
