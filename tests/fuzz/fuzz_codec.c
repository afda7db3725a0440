/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target for the update decoder: any bytes, decoded for the n their
 * header announces and for a few fixed n, either decode to finite values
 * within finite bounds, with top-k leaving zeros where nothing was sent, or
 * fail with XF_EFORMAT and a message naming the offset; the decoder never
 * reads outside the input or writes outside the n values. A decoded update
 * encodes again (as float32, top-k off) and decodes to the same values. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "codec/codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The largest n tried: enough for several chunks, small enough to be fast. */
#define FUZZ_N_MAX (1u << 16)

static void check(const uint8_t *data, size_t size, size_t n) {
  /* Exactly n floats each, so a write past them is caught by ASan. */
  float *out = malloc(n * sizeof(float)), *bound = malloc(n * sizeof(float));
  if (!out || !bound) abort();
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_codec_decode_bound(data, size, n, out, bound, &err);
  if (rc != XF_OK) {
    if (rc != XF_EFORMAT || err.code != rc || !strstr(err.msg, "offset ")) abort();
  } else {
    for (size_t i = 0; i < n; i++)
      if (!isfinite(out[i]) || !isfinite(bound[i]) || bound[i] < 0) abort();
    xf_codec_uplink plain = {0, 0};
    uint8_t *enc;
    size_t len;
    if (xf_codec_encode(&plain, out, n, NULL, 0, &enc, &len, NULL) != XF_OK) abort();
    float *again = malloc(n * sizeof(float));
    if (!again || xf_codec_decode(enc, len, n, again, NULL) != XF_OK) abort();
    if (memcmp(out, again, n * sizeof(float)) != 0) abort();
    free(again);
    xf_free(enc);
  }
  free(out);
  free(bound);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const size_t fixed[] = {1, 2, 7, 4096, 4097};
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++) check(data, size, fixed[i]);
  if (size >= 12) {
    size_t n = (size_t)data[8] | (size_t)data[9] << 8 | (size_t)data[10] << 16 |
               (size_t)data[11] << 24;
    if (n >= 1 && n <= FUZZ_N_MAX) check(data, size, n);
  }
  return 0;
}
