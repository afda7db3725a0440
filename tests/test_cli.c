/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of the `xfed` command line: the real binary run as a user
 * runs it (fork and exec with a clean argv, stdout, stderr and exit status
 * captured) on small CSV datasets and job specs written into a scratch
 * directory. Covers help and usage errors, `xfed train --json`, reproducible
 * model digests, saved models and blobs, refused input, `xfed data split`
 * and `xfed version`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "crypto/digest.h"
#include "kernels/checkpoint.h"
#include "kernels/model.h"
#include "storage/blob.h"

extern char **environ;

/* A run of xfed that takes longer than this is killed and reported: 120 s
 * for the small-data tests, 900 s for full Fashion-MNIST training (--fmnist),
 * which takes under a minute on 2 cores. */
static int run_deadline_s = 120;

#define TRAIN_ROWS 300
#define TEST_ROWS 90
#define FEATURES 4
#define CLASSES 3

/* ---- the fixture: the binary, its environment and the shared data ---------- */

static struct {
  char xfed[1024];
  char root[512];   /* mkdtemp directory holding everything below */
  char csv[600];    /* root/csv: train.csv and test.csv */
  char logreg[600]; /* job specs */
  char mlp[600];
  char mlp_seed8[600];
  char **env; /* the child's environment: ours with XF_BACKEND=cpu */
} fx;


static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Three well-separated classes: class k sits at 3 on feature k, the others
 * near 0, with uniform noise of +-1 on every feature (the last is noise only).
 * A linear model separates them after one or two epochs. */
static int write_csv(const char *path, int rows, uint64_t stream) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  xf_rng rng;
  xf_rng_seed(&rng, 2024, stream);
  fputs("f1,f2,f3,f4,label\n", f);
  for (int i = 0; i < rows; i++) {
    int k = i % CLASSES;
    for (int j = 0; j < FEATURES; j++) {
      double v = (j == k ? 3.0 : 0.0) + 2 * xf_rng_uniform(&rng) - 1;
      fprintf(f, "%.4f,", v);
    }
    fprintf(f, "%d\n", k);
  }
  return fclose(f) == 0 ? 0 : -1;
}

static const char *SPEC_LOGREG =
    "{\"name\": \"cli-logreg\", \"model\": {\"arch\": \"logreg\"},\n"
    " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"
    " \"local\": {\"epochs\": 3, \"batch_size\": 16, \"lr\": 0.1}, \"seed\": 7}\n";

#define SPEC_MLP                                                                       \
  "{\"name\": \"cli-mlp\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},\n"        \
  " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"                               \
  " \"local\": {\"epochs\": 2, \"batch_size\": 16, \"lr\": 0.1, \"momentum\": 0.5},\n" \
  " \"seed\": %d}\n"

/* Our environment with XF_BACKEND=cpu and without XF_THREADS, so that the
 * children train on the cpu backend with the threads each test asks for. */
