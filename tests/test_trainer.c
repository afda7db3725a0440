/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the external trainer contract (site/trainer.h, docs/trainers.md)
 * with a plain-Python trainer (tests/data/trainer/tiny_trainer.py) that
 * misbehaves on purpose under some names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/result.h"
#include "job/jobspec.h"
#include "kernels/model.h"
#include "site/trainer.h"
#include "base/file.h"

typedef struct fixture {
  char dir[256], work[300], log[300];
  xf_jobspec spec;
  xf_model *model;
  float *global;
  size_t n;
  xf_trainer_task task;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  if (!f) return -1;
  if (xf_test_mkdtemp(f->dir, sizeof(f->dir), "trainer") != 0) {
    free(f);
    return -1;
  }
  snprintf(f->work, sizeof(f->work), "%s/work", f->dir);
  snprintf(f->log, sizeof(f->log), "%s/trainer.log", f->dir);
  if (mkdir(f->work, 0700) != 0) return -1;
  xf_jobspec_defaults(&f->spec);
  xf_model_spec ms = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5, .in_h = 28, .in_w = 28,
                      .in_c = 1, .classes = 10};
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_model_create(&ms, &f->model, &err) != XF_OK) return -1;
  f->n = xf_model_num_params(f->model);
  f->global = xf_mallocarray(f->n, sizeof(float));
  for (size_t i = 0; i < f->n; i++) f->global[i] = (float)((double)(i % 97) / 97.0 - 0.5);
  f->task = (xf_trainer_task){.job_id = "job-1", .round = 3, .seed = 42, .spec = &f->spec,
                              .lr = 0.01, .dataset_name = "mnist", .dataset_dir = f->dir,
                              .dataset_layout = "idx", .train_records = 600, .test_records = 100,
                              .features = 784, .classes = 10, .h = 28, .w = 28, .c = 1,
                              .model = f->model, .global = f->global};
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xf_test_remove_tree(f->dir);
  xf_free(f->global);
  xf_model_free(f->model);
  free(f);
  return 0;
}

/* A link to the tiny trainer named mode.py, in the fixture's directory. */
static void program(fixture *f, const char *mode, char *out, size_t n) {
  char src[1024];
  const char *root = getenv("XF_SOURCE_DIR");
  assert_non_null(root);
  snprintf(src, sizeof(src), "%s/tests/data/trainer/tiny_trainer.py", root);
  snprintf(out, n, "%s/%s.py", f->dir, mode);
  unlink(out);
  assert_int_equal(symlink(src, out), 0);
}

/* Writes the task, runs the trainer under mode and reads its outputs. */
static xf_err run_mode(fixture *f, const char *mode, double timeout, xf_trainer_result *r,
                       xf_errctx *err) {
  char prog[512];
  program(f, mode, prog, sizeof(prog));
  xf_errctx_clear(err);
  xf_err rc = xf_trainer_program_check(prog, err);
  assert_int_equal(rc, XF_OK);
  rc = xf_trainer_write_task(f->work, &f->task, err);
  assert_int_equal(rc, XF_OK);
  rc = xf_trainer_run(prog, f->work, f->log, timeout, NULL, err);
  if (rc != XF_OK) return rc;
  return xf_trainer_read_result(f->work, f->n, f->task.train_records, r, err);
}

static void good_run_returns_what_the_program_wrote(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "good", 300, &r, &err), XF_OK);
  assert_int_equal(r.n, f->n);
  assert_int_equal(r.samples, 600);
  assert_true(r.has_train_loss && r.has_train_accuracy);
  assert_true(fabs(r.train_accuracy - 0.75) < 1e-12);
  assert_false(r.has_dp);
  for (size_t i = 0; i < f->n; i++)
    assert_true(r.trained[i] == (float)((double)f->global[i] + 0.25));
  /* The delta the site sends is what the program wrote minus global. */
  for (size_t i = 0; i < f->n; i++)
    assert_true(fabsf((r.trained[i] - f->global[i]) - 0.25f) < 1e-6f);
  xf_trainer_result_free(&r);
  char *log = NULL;
  xf_errctx_clear(&err);
  assert_int_equal(xf_file_read_text(f->log, 1 << 20, &log, NULL, &err), XF_OK);
  assert_non_null(strstr(log, "trained"));
  xf_free(log);
}

