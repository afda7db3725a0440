/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the round state machine (cohort draw, close rules, retries, late
 * reports) with an injected clock, and of the coordinator's journal (schema,
 * crash recovery, atomic round results, metrics) on real SQLite files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "coordinator/journal.h"
#include "job/jobspec.h"
#include "coordinator/round.h"
#include "crypto/digest.h"
#include "storage/db.h"

static char test_root[64];

static int group_setup(void **state) {
  (void)state;
  snprintf(test_root, sizeof(test_root), "/tmp/xf-round-XXXXXX");
  if (!mkdtemp(test_root)) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(test_root);
  return 0;
}

/* ---- helpers -------------------------------------------------------------------- */

/* A valid spec: `rounds` rounds, all eligible sites invited, min_sites 2,
 * deadline 100 s, seed 42. */
static xf_jobspec spec_of(uint32_t rounds) {
  xf_jobspec s;
  xf_jobspec_defaults(&s);
  snprintf(s.name, sizeof(s.name), "round-test");
  snprintf(s.data.dataset, sizeof(s.data.dataset), "fmnist");
  s.rounds = rounds;
  s.min_sites = 2;
  s.round_deadline_s = 100;
  s.seed = 42;
  xf_errctx err;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_OK);
  return s;
}

static xf_round *round_new(const xf_jobspec *spec, uint32_t round, uint32_t attempt,
                           uint32_t max_attempts) {
  xf_round *r = NULL;
  assert_int_equal(xf_round_create(spec, round, attempt, max_attempts, &r, NULL), XF_OK);
  return r;
}

/* Sites 1..n as the eligible list. */
static void sites_1_to(uint64_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) v[i] = i + 1;
}

static size_t count_actions(const xf_round *r, xf_round_action_kind kind) {
  size_t n, c = 0;
  const xf_round_action *a = xf_round_actions(r, &n);
  for (size_t i = 0; i < n; i++) c += a[i].kind == kind;
  return c;
}

/* The last action of the last call; fails the test when there is none. */
static const xf_round_action *last_action(const xf_round *r) {
  size_t n;
  const xf_round_action *a = xf_round_actions(r, &n);
  assert_true(n > 0);
  return &a[n - 1];
}

static size_t n_actions(const xf_round *r) {
  size_t n;
  (void)xf_round_actions(r, &n);
  return n;
}

static void accept_all(xf_round *r) {
  size_t n;
  const uint64_t *cohort = xf_round_cohort(r, &n);
  for (size_t i = 0; i < n; i++)
    assert_int_equal(xf_round_site_accepted(r, cohort[i], NULL), XF_OK);
}

/* ---- the state machine ------------------------------------------------------------ */