static char **child_environment(void) {
  size_t n = 0;
  while (environ[n]) n++;
  char **env = calloc(n + 2, sizeof(char *));
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (strncmp(environ[i], "XF_BACKEND=", 11) != 0 && strncmp(environ[i], "XF_THREADS=", 11) != 0)
      env[k++] = environ[i];
  env[k++] = "XF_BACKEND=cpu";
  env[k] = NULL;
  return env;
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_cli: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.xfed, sizeof(fx.xfed), "%s/cli/xfed", build);
  if (access(fx.xfed, X_OK) != 0) {
    fprintf(stderr, "test_cli: %s is not an executable: build the xfed target\n", fx.xfed);
    return -1;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(fx.root, sizeof(fx.root), "%s/xf-cli-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(fx.root)) return -1;
  char train[700], test[700];
  snprintf(fx.csv, sizeof(fx.csv), "%s/csv", fx.root);
  snprintf(train, sizeof(train), "%s/train.csv", fx.csv);
  snprintf(test, sizeof(test), "%s/test.csv", fx.csv);
  snprintf(fx.logreg, sizeof(fx.logreg), "%s/logreg.json", fx.root);
  snprintf(fx.mlp, sizeof(fx.mlp), "%s/mlp.json", fx.root);
  snprintf(fx.mlp_seed8, sizeof(fx.mlp_seed8), "%s/mlp-seed8.json", fx.root);
  char mlp7[512], mlp8[512];
  snprintf(mlp7, sizeof(mlp7), SPEC_MLP, 7);
  snprintf(mlp8, sizeof(mlp8), SPEC_MLP, 8);
  fx.env = child_environment();
  if (!fx.env || mkdir(fx.csv, 0755) != 0 || write_csv(train, TRAIN_ROWS, 1) != 0 ||
      write_csv(test, TEST_ROWS, 2) != 0 || write_file(fx.logreg, SPEC_LOGREG) != 0 ||
      write_file(fx.mlp, mlp7) != 0 || write_file(fx.mlp_seed8, mlp8) != 0) {
    xf_test_remove_tree(fx.root);
    free(fx.env);
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(fx.root);
  free(fx.env);
  return 0;
}

/* ---- per test: a scratch directory, the runs and JSON documents to free ---- */

#define MAX_RUNS 24
#define MAX_JSON 16

/* One run of xfed (tests/support.h). */
typedef xf_test_run run;

typedef struct scratch {
  char dir[700];
  run runs[MAX_RUNS];
  int n_runs;
  json_t *json[MAX_JSON];
  int n_json;
} scratch;

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  snprintf(s->dir, sizeof(s->dir), "%s/t-XXXXXX", fx.root);
  if (!mkdtemp(s->dir)) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  if (!s) return 0;
  for (int i = 0; i < s->n_runs; i++) xf_test_run_free(&s->runs[i]);
  for (int i = 0; i < s->n_json; i++) json_decref(s->json[i]);
  xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

static const char *path_in(const scratch *s, const char *name) {
  static char bufs[8][800];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof(bufs[0]), "%s/%s", s->dir, name);
  return b;
}

/* ---- running xfed ------------------------------------------------------------ */

/* Runs xfed with the arguments given (NULL-terminated) and the fixture's
 * environment (tests/support.h). The run belongs to s and is freed with it. */
static run *xfed_run(scratch *s, const char *arg, ...) {
  assert_true(s->n_runs < MAX_RUNS);
  run *r = &s->runs[s->n_runs++];
  xf_test_exec_opts o = {.path = fx.xfed, .env = fx.env, .deadline_s = run_deadline_s};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
  return r;
}

static void expect_status(const run *r, int want) {
  if (r->status != want) {
    xf_test_run_show(r);
    fail_msg("%s: exit status %d, expected %d", r->line, r->status, want);
  }
}

static void expect_in(const char *what, const char *text, const char *needle, const run *r) {
  if (!strstr(text, needle)) {
    xf_test_run_show(r);
    fail_msg("%s: %s does not mention \"%s\"", r->line, what, needle);
  }
}

static void expect_not_in(const char *what, const char *text, const char *needle, const run *r) {
  if (strstr(text, needle)) {
    xf_test_run_show(r);
    fail_msg("%s: %s should not contain \"%s\"", r->line, what, needle);
  }
}

static void expect_empty(const char *what, size_t len, const run *r) {
  if (len) {
    xf_test_run_show(r);
    fail_msg("%s: %s should be empty", r->line, what);
  }
}

/* stdout must be exactly one JSON object (whitespace around it allowed). */
static json_t *stdout_json(scratch *s, const run *r) {
  json_error_t je;
  json_t *j = json_loads(r->out, 0, &je);
  if (!j) {
    xf_test_run_show(r);
    fail_msg("%s: stdout is not one JSON document (%s at line %d)", r->line, je.text, je.line);
  }
  assert_true(s->n_json < MAX_JSON);
  s->json[s->n_json++] = j;
  if (!json_is_object(j)) fail_msg("%s: stdout JSON is not an object", r->line);
  return j;
}

static json_t *load_json_file(scratch *s, const char *path) {
  json_error_t je;
  json_t *j = json_load_file(path, 0, &je);
  if (!j) fail_msg("%s: not JSON: %s (line %d)", path, je.text, je.line);
  assert_true(s->n_json < MAX_JSON);
  s->json[s->n_json++] = j;
  return j;
}

static const char *member_string(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("JSON member \"%s\" is missing or not a string", key);
  return json_string_value(v);
}

static double member_number(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_number(v)) fail_msg("JSON member \"%s\" is missing or not a number", key);
  return json_number_value(v);
}

static json_int_t member_integer(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) fail_msg("JSON member \"%s\" is missing or not an integer", key);
  return json_integer_value(v);
}

/* The {"error": {...}} object xfed prints with --json, checked for its
 * members; returns it. */
static json_t *json_error_object(scratch *s, const run *r, const char *code) {
  json_t *e = json_object_get(stdout_json(s, r), "error");
  if (!json_is_object(e)) {
    xf_test_run_show(r);
    fail_msg("%s: stdout has no \"error\" object", r->line);
  }
  assert_string_equal(member_string(e, "code"), code);
  assert_true(strlen(member_string(e, "message")) > 0);
  member_string(e, "file");
  member_string(e, "field");
  member_string(e, "peer");
  return e;
}

static bool is_digest_hex(const char *h) {
  if (strlen(h) != 64) return false;
  for (int i = 0; i < 64; i++)
    if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return false;
  return true;
}

/* Runs `xfed train --json` and returns the model_digest it printed. */
static const char *train_digest(scratch *s, const char *spec, const char *threads) {
  run *r =
      xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--threads", threads, "--json", NULL);
  expect_status(r, 0);
  const char *d = member_string(stdout_json(s, r), "model_digest");
  if (!is_digest_hex(d)) fail_msg("%s: model_digest '%s' is not 64 hex digits", r->line, d);
  return d;
}

static char *read_whole(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s: %s", path, strerror(errno));
  char *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (cap - n < 4096) {
      cap = cap * 2 + 4096;
      buf = realloc(buf, cap);
      assert_non_null(buf);
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  fclose(f);
  *len = n;
  return buf;
}

static bool files_equal(const char *a, const char *b) {
  size_t na, nb;
  char *pa = read_whole(a, &na), *pb = read_whole(b, &nb);
  bool same = na == nb && memcmp(pa, pb, na) == 0;
  free(pa);
  free(pb);
  return same;
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

/* ---- help and usage errors ----------------------------------------------------- */

static void help_prints_usage_on_stdout_and_exits_0(void **state) {
  scratch *s = *state;
  const char *cases[][3] = {{"--help", NULL, NULL},      {"-h", NULL, NULL},
                            {"train", "--help", NULL},   {"data", "--help", NULL},
                            {"data", "split", "--help"}, {"version", "--help", NULL}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    run *r = xfed_run(s, cases[i][0], cases[i][1], cases[i][2], NULL);
    expect_status(r, 0);
    if (strncmp(r->out, "usage: xfed", 11) != 0) {
      xf_test_run_show(r);
      fail_msg("%s: stdout does not start with the usage line", r->line);
    }
    expect_empty("stderr", r->err_len, r);
  }
  run *r = s->runs;
  expect_in("xfed --help", r->out, "train", r);
  expect_in("xfed --help", r->out, "data split", r);
  expect_in("xfed --help", r->out, "version", r);
  r = &s->runs[2];
  expect_in("xfed train --help", r->out, "--spec", r);
  expect_in("xfed train --help", r->out, "--data", r);
  r = &s->runs[3];
  expect_in("xfed data --help", r->out, "split", r);
}

static void help_after_other_flags_still_prints_usage(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "train", "--threads", "2x", "--help", NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "usage: xfed train", r);
}

static void no_command_prints_usage_on_stderr_and_exits_2(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, NULL);
  expect_status(r, 2);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, "usage: xfed", r);
}