static void task_json_carries_the_contract(void **state) {
  fixture *f = *state;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_write_task(f->work, &f->task, &err), XF_OK);
  char path[400];
  snprintf(path, sizeof(path), "%s/task.json", f->work);
  json_error_t je;
  json_t *o = json_load_file(path, 0, &je);
  assert_non_null(o);
  assert_string_equal(json_string_value(json_object_get(o, "contract")), "xfed-trainer/1");
  assert_int_equal(json_integer_value(json_object_get(o, "round")), 3);
  json_t *local = json_object_get(o, "local");
  assert_int_equal(json_integer_value(json_object_get(local, "batch_size")), 32);
  assert_string_equal(json_string_value(json_object_get(local, "optimizer")), "sgd");
  json_t *model = json_object_get(o, "model");
  assert_int_equal(json_integer_value(json_object_get(model, "params")), (json_int_t)f->n);
  json_t *layers = json_object_get(model, "layers");
  assert_int_equal(json_array_size(layers), (size_t)xf_model_num_layers(f->model));
  json_t *conv1 = json_array_get(layers, 0);
  assert_string_equal(json_string_value(json_object_get(conv1, "kind")), "conv");
  json_t *w = json_array_get(json_object_get(conv1, "tensors"), 0);
  assert_string_equal(json_string_value(json_object_get(w, "name")), "conv1.weight");
  assert_int_equal(json_array_size(json_object_get(w, "shape")), 4);
  assert_false(json_is_true(json_object_get(json_object_get(o, "privacy"), "record_level")));
  json_decref(o);
}

/* Reads back task.json's model.layers for model m. */
static json_t *task_layers(fixture *f, xf_model *m, json_t **root) {
  size_t n = xf_model_num_params(m);
  float *global = xf_calloc(n, sizeof(float));
  xf_trainer_task t = f->task;
  t.model = m;
  t.global = global;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_write_task(f->work, &t, &err), XF_OK);
  xf_free(global);
  char path[400];
  snprintf(path, sizeof(path), "%s/task.json", f->work);
  json_error_t je;
  *root = json_load_file(path, 0, &je);
  assert_non_null(*root);
  json_t *layers = json_object_get(json_object_get(*root, "model"), "layers");
  assert_int_equal(json_array_size(layers), (size_t)xf_model_num_layers(m));
  return layers;
}

static json_int_t member_int(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  assert_true(json_is_integer(v));
  return json_integer_value(v);
}

/* The table rows of the later kinds carry their own fields, and their
 * tensors the shapes a trainer loads them in. */