static void round_closes_at_deadline_with_quorum(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(3);
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t sites[4];
  sites_1_to(sites, 4);
  assert_int_equal(xf_round_open(r, sites, 4, 1000.0, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_OPEN);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_SEND_TASK), 4);
  size_t n;
  const xf_round_action *a = xf_round_actions(r, &n);
  for (size_t i = 0; i < n; i++) assert_true(a[i].deadline == 1100.0);
  accept_all(r);

  const uint64_t *cohort = xf_round_cohort(r, &n);
  uint64_t silent[2] = {cohort[2], cohort[3]};
  assert_int_equal(xf_round_update_reported(r, cohort[0], 600, NULL), XF_OK);
  assert_int_equal(xf_round_update_reported(r, cohort[1], 400, NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);

  /* Before the deadline nothing happens, however long the wait. */
  assert_int_equal(xf_round_tick(r, 1099.999, NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_OPEN);

  assert_int_equal(xf_round_tick(r, 1100.0, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_COMMITTING);
  a = xf_round_actions(r, &n);
  assert_int_equal(n, 3);
  assert_int_equal(a[0].kind, XF_ROUND_ACT_CANCEL);
  assert_int_equal(a[1].kind, XF_ROUND_ACT_CANCEL);
  assert_true((a[0].site == silent[0] && a[1].site == silent[1]) ||
              (a[0].site == silent[1] && a[1].site == silent[0]));
  assert_int_equal(a[2].kind, XF_ROUND_ACT_COMMIT);
  assert_int_equal(a[2].reported, 2);

  uint64_t samples = 0;
  xf_participant_state ps;
  assert_int_equal(xf_round_site(r, cohort[0], &ps, &samples, NULL), XF_OK);
  assert_int_equal(ps, XF_PARTICIPANT_REPORTED);
  assert_int_equal(samples, 600);

  /* A later tick changes nothing; the commit moves to round 2. */
  assert_int_equal(xf_round_tick(r, 5000.0, NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_committed(r, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_READY);
  assert_int_equal(xf_round_number(r), 2);
  assert_int_equal(xf_round_attempt(r), 1);
  xf_round_free(r);
}

static void round_retries_below_min_sites(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(3);
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t sites[3];
  sites_1_to(sites, 3);
  assert_int_equal(xf_round_open(r, sites, 3, 0.0, NULL), XF_OK);
  size_t n;
  const uint64_t *cohort = xf_round_cohort(r, &n);
  uint64_t first[3];
  memcpy(first, cohort, sizeof(first));
  accept_all(r);
  assert_int_equal(xf_round_update_reported(r, first[0], 10, NULL), XF_OK);
  assert_int_equal(xf_round_tick(r, 100.0, NULL), XF_OK);

  const xf_round_action *a = last_action(r);
  assert_int_equal(a->kind, XF_ROUND_ACT_RETRY);
  assert_int_equal(a->reported, 1);
  assert_non_null(strstr(a->note, "1 of 3 invited sites reported"));
  assert_non_null(strstr(a->note, "min_sites 2"));
  assert_int_equal(count_actions(r, XF_ROUND_ACT_CANCEL), 2);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_READY);
  assert_int_equal(xf_round_number(r), 1);
  assert_int_equal(xf_round_attempt(r), 2);

  /* Attempt 2 opens with a fresh cohort and deadline; the old attempt's
   * report is now late. */
  assert_int_equal(xf_round_open(r, sites, 3, 200.0, NULL), XF_OK);
  assert_true(xf_round_deadline(r) == 300.0);
  assert_int_equal(xf_round_reported(r), 0);

  /* Quorum out of reach closes the attempt without waiting: two of three
   * drop, so min_sites 2 cannot be met. */
  cohort = xf_round_cohort(r, &n);
  assert_int_equal(xf_round_site_dropped(r, cohort[0], NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_site_dropped(r, cohort[1], NULL), XF_OK);
  a = last_action(r);
  assert_int_equal(a->kind, XF_ROUND_ACT_RETRY);
  assert_non_null(strstr(a->note, "min_sites out of reach"));
  assert_int_equal(xf_round_attempt(r), 3);
  xf_round_free(r);
}

static void round_closes_early_when_all_report(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(2);
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t sites[3];
  sites_1_to(sites, 3);
  assert_int_equal(xf_round_open(r, sites, 3, 0.0, NULL), XF_OK);
  size_t n;
  const uint64_t *cohort = xf_round_cohort(r, &n);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(xf_round_update_reported(r, cohort[i], 100 + i, NULL), XF_OK);
    if (i < 2) assert_int_equal(n_actions(r), 0);
  }
  /* Closed at the third report, long before the deadline, with no one to
   * cancel. */
  assert_int_equal(xf_round_get_state(r), XF_ROUND_COMMITTING);
  assert_int_equal(n_actions(r), 1);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_COMMIT);
  assert_int_equal(last_action(r)->reported, 3);

  /* The last round's commit finishes the job. */
  assert_int_equal(xf_round_committed(r, NULL), XF_OK);
  assert_int_equal(xf_round_open(r, sites, 3, 10.0, NULL), XF_OK);
  cohort = xf_round_cohort(r, &n);
  for (size_t i = 0; i < 3; i++)
    assert_int_equal(xf_round_update_reported(r, cohort[i], 1, NULL), XF_OK);
  assert_int_equal(xf_round_committed(r, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_DONE);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_FINISH_JOB);
  assert_int_equal(xf_round_committed(r, NULL), XF_EINVAL);
  xf_round_free(r);
}

static void over_selection_ignores_late_reports(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(3);
  spec.sites_per_round = 4;   /* a count */
  spec.over_selection = 1.5;  /* invite 6, close at 4 */
  assert_int_equal(xf_jobspec_validate(&spec, NULL), XF_OK);
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t sites[10];
  sites_1_to(sites, 10);
  assert_int_equal(xf_round_open(r, sites, 10, 0.0, NULL), XF_OK);
  assert_int_equal(xf_round_invited(r), 6);
  assert_int_equal(xf_round_target(r), 4);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_SEND_TASK), 6);
  accept_all(r);
  size_t n;
  const uint64_t *cohort = xf_round_cohort(r, &n);
  uint64_t c[6];
  memcpy(c, cohort, sizeof(c));
  for (int i = 0; i < 3; i++) assert_int_equal(xf_round_update_reported(r, c[i], 50, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_OPEN);
  assert_int_equal(xf_round_update_reported(r, c[3], 50, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_COMMITTING);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_CANCEL), 2);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_COMMIT);
  assert_int_equal(last_action(r)->reported, 4);

  /* A fifth report is discarded and said so; it does not count. */
  assert_int_equal(xf_round_update_reported(r, c[4], 50, NULL), XF_OK);
  assert_int_equal(n_actions(r), 1);
  const xf_round_action *a = last_action(r);
  assert_int_equal(a->kind, XF_ROUND_ACT_DISCARD);
  assert_int_equal(a->site, c[4]);
  assert_non_null(strstr(a->note, "ignored"));
  assert_non_null(strstr(a->note, "4 reports"));
  assert_int_equal(xf_round_reported(r), 4);
  /* Still after the commit, in the next round's READY state. */
  assert_int_equal(xf_round_committed(r, NULL), XF_OK);
  assert_int_equal(xf_round_update_reported(r, c[5], 50, NULL), XF_OK);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_DISCARD);
  assert_int_equal(xf_round_reported(r), 4);
  /* A site outside the cohort is an error, not a discard. */
  assert_int_equal(xf_round_update_reported(r, 999, 1, NULL), XF_ENOENT);
  xf_round_free(r);
}

static void cohort_of(const xf_jobspec *spec, uint32_t round, uint32_t attempt,
                      const uint64_t *eligible, size_t n, uint64_t *out, size_t *n_out) {
  xf_round *r = round_new(spec, round, attempt, 0);
  assert_int_equal(xf_round_open(r, eligible, n, 0.0, NULL), XF_OK);
  const uint64_t *c = xf_round_cohort(r, n_out);
  memcpy(out, c, *n_out * sizeof(*out));
  xf_round_free(r);
}

static void cohort_is_deterministic_for_seed_and_round(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(10);
  spec.sites_per_round = 0.25;
  uint64_t sites[40], reversed[40];
  for (size_t i = 0; i < 40; i++) {
    sites[i] = 1000 + 7 * i;
    reversed[39 - i] = sites[i];
  }
  uint64_t a[40], b[40], c[40], d[40], e[40];
  size_t na, nb, nc, nd, ne;
  cohort_of(&spec, 3, 1, sites, 40, a, &na);
  cohort_of(&spec, 3, 1, reversed, 40, b, &nb);
  assert_int_equal(na, 10);
  assert_int_equal(nb, 10);
  assert_memory_equal(a, b, sizeof(a[0]) * 10); /* order of the list is irrelevant */
  cohort_of(&spec, 4, 1, sites, 40, c, &nc);
  cohort_of(&spec, 3, 2, sites, 40, d, &nd);
  spec.seed = 43;
  cohort_of(&spec, 3, 1, sites, 40, e, &ne);
  assert_memory_not_equal(a, c, sizeof(a[0]) * 10);
  assert_memory_not_equal(a, d, sizeof(a[0]) * 10);
  assert_memory_not_equal(a, e, sizeof(a[0]) * 10);
  /* The cohort holds distinct eligible sites. */
  for (size_t i = 0; i < 10; i++) {
    assert_true(a[i] >= 1000 && a[i] < 1000 + 7 * 40 && (a[i] - 1000) % 7 == 0);
    for (size_t j = 0; j < i; j++) assert_true(a[i] != a[j]);
  }
  /* A repeated id is refused. */
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t dup[3] = {5, 6, 5};
  assert_int_equal(xf_round_open(r, dup, 3, 0.0, NULL), XF_EINVAL);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_READY);
  xf_round_free(r);
}

