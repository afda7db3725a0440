/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for the column schema of tabular datasets (schema.json):
 * the input is the schema text. */
#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_schema *s = NULL;
  xf_errctx err;
  if (xf_schema_parse((const char *)data, size, "fuzz.schema.json", &s, &err) == XF_OK) {
    if (!s || xf_schema_features(s) == 0 || xf_schema_features(s) > XF_SCHEMA_MAX_FEATURES ||
        xf_schema_classes(s) > XF_SCHEMA_MAX_VOCAB)
      __builtin_trap();
    xf_schema_free(s);
  } else if (s) {
    __builtin_trap();
  }
  return 0;
}
