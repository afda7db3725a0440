/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the policy model and the decision: every selector field,
 * artifact kind, destination and condition; deny beats allow; validity
 * windows; default deny across regions; versions, log, diff, import/export;
 * every class of bad input refused with nothing applied; the quickstart
 * policy of PRODUCT.md. */
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

#include "base/alloc.h"
#include "policy/policy.h"

typedef struct scratch {
  char dir[512];
  char db_path[600];
  xf_db *db;
} scratch;

static int scratch_setup(void **state) {
  scratch *s = calloc(1, sizeof(*s));
  if (!s || xf_test_mkdtemp(s->dir, sizeof(s->dir), "policy") != 0) return -1;
  snprintf(s->db_path, sizeof(s->db_path), "%s/policy.db", s->dir);
  if (xf_policy_open(s->db_path, &s->db, NULL) != XF_OK) return -1;
  *state = s;
  return 0;
}

static int scratch_teardown(void **state) {
  scratch *s = *state;
  xf_db_close(s->db);
  xf_test_remove_tree(s->dir);
  free(s);
  return 0;
}

/* Three regions; eu-1 (confidential, health), eu-2 (internal, open) and eu-3
 * (no mnist) in eu, us-1 and us-2 in us, ap-1 in ap. */
#define BASE_PLACES                                                                       \
  "\"regions\": [{\"name\": \"eu\", \"jurisdiction\": \"EU GDPR\"},"                      \
  " {\"name\": \"us\", \"jurisdiction\": \"US\"}, {\"name\": \"ap\"}],"                   \
  "\"sites\": [{\"name\": \"eu-1\", \"region\": \"eu\"}, {\"name\": \"eu-2\", \"region\": \"eu\"},"  \
  " {\"name\": \"eu-3\", \"region\": \"eu\"},"                                            \
  " {\"name\": \"us-1\", \"region\": \"us\"}, {\"name\": \"us-2\", \"region\": \"us\"},"  \
  " {\"name\": \"ap-1\", \"region\": \"ap\"}],"                                           \
  "\"datasets\": ["                                                                       \
  " {\"name\": \"mnist\", \"site\": \"eu-1\", \"classification\": \"confidential\", \"tags\": [\"health\"]}," \
  " {\"name\": \"mnist\", \"site\": \"eu-2\", \"classification\": \"internal\", \"tags\": [\"open\"]}," \
  " {\"name\": \"cifar\", \"site\": \"eu-1\", \"classification\": \"public\"},"           \
  " {\"name\": \"mnist\", \"site\": \"us-1\", \"classification\": \"internal\"},"         \
  " {\"name\": \"mnist\", \"site\": \"us-2\", \"classification\": \"internal\"}]"

/* The quickstart shape: eu's updates leave only as a securely aggregated,
 * differentially private regional aggregate of at least 2 sites. */
static const char quickstart[] =
    "{" BASE_PLACES ", \"rules\": [{\"id\": \"eu-regional\", \"effect\": \"allow\","
    " \"kind\": \"regional_aggregate\", \"select\": {\"region\": \"eu\"},"
    " \"destinations\": [\"us\"], \"conditions\": {\"max_epsilon\": 3, \"min_cohort\": 2,"
    " \"require_secagg\": true}}]}";

static const xf_policy_change chg = {"alice@example.org", "test change", 1000};

static uint64_t import_doc(xf_db *db, const char *doc) {
  uint64_t v = 0;
  xf_errctx err;
  xf_err rc = xf_policy_import(db, doc, "alice@example.org", "set up", 1000, &v, &err);
  if (rc != XF_OK) fail_msg("import: %s: %s", err.field, err.msg);
  return v;
}

/* The base places with exactly the given rules (JSON array members). */
static uint64_t import_rules(xf_db *db, const char *rules) {
  char doc[8192];
  snprintf(doc, sizeof(doc), "{" BASE_PLACES ", \"rules\": [%s]}", rules);
  return import_doc(db, doc);
}

static const xf_policy_job plain_job = {.dataset = "mnist", .min_sites = 1,
                                        .coordinator_region = "us"};

/* Decides job against the current version. */
static void decide(xf_db *db, const xf_policy_job *job, double now, xf_policy_decision *d) {
  uint64_t v;
  xf_policy *p;
  xf_errctx err;
  assert_int_equal(xf_policy_version_current(db, &v, &err), XF_OK);
  assert_int_equal(xf_policy_load(db, v, &p, &err), XF_OK);
  xf_err rc = xf_policy_decide(p, job, now, d, &err);
  if (rc != XF_OK) fail_msg("decide: %s: %s", err.field, err.msg);
  assert_int_equal(d->version, v);
  xf_policy_free(p);
}

static const xf_policy_site_decision *site(const xf_policy_decision *d, const char *name) {
  for (size_t i = 0; i < d->n_sites; i++)
    if (strcmp(d->sites[i].site, name) == 0) return &d->sites[i];
  fail_msg("site %s is not in the decision", name);
  return NULL;
}

static const xf_policy_region_plan *plan(const xf_policy_decision *d, const char *region) {
  for (size_t i = 0; i < d->n_regions; i++)
    if (strcmp(d->regions[i].region, region) == 0) return &d->regions[i];
  fail_msg("region %s is not in the plan", region);
  return NULL;
}

static bool suggests(const xf_policy_decision *d, const char *text) {
  for (size_t i = 0; i < d->n_suggestions; i++)
    if (strstr(d->suggestions[i], text)) return true;
  return false;
}

/* Eligibility of eu-1 and eu-2 for a job under the current version, as "yn". */
static void eu_eligibility(xf_db *db, const xf_policy_job *job, double now, char out[3]) {
  xf_policy_decision d;
  decide(db, job, now, &d);
  out[0] = site(&d, "eu-1")->eligible ? 'y' : 'n';
  out[1] = site(&d, "eu-2")->eligible ? 'y' : 'n';
  out[2] = '\0';
  xf_policy_decision_free(&d);
}