static void refused_site_is_not_waited_for(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(3);
  xf_round *r = round_new(&spec, 1, 1, 0);
  uint64_t sites[3];
  sites_1_to(sites, 3);
  assert_int_equal(xf_round_open(r, sites, 3, 0.0, NULL), XF_OK);
  size_t n;
  const uint64_t *cohort = xf_round_cohort(r, &n);
  uint64_t c[3];
  memcpy(c, cohort, sizeof(c));
  assert_int_equal(xf_round_site_refused(r, c[0], "privacy budget spent", NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_site_accepted(r, c[1], NULL), XF_OK);
  assert_int_equal(xf_round_update_reported(r, c[1], 5, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_OPEN);
  assert_int_equal(xf_round_update_reported(r, c[2], 5, NULL), XF_OK);
  /* Both that remained have reported: no waiting for the refusing site. */
  assert_int_equal(xf_round_get_state(r), XF_ROUND_COMMITTING);
  assert_int_equal(n_actions(r), 1);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_COMMIT);
  const char *reason = NULL;
  xf_participant_state ps;
  assert_int_equal(xf_round_site(r, c[0], &ps, NULL, &reason), XF_OK);
  assert_int_equal(ps, XF_PARTICIPANT_REFUSED);
  assert_string_equal(reason, "privacy budget spent");
  xf_round_free(r);

  /* Impossible transitions are refused and change nothing. */
  r = round_new(&spec, 1, 1, 0);
  assert_int_equal(xf_round_open(r, sites, 3, 0.0, NULL), XF_OK);
  cohort = xf_round_cohort(r, &n);
  memcpy(c, cohort, sizeof(c));
  assert_int_equal(xf_round_site_refused(r, c[0], NULL, NULL), XF_OK);
  assert_int_equal(xf_round_site_accepted(r, c[0], NULL), XF_EINVAL);
  assert_int_equal(xf_round_update_reported(r, c[0], 1, NULL), XF_EINVAL);
  assert_int_equal(xf_round_update_reported(r, c[1], 1, NULL), XF_OK);
  assert_int_equal(xf_round_update_reported(r, c[1], 1, NULL), XF_EINVAL);
  assert_int_equal(xf_round_reported(r), 1);
  assert_int_equal(xf_round_site_dropped(r, 12345, NULL), XF_ENOENT);
  xf_round_free(r);
}

static void job_fails_after_bounded_retries(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(5);
  xf_round *r = round_new(&spec, 2, 1, 3);
  uint64_t sites[3];
  sites_1_to(sites, 3);
  double now = 0;
  for (uint32_t attempt = 1; attempt <= 3; attempt++) {
    assert_int_equal(xf_round_attempt(r), attempt);
    assert_int_equal(xf_round_open(r, sites, 3, now, NULL), XF_OK);
    size_t n;
    const uint64_t *cohort = xf_round_cohort(r, &n);
    assert_int_equal(xf_round_update_reported(r, cohort[0], 1, NULL), XF_OK);
    now += 100;
    assert_int_equal(xf_round_tick(r, now, NULL), XF_OK);
    const xf_round_action *a = last_action(r);
    if (attempt < 3) {
      assert_int_equal(a->kind, XF_ROUND_ACT_RETRY);
      assert_int_equal(xf_round_get_state(r), XF_ROUND_READY);
    } else {
      assert_int_equal(a->kind, XF_ROUND_ACT_FAIL_JOB);
      assert_non_null(strstr(a->note, "round 2 failed"));
      assert_non_null(strstr(a->note, "attempt 3 of 3"));
      assert_non_null(strstr(a->note, "1 of 3 invited sites reported"));
      assert_non_null(strstr(a->note, "min_sites 2"));
      assert_string_equal(xf_round_failure(r), a->note);
    }
  }
  assert_int_equal(xf_round_get_state(r), XF_ROUND_FAILED);
  assert_int_equal(xf_round_open(r, sites, 3, now, NULL), XF_EINVAL);
  xf_round_free(r);

  /* Too few eligible sites to reach min_sites spends an attempt without
   * sending any task. */
  r = round_new(&spec, 1, 1, 0);
  assert_int_equal(xf_round_open(r, sites, 1, 0.0, NULL), XF_OK);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_SEND_TASK), 0);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_RETRY);
  assert_int_equal(xf_round_open(r, NULL, 0, 0.0, NULL), XF_OK);
  assert_non_null(strstr(last_action(r)->note, "no eligible site"));
  xf_round_free(r);

  /* Out-of-range positions are refused at creation. */
  xf_round *bad = NULL;
  assert_int_equal(xf_round_create(&spec, 6, 1, 0, &bad, NULL), XF_EINVAL);
  assert_int_equal(xf_round_create(&spec, 1, 4, 3, &bad, NULL), XF_EINVAL);
  assert_null(bad);
}

/* ---- the journal --------------------------------------------------------------------- */

static void db_path(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s.db", test_root, name);
}

static xf_db *journal_open(const char *path) {
  xf_db *db = NULL;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_err rc = xf_journal_open(path, &db, &err);
  if (rc != XF_OK) print_error("%s\n", err.msg);
  assert_int_equal(rc, XF_OK);
  return db;
}

