/* SPDX-License-Identifier: Apache-2.0 */
/* Datasets the sites register, pending in the policy: the journal's record
 * of what sites announced (coordinator/journal.h), the pick of an adoption
 * (coordinator/pending.h) and the one policy change that adopts them
 * (policy/policy.h, datasets_add), on real SQLite files, no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "support.h"

#include "base/alloc.h"
#include "coordinator/journal.h"
#include "coordinator/pending.h"
#include "policy/policy.h"

static char root[256];
static int n_dbs;

static int group_setup(void **state) {
  (void)state;
  return xf_test_mkdtemp(root, sizeof(root), "pending");
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(root);
  return 0;
}

/* A fresh coordinator journal holding a policy with regions us and eu,
 * sites us-1 and eu-1 and dataset fmnist at us-1 (version 1). */
typedef struct fixture {
  xf_db *db;
  xf_policy *policy; /* the current version */
} fixture;

static const char *const POLICY =
    "{\"regions\": [{\"name\": \"us\"}, {\"name\": \"eu\"}],"
    " \"sites\": [{\"name\": \"us-1\", \"region\": \"us\"},"
    " {\"name\": \"eu-1\", \"region\": \"eu\"}],"
    " \"datasets\": [{\"name\": \"fmnist\", \"site\": \"us-1\", \"classification\": \"internal\","
    " \"tags\": []}],"
    " \"rules\": []}";

static void check(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK) fail_msg("%s: %s: %s", xf_strerror(rc), err->field, err->msg);
}

static void reload(fixture *f) {
  xf_errctx err = {0};
  uint64_t v = 0;
  xf_policy_free(f->policy);
  f->policy = NULL;
  check(xf_policy_version_current(f->db, &v, &err), &err);
  check(xf_policy_load(f->db, v, &f->policy, &err), &err);
}

static int setup(void **state) {
  static fixture f;
  memset(&f, 0, sizeof(f));
  char path[400];
  snprintf(path, sizeof(path), "%s/coord-%d.db", root, n_dbs++);
  xf_errctx err = {0};
  if (xf_journal_open(path, &f.db, &err) != XF_OK) return -1;
  if (xf_policy_import(f.db, POLICY, "carol", "start", 1000.0, NULL, &err) != XF_OK) return -1;
  reload(&f);
  *state = &f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  xf_policy_free(f->policy);
  xf_db_close(f->db);
  return 0;
}

static const char *const CT[] = {"ct", "imaging"};
static const char *const FM[] = {"fmnist"};

/* What us-1 announces: fmnist (in the policy) and scans (not). */
static const xf_journal_announced US1[] = {
    {.name = "fmnist", .classification = "internal", .tags = FM, .n_tags = 1,
     .train_records = 600, .test_records = 100, .classes = 10, .height = 28, .width = 28,
     .channels = 1},
    {.name = "scans", .classification = "confidential", .tags = CT, .n_tags = 2,
     .train_records = 300, .test_records = 50, .classes = 2, .height = 64, .width = 64,
     .channels = 1},
};
/* What eu-1 announces: fmnist, which the policy holds only at us-1. */
static const xf_journal_announced EU1[] = {
    {.name = "fmnist", .classification = "internal", .tags = FM, .n_tags = 1,
     .train_records = 500, .test_records = 90, .classes = 10, .height = 28, .width = 28,
     .channels = 1},
};

static void announce(fixture *f, const char *site, const char *region,
                     const xf_journal_announced *ds, size_t n, double now) {
  xf_errctx err = {0};
  const xf_journal_site_datasets a = {site, region, ds, n};
  check(xf_journal_datasets_seen(f->db, &a, 1, f->policy, now, &err), &err);
}

static size_t pending(fixture *f, xf_journal_pending **rows) {
  xf_errctx err = {0};
  size_t n = 0;
  check(xf_journal_datasets_pending(f->db, f->policy, rows, &n, &err), &err);
  return n;
}

/* Adopts what pick selects as the coordinator does: one edit on the
 * current version. Returns the refusal's code (XF_OK: adopted). */
