/* SPDX-License-Identifier: Apache-2.0 */
/* The site's own residency rules without sockets: a local policy in a real
 * site database, offers' residency plans checked against it, the audit rows
 * they leave, and the lower of the two privacy caps (site/residency.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "job/jobspec.h"
#include "policy/audit.h"
#include "policy/policy.h"
#include "site/registry.h"
#include "site/residency.h"

/* The site eu-berlin (region eu) lets its dataset tiny leave for us only as
 * a regional aggregate of >= 2 sites with epsilon <= 1 (raw updates: the
 * default deny). */
#define LOCAL_POLICY                                                                       \
  "{\"regions\": [{\"name\": \"eu\"}, {\"name\": \"us\"}],"                                \
  " \"sites\": [{\"name\": \"eu-berlin\", \"region\": \"eu\"}],"                           \
  " \"datasets\": [{\"name\": \"tiny\", \"site\": \"eu-berlin\", \"classification\":"      \
  " \"public\", \"tags\": [\"t1\"]}],"                                                     \
  " \"rules\": [{\"id\": \"eu-agg-only\", \"effect\": \"allow\", \"kind\":"                \
  " \"regional_aggregate\", \"select\": {\"region\": \"eu\"}, \"destinations\": [\"us\"]," \
  " \"conditions\": {\"max_epsilon\": 1, \"min_cohort\": 2}}]}"

#define SPEC_EPS(eps)                                                                     \
  "{\"name\": \"j\", \"model\": {\"arch\": \"logreg\"}, \"data\": {\"dataset\": \"tiny\"," \
  " \"tags\": [\"t1\"]}, \"rounds\": 3, \"min_sites\": 1, \"privacy\": {\"unit\":"        \
  " \"site\", \"mode\": \"local\", \"clip\": 1.0, \"target_epsilon\": " #eps "}}"

typedef struct fixture {
  char dir[256], db[300];
  xf_site_registry *reg;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof(*f));
  if (!f || xf_test_mkdtemp(f->dir, sizeof(f->dir), "site-policy-t") != 0) return -1;
  snprintf(f->db, sizeof(f->db), "%s/site.db", f->dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_site_registry_open(f->db, &f->reg, &err) != XF_OK) return -1;
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xf_site_registry_close(f->reg);
  xf_test_remove_tree(f->dir);
  free(f);
  return 0;
}

static void import_local(fixture *f) {
  xf_errctx err;
  xf_errctx_clear(&err);
  uint64_t v = 0;
  if (xf_policy_import(xf_site_registry_db(f->reg), LOCAL_POLICY, "ops", "test", 1e9, &v, &err) !=
      XF_OK)
    fail_msg("import: %s (%s)", err.msg, err.field);
  assert_int_equal(v, 1);
}

static void parse(const char *json, xf_jobspec *spec) {
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_jobspec_parse_string(json, strlen(json), "spec", spec, &err) != XF_OK)
    fail_msg("spec: %s", err.msg);
}

static const xf_site_task_ref TASK = {.site = "eu-berlin", .region = "eu", .job = "7",
                                      .round = 2, .attempt = 1};

static void check(fixture *f, const xf_site_residency *res, const char *spec_json,
                  xf_site_residency_verdict *v) {
  xf_jobspec spec;
  parse(spec_json, &spec);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_residency_check(xf_site_registry_db(f->reg), &TASK, res, &spec, 1e9,
                                           v, &err),
                   XF_OK);
}

static void no_local_policy_restricts_nothing(void **state) {
  fixture *f = *state;
  xf_site_residency res = {.policy_version = 4, .coordinator_region = "us",
                           .aggregator_region = "us", .path = "direct", .rule = "r",
                           .min_cohort = 1};
  xf_site_residency_verdict v;
  check(f, &res, SPEC_EPS(3), &v);
  assert_true(v.allowed);
  assert_int_equal(v.policy_version, 0);
  assert_string_equal(v.rule, "none");
}

