/* SPDX-License-Identifier: Apache-2.0 */
/* xfed-layer-models OUTDIR: writes the declared models of
 * tests/layer_kinds.h as model files (OUTDIR/image.xfm, flat.xfm,
 * embed.xfm), for the checks that export them and run them elsewhere, and
 * for each the task an external trainer would get for it (OUTDIR/image.task/
 * task.json and global.npy, site/trainer.h), its dataset the NPY directory
 * OUTDIR/image.data with 60 training and 40 test records of 3 classes.
 * Parameters: xfed's seeded initialization, then every value moved by a
 * fixed, value-dependent amount, so that no norm's gamma is 1 and no beta 0
 * and a layout mix-up shows in the logits. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/alloc.h"
#include "job/jobspec.h"
#include "kernels/checkpoint.h"
#include "site/trainer.h"
#include "layer_kinds.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: xfed-layer-models OUTDIR\n");
    return 2;
  }
  for (int which = 0; which < XF_TEST_LAYER_MODELS; which++) {
    xf_model_spec spec = xf_test_layer_model(which);
    xf_model *m = NULL;
    xf_errctx err = {0};
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s.xfm", argv[1], xf_test_layer_model_name(which));
    if (xf_model_create(&spec, &m, &err) != XF_OK) {
      fprintf(stderr, "xfed-layer-models: %s: %s\n", path, err.msg);
      return 1;
    }
    size_t n = xf_model_num_params(m);
    float *p = xf_mallocarray(n, sizeof(float));
    if (!p) return 1;
    xf_model_init_params(m, 7, p);
    for (size_t i = 0; i < n; i++) p[i] += 0.3f * sinf(0.7f * (float)i + 0.1f);
    xf_err rc = xf_checkpoint_save_file(path, m, p, &err);
    char task_dir[4096], data_dir[4096];
    snprintf(task_dir, sizeof(task_dir), "%s/%s.task", argv[1], xf_test_layer_model_name(which));
    snprintf(data_dir, sizeof(data_dir), "%s/%s.data", argv[1], xf_test_layer_model_name(which));
    xf_jobspec job;
    xf_jobspec_defaults(&job);
    const xf_trainer_task task = {
        .job_id = "layer-kinds", .round = 1, .seed = 7, .spec = &job, .lr = 0.01,
        .dataset_name = xf_test_layer_model_name(which), .dataset_dir = data_dir,
        .dataset_layout = "npy", .train_records = 60, .test_records = 40,
        .features = (uint32_t)xf_model_input_size(m), .classes = 3, .h = (uint32_t)spec.in_h,
        .w = (uint32_t)spec.in_w, .c = (uint32_t)spec.in_c, .model = m, .global = p};
    if (rc == XF_OK && mkdir(task_dir, 0700) != 0)
      rc = xf_fail(&err, XF_EIO, "cannot make %s: %s", task_dir, strerror(errno));
    if (rc == XF_OK) rc = xf_trainer_write_task(task_dir, &task, &err);
    xf_free(p);
    xf_model_free(m);
    if (rc != XF_OK) {
      fprintf(stderr, "xfed-layer-models: %s: %s\n", path, err.msg);
      return 1;
    }
  }
  return 0;
}
