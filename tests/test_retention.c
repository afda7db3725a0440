/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of checkpoint retention (coordinator/retention.h) on a real journal
 * and a real blob store: what is pruned, what is always kept, the setting's
 * values, and removals a killed coordinator left half done. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "coordinator/journal.h"
#include "coordinator/retention.h"
#include "crypto/digest.h"
#include "job/jobspec.h"
#include "storage/blob.h"
#include "storage/db.h"

static char test_root[64];

static int group_setup(void **state) {
  (void)state;
  snprintf(test_root, sizeof(test_root), "/tmp/xf-retention-XXXXXX");
  if (!mkdtemp(test_root)) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(test_root);
  return 0;
}

static void check(xf_err rc, const xf_errctx *err) {
  if (rc != XF_OK) print_error("%s: %s\n", xf_err_name(rc), err->msg);
  assert_int_equal(rc, XF_OK);
}

/* A journal and a blob store of their own under the test root. */
typedef struct fixture {
  xf_db *db;
  xf_blob_store *blobs;
  char db_path[160];
} fixture;

static fixture fixture_open(const char *name) {
  fixture f = {0};
  char dir[160];
  snprintf(f.db_path, sizeof(f.db_path), "%s/%s.db", test_root, name);
  snprintf(dir, sizeof(dir), "%s/%s.blobs", test_root, name);
  xf_errctx err = {0};
  check(xf_journal_open(f.db_path, &f.db, &err), &err);
  check(xf_blob_store_open(dir, &f.blobs, &err), &err);
  return f;
}

static void fixture_close(fixture *f) {
  xf_db_close(f->db);
  xf_blob_store_close(f->blobs);
}