static int64_t query_int(xf_db *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(xf_db_prepare(db, sql, &st, NULL), XF_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* The first column of the first row as text, into buf. */
static const char *query_text(xf_db *db, const char *sql, char *buf, size_t n) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(xf_db_prepare(db, sql, &st, NULL), XF_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  const unsigned char *t = sqlite3_column_text(st, 0);
  snprintf(buf, n, "%s", t ? (const char *)t : "(null)");
  sqlite3_finalize(st);
  return buf;
}

static xf_digest digest_of(const char *s) {
  xf_digest d;
  xf_digest_buf(s, strlen(s), &d);
  return d;
}

static void check(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK) print_error("%s: %s\n", xf_err_name(rc), err->msg);
  assert_int_equal(rc, XF_OK);
}

static void report(xf_db *db, int64_t job, uint32_t round, uint32_t attempt, uint64_t site) {
  xf_errctx err;
  xf_journal_participant p = {.site = site, .state = XF_PARTICIPANT_REPORTED,
                              .samples = 100 * site, .bytes_up = 4096, .bytes_down = 8192};
  check(xf_journal_participant_set(db, job, round, attempt, &p, 10.0, &err), &err);
}

static void journal_schema_migrates_fresh_and_reopens(void **state) {
  (void)state;
  char path[128];
  db_path("schema", path, sizeof(path));
  size_t n_migrations;
  assert_non_null(xf_journal_migrations(&n_migrations));
  assert_true(n_migrations >= 1);

  xf_db *db = journal_open(path);
  assert_int_equal(query_int(db, "PRAGMA user_version"), (int64_t)n_migrations);
  assert_int_equal(query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
                                 " AND name IN ('jobs','rounds','participants','metrics')"),
                   4);
  xf_jobspec spec = spec_of(2);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0;
  xf_errctx err;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  /* The constraints hold: an unknown state is refused by the schema. */
  assert_int_equal(xf_db_exec(db, "UPDATE jobs SET state = 'sleeping'", NULL), XF_EDB);
  xf_db_close(db);

  db = journal_open(path);
  assert_int_equal(query_int(db, "PRAGMA user_version"), (int64_t)n_migrations);
  xf_journal_job j;
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.state, XF_JOB_QUEUED);
  assert_int_equal(j.round, 1);
  assert_int_equal(j.attempt, 1);
  assert_false(j.round_open);
  assert_memory_equal(&j.model, &d0, sizeof(d0));
  assert_false(j.has_opt_state);
  assert_string_equal(j.spec.name, "round-test");
  assert_int_equal(j.spec.rounds, 2);
  assert_int_equal(j.spec.seed, 42);
  assert_int_equal(xf_journal_job_load(db, job + 1, &j, NULL), XF_ENOENT);
  xf_db_close(db);
}

/* A SQL function that kills the process that calls it, for the crash test. */
static void die_now(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)ctx;
  (void)argc;
  (void)argv;
  raise(SIGKILL);
}

/* Runs in the child: reports sites 1 and 2 in round 2, then dies inside the
 * round's commit transaction, after the round row has been closed and
 * before the job row takes the new model. Exits 1 where the test setup
 * itself fails. */
static void child_dies_in_commit(const char *path, int64_t job) {
  xf_db *db = NULL;
  if (xf_journal_open(path, &db, NULL) != XF_OK) _exit(1);
  for (uint64_t site = 1; site <= 2; site++) {
    xf_journal_participant p = {.site = site, .state = XF_PARTICIPANT_REPORTED, .samples = 7};
    if (xf_journal_participant_set(db, job, 2, 1, &p, 20.0, NULL) != XF_OK) _exit(1);
  }
  if (sqlite3_create_function(xf_db_handle(db), "xf_test_die", 0, SQLITE_UTF8, NULL, die_now,
                              NULL, NULL) != SQLITE_OK)
    _exit(1);
  /* A TEMP trigger lives in this connection only: the file's schema stays
   * as it is. */
  if (xf_db_exec(db,
                 "CREATE TEMP TRIGGER die_in_commit BEFORE UPDATE OF model_digest ON main.jobs"
                 " BEGIN SELECT xf_test_die(); END;",
                 NULL) != XF_OK)
    _exit(1);
  xf_digest d2 = digest_of("model 2");
  xf_err rc = xf_journal_round_commit(db, job, 2, 1, &d2, NULL, 30.0, NULL);
  (void)rc;
  _exit(2); /* not reached when the trigger fired */
}

static void journal_resumes_round_after_kill_mid_commit(void **state) {
  (void)state;
  char path[128];
  db_path("crash", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(3);
  xf_digest d0 = digest_of("model 0"), d1 = digest_of("model 1"), o1 = digest_of("opt 1");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);

  /* Round 1 runs and commits. */
  uint64_t cohort[3] = {1, 2, 3};
  check(xf_journal_round_open(db, job, 1, 1, cohort, 3, 101.0, 1.0, &err), &err);
  report(db, job, 1, 1, 1);
  report(db, job, 1, 1, 2);
  check(xf_journal_round_commit(db, job, 1, 1, &d1, &o1, 50.0, &err), &err);
  assert_int_equal(query_int(db, "SELECT reported FROM rounds WHERE round = 1"), 2);
  char buf[128];
  assert_string_equal(query_text(db, "SELECT state FROM participants WHERE round = 1"
                                     " AND site = 3", buf, sizeof(buf)),
                      "dropped");
  /* Round 2 opens; the coordinator process then dies inside its commit. */
  check(xf_journal_round_open(db, job, 2, 1, cohort, 3, 160.0, 60.0, &err), &err);
  xf_db_close(db);

  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_dies_in_commit(path, job);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGKILL);

  /* Restart: the job resumes in round 2, attempt 1, with the model and
   * optimizer state of round 1; the participants written before the commit
   * began are there, the commit's round closure is not. */
  db = journal_open(path);
  int64_t *ids = NULL;
  size_t n_ids = 0;
  check(xf_journal_running_jobs(db, &ids, &n_ids, &err), &err);
  assert_int_equal(n_ids, 1);
  assert_int_equal(ids[0], job);
  xf_free(ids);
  xf_journal_job j;
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.state, XF_JOB_RUNNING);
  assert_int_equal(j.round, 2);
  assert_int_equal(j.attempt, 1);
  assert_true(j.round_open);
  assert_int_equal(j.rounds_committed, 1);
  assert_memory_equal(&j.model, &d1, sizeof(d1));
  assert_true(j.has_opt_state);
  assert_memory_equal(&j.opt_state, &o1, sizeof(o1));
  assert_string_equal(query_text(db, "SELECT state FROM rounds WHERE round = 2", buf,
                                 sizeof(buf)),
                      "open");
  assert_int_equal(query_int(db, "SELECT count(*) FROM participants WHERE round = 2"
                                 " AND state = 'reported'"),
                   2);

  /* The state machine picks up at that round and the attempt reopens afresh
   * with the same cohort, then commits. */
  xf_round *r = round_new(&j.spec, j.round, j.attempt, 0);
  assert_int_equal(xf_round_open(r, cohort, 3, 200.0, NULL), XF_OK);
  size_t n;
  const uint64_t *c = xf_round_cohort(r, &n);
  check(xf_journal_round_open(db, job, xf_round_number(r), xf_round_attempt(r), c, n,
                              xf_round_deadline(r), 200.0, &err),
        &err);
  assert_int_equal(query_int(db, "SELECT count(*) FROM participants WHERE round = 2"
                                 " AND state = 'reported'"),
                   0);
  for (size_t i = 0; i < n; i++) {
    uint64_t site = c[i];
    assert_int_equal(xf_round_update_reported(r, site, 9, NULL), XF_OK);
    report(db, job, 2, 1, site);
  }
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_COMMIT);
  xf_digest d2 = digest_of("model 2");
  check(xf_journal_round_commit(db, job, 2, 1, &d2, NULL, 250.0, &err), &err);
  assert_int_equal(xf_round_committed(r, NULL), XF_OK);
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.round, 3);
  assert_false(j.round_open);
  assert_memory_equal(&j.model, &d2, sizeof(d2));
  assert_false(j.has_opt_state);
  /* A closed attempt cannot be opened again. */
  assert_int_equal(xf_journal_round_open(db, job, 2, 1, c, n, 1.0, 1.0, NULL), XF_EINVAL);
  xf_round_free(r);
  xf_db_close(db);
}