static void unknown_noun_or_verb_exits_2_and_names_it(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "trian", "--spec", fx.logreg, NULL);
  expect_status(r, 2);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, "'trian'", r);
  r = xfed_run(s, "data", "splt", NULL);
  expect_status(r, 2);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, "'splt'", r);
  r = xfed_run(s, "data", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "split", r);
}

static void unknown_flag_exits_2_and_names_it(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "--epocs", "2", NULL);
  expect_status(r, 2);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, "--epocs", r);
  expect_in("stderr", r->err, "xfed train --help", r);
  r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "iid", "--out",
               path_in(s, "out"), "--shuffle", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--shuffle", r);
  assert_int_equal(access(path_in(s, "out"), F_OK), -1);
  /* A short flag that does not end its word is named itself, not the word before. */
  r = xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "-xy", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "unknown option '-x'", r);
  r = xfed_run(s, "data", "split", "--data", fx.csv, "-q", "--sites", "3", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "unknown option '-q'", r);
  r = xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "extra", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "'extra'", r);
  r = xfed_run(s, "version", "extra", NULL);
  expect_status(r, 2);
  expect_empty("stdout", r->out_len, r);
}

static void missing_required_flag_exits_2_and_names_it(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "train", "--data", fx.csv, NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--spec", r);
  r = xfed_run(s, "train", "--spec", fx.logreg, NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--data", r);
  r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "iid", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--out", r);
  r = xfed_run(s, "data", "split", "--data", fx.csv, "--scheme", "iid", "--out", path_in(s, "out"),
               NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--sites", r);
  r = xfed_run(s, "train", "--spec", fx.logreg, "--data", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--data needs a value", r);
}

static void flag_values_are_parsed_strictly(void **state) {
  scratch *s = *state;
  const char *bad[][2] = {{"--threads", "2x"},
                          {"--threads", "0"},
                          {"--threads", ""},
                          {"--epochs", "1.5"},
                          {"--epochs", "-1"}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    run *r =
        xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, bad[i][0], bad[i][1], NULL);
    expect_status(r, 2);
    expect_empty("stdout", r->out_len, r);
    expect_in("stderr", r->err, bad[i][0], r);
    char quoted[32];
    snprintf(quoted, sizeof(quoted), "'%s'", bad[i][1]);
    expect_in("stderr", r->err, quoted, r);
    expect_not_in("stderr", r->err, "epoch 1/", r);
  }
  run *r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3x", "--scheme", "iid",
                    "--out", path_in(s, "out"), NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--sites", r);
  r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "dirichlet:x",
               "--out", path_in(s, "out"), NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--scheme", r);
  assert_int_equal(access(path_in(s, "out"), F_OK), -1);
}

static void usage_error_with_json_prints_an_error_object(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "train", "--json", "--spec", fx.logreg, "--data", fx.csv, "--threads", "2x",
                    NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--threads", r);
  json_t *e = json_error_object(s, r, "XF_EUSAGE");
  expect_in("the JSON error message", member_string(e, "message"), "--threads '2x'", r);
}

/* ---- xfed train ----------------------------------------------------------------- */

static void check_train_report(scratch *s, const run *r, int epochs, json_int_t params) {
  expect_status(r, 0);
  json_t *o = stdout_json(s, r);
  double acc = member_number(o, "test_accuracy");
  if (!(acc > 0.9 && acc <= 1.0))
    fail_msg("%s: test_accuracy %.4f on separable data, expected > 0.9", r->line, acc);
  double loss = member_number(o, "test_loss");
  assert_true(isfinite(loss) && loss >= 0 && loss < 1.0);
  double seconds = member_number(o, "train_seconds");
  assert_true(isfinite(seconds) && seconds >= 0);
  assert_string_equal(member_string(o, "backend"), "cpu");
  const char *digest = member_string(o, "model_digest");
  if (!is_digest_hex(digest)) fail_msg("model_digest '%s' is not 64 lowercase hex digits", digest);
  assert_int_equal(member_integer(o, "params"), params);
  assert_int_equal(member_integer(o, "epochs_run"), epochs);
  json_t *list = json_object_get(o, "epochs");
  assert_true(json_is_array(list));
  assert_int_equal(json_array_size(list), (size_t)epochs);
  for (int i = 0; i < epochs; i++) {
    json_t *ep = json_array_get(list, (size_t)i);
    assert_true(json_is_object(ep));
    assert_int_equal(member_integer(ep, "epoch"), i + 1);
    assert_true(isfinite(member_number(ep, "train_loss")));
    double ta = member_number(ep, "test_accuracy");
    assert_true(ta >= 0 && ta <= 1);
  }
  /* The last epoch's test figures are the final evaluation's. */
  json_t *last = json_array_get(list, (size_t)epochs - 1);
  assert_true(fabs(member_number(last, "test_accuracy") - acc) < 1e-9);
  /* Progress goes to stderr, one line per epoch; stdout holds only the JSON. */
  for (int i = 1; i <= epochs; i++) {
    char line[32];
    snprintf(line, sizeof(line), "epoch %d/%d", i, epochs);
    expect_in("stderr", r->err, line, r);
  }
  expect_in("stderr", r->err, "data: 300 train and 90 test records", r);
  expect_not_in("stdout", r->out, "epoch 1/", r);
  expect_not_in("stdout", r->out, "data: ", r);
}

static void train_json_reports_accuracy_digest_and_epochs_for_logreg(void **state) {
  scratch *s = *state;
  run *r =
      xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "--threads", "1", "--json", NULL);
  /* logreg on 4 features and 3 classes: 4 * 3 weights + 3 biases */
  check_train_report(s, r, 3, FEATURES * CLASSES + CLASSES);
  json_t *o = s->json[0];
  assert_int_equal(member_integer(o, "threads"), 1);
  assert_int_equal(member_integer(o, "seed"), 7);
  assert_int_equal(member_integer(o, "batch_size"), 16);
  assert_string_equal(member_string(o, "model"), "logreg");
}

static void train_json_reports_accuracy_digest_and_epochs_for_mlp(void **state) {
  scratch *s = *state;
  run *r =
      xfed_run(s, "--json", "train", "--spec", fx.mlp, "--data", fx.csv, "--threads", "1", NULL);
  /* 4 -> 16 -> 3 */
  check_train_report(s, r, 2, FEATURES * 16 + 16 + 16 * CLASSES + CLASSES);
}

static void epochs_flag_overrides_the_spec(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "--threads", "1", "--epochs",
                    "1", "--json", NULL);
  check_train_report(s, r, 1, FEATURES * CLASSES + CLASSES);
}