static void regional_rule_with_lower_epsilon_refuses_and_names_the_rule(void **state) {
  fixture *f = *state;
  import_local(f);
  xf_site_residency res = {.policy_version = 4, .coordinator_region = "us",
                           .aggregator_region = "eu", .path = "regional", .rule = "coord-eu",
                           .min_cohort = 2};
  xf_site_residency_verdict v;
  check(f, &res, SPEC_EPS(3), &v);
  assert_false(v.allowed);
  assert_int_equal(v.policy_version, 1);
  assert_string_equal(v.rule, "eu-agg-only");
  assert_non_null(strstr(v.details, "eu-agg-only"));
  if (!strstr(v.details, "epsilon to <= 1")) fail_msg("details: %s", v.details);

  /* The audit row: refused_task with the local and the coordinator's versions. */
  xf_db *db = xf_site_registry_db(f->reg);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_residency_audit(db, &TASK, "tiny", &res, &v, 1e9, &err), XF_OK);
  xf_audit_row *rows = NULL;
  size_t n = 0;
  assert_int_equal(xf_audit_list(db, 0, 0, &rows, &n, &err), XF_OK);
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].kind, "refused_task");
  assert_string_equal(rows[0].subject, "7");
  assert_string_equal(rows[0].actor, "eu-berlin");
  assert_non_null(strstr(rows[0].detail, "\"coordinator_policy_version\":4"));
  assert_non_null(strstr(rows[0].detail, "\"policy_version\":1"));
  assert_non_null(strstr(rows[0].detail, "\"rule\":\"eu-agg-only\""));
  assert_non_null(strstr(rows[0].detail, "\"aggregator_region\":\"eu\""));
  xf_audit_rows_free(rows, n);
  xf_audit_verdict verdict;
  assert_int_equal(xf_audit_verify(db, &verdict, &err), XF_OK);
  assert_int_equal(verdict.fault, XF_AUDIT_INTACT);
}

static void allowed_regional_path_is_checked_against_the_route_and_cohort(void **state) {
  fixture *f = *state;
  import_local(f);
  /* Within the rule: a regional aggregator in eu, cohort 2. */
  xf_site_residency res = {.policy_version = 4, .coordinator_region = "us",
                           .aggregator_region = "eu", .path = "regional", .rule = "coord-eu",
                           .min_cohort = 2};
  xf_site_residency_verdict v;
  check(f, &res, SPEC_EPS(0.5), &v);
  if (!v.allowed) fail_msg("refused: %s", v.details);
  assert_string_equal(v.rule, "eu-agg-only");
  assert_string_equal(v.path, "regional");

  /* The coordinator guarantees a smaller cohort than the local rule needs. */
  res.min_cohort = 1;
  check(f, &res, SPEC_EPS(0.5), &v);
  assert_false(v.allowed);
  assert_non_null(strstr(v.details, "at least 2 sites"));

  /* The update goes straight to the coordinator in us. */
  res.min_cohort = 2;
  res.aggregator_region = "us";
  res.path = "direct";
  check(f, &res, SPEC_EPS(0.5), &v);
  assert_false(v.allowed);
  assert_non_null(strstr(v.details, "straight to an aggregator in region 'us'"));
  assert_non_null(strstr(v.details, "eu-agg-only"));

  /* A third region the local rules were not asked about. */
  res.aggregator_region = "ap";
  check(f, &res, SPEC_EPS(0.5), &v);
  assert_false(v.allowed);
  assert_non_null(strstr(v.details, "'ap'"));
}