static void journal_round_result_is_atomic(void **state) {
  (void)state;
  char path[128];
  db_path("atomic", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(1);
  xf_digest d0 = digest_of("model 0"), d1 = digest_of("model 1"), o1 = digest_of("opt 1");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  uint64_t cohort[3] = {4, 5, 6};
  check(xf_journal_round_open(db, job, 1, 1, cohort, 3, 101.0, 1.0, &err), &err);
  report(db, job, 1, 1, 4);
  report(db, job, 1, 1, 5);

  /* A failure on the job row, the statement after the round's closure. */
  check(xf_db_exec(db,
                   "CREATE TEMP TRIGGER refuse_model BEFORE UPDATE OF model_digest ON main.jobs"
                   " BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
                   &err),
        &err);
  xf_errctx_clear(&err);
  assert_int_equal(xf_journal_round_commit(db, job, 1, 1, &d1, &o1, 50.0, &err), XF_EDB);
  assert_non_null(strstr(err.msg, "injected failure"));
  char buf[128], hex[XF_DIGEST_HEX];
  assert_string_equal(query_text(db, "SELECT state FROM rounds", buf, sizeof(buf)), "open");
  assert_string_equal(query_text(db, "SELECT coalesce(outcome, 'none') FROM rounds", buf,
                                 sizeof(buf)),
                      "none");
  assert_int_equal(query_int(db, "SELECT count(*) FROM participants WHERE state = 'dropped'"),
                   0);
  xf_digest_hex(&d0, hex);
  assert_string_equal(query_text(db, "SELECT model_digest FROM jobs", buf, sizeof(buf)), hex);
  assert_string_equal(query_text(db, "SELECT coalesce(opt_state_digest, 'none') FROM jobs", buf,
                                 sizeof(buf)),
                      "none");
  assert_int_equal(query_int(db, "SELECT current_round FROM jobs"), 1);
  check(xf_db_exec(db, "DROP TRIGGER temp.refuse_model", &err), &err);

  /* A job that is no longer running refuses the result at its last
   * statement; the round's closure goes with it. */
  check(xf_journal_job_set_state(db, job, XF_JOB_PAUSED, "policy changed", 60.0, &err), &err);
  assert_int_equal(xf_journal_round_commit(db, job, 1, 1, &d1, &o1, 60.0, NULL), XF_EINVAL);
  assert_string_equal(query_text(db, "SELECT state FROM rounds", buf, sizeof(buf)), "open");

  /* Once running again it commits, all of it at once; the last round makes
   * the job done. */
  check(xf_journal_job_set_state(db, job, XF_JOB_RUNNING, NULL, 70.0, &err), &err);
  check(xf_journal_round_commit(db, job, 1, 1, &d1, &o1, 70.0, &err), &err);
  assert_string_equal(query_text(db, "SELECT outcome FROM rounds", buf, sizeof(buf)),
                      "committed");
  assert_int_equal(query_int(db, "SELECT reported FROM rounds"), 2);
  xf_journal_job j;
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.state, XF_JOB_DONE);
  assert_int_equal(j.round, 2);
  assert_memory_equal(&j.model, &d1, sizeof(d1));
  assert_memory_equal(&j.opt_state, &o1, sizeof(o1));
  xf_db_close(db);
}