static void train_without_json_prints_a_summary_with_the_same_digest(void **state) {
  scratch *s = *state;
  const char *digest = train_digest(s, fx.logreg, "1");
  run *r = xfed_run(s, "train", "--spec", fx.logreg, "--data", fx.csv, "--threads", "1", NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "test accuracy", r);
  char line[128];
  snprintf(line, sizeof(line), "model digest   %s\n", digest);
  expect_in("stdout", r->out, line, r);
  expect_not_in("stdout", r->out, "epoch 1/", r);
  expect_in("stderr", r->err, "epoch 3/3", r);
}

static void diverged_training_still_prints_one_json_report_with_null_losses(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "diverge.json");
  assert_int_equal(
      write_file(spec,
                 "{\"name\": \"t\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},\n"
                 " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"
                 " \"local\": {\"epochs\": 2, \"lr\": 1e30}, \"seed\": 7}\n"),
      0);
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--threads", "1", "--json", NULL);
  expect_status(r, 0);
  expect_in("stderr", r->err, "nan", r);
  json_t *o = stdout_json(s, r);
  /* JSON has no nan: the figures that are not finite are null, the rest is there. */
  assert_true(json_is_null(json_object_get(o, "test_loss")));
  member_number(o, "test_accuracy");
  assert_true(is_digest_hex(member_string(o, "model_digest")));
  json_t *list = json_object_get(o, "epochs");
  assert_int_equal(json_array_size(list), 2);
  for (size_t i = 0; i < 2; i++) {
    json_t *ep = json_array_get(list, i);
    assert_int_equal(member_integer(ep, "epoch"), (json_int_t)i + 1);
    assert_true(json_is_null(json_object_get(ep, "train_loss")));
  }
}

/* A regression job trained with adamw reports R^2 as its accuracy, in
 * [0, 1] and high on data whose label follows the features; binary
 * cross-entropy on three classes is refused naming the loss. */
static void train_with_adamw_on_mse_reports_r_squared(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "mse.json");
  assert_int_equal(
      write_file(spec,
                 "{\"model\": {\"arch\": \"mlp\", \"hidden\": [16], \"loss\": \"mse\"},\n"
                 " \"local\": {\"epochs\": 5, \"batch_size\": 16, \"optimizer\": \"adamw\",\n"
                 "  \"lr\": 0.01, \"weight_decay\": 0.01}, \"seed\": 7}\n"),
      0);
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--threads", "1", NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "test R^2", r);
  r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--threads", "1", "--json", NULL);
  expect_status(r, 0);
  json_t *o = stdout_json(s, r);
  double acc = json_real_value(json_object_get(o, "test_accuracy"));
  if (!(acc > 0.5 && acc <= 1.0)) fail_msg("R^2 %g", acc);
  const char *bce = path_in(s, "bce.json");
  assert_int_equal(write_file(bce, "{\"model\": {\"arch\": \"logreg\", \"loss\": "
                                   "\"binary_cross_entropy\"}}\n"),
                   0);
  r = xfed_run(s, "train", "--spec", bce, "--data", fx.csv, "--threads", "1", NULL);
  expect_in("stderr", r->err, "binary_cross_entropy needs labels 0 and 1", r);
}

