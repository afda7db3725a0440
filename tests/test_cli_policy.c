/* SPDX-License-Identifier: Apache-2.0 */
/* Integration tests of `xfed policy` and `xfed audit` on local databases: the
 * real binary (fork and exec, stdout, stderr and exit status captured) builds
 * the quickstart policy change by change, checks jobs, runs test cases, reads
 * log and diff, round-trips export and import, and verifies an audit trail
 * before and after a row is edited behind its back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/audit.h"

extern char **environ;

static struct {
  char xfed[1024];
  char root[512];
} fx;

#define MAX_RUNS 64

typedef struct scratch {
  char dir[700];
  xf_test_run runs[MAX_RUNS];
  int n_runs;
} scratch;

static int group_setup(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build || !*build) {
    fprintf(stderr, "test_cli_policy: XF_BUILD_DIR is not set; run it through ctest\n");
    return -1;
  }
  snprintf(fx.xfed, sizeof(fx.xfed), "%s/cli/xfed", build);
  if (access(fx.xfed, X_OK) != 0) return -1;
  return xf_test_mkdtemp(fx.root, sizeof(fx.root), "clipol");
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(fx.root);
  return 0;
}

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s) return -1;
  /* One directory per test, inside the group's own. */
  static int tests;
  snprintf(s->dir, sizeof(s->dir), "%s/t%d", fx.root, ++tests);
  if (mkdir(s->dir, 0700) != 0) {
    free(s);
    return -1;
  }
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  for (int i = 0; i < s->n_runs; i++) xf_test_run_free(&s->runs[i]);
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

static xf_test_run *xfed_run(scratch *s, const char *arg, ...) {
  assert_true(s->n_runs < MAX_RUNS);
  xf_test_run *r = &s->runs[s->n_runs++];
  xf_test_exec_opts o = {.path = fx.xfed, .env = environ, .deadline_s = 60};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
  return r;
}

static void expect_status(const xf_test_run *r, int want) {
  if (r->status != want) {
    xf_test_run_show(r);
    fail_msg("%s: exit status %d, expected %d", r->line, r->status, want);
  }
}

static void expect_in(const char *text, const char *needle, const xf_test_run *r) {
  if (!strstr(text, needle)) {
    xf_test_run_show(r);
    fail_msg("%s: output does not mention \"%s\"", r->line, needle);
  }
}

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  assert_true(fputs(text, f) >= 0);
  assert_int_equal(fclose(f), 0);
}

/* A change with author and reason; expects it to succeed. */
#define CHANGE(s, db, ...)                                                                    \
  expect_status(xfed_run((s), "policy", __VA_ARGS__, "--db", (db), "--author", "carol",        \
                         "--reason", "quickstart", NULL),                                     \
                0)

static const char *EU_RULE =
    "{\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
    " \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"],"
    " \"conditions\": {\"max_epsilon\": 3, \"min_cohort\": 2, \"require_secagg\": true}}";

static const char *AP_RULE =
    "{\"id\": \"ap-direct\", \"effect\": \"allow\", \"kind\": \"update\","
    " \"select\": {\"region\": \"ap\"}, \"destinations\": [\"us\"]}";

/* The PRODUCT.md quickstart: regions eu, us, ap with two sites each, dataset
 * fmnist at every site; EU updates leave only as a securely aggregated DP
 * regional aggregate of >= 2 sites, AP updates may go straight to us. */
static void build_quickstart(scratch *s, const char *db) {
  static const char *regions[][2] = {{"eu", "EU GDPR"}, {"us", "US"}, {"ap", "APAC"}};
  for (int i = 0; i < 3; i++)
    CHANGE(s, db, "region", "add", "--name", regions[i][0], "--jurisdiction", regions[i][1]);
  for (int i = 0; i < 3; i++)
    for (int k = 1; k <= 2; k++) {
      char site[16];
      snprintf(site, sizeof(site), "%s-%d", regions[i][0], k);
      CHANGE(s, db, "site", "add", "--name", site, "--region", regions[i][0]);
      CHANGE(s, db, "dataset", "add", "--site", site, "--name", "fmnist", "--class",
             i == 0 ? "confidential" : "internal");
      CHANGE(s, db, "dataset", "tag", "--site", site, "--name", "fmnist", "--tag", "fmnist");
    }
  CHANGE(s, db, "rule", "add", "--json-rule", EU_RULE);
  const char *rule_file = path_in(s, "ap-rule.json");
  write_file(rule_file, AP_RULE);
  CHANGE(s, db, "rule", "add", "--file", rule_file);
}

