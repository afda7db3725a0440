/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for what an external trainer hands back (site/trainer.h,
 * docs/trainers.md). The first byte picks the reader: even, result.json
 * (the rest of the input) through xf_trainer_parse_result; odd, trained.npy
 * through xf_npy_parse_vector, the expected length n being the next byte.
 *
 * Checked: an accepted result has samples in 1..max and finite losses and
 * DP fields in their documented ranges; an accepted vector has n finite
 * values; a refusal names the file. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "data/dataset.h"
#include "site/trainer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SAMPLES 1000u

static void check_result(const xf_trainer_result *r) {
  if (r->samples < 1 || r->samples > MAX_SAMPLES) __builtin_trap();
  if (r->has_train_loss && !(isfinite(r->train_loss) && r->train_loss >= 0)) __builtin_trap();
  if (r->has_train_accuracy && !(r->train_accuracy >= 0 && r->train_accuracy <= 1))
    __builtin_trap();
  if (r->has_dp && !(r->dp_clip > 0 && isfinite(r->dp_clip) && r->dp_noise_multiplier >= 0 &&
                     isfinite(r->dp_noise_multiplier) && r->dp_sampling_rate > 0 &&
                     r->dp_sampling_rate <= 1 && r->dp_steps >= 1))
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  xf_errctx err;
  xf_errctx_clear(&err);
  if ((data[0] & 1) == 0) {
    xf_trainer_result r;
    memset(&r, 0, sizeof(r));
    xf_err rc = xf_trainer_parse_result((const char *)data + 1, size - 1, "result.json",
                                        MAX_SAMPLES, &r, &err);
    if (rc == XF_OK) check_result(&r);
    else if (strcmp(err.file, "result.json") != 0) __builtin_trap();
    xf_trainer_result_free(&r);
    return 0;
  }
  if (size < 2) return 0;
  const size_t n = data[1];
  float *v = NULL;
  xf_err rc = xf_npy_parse_vector(data + 2, size - 2, "trained.npy", n, &v, &err);
  if (rc == XF_OK) {
    for (size_t i = 0; i < n; i++)
      if (!isfinite(v[i])) __builtin_trap();
  } else if (v) {
    __builtin_trap();
  }
  xf_free(v);
  return 0;
}