static void same_spec_seed_and_one_thread_give_the_same_model_digest(void **state) {
  scratch *s = *state;
  const char *a = train_digest(s, fx.mlp, "1");
  const char *b = train_digest(s, fx.mlp, "1");
  assert_string_equal(a, b);
  const char *l1 = train_digest(s, fx.logreg, "1");
  const char *l2 = train_digest(s, fx.logreg, "1");
  assert_string_equal(l1, l2);
  assert_string_not_equal(a, l1);
}

/* The mlp preset written out as model.layers trains to the same parameters:
 * one builder makes both. */
static void declared_mlp_trains_to_the_presets_model_digest(void **state) {
  scratch *s = *state;
  char path[700];
  snprintf(path, sizeof(path), "%s/declared-mlp.json", fx.root);
  assert_int_equal(
      write_file(path,
                 "{\"name\": \"cli-mlp\", \"model\": {\"layers\": [{\"kind\": \"flatten\"},\n"
                 " {\"kind\": \"dense\", \"units\": 16}, {\"kind\": \"relu\"},\n"
                 " {\"kind\": \"dense\", \"units\": 3}]},\n"
                 " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"
                 " \"local\": {\"epochs\": 2, \"batch_size\": 16, \"lr\": 0.1, \"momentum\": "
                 "0.5},\n"
                 " \"seed\": 7}\n"),
      0);
  const char *preset = train_digest(s, fx.mlp, "1");
  const char *declared = train_digest(s, path, "1");
  assert_string_equal(preset, declared);
}

static void different_seed_gives_a_different_model_digest(void **state) {
  scratch *s = *state;
  const char *a = train_digest(s, fx.mlp, "1");
  const char *b = train_digest(s, fx.mlp_seed8, "1");
  assert_string_not_equal(a, b);
}

static void two_threads_twice_give_the_same_model_digest(void **state) {
  scratch *s = *state;
  const char *a = train_digest(s, fx.mlp, "2");
  const char *b = train_digest(s, fx.mlp, "2");
  assert_string_equal(a, b);
}

static void saved_model_loads_and_matches_the_printed_digest(void **state) {
  scratch *s = *state;
  const char *file = path_in(s, "model.xfm");
  const char *blobs = path_in(s, "blobs");
  run *r = xfed_run(s, "train", "--spec", fx.mlp, "--data", fx.csv, "--threads", "1", "--save",
                    file, "--blobs", blobs, "--json", NULL);
  expect_status(r, 0);
  json_t *o = stdout_json(s, r);
  const char *digest = member_string(o, "model_digest");
  assert_string_equal(member_string(o, "saved"), file);

  xf_model *m = NULL;
  float *params = NULL;
  xf_errctx err = {0};
  if (xf_checkpoint_load_file(file, &m, &params, &err) != XF_OK) fail_msg("%s: %s", file, err.msg);
  size_t n = xf_model_num_params(m);
  assert_int_equal(n, (size_t)member_integer(o, "params"));
  xf_digest d;
  char hex[XF_DIGEST_HEX];
  xf_params_digest(params, n, &d);
  xf_digest_hex(&d, hex);
  xf_model_free(m);
  xf_free(params);
  assert_string_equal(hex, digest);

  /* The blob is stored under the digest of its bytes, as DIR/<2 hex>/<62 hex>,
   * and holds the same model. */
  const char *blob = member_string(o, "blob");
  assert_true(is_digest_hex(blob));
  char blob_path[1024];
  snprintf(blob_path, sizeof(blob_path), "%s/%.2s/%s", blobs, blob, blob + 2);
  struct stat st;
  if (stat(blob_path, &st) != 0) fail_msg("no blob file at %s", blob_path);
  xf_blob_store *store = NULL;
  xf_digest name;
  assert_int_equal(xf_digest_parse(blob, &name), XF_OK);
  assert_int_equal(xf_blob_store_open(blobs, &store, &err), XF_OK);
  xf_err rc = xf_checkpoint_load_blob(store, &name, &m, &params, &err);
  xf_blob_store_close(store);
  if (rc != XF_OK) fail_msg("blob %s: %s", blob, err.msg);
  xf_params_digest(params, xf_model_num_params(m), &d);
  xf_digest_hex(&d, hex);
  xf_model_free(m);
  xf_free(params);
  assert_string_equal(hex, digest);
}

/* ---- refused input ----------------------------------------------------------------- */

/* The centralized baseline reads model, local and seed: a spec with no
 * federated field (name, data, rounds, sites, deadlines, secure
 * aggregation) trains, and gives the same model as the same settings inside
 * a federated spec. */
static void train_needs_no_federated_fields(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "centralized.json");
  assert_int_equal(write_file(spec, "{\"model\": {\"arch\": \"logreg\"},\n"
                                    " \"local\": {\"epochs\": 3, \"batch_size\": 16, \"lr\": 0.1},"
                                    " \"seed\": 7}\n"),
                   0);
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--threads", "1", "--json", NULL);
  expect_status(r, 0);
  const char *digest = member_string(stdout_json(s, r), "model_digest");
  assert_string_equal(digest, train_digest(s, fx.logreg, "1"));
}

/* What the baseline does read is checked as strictly as for a federated
 * job, and so is a federated field that is given. */