static int64_t query_int(xf_db *db, const char *sql) {
  sqlite3_stmt *st = NULL;
  assert_int_equal(xf_db_prepare(db, sql, &st, NULL), XF_OK);
  assert_int_equal(sqlite3_step(st), SQLITE_ROW);
  int64_t v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* A blob holding text, as a checkpoint would be stored. */
static xf_digest put(fixture *f, const char *text) {
  xf_digest d;
  xf_errctx err = {0};
  check(xf_blob_put(f->blobs, text, strlen(text), &d, &err), &err);
  return d;
}

static xf_jobspec spec_of(uint32_t rounds) {
  xf_jobspec s;
  xf_jobspec_defaults(&s);
  snprintf(s.name, sizeof(s.name), "retention-test");
  snprintf(s.data.dataset, sizeof(s.data.dataset), "fmnist");
  s.rounds = rounds;
  s.min_sites = 1;
  s.round_deadline_s = 100;
  s.seed = 42;
  xf_errctx err;
  assert_int_equal(xf_jobspec_validate(&s, &err), XF_OK);
  return s;
}

static int64_t job_new(fixture *f, uint32_t rounds, const xf_digest *initial) {
  xf_jobspec spec = spec_of(rounds);
  int64_t job = 0;
  xf_errctx err = {0};
  check(xf_journal_job_create(f->db, &spec, initial, 1.0, &job, &err), &err);
  return job;
}

/* Commits `round` of job with the sites in `reporting` (0-terminated)
 * reporting and the model and optimizer state given, both noted. */
static void commit(fixture *f, int64_t job, uint32_t round, const uint64_t *reporting,
                   const xf_digest *model, const xf_digest *opt) {
  xf_errctx err = {0};
  uint64_t cohort[8] = {0};
  size_t n = 0;
  for (; reporting[n]; n++) cohort[n] = reporting[n];
  check(xf_journal_round_open(f->db, job, round, 1, cohort, n, 1e9, 10.0 * round, &err), &err);
  for (size_t i = 0; i < n; i++) {
    xf_journal_participant p = {.site = cohort[i], .state = XF_PARTICIPANT_REPORTED,
                                .samples = 10};
    check(xf_journal_participant_set(f->db, job, round, 1, &p, 10.0 * round, &err), &err);
  }
  check(xf_journal_round_commit(f->db, job, round, 1, model, opt, 10.0 * round + 5, &err), &err);
  check(xf_journal_model_digest_note(f->db, model, model, &err), &err);
}

static void assert_round_pruned(fixture *f, int64_t job, uint32_t round) {
  xf_digest d;
  xf_errctx err = {0};
  assert_int_equal(xf_journal_round_model(f->db, job, round, &d, &err), XF_ENOENT);
  assert_non_null(strstr(err.msg, "pruned"));
  assert_non_null(strstr(err.msg, "checkpoint_retention"));
}

static void assert_round_kept(fixture *f, int64_t job, uint32_t round, const xf_digest *model) {
  xf_digest d;
  xf_errctx err = {0};
  check(xf_journal_round_model(f->db, job, round, &d, &err), &err);
  assert_memory_equal(&d, model, sizeof(d));
  assert_true(xf_blob_exists(f->blobs, model));
}

/* Six rounds, both sites in every one, keep 2: rounds 1-4 let go of their
 * model and optimizer state; 5 and 6, the current model and the initial
 * model stay; the pruned models' digest rows go with them. */
static void retention_prunes_checkpoints_beyond_the_last_n_rounds(void **state) {
  (void)state;
  fixture f = fixture_open("beyond");
  xf_digest m0 = put(&f, "initial"), m[7], o[7];
  int64_t job = job_new(&f, 6, &m0);
  const uint64_t both[] = {1, 2, 0};
  for (uint32_t r = 1; r <= 6; r++) {
    char text[32];
    snprintf(text, sizeof(text), "model %u", r);
    m[r] = put(&f, text);
    snprintf(text, sizeof(text), "opt %u", r);
    o[r] = put(&f, text);
    commit(&f, job, r, both, &m[r], &o[r]);
  }
  xf_retention_result res = {0};
  xf_errctx err = {0};
  check(xf_retention_prune(f.db, f.blobs, job, 2, 100.0, &res, &err), &err);
  assert_int_equal(res.rounds, 4);
  assert_int_equal(res.blobs, 8);
  assert_int_equal(res.bytes, 4 * strlen("model 1") + 4 * strlen("opt 1"));
  for (uint32_t r = 1; r <= 4; r++) {
    assert_round_pruned(&f, job, r);
    assert_false(xf_blob_exists(f.blobs, &m[r]));
    assert_false(xf_blob_exists(f.blobs, &o[r]));
    xf_digest params;
    assert_int_equal(xf_journal_model_digest(f.db, &m[r], &params, NULL), XF_ENOENT);
  }
  for (uint32_t r = 5; r <= 6; r++) {
    assert_round_kept(&f, job, r, &m[r]);
    assert_true(xf_blob_exists(f.blobs, &o[r]));
  }
  assert_true(xf_blob_exists(f.blobs, &m0));
  assert_int_equal(query_int(f.db, "SELECT count(*) FROM blob_garbage"), 0);
  /* What the journal names for a restart is all there. */
  check(xf_journal_check_blobs(f.db, f.blobs, &err), &err);

  /* Again: nothing more to do. A later round moves the window by one. */
  memset(&res, 0, sizeof(res));
  check(xf_retention_prune(f.db, f.blobs, job, 2, 101.0, &res, &err), &err);
  assert_int_equal(res.rounds, 0);
  assert_int_equal(res.blobs, 0);
  fixture_close(&f);
}

/* Never pruned, whatever N says: the round before a site's first counted
 * update (retraining without that dataset starts there), a blob a kept
 * round or another job still names, and the initial model even when a
 * round produced the same bytes. */
static void retention_keeps_referenced_checkpoints(void **state) {
  (void)state;
  fixture f = fixture_open("referenced");
  xf_digest m0 = put(&f, "initial"), m[8], o[8];
  int64_t job = job_new(&f, 7, &m0);
  const uint64_t early[] = {1, 2, 0}, late[] = {1, 2, 3, 0};
  for (uint32_t r = 1; r <= 7; r++) {
    char text[32];
    snprintf(text, sizeof(text), "model %u", r);
    /* Round 1 leaves the model as it was; round 2's model comes back in
     * round 7; round 3's is another job's current model. */
    m[r] = r == 1 ? m0 : r == 7 ? m[2] : put(&f, text);
    snprintf(text, sizeof(text), "opt %u", r);
    o[r] = put(&f, text);
    /* Site 3 first counts in round 5: round 4 is where a retraining
     * without it would start. */
    commit(&f, job, r, r >= 5 ? late : early, &m[r], &o[r]);
  }
  int64_t other = job_new(&f, 1, &m[3]);
  (void)other;
  xf_retention_result res = {0};
  xf_errctx err = {0};
  check(xf_retention_prune(f.db, f.blobs, job, 1, 100.0, &res, &err), &err);
  assert_int_equal(res.rounds, 5); /* 1, 2, 3, 5, 6; 4 and 7 stay */
  assert_round_kept(&f, job, 4, &m[4]);
  assert_true(xf_blob_exists(f.blobs, &o[4]));
  assert_round_kept(&f, job, 7, &m[7]);
  for (uint32_t r = 1; r <= 6; r++) {
    if (r == 4) continue;
    assert_round_pruned(&f, job, r);
    assert_false(xf_blob_exists(f.blobs, &o[r]));
  }
  assert_true(xf_blob_exists(f.blobs, &m0));   /* the initial model, also round 1's */
  assert_true(xf_blob_exists(f.blobs, &m[2])); /* round 7's too */
  assert_true(xf_blob_exists(f.blobs, &m[3])); /* the other job's */
  assert_false(xf_blob_exists(f.blobs, &m[5]));
  assert_false(xf_blob_exists(f.blobs, &m[6]));
  assert_int_equal(res.blobs, 2 + 5); /* models 5 and 6, optimizer states 1, 2, 3, 5, 6 */
  fixture_close(&f);
}

/* checkpoint_retention 0 (the value of an absent key) keeps every one. */
static void retention_zero_or_absent_keeps_every_checkpoint(void **state) {
  (void)state;
  fixture f = fixture_open("all");
  xf_digest m0 = put(&f, "initial"), m[5];
  int64_t job = job_new(&f, 4, &m0);
  const uint64_t one[] = {1, 0};
  for (uint32_t r = 1; r <= 4; r++) {
    char text[32];
    snprintf(text, sizeof(text), "model %u", r);
    m[r] = put(&f, text);
    commit(&f, job, r, one, &m[r], NULL);
  }
  uint32_t keep = 7;
  xf_errctx err = {0};
  check(xf_retention_parse(0, &keep, &err), &err);
  assert_int_equal(keep, 0);
  xf_retention_result res = {0};
  check(xf_retention_prune(f.db, f.blobs, job, keep, 100.0, &res, &err), &err);
  check(xf_retention_prune_all(f.db, f.blobs, keep, 100.0, &res, &err), &err);
  assert_int_equal(res.rounds, 0);
  assert_int_equal(res.blobs, 0);
  for (uint32_t r = 1; r <= 4; r++) assert_round_kept(&f, job, r, &m[r]);
  /* A retention above the rounds committed keeps them all as well. */
  check(xf_retention_prune(f.db, f.blobs, job, 4, 100.0, &res, &err), &err);
  assert_int_equal(res.rounds, 0);
  fixture_close(&f);
}

/* The setting is a whole number of rounds; anything else is refused with
 * what is accepted. */
static void retention_setting_rejects_bad_values(void **state) {
  (void)state;
  const double bad[] = {-1, 1.5, 1e10, NAN, INFINITY};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint32_t keep = 9;
    xf_errctx err = {0};
    assert_int_equal(xf_retention_parse(bad[i], &keep, &err), XF_ERANGE);
    assert_non_null(strstr(err.msg, "whole number of rounds from 1 to 1000000000"));
    assert_non_null(strstr(err.msg, "0 to keep every checkpoint"));
    assert_int_equal(keep, 9);
  }
  uint32_t keep = 0;
  xf_errctx err = {0};
  check(xf_retention_parse(3, &keep, &err), &err);
  assert_int_equal(keep, 3);
  check(xf_retention_parse(XF_RETENTION_MAX, &keep, &err), &err);
  assert_int_equal(keep, XF_RETENTION_MAX);
}

