/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the NumPy readers. The first byte picks the reader:
 * even, an .npz archive (the rest of the input); odd, an .npy pair as
 * [features length: 4 bytes, little-endian][features .npy][labels .npy]. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(const xf_dataset *ds) {
  if (ds->n == 0 || ds->features == 0 || ds->features != ds->h * ds->w * ds->c ||
      ds->classes == 0 || ds->classes > 65536)
    __builtin_trap();
  for (uint32_t i = 0; i < ds->n; i++)
    if (ds->y[i] < 0 || (uint32_t)ds->y[i] >= ds->classes) __builtin_trap();
  for (size_t i = 0; i < (size_t)ds->n * ds->features; i++)
    if (!isfinite(ds->x[i])) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  xf_dataset ds;
  xf_errctx err;
  xf_err rc;
  if ((data[0] & 1) == 0) {
    rc = xf_npz_parse(data + 1, size - 1, "fuzz.npz", &ds, &err);
  } else {
    if (size < 5) return 0;
    size_t xlen = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 |
                  (size_t)data[4] << 24;
    if (xlen > size - 5) return 0;
    rc = xf_npy_parse(data + 5, xlen, "fuzz-x.npy", data + 5 + xlen, size - 5 - xlen,
                      "fuzz-y.npy", &ds, &err);
  }
  if (rc == XF_OK) {
    check(&ds);
    xf_dataset_free(&ds);
  } else if (ds.x || ds.y) {
    __builtin_trap();
  }
  return 0;
}