static void train_refuses_bad_fields_of_a_spec_without_federated_fields(void **state) {
  scratch *s = *state;
  static const struct {
    const char *text, *field;
  } bad[] = {
      {"{\"model\": {\"arch\": \"logreg\"}, \"local\": {\"lr\": -1}}", "local.lr"},
      {"{\"model\": {\"arch\": \"logreg\"}, \"local\": {\"batch_size\": 0}}", "local.batch_size"},
      {"{\"model\": {\"arch\": \"mlp\"}}", "model.hidden"},
      {"{\"local\": {\"lr\": 0.1}}", "model"},
      {"{\"model\": {\"arch\": \"logreg\"}, \"rounds\": 0}", "rounds"},
      {"{\"model\": {\"arch\": \"logreg\"}, \"rounsd\": 3}", "rounsd"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    const char *spec = path_in(s, "bad.json");
    assert_int_equal(write_file(spec, bad[i].text), 0);
    run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--json", NULL);
    expect_status(r, 1);
    json_t *e = json_object_get(stdout_json(s, r), "error");
    assert_true(json_is_object(e));
    if (strcmp(member_string(e, "field"), bad[i].field) != 0) {
      xf_test_run_show(r);
      fail_msg("%s: field \"%s\", expected \"%s\"", bad[i].text, member_string(e, "field"),
               bad[i].field);
    }
  }
}

static void misspelt_spec_field_is_refused_naming_the_dotted_field(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "typo.json");
  assert_int_equal(write_file(spec,
                              "{\"name\": \"t\", \"model\": {\"arch\": \"logreg\"},\n"
                              " \"data\": {\"dataset\": \"tiny\"}, \"rounds\": 1,\n"
                              " \"local\": {\"epochs\": 1, \"lerning_rate\": 0.1}}\n"),
                   0);
  const char *model = path_in(s, "model.xfm");
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--save", model, NULL);
  expect_status(r, 1);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, spec, r);
  expect_in("stderr", r->err, "local.lerning_rate", r);
  expect_in("stderr", r->err, "\"lr\"", r);
  assert_int_equal(access(model, F_OK), -1);

  r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--json", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "local.lerning_rate", r);
  json_t *e = json_error_object(s, r, "XF_EFORMAT");
  assert_string_equal(member_string(e, "field"), "local.lerning_rate");
  assert_string_equal(member_string(e, "file"), spec);
}

static void spec_that_is_not_json_is_refused_with_its_line(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "broken.json");
  assert_int_equal(write_file(spec,
                              "{\"name\": \"t\",\n"
                              " \"model\": {\"arch\": \"logreg\"}\n"
                              " \"rounds\": 1}\n"),
                   0);
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, NULL);
  expect_status(r, 1);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, spec, r);
  expect_in("stderr", r->err, "line 3", r);

  r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--json", NULL);
  expect_status(r, 1);
  json_t *e = json_error_object(s, r, "XF_EFORMAT");
  const char *field = member_string(e, "field");
  if (strncmp(field, "line 3", 6) != 0) fail_msg("field is '%s', expected line 3", field);
  assert_string_equal(member_string(e, "file"), spec);
}

static void spec_that_does_not_exist_is_refused_naming_it(void **state) {
  scratch *s = *state;
  const char *spec = path_in(s, "absent.json");
  run *r = xfed_run(s, "train", "--spec", spec, "--data", fx.csv, "--json", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, spec, r);
  json_t *e = json_error_object(s, r, "XF_ENOENT");
  assert_string_equal(member_string(e, "file"), spec);
}

static void data_dir_with_neither_layout_is_refused_listing_what_it_looked_for(void **state) {
  scratch *s = *state;
  const char *dir = path_in(s, "nothing");
  assert_int_equal(mkdir(dir, 0755), 0);
  assert_int_equal(write_file(path_in(s, "nothing/readme.txt"), "not data\n"), 0);
  run *r = xfed_run(s, "train", "--spec", fx.logreg, "--data", dir, NULL);
  expect_status(r, 1);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, dir, r);
  expect_in("stderr", r->err, "train.csv", r);
  expect_in("stderr", r->err, "train-images-idx3-ubyte", r);

  r = xfed_run(s, "train", "--spec", fx.logreg, "--data", dir, "--json", NULL);
  expect_status(r, 1);
  json_t *e = json_error_object(s, r, "XF_ENOENT");
  assert_string_equal(member_string(e, "file"), dir);
}

static void csv_with_a_non_number_is_refused_with_file_line_and_column(void **state) {
  scratch *s = *state;
  const char *dir = path_in(s, "bad");
  assert_int_equal(mkdir(dir, 0755), 0);
  /* Line 1 is the header; line 17 holds 'abc' in column 2. */
  char text[4096] = "f1,f2,f3,f4,label\n";
  for (int line = 2; line <= 30; line++) {
    size_t used = strlen(text);
    snprintf(text + used, sizeof(text) - used, "%d.5,%s,0.25,-1,%d\n", line % 3,
             line == 17 ? "abc" : "1.0", line % 3);
  }
  const char *train = path_in(s, "bad/train.csv");
  assert_int_equal(write_file(train, text), 0);
  assert_int_equal(write_file(path_in(s, "bad/test.csv"), "f1,f2,f3,f4,label\n0,0,0,0,1\n"), 0);
  const char *model = path_in(s, "model.xfm");
  run *r = xfed_run(s, "train", "--spec", fx.logreg, "--data", dir, "--save", model, NULL);
  expect_status(r, 1);
  expect_empty("stdout", r->out_len, r);
  expect_in("stderr", r->err, train, r);
  expect_in("stderr", r->err, "line 17, column 2", r);
  expect_in("stderr", r->err, "'abc'", r);
  assert_int_equal(access(model, F_OK), -1);

  r = xfed_run(s, "train", "--spec", fx.logreg, "--data", dir, "--json", NULL);
  expect_status(r, 1);
  json_t *e = json_error_object(s, r, "XF_EFORMAT");
  assert_string_equal(member_string(e, "file"), train);
  assert_string_equal(member_string(e, "field"), "line 17, column 2");
}

