/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the column statistics files of `xfed-site dataset
 * stats` (data/colstats.h): the input is the file's text. An accepted file
 * is written out and must read back to the same statistics. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "data/colstats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_colstats st;
  xf_errctx err;
  if (xf_colstats_parse((const char *)data, size, "fuzz.stats.json", &st, &err) != XF_OK) {
    if (st.cols || st.n_cols) __builtin_trap();
    return 0;
  }
  if (st.n_cols == 0 || !st.cols) __builtin_trap();
  char *json = NULL;
  if (xf_colstats_format(&st, &json, &err) == XF_OK) {
    xf_colstats back;
    if (xf_colstats_parse(json, strlen(json), "again", &back, &err) != XF_OK ||
        back.n_cols != st.n_cols)
      __builtin_trap();
    for (uint32_t i = 0; i < st.n_cols; i++)
      if (strcmp(back.cols[i].name, st.cols[i].name) != 0 ||
          back.cols[i].count != st.cols[i].count || back.cols[i].mean != st.cols[i].mean ||
          back.cols[i].m2 != st.cols[i].m2)
        __builtin_trap();
    xf_colstats_free(&back);
    xf_free(json);
  }
  xf_colstats_free(&st);
  return 0;
}