/* 3 regions + 6 sites + 6 datasets + 6 tags + 2 rules */
#define QUICKSTART_VERSIONS "23"

#define JOB_HEAD                                                                              \
  "{\"name\": \"qs\", \"model\": {\"arch\": \"mlp\", \"hidden\": [16]},\n"                     \
  " \"data\": {\"dataset\": \"fmnist\", \"tags\": [\"fmnist\"]}, \"rounds\": 2,\n"             \
  " \"min_sites\": 6, \"local\": {\"epochs\": 1, \"batch_size\": 16, \"lr\": 0.1},\n"

static void policy_check_refuses_then_allows_with_secagg_and_dp(void **state) {
  scratch *s = *state;
  const char *db = path_in(s, "policy.db");
  build_quickstart(s, db);
  const char *plain = path_in(s, "plain.json");
  write_file(plain, JOB_HEAD " \"seed\": 1}\n");
  xf_test_run *r =
      xfed_run(s, "policy", "check", plain, "--db", db, "--coordinator-region", "us", NULL);
  expect_status(r, 3);
  expect_in(r->out, "NOT allowed", r);
  expect_in(r->out, "eu-regional", r);
  expect_in(r->out, "suggestions:", r);
  expect_in(r->out, "secure aggregation", r);
  expect_in(r->out, "epsilon <= 3", r);

  /* Central noise is added at the coordinator, after the EU's aggregate has
   * left its region: the policy's max_epsilon on that aggregate is not met
   * on the way, and check says so (the job could not run as composed). */
  const char *central = path_in(s, "central.json");
  write_file(central, JOB_HEAD
             " \"privacy\": {\"unit\": \"site\", \"mode\": \"central\", \"clip\": 1,"
             " \"target_epsilon\": 2.5},\n"
             " \"secure_aggregation\": {\"enabled\": true}, \"seed\": 1}\n");
  r = xfed_run(s, "policy", "check", central, "--db", db, "--coordinator-region", "us", NULL);
  expect_status(r, 3);
  expect_in(r->out, "the rules allow 6 of 6 sites", r);
  expect_in(r->out, "this job cannot run as composed", r);
  expect_in(r->out, "after it has left", r);
  expect_in(r->out, "\"distributed\"", r);

  const char *safe = path_in(s, "safe.json");
  write_file(safe, JOB_HEAD
             " \"privacy\": {\"unit\": \"site\", \"mode\": \"distributed\", \"clip\": 1,"
             " \"target_epsilon\": 2.5},\n"
             " \"secure_aggregation\": {\"enabled\": true}, \"seed\": 1}\n");
  r = xfed_run(s, "policy", "check", safe, "--db", db, "--coordinator-region", "us", NULL);
  expect_status(r, 0);
  expect_in(r->out, "the rules allow 6 of 6 sites", r);
  expect_in(r->out, "regional", r);
  expect_in(r->out, "verdict: runs", r);

  /* --epsilon overrides the spec's target: above max_epsilon, EU drops out. */
  r = xfed_run(s, "policy", "check", safe, "--db", db, "--coordinator-region", "us",
               "--epsilon", "5", "--json", NULL);
  expect_status(r, 3);
  expect_in(r->out, "\"allowed\": false", r);

  /* A coordinator region the policy does not know is an error, not a denial. */
  r = xfed_run(s, "policy", "check", safe, "--db", db, "--coordinator-region", "mars", NULL);
  expect_status(r, 1);
  r = xfed_run(s, "policy", "check", safe, "--db", db, NULL);
  expect_status(r, 2);
}

