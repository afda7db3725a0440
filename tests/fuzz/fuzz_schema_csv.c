/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for CSV read with a column schema, and normalization. The
 * input is [schema length: 2 bytes, little-endian][schema text][CSV text]. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t slen = (size_t)data[0] | (size_t)data[1] << 8;
  if (slen > size - 2) return 0;
  xf_schema *s = NULL;
  xf_errctx err;
  if (xf_schema_parse((const char *)data + 2, slen, "fuzz.schema.json", &s, &err) != XF_OK)
    return 0;
  xf_dataset ds;
  const uint8_t *csv = data + 2 + slen;
  size_t clen = size - 2 - slen;
  if (xf_schema_csv_parse(s, csv, clen, "fuzz.csv", &ds, &err) == XF_OK) {
    if (ds.n == 0 || ds.features != xf_schema_features(s) || ds.c != ds.features || ds.h != 1 ||
        ds.w != 1 || ds.classes == 0 || ds.classes > 65536 ||
        (xf_schema_classes(s) && ds.classes != xf_schema_classes(s)))
      __builtin_trap();
    for (uint32_t i = 0; i < ds.n; i++)
      if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.classes) __builtin_trap();
    for (size_t i = 0; i < (size_t)ds.n * ds.features; i++)
      if (!isfinite(ds.x[i])) __builtin_trap();
    if (xf_schema_normalize(s, &ds, NULL, &err) == XF_OK)
      for (size_t i = 0; i < (size_t)ds.n * ds.features; i++)
        if (!isfinite(ds.x[i])) __builtin_trap();
    xf_dataset_free(&ds);
  } else if (ds.x || ds.y) {
    __builtin_trap();
  }
  xf_schema_free(s);
  return 0;
}