/* ---- xfed data split ------------------------------------------------------------------ */

static void data_split_writes_a_manifest_and_shards_that_train_loads(void **state) {
  scratch *s = *state;
  const char *out = path_in(s, "shards");
  run *r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "iid",
                    "--seed", "1", "--out", out, "--json", NULL);
  expect_status(r, 0);
  json_t *printed = stdout_json(s, r);
  char manifest[1024];
  snprintf(manifest, sizeof(manifest), "%s/manifest.json", out);
  json_t *stored = load_json_file(s, manifest);
  assert_true(json_equal(printed, stored));
  assert_int_equal(member_integer(stored, "classes"), CLASSES);
  assert_int_equal(member_integer(stored, "train_records"), TRAIN_ROWS);
  json_t *sites = json_object_get(stored, "sites");
  assert_true(json_is_array(sites));
  assert_int_equal(json_array_size(sites), 3);
  assert_int_equal(count_entries(out), 4); /* manifest.json, site-1 .. site-3 */

  json_int_t train_total = 0, test_total = 0;
  for (int i = 1; i <= 3; i++) {
    char site[1024];
    snprintf(site, sizeof(site), "%s/site-%d", out, i);
    json_t *entry = json_array_get(sites, (size_t)i - 1);
    char name[16];
    snprintf(name, sizeof(name), "site-%d", i);
    assert_string_equal(member_string(entry, "name"), name);
    run *t = xfed_run(s, "train", "--spec", fx.logreg, "--data", site, "--threads", "1", "--epochs",
                      "1", "--json", NULL);
    expect_status(t, 0);
    json_t *o = stdout_json(s, t);
    assert_string_equal(member_string(o, "backend"), "cpu");
    /* Each shard keeps the federation's number of classes. */
    assert_int_equal(member_integer(o, "params"), FEATURES * CLASSES + CLASSES);
    char records[64];
    snprintf(records, sizeof(records), "data: %lld train and %lld test records",
             (long long)member_integer(entry, "train_records"),
             (long long)member_integer(entry, "test_records"));
    expect_in("stderr", t->err, records, t);
    train_total += member_integer(entry, "train_records");
    test_total += member_integer(entry, "test_records");
  }
  assert_int_equal(train_total, TRAIN_ROWS);
  assert_int_equal(test_total, TEST_ROWS);
}

static void data_split_with_the_same_seed_gives_identical_manifests(void **state) {
  scratch *s = *state;
  const char *seeds[] = {"1", "1", "2"};
  const char *outs[] = {path_in(s, "a"), path_in(s, "b"), path_in(s, "c")};
  for (int i = 0; i < 3; i++) {
    run *r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "iid",
                      "--seed", seeds[i], "--out", outs[i], NULL);
    expect_status(r, 0);
    expect_in("stdout", r->out, "manifest:", r);
  }
  char a[1024], b[1024], c[1024];
  snprintf(a, sizeof(a), "%s/manifest.json", outs[0]);
  snprintf(b, sizeof(b), "%s/manifest.json", outs[1]);
  assert_true(files_equal(a, b));
  snprintf(a, sizeof(a), "%s/site-2/train.csv", outs[0]);
  snprintf(b, sizeof(b), "%s/site-2/train.csv", outs[1]);
  snprintf(c, sizeof(c), "%s/site-2/train.csv", outs[2]);
  assert_true(files_equal(a, b));
  /* Another seed deals the shuffled records differently. */
  assert_false(files_equal(a, c));
}

static void data_split_refuses_a_non_empty_out_and_leaves_it_untouched(void **state) {
  scratch *s = *state;
  const char *out = path_in(s, "used");
  assert_int_equal(mkdir(out, 0755), 0);
  const char *keep = path_in(s, "used/keep.txt");
  assert_int_equal(write_file(keep, "results of an earlier run\n"), 0);
  run *r = xfed_run(s, "data", "split", "--data", fx.csv, "--sites", "3", "--scheme", "iid",
                    "--seed", "1", "--out", out, "--json", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, out, r);
  expect_in("stderr", r->err, "not empty", r);
  json_t *e = json_error_object(s, r, "XF_EEXISTS");
  assert_string_equal(member_string(e, "file"), out);
  assert_int_equal(count_entries(out), 1);
  size_t n;
  char *text = read_whole(keep, &n);
  bool same = n == strlen("results of an earlier run\n") &&
              memcmp(text, "results of an earlier run\n", n) == 0;
  free(text);
  assert_true(same);
  /* Nothing else appeared beside it: no temporary directory left over. */
  assert_int_equal(count_entries(s->dir), 1);
}

/* ---- xfed version ------------------------------------------------------------------- */

static bool is_version(const char *v) {
  int a, b, c, end = 0;
  return sscanf(v, "%d.%d.%d%n", &a, &b, &c, &end) == 3 && v[end] == '\0';
}