static void journal_retry_and_failure_close_the_round(void **state) {
  (void)state;
  char path[128];
  db_path("retry", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(4);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  uint64_t cohort[2] = {8, 9};
  check(xf_journal_round_open(db, job, 1, 1, cohort, 2, 101.0, 1.0, &err), &err);
  report(db, job, 1, 1, 8);
  check(xf_journal_round_retry(db, job, 1, 1, "1 of 2 reported", 101.0, &err), &err);
  xf_journal_job j;
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.round, 1);
  assert_int_equal(j.attempt, 2);
  assert_false(j.round_open);
  /* A participant of a closed attempt cannot change. */
  xf_journal_participant p = {.site = 9, .state = XF_PARTICIPANT_REPORTED};
  assert_int_equal(xf_journal_participant_set(db, job, 1, 1, &p, 1.0, NULL), XF_ENOENT);
  /* Only the current round opens. */
  assert_int_equal(xf_journal_round_open(db, job, 2, 1, cohort, 2, 1.0, 1.0, NULL), XF_EINVAL);

  check(xf_journal_round_open(db, job, 1, 2, cohort, 2, 201.0, 101.0, &err), &err);
  check(xf_journal_job_fail(db, job, 1, 2, "round 1 failed: too few reports", 201.0, &err),
        &err);
  check(xf_journal_job_load(db, job, &j, &err), &err);
  assert_int_equal(j.state, XF_JOB_FAILED);
  assert_string_equal(j.message, "round 1 failed: too few reports");
  assert_int_equal(query_int(db, "SELECT count(*) FROM rounds WHERE outcome = 'retried'"), 1);
  assert_int_equal(query_int(db, "SELECT count(*) FROM rounds WHERE outcome = 'failed'"), 1);
  int64_t *ids = NULL;
  size_t n = 1;
  check(xf_journal_running_jobs(db, &ids, &n, &err), &err);
  assert_int_equal(n, 0);
  assert_null(ids);
  assert_int_equal(xf_journal_round_open(db, job, 1, 3, cohort, 2, 1.0, 1.0, NULL), XF_EINVAL);
  xf_db_close(db);
}

/* A job's traffic is its metrics rows summed: each training report's model
 * down and update up, and the final evaluation's model down, which merges
 * into the row of the round whose model it evaluated without replacing that
 * round's training figures; a report sent again replaces, never adds. */
static void job_traffic_is_its_metrics_rows_with_the_final_evaluation(void **state) {
  (void)state;
  char path[128];
  db_path("traffic", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(2);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  uint64_t up = 1, down = 1;
  check(xf_journal_job_bytes(db, job, &up, &down, &err), &err);
  assert_true(up == 0 && down == 0);
  for (uint32_t round = 1; round <= 2; round++)
    for (uint64_t site = 1; site <= 2; site++) {
      xf_journal_metrics m = {.round = round, .site = site, .train_loss = 0.5, .test_loss = NAN,
                              .test_accuracy = NAN, .samples = 100, .has_bytes = true,
                              .bytes_up = 300, .bytes_down = 1000};
      check(xf_journal_metrics_add(db, job, &m, &err), &err);
      check(xf_journal_metrics_add(db, job, &m, &err), &err); /* sent again */
    }
  /* The final evaluation of round 2's model, by both sites, one of them twice. */
  for (int i = 0; i < 3; i++) {
    xf_journal_metrics ev = {.round = 2, .site = i == 2 ? 1 : (uint64_t)(i + 1),
                             .train_loss = NAN, .test_loss = 0.4, .test_accuracy = 0.8,
                             .samples = 100, .has_eval_bytes = true, .eval_bytes_down = 1000};
    check(xf_journal_metrics_add(db, job, &ev, &err), &err);
  }
  check(xf_journal_job_bytes(db, job, &up, &down, &err), &err);
  assert_int_equal(up, 4 * 300);
  assert_int_equal(down, 4 * 1000 + 2 * 1000);
  /* Row by row, as every view reads them. */
  xf_journal_metrics *v = NULL;
  size_t n = 0;
  check(xf_journal_metrics_round(db, job, 2, &v, &n, &err), &err);
  assert_int_equal(n, 2);
  for (size_t i = 0; i < n; i++) {
    uint64_t ru, rd;
    xf_journal_metrics_bytes(&v[i], &ru, &rd);
    assert_int_equal(ru, 300);
    assert_int_equal(rd, 2000);
    assert_true(v[i].train_loss == 0.5 && v[i].test_accuracy == 0.8);
  }
  xf_free(v);
  xf_db_close(db);
}

/* The model digest of a blob, as a submission or a commit notes it; a blob
 * noted again keeps its first row (its bytes never change). */
static void journal_notes_the_model_digest_of_each_blob(void **state) {
  (void)state;
  char path[128];
  db_path("digests", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_digest blob = digest_of("model 1"), params = digest_of("params 1"),
            other = digest_of("params 2"), got;
  assert_int_equal(xf_journal_model_digest(db, &blob, &got, NULL), XF_ENOENT);
  check(xf_journal_model_digest_note(db, &blob, &params, &err), &err);
  check(xf_journal_model_digest_note(db, &blob, &other, &err), &err);
  check(xf_journal_model_digest(db, &blob, &got, &err), &err);
  assert_memory_equal(&got, &params, sizeof(got));
  xf_db_close(db);
}

/* The newest round with metrics, and with an evaluation, up to a bound:
 * what a job's status reads instead of all of its rows. */
static void journal_finds_the_newest_metrics_round_up_to_a_bound(void **state) {
  (void)state;
  char path[128];
  db_path("newest", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(5);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0, other = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &other, &err), &err);
  uint32_t r = 99;
  check(xf_journal_metrics_newest_round(db, job, UINT32_MAX, false, &r, &err), &err);
  assert_int_equal(r, 0);
  /* Rounds 1 and 2 evaluated, round 3 trained only; the other job at 4. */
  for (uint32_t round = 1; round <= 3; round++) {
    xf_journal_metrics m = {.round = round, .site = 7, .train_loss = 0.5,
                            .test_loss = round < 3 ? 0.4 : NAN,
                            .test_accuracy = round < 3 ? 0.8 : NAN, .samples = 10};
    check(xf_journal_metrics_add(db, job, &m, &err), &err);
  }
  xf_journal_metrics o = {.round = 4, .site = 7, .train_loss = 0.5, .test_loss = 0.4,
                          .test_accuracy = 0.8, .samples = 10};
  check(xf_journal_metrics_add(db, other, &o, &err), &err);
  check(xf_journal_metrics_newest_round(db, job, UINT32_MAX, false, &r, &err), &err);
  assert_int_equal(r, 3);
  check(xf_journal_metrics_newest_round(db, job, UINT32_MAX, true, &r, &err), &err);
  assert_int_equal(r, 2);
  check(xf_journal_metrics_newest_round(db, job, 1, true, &r, &err), &err);
  assert_int_equal(r, 1);
  check(xf_journal_metrics_newest_round(db, job, 0, false, &r, &err), &err);
  assert_int_equal(r, 0);
  xf_db_close(db);
}

static void journal_metrics_per_round_and_site_in_order(void **state) {
  (void)state;
  char path[128];
  db_path("metrics", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(3);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);

  /* Written out of order: rounds 3, 1, 2 and sites 9, 2, 5. */
  const uint32_t rounds[3] = {3, 1, 2};
  const uint64_t sites[3] = {9, 2, 5};
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < 3; k++) {
      xf_journal_metrics m = {.round = rounds[i], .site = sites[k],
                              .train_loss = rounds[i] + sites[k] / 100.0,
                              .test_loss = 2.0 * rounds[i], .test_accuracy = 0.5,
                              .samples = sites[k] * 10, .has_epsilon = sites[k] != 2,
                              .epsilon = 0.25 * rounds[i]};
      check(xf_journal_metrics_add(db, job, &m, &err), &err);
    }
  }
  /* A later record merges: the figures it gives replace the stored ones, a
   * NaN (not given) keeps what was there. */
  xf_journal_metrics again = {.round = 2, .site = 5, .train_loss = NAN, .test_loss = 1.5,
                              .test_accuracy = 0.75, .samples = 51, .has_epsilon = true,
                              .epsilon = 0.6};
  check(xf_journal_metrics_add(db, job, &again, &err), &err);

  xf_journal_metrics *v = NULL;
  size_t n = 0;
  check(xf_journal_metrics_round(db, job, 2, &v, &n, &err), &err);
  assert_int_equal(n, 3);
  assert_int_equal(v[0].site, 2);
  assert_int_equal(v[1].site, 5);
  assert_int_equal(v[2].site, 9);
  assert_false(v[0].has_epsilon);
  assert_true(v[2].has_epsilon);
  assert_true(v[2].epsilon == 0.5);
  assert_false(isnan(v[1].train_loss));
  assert_true(v[1].test_loss == 1.5);
  assert_true(v[1].test_accuracy == 0.75);
  assert_int_equal(v[1].samples, 51);
  assert_true(v[2].train_loss == 2.09);
  xf_free(v);

  check(xf_journal_metrics_site(db, job, 9, &v, &n, &err), &err);
  assert_int_equal(n, 3);
  for (size_t i = 0; i < 3; i++) {
    assert_int_equal(v[i].round, i + 1);
    assert_int_equal(v[i].site, 9);
    assert_true(v[i].test_loss == 2.0 * (double)(i + 1));
  }
  xf_free(v);

  check(xf_journal_metrics_round(db, job, 7, &v, &n, &err), &err);
  assert_int_equal(n, 0);
  assert_null(v);
  /* Ids beyond SQLite's integers are refused, not wrapped. */
  xf_journal_metrics huge = {.round = 1, .site = UINT64_MAX, .samples = 1};
  assert_int_equal(xf_journal_metrics_add(db, job, &huge, NULL), XF_ERANGE);
  xf_db_close(db);
}