static void task_json_describes_the_later_layer_kinds(void **state) {
  fixture *f = *state;
  xf_model_spec embedded = {
      .arch = XF_ARCH_LAYERS, .in_h = 1, .in_w = 4, .in_c = 1, .classes = 3, .n_layers = 5,
      .layers = {{.kind = XF_DECL_EMBEDDING, .vocab = 10, .dim = 6}, {.kind = XF_DECL_LAYERNORM},
                 {.kind = XF_DECL_ADD, .from = 0}, {.kind = XF_DECL_FLATTEN},
                 {.kind = XF_DECL_DENSE, .units = 3}}};
  xf_model_spec residual = {
      .arch = XF_ARCH_LAYERS, .in_h = 4, .in_w = 4, .in_c = 2, .classes = 3, .n_layers = 8,
      .layers = {{.kind = XF_DECL_GROUPNORM, .groups = 2}, {.kind = XF_DECL_GELU},
                 {.kind = XF_DECL_ADD, .from = -1}, {.kind = XF_DECL_AVGPOOL2D, .kernel = 2},
                 {.kind = XF_DECL_TANH}, {.kind = XF_DECL_DROPOUT, .rate = 0.25f},
                 {.kind = XF_DECL_SOFTMAX}, {.kind = XF_DECL_DENSE, .units = 3}}};
  xf_model *m;
  json_t *root;
  assert_int_equal(xf_model_create(&embedded, &m, NULL), XF_OK);
  json_t *l = task_layers(f, m, &root);
  json_t *embed = json_array_get(l, 0), *ln = json_array_get(l, 1), *add = json_array_get(l, 2);
  assert_string_equal(json_string_value(json_object_get(embed, "kind")), "embedding");
  assert_int_equal(member_int(embed, "vocab"), 10);
  assert_int_equal(member_int(embed, "out_w"), 4);
  assert_int_equal(member_int(embed, "out_c"), 6);
  json_t *shape = json_object_get(json_array_get(json_object_get(embed, "tensors"), 0), "shape");
  assert_int_equal(json_array_size(shape), 2);
  assert_int_equal(json_integer_value(json_array_get(shape, 0)), 10);
  assert_int_equal(json_integer_value(json_array_get(shape, 1)), 6);
  assert_int_equal(json_array_size(json_object_get(embed, "tensors")), 1); /* no bias */
  assert_string_equal(json_string_value(json_object_get(ln, "kind")), "layernorm");
  json_t *ln_tensors = json_object_get(ln, "tensors");
  assert_int_equal(json_array_size(ln_tensors), 2);
  for (size_t i = 0; i < 2; i++) {
    shape = json_object_get(json_array_get(ln_tensors, i), "shape");
    assert_int_equal(json_array_size(shape), 1);
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 6);
  }
  assert_string_equal(json_string_value(json_object_get(add, "kind")), "add");
  assert_int_equal(member_int(add, "src"), 0);
  json_decref(root);
  xf_model_free(m);

  assert_int_equal(xf_model_create(&residual, &m, NULL), XF_OK);
  l = task_layers(f, m, &root);
  static const char *const kinds[] = {"groupnorm", "gelu",    "add",     "avgpool",
                                      "tanh",      "dropout", "softmax", "dense"};
  for (size_t i = 0; i < 8; i++)
    assert_string_equal(json_string_value(json_object_get(json_array_get(l, i), "kind")),
                        kinds[i]);
  assert_int_equal(member_int(json_array_get(l, 0), "groups"), 2);
  assert_int_equal(member_int(json_array_get(l, 2), "src"), -1);
  assert_int_equal(member_int(json_array_get(l, 3), "kernel"), 2);
  assert_int_equal(member_int(json_array_get(l, 3), "stride"), 2);
  assert_int_equal(member_int(json_array_get(l, 3), "pad"), 0);
  assert_true(json_real_value(json_object_get(json_array_get(l, 5), "rate")) == 0.25);
  json_decref(root);
  xf_model_free(m);
}

/* True when process pid is gone or a zombie (killed, not yet reaped by
 * whoever inherited it). */
static bool process_dead(long pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
  FILE *fp = fopen(path, "r");
  if (!fp) return true;
  size_t got = fread(buf, 1, sizeof(buf) - 1, fp);
  fclose(fp);
  buf[got] = '\0';
  const char *close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

static void timeout_kills_it_and_its_children(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  /* The limit leaves the program (Python starting on a loaded machine) time
   * to write child.pid; the check below waits for it to exist. */
  assert_int_equal(run_mode(f, "sleep", 5.0, &r, &err), XF_EIO);
  assert_non_null(strstr(err.msg, "timed out after 5 s"));
  char path[400];
  snprintf(path, sizeof(path), "%s/child.pid", f->work);
  FILE *fp = fopen(path, "r");
  if (!fp) return; /* killed before it forked: nothing else to check */
  long pid = 0;
  assert_int_equal(fscanf(fp, "%ld", &pid), 1);
  fclose(fp);
  bool dead = false;
  for (int i = 0; i < 500 && !dead; i++) { /* SIGKILL is delivered at once; reaping may lag */
    dead = process_dead(pid);
    if (!dead) usleep(10000);
  }
  assert_true(dead);
}

static void stop_kills_it(void **state) {
  fixture *f = *state;
  char prog[512];
  program(f, "sleep", prog, sizeof(prog));
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_write_task(f->work, &f->task, &err), XF_OK);
  atomic_bool stop = true;
  assert_int_equal(xf_trainer_run(prog, f->work, f->log, 300, &stop, &err), XF_EIO);
  assert_non_null(strstr(err.msg, "was stopped"));
}

