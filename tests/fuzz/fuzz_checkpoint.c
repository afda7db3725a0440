/* SPDX-License-Identifier: Apache-2.0 */
/* Fuzz target: xfed model files from untrusted sources (downloads, exports,
 * blobs fetched from peers) must be refused cleanly, never crash. */
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "kernels/checkpoint.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  xf_model *m;
  float *p;
  if (xf_checkpoint_decode(data, size, &m, &p, NULL) == XF_OK) {
    xf_model_free(m);
    xf_free(p);
  }
  return 0;
}
