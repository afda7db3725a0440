/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of `xfed-site`: the real binary run as an operator runs
 * it (fork and exec, stdout, stderr and exit status captured) on small CSV
 * datasets in a scratch directory, and on the real Fashion-MNIST when it is
 * installed. Covers help and usage errors, init and site.json, dataset add /
 * list / tag / budget / rm / verify, refused data, and config errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
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

#include <sqlite3.h>

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
/* A run that takes longer is killed and reported. */
#define RUN_DEADLINE_S 120

static char xfed_site[1024];
extern char **environ;

/* The group's federation, made once with the real `xfed pki`: fed holds
 * ca.crt, crl.pem and issued/eu-berlin.{crt,key}, the identity init takes. */
static struct {
  char root[512];
  char fed[600];
  char cert[700], key[700], ca[700], crl[700];
} pki;

/* ---- per test: a scratch directory with a site and a dataset ----------------- */

#define MAX_RUNS 24
#define MAX_JSON 16

/* One run of xfed-site (tests/support.h). */
typedef xf_test_run run;

typedef struct scratch {
  char dir[512];
  char site[600]; /* dir/site: the site directory (made by init in most tests) */
  char data[600]; /* dir/data: a valid CSV dataset */
  run runs[MAX_RUNS];
  int n_runs;
  json_t *json[MAX_JSON];
  int n_json;
} scratch;