static void bad_exit_status_is_refused(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "exit3", 300, &r, &err), XF_EIO);
  assert_non_null(strstr(err.msg, "exited with status 3"));
  assert_non_null(strstr(err.msg, f->log));
}

static void wrong_shape_is_refused(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "shape", 300, &r, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "trained.npy"));
  assert_non_null(strstr(err.msg, "shape"));
  assert_non_null(strstr(err.file, "trained.npy"));
}

static void nan_is_refused(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "nan", 300, &r, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "value 1 is NaN"));
  assert_string_equal(err.field, "[1]");
}

static void too_many_samples_are_refused(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "many", 300, &r, &err), XF_ERANGE);
  assert_string_equal(err.field, "samples");
  assert_non_null(strstr(err.msg, "601"));
  assert_non_null(strstr(err.msg, "600 training records"));
  assert_non_null(strstr(err.file, "result.json"));
}

static void missing_result_is_refused(void **state) {
  fixture *f = *state;
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "noresult", 300, &r, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "result.json"));
}

static void relative_program_is_refused(void **state) {
  (void)state;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_program_check("trainer.py", &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "absolute path"));
}

static void declared_dp_is_checked_against_the_job(void **state) {
  fixture *f = *state;
  f->task.dp = (xf_trainer_dp_need){.record = true, .clip = 1.0, .noise_multiplier = 1.1,
                                    .sampling_rate = 32.0 / 600.0, .steps = 19};
  xf_trainer_result r;
  xf_errctx err;
  assert_int_equal(run_mode(f, "dp", 300, &r, &err), XF_OK);
  assert_true(r.has_dp);
  assert_int_equal(r.dp_steps, 19);
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_check_dp(&r, &f->task.dp, &err), XF_OK);
  xf_trainer_result_free(&r);

  assert_int_equal(run_mode(f, "dp_low", 300, &r, &err), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_check_dp(&r, &f->task.dp, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "dp.noise_multiplier is 0.55, below the 1.1"));
  xf_trainer_result_free(&r);

  assert_int_equal(run_mode(f, "good", 300, &r, &err), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_check_dp(&r, &f->task.dp, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "no \"dp\" object"));
  xf_trainer_result_free(&r);

  xf_trainer_result more = {.has_dp = true, .dp_clip = 1.0, .dp_noise_multiplier = 2,
                            .dp_sampling_rate = 32.0 / 600.0, .dp_steps = 20};
  assert_int_equal(xf_trainer_check_dp(&more, &f->task.dp, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "dp.steps is 20"));
  more.dp_steps = 19;
  more.dp_clip = 2.0;
  assert_int_equal(xf_trainer_check_dp(&more, &f->task.dp, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "dp.clip is 2"));
  more.dp_clip = 1.0;
  more.dp_sampling_rate = 0.5;
  assert_int_equal(xf_trainer_check_dp(&more, &f->task.dp, &err), XF_EDENIED);
  assert_non_null(strstr(err.msg, "dp.sampling_rate is 0.5"));
}

/* Writes dir/name with text. */
static void put(const char *dir, const char *name, const void *data, size_t len) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *fp = fopen(path, "wb");
  assert_non_null(fp);
  assert_int_equal(fwrite(data, 1, len, fp), len);
  fclose(fp);
}

/* A 3-value .npy with the given header dict, as format 1.0. */
static void put_npy(const char *dir, const char *dict) {
  uint8_t buf[256];
  size_t hl = strlen(dict);
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  buf[8] = (uint8_t)(hl + 1);
  buf[9] = 0;
  memcpy(buf + 10, dict, hl);
  buf[10 + hl] = '\n';
  float v[3] = {1, 2, 3};
  memcpy(buf + 11 + hl, v, sizeof(v));
  put(dir, "trained.npy", buf, 11 + hl + sizeof(v));
}