static void unknown_coordinator_region_and_unlisted_dataset(void **state) {
  fixture *f = *state;
  import_local(f);
  xf_site_residency res = {.policy_version = 4, .coordinator_region = "ap",
                           .aggregator_region = "eu", .path = "regional", .rule = "r",
                           .min_cohort = 2};
  xf_site_residency_verdict v;
  check(f, &res, SPEC_EPS(0.5), &v);
  assert_false(v.allowed);
  assert_non_null(strstr(v.details, "'ap'"));
  assert_non_null(strstr(v.details, "added to the local policy"));

  /* A task without a plan (a coordinator without a policy) cannot be
   * checked, so a dataset the local policy lists does not take it. */
  xf_site_residency none = {0};
  check(f, &none, SPEC_EPS(0.5), &v);
  assert_false(v.allowed);
  assert_non_null(strstr(v.details, "no residency plan"));

  /* A dataset the local policy does not list is not restricted by it. */
  res.coordinator_region = "us";
  const char *other = "{\"name\": \"j\", \"model\": {\"arch\": \"logreg\"}, \"data\": "
                      "{\"dataset\": \"other\"}, \"rounds\": 1, \"min_sites\": 1}";
  check(f, &res, other, &v);
  assert_true(v.allowed);
  assert_string_equal(v.rule, "none");
  assert_non_null(strstr(v.why, "does not list dataset 'other'"));
}

static void crossing_row_is_chained(void **state) {
  fixture *f = *state;
  xf_db *db = xf_site_registry_db(f->reg);
  xf_errctx err;
  xf_errctx_clear(&err);
  assert_int_equal(xf_site_audit_crossing(db, &TASK, "us", 1234, 1e9, &err), XF_OK);
  xf_audit_row *rows = NULL;
  size_t n = 0;
  assert_int_equal(xf_audit_list(db, 0, 0, &rows, &n, &err), XF_OK);
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].kind, "crossing");
  assert_string_equal(rows[0].detail, "{\"attempt\":1,\"bytes\":1234,\"from\":\"eu\",\"job\":\"7\","
                                      "\"kind\":\"update\",\"round\":2,\"to\":\"us\"}");
  xf_audit_rows_free(rows, n);
}

static void budget_cap_is_the_lower_of_budget_and_policy(void **state) {
  (void)state;
  xf_site_dataset ds = {.has_budget = true, .budget_epsilon = 5, .budget_delta = 1e-6};
  xf_site_residency res = {.has_max_epsilon = true, .max_epsilon = 2};
  xf_site_cap c = xf_site_budget_cap(&ds, &res, 1e-5);
  assert_int_equal(c.source, XF_SITE_CAP_POLICY);
  assert_true(c.epsilon == 2 && c.delta == 1e-5);
  res.max_epsilon = 8;
  c = xf_site_budget_cap(&ds, &res, 1e-5);
  assert_int_equal(c.source, XF_SITE_CAP_BUDGET);
  assert_true(c.epsilon == 5 && c.delta == 1e-6);
  res.max_epsilon = 5; /* a tie: the operator's budget */
  assert_int_equal(xf_site_budget_cap(&ds, &res, 1e-5).source, XF_SITE_CAP_BUDGET);
  c = xf_site_budget_cap(&ds, NULL, 1e-5);
  assert_int_equal(c.source, XF_SITE_CAP_BUDGET);
  ds.has_budget = false;
  res.max_epsilon = 3;
  c = xf_site_budget_cap(&ds, &res, 1e-5);
  assert_int_equal(c.source, XF_SITE_CAP_POLICY);
  assert_true(c.epsilon == 3);
  res.has_max_epsilon = false;
  assert_int_equal(xf_site_budget_cap(&ds, &res, 1e-5).source, XF_SITE_CAP_NONE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(no_local_policy_restricts_nothing, setup, teardown),
      cmocka_unit_test_setup_teardown(regional_rule_with_lower_epsilon_refuses_and_names_the_rule,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          allowed_regional_path_is_checked_against_the_route_and_cohort, setup, teardown),
      cmocka_unit_test_setup_teardown(unknown_coordinator_region_and_unlisted_dataset, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(crossing_row_is_chained, setup, teardown),
      cmocka_unit_test(budget_cap_is_the_lower_of_budget_and_policy),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