static void expect_eu(xf_db *db, const char *rules, const char *want) {
  char got[3];
  import_rules(db, rules);
  eu_eligibility(db, &plain_job, 1000, got);
  if (strcmp(got, want) != 0) fail_msg("rules %s: eu-1/eu-2 %s, want %s", rules, got, want);
}

#define ALLOW_UPDATE(sel, dests)                                                          \
  "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\", \"select\": " sel         \
  ", \"destinations\": " dests "}"

/* ---- the decision ------------------------------------------------------------------- */

static void quickstart_eu_leaves_only_as_secure_private_regional_aggregate(void **state) {
  scratch *s = *state;
  import_doc(s->db, quickstart);
  xf_policy_decision d;

  /* As written, without secure aggregation or privacy: eu stays out. */
  decide(s->db, &plain_job, 1000, &d);
  assert_int_equal(d.n_sites, 4);
  assert_false(site(&d, "eu-1")->eligible);
  assert_false(site(&d, "eu-2")->eligible);
  assert_string_equal(site(&d, "eu-1")->rule, "eu-regional");
  assert_true(site(&d, "us-1")->eligible);
  assert_string_equal(site(&d, "us-1")->rule, "default");
  assert_int_equal(plan(&d, "eu")->path, XF_POLICY_PATH_NONE);
  assert_int_equal(plan(&d, "us")->path, XF_POLICY_PATH_DIRECT);
  assert_true(suggests(&d, "add privacy with epsilon <= 3"));
  assert_true(suggests(&d, "enable secure aggregation"));
  assert_true(d.allowed); /* the two us sites meet min_sites 1 */
  xf_policy_decision_free(&d);

  /* Secure aggregation alone is not enough. */
  xf_policy_job job = plain_job;
  job.secagg = true;
  decide(s->db, &job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_true(suggests(&d, "add privacy with epsilon <= 3"));
  assert_false(suggests(&d, "enable secure aggregation"));
  xf_policy_decision_free(&d);

  /* Too much epsilon. */
  job.privacy = true;
  job.epsilon = 5;
  decide(s->db, &job, 1000, &d);
  assert_false(site(&d, "eu-2")->eligible);
  assert_true(suggests(&d, "lower epsilon to <= 3 (the job spends 5)"));
  xf_policy_decision_free(&d);

  /* Both, within the budget: eu goes as one regional aggregate. */
  job.epsilon = 2.5;
  job.min_sites = 4;
  decide(s->db, &job, 1000, &d);
  assert_true(d.allowed);
  assert_int_equal(d.n_suggestions, 0);
  assert_true(site(&d, "eu-1")->eligible);
  assert_int_equal(site(&d, "eu-1")->path, XF_POLICY_PATH_REGIONAL);
  const xf_policy_region_plan *eu = plan(&d, "eu");
  assert_int_equal(eu->path, XF_POLICY_PATH_REGIONAL);
  assert_string_equal(eu->rule, "eu-regional");
  assert_int_equal(eu->min_cohort, 2);
  assert_true(eu->require_secagg);
  assert_true(eu->has_max_epsilon);
  assert_true(eu->max_epsilon == 3);
  assert_true(site(&d, "eu-1")->has_max_epsilon && site(&d, "eu-1")->max_epsilon == 3);
  assert_int_equal(eu->sites, 2);
  assert_int_equal(eu->eligible, 2);
  xf_policy_decision_free(&d);

  /* A job whose dataset carries a tag only eu-1 has: a cohort of one. */
  const char *tags[] = {"health"};
  job.tags = tags;
  job.n_tags = 1;
  job.min_sites = 1;
  decide(s->db, &job, 1000, &d);
  assert_int_equal(d.n_sites, 1);
  assert_false(site(&d, "eu-1")->eligible);
  assert_true(suggests(&d, "needs >= 2 eu sites per regional aggregate"));
  assert_int_equal(plan(&d, "eu")->path, XF_POLICY_PATH_NONE);
  assert_false(d.allowed);
  xf_policy_decision_free(&d);

  /* A caller that knows the aggregate's size (a site checking its task)
   * gives it, and that size is what the rule is held to. */
  job.cohort = 2;
  decide(s->db, &job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  assert_int_equal(plan(&d, "eu")->path, XF_POLICY_PATH_REGIONAL);
  xf_policy_decision_free(&d);
  job.tags = NULL;
  job.n_tags = 0;
  job.cohort = 1;
  decide(s->db, &job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_non_null(strstr(site(&d, "eu-1")->why, "the plan guarantees 1"));
  xf_policy_decision_free(&d);
}

static void each_selector_field_picks_its_datasets(void **state) {
  scratch *s = *state;
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"us\"]"), "yy");
  expect_eu(s->db, ALLOW_UPDATE("{\"region\": \"eu\"}", "[\"us\"]"), "yy");
  expect_eu(s->db, ALLOW_UPDATE("{\"region\": \"ap\"}", "[\"us\"]"), "nn");
  expect_eu(s->db, ALLOW_UPDATE("{\"site\": \"eu-2\"}", "[\"us\"]"), "ny");
  expect_eu(s->db, ALLOW_UPDATE("{\"classification\": \"confidential\"}", "[\"us\"]"), "yn");
  expect_eu(s->db, ALLOW_UPDATE("{\"tag\": \"open\"}", "[\"us\"]"), "ny");
  expect_eu(s->db, ALLOW_UPDATE("{\"dataset\": \"cifar\"}", "[\"us\"]"), "nn");
  expect_eu(s->db, ALLOW_UPDATE("{\"region\": \"eu\", \"site\": \"eu-1\", \"dataset\": \"mnist\","
                                " \"classification\": \"confidential\", \"tag\": \"health\"}",
                                "[\"us\"]"),
            "yn");

  /* The dataset selector: a job on cifar is allowed by it. */
  import_rules(s->db, ALLOW_UPDATE("{\"dataset\": \"cifar\"}", "[\"us\"]"));
  xf_policy_job job = plain_job;
  job.dataset = "cifar";
  xf_policy_decision d;
  decide(s->db, &job, 1000, &d);
  assert_int_equal(d.n_sites, 1);
  assert_true(site(&d, "eu-1")->eligible);
  assert_string_equal(site(&d, "eu-1")->rule, "r");
  xf_policy_decision_free(&d);
}

static void each_kind_governs_its_own_artifact(void **state) {
  scratch *s = *state;
  expect_eu(s->db, "{\"id\": \"m\", \"effect\": \"allow\", \"kind\": \"model\","
                   " \"destinations\": [\"*\"]}", "nn");
  expect_eu(s->db, "{\"id\": \"m\", \"effect\": \"allow\", \"kind\": \"metrics\","
                   " \"destinations\": [\"*\"]}", "nn");
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"*\"]"), "yy");
  import_rules(s->db, "{\"id\": \"agg\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
                      " \"destinations\": [\"*\"]}");
  xf_policy_decision d;
  decide(s->db, &plain_job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  assert_int_equal(site(&d, "eu-1")->path, XF_POLICY_PATH_REGIONAL);
  assert_int_equal(plan(&d, "eu")->path, XF_POLICY_PATH_REGIONAL);
  assert_int_equal(plan(&d, "eu")->min_cohort, 1);
  assert_false(plan(&d, "eu")->require_secagg);
  xf_policy_decision_free(&d);
}