static xf_err read_with(fixture *f, const char *result, const char *dict, xf_errctx *err) {
  put(f->work, "result.json", result, strlen(result));
  put_npy(f->work, dict);
  xf_trainer_result r;
  xf_errctx_clear(err);
  xf_err rc = xf_trainer_read_result(f->work, 3, 10, &r, err);
  if (rc == XF_OK) {
    assert_true(r.trained[2] == 3.0f);
    xf_trainer_result_free(&r);
  }
  return rc;
}

static void outputs_are_read_strictly(void **state) {
  fixture *f = *state;
  xf_errctx err;
  const char *good = "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }";
  assert_int_equal(read_with(f, "{\"samples\": 10}", good, &err), XF_OK);
  assert_int_equal(read_with(f, "{\"samples\": 10}",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)}", &err),
                   XF_OK);
  assert_int_equal(read_with(f, "{\"samples\": 10}",
                             "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }", &err),
                   XF_EFORMAT);
  assert_non_null(strstr(err.msg, "'<f4'"));
  assert_int_equal(read_with(f, "{\"samples\": 10}",
                             "{'descr': '<f4', 'fortran_order': True, 'shape': (3,), }", &err),
                   XF_EFORMAT);
  assert_int_equal(read_with(f, "{\"samples\": 10}",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (3,1), }", &err),
                   XF_EFORMAT);
  assert_int_equal(read_with(f, "{\"samples\": 10}",
                             "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", &err),
                   XF_EFORMAT);
  assert_int_equal(read_with(f, "{\"samples\": 10, \"epochs\": 1}", good, &err), XF_EFORMAT);
  assert_string_equal(err.field, "epochs");
  assert_non_null(strstr(err.msg, "unknown field"));
  assert_int_equal(read_with(f, "{\"samples\": 10, \"samples\": 9}", good, &err), XF_EFORMAT);
  assert_int_equal(read_with(f, "{\"samples\": 0}", good, &err), XF_ERANGE);
  assert_int_equal(read_with(f, "{\"samples\": 2.5}", good, &err), XF_EFORMAT);
  assert_int_equal(read_with(f, "{\"train_loss\": 1}", good, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "\"samples\" is missing"));
  assert_int_equal(read_with(f, "{\"samples\": 10, \"train_accuracy\": 1.5}", good, &err),
                   XF_ERANGE);
  assert_string_equal(err.field, "train_accuracy");
  assert_int_equal(read_with(f, "{\"samples\": 10, \"dp\": {\"clip\": 1, \"noise_multiplier\": 1, "
                                "\"sampling_rate\": 0.1}}", good, &err),
                   XF_EFORMAT);
  assert_string_equal(err.field, "dp.steps");
  assert_int_equal(read_with(f, "{\"samples\": 10, \"dp\": {\"clip\": 1, \"noise_multiplier\": 1, "
                                "\"sampling_rate\": 1.5, \"steps\": 3}}", good, &err),
                   XF_ERANGE);
  assert_string_equal(err.field, "dp.sampling_rate");
  assert_int_equal(read_with(f, "[1]", good, &err), XF_EFORMAT);
  assert_non_null(strstr(err.msg, "not one JSON object"));
}

static void dp_words_parse(void **state) {
  (void)state;
  xf_trainer_dp d;
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_trainer_dp_parse("declared", &d, &err), XF_OK);
  assert_int_equal(d, XF_TRAINER_DP_DECLARED);
  assert_int_equal(xf_trainer_dp_parse("yes", &d, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "'declared'"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(good_run_returns_what_the_program_wrote, setup, teardown),
      cmocka_unit_test_setup_teardown(task_json_carries_the_contract, setup, teardown),
      cmocka_unit_test_setup_teardown(task_json_describes_the_later_layer_kinds, setup, teardown),
      cmocka_unit_test_setup_teardown(timeout_kills_it_and_its_children, setup, teardown),
      cmocka_unit_test_setup_teardown(stop_kills_it, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_exit_status_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(wrong_shape_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(nan_is_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(too_many_samples_are_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(missing_result_is_refused, setup, teardown),
      cmocka_unit_test(relative_program_is_refused),
      cmocka_unit_test_setup_teardown(declared_dp_is_checked_against_the_job, setup, teardown),
      cmocka_unit_test(dp_words_parse),
      cmocka_unit_test_setup_teardown(outputs_are_read_strictly, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