static void change_without_reason_is_refused_and_version_unchanged(void **state) {
  scratch *s = *state;
  const char *db = path_in(s, "policy.db");
  CHANGE(s, db, "region", "add", "--name", "eu");
  xf_test_run *r = xfed_run(s, "policy", "region", "add", "--name", "us", "--db", db, NULL);
  expect_status(r, 2);
  expect_in(r->err, "--reason", r);
  r = xfed_run(s, "policy", "region", "add", "--name", "us", "--db", db, "--reason", "", NULL);
  expect_status(r, 2);
  /* without --db the change goes to the coordinator: with none configured,
   * a usage error saying how to name one */
  r = xfed_run(s, "policy", "region", "add", "--name", "us", "--reason", "x", "--coordinator",
               "", NULL);
  expect_status(r, 2);
  expect_in(r->err, "coordinator", r);
  /* connection flags and --db do not go together */
  r = xfed_run(s, "policy", "region", "add", "--name", "us", "--db", db, "--reason", "x",
               "--coordinator", "127.0.0.1:1", NULL);
  expect_status(r, 2);
  expect_in(r->err, "with --db FILE", r);
  /* a bad name is refused by the library, naming it */
  r = xfed_run(s, "policy", "site", "add", "--name", "Bad Name", "--region", "eu", "--db", db,
               "--reason", "x", "--author", "dave", NULL);
  expect_status(r, 1);
  r = xfed_run(s, "policy", "log", "--db", db, "--json", NULL);
  expect_status(r, 0);
  expect_in(r->out, "\"version\": 1", r);
  if (strstr(r->out, "\"version\": 2")) fail_msg("a refused change made version 2");
}

static void log_diff_export_import_round_trip(void **state) {
  scratch *s = *state;
  const char *db = path_in(s, "policy.db");
  build_quickstart(s, db);
  xf_test_run *r = xfed_run(s, "policy", "log", "--db", db, NULL);
  expect_status(r, 0);
  expect_in(r->out, "carol", r);
  expect_in(r->out, "quickstart", r);
  r = xfed_run(s, "policy", "diff", "21", QUICKSTART_VERSIONS, "--db", db, NULL);
  expect_status(r, 0);
  expect_in(r->out, "+ rule eu-regional", r);
  expect_in(r->out, "+ rule ap-direct", r);
  r = xfed_run(s, "policy", "rule", "list", "--db", db, NULL);
  expect_status(r, 0);
  expect_in(r->out, "eu-regional", r);

  const char *out = path_in(s, "policy.json");
  expect_status(xfed_run(s, "policy", "export", "--db", db, "--out", out, NULL), 0);
  xf_test_run *v21 = xfed_run(s, "policy", "export", "--db", db, "--version", "21", NULL);
  expect_status(v21, 0);
  if (strstr(v21->out, "eu-regional")) fail_msg("version 21 has no rules yet");

  const char *db2 = path_in(s, "copy.db");
  r = xfed_run(s, "policy", "import", out, "--db", db2, "--reason", "copy", "--author", "dave",
               NULL);
  expect_status(r, 0);
  expect_in(r->out, "policy version 1", r);
  xf_test_run *a = xfed_run(s, "policy", "export", "--db", db, NULL);
  xf_test_run *b = xfed_run(s, "policy", "export", "--db", db2, NULL);
  expect_status(a, 0);
  expect_status(b, 0);
  assert_string_equal(a->out, b->out);
  r = xfed_run(s, "policy", "rule", "rm", "--id", "ap-direct", "--db", db2, "--reason", "drop",
               "--author", "dave", NULL);
  expect_status(r, 0);
  r = xfed_run(s, "policy", "diff", "1", "2", "--db", db2, NULL);
  expect_status(r, 0);
  expect_in(r->out, "- rule ap-direct", r);
}