static void destinations_name_regions_or_anywhere(void **state) {
  scratch *s = *state;
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"us\"]"), "yy");
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"ap\"]"), "nn");
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"ap\", \"us\"]"), "yy");
  expect_eu(s->db, ALLOW_UPDATE("{}", "[\"*\"]"), "yy");
}

static void default_deny_across_regions_same_region_allowed(void **state) {
  scratch *s = *state;
  import_rules(s->db, "");
  xf_policy_decision d;
  decide(s->db, &plain_job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_string_equal(site(&d, "eu-1")->rule, "default");
  assert_true(site(&d, "us-2")->eligible);
  assert_string_equal(site(&d, "us-2")->rule, "default");
  assert_true(suggests(&d, "add a rule allowing eu updates or regional aggregates to us"));
  xf_policy_decision_free(&d);

  xf_policy_job job = plain_job;
  job.coordinator_region = "eu";
  decide(s->db, &job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  assert_false(site(&d, "us-1")->eligible);
  xf_policy_decision_free(&d);

  /* A deny cannot keep an update inside its own region. */
  import_rules(s->db, "{\"id\": \"d\", \"effect\": \"deny\", \"kind\": \"update\","
                      " \"destinations\": [\"*\"]}");
  decide(s->db, &job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  xf_policy_decision_free(&d);
}

static void deny_beats_allow_in_either_order(void **state) {
  scratch *s = *state;
  const char *deny = "{\"id\": \"no-health\", \"effect\": \"deny\", \"kind\": \"update\","
                     " \"select\": {\"tag\": \"health\"}, \"destinations\": [\"*\"]}";
  const char *allow = ALLOW_UPDATE("{\"region\": \"eu\"}", "[\"*\"]");
  char rules[1024];
  for (int order = 0; order < 2; order++) {
    snprintf(rules, sizeof(rules), "%s, %s", order ? deny : allow, order ? allow : deny);
    import_rules(s->db, rules);
    xf_policy_decision d;
    decide(s->db, &plain_job, 1000, &d);
    assert_false(site(&d, "eu-1")->eligible);
    assert_string_equal(site(&d, "eu-1")->rule, "no-health");
    assert_true(site(&d, "eu-2")->eligible);
    assert_string_equal(site(&d, "eu-2")->rule, "r");
    xf_policy_decision_free(&d);
  }
  /* A deny of regional aggregates beats an allow of them too. */
  import_rules(s->db, "{\"id\": \"a\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
                      " \"destinations\": [\"*\"]}, {\"id\": \"d\", \"effect\": \"deny\","
                      " \"kind\": \"regional_aggregate\", \"destinations\": [\"us\"]}");
  xf_policy_decision d;
  decide(s->db, &plain_job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_string_equal(site(&d, "eu-1")->rule, "d");
  xf_policy_decision_free(&d);
}

static void conditions_max_epsilon_min_cohort_secagg(void **state) {
  scratch *s = *state;
  char got[3];
  xf_policy_job job = plain_job;

  import_rules(s->db, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
                      " \"destinations\": [\"*\"], \"conditions\": {\"max_epsilon\": 1}}");
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "nn");
  job.privacy = true;
  job.epsilon = 1;
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "yy");
  {
    /* The allowing rule's cap travels with the site's decision (the site's
     * ledger enforces it across jobs). */
    xf_policy_decision cap;
    decide(s->db, &job, 1000, &cap);
    assert_true(site(&cap, "eu-1")->has_max_epsilon);
    assert_true(site(&cap, "eu-1")->max_epsilon == 1);
    xf_policy_decision_free(&cap);
  }
  job.epsilon = 1.5;
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "nn");

  job = plain_job;
  import_rules(s->db, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
                      " \"destinations\": [\"*\"], \"conditions\": {\"require_secagg\": true}}");
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "nn");
  job.secagg = true;
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "yy");

  /* min_cohort on updates: the job's quorum must reach it. */
  job = plain_job;
  import_rules(s->db, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
                      " \"destinations\": [\"*\"], \"conditions\": {\"min_cohort\": 3}}");
  xf_policy_decision d;
  decide(s->db, &job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_true(suggests(&d, "set min_sites >= 3"));
  xf_policy_decision_free(&d);
  job.min_sites = 3;
  eu_eligibility(s->db, &job, 1000, got);
  assert_string_equal(got, "yy");

  /* min_cohort on regional aggregates: the region's sites must reach it. */
  job = plain_job;
  import_rules(s->db, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\","
                      " \"destinations\": [\"*\"], \"conditions\": {\"min_cohort\": 3}}");
  decide(s->db, &job, 1000, &d);
  assert_false(site(&d, "eu-1")->eligible);
  assert_true(suggests(&d, "needs >= 3 eu sites per regional aggregate"));
  assert_int_equal(plan(&d, "eu")->path, XF_POLICY_PATH_NONE);
  assert_int_equal(plan(&d, "eu")->min_cohort, 3);
  xf_policy_decision_free(&d);
}

