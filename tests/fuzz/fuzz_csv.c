/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the CSV reader. The first byte picks the options (high
 * bit: label column named "label"; low two bits: label column number, 0 =
 * last); the rest is the CSV text. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  xf_csv_options opt = {0};
  if (data[0] & 0x80)
    opt.label_name = "label";
  else
    opt.label_column = data[0] & 3;
  xf_dataset ds;
  xf_errctx err;
  if (xf_csv_parse(data + 1, size - 1, "fuzz.csv", &opt, &ds, &err) == XF_OK) {
    if (ds.n == 0 || ds.features == 0 || ds.c != ds.features || ds.h != 1 || ds.w != 1 ||
        ds.classes == 0 || ds.classes > 65536)
      __builtin_trap();
    for (uint32_t i = 0; i < ds.n; i++)
      if (ds.y[i] < 0 || (uint32_t)ds.y[i] >= ds.classes) __builtin_trap();
    for (size_t i = 0; i < (size_t)ds.n * ds.features; i++)
      if (!isfinite(ds.x[i])) __builtin_trap();
    xf_dataset_free(&ds);
  }
  return 0;
}