static void policy_test_names_the_failing_case(void **state) {
  scratch *s = *state;
  const char *db = path_in(s, "policy.db");
  build_quickstart(s, db);
  const char *cases = path_in(s, "cases.json");
  write_file(cases,
             "[{\"name\": \"eu needs secagg\",\n"
             "  \"job\": {\"dataset\": \"fmnist\", \"min_sites\": 6, \"coordinator_region\": \"us\"},\n"
             "  \"expect\": {\"allowed\": false, \"eligible\": [\"ap-1\", \"ap-2\", \"us-1\", \"us-2\"],\n"
             "             \"paths\": {\"eu\": \"none\", \"ap\": \"direct\"}}},\n"
             " {\"name\": \"wrongly expects eu direct\",\n"
             "  \"job\": {\"dataset\": \"fmnist\", \"privacy_mode\": \"central\", \"epsilon\": 2,\n"
             "           \"secagg\": true, \"min_sites\": 2, \"coordinator_region\": \"us\"},\n"
             "  \"now\": \"2030-01-01T00:00:00Z\",\n"
             "  \"expect\": {\"allowed\": true, \"paths\": {\"eu\": \"direct\"}}}]\n");
  xf_test_run *r = xfed_run(s, "policy", "test", cases, "--db", db, NULL);
  expect_status(r, 1);
  expect_in(r->out, "pass  eu needs secagg", r);
  expect_in(r->out, "FAIL  wrongly expects eu direct: region eu: expected path direct, got regional", r);
  expect_in(r->out, "1 passed, 1 failed", r);
}

static void audit_verify_finds_an_edited_row(void **state) {
  scratch *s = *state;
  const char *path = path_in(s, "audit.db");
  xf_db *db = NULL;
  xf_errctx err;
  assert_int_equal(xf_audit_open(path, &db, &err), XF_OK);
  for (int i = 0; i < 3; i++)
    assert_int_equal(xf_audit_append(db, 1700000000 + i, "coordinator", "decision", "job-1",
                                     "{\"allowed\": true}", NULL, &err),
                     XF_OK);
  xf_db_close(db);

  xf_test_run *r = xfed_run(s, "audit", "verify", "--db", path, NULL);
  expect_status(r, 0);
  expect_in(r->out, "3 rows", r);
  r = xfed_run(s, "audit", "list", "--db", path, "--since", "2023-11-14T22:13:21Z", NULL);
  expect_status(r, 0);
  expect_in(r->out, "decision", r);
  r = xfed_run(s, "audit", "export", "--db", path, "--since", "1700000001", NULL);
  expect_status(r, 0);
  if (strstr(r->out, "\"seq\":1,") || !strstr(r->out, "\"seq\":3,")) {
    xf_test_run_show(r);
    fail_msg("--since 1700000001 should export rows 2 and 3");
  }

  sqlite3 *raw = NULL;
  assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
  assert_int_equal(sqlite3_exec(raw,
                                "DROP TRIGGER audit_no_update;"
                                "UPDATE audit SET subject = 'job-9' WHERE seq = 2;",
                                NULL, NULL, NULL),
                   SQLITE_OK);
  sqlite3_close(raw);
  r = xfed_run(s, "audit", "verify", "--db", path, NULL);
  expect_status(r, 1);
  expect_in(r->out, "2", r);
  r = xfed_run(s, "audit", "verify", "--db", path, "--json", NULL);
  expect_status(r, 1);
  expect_in(r->out, "\"seq\": 2", r);
  expect_in(r->out, "\"fault\": \"edited\"", r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(policy_check_refuses_then_allows_with_secagg_and_dp,
                                      scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(change_without_reason_is_refused_and_version_unchanged,
                                      scratch_setup, scratch_teardown),
      cmocka_unit_test_setup_teardown(log_diff_export_import_round_trip, scratch_setup,
                                      scratch_teardown),
      cmocka_unit_test_setup_teardown(policy_test_names_the_failing_case, scratch_setup,
                                      scratch_teardown),
      cmocka_unit_test_setup_teardown(audit_verify_finds_an_edited_row, scratch_setup,
                                      scratch_teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