static void die_now(sqlite3_context *ctx, int argc, sqlite3_value **argv) {
  (void)ctx;
  (void)argc;
  (void)argv;
  raise(SIGKILL);
}

/* In the child: prunes with keep 1 and dies when the removal queue is
 * cleared, after the files are unlinked. Exits 1 where the setup fails. */
static void child_dies_in_prune(const char *db_path, const char *blob_dir, int64_t job) {
  xf_db *db = NULL;
  xf_blob_store *blobs = NULL;
  if (xf_journal_open(db_path, &db, NULL) != XF_OK) _exit(1);
  if (xf_blob_store_open(blob_dir, &blobs, NULL) != XF_OK) _exit(1);
  if (sqlite3_create_function(xf_db_handle(db), "xf_test_die", 0, SQLITE_UTF8, NULL, die_now,
                              NULL, NULL) != SQLITE_OK)
    _exit(1);
  if (xf_db_exec(db,
                 "CREATE TEMP TRIGGER die_in_clear BEFORE DELETE ON main.blob_garbage"
                 " BEGIN SELECT xf_test_die(); END;",
                 NULL) != XF_OK)
    _exit(1);
  xf_err rc = xf_retention_prune(db, blobs, job, 1, 100.0, NULL, NULL);
  (void)rc;
  _exit(2);
}