static void validity_windows_before_inside_after(void **state) {
  scratch *s = *state;
  char got[3];
  import_rules(s->db, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
                      " \"destinations\": [\"*\"],"
                      " \"conditions\": {\"valid_from\": 2000, \"valid_until\": 3000}}");
  eu_eligibility(s->db, &plain_job, 1999, got);
  assert_string_equal(got, "nn");
  eu_eligibility(s->db, &plain_job, 2000, got);
  assert_string_equal(got, "yy");
  eu_eligibility(s->db, &plain_job, 2999, got);
  assert_string_equal(got, "yy");
  eu_eligibility(s->db, &plain_job, 3000, got);
  assert_string_equal(got, "nn");

  /* A deny that is not valid yet does not beat the allow. */
  import_rules(s->db, ALLOW_UPDATE("{}", "[\"*\"]") ", {\"id\": \"d\", \"effect\": \"deny\","
                      " \"kind\": \"update\", \"destinations\": [\"*\"],"
                      " \"conditions\": {\"valid_from\": 5000}}");
  eu_eligibility(s->db, &plain_job, 4999, got);
  assert_string_equal(got, "yy");
  eu_eligibility(s->db, &plain_job, 5000, got);
  assert_string_equal(got, "nn");
}

static void change_mid_job_applies_to_new_version_only(void **state) {
  scratch *s = *state;
  xf_errctx err;
  uint64_t v1 = import_rules(s->db, ""), v2;
  xf_policy *p1;
  assert_int_equal(xf_policy_load(s->db, v1, &p1, &err), XF_OK);
  xf_policy_decision d;
  assert_int_equal(xf_policy_decide(p1, &plain_job, 1000, &d, &err), XF_OK);
  assert_false(site(&d, "eu-1")->eligible);
  xf_policy_decision_free(&d);

  assert_int_equal(xf_policy_rule_add(s->db, ALLOW_UPDATE("{}", "[\"us\"]"), &chg, &v2, &err),
                   XF_OK);
  assert_int_equal(v2, v1 + 1);
  decide(s->db, &plain_job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  xf_policy_decision_free(&d);

  /* The old snapshot, and v1 loaded again, decide as before. */
  assert_int_equal(xf_policy_decide(p1, &plain_job, 1000, &d, &err), XF_OK);
  assert_false(site(&d, "eu-1")->eligible);
  xf_policy_decision_free(&d);
  xf_policy_free(p1);
  assert_int_equal(xf_policy_load(s->db, v1, &p1, &err), XF_OK);
  assert_int_equal(xf_policy_decide(p1, &plain_job, 1000, &d, &err), XF_OK);
  assert_false(site(&d, "eu-1")->eligible);
  assert_int_equal(d.version, v1);
  xf_policy_decision_free(&d);
  xf_policy_free(p1);
}

static void versions_are_immutable_in_the_database(void **state) {
  scratch *s = *state;
  import_doc(s->db, quickstart);
  sqlite3 *h = xf_db_handle(s->db);
  assert_int_not_equal(sqlite3_exec(h, "UPDATE policy_version SET reason = 'x'", NULL, NULL, NULL),
                       SQLITE_OK);
  assert_int_not_equal(sqlite3_exec(h, "DELETE FROM policy_version", NULL, NULL, NULL), SQLITE_OK);
  uint64_t v;
  assert_int_equal(xf_policy_version_current(s->db, &v, NULL), XF_OK);
  assert_int_equal(v, 1);
}

/* ---- edits, log, diff, import/export ----------------------------------------------- */

static void single_edits_make_versions_with_log(void **state) {
  scratch *s = *state;
  xf_errctx err;
  uint64_t v = 0;
  xf_policy_change c = chg;
  assert_int_equal(xf_policy_region_add(s->db, "eu", "EU GDPR", &c, &v, &err), XF_OK);
  assert_int_equal(v, 1);
  c.reason = "add us";
  c.now = 1001;
  assert_int_equal(xf_policy_region_add(s->db, "us", NULL, &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_site_add(s->db, "eu-1", "eu", &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_site_add(s->db, "eu-2", "eu", &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_dataset_add(s->db, "mnist", "eu-1", "internal", &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_dataset_add(s->db, "mnist", "eu-2", "internal", &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_dataset_tag(s->db, "mnist", "eu-1", "health", &c, &v, &err), XF_OK);
  assert_int_equal(xf_policy_dataset_classify(s->db, "mnist", "eu-1", "restricted", &c, &v, &err),
                   XF_OK);
  assert_int_equal(xf_policy_rule_add(s->db,
                                      "{\"id\": \"x\", \"effect\": \"allow\", \"kind\": \"update\","
                                      " \"select\": {\"classification\": \"restricted\"},"
                                      " \"destinations\": [\"us\"]}",
                                      &c, &v, &err),
                   XF_OK);
  assert_int_equal(v, 9);
  xf_policy_decision d;
  decide(s->db, &plain_job, 1000, &d);
  assert_true(site(&d, "eu-1")->eligible);
  assert_false(site(&d, "eu-2")->eligible);
  xf_policy_decision_free(&d);
  assert_int_equal(xf_policy_rule_rm(s->db, "x", &c, &v, &err), XF_OK);
  assert_int_equal(v, 10);

  xf_policy_version_info *log;
  size_t n;
  assert_int_equal(xf_policy_log(s->db, &log, &n, &err), XF_OK);
  assert_int_equal(n, 10);
  assert_int_equal(log[0].version, 1);
  assert_string_equal(log[0].author, "alice@example.org");
  assert_string_equal(log[0].reason, "test change");
  assert_true(log[0].at == 1000);
  assert_string_equal(log[1].reason, "add us");
  assert_true(log[9].at == 1001);
  xf_policy_log_free(log, n);

  char *diff;
  assert_int_equal(xf_policy_diff(s->db, 2, 9, &diff, &err), XF_OK);
  assert_non_null(strstr(diff, "+ site eu-1: {\"name\":\"eu-1\",\"region\":\"eu\"}\n"));
  assert_non_null(strstr(diff, "+ dataset mnist@eu-1: "));
  assert_non_null(strstr(diff, "\"classification\":\"restricted\",\"tags\":[\"health\"]"));
  assert_non_null(strstr(diff, "+ rule x: "));
  assert_null(strstr(diff, "region"  " eu"));
  xf_free(diff);
  assert_int_equal(xf_policy_diff(s->db, 7, 8, &diff, &err), XF_OK);
  assert_string_equal(diff, "~ dataset mnist@eu-1: {\"name\":\"mnist\",\"site\":\"eu-1\","
                            "\"classification\":\"internal\",\"tags\":[\"health\"]} -> "
                            "{\"name\":\"mnist\",\"site\":\"eu-1\",\"classification\":"
                            "\"restricted\",\"tags\":[\"health\"]}\n");
  xf_free(diff);
  assert_int_equal(xf_policy_diff(s->db, 9, 10, &diff, &err), XF_OK);
  assert_string_equal(diff, "- rule x\n");
  xf_free(diff);
  assert_int_equal(xf_policy_diff(s->db, 10, 10, &diff, &err), XF_OK);
  assert_string_equal(diff, "");
  xf_free(diff);
  assert_int_equal(xf_policy_diff(s->db, 1, 11, &diff, &err), XF_ENOENT);
  assert_string_equal(err.field, "version 11");
  assert_null(diff);
}

static void import_export_round_trip_is_identity(void **state) {
  scratch *s = *state;
  const char *doc =
      "{" BASE_PLACES ", \"rules\": [{\"id\": \"eu-regional\", \"effect\": \"allow\","
      " \"kind\": \"regional_aggregate\", \"select\": {\"region\": \"eu\", \"tag\": \"open\"},"
      " \"destinations\": [\"us\", \"ap\"], \"conditions\": {\"max_epsilon\": 0.1,"
      " \"min_cohort\": 2, \"require_secagg\": true, \"valid_from\": 1700000000.5,"
      " \"valid_until\": 1800000000}}, {\"id\": \"no\", \"effect\": \"deny\", \"kind\":"
      " \"metrics\", \"destinations\": [\"*\"]}]}";
  uint64_t v1 = import_doc(s->db, doc);
  char *a, *b;
  xf_errctx err;
  assert_int_equal(xf_policy_export(s->db, v1, &a, &err), XF_OK);
  uint64_t v2 = import_doc(s->db, a);
  assert_int_equal(xf_policy_export(s->db, v2, &b, &err), XF_OK);
  assert_string_equal(a, b);
  assert_non_null(strstr(a, "\"max_epsilon\": 0.10000000000000001"));
  char *diff;
  assert_int_equal(xf_policy_diff(s->db, v1, v2, &diff, &err), XF_OK);
  assert_string_equal(diff, "");
  xf_free(diff);
  xf_free(a);
  xf_free(b);

  /* Version 0 is the empty document. */
  assert_int_equal(xf_policy_export(s->db, 0, &a, &err), XF_OK);
  assert_non_null(strstr(a, "\"rules\": []"));
  xf_free(a);
}

/* ---- refusals --------------------------------------------------------------------- */

typedef struct bad_case {
  const char *doc; /* a whole document, or NULL with rule set */
  const char *rule;
  xf_err code;
  const char *field; /* substring of err.field */
  const char *msg;   /* substring of err.msg */
} bad_case;

static void bad_input_is_refused_naming_it_and_nothing_applied(void **state) {
  scratch *s = *state;
  uint64_t before = import_doc(s->db, quickstart);
  char *doc_before;
  assert_int_equal(xf_policy_export(s->db, before, &doc_before, NULL), XF_OK);

  static const bad_case cases[] = {
      {"{\"regions\": [", NULL, XF_EFORMAT, "line 1", "not valid JSON"},
      {"[]", NULL, XF_EFORMAT, "document", "must be an object"},
      {"{\"regionz\": []}", NULL, XF_EFORMAT, "regionz", "unknown member"},
      {"{\"regions\": [{\"name\": \"EU!\"}]}", NULL, XF_EINVAL, "regions[0].name", "EU!"},
      {"{\"regions\": [{\"name\": \"eu\"}, {\"name\": \"eu\"}]}", NULL, XF_EEXISTS, "regions",
       "'eu' is named twice"},
      {"{\"regions\": [{\"name\": \"eu\"}], \"sites\": [{\"name\": \"s\", \"region\": \"mars\"}]}",
       NULL, XF_EINVAL, "site s", "unknown region 'mars'"},
      {"{\"regions\": [{\"name\": \"eu\"}], \"sites\": [{\"name\": \"s\", \"region\": \"eu\"}],"
       " \"datasets\": [{\"name\": \"d\", \"site\": \"t\", \"classification\": \"public\"}]}",
       NULL, XF_EINVAL, "dataset d@t", "unknown site 't'"},
      {"{\"regions\": [{\"name\": \"eu\"}], \"sites\": [{\"name\": \"s\", \"region\": \"eu\"}],"
       " \"datasets\": [{\"name\": \"d\", \"site\": \"s\", \"classification\": \"secret\"}]}",
       NULL, XF_EINVAL, "datasets[0].classification", "unknown classification 'secret'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"select\": {\"region\": \"mars\"}, \"destinations\": [\"*\"]}",
       XF_EINVAL, "select.region", "unknown region 'mars'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"select\": {\"site\": \"nowhere\"}, \"destinations\": [\"*\"]}",
       XF_EINVAL, "select.site", "unknown site 'nowhere'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"select\": {\"region\": \"us\", \"site\": \"eu-1\"}, \"destinations\": [\"*\"]}",
       XF_EINVAL, "select.site", "can never match: site 'eu-1' is in region 'eu'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"destinations\": [\"*\"], \"conditions\": {\"valid_from\": 10, \"valid_until\": 10}}",
       XF_EINVAL, "valid_until", "can never match"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"weights\","
             " \"destinations\": [\"*\"]}",
       XF_EINVAL, "kind", "unknown artifact kind 'weights'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"maybe\", \"kind\": \"update\","
             " \"destinations\": [\"*\"]}",
       XF_EINVAL, "effect", "unknown effect 'maybe'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"destinations\": [\"mars\"]}",
       XF_EINVAL, "destinations[0]", "unknown destination region 'mars'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\", \"destinations\": []}",
       XF_EINVAL, "destinations", "at least one destination"},
      {NULL, "{\"id\": \"r\", \"effect\": \"deny\", \"kind\": \"update\","
             " \"destinations\": [\"*\"], \"conditions\": {\"max_epsilon\": 1}}",
       XF_EINVAL, "conditions", "apply to allow rules only"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"destinations\": [\"*\"], \"conditions\": {\"max_epsilonn\": 1}}",
       XF_EFORMAT, "max_epsilonn", "unknown member"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"destinations\": [\"*\"], \"conditions\": {\"min_cohort\": 1.5}}",
       XF_EINVAL, "min_cohort", "whole number"},
      {NULL, "{\"id\": \"eu-regional\", \"effect\": \"allow\", \"kind\": \"update\","
             " \"destinations\": [\"*\"]}",
       XF_EEXISTS, "id", "'eu-regional'"},
      {NULL, "{\"id\": \"r\", \"effect\": \"allow\"", XF_EFORMAT, "line 1", "not valid JSON"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    const bad_case *c = &cases[i];
    xf_errctx err;
    uint64_t v = 0;
    xf_err rc;
    memset(&err, 0, sizeof(err));
    if (c->doc)
      rc = xf_policy_import(s->db, c->doc, "alice", "bad", 1000, &v, &err);
    else
      rc = xf_policy_rule_add(s->db, c->rule, &chg, &v, &err);
    if (rc != c->code || !strstr(err.field, c->field) || !strstr(err.msg, c->msg))
      fail_msg("case %zu: got %s, field '%s', msg '%s'", i, xf_err_name(rc), err.field, err.msg);
    /* A refused rule inside a whole document is refused the same way. */
    if (c->rule && c->code != XF_EFORMAT && c->code != XF_EEXISTS) {
      char doc[4096];
      snprintf(doc, sizeof(doc), "{" BASE_PLACES ", \"rules\": [%s]}", c->rule);
      rc = xf_policy_import(s->db, doc, "alice", "bad", 1000, &v, &err);
      if (rc != c->code || !strstr(err.field, c->field) || !strstr(err.msg, c->msg))
        fail_msg("case %zu as a document: got %s, field '%s', msg '%s'", i, xf_err_name(rc),
                 err.field, err.msg);
      assert_non_null(strstr(err.field, "rules[0]"));
    }
  }

  /* Single edits. */
  xf_errctx err;
  xf_policy_change c = chg;
  assert_int_equal(xf_policy_site_add(s->db, "x-1", "mars", &c, NULL, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "unknown region 'mars'"));
  assert_int_equal(xf_policy_site_add(s->db, "eu-1", "eu", &c, NULL, &err), XF_EEXISTS);
  assert_int_equal(xf_policy_region_add(s->db, "eu", "", &c, NULL, &err), XF_EEXISTS);
  assert_int_equal(xf_policy_dataset_add(s->db, "m", "eu-1", "secret", &c, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "classification");
  assert_int_equal(xf_policy_dataset_tag(s->db, "mnist", "eu-1", "health", &c, NULL, &err),
                   XF_EEXISTS);
  assert_int_equal(xf_policy_dataset_tag(s->db, "nope", "eu-1", "x", &c, NULL, &err), XF_ENOENT);
  assert_int_equal(xf_policy_dataset_classify(s->db, "mnist", "eu-1", "", &c, NULL, &err),
                   XF_EINVAL);
  assert_int_equal(xf_policy_rule_rm(s->db, "nope", &c, NULL, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "'nope'"));
  c.reason = "";
  assert_int_equal(xf_policy_region_add(s->db, "ap2", "", &c, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "reason");
  assert_int_equal(xf_policy_import(s->db, quickstart, "alice", "", 1, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "reason");
  assert_int_equal(xf_policy_import(s->db, quickstart, "", "why", 1, NULL, &err), XF_EINVAL);
  assert_string_equal(err.field, "author");

  uint64_t after;
  assert_int_equal(xf_policy_version_current(s->db, &after, NULL), XF_OK);
  assert_int_equal(after, before);
  char *doc_after;
  assert_int_equal(xf_policy_export(s->db, after, &doc_after, NULL), XF_OK);
  assert_string_equal(doc_before, doc_after);
  xf_free(doc_before);
  xf_free(doc_after);
}

static void decide_refuses_a_job_it_cannot_read(void **state) {
  scratch *s = *state;
  import_doc(s->db, quickstart);
  xf_policy *p;
  assert_int_equal(xf_policy_load(s->db, 1, &p, NULL), XF_OK);
  xf_policy_decision d;
  xf_errctx err;
  xf_policy_job job = plain_job;
  job.coordinator_region = "mars";
  assert_int_equal(xf_policy_decide(p, &job, 1000, &d, &err), XF_EINVAL);
  assert_string_equal(err.field, "coordinator_region");
  assert_int_equal(d.n_sites, 0);
  job = plain_job;
  job.privacy = true;
  job.epsilon = 0;
  assert_int_equal(xf_policy_decide(p, &job, 1000, &d, &err), XF_EINVAL);
  assert_string_equal(err.field, "epsilon");
  job = plain_job;
  job.dataset = "nothing";
  assert_int_equal(xf_policy_decide(p, &job, 1000, &d, &err), XF_OK);
  assert_false(d.allowed);
  assert_true(suggests(&d, "no site holds dataset 'nothing'"));
  xf_policy_decision_free(&d);
  /* Too few eligible sites for the quorum, with nothing else to suggest. */
  job = plain_job;
  job.min_sites = 3;
  job.coordinator_region = "ap";
  assert_int_equal(xf_policy_rule_add(s->db, ALLOW_UPDATE("{\"region\": \"us\"}", "[\"ap\"]"),
                                      &chg, NULL, &err), XF_OK);
  xf_policy_free(p);
  assert_int_equal(xf_policy_load(s->db, 2, &p, NULL), XF_OK);
  assert_int_equal(xf_policy_decide(p, &job, 1000, &d, &err), XF_OK);
  assert_false(d.allowed);
  assert_true(site(&d, "us-1")->eligible);
  xf_policy_decision_free(&d);
  xf_policy_free(p);
}

static void failed_allocations_leave_nothing_behind(void **state) {
  scratch *s = *state;
  import_doc(s->db, quickstart);
  xf_policy_job job = plain_job;
  job.secagg = true;
  for (long n = 0; n < 200; n++) {
    xf_policy *p = NULL;
    xf_policy_decision d;
    char *text = NULL;
    xf_alloc_fail_after(n);
    xf_err rc = xf_policy_load(s->db, 1, &p, NULL);
    if (rc == XF_OK) rc = xf_policy_decide(p, &job, 1000, &d, NULL);
    if (rc == XF_OK) xf_policy_decision_free(&d);
    if (rc == XF_OK) rc = xf_policy_diff(s->db, 0, 1, &text, NULL);
    xf_alloc_fail_reset();
    xf_free(text);
    xf_policy_free(p);
    if (rc == XF_OK) break;
    assert_true(rc == XF_ENOMEM || rc == XF_EDB);
  }
}

/* An edit made on a document gives the document the same edit makes in a
 * database, and is refused the same way. */
static void edits_on_documents_match_edits_on_the_database(void **state) {
  scratch *s = *state;
  xf_errctx err;
  const xf_policy_edit edits[] = {
      {XF_POLICY_EDIT_REGION_ADD, "eu", "EU GDPR", NULL},
      {XF_POLICY_EDIT_REGION_ADD, "us", NULL, NULL},
      {XF_POLICY_EDIT_SITE_ADD, "eu-1", "eu", NULL},
      {XF_POLICY_EDIT_DATASET_ADD, "mnist", "eu-1", "internal"},
      {XF_POLICY_EDIT_DATASET_TAG, "mnist", "eu-1", "health"},
      {XF_POLICY_EDIT_DATASET_CLASSIFY, "mnist", "eu-1", "restricted"},
      {XF_POLICY_EDIT_RULE_ADD, ALLOW_UPDATE("{}", "[\"us\"]"), NULL, NULL},
      {XF_POLICY_EDIT_RULE_RM, "r", NULL, NULL},
  };
  char *doc = NULL;
  assert_int_equal(xf_policy_export(s->db, 0, &doc, &err), XF_OK);
  for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
    uint64_t v = 0;
    assert_int_equal(xf_policy_commit(s->db, &edits[i], &chg, &v, &err), XF_OK);
    assert_int_equal(v, i + 1);
    char *next = NULL, *want = NULL;
    assert_int_equal(xf_policy_edit_document(doc, &edits[i], &next, &err), XF_OK);
    assert_int_equal(xf_policy_export(s->db, v, &want, &err), XF_OK);
    assert_string_equal(next, want);
    xf_free(want);
    xf_free(doc);
    doc = next;
  }
  /* A site in an unknown region: refused naming it, nothing written. */
  const xf_policy_edit bad = {XF_POLICY_EDIT_SITE_ADD, "ap-1", "ap", NULL};
  char *out = (char *)1;
  assert_int_equal(xf_policy_edit_document(doc, &bad, &out, &err), XF_EINVAL);
  assert_null(out);
  assert_non_null(strstr(err.msg, "unknown region 'ap'"));
  xf_free(doc);
}

/* A change made on the caller's model of the current version gives the
 * version the database reads back, leaves the caller's model as it was, and
 * is made on the database's current version when the caller's is older;
 * the diff names each kind of change of each kind of thing. */
static void commit_keep_gives_the_version_it_reads_back(void **state) {
  scratch *s = *state;
  xf_errctx err;
  static const char before[] =
      "{\"regions\": [{\"name\": \"eu\", \"jurisdiction\": \"EU\"}, {\"name\": \"us\"}],"
      " \"sites\": [{\"name\": \"a\", \"region\": \"eu\"}, {\"name\": \"b\", \"region\": \"eu\"}],"
      " \"datasets\": [{\"name\": \"d\", \"site\": \"a\", \"classification\": \"internal\","
      " \"tags\": [\"x\"]}, {\"name\": \"e\", \"site\": \"b\", \"classification\": \"public\"}],"
      " \"rules\": [" ALLOW_UPDATE("{}", "[\"us\"]") "]}";
  static const char after[] =
      "{\"regions\": [{\"name\": \"eu\", \"jurisdiction\": \"EU GDPR\"}, {\"name\": \"us\"}],"
      " \"sites\": [{\"name\": \"a\", \"region\": \"us\"}, {\"name\": \"c\", \"region\": \"eu\"}],"
      " \"datasets\": [{\"name\": \"d\", \"site\": \"a\", \"classification\": \"internal\","
      " \"tags\": [\"x\", \"y\"]}]}";
  uint64_t v = 0;
  assert_int_equal(xf_policy_import(s->db, before, "alice", "before", 1000, &v, &err), XF_OK);
  xf_policy *current = NULL, *made = NULL;
  assert_int_equal(xf_policy_load(s->db, 1, &current, &err), XF_OK);
  char *was = NULL, *got = NULL, *want = NULL;
  assert_int_equal(xf_policy_format(current, &was, &err), XF_OK);

  /* On the caller's model of version 1. */
  const xf_policy_edit tag = {XF_POLICY_EDIT_DATASET_TAG, "e", "b", "z"};
  assert_int_equal(xf_policy_commit_keep(s->db, current, &tag, &chg, &v, &made, &err), XF_OK);
  assert_int_equal(v, 2);
  assert_int_equal(made->version, 2);
  assert_int_equal(xf_policy_format(made, &got, &err), XF_OK);
  assert_int_equal(xf_policy_export(s->db, 2, &want, &err), XF_OK);
  assert_string_equal(got, want);
  xf_free(got);
  xf_free(want);
  xf_policy_free(made);
  assert_int_equal(xf_policy_format(current, &got, &err), XF_OK);
  assert_string_equal(got, was);
  xf_free(got);

  /* An import does not need the current version. */
  const xf_policy_edit import = {XF_POLICY_EDIT_IMPORT, after, NULL, NULL};
  assert_int_equal(xf_policy_commit_keep(s->db, NULL, &import, &chg, &v, &made, &err), XF_OK);
  assert_int_equal(v, 3);
  assert_int_equal(xf_policy_format(made, &got, &err), XF_OK);
  assert_int_equal(xf_policy_export(s->db, 3, &want, &err), XF_OK);
  assert_string_equal(got, want);
  xf_free(got);
  xf_free(want);
  xf_policy_free(made);

  /* The caller's model is of version 1, the database is at 3: the edit is
   * made on 3. */
  const xf_policy_edit region = {XF_POLICY_EDIT_REGION_ADD, "ap", NULL, NULL};
  assert_int_equal(xf_policy_commit_keep(s->db, current, &region, &chg, &v, &made, &err), XF_OK);
  assert_int_equal(v, 4);
  assert_int_equal(made->n_sites, 2);
  assert_string_equal(made->sites[1].name, "c");
  xf_policy_free(made);

  /* A refused edit: no version, no model. */
  made = (xf_policy *)1;
  const xf_policy_edit bad = {XF_POLICY_EDIT_SITE_ADD, "z", "nowhere", NULL};
  assert_int_equal(xf_policy_commit_keep(s->db, NULL, &bad, &chg, &v, &made, &err), XF_EINVAL);
  assert_null(made);
  uint64_t cur = 0;
  assert_int_equal(xf_policy_version_current(s->db, &cur, &err), XF_OK);
  assert_int_equal(cur, 4);
  xf_policy_free(current);
  xf_free(was);

  /* Out of memory at any step: no version, no model, then the edit. */
  xf_policy *latest = NULL;
  assert_int_equal(xf_policy_load(s->db, 4, &latest, &err), XF_OK);
  const xf_policy_edit add = {XF_POLICY_EDIT_DATASET_ADD, "f", "c", "public"};
  xf_err rc = XF_ENOMEM;
  for (long n = 0; n < 1000 && rc != XF_OK; n++) {
    xf_alloc_fail_after(n);
    rc = xf_policy_commit_keep(s->db, latest, &add, &chg, &v, &made, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_OK) break;
    assert_true(rc == XF_ENOMEM || rc == XF_EDB);
    assert_null(made);
    assert_int_equal(xf_policy_version_current(s->db, &cur, &err), XF_OK);
    assert_int_equal(cur, 4);
  }
  assert_int_equal(rc, XF_OK);
  assert_int_equal(v, 5);
  assert_int_equal(made->n_datasets, 2);
  xf_policy_free(made);
  xf_policy_free(latest);

  char *diff = NULL;
  assert_int_equal(xf_policy_diff(s->db, 2, 3, &diff, &err), XF_OK);
  assert_string_equal(
      diff,
      "~ region eu: {\"name\":\"eu\",\"jurisdiction\":\"EU\"} -> "
      "{\"name\":\"eu\",\"jurisdiction\":\"EU GDPR\"}\n"
      "~ site a: {\"name\":\"a\",\"region\":\"eu\"} -> {\"name\":\"a\",\"region\":\"us\"}\n"
      "- site b\n"
      "+ site c: {\"name\":\"c\",\"region\":\"eu\"}\n"
      "~ dataset d@a: {\"name\":\"d\",\"site\":\"a\",\"classification\":\"internal\","
      "\"tags\":[\"x\"]} -> {\"name\":\"d\",\"site\":\"a\",\"classification\":\"internal\","
      "\"tags\":[\"x\",\"y\"]}\n"
      "- dataset e@b\n"
      "- rule r\n");
  xf_free(diff);
}

int main(void) {
  const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, scratch_setup, scratch_teardown)
      T(quickstart_eu_leaves_only_as_secure_private_regional_aggregate),
      T(each_selector_field_picks_its_datasets),
      T(each_kind_governs_its_own_artifact),
      T(destinations_name_regions_or_anywhere),
      T(default_deny_across_regions_same_region_allowed),
      T(deny_beats_allow_in_either_order),
      T(conditions_max_epsilon_min_cohort_secagg),
      T(validity_windows_before_inside_after),
      T(change_mid_job_applies_to_new_version_only),
      T(versions_are_immutable_in_the_database),
      T(single_edits_make_versions_with_log),
      T(edits_on_documents_match_edits_on_the_database),
      T(commit_keep_gives_the_version_it_reads_back),
      T(import_export_round_trip_is_identity),
      T(bad_input_is_refused_naming_it_and_nothing_applied),
      T(decide_refuses_a_job_it_cannot_read),
      T(failed_allocations_leave_nothing_behind),
#undef T
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