static int write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  int ok = fputs(text, f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

static const char *path_in(const scratch *s, const char *name) {
  static char bufs[8][800];
  static int next;
  char *b = bufs[next++ % 8];
  snprintf(b, sizeof(bufs[0]), "%s/%s", s->dir, name);
  return b;
}

static int make_csv_dir(const char *dir) {
  char p[900];
  if (mkdir(dir, 0755) != 0) return -1;
  snprintf(p, sizeof(p), "%s/train.csv", dir);
  if (write_file(p, "a,b,label\n1,0,0\n0,1,1\n1,1,2\n2,0,0\n0,2,1\n2,2,2\n") != 0) return -1;
  snprintf(p, sizeof(p), "%s/test.csv", dir);
  return write_file(p, "a,b,label\n1,0,0\n0,1,1\n1,1,2\n");
}

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_site_cli: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(xfed_site, sizeof(xfed_site), "%s/site/xfed-site", build);
  if (access(xfed_site, X_OK) != 0) {
    fprintf(stderr, "test_site_cli: %s is not an executable: build xfed-site\n", xfed_site);
    return -1;
  }
  char xfed[1024];
  snprintf(xfed, sizeof(xfed), "%s/cli/xfed", build);
  if (xf_test_mkdtemp(pki.root, sizeof(pki.root), "site-cli-pki") != 0) return -1;
  snprintf(pki.fed, sizeof(pki.fed), "%s/fed", pki.root);
  snprintf(pki.cert, sizeof(pki.cert), "%s/issued/eu-berlin.crt", pki.fed);
  snprintf(pki.key, sizeof(pki.key), "%s/issued/eu-berlin.key", pki.fed);
  snprintf(pki.ca, sizeof(pki.ca), "%s/ca.crt", pki.fed);
  snprintf(pki.crl, sizeof(pki.crl), "%s/crl.pem", pki.fed);
  const char *const steps[][12] = {
      {"pki", "init", "--dir", pki.fed, "--federation", "acme"},
      {"pki", "issue", "--dir", pki.fed, "--kind", "site", "--region", "eu", "--name",
       "eu-berlin"},
  };
  for (size_t i = 0; i < 2; i++) {
    pid_t pid = fork();
    if (pid == 0) {
      const char *argv[14] = {"xfed"};
      for (size_t j = 0; steps[i][j]; j++) argv[j + 1] = steps[i][j];
      int devnull = open("/dev/null", O_WRONLY);
      if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
      execv(xfed, (char *const *)argv);
      _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_site_cli: `%s pki %s` failed (build the xfed target)\n", xfed,
              steps[i][1]);
      xf_test_remove_tree(pki.root);
      return -1;
    }
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(pki.root);
  return 0;
}

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "site-cli") != 0) {
    free(s);
    return -1;
  }
  snprintf(s->site, sizeof(s->site), "%s/site", s->dir);
  snprintf(s->data, sizeof(s->data), "%s/data", s->dir);
  if (make_csv_dir(s->data) != 0) {
    xf_test_remove_tree(s->dir);
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

/* ---- running xfed-site --------------------------------------------------------- */

/* Runs xfed-site with the arguments given (NULL-terminated), XFED_SITE_DIR
 * unset. The run belongs to s. */
static run *site_run(scratch *s, const char *arg, ...) {
  assert_true(s->n_runs < MAX_RUNS);
  run *r = &s->runs[s->n_runs++];
  xf_test_exec_opts o = {.path = xfed_site, .unset = "XFED_SITE_DIR",
                         .deadline_s = RUN_DEADLINE_S};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed-site", arg, ap);
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

static json_t *stdout_json(scratch *s, const run *r) {
  json_error_t je;
  json_t *j = json_loads(r->out, 0, &je);
  if (!j) {
    xf_test_run_show(r);
    fail_msg("%s: stdout is not one JSON document (%s)", r->line, je.text);
  }
  assert_true(s->n_json < MAX_JSON);
  s->json[s->n_json++] = j;
  assert_true(json_is_object(j));
  return j;
}

static const char *member_string(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("JSON member \"%s\" is missing or not a string", key);
  return json_string_value(v);
}

static json_int_t member_integer(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_integer(v)) fail_msg("JSON member \"%s\" is missing or not an integer", key);
  return json_integer_value(v);
}

static void init_site(scratch *s) {
  run *r = site_run(s, "init", "--dir", s->site, "--name", "eu-berlin", "--region", "eu",
                    "--coordinator", "agg-eu.example.org:7443", "--cert", pki.cert, "--key",
                    pki.key, "--ca", pki.ca, "--crl", pki.crl, NULL);
  expect_status(r, 0);
}

/* `dataset list --json` as an array. */
static json_t *listed(scratch *s) {
  run *r = site_run(s, "dataset", "list", "--dir", s->site, "--json", NULL);
  expect_status(r, 0);
  json_t *a = json_object_get(stdout_json(s, r), "datasets");
  assert_true(json_is_array(a));
  return a;
}

/* ---- help and usage --------------------------------------------------------------- */

static void help_works_everywhere_and_usage_errors_exit_2(void **state) {
  scratch *s = *state;
  run *r = site_run(s, "--help", NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "dataset verify", r);
  static const char *const cmds[][2] = {{"init", NULL},        {"dataset", "add"},
                                        {"dataset", "list"},   {"dataset", "rm"},
                                        {"dataset", "verify"}, {"dataset", "tag"},
                                        {"dataset", "budget"}, {"config", "show"}};
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
    r = cmds[i][1] ? site_run(s, cmds[i][0], cmds[i][1], "--help", NULL)
                   : site_run(s, cmds[i][0], "--help", NULL);
    expect_status(r, 0);
    expect_in("stdout", r->out, "usage: xfed-site", r);
  }
  r = site_run(s, "dataset", "--help", NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "verify", r);
  expect_status(site_run(s, NULL), 2);
  r = site_run(s, "dataset", "frobnicate", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "'frobnicate' is not a verb", r);
  r = site_run(s, "dataset", "add", "--dir", s->site, "--path", s->data, NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--name N is required", r);
  r = site_run(s, "dataset", "add", "--name", "x", "--path", s->data, "--budget", "-1", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--budget", r);
  r = site_run(s, "dataset", "add", "--name", "x", "--path", s->data, "--classification",
               "secret", "--json", NULL);
  expect_status(r, 2);
  json_t *e = json_object_get(stdout_json(s, r), "error");
  assert_string_equal(member_string(e, "code"), "XF_EUSAGE");
  r = site_run(s, "init", "--dir", s->site, "--name", "x", "--region", "eu", "--coordinator",
               "no-port", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--coordinator", r);
  r = site_run(s, "init", "--dir", s->site, "--name", "x", "--region", "eu", "--coordinator",
               "h:1", "--backend", "tpu", NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "--backend", r);
  assert_int_equal(access(s->site, F_OK), -1); /* nothing created */
}

/* ---- init and config ---------------------------------------------------------------- */

static void init_writes_a_private_site_json_and_the_database(void **state) {
  scratch *s = *state;
  init_site(s);
  struct stat sb;
  assert_int_equal(stat(path_in(s, "site/site.json"), &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(stat(path_in(s, "site/site.db"), &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  assert_int_equal(stat(s->site, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);

  /* Missing parent directories are made, private, as with mkdir -p. */
  const char *nested = path_in(s, "sites/eu/eu-paris");
  run *r = site_run(s, "init", "--dir", nested, "--name", "eu-paris", "--region", "eu",
                    "--coordinator", "agg-eu.example.org:7443", NULL);
  expect_status(r, 0);
  assert_int_equal(stat(path_in(s, "sites/eu/eu-paris/site.json"), &sb), 0);
  assert_int_equal(stat(path_in(s, "sites/eu"), &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0700);

  r = site_run(s, "config", "show", "--dir", s->site, "--json", NULL);
  expect_status(r, 0);
  json_t *c = stdout_json(s, r);
  assert_string_equal(member_string(c, "site"), "eu-berlin");
  assert_string_equal(member_string(c, "region"), "eu");
  assert_string_equal(member_string(c, "coordinator"), "agg-eu.example.org:7443");
  assert_string_equal(member_string(c, "cert"), pki.cert);
  assert_string_equal(member_string(c, "crl"), pki.crl);
  assert_string_equal(member_string(c, "backend"), "auto");
  assert_int_equal(member_integer(c, "threads"), 0);
  r = site_run(s, "config", "show", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "port 7443", r);

  /* A second init into the same directory is refused and changes nothing. */
  r = site_run(s, "init", "--dir", s->site, "--name", "other", "--region", "us",
               "--coordinator", "h:1", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "site.json", r);
  expect_in("stderr", r->err, "already", r);
  r = site_run(s, "config", "show", "--dir", s->site, "--json", NULL);
  assert_string_equal(member_string(stdout_json(s, r), "site"), "eu-berlin");
}

static void config_errors_name_the_file_and_field(void **state) {
  scratch *s = *state;
  init_site(s);
  const char *cfg = path_in(s, "site/site.json");
  static const char *const cases[][3] = {
      {"{\"site\":\"a\",\"region\":\"eu\",\"coordinator\":\"h:1\",\"cordinator\":\"h:2\"}",
       "cordinator", "unknown field"},
      {"{\"site\":\"a\",\"region\":\"eu\",\"coordinator\":\"h:1\",\"threads\":\"8\"}", "threads",
       "expected an integer"},
      {"{\"site\":\"a\",\"region\":\"eu\",\"coordinator\":\"h:99999\"}", "coordinator", "port"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(write_file(cfg, cases[i][0]), 0);
    run *r = site_run(s, "config", "show", "--dir", s->site, NULL);
    expect_status(r, 1);
    expect_in("stderr", r->err, cfg, r);
    expect_in("stderr", r->err, cases[i][1], r);
    expect_in("stderr", r->err, cases[i][2], r);
    /* Every command that needs the site reads it the same way. */
    r = site_run(s, "dataset", "list", "--dir", s->site, "--json", NULL);
    expect_status(r, 1);
    json_t *e = json_object_get(stdout_json(s, r), "error");
    assert_string_equal(member_string(e, "file"), cfg);
    assert_string_equal(member_string(e, "field"), cases[i][1]);
  }
  run *r = site_run(s, "dataset", "list", "--dir", path_in(s, "nowhere"), NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "xfed-site init", r);
}

/* Paths given to init relative to where it runs are stored absolute, so
 * they name the same files from the site directory the daemon reads them
 * against; a missing file, or one that is not what its flag says, is refused
 * at init with the flag and the path, and nothing is created. */
static void init_stores_identity_paths_absolute_and_refuses_wrong_files(void **state) {
  scratch *s = *state;
  run *r = &s->runs[s->n_runs++];
  xf_test_exec_opts o = {.path = xfed_site, .unset = "XFED_SITE_DIR", .cwd = pki.fed,
                         .deadline_s = RUN_DEADLINE_S};
  xf_test_exec(&o, r, "xfed-site", "init", "--dir", s->site, "--name", "eu-berlin", "--region",
               "eu", "--coordinator", "h:1", "--cert", "issued/eu-berlin.crt", "--key",
               "./issued/eu-berlin.key", "--ca", "ca.crt", "--crl", "crl.pem", NULL);
  expect_status(r, 0);
  r = site_run(s, "config", "show", "--dir", s->site, "--json", NULL);
  expect_status(r, 0);
  json_t *c = stdout_json(s, r);
  assert_string_equal(member_string(c, "cert"), pki.cert);
  assert_string_equal(member_string(c, "key"), pki.key);
  assert_string_equal(member_string(c, "ca"), pki.ca);
  assert_string_equal(member_string(c, "crl"), pki.crl);

  const char *other = path_in(s, "other");
  const char *missing = path_in(s, "nowhere.crt");
  const struct {
    const char *flag, *path, *says;
  } bad[] = {
      {"--cert", missing, "No such file"},
      {"--cert", pki.key, "not a PEM certificate"},
      {"--key", pki.crl, "--key"},
      {"--ca", pki.cert, "not a CA certificate"},
      {"--crl", pki.ca, "not a PEM CRL"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    r = site_run(s, "init", "--dir", other, "--name", "eu-berlin", "--region", "eu",
                 "--coordinator", "h:1", bad[i].flag, bad[i].path, NULL);
    expect_status(r, 1);
    expect_in("stderr", r->err, bad[i].flag, r);
    expect_in("stderr", r->err, bad[i].path, r);
    expect_in("stderr", r->err, bad[i].says, r);
    assert_int_equal(access(other, F_OK), -1);
  }
}

/* ---- datasets ----------------------------------------------------------------------- */

static void dataset_add_list_tag_budget_rm_round_trip(void **state) {
  scratch *s = *state;
  init_site(s);
  run *r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "clinic", "--path", s->data,
                    "--classification", "restricted", "--tag", "oncology", "--tag", "eu-only",
                    "--budget", "3.5", "--json", NULL);
  expect_status(r, 0);
  json_t *d = stdout_json(s, r);
  assert_string_equal(member_string(d, "name"), "clinic");
  assert_string_equal(member_string(d, "layout"), "csv");
  assert_string_equal(member_string(d, "classification"), "restricted");
  assert_int_equal(member_integer(d, "train_records"), 6);
  assert_int_equal(member_integer(d, "test_records"), 3);
  assert_int_equal(member_integer(d, "classes"), 3);
  assert_int_equal(strlen(member_string(d, "digest")), 64);
  assert_true(json_real_value(json_object_get(d, "budget_epsilon")) == 3.5);
  assert_int_equal(json_array_size(json_object_get(d, "tags")), 2);

  r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "plain", "--path", s->data, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "registered plain", r);
  json_t *all = listed(s);
  assert_int_equal(json_array_size(all), 2);
  json_t *plain = json_array_get(all, 1);
  assert_string_equal(member_string(plain, "classification"), "internal");
  assert_true(json_is_null(json_object_get(plain, "budget_epsilon")));

  r = site_run(s, "dataset", "list", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "eu-only,oncology", r);

  r = site_run(s, "dataset", "tag", "--dir", s->site, "--name", "plain", "--add", "imaging",
               "--json", NULL);
  expect_status(r, 0);
  assert_int_equal(json_array_size(json_object_get(stdout_json(s, r), "tags")), 1);
  r = site_run(s, "dataset", "tag", "--dir", s->site, "--name", "plain", "--remove", "nope", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "nope", r);
  r = site_run(s, "dataset", "budget", "--dir", s->site, "--name", "plain", "--epsilon", "1",
               "--json", NULL);
  expect_status(r, 0);
  assert_true(json_real_value(json_object_get(stdout_json(s, r), "budget_epsilon")) == 1.0);
  r = site_run(s, "dataset", "budget", "--dir", s->site, "--name", "plain", "--clear", NULL);
  expect_status(r, 0);

  r = site_run(s, "dataset", "rm", "--dir", s->site, "--name", "clinic", NULL);
  expect_status(r, 0);
  r = site_run(s, "dataset", "rm", "--dir", s->site, "--name", "clinic", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "no dataset 'clinic'", r);
  all = listed(s);
  assert_int_equal(json_array_size(all), 1);
  assert_string_equal(member_string(json_array_get(all, 0), "name"), "plain");
  assert_int_equal(access(path_in(s, "data/train.csv"), R_OK), 0);
}

static void invalid_data_is_refused_with_the_loaders_message(void **state) {
  scratch *s = *state;
  init_site(s);
  const char *bad = path_in(s, "bad");
  assert_int_equal(make_csv_dir(bad), 0);
  char test_csv[900];
  snprintf(test_csv, sizeof(test_csv), "%s/test.csv", bad);
  assert_int_equal(write_file(test_csv, "a,b,label\n1,0,0\n0,oops,1\n"), 0);
  run *r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "bad", "--path", bad, NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, test_csv, r);
  expect_in("stderr", r->err, "line 3", r);
  expect_in("stderr", r->err, "'oops' is not a number", r);
  assert_int_equal(json_array_size(listed(s)), 0);

  r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "ok", "--path", s->data, NULL);
  expect_status(r, 0);
  r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "ok", "--path", s->data, NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "already registered", r);
  assert_int_equal(json_array_size(listed(s)), 1);
}

static void verify_finds_a_modified_and_a_missing_file(void **state) {
  scratch *s = *state;
  init_site(s);
  const char *other = path_in(s, "other");
  assert_int_equal(make_csv_dir(other), 0);
  expect_status(
      site_run(s, "dataset", "add", "--dir", s->site, "--name", "a", "--path", s->data, NULL), 0);
  expect_status(
      site_run(s, "dataset", "add", "--dir", s->site, "--name", "b", "--path", other, NULL), 0);
  run *r = site_run(s, "dataset", "verify", "--dir", s->site, NULL);
  expect_status(r, 0);

  char p[900];
  snprintf(p, sizeof(p), "%s/train.csv", s->data);
  assert_int_equal(write_file(p, "a,b,label\n1,0,0\n0,1,1\n1,1,2\n2,0,0\n0,2,1\n2,2,1\n"), 0);
  snprintf(p, sizeof(p), "%s/test.csv", other);
  assert_int_equal(unlink(p), 0);
  r = site_run(s, "dataset", "verify", "--dir", s->site, "--json", NULL);
  expect_status(r, 1);
  json_t *v = stdout_json(s, r);
  assert_true(json_is_false(json_object_get(v, "ok")));
  json_t *ds = json_object_get(v, "datasets");
  assert_int_equal(json_array_size(ds), 2);
  assert_string_equal(member_string(json_array_get(ds, 0), "state"), "changed");
  assert_string_equal(member_string(json_array_get(ds, 1), "state"), "missing");
  assert_non_null(strstr(member_string(json_array_get(ds, 1), "detail"), "test.csv"));
  r = site_run(s, "dataset", "verify", "--dir", s->site, NULL);
  expect_status(r, 1);
  expect_in("stdout", r->out, "changed", r);
  expect_in("stdout", r->out, "missing", r);
  expect_in("stderr", r->err, "2 of 2", r);
}

static void fashion_mnist_registers_with_its_real_shape(void **state) {
  scratch *s = *state;
  if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0 &&
      access(FMNIST_DIR "/train-images-idx3-ubyte", R_OK) != 0) {
    print_message("skipped: %s is absent (apt-get install dataset-fashion-mnist)\n", FMNIST_DIR);
    skip();
  }
  init_site(s);
  run *r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "fashion-mnist", "--path",
                    FMNIST_DIR, "--classification", "public", "--tag", "demo", "--json", NULL);
  expect_status(r, 0);
  json_t *d = stdout_json(s, r);
  assert_string_equal(member_string(d, "layout"), "idx");
  assert_int_equal(member_integer(d, "train_records"), 60000);
  assert_int_equal(member_integer(d, "test_records"), 10000);
  assert_int_equal(member_integer(d, "classes"), 10);
  assert_int_equal(member_integer(d, "features"), 784);
  expect_status(site_run(s, "dataset", "verify", "--dir", s->site, "--name", "fashion-mnist",
                         NULL),
                0);
}

/* ---- the site's own policy and audit trail ------------------------------------------ */

#define GOOD_POLICY                                                                  \
  "{\"regions\": [{\"name\": \"eu\"}, {\"name\": \"us\"}],"                          \
  " \"sites\": [{\"name\": \"eu-berlin\", \"region\": \"eu\"}],"                     \
  " \"datasets\": [{\"name\": \"tiny\", \"site\": \"eu-berlin\","                      \
  " \"classification\": \"public\", \"tags\": []}],"                                   \
  " \"rules\": [{\"id\": \"eu-agg\", \"effect\": \"allow\", \"kind\":"                 \
  " \"regional_aggregate\", \"destinations\": [\"us\"], \"conditions\":"               \
  " {\"min_cohort\": 2}}]}"

static void policy_import_refuses_a_malformed_document_naming_the_member(void **state) {
  scratch *s = *state;
  init_site(s);
  char good[700], bad[700];
  snprintf(good, sizeof(good), "%s", path_in(s, "good.json"));
  snprintf(bad, sizeof(bad), "%s", path_in(s, "bad.json"));
  assert_int_equal(write_file(good, GOOD_POLICY), 0);
  char *text = strdup(GOOD_POLICY);
  memcpy(strstr(text, "\"regional_aggregate\""), "\"regional_aggregat!\"", 20);
  assert_int_equal(write_file(bad, text), 0);
  free(text);

  run *r = site_run(s, "policy", "import", good, "--dir", s->site, NULL);
  expect_status(r, 2); /* no --reason */
  expect_in("stderr", r->err, "--reason", r);
  r = site_run(s, "policy", "import", good, "--dir", s->site, "--reason", "DPO rules",
               "--author", "ops", "--json", NULL);
  expect_status(r, 0);
  assert_int_equal(member_integer(stdout_json(s, r), "version"), 1);

  r = site_run(s, "policy", "import", bad, "--dir", s->site, "--reason", "typo", "--author",
               "ops", NULL);
  expect_status(r, 1);
  expect_in("stderr", r->err, "rules[0].kind", r);
  r = site_run(s, "policy", "log", "--dir", s->site, "--json", NULL);
  expect_status(r, 0);
  json_t *versions = json_object_get(stdout_json(s, r), "versions");
  assert_int_equal(json_array_size(versions), 1);
  assert_string_equal(member_string(json_array_get(versions, 0), "author"), "ops");
  r = site_run(s, "policy", "export", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "\"regional_aggregate\"", r);
  r = site_run(s, "policy", "rules", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "eu-agg: allow regional_aggregate -> us min_cohort=2", r);

  /* The change is on the trail, which checks out. */
  r = site_run(s, "audit", "list", "--dir", s->site, "--json", NULL);
  expect_status(r, 0);
  json_t *rows = json_object_get(stdout_json(s, r), "rows");
  assert_int_equal(json_array_size(rows), 1);
  assert_string_equal(member_string(json_array_get(rows, 0), "kind"), "policy_change");
  assert_string_equal(member_string(json_array_get(rows, 0), "actor"), "ops");
  r = site_run(s, "audit", "verify", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "intact", r);
}

static void audit_verify_names_the_first_tampered_row(void **state) {
  scratch *s = *state;
  init_site(s);
  char good[700];
  snprintf(good, sizeof(good), "%s", path_in(s, "good.json"));
  assert_int_equal(write_file(good, GOOD_POLICY), 0);
  for (int i = 0; i < 3; i++)
    expect_status(site_run(s, "policy", "import", good, "--dir", s->site, "--reason", "again",
                           "--author", "ops", NULL),
                  0);
  /* Someone who can write the file edits row 2 behind the triggers. */
  char db[700];
  snprintf(db, sizeof(db), "%s/site.db", s->site);
  sqlite3 *h = NULL;
  assert_int_equal(sqlite3_open(db, &h), SQLITE_OK);
  assert_int_equal(sqlite3_exec(h, "DROP TRIGGER audit_no_update; UPDATE audit SET actor = "
                                   "'mallory' WHERE seq = 2;", NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(h);
  run *r = site_run(s, "audit", "verify", "--dir", s->site, NULL);
  expect_status(r, 1);
  expect_in("stdout", r->out, "row 2", r);
  r = site_run(s, "audit", "export", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "mallory", r);
}

/* "-", "-x" and "_x" are names no job spec or policy can write. */
static void dataset_add_refuses_names_no_job_can_name(void **state) {
  scratch *s = *state;
  init_site(s);
  static const char *const bad[] = {"--name=-", "--name=-x", "--name=_x"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    run *r = site_run(s, "dataset", "add", "--dir", s->site, bad[i], "--path", s->data, NULL);
    expect_status(r, 2);
    expect_in("stderr", r->err, bad[i] + strlen("--name="), r);
    expect_in("stderr", r->err, "starting with a letter or digit", r);
  }
  run *r = site_run(s, "dataset", "add", "--dir", s->site, "--name", "x", "--tag=_t", "--path",
                    s->data, NULL);
  expect_status(r, 2);
  expect_in("stderr", r->err, "'_t' is not a valid tag", r);
  r = site_run(s, "dataset", "list", "--dir", s->site, NULL);
  expect_status(r, 0);
  expect_in("stdout", r->out, "no datasets registered", r);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, scratch_setup, scratch_teardown)

int main(void) {
  const struct CMUnitTest tests[] = {
      T(help_works_everywhere_and_usage_errors_exit_2),
      T(init_writes_a_private_site_json_and_the_database),
      T(init_stores_identity_paths_absolute_and_refuses_wrong_files),
      T(config_errors_name_the_file_and_field),
      T(dataset_add_list_tag_budget_rm_round_trip),
      T(dataset_add_refuses_names_no_job_can_name),
      T(invalid_data_is_refused_with_the_loaders_message),
      T(verify_finds_a_modified_and_a_missing_file),
      T(fashion_mnist_registers_with_its_real_shape),
      T(policy_import_refuses_a_malformed_document_naming_the_member),
      T(audit_verify_names_the_first_tampered_row),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