/* Pages of a job's metrics, each after the last row of the one before,
 * give every row once, in the order (round, site), whatever the page size. */
static void journal_metrics_pages_give_every_row_once_in_order(void **state) {
  (void)state;
  char path[128];
  db_path("metrics-pages", path, sizeof(path));
  xf_db *db = journal_open(path);
  xf_errctx err;
  xf_jobspec spec = spec_of(3);
  xf_digest d0 = digest_of("model 0");
  int64_t job = 0;
  check(xf_journal_job_create(db, &spec, &d0, 1.0, &job, &err), &err);
  const uint64_t sites[4] = {40, 7, 1000, 8};
  for (uint32_t round = 3; round >= 1; round--)
    for (int k = 0; k < 4; k++) {
      xf_journal_metrics m = {.round = round, .site = sites[k], .train_loss = 1, .test_loss = 1,
                              .test_accuracy = 0.5, .samples = 10};
      check(xf_journal_metrics_add(db, job, &m, &err), &err);
    }
  xf_journal_metrics *all = NULL;
  size_t n_all = 0;
  check(xf_journal_metrics_job(db, job, &all, &n_all, &err), &err);
  assert_int_equal(n_all, 12);
  for (size_t limit = 1; limit <= 13; limit++) {
    uint32_t after_round = 0;
    uint64_t after_site = 0;
    size_t got = 0;
    for (;;) {
      xf_journal_metrics *v = NULL;
      size_t n = 0;
      check(xf_journal_metrics_page(db, job, after_round, after_site, limit, &v, &n, &err), &err);
      assert_true(n <= limit);
      for (size_t i = 0; i < n; i++, got++) {
        assert_true(got < n_all);
        assert_int_equal(v[i].round, all[got].round);
        assert_int_equal(v[i].site, all[got].site);
      }
      if (n) {
        after_round = v[n - 1].round;
        after_site = v[n - 1].site;
      }
      xf_free(v);
      if (n < limit) break;
    }
    assert_int_equal(got, n_all);
  }
  for (size_t i = 1; i < n_all; i++)
    assert_true(all[i - 1].round < all[i].round ||
                (all[i - 1].round == all[i].round && all[i - 1].site < all[i].site));
  xf_free(all);
  /* A cursor beyond SQLite's integers is refused, not wrapped. */
  xf_journal_metrics *v = NULL;
  size_t n = 0;
  assert_int_equal(xf_journal_metrics_page(db, job, 1, UINT64_MAX, 5, &v, &n, NULL), XF_ERANGE);
  xf_db_close(db);
}

/* ---- the confirmation (hold, then go) -------------------------------------------- */

static xf_round *confirming_round(const xf_jobspec *spec, size_t n_sites, double window) {
  xf_round *r = round_new(spec, 1, 1, 0);
  assert_int_equal(xf_round_set_confirm(r, window, NULL), XF_OK);
  uint64_t sites[8];
  sites_1_to(sites, n_sites);
  assert_int_equal(xf_round_open(r, sites, n_sites, 0.0, NULL), XF_OK);
  assert_true(xf_round_confirming(r));
  return r;
}

