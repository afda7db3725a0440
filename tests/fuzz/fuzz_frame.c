/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the frame decoder and the tensor receiver: any byte stream,
 * fed whole or one byte at a time, yields the same frames and the same
 * outcome; every error carries a message; the decoder never holds more than
 * its maximum plus the prefix; each decoded Envelope re-encodes and decodes to
 * the same bytes. Tensor messages among the frames go to a receiver. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "crypto/digest.h"
#include "net/frame.h"
#include "net/tensor.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static xf_err discard(void *user, uint64_t offset, const uint8_t *bytes, size_t len,
                      xf_errctx *ctx) {
  (void)ctx;
  uint64_t *seen = user;
  if (offset != *seen) abort(); /* chunks reach the sink in order, once */
  if (len == 0 || !bytes) abort();
  *seen += len;
  return XF_OK;
}

/* Re-encodes env, decodes the frame again and checks both pack alike; feeds
 * the bytes of env's packing into h. */
static void check_round_trip(const Xfed__Envelope *env, xf_digest_ctx *h) {
  uint8_t *frame = NULL, *again = NULL;
  size_t len, len2, used;
  if (xf_frame_encode(env, XF_FRAME_MAX_LIMIT, &frame, &len, NULL) != XF_OK) abort();
  xf_digest_update(h, frame, len);
  xf_frame_decoder *d;
  if (xf_frame_decoder_new(XF_FRAME_MAX_LIMIT, &d, NULL) != XF_OK) abort();
  Xfed__Envelope *back;
  if (xf_frame_decoder_feed(d, frame, len, &used, &back, NULL) != XF_OK) abort();
  if (!back || used != len) abort();
  if (xf_frame_encode(back, XF_FRAME_MAX_LIMIT, &again, &len2, NULL) != XF_OK) abort();
  if (len2 != len || memcmp(frame, again, len) != 0) abort();
  xf_envelope_free(back);
  xf_frame_decoder_free(d);
  xf_free(frame);
  xf_free(again);
}

/* Decodes data in slices of `slice` bytes (0: all at once) with the given
 * maximum; returns the final code and writes a digest of what came out. */
static xf_err run(const uint8_t *data, size_t size, size_t slice, size_t max, xf_digest *out) {
  xf_digest_ctx h;
  xf_digest_init(&h);
  xf_frame_decoder *d;
  if (xf_frame_decoder_new(max, &d, NULL) != XF_OK) abort();
  xf_tensor_receiver *r;
  uint64_t seen = 0;
  if (xf_tensor_receiver_new(1u << 22, discard, &seen, &r, NULL) != XF_OK) abort();
  size_t limit = max ? max : XF_FRAME_MAX_DEFAULT;
  xf_err rc = XF_OK;
  size_t at = 0;
  while (rc == XF_OK && at < size) {
    size_t n = slice && slice < size - at ? slice : size - at;
    size_t used;
    Xfed__Envelope *env;
    xf_errctx err;
    xf_errctx_clear(&err);
    rc = xf_frame_decoder_feed(d, data + at, n, &used, &env, &err);
    if (used > n) abort();
    if (xf_frame_decoder_buffered(d) > limit + XF_FRAME_HEADER) abort();
    if (rc != XF_OK && (err.code != rc || err.msg[0] == '\0' || env)) abort();
    if (rc == XF_OK && used == 0) abort(); /* progress on every call */
    at += used;
    if (!env) continue;
    check_round_trip(env, &h);
    xf_errctx_clear(&err);
    xf_err trc = xf_tensor_receiver_handle(r, env, &err);
    if (trc != XF_OK && (err.code != trc || err.msg[0] == '\0')) abort();
    if (seen != xf_tensor_receiver_next_offset(r)) abort();
    xf_envelope_free(env);
  }
  xf_digest_update(&h, &rc, sizeof(rc));
  xf_digest_final(&h, out);
  xf_tensor_receiver_free(r);
  xf_frame_decoder_free(d);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (xf_crypto_init() != XF_OK) abort();
  xf_digest whole, bytewise, small;
  xf_err a = run(data, size, 0, 0, &whole);
  xf_err b = run(data, size, 1, 0, &bytewise);
  if (a != b || memcmp(whole.bytes, bytewise.bytes, XF_DIGEST_BYTES) != 0) abort();
  /* A small maximum: frames above it end the stream with XF_ERANGE. */
  xf_err c = run(data, size, 7, 64, &small);
  if (c != XF_OK && c != XF_ERANGE && c != XF_EFORMAT) abort();
  return 0;
}
