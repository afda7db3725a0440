/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of `xfed pki`: the real binary run as a federation admin
 * runs it (fork and exec, stdout and stderr captured to files, exit status
 * checked) in a scratch directory: help, the init/issue/revoke/show/crl flow
 * with --json, usage errors (exit 2) and refused operations (exit 1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


/* A run of xfed that takes longer than this is killed and reported. */
#define RUN_DEADLINE_S 60

static struct {
  char xfed[1024];
  char root[512];
} fx;

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_cli_pki: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.xfed, sizeof(fx.xfed), "%s/cli/xfed", build);
  if (access(fx.xfed, X_OK) != 0) {
    fprintf(stderr, "test_cli_pki: %s is not an executable: build the xfed target\n", fx.xfed);
    return -1;
  }
  return xf_test_mkdtemp(fx.root, sizeof(fx.root), "cli-pki");
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(fx.root);
  return 0;
}

/* ---- running xfed ------------------------------------------------------------ */

/* One run of xfed (tests/support.h). */
typedef xf_test_run run;

/* Runs xfed in dir with the NULL-terminated arguments; r is refilled (its
 * previous output freed). */
static void xfed(run *r, const char *dir, const char *arg, ...) {
  xf_test_exec_opts o = {.path = fx.xfed, .cwd = dir, .deadline_s = RUN_DEADLINE_S};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
}

static void expect(const run *r, int status, const char *out_has, const char *err_has) {
  if (r->status != status || (out_has && !strstr(r->out, out_has)) ||
      (err_has && !strstr(r->err, err_has))) {
    xf_test_run_show(r);
    fail_msg("%s: expected exit %d%s%s%s%s", r->line, status, out_has ? ", stdout with " : "",
             out_has ? out_has : "", err_has ? ", stderr with " : "", err_has ? err_has : "");
  }
}

/* stdout as one JSON object; the caller frees it. */
static json_t *out_json(const run *r) {
  json_error_t je;
  json_t *j = json_loads(r->out, 0, &je);
  if (!json_is_object(j)) {
    xf_test_run_show(r);
    fail_msg("%s: stdout is not one JSON object (%s)", r->line, je.text);
  }
  return j;
}

static const char *str(json_t *o, const char *key) {
  json_t *v = json_object_get(o, key);
  if (!json_is_string(v)) fail_msg("JSON member \"%s\" is missing or not a string", key);
  return json_string_value(v);
}

static void scratch(char *dir, size_t n, const char *name) {
  snprintf(dir, n, "%s/%s", fx.root, name);
  assert_int_equal(mkdir(dir, 0700), 0);
}

static mode_t mode_of(const char *dir, const char *file) {
  char path[1024];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", dir, file);
  assert_int_equal(stat(path, &st), 0);
  return st.st_mode & 07777;
}

/* ---- tests ------------------------------------------------------------------- */

static void help_lists_the_pki_verbs_and_their_options(void **state) {
  (void)state;
  run *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  xfed(r, fx.root, "pki", "--help", NULL);
  expect(r, 0, "issue", NULL);
  static const char *const verbs[] = {"init", "issue", "revoke", "show", "crl"};
  for (size_t i = 0; i < 5; i++) assert_non_null(strstr(r->out, verbs[i]));
  xfed(r, fx.root, "pki", "issue", "--help", NULL);
  expect(r, 0, "spiffe://FED/region/R/site/N", NULL);
  assert_non_null(strstr(r->out, "--force"));
  xfed(r, fx.root, "--help", NULL);
  expect(r, 0, "pki issue", NULL);
  xf_test_run_free(r);
  free(r);
}