static void confirmed_cohort_gets_go_once_every_site_answered(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(2);
  xf_round *r = confirming_round(&spec, 3, 10.0);
  size_t n;
  uint64_t c[3];
  memcpy(c, xf_round_cohort(r, &n), sizeof(c));
  assert_int_equal(xf_round_site_accepted(r, c[0], NULL), XF_OK);
  assert_int_equal(n_actions(r), 0); /* others still to answer: nobody trains yet */
  xf_participant_state ps;
  assert_int_equal(xf_round_site(r, c[0], &ps, NULL, NULL), XF_OK);
  assert_int_equal(ps, XF_PARTICIPANT_ACCEPTED);
  /* A report before GO is a protocol violation. */
  assert_int_equal(xf_round_update_reported(r, c[0], 5, NULL), XF_EINVAL);
  assert_int_equal(xf_round_site_refused(r, c[1], "budget", NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_site_accepted(r, c[2], NULL), XF_OK);
  /* The last answer: GO to the two that accepted, not to the one that refused. */
  assert_int_equal(count_actions(r, XF_ROUND_ACT_GO), 2);
  size_t na;
  const xf_round_action *a = xf_round_actions(r, &na);
  for (size_t i = 0; i < na; i++) assert_true(a[i].site != c[1]);
  assert_false(xf_round_confirming(r));
  assert_int_equal(xf_round_accepted(r), 2);
  assert_int_equal(xf_round_update_reported(r, c[0], 5, NULL), XF_OK);
  assert_int_equal(xf_round_update_reported(r, c[2], 5, NULL), XF_OK);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_COMMITTING);
  xf_round_free(r);
}

static void too_few_acceptances_close_the_attempt_before_anyone_trains(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(2);
  xf_round *r = confirming_round(&spec, 3, 10.0);
  size_t n;
  uint64_t c[3];
  memcpy(c, xf_round_cohort(r, &n), sizeof(c));
  assert_int_equal(xf_round_site_accepted(r, c[0], NULL), XF_OK);
  assert_int_equal(xf_round_site_refused(r, c[1], "policy", NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  /* One accepted of three, min_sites 2: the last refusal closes it, no GO. */
  assert_int_equal(xf_round_site_refused(r, c[2], "policy", NULL), XF_OK);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_GO), 0);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_CANCEL), 1); /* the one that accepted */
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_RETRY);
  assert_int_equal(xf_round_get_state(r), XF_ROUND_READY);
  xf_round_free(r);
}

static void silent_sites_are_dropped_when_the_confirmation_window_ends(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(2);
  xf_round *r = confirming_round(&spec, 3, 5.0);
  assert_true(xf_round_confirm_deadline(r) == 5.0);
  size_t n;
  uint64_t c[3];
  memcpy(c, xf_round_cohort(r, &n), sizeof(c));
  assert_int_equal(xf_round_site_accepted(r, c[0], NULL), XF_OK);
  assert_int_equal(xf_round_site_accepted(r, c[1], NULL), XF_OK);
  assert_int_equal(xf_round_tick(r, 4.9, NULL), XF_OK);
  assert_int_equal(n_actions(r), 0);
  assert_int_equal(xf_round_tick(r, 5.0, NULL), XF_OK);
  /* The silent one is cancelled and dropped, the two others go. */
  assert_int_equal(count_actions(r, XF_ROUND_ACT_CANCEL), 1);
  assert_int_equal(count_actions(r, XF_ROUND_ACT_GO), 2);
  xf_participant_state ps;
  assert_int_equal(xf_round_site(r, c[2], &ps, NULL, NULL), XF_OK);
  assert_int_equal(ps, XF_PARTICIPANT_DROPPED);
  /* The round's own deadline still closes it. */
  assert_int_equal(xf_round_update_reported(r, c[0], 5, NULL), XF_OK);
  assert_int_equal(xf_round_tick(r, 100.0, NULL), XF_OK);
  assert_int_equal(last_action(r)->kind, XF_ROUND_ACT_RETRY);
  xf_round_free(r);
}

static void confirmation_window_is_checked(void **state) {
  (void)state;
  xf_jobspec spec = spec_of(2);
  xf_round *r = round_new(&spec, 1, 1, 0);
  assert_int_equal(xf_round_set_confirm(r, -1, NULL), XF_EINVAL);
  assert_int_equal(xf_round_set_confirm(r, INFINITY, NULL), XF_EINVAL);
  assert_int_equal(xf_round_set_confirm(r, 0, NULL), XF_OK);
  xf_round_free(r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_closes_at_deadline_with_quorum),
      cmocka_unit_test(round_retries_below_min_sites),
      cmocka_unit_test(round_closes_early_when_all_report),
      cmocka_unit_test(over_selection_ignores_late_reports),
      cmocka_unit_test(cohort_is_deterministic_for_seed_and_round),
      cmocka_unit_test(refused_site_is_not_waited_for),
      cmocka_unit_test(confirmed_cohort_gets_go_once_every_site_answered),
      cmocka_unit_test(too_few_acceptances_close_the_attempt_before_anyone_trains),
      cmocka_unit_test(silent_sites_are_dropped_when_the_confirmation_window_ends),
      cmocka_unit_test(confirmation_window_is_checked),
      cmocka_unit_test(job_fails_after_bounded_retries),
      cmocka_unit_test(journal_schema_migrates_fresh_and_reopens),
      cmocka_unit_test(journal_resumes_round_after_kill_mid_commit),
      cmocka_unit_test(journal_round_result_is_atomic),
      cmocka_unit_test(journal_retry_and_failure_close_the_round),
      cmocka_unit_test(journal_metrics_per_round_and_site_in_order),
      cmocka_unit_test(journal_finds_the_newest_metrics_round_up_to_a_bound),
      cmocka_unit_test(job_traffic_is_its_metrics_rows_with_the_final_evaluation),
      cmocka_unit_test(journal_notes_the_model_digest_of_each_blob),
      cmocka_unit_test(journal_metrics_pages_give_every_row_once_in_order),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