static xf_err adopt(fixture *f, const xf_pending_pick *pick, xf_errctx *err) {
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows), count = 0;
  char *json = NULL;
  xf_err rc = xf_pending_adoption(rows, n, f->policy, pick, &json, &count, err);
  xf_journal_pending_free(rows, n);
  if (rc != XF_OK) return rc;
  const xf_policy_edit e = {XF_POLICY_EDIT_DATASETS_ADD, json, NULL, NULL};
  const xf_policy_change chg = {"carol", "adopt", 2000.0};
  xf_policy *made = NULL;
  uint64_t v = 0;
  rc = xf_policy_commit_keep(f->db, f->policy, &e, &chg, &v, &made, err);
  xf_free(json);
  if (rc == XF_OK) {
    assert_int_equal(v, f->policy->version + 1);
    xf_policy_free(f->policy);
    f->policy = made;
  }
  return rc;
}

static uint64_t version(fixture *f) {
  xf_errctx err = {0};
  uint64_t v = 0;
  check(xf_policy_version_current(f->db, &v, &err), &err);
  return v;
}

/* ---- what is pending -------------------------------------------------------------------- */

static void a_dataset_the_policy_does_not_hold_is_pending_and_one_it_holds_is_not(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "eu-1", "eu", EU1, 1, 1501.0);
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  assert_int_equal(n, 2);
  /* by site, then name */
  assert_string_equal(rows[0].site, "eu-1");
  assert_string_equal(rows[0].name, "fmnist");
  assert_string_equal(rows[1].site, "us-1");
  assert_string_equal(rows[1].name, "scans");
  assert_string_equal(rows[1].region, "us");
  assert_string_equal(rows[1].classification, "confidential");
  assert_string_equal(rows[1].tags, "[\"ct\",\"imaging\"]");
  assert_int_equal(rows[1].train_records, 300);
  assert_int_equal(rows[1].test_records, 50);
  assert_int_equal(rows[1].classes, 2);
  assert_int_equal(rows[1].height, 64);
  assert_true(rows[1].first_seen == 1500.0);
  xf_journal_pending_free(rows, n);
}

static void announcing_again_keeps_the_rows_and_when_first_seen(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "us-1", "us", US1, 2, 1600.0);
  announce(f, "us-1", "us", US1, 2, 1700.0);
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].name, "scans");
  assert_true(rows[0].first_seen == 1500.0);
  assert_true(rows[0].last_seen == 1700.0);
  xf_journal_pending_free(rows, n);
}

static void a_dataset_the_site_stops_announcing_is_no_longer_pending(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "eu-1", "eu", EU1, 1, 1500.0);
  announce(f, "us-1", "us", US1, 1, 1600.0); /* fmnist only */
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].site, "eu-1"); /* another site's stays */
  xf_journal_pending_free(rows, n);
}

static void a_dataset_a_later_policy_change_adds_is_no_longer_pending(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  xf_errctx err = {0};
  const xf_policy_change chg = {"carol", "by hand", 1550.0};
  check(xf_policy_dataset_add(f->db, "scans", "us-1", "internal", &chg, NULL, &err), &err);
  reload(f);
  xf_journal_pending *rows = NULL;
  assert_int_equal(pending(f, &rows), 0);
  assert_null(rows);
}

static void a_site_or_dataset_without_a_name_is_refused_and_nothing_recorded(void **state) {
  fixture *f = *state;
  const xf_journal_announced bad[] = {{.name = "scans"}, {.name = ""}};
  const xf_journal_site_datasets a[] = {{"us-1", "us", US1, 2}, {"eu-1", "eu", bad, 2}};
  xf_errctx err = {0};
  assert_int_equal(xf_journal_datasets_seen(f->db, a, 2, f->policy, 1500.0, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "eu-1"));
  xf_journal_pending *rows = NULL;
  assert_int_equal(pending(f, &rows), 0);
}

/* ---- adopting ---------------------------------------------------------------------------- */