static void admin_flow_init_issue_revoke_show_crl(void **state) {
  (void)state;
  char dir[600], fed[700];
  scratch(dir, sizeof(dir), "flow");
  snprintf(fed, sizeof(fed), "%s/federation", dir);
  run *r = calloc(1, sizeof(*r));
  assert_non_null(r);

  xfed(r, dir, "pki", "init", "--federation", "acme", "--json", NULL);
  expect(r, 0, NULL, NULL);
  json_t *j = out_json(r);
  assert_string_equal(str(j, "spiffe_id"), "spiffe://acme");
  assert_string_equal(str(j, "ca_key"), "./federation/ca.key");
  json_decref(j);
  assert_int_equal(mode_of(fed, "ca.key"), 0600);
  assert_int_equal(mode_of(fed, "ca.crt"), 0644);

  xfed(r, dir, "pki", "issue", "--kind", "site", "--region", "eu", "--name", "eu-berlin",
       "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  assert_string_equal(str(j, "spiffe_id"), "spiffe://acme/region/eu/site/eu-berlin");
  assert_string_equal(str(j, "status"), "valid");
  assert_string_equal(str(j, "key"), "./federation/issued/eu-berlin.key");
  json_decref(j);
  assert_int_equal(mode_of(fed, "issued/eu-berlin.key"), 0600);

  xfed(r, dir, "pki", "issue", "--kind", "coordinator", "--name", "global", NULL);
  expect(r, 0, "spiffe://acme/coordinator/global", NULL);
  xfed(r, dir, "pki", "issue", "--kind", "coordinator", "--region", "eu", "--name", "agg-eu",
       NULL);
  expect(r, 0, "spiffe://acme/region/eu/coordinator/agg-eu", NULL);
  xfed(r, dir, "pki", "issue", "--kind", "user", "--name", "alice", "--role", "researcher",
       "--days", "30", NULL);
  expect(r, 0, "spiffe://acme/user/alice/role/researcher", NULL);
  /* Private keys never reach stdout or stderr. */
  assert_null(strstr(r->out, "PRIVATE KEY"));
  assert_null(strstr(r->err, "PRIVATE KEY"));

  xfed(r, dir, "pki", "revoke", "--name", "alice", "--reason", "key-compromise", "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  assert_string_equal(str(j, "status"), "revoked");
  assert_string_equal(str(j, "reason"), "key-compromise");
  json_decref(j);

  xfed(r, dir, "pki", "issue", "--kind", "site", "--region", "eu", "--name", "eu-berlin", NULL);
  expect(r, 1, NULL, "--force");
  xfed(r, dir, "pki", "issue", "--kind", "site", "--region", "eu", "--name", "eu-berlin",
       "--force", NULL);
  expect(r, 0, NULL, "revoked the previous certificate");

  xfed(r, dir, "pki", "show", "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  assert_string_equal(str(j, "federation"), "acme");
  json_t *ids = json_object_get(j, "identities");
  assert_int_equal(json_array_size(ids), 5);
  int revoked = 0;
  for (size_t i = 0; i < json_array_size(ids); i++)
    revoked += json_is_true(json_object_get(json_array_get(ids, i), "revoked"));
  assert_int_equal(revoked, 2);
  json_decref(j);

  xfed(r, dir, "pki", "show", NULL);
  expect(r, 0, "revoked key-compromise", NULL);
  assert_non_null(strstr(r->out, "revoked superseded"));
  xfed(r, dir, "pki", "show", "--name", "eu-berlin", NULL);
  expect(r, 0, "sha256", NULL);
  xfed(r, dir, "pki", "show", "--name", "nobody", NULL);
  expect(r, 1, NULL, "no identity 'nobody'");

  xfed(r, dir, "pki", "crl", "--days", "60", "--json", NULL);
  expect(r, 0, NULL, NULL);
  j = out_json(r);
  json_t *revoked_n = json_object_get(j, "revoked");
  assert_int_equal(json_integer_value(revoked_n), 2);
  json_decref(j);

  /* --dir works from anywhere. */
  xfed(r, fx.root, "pki", "show", "--dir", fed, NULL);
  expect(r, 0, "eu-berlin", NULL);
  xf_test_run_free(r);
  free(r);
}

static void usage_errors_exit_2_naming_the_flag(void **state) {
  (void)state;
  char dir[600];
  scratch(dir, sizeof(dir), "usage");
  run *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  xfed(r, dir, "pki", "init", "--federation", "acme", NULL);
  expect(r, 0, NULL, NULL);
  static const struct {
    const char *args[11];
    const char *why;
  } cases[] = {
      {{"pki", "init"}, "--federation FED is required"},
      {{"pki", "init", "--federation", "Acme"}, "must be lowercase"},
      {{"pki", "issue", "--name", "s1"}, "--kind"},
      {{"pki", "issue", "--kind", "robot", "--name", "s1"}, "kind 'robot'"},
      {{"pki", "issue", "--kind", "site", "--name", "s1"}, "a site needs --region"},
      {{"pki", "issue", "--kind", "site", "--region", "eu", "--name", "S_1"}, "--name 'S_1'"},
      {{"pki", "issue", "--kind", "user", "--name", "u1"}, "a user needs --role"},
      {{"pki", "issue", "--kind", "user", "--name", "u1", "--role", "root"}, "role 'root'"},
      {{"pki", "issue", "--kind", "site", "--region", "eu", "--name", "s1", "--days", "0"},
       "--days '0'"},
      {{"pki", "revoke"}, "--name N is required"},
      {{"pki", "revoke", "--name", "s1", "--reason", "oops"}, "reason 'oops'"},
      {{"pki", "show", "--bogus"}, "unknown option '--bogus'"},
      {{"pki", "sign"}, "'sign' is not a verb of 'pki'"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const char *const *a = cases[i].args;
    xfed(r, dir, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], NULL);
    expect(r, 2, NULL, cases[i].why);
  }
  /* With --json the usage error is also an object on stdout. */
  xfed(r, dir, "pki", "issue", "--kind", "site", "--name", "s1", "--json", NULL);
  expect(r, 2, NULL, NULL);
  json_t *j = out_json(r);
  assert_string_equal(str(json_object_get(j, "error"), "code"), "XF_EUSAGE");
  json_decref(j);
  xf_test_run_free(r);
  free(r);
}

static void refused_operations_exit_1_and_say_what_to_do(void **state) {
  (void)state;
  char dir[600], key[800];
  scratch(dir, sizeof(dir), "refused");
  run *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  xfed(r, dir, "pki", "show", NULL);
  expect(r, 1, NULL, "xfed pki init");
  xfed(r, dir, "pki", "init", "--federation", "acme", "--dir", "fed", NULL);
  expect(r, 0, NULL, NULL);
  xfed(r, dir, "pki", "init", "--federation", "acme", "--dir", "fed", "--json", NULL);
  expect(r, 1, NULL, "already holds a federation CA");
  json_t *j = out_json(r);
  assert_string_equal(str(json_object_get(j, "error"), "code"), "XF_EEXISTS");
  json_decref(j);
  xfed(r, dir, "pki", "revoke", "--name", "ghost", "--dir", "fed", NULL);
  expect(r, 1, NULL, "no identity 'ghost'");
  snprintf(key, sizeof(key), "%s/fed/ca.key", dir);
  assert_int_equal(chmod(key, 0644), 0);
  xfed(r, dir, "pki", "issue", "--kind", "site", "--region", "eu", "--name", "s1", "--dir",
       "fed", NULL);
  expect(r, 1, NULL, "chmod 600");
  assert_int_equal(chmod(key, 0600), 0);
  xfed(r, dir, "pki", "issue", "--kind", "site", "--region", "eu", "--name", "s1", "--dir",
       "fed", NULL);
  expect(r, 0, NULL, NULL);
  xf_test_run_free(r);
  free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(help_lists_the_pki_verbs_and_their_options),
      cmocka_unit_test(admin_flow_init_issue_revoke_show_crl),
      cmocka_unit_test(usage_errors_exit_2_naming_the_flag),
      cmocka_unit_test(refused_operations_exit_1_and_say_what_to_do),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