/* A coordinator killed part-way through a prune: the journal already says
 * which rounds let go and queues their blobs, so the next call (the
 * restart's) finishes the removal, and a queued blob that is named again
 * by then stays. A file the crash left in place is removed; one already
 * unlinked is no error. */
static void retention_finishes_removals_a_kill_left(void **state) {
  (void)state;
  fixture f = fixture_open("killed");
  xf_digest m0 = put(&f, "initial"), m[4];
  int64_t job = job_new(&f, 3, &m0);
  const uint64_t one[] = {1, 0};
  for (uint32_t r = 1; r <= 3; r++) {
    char text[32];
    snprintf(text, sizeof(text), "model %u", r);
    m[r] = put(&f, text);
    commit(&f, job, r, one, &m[r], NULL);
  }
  fixture_close(&f);
  char blob_dir[160];
  snprintf(blob_dir, sizeof(blob_dir), "%s/killed.blobs", test_root);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) child_dies_in_prune(f.db_path, blob_dir, job);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFSIGNALED(status));
  assert_int_equal(WTERMSIG(status), SIGKILL);

  f = fixture_open("killed");
  assert_int_equal(query_int(f.db, "SELECT count(*) FROM rounds WHERE pruned IS NOT NULL"), 2);
  assert_int_equal(query_int(f.db, "SELECT count(*) FROM blob_garbage"), 2);
  assert_false(xf_blob_exists(f.blobs, &m[1]));
  assert_false(xf_blob_exists(f.blobs, &m[2]));
  assert_true(xf_blob_exists(f.blobs, &m[3]));

  /* Between the journal's change and the unlink: a queued file still
   * there, and a queued blob a later commit named again. */
  xf_digest stray = put(&f, "stray"), again = put(&f, "model 2");
  char hex[XF_DIGEST_HEX], sql[256];
  xf_digest_hex(&stray, hex);
  snprintf(sql, sizeof(sql), "INSERT INTO blob_garbage (blob, queued) VALUES ('%s', 1)", hex);
  xf_errctx err = {0};
  check(xf_db_exec(f.db, sql, &err), &err);
  assert_memory_equal(&again, &m[2], sizeof(again));
  xf_digest_hex(&m[2], hex);
  snprintf(sql, sizeof(sql), "UPDATE jobs SET model_digest = '%s'", hex);
  check(xf_db_exec(f.db, sql, &err), &err);

  xf_retention_result res = {0};
  check(xf_retention_collect(f.db, f.blobs, &res, &err), &err);
  assert_int_equal(res.blobs, 1); /* the stray; model 1 was already gone */
  assert_false(xf_blob_exists(f.blobs, &stray));
  assert_true(xf_blob_exists(f.blobs, &m[2]));
  assert_int_equal(query_int(f.db, "SELECT count(*) FROM blob_garbage"), 0);
  fixture_close(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(retention_prunes_checkpoints_beyond_the_last_n_rounds),
      cmocka_unit_test(retention_keeps_referenced_checkpoints),
      cmocka_unit_test(retention_zero_or_absent_keeps_every_checkpoint),
      cmocka_unit_test(retention_setting_rejects_bad_values),
      cmocka_unit_test(retention_finishes_removals_a_kill_left),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
