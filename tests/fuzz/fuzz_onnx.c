/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: ONNX files given to `xfed model eval` and `xfed model export`
 * (kernels/export.h, xf_export_onnx_read) must be read back exactly or
 * refused cleanly, never crash. */
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "kernels/export.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_model *m;
  float *p;
  if (xf_export_onnx_read(data, size, &m, &p, NULL) == XF_OK) {
    xf_model_free(m);
    xf_free(p);
  }
  return 0;
}