static void adopting_by_name_makes_one_restricted_version_with_the_sites_tags(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "eu-1", "eu", EU1, 1, 1500.0);
  uint64_t before = version(f);
  const char *names[] = {"scans", "fmnist"};
  xf_errctx err = {0};
  check(adopt(f, &(xf_pending_pick){.names = names, .n_names = 2}, &err), &err);
  assert_int_equal(version(f), before + 1);
  const xf_policy_dataset *d = xf_policy_dataset_find(f->policy, "scans", "us-1");
  assert_non_null(d);
  assert_int_equal(d->classification, XF_POLICY_CLASS_RESTRICTED); /* not the site's word */
  assert_int_equal(d->n_tags, 2);
  assert_string_equal(d->tags[0], "ct");
  assert_string_equal(d->tags[1], "imaging");
  d = xf_policy_dataset_find(f->policy, "fmnist", "eu-1");
  assert_non_null(d);
  assert_int_equal(d->classification, XF_POLICY_CLASS_RESTRICTED);
  /* No rule came with them: what the rules allowed is all that is allowed. */
  assert_int_equal(f->policy->n_rules, 0);
  xf_journal_pending *rows = NULL;
  assert_int_equal(pending(f, &rows), 0);
  /* The next announcement leaves nothing pending either. */
  announce(f, "us-1", "us", US1, 2, 1800.0);
  assert_int_equal(pending(f, &rows), 0);
}

static void adopting_a_name_that_is_not_pending_is_refused_naming_it(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  uint64_t before = version(f);
  const char *names[] = {"scans", "mri"};
  xf_errctx err = {0};
  assert_int_equal(adopt(f, &(xf_pending_pick){.names = names, .n_names = 2}, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "'mri' is not pending"));
  /* one in the policy already says so */
  const char *held[] = {"fmnist"};
  assert_int_equal(adopt(f, &(xf_pending_pick){.names = held, .n_names = 1, .site = "us-1"}, &err),
                   XF_ENOENT);
  assert_non_null(strstr(err.msg, "the policy holds it already"));
  /* pending, but not at the site asked */
  const char *scans[] = {"scans"};
  assert_int_equal(
      adopt(f, &(xf_pending_pick){.names = scans, .n_names = 1, .site = "eu-1"}, &err),
      XF_ENOENT);
  assert_non_null(strstr(err.msg, "at site 'eu-1'"));
  assert_int_equal(version(f), before);
}

static void adopting_at_a_site_the_policy_lacks_is_refused_naming_the_site(void **state) {
  fixture *f = *state;
  announce(f, "ap-1", "ap", EU1, 1, 1500.0);
  uint64_t before = version(f);
  xf_errctx err = {0};
  assert_int_equal(adopt(f, &(xf_pending_pick){.all = true}, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "site 'ap-1' (region ap)"));
  assert_non_null(strstr(err.msg, "xfed policy site add --name ap-1 --region ap"));
  assert_int_equal(version(f), before);
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  assert_int_equal(n, 1); /* still pending */
  xf_journal_pending_free(rows, n);
}

static void adopting_all_at_one_site_leaves_the_others_pending(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "eu-1", "eu", EU1, 1, 1500.0);
  xf_errctx err = {0};
  check(adopt(f, &(xf_pending_pick){.all = true, .site = "eu-1", .classification = "internal"},
              &err),
        &err);
  const xf_policy_dataset *d = xf_policy_dataset_find(f->policy, "fmnist", "eu-1");
  assert_non_null(d);
  assert_int_equal(d->classification, XF_POLICY_CLASS_INTERNAL);
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  assert_int_equal(n, 1);
  assert_string_equal(rows[0].site, "us-1");
  xf_journal_pending_free(rows, n);
  /* and with nothing left at eu-1, --all there is refused */
  assert_int_equal(adopt(f, &(xf_pending_pick){.all = true, .site = "eu-1"}, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "no dataset is pending at site 'eu-1'"));
}

static void an_adoption_names_datasets_or_all_and_a_known_class(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  xf_errctx err = {0};
  const char *names[] = {"scans"};
  assert_int_equal(adopt(f, &(xf_pending_pick){0}, &err), XF_EUSAGE);
  assert_int_equal(adopt(f, &(xf_pending_pick){.names = names, .n_names = 1, .all = true}, &err),
                   XF_EUSAGE);
  assert_int_equal(adopt(f, &(xf_pending_pick){.all = true, .classification = "secret"}, &err),
                   XF_EINVAL);
  assert_non_null(strstr(err.msg, "'secret'"));
}