static void version_prints_the_version_and_backends(void **state) {
  scratch *s = *state;
  run *r = xfed_run(s, "version", NULL);
  expect_status(r, 0);
  expect_empty("stderr", r->err_len, r);
  if (strncmp(r->out, "xfed ", 5) != 0) {
    xf_test_run_show(r);
    fail_msg("%s: stdout does not start with \"xfed \"", r->line);
  }
  expect_in("stdout", r->out, "cpu", r);

  r = xfed_run(s, "version", "--json", NULL);
  expect_status(r, 0);
  json_t *o = stdout_json(s, r);
  const char *v = member_string(o, "version");
  if (!is_version(v)) fail_msg("version '%s' is not MAJOR.MINOR.PATCH", v);
  char text_line[128];
  snprintf(text_line, sizeof(text_line), "xfed %s ", v);
  expect_in("xfed version", s->runs[0].out, text_line, r);
  json_t *backends = json_object_get(o, "backends");
  assert_true(json_is_array(backends));
  assert_true(json_array_size(backends) >= 1);
  assert_string_equal(json_string_value(json_array_get(backends, 0)), "cpu");
}

/* ---- accuracy targets on Fashion-MNIST (label slow: run with --fmnist) ------ */

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Trains a deploy/ example spec on the real Fashion-MNIST on two threads and
 * returns its --json report (owned by s). */
static json_t *train_fmnist(scratch *s, const char *spec_name) {
  const char *src = getenv("XF_SOURCE_DIR");
  if (!src) fail_msg("XF_SOURCE_DIR is not set: run this test through ctest");
  char spec[1024];
  snprintf(spec, sizeof(spec), "%s/deploy/jobs/%s", src, spec_name);
  run *r = xfed_run(s, "train", "--spec", spec, "--data", FMNIST_DIR, "--threads", "2", "--json",
                    NULL);
  expect_status(r, 0);
  return stdout_json(s, r);
}

static bool fmnist_present(void) {
  if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) == 0) return true;
  print_message("skipped: %s is absent (apt-get install dataset-fashion-mnist)\n", FMNIST_DIR);
  return false;
}

/* Issue acceptance: PyTorch reached 88.2% with this model and these settings
 * on this kind of machine; xfed must reach at least 87.0%, and two runs with
 * the same spec, seed and threads must train the very same model. */
static void mlp_on_fashion_mnist_reaches_87_percent_and_repeats_its_digest(void **state) {
  scratch *s = *state;
  if (!fmnist_present()) skip();
  json_t *a = train_fmnist(s, "fmnist-mlp.json"), *b = train_fmnist(s, "fmnist-mlp.json");
  double acc = member_number(a, "test_accuracy");
  print_message("mlp test_accuracy %.4f\n", acc);
  assert_true(acc >= 0.870);
  assert_string_equal(member_string(a, "model_digest"), member_string(b, "model_digest"));
}

/* PyTorch reached 88.8% with lenet5; xfed must reach at least 87.5%. */
static void lenet5_on_fashion_mnist_reaches_87_5_percent(void **state) {
  scratch *s = *state;
  if (!fmnist_present()) skip();
  double acc = member_number(train_fmnist(s, "fmnist-lenet5.json"), "test_accuracy");
  print_message("lenet5 test_accuracy %.4f\n", acc);
  assert_true(acc >= 0.875);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, scratch_setup, scratch_teardown)

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--fmnist") == 0) {
    run_deadline_s = 900;
    const struct CMUnitTest slow[] = {
        T(mlp_on_fashion_mnist_reaches_87_percent_and_repeats_its_digest),
        T(lenet5_on_fashion_mnist_reaches_87_5_percent),
    };
    return cmocka_run_group_tests(slow, group_setup, group_teardown);
  }
  const struct CMUnitTest tests[] = {
      T(help_prints_usage_on_stdout_and_exits_0),
      T(help_after_other_flags_still_prints_usage),
      T(no_command_prints_usage_on_stderr_and_exits_2),
      T(unknown_noun_or_verb_exits_2_and_names_it),
      T(unknown_flag_exits_2_and_names_it),
      T(missing_required_flag_exits_2_and_names_it),
      T(flag_values_are_parsed_strictly),
      T(usage_error_with_json_prints_an_error_object),
      T(train_json_reports_accuracy_digest_and_epochs_for_logreg),
      T(train_json_reports_accuracy_digest_and_epochs_for_mlp),
      T(epochs_flag_overrides_the_spec),
      T(train_without_json_prints_a_summary_with_the_same_digest),
      T(diverged_training_still_prints_one_json_report_with_null_losses),
      T(same_spec_seed_and_one_thread_give_the_same_model_digest),
      T(train_with_adamw_on_mse_reports_r_squared),
      T(declared_mlp_trains_to_the_presets_model_digest),
      T(different_seed_gives_a_different_model_digest),
      T(two_threads_twice_give_the_same_model_digest),
      T(saved_model_loads_and_matches_the_printed_digest),
      T(train_needs_no_federated_fields),
      T(train_refuses_bad_fields_of_a_spec_without_federated_fields),
      T(misspelt_spec_field_is_refused_naming_the_dotted_field),
      T(spec_that_is_not_json_is_refused_with_its_line),
      T(spec_that_does_not_exist_is_refused_naming_it),
      T(data_dir_with_neither_layout_is_refused_listing_what_it_looked_for),
      T(csv_with_a_non_number_is_refused_with_file_line_and_column),
      T(data_split_writes_a_manifest_and_shards_that_train_loads),
      T(data_split_with_the_same_seed_gives_identical_manifests),
      T(data_split_refuses_a_non_empty_out_and_leaves_it_untouched),
      T(version_prints_the_version_and_backends),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
