/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the IDX reader: an image file and a label file, plain
 * or gzip, cut from one input. The first two bytes (little-endian) say how
 * many of the following bytes are the image file; the rest is the label file. */
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t rest = size - 2;
  size_t cut = (size_t)data[0] | (size_t)data[1] << 8;
  if (cut > rest) cut = rest;
  xf_dataset ds;
  xf_errctx err;
  if (xf_idx_parse(data + 2, cut, "images", data + 2 + cut, rest - cut, "labels", &ds, &err) ==
      XF_OK) {
    /* What the parser promises: a consistent shape and labels in range. */
    if (ds.n == 0 || ds.features != ds.h * ds.w * ds.c || ds.classes == 0 || ds.classes > 256)
      __builtin_trap();
    for (uint32_t i = 0; i < ds.n; i++)
      if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.classes) __builtin_trap();
    for (size_t i = 0; i < (size_t)ds.n * ds.features; i++)
      if (!(ds.x[i] >= 0.0f && ds.x[i] <= 1.0f)) __builtin_trap();
    xf_dataset_free(&ds);
  }
  return 0;
}