static void the_listing_says_whether_the_site_is_in_the_policy(void **state) {
  fixture *f = *state;
  announce(f, "us-1", "us", US1, 2, 1500.0);
  announce(f, "ap-1", "ap", EU1, 1, 1500.0);
  xf_journal_pending *rows = NULL;
  size_t n = pending(f, &rows);
  char *text = NULL;
  xf_errctx err = {0};
  check(xf_pending_json(rows, n, f->policy, &text, &err), &err);
  xf_journal_pending_free(rows, n);
  assert_non_null(strstr(text, "\"site\":\"ap-1\""));
  assert_non_null(strstr(text, "\"site_in_policy\":false"));
  assert_non_null(strstr(text, "\"site_in_policy\":true"));
  assert_non_null(strstr(text, "\"classification\":\"confidential\""));
  xf_free(text);
}

/* ---- the policy change ------------------------------------------------------------------- */

static void datasets_add_is_one_version_and_refuses_what_the_policy_holds(void **state) {
  fixture *f = *state;
  xf_errctx err = {0};
  const xf_policy_change chg = {"carol", "two at once", 1600.0};
  uint64_t before = version(f), v = 0;
  check(xf_policy_datasets_add(f->db,
                               "[{\"name\":\"a\",\"site\":\"eu-1\",\"classification\":\"public\","
                               "\"tags\":[]},{\"name\":\"b\",\"site\":\"us-1\","
                               "\"classification\":\"restricted\",\"tags\":[\"x\"]}]",
                               &chg, &v, &err),
        &err);
  assert_int_equal(v, before + 1);
  assert_int_equal(xf_policy_datasets_add(
                       f->db,
                       "[{\"name\":\"fmnist\",\"site\":\"us-1\",\"classification\":\"public\","
                       "\"tags\":[]}]",
                       &chg, &v, &err),
                   XF_EEXISTS);
  assert_string_equal(err.field, "datasets[0]");
  assert_int_equal(xf_policy_datasets_add(
                       f->db,
                       "[{\"name\":\"c\",\"site\":\"us-1\",\"classification\":\"public\","
                       "\"tags\":[]},{\"name\":\"c\",\"site\":\"us-1\","
                       "\"classification\":\"public\",\"tags\":[]}]",
                       &chg, &v, &err),
                   XF_EEXISTS); /* the same dataset twice in one change */
  assert_non_null(strstr(err.msg, "dataset 'c' is named twice at site 'us-1'"));
  assert_int_equal(xf_policy_datasets_add(f->db, "[]", &chg, &v, &err), XF_EINVAL);
  assert_int_equal(xf_policy_datasets_add(
                       f->db,
                       "[{\"name\":\"d\",\"site\":\"nowhere\",\"classification\":\"public\","
                       "\"tags\":[]}]",
                       &chg, &v, &err),
                   XF_EINVAL);
  assert_non_null(strstr(err.msg, "'nowhere'"));
  assert_int_equal(version(f), before + 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(
          a_dataset_the_policy_does_not_hold_is_pending_and_one_it_holds_is_not, setup, teardown),
      cmocka_unit_test_setup_teardown(announcing_again_keeps_the_rows_and_when_first_seen, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(a_dataset_the_site_stops_announcing_is_no_longer_pending,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(a_dataset_a_later_policy_change_adds_is_no_longer_pending,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          a_site_or_dataset_without_a_name_is_refused_and_nothing_recorded, setup, teardown),
      cmocka_unit_test_setup_teardown(
          adopting_by_name_makes_one_restricted_version_with_the_sites_tags, setup, teardown),
      cmocka_unit_test_setup_teardown(adopting_a_name_that_is_not_pending_is_refused_naming_it,
                                      setup, teardown),
      cmocka_unit_test_setup_teardown(
          adopting_at_a_site_the_policy_lacks_is_refused_naming_the_site, setup, teardown),
      cmocka_unit_test_setup_teardown(adopting_all_at_one_site_leaves_the_others_pending, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(an_adoption_names_datasets_or_all_and_a_known_class, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(the_listing_says_whether_the_site_is_in_the_policy, setup,
                                      teardown),
      cmocka_unit_test_setup_teardown(
          datasets_add_is_one_version_and_refuses_what_the_policy_holds, setup, teardown),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
