/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the storage module: SQLite settings, migrations, transactions and
 * backup; the blob store's round trip, integrity checks and crash safety. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/result.h"
#include "base/rng.h"
#include "crypto/digest.h"
#include "storage/blob.h"
#include "base/file.h"
#include "storage/db.h"

/* Every test works in its own folder under one mkdtemp root, which the
 * group teardown removes whatever the tests did. */
static char test_root[64];


static int group_setup(void **state) {
  (void)state;
  snprintf(test_root, sizeof(test_root), "/tmp/xf-storage-XXXXXX");
  if (!mkdtemp(test_root)) return -1;
  return xf_crypto_init() == XF_OK ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  xf_test_remove_tree(test_root);
  return 0;
}

/* A fresh folder for one test: test_root/name. */
static void test_dir(const char *name, char *out, size_t n) {
  snprintf(out, n, "%s/%s", test_root, name);
  xf_test_remove_tree(out);
  assert_int_equal(mkdir(out, 0700), 0);
}

static int count_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int count = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL)
    if (strcmp(ent->d_name, ".") != 0 && strcmp(ent->d_name, "..") != 0) count++;
  closedir(d);
  return count;
}

static int count_open_fds(void) { return count_entries("/proc/self/fd"); }

static int query_int(xf_db *db, const char *sql) {
  sqlite3_stmt *stmt = NULL;
  assert_int_equal(xf_db_prepare(db, sql, &stmt, NULL), XF_OK);
  assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
  int v = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  return v;
}

static int table_exists(xf_db *db, const char *name) {
  sqlite3_stmt *stmt = NULL;
  assert_int_equal(
      xf_db_prepare(db, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name=?",
                    &stmt, NULL),
      XF_OK);
  assert_int_equal(sqlite3_bind_text(stmt, 1, name, -1, SQLITE_STATIC), SQLITE_OK);
  assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
  int v = sqlite3_column_int(stmt, 0);
  sqlite3_finalize(stmt);
  return v;
}

static const xf_migration schema[] = {
    {1, "CREATE TABLE job (id INTEGER PRIMARY KEY, name TEXT NOT NULL);"},
    {2, "CREATE TABLE round (id INTEGER PRIMARY KEY,\n"
        "  job_id INTEGER NOT NULL REFERENCES job(id));\n"
        "-- a comment between statements\n"
        "CREATE INDEX round_job ON round(job_id);"},
    {3, "INSERT INTO job(name) VALUES ('seeded');"},
    {4, "ALTER TABLE job ADD COLUMN created_at INTEGER NOT NULL DEFAULT 0;"},
};

static void migrations_apply_in_order_and_reopen_is_idempotent(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("migrate", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 3, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "PRAGMA user_version"), 3);
  assert_true(table_exists(db, "job") && table_exists(db, "round"));
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 1);
  xf_db_close(db);

  /* Reopening with the same list runs nothing again (no second seed row). */
  assert_int_equal(xf_db_open(path, schema, 3, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "PRAGMA user_version"), 3);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 1);
  xf_db_close(db);

  /* A longer list applies only what is new. */
  assert_int_equal(xf_db_open(path, schema, 4, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "PRAGMA user_version"), 4);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job WHERE created_at = 0"), 1);
  xf_db_close(db);
}

/* A cached statement comes back reset with its bindings cleared, is handed
 * to one user at a time (a second ask while it is out gets a statement of
 * its own), and closing the connection finalizes the cache: no statement
 * is left open. */
static void cached_statements_are_reused_reset_and_finalized_on_close(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("cache", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 3, &db, NULL), XF_OK);
  static const char insert[] = "INSERT INTO job(name) VALUES (?)";
  sqlite3_stmt *a = NULL, *b = NULL, *c = NULL;
  assert_int_equal(xf_db_prepare_cached(db, insert, &a, NULL), XF_OK);
  assert_int_equal(sqlite3_bind_text(a, 1, "first", -1, SQLITE_STATIC), SQLITE_OK);
  assert_int_equal(xf_db_prepare_cached(db, insert, &b, NULL), XF_OK);
  assert_ptr_not_equal(a, b); /* a is still out */
  assert_int_equal(sqlite3_step(a), SQLITE_DONE);
  xf_db_release(db, a);
  assert_int_equal(sqlite3_bind_text(b, 1, "second", -1, SQLITE_STATIC), SQLITE_OK);
  assert_int_equal(sqlite3_step(b), SQLITE_DONE);
  xf_db_release(db, b);
  assert_int_equal(xf_db_prepare_cached(db, insert, &c, NULL), XF_OK);
  assert_true(c == a || c == b);
  /* Bindings were cleared: a NULL name breaks the NOT NULL constraint. */
  assert_int_equal(sqlite3_step(c) & 0xff, SQLITE_CONSTRAINT);
  xf_db_release(db, c);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job WHERE name IN ('first', 'second')"),
                   2);
  sqlite3 *handle = xf_db_handle(db);
  assert_non_null(sqlite3_next_stmt(handle, NULL)); /* the cache holds them */
  xf_db_close(db);
  /* Reopened, nothing of the old connection is left, and the cache works anew. */
  assert_int_equal(xf_db_open(path, schema, 3, &db, NULL), XF_OK);
  assert_int_equal(xf_db_prepare_cached(db, insert, &a, NULL), XF_OK);
  assert_int_equal(sqlite3_bind_text(a, 1, "third", -1, SQLITE_STATIC), SQLITE_OK);
  assert_int_equal(sqlite3_step(a), SQLITE_DONE);
  xf_db_release(db, a);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 4);
  xf_db_close(db);
}

static void failed_migration_leaves_previous_version(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("failed-migration", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  const xf_migration broken[] = {
      {1, "CREATE TABLE job (id INTEGER PRIMARY KEY);"},
      {2, "CREATE TABLE half (x INTEGER);\nINSERT INTO nonexistent VALUES (1);"},
  };
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = (xf_db *)&err; /* must be reset to NULL on failure */
  assert_int_equal(xf_db_open(path, broken, 2, &db, &err), XF_EDB);
  assert_null(db);
  assert_string_equal(err.file, path);
  assert_string_equal(err.field, "migration 2");
  assert_non_null(strstr(err.msg, "no such table: nonexistent"));
  assert_non_null(strstr(err.msg, "INSERT INTO nonexistent"));
  assert_non_null(strstr(err.msg, "left at version 1"));

  /* Version 1 stayed; the first statement of migration 2 was rolled back. */
  assert_int_equal(xf_db_open(path, broken, 1, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "PRAGMA user_version"), 1);
  assert_true(table_exists(db, "job"));
  assert_false(table_exists(db, "half"));
  xf_db_close(db);
}

static void newer_database_is_refused(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("newer", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 4, &db, &err), XF_OK);
  xf_db_close(db);
  assert_int_equal(xf_db_open(path, schema, 2, &db, &err), XF_EUNSUPPORTED);
  assert_null(db);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "schema version 4 is newer than this build knows (2)"));
  assert_non_null(strstr(err.msg, "downgrade is not supported"));
}

static void migrations_must_be_consecutive_from_one(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("consecutive", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  const xf_migration gap[] = {{1, "CREATE TABLE a (x);"}, {3, "CREATE TABLE b (x);"}};
  const xf_migration late[] = {{2, "CREATE TABLE a (x);"}};
  const xf_migration empty[] = {{1, NULL}};
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, gap, 2, &db, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "index 1 has version 3, expected 2"));
  assert_int_equal(xf_db_open(path, late, 1, &db, &err), XF_EINVAL);
  assert_int_equal(xf_db_open(path, empty, 1, &db, &err), XF_EINVAL);
  assert_int_equal(xf_db_open(path, NULL, 1, &db, &err), XF_EINVAL);
  assert_null(db);
  assert_int_equal(xf_db_open(":memory:", NULL, 0, &db, &err), XF_EINVAL);
}

static void concurrent_openers_apply_each_migration_once(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("concurrent", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  /* Several processes race to create and migrate one new database; the seed
   * row of migration 3 must exist exactly once. The children wait at a
   * barrier (end of file on a pipe) so that their opens overlap. */
  enum { OPENERS = 8 };
  pid_t pids[OPENERS];
  int barrier[2];
  assert_int_equal(pipe(barrier), 0);
  fflush(NULL);
  for (int i = 0; i < OPENERS; i++) {
    pids[i] = fork();
    assert_true(pids[i] >= 0);
    if (pids[i] == 0) {
      char c;
      close(barrier[1]);
      if (read(barrier[0], &c, 1) != 0) _exit(2);
      xf_db *db = NULL;
      xf_err rc = xf_db_open(path, schema, 3, &db, NULL);
      xf_db_close(db);
      _exit(rc == XF_OK ? 0 : 10 + (int)rc);
    }
  }
  close(barrier[0]);
  close(barrier[1]); /* releases every child at once */
  for (int i = 0; i < OPENERS; i++) {
    int status = 0;
    assert_int_equal(waitpid(pids[i], &status, 0), pids[i]);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
  }
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL, *late = NULL;
  assert_int_equal(xf_db_open(path, schema, 3, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 1);

  /* An up-to-date database opens while another connection holds the write
   * lock (it would otherwise wait out the busy timeout and fail). */
  assert_int_equal(xf_db_begin(db, &err), XF_OK);
  assert_int_equal(xf_db_open(path, schema, 3, &late, &err), XF_OK);
  assert_int_equal(query_int(late, "PRAGMA user_version"), 3);
  xf_db_rollback(db);
  xf_db_close(late);
  xf_db_close(db);
}

static void wal_mode_and_foreign_keys_are_on(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX], wal[PATH_MAX + 8];
  test_dir("pragmas", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 2, &db, &err), XF_OK);

  sqlite3_stmt *stmt = NULL;
  assert_int_equal(xf_db_prepare(db, "PRAGMA journal_mode", &stmt, &err), XF_OK);
  assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
  assert_string_equal((const char *)sqlite3_column_text(stmt, 0), "wal");
  sqlite3_finalize(stmt);
  assert_int_equal(query_int(db, "PRAGMA foreign_keys"), 1);
  assert_int_equal(query_int(db, "PRAGMA synchronous"), 2); /* FULL */
  assert_int_equal(query_int(db, "PRAGMA busy_timeout"), XF_DB_BUSY_TIMEOUT_MS);

  /* A round of a job that does not exist violates the foreign key. */
  assert_int_equal(xf_db_exec(db, "INSERT INTO round(job_id) VALUES (42)", &err), XF_EDB);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "FOREIGN KEY constraint failed"));
  assert_int_equal(xf_db_exec(db, "INSERT INTO job(id, name) VALUES (42, 'j');"
                                  "INSERT INTO round(job_id) VALUES (42)",
                              &err),
                   XF_OK);
  snprintf(wal, sizeof(wal), "%s-wal", path);
  struct stat st;
  assert_int_equal(stat(wal, &st), 0);
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  xf_db_close(db);
}

static void non_database_file_is_refused(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("not-a-db", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/notes.txt", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  for (int i = 0; i < 64; i++) fputs("these are plain notes, not a database\n", f);
  fclose(f);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_EDB);
  assert_null(db);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "not a database"));
  /* A directory cannot be a database either, nor a FIFO (never opened,
   * so nothing waits for a writer). */
  assert_int_equal(xf_db_open(dir, schema, 1, &db, &err), XF_EEXISTS);
  assert_string_equal(err.file, dir);
  assert_non_null(strstr(err.msg, "is a directory, not a database file"));
  snprintf(path, sizeof(path), "%s/fifo.db", dir);
  assert_int_equal(mkfifo(path, 0600), 0);
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_EEXISTS);
  assert_non_null(strstr(err.msg, "is a FIFO, not a database file"));
}

static void prepare_reports_the_sql_error_and_refuses_two_statements(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("prepare", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_OK);
  sqlite3_stmt *stmt = (sqlite3_stmt *)&err;
  assert_int_equal(xf_db_prepare(db, "SELEC name FROM job", &stmt, &err), XF_EDB);
  assert_null(stmt);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "syntax error"));
  assert_non_null(strstr(err.msg, "SELEC name FROM job"));
  assert_int_equal(xf_db_prepare(db, "SELECT 1; SELECT 2", &stmt, &err), XF_EINVAL);
  assert_null(stmt);
  assert_int_equal(xf_db_prepare(db, "SELECT 1;\n", &stmt, &err), XF_OK);
  sqlite3_finalize(stmt);
  xf_db_close(db);
}

static void rollback_discards_and_commit_keeps(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("transactions", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_OK);
  assert_int_equal(xf_db_begin(db, &err), XF_OK);
  assert_int_equal(xf_db_exec(db, "INSERT INTO job(name) VALUES ('dropped')", &err), XF_OK);
  assert_int_equal(xf_db_begin(db, &err), XF_EDB); /* no nesting */
  xf_db_rollback(db);
  xf_db_rollback(db); /* nothing open: harmless */
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 0);
  assert_int_equal(xf_db_begin(db, &err), XF_OK);
  assert_int_equal(xf_db_exec(db, "INSERT INTO job(name) VALUES ('kept')", &err), XF_OK);
  assert_int_equal(xf_db_commit(db, &err), XF_OK);
  xf_db_close(db);
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_OK);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job WHERE name = 'kept'"), 1);
  xf_db_close(db);
}

static void backup_copies_a_live_database(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX], dest[PATH_MAX];
  test_dir("backup", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  snprintf(dest, sizeof(dest), "%s/state-backup.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL, *writer = NULL, *copy = NULL;
  assert_int_equal(xf_db_open(path, schema, 3, &db, &err), XF_OK);
  assert_int_equal(xf_db_exec(db, "INSERT INTO job(name) VALUES ('a'), ('b')", &err), XF_OK);

  /* A second connection is in the middle of a write transaction. */
  assert_int_equal(xf_db_open(path, schema, 3, &writer, &err), XF_OK);
  assert_int_equal(xf_db_begin(writer, &err), XF_OK);
  assert_int_equal(xf_db_exec(writer, "INSERT INTO job(name) VALUES ('pending')", &err),
                   XF_OK);
  assert_int_equal(xf_db_backup(db, dest, &err), XF_OK);
  assert_int_equal(xf_db_commit(writer, &err), XF_OK);
  xf_db_close(writer);

  /* Only the backup and the live database's own files are in the folder: no
   * temporary copy or journal was left behind. */
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL) assert_null(strstr(ent->d_name, ".tmp-"));
  closedir(d);

  /* The copy holds the committed rows as of the backup, not the pending one. */
  assert_int_equal(xf_db_open(dest, schema, 3, &copy, &err), XF_OK);
  assert_int_equal(query_int(copy, "SELECT count(*) FROM job"), 3); /* seeded, a, b */
  assert_int_equal(query_int(copy, "SELECT count(*) FROM job WHERE name = 'pending'"), 0);
  assert_int_equal(query_int(copy, "PRAGMA user_version"), 3);
  assert_int_equal(query_int(db, "SELECT count(*) FROM job"), 4);
  xf_db_close(copy);
  xf_db_close(db);
}

static void backup_refuses_an_existing_destination(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX], dest[PATH_MAX];
  test_dir("backup-exists", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  snprintf(dest, sizeof(dest), "%s/missing-dir/backup.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 1, &db, &err), XF_OK);
  assert_int_equal(xf_db_backup(db, path, &err), XF_EEXISTS); /* never over the live file */
  assert_string_equal(err.file, path);
  assert_int_equal(xf_db_backup(db, dest, &err), XF_EIO);
  assert_string_equal(err.file, dest);
  assert_int_equal(xf_db_begin(db, &err), XF_OK);
  assert_int_equal(xf_db_backup(db, dest, &err), XF_EINVAL); /* not inside a transaction */
  xf_db_rollback(db);
  xf_db_close(db);
}

/* A database with damaged pages fails quick_check as damage
 * (XF_EINTEGRITY) naming the file and the check, whether SQLite lists what
 * it found or the damage stops the check itself; an intact one passes. */
static void damaged_database_fails_quick_check_naming_the_file(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("quick-check", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/state.db", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_db *db = NULL;
  assert_int_equal(xf_db_open(path, schema, 2, &db, &err), XF_OK);
  /* Enough rows that the job table spans several pages under its root. */
  assert_int_equal(xf_db_exec(db,
                              "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n "
                              "WHERE i < 400) INSERT INTO job(name) SELECT printf('job-%0100d', "
                              "i) FROM n",
                              &err),
                   XF_OK);
  assert_int_equal(xf_db_quick_check(db, &err), XF_OK);
  xf_db_close(db); /* the last connection: the WAL goes into the file */
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_true(st.st_size >= 8 * 4096);

  /* Page 2, the job table's root (migration 1 made it first): its page type
   * byte and the cell pointers after it overwritten. */
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint8_t junk[64];
  memset(junk, 0x5a, sizeof(junk));
  assert_int_equal(pwrite(fd, junk, sizeof(junk), 4096), (ssize_t)sizeof(junk));
  close(fd);
  assert_int_equal(xf_db_open(path, schema, 2, &db, &err), XF_OK);
  xf_errctx_clear(&err);
  assert_int_equal(xf_db_quick_check(db, &err), XF_EINTEGRITY);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "quick_check"));
  assert_non_null(strstr(err.msg, "Page 2"));
  assert_null(strchr(err.msg, '\n'));
  xf_db_close(db);
}

static void blob_roundtrip_by_digest(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("blobs", dir, sizeof(dir));
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  const char checkpoint[] = "layer0.weight=0.125,0.5;layer0.bias=-1";
  xf_digest d, want;
  xf_digest_buf(checkpoint, sizeof(checkpoint), &want);
  assert_false(xf_blob_exists(store, &want));
  assert_int_equal(xf_blob_put(store, checkpoint, sizeof(checkpoint), &d, &err), XF_OK);
  assert_memory_equal(d.bytes, want.bytes, XF_DIGEST_BYTES);
  assert_true(xf_blob_exists(store, &d));

  char hex[XF_DIGEST_HEX], expect_path[PATH_MAX + 80];
  xf_digest_hex(&d, hex);
  snprintf(expect_path, sizeof(expect_path), "%s/%.2s/%s", dir, hex, hex + 2);
  assert_int_equal(xf_blob_path(store, &d, path, sizeof(path)), XF_OK);
  assert_string_equal(path, expect_path);
  char small[16];
  assert_int_equal(xf_blob_path(store, &d, small, sizeof(small)), XF_ERANGE);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0400);

  void *data = NULL;
  size_t n = 0;
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_OK);
  assert_int_equal(n, sizeof(checkpoint));
  assert_memory_equal(data, checkpoint, n);
  xf_free(data);

  /* Storing the same bytes again is a no-op that succeeds; streaming them
   * in pieces gives the same digest. */
  assert_int_equal(xf_blob_put(store, checkpoint, sizeof(checkpoint), &d, &err), XF_OK);
  xf_blob_writer *w = NULL;
  assert_int_equal(xf_blob_writer_begin(store, &w, &err), XF_OK);
  assert_int_equal(xf_blob_writer_write(w, checkpoint, 5, &err), XF_OK);
  assert_int_equal(xf_blob_writer_write(w, NULL, 0, &err), XF_OK);
  assert_int_equal(xf_blob_writer_write(w, checkpoint + 5, sizeof(checkpoint) - 5, &err),
                   XF_OK);
  xf_digest streamed;
  assert_int_equal(xf_blob_writer_commit(w, &streamed, &err), XF_OK);
  assert_memory_equal(streamed.bytes, want.bytes, XF_DIGEST_BYTES);

  /* The empty blob is a blob too. */
  assert_int_equal(xf_blob_put(store, "", 0, &d, &err), XF_OK);
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_OK);
  assert_int_equal(n, 0);
  assert_non_null(data);
  xf_free(data);
  assert_int_equal(count_entries(dir), 3); /* tmp and two shard folders */
  char tmp[PATH_MAX + 8];
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  assert_int_equal(count_entries(tmp), 0);
  xf_blob_store_close(store);
}

static void missing_blob_is_reported_as_noent(void **state) {
  (void)state;
  char dir[128];
  test_dir("blobs-missing", dir, sizeof(dir));
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  xf_digest d;
  xf_digest_buf("never stored", 12, &d);
  void *data = (void *)&err;
  size_t n = 7;
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_ENOENT);
  assert_null(data);
  assert_int_equal(n, 0);
  assert_non_null(strstr(err.file, dir));
  xf_blob_store_close(store);
}

/* Removing a blob takes its file and no other; a blob already gone (a
 * removal run again after a crash) is no error, and the same bytes can be
 * stored again afterwards. */
static void removed_blob_is_gone_and_removing_again_is_no_error(void **state) {
  (void)state;
  char dir[128];
  test_dir("blobs-remove", dir, sizeof(dir));
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  xf_digest a, b;
  assert_int_equal(xf_blob_put(store, "checkpoint a", 12, &a, &err), XF_OK);
  assert_int_equal(xf_blob_put(store, "checkpoint b", 12, &b, &err), XF_OK);
  assert_int_equal(xf_blob_remove(store, &a, &err), XF_OK);
  assert_false(xf_blob_exists(store, &a));
  assert_true(xf_blob_exists(store, &b));
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(xf_blob_get(store, &a, &data, &n, &err), XF_ENOENT);
  assert_int_equal(xf_blob_remove(store, &a, &err), XF_OK);
  xf_digest again;
  assert_int_equal(xf_blob_put(store, "checkpoint a", 12, &again, &err), XF_OK);
  assert_memory_equal(&again, &a, sizeof(a));
  assert_int_equal(xf_blob_get(store, &a, &data, &n, &err), XF_OK);
  assert_int_equal(n, 12);
  xf_free(data);
  xf_blob_store_close(store);
}

/* Rewrites one byte of a committed (read-only) blob file in place. */
static void flip_byte(const char *path, off_t off) {
  assert_int_equal(chmod(path, 0600), 0);
  int fd = open(path, O_RDWR);
  assert_true(fd >= 0);
  uint8_t b;
  assert_int_equal(pread(fd, &b, 1, off), 1);
  b ^= 0x01;
  assert_int_equal(pwrite(fd, &b, 1, off), 1);
  close(fd);
}

static void corrupted_blob_is_reported_not_returned(void **state) {
  (void)state;
  char dir[128], path[PATH_MAX];
  test_dir("blobs-corrupt", dir, sizeof(dir));
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  uint8_t weights[4096];
  for (size_t i = 0; i < sizeof(weights); i++) weights[i] = (uint8_t)(i * 7);
  xf_digest d;
  assert_int_equal(xf_blob_put(store, weights, sizeof(weights), &d, &err), XF_OK);
  assert_int_equal(xf_blob_path(store, &d, path, sizeof(path)), XF_OK);

  /* One flipped bit. */
  flip_byte(path, 1000);
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_EINTEGRITY);
  assert_null(data);
  assert_int_equal(n, 0);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "does not match its digest"));

  /* Storing the checkpoint again replaces the damaged file. */
  assert_int_equal(xf_blob_put(store, weights, sizeof(weights), &d, &err), XF_OK);
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_OK);
  assert_memory_equal(data, weights, sizeof(weights));
  xf_free(data);

  /* A truncated file is caught the same way. */
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(truncate(path, 100), 0);
  assert_int_equal(xf_blob_get(store, &d, &data, &n, &err), XF_EINTEGRITY);
  assert_null(data);
  xf_blob_store_close(store);
}

static void aborted_writer_leaves_nothing_behind(void **state) {
  (void)state;
  char dir[128], tmp[PATH_MAX + 8];
  test_dir("blobs-abort", dir, sizeof(dir));
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  xf_blob_writer *w = NULL;
  assert_int_equal(xf_blob_writer_begin(store, &w, &err), XF_OK);
  assert_int_equal(xf_blob_writer_write(w, "partial", 7, &err), XF_OK);
  assert_int_equal(count_entries(tmp), 1);
  xf_blob_writer_abort(w);
  xf_blob_writer_abort(NULL);
  assert_int_equal(count_entries(tmp), 0);
  assert_int_equal(count_entries(dir), 1); /* only tmp */
  xf_digest d;
  xf_digest_buf("partial", 7, &d);
  assert_false(xf_blob_exists(store, &d));
  xf_blob_store_close(store);
}

static void temp_file_of_a_live_writer_survives_another_open(void **state) {
  (void)state;
  char dir[128], tmp[PATH_MAX + 8];
  test_dir("blobs-live", dir, sizeof(dir));
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL, *other = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  xf_blob_writer *w = NULL;
  assert_int_equal(xf_blob_writer_begin(store, &w, &err), XF_OK);
  assert_int_equal(xf_blob_writer_write(w, "round 7 ", 8, &err), XF_OK);
  /* Another process (here: another open) starts while the writer works. */
  assert_int_equal(xf_blob_store_open(dir, &other, &err), XF_OK);
  assert_int_equal(count_entries(tmp), 1);
  assert_int_equal(xf_blob_writer_write(w, "global model", 12, &err), XF_OK);
  xf_digest d, want;
  assert_int_equal(xf_blob_writer_commit(w, &d, &err), XF_OK);
  xf_digest_buf("round 7 global model", 20, &want);
  assert_memory_equal(d.bytes, want.bytes, XF_DIGEST_BYTES);
  assert_true(xf_blob_exists(other, &d));
  xf_blob_store_close(other);
  xf_blob_store_close(store);
}

/* The crash test streams a checkpoint far larger than one write, so the
 * kill lands while the blob is partly written. */
#define KILL_CHUNK ((size_t)1 << 20)
#define KILL_CHUNKS 64          /* 64 MiB in all */
#define KILL_SIGNAL_AT_CHUNK 16 /* the child tells the parent after 16 MiB */

static void fill_chunk(uint8_t *buf, size_t index) {
  xf_rng rng;
  xf_rng_seed(&rng, 20240601, index);
  for (size_t i = 0; i < KILL_CHUNK; i += 8) {
    uint64_t v = xf_rng_next(&rng);
    memcpy(buf + i, &v, 8);
  }
}

/* The writer process: never returns. Exit codes tell the parent what failed
 * if it is not killed first. */
static void killed_writer_child(xf_blob_store *store, int signal_fd) {
  static uint8_t chunk[KILL_CHUNK];
  xf_blob_writer *w = NULL;
  if (xf_blob_writer_begin(store, &w, NULL) != XF_OK) _exit(2);
  for (size_t i = 0; i < KILL_CHUNKS; i++) {
    fill_chunk(chunk, i);
    if (xf_blob_writer_write(w, chunk, KILL_CHUNK, NULL) != XF_OK) _exit(3);
    if (i + 1 == KILL_SIGNAL_AT_CHUNK && write(signal_fd, "w", 1) != 1) _exit(4);
  }
  /* Whatever remains of the stream is still unwritten when the parent's kill
   * lands: a writer never commits before it has written everything. */
  for (;;) pause();
}

static void writer_killed_mid_write_leaves_no_visible_blob(void **state) {
  (void)state;
  char dir[128], tmp[PATH_MAX + 8];
  test_dir("blobs-crash", dir, sizeof(dir));
  snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_blob_store *store = NULL;
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);

  uint8_t *chunk = xf_malloc(KILL_CHUNK);
  assert_non_null(chunk);
  xf_digest_ctx whole_ctx, prefix_ctx;
  xf_digest whole, prefix;
  xf_digest_init(&whole_ctx);
  xf_digest_init(&prefix_ctx);
  for (size_t i = 0; i < KILL_CHUNKS; i++) {
    fill_chunk(chunk, i);
    xf_digest_update(&whole_ctx, chunk, KILL_CHUNK);
    if (i < KILL_SIGNAL_AT_CHUNK) xf_digest_update(&prefix_ctx, chunk, KILL_CHUNK);
  }
  xf_digest_final(&whole_ctx, &whole);
  xf_digest_final(&prefix_ctx, &prefix);

  int signal_pipe[2];
  assert_int_equal(pipe(signal_pipe), 0);
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    close(signal_pipe[0]);
    killed_writer_child(store, signal_pipe[1]);
  }
  close(signal_pipe[1]);
  char c = 0;
  ssize_t got = read(signal_pipe[0], &c, 1);
  kill(pid, SIGKILL);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  close(signal_pipe[0]);
  assert_int_equal(got, 1); /* the child reached the point of the crash */
  assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  /* Nothing is visible under a digest: not the whole content, not the part
   * written; the store holds only its tmp folder, and there the dead
   * writer's file, at least as long as what it had announced. */
  assert_false(xf_blob_exists(store, &whole));
  assert_false(xf_blob_exists(store, &prefix));
  void *data = NULL;
  size_t n = 0;
  assert_int_equal(xf_blob_get(store, &whole, &data, &n, &err), XF_ENOENT);
  assert_int_equal(count_entries(dir), 1);
  assert_int_equal(count_entries(tmp), 1);
  DIR *d = opendir(tmp);
  assert_non_null(d);
  struct dirent *ent;
  char stale[PATH_MAX + 300] = "";
  while ((ent = readdir(d)) != NULL)
    if (ent->d_name[0] != '.') snprintf(stale, sizeof(stale), "%s/%s", tmp, ent->d_name);
  closedir(d);
  struct stat st;
  assert_int_equal(stat(stale, &st), 0);
  assert_true((size_t)st.st_size >= KILL_SIGNAL_AT_CHUNK * KILL_CHUNK);

  /* Reopening clears the dead writer's file. */
  xf_blob_store_close(store);
  assert_int_equal(xf_blob_store_open(dir, &store, &err), XF_OK);
  assert_int_equal(count_entries(tmp), 0);

  /* Writing the same content afterwards succeeds and reads back whole. */
  xf_blob_writer *w = NULL;
  assert_int_equal(xf_blob_writer_begin(store, &w, &err), XF_OK);
  for (size_t i = 0; i < KILL_CHUNKS; i++) {
    fill_chunk(chunk, i);
    assert_int_equal(xf_blob_writer_write(w, chunk, KILL_CHUNK, &err), XF_OK);
  }
  xf_digest committed;
  assert_int_equal(xf_blob_writer_commit(w, &committed, &err), XF_OK);
  assert_memory_equal(committed.bytes, whole.bytes, XF_DIGEST_BYTES);
  assert_int_equal(xf_blob_get(store, &whole, &data, &n, &err), XF_OK);
  assert_int_equal(n, KILL_CHUNKS * KILL_CHUNK);
  int same = 1;
  for (size_t i = 0; i < KILL_CHUNKS; i++) {
    fill_chunk(chunk, i);
    same &= memcmp((uint8_t *)data + i * KILL_CHUNK, chunk, KILL_CHUNK) == 0;
  }
  assert_true(same);
  xf_free(data);
  xf_free(chunk);
  xf_blob_store_close(store);
}

/* One pass over open, put, get, database open, write and backup; returns the
 * first failure. Everything taken is released on every path. */
static xf_err storage_round_trip(const char *dir, long pass, xf_errctx *err) {
  static const char model[] = "round 3 aggregate: 0.25 0.75 -0.5";
  char blobs[PATH_MAX], dbpath[PATH_MAX], backup[PATH_MAX];
  snprintf(blobs, sizeof(blobs), "%s/blobs", dir);
  snprintf(dbpath, sizeof(dbpath), "%s/state.db", dir);
  snprintf(backup, sizeof(backup), "%s/backup-%ld.db", dir, pass);
  xf_blob_store *store = NULL;
  xf_db *db = NULL;
  void *data = NULL;
  size_t n = 0;
  xf_digest d;
  xf_err rc = xf_blob_store_open(blobs, &store, err);
  if (rc == XF_OK) rc = xf_blob_put(store, model, sizeof(model), &d, err);
  if (rc == XF_OK) rc = xf_blob_get(store, &d, &data, &n, err);
  if (rc == XF_OK && (n != sizeof(model) || memcmp(data, model, n) != 0)) rc = XF_EINTERNAL;
  if (rc == XF_OK) rc = xf_db_open(dbpath, schema, 4, &db, err);
  if (rc == XF_OK) rc = xf_db_exec(db, "INSERT INTO job(name) VALUES ('alloc')", err);
  if (rc == XF_OK) rc = xf_db_backup(db, backup, err);
  xf_db_close(db);
  xf_free(data);
  xf_blob_store_close(store);
  return rc;
}

static void allocation_failures_are_reported_not_crashed(void **state) {
  (void)state;
  char dir[128], tmp[PATH_MAX + 16];
  test_dir("alloc", dir, sizeof(dir));
  snprintf(tmp, sizeof(tmp), "%s/blobs/tmp", dir);
  int fds = count_open_fds();
  long pass = 0;
  for (;; pass++) {
    assert_true(pass < 200); /* the pass count is bounded: no retry loop on ENOMEM */
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(pass);
    xf_err rc = storage_round_trip(dir, pass, &err);
    xf_alloc_fail_reset();
    if (rc != XF_OK && rc != XF_ENOMEM) fail_msg("pass %ld: %s: %s", pass, xf_err_name(rc), err.msg);
    if (rc == XF_ENOMEM) assert_true(err.msg[0] != '\0');
    assert_int_equal(count_open_fds(), fds);
    if (count_entries(tmp) > 0) fail_msg("pass %ld left a temporary blob", pass);
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL)
      if (strstr(ent->d_name, ".tmp-")) fail_msg("pass %ld left %s", pass, ent->d_name);
    closedir(d);
    if (rc == XF_OK) break;
  }
  assert_true(pass > 3); /* the loop did reach the allocations of every step */
}

/* ---- atomic file writes ---------------------------------------------------- */

static void atomic_write_replaces_whole_files_with_the_given_mode(void **state) {
  (void)state;
  char dir[128], path[192];
  test_dir("atomic", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/key.pem", dir);
  assert_int_equal(xf_file_write_atomic(path, "first", 5, 0600, NULL), XF_OK);
  assert_int_equal(xf_file_write_atomic(path, "second!", 7, 0600, NULL), XF_OK);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 0777, 0600);
  assert_int_equal(st.st_size, 7);
  char buf[16] = {0};
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  assert_int_equal(fread(buf, 1, sizeof(buf), f), 7);
  fclose(f);
  assert_string_equal(buf, "second!");
  assert_int_equal(count_entries(dir), 1); /* key.pem alone: no temporary left */
}

static void atomic_write_into_a_missing_directory_fails_naming_the_file(void **state) {
  (void)state;
  char dir[128], path[192];
  test_dir("atomic-missing", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/absent/model.xfm", dir);
  xf_errctx err = {0};
  assert_int_equal(xf_file_write_atomic(path, "x", 1, 0644, &err), XF_EIO);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "cannot create"));
  assert_int_equal(count_entries(dir), 0);
}

/* Reads a small file whole into buf (NUL-terminated); its length, or -1. */
static long slurp(const char *path, char *buf, size_t n) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  size_t got = fread(buf, 1, n - 1, f);
  fclose(f);
  buf[got] = '\0';
  return (long)got;
}

/* Entries of dir whose name holds ".tmp-": temporaries left behind. */
static int count_temporaries(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int count = 0;
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL)
    if (strstr(ent->d_name, ".tmp-")) count++;
  closedir(d);
  return count;
}

/* Something that is not a regular file, made at path: what it is named in
 * messages, and how it looked when made. */
typedef struct planted {
  const char *word;
  struct stat st;
  char link[256];
} planted;

enum { PLANT_LINK, PLANT_DANGLING, PLANT_FIFO, PLANT_SOCKET, PLANT_DEVICE, PLANT_DIR, PLANT_N };

/* Makes kind at path; false when this system will not (a device node needs
 * CAP_MKNOD). The link points to victim, a regular file. */
static bool plant(int kind, const char *path, const char *victim, planted *p) {
  memset(p, 0, sizeof(*p));
  int rc = -1;
  switch (kind) {
  case PLANT_LINK: rc = symlink(victim, path), p->word = "symbolic link"; break;
  case PLANT_DANGLING: rc = symlink("nowhere/at/all", path), p->word = "symbolic link"; break;
  case PLANT_FIFO: rc = mkfifo(path, 0600), p->word = "FIFO"; break;
  case PLANT_DEVICE: rc = mknod(path, S_IFCHR | 0600, makedev(1, 3)), p->word = "character device"; break;
  case PLANT_DIR: rc = mkdir(path, 0700), p->word = "directory"; break;
  case PLANT_SOCKET: {
    p->word = "socket";
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof(a.sun_path)) return false;
    memcpy(a.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
    close(fd);
    break;
  }
  }
  if (rc != 0 && kind == PLANT_DEVICE) return false;
  assert_int_equal(rc, 0);
  assert_int_equal(lstat(path, &p->st), 0);
  if (S_ISLNK(p->st.st_mode)) assert_true(readlink(path, p->link, sizeof(p->link) - 1) > 0);
  return true;
}

/* The thing at path is still what plant made. */
static void assert_untouched(const char *path, const planted *p) {
  struct stat now;
  assert_int_equal(lstat(path, &now), 0);
  assert_int_equal(now.st_mode, p->st.st_mode);
  assert_int_equal(now.st_ino, p->st.st_ino);
  assert_int_equal(now.st_rdev, p->st.st_rdev);
  if (S_ISLNK(now.st_mode)) {
    char link[256] = {0};
    assert_true(readlink(path, link, sizeof(link) - 1) > 0);
    assert_string_equal(link, p->link);
  }
}

static void file_write_refuses_every_target_that_is_not_a_regular_file(void **state) {
  (void)state;
  char dir[128], path[192], victim[192], buf[64];
  test_dir("refuse", dir, sizeof(dir));
  snprintf(victim, sizeof(victim), "%s/victim", dir);
  assert_int_equal(xf_file_write_atomic(victim, "precious", 8, 0644, NULL), XF_OK);
  for (int kind = 0; kind < PLANT_N; kind++) {
    snprintf(path, sizeof(path), "%s/target-%d", dir, kind);
    planted p;
    if (!plant(kind, path, victim, &p)) {
      fprintf(stderr, "note: no %s here (mknod refused): that case is not checked\n", p.word);
      continue;
    }
    xf_errctx err = {0};
    assert_int_equal(xf_file_check_target(path, &err), XF_EEXISTS);
    xf_errctx_clear(&err);
    assert_int_equal(xf_file_write_atomic(path, "new", 3, 0600, &err), XF_EEXISTS);
    assert_string_equal(err.file, path);
    if (!strstr(err.msg, p.word)) fail_msg("'%s' does not name the %s", err.msg, p.word);
    xf_file_writer *w = NULL;
    assert_int_equal(xf_file_writer_begin(path, 0644, &w, NULL), XF_EEXISTS);
    assert_null(w);
    assert_untouched(path, &p);
  }
  assert_int_equal(slurp(victim, buf, sizeof(buf)), 8);
  assert_string_equal(buf, "precious");
  assert_int_equal(count_temporaries(dir), 0);
  /* Absent and regular targets pass the check. */
  assert_int_equal(xf_file_check_target(victim, NULL), XF_OK);
  snprintf(path, sizeof(path), "%s/absent", dir);
  assert_int_equal(xf_file_check_target(path, NULL), XF_OK);
}

static void file_writer_does_not_replace_what_took_the_targets_place(void **state) {
  (void)state;
  char dir[128], path[192];
  test_dir("raced", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/out.xfm", dir);
  xf_file_writer *w = NULL;
  assert_int_equal(xf_file_writer_begin(path, 0644, &w, NULL), XF_OK);
  assert_int_equal(xf_file_writer_write(w, "model", 5, NULL), XF_OK);
  planted p;
  assert_true(plant(PLANT_FIFO, path, NULL, &p));
  xf_errctx err = {0};
  assert_int_equal(xf_file_writer_commit(w, &err), XF_EEXISTS);
  assert_non_null(strstr(err.msg, "FIFO"));
  assert_untouched(path, &p);
  assert_int_equal(count_temporaries(dir), 0);
}

static void file_write_keeps_the_old_content_when_a_write_fails_midway(void **state) {
  (void)state;
  char dir[128], path[192], buf[64];
  test_dir("midway", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/model.xfm", dir);
  assert_int_equal(xf_file_write_atomic(path, "old model", 9, 0644, NULL), XF_OK);
  /* Files may not grow past 4 KiB: the write of the new content fails
   * (EFBIG) after its first 4 KiB, as a full disk would. */
  static char big[256 * 1024];
  memset(big, 'x', sizeof(big));
  struct rlimit was, small;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
  small = was;
  small.rlim_cur = 4096;
  void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  xf_errctx err = {0}, err2 = {0};
  xf_err whole = xf_file_write_atomic(path, big, sizeof(big), 0644, &err);
  /* The same through the streaming writer, in small pieces. */
  xf_file_writer *w = NULL;
  xf_err begun = xf_file_writer_begin(path, 0644, &w, NULL), wrote = XF_OK;
  for (size_t at = 0; begun == XF_OK && wrote == XF_OK && at < sizeof(big); at += 1000)
    wrote = xf_file_writer_write(w, big + at, 1000, NULL);
  xf_err committed = begun == XF_OK ? xf_file_writer_commit(w, &err2) : begun;
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
  signal(SIGXFSZ, old_handler);
  assert_int_equal(whole, XF_EIO);
  assert_string_equal(err.file, path);
  assert_non_null(strstr(err.msg, "write failed"));
  assert_int_equal(begun, XF_OK);
  assert_int_equal(wrote, XF_EIO);
  assert_int_equal(committed, XF_EIO);
  assert_int_equal(slurp(path, buf, sizeof(buf)), 9);
  assert_string_equal(buf, "old model");
  assert_int_equal(count_temporaries(dir), 0);
}

static void file_write_gives_the_callers_mode_whatever_the_umask_and_the_old_file(void **state) {
  (void)state;
  char dir[128], path[192], tmp[PATH_MAX] = "";
  test_dir("mode", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/site.key", dir);
  mode_t mask = umask(077);
  assert_int_equal(xf_file_write_atomic(path, "public", 6, 0644, NULL), XF_OK);
  umask(mask);
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0644);
  /* A key over a world-readable file: the key is 0600, and 0600 while it
   * is written too. */
  assert_int_equal(chmod(path, 0666), 0);
  xf_file_writer *w = NULL;
  assert_int_equal(xf_file_writer_begin(path, 0600, &w, NULL), XF_OK);
  DIR *d = opendir(dir);
  assert_non_null(d);
  struct dirent *ent;
  while ((ent = readdir(d)) != NULL)
    if (strstr(ent->d_name, ".tmp-")) snprintf(tmp, sizeof(tmp), "%s/%s", dir, ent->d_name);
  closedir(d);
  assert_true(tmp[0] != '\0');
  assert_int_equal(lstat(tmp, &st), 0);
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(xf_file_writer_write(w, "secret", 6, NULL), XF_OK);
  assert_int_equal(xf_file_writer_commit(w, NULL), XF_OK);
  assert_int_equal(stat(path, &st), 0);
  assert_true(S_ISREG(st.st_mode));
  assert_int_equal(st.st_mode & 07777, 0600);
  assert_int_equal(count_temporaries(dir), 0);
}

static void file_writer_streams_large_outputs_and_abort_leaves_the_target(void **state) {
  (void)state;
  char dir[128], path[192], buf[64];
  test_dir("stream", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/shard.csv", dir);
  /* Small writes through the buffer, then one larger than it, then small
   * ones again: the bytes arrive in order. */
  enum { SMALL = 7, BIG = 200 * 1024 };
  static unsigned char want[3 * 20000 * SMALL + BIG];
  for (size_t i = 0; i < sizeof(want); i++) want[i] = (unsigned char)(i * 131 + i / 977);
  xf_file_writer *w = NULL;
  assert_int_equal(xf_file_writer_begin(path, 0644, &w, NULL), XF_OK);
  size_t at = 0;
  for (int i = 0; i < 20000; i++, at += SMALL)
    assert_int_equal(xf_file_writer_write(w, want + at, SMALL, NULL), XF_OK);
  assert_int_equal(xf_file_writer_write(w, want + at, BIG, NULL), XF_OK);
  at += BIG;
  while (at < sizeof(want)) {
    assert_int_equal(xf_file_writer_write(w, want + at, SMALL, NULL), XF_OK);
    at += SMALL;
  }
  assert_int_equal(xf_file_writer_commit(w, NULL), XF_OK);
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  static unsigned char got[sizeof(want) + 1];
  assert_int_equal(fread(got, 1, sizeof(got), f), sizeof(want));
  fclose(f);
  assert_memory_equal(got, want, sizeof(want));
  /* Abort: the file keeps what it had. */
  assert_int_equal(xf_file_write_atomic(path, "kept", 4, 0644, NULL), XF_OK);
  assert_int_equal(xf_file_writer_begin(path, 0644, &w, NULL), XF_OK);
  assert_int_equal(xf_file_writer_write(w, want, sizeof(want), NULL), XF_OK);
  xf_file_writer_abort(w);
  assert_int_equal(slurp(path, buf, sizeof(buf)), 4);
  assert_string_equal(buf, "kept");
  assert_int_equal(count_temporaries(dir), 0);
}

static void file_write_frees_everything_when_allocations_fail(void **state) {
  (void)state;
  char dir[128], path[192], buf[64];
  test_dir("file-alloc", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/policy.json", dir);
  assert_int_equal(xf_file_write_atomic(path, "old", 3, 0644, NULL), XF_OK);
  int fds = count_open_fds();
  long pass = 0;
  for (;; pass++) {
    assert_true(pass < 50);
    xf_errctx err;
    xf_errctx_clear(&err);
    xf_alloc_fail_after(pass);
    xf_file_writer *w = NULL;
    xf_err rc = xf_file_writer_begin(path, 0644, &w, &err);
    if (rc == XF_OK) rc = xf_file_writer_write(w, "new", 3, &err);
    if (rc == XF_OK) rc = xf_file_writer_commit(w, &err);
    else xf_file_writer_abort(w);
    xf_alloc_fail_reset();
    if (rc != XF_OK && rc != XF_ENOMEM) fail_msg("pass %ld: %s: %s", pass, xf_err_name(rc), err.msg);
    assert_int_equal(count_open_fds(), fds);
    assert_int_equal(count_temporaries(dir), 0);
    assert_int_equal(slurp(path, buf, sizeof(buf)), 3);
    if (rc == XF_OK) break;
    assert_string_equal(buf, "old");
    assert_string_equal(err.file, path);
  }
  assert_string_equal(buf, "new");
  assert_true(pass >= 3); /* the writer, its path, its buffer */
}

static void read_text_reads_whole_files_up_to_the_bound(void **state) {
  (void)state;
  char dir[128], path[192];
  test_dir("read-text", dir, sizeof(dir));
  snprintf(path, sizeof(path), "%s/policy.json", dir);
  /* Larger than the first buffer, so that it grows. */
  static char big[10000];
  memset(big, 'a', sizeof(big) - 1);
  assert_int_equal(xf_file_write_atomic(path, big, sizeof(big) - 1, 0644, NULL), XF_OK);
  char *text = NULL;
  size_t len = 0;
  xf_errctx err = {0};
  assert_int_equal(xf_file_read_text(path, 1u << 20, &text, &len, &err), XF_OK);
  assert_int_equal(len, sizeof(big) - 1);
  assert_string_equal(text, big);
  xf_free(text);
  /* Above the bound: refused, naming the file. */
  assert_int_equal(xf_file_read_text(path, 4096, &text, &len, &err), XF_ERANGE);
  assert_null(text);
  assert_string_equal(err.file, path);
  /* Exactly at the bound: read. */
  assert_int_equal(xf_file_read_text(path, sizeof(big) - 1, &text, NULL, &err), XF_OK);
  xf_free(text);
  /* Missing. */
  snprintf(path, sizeof(path), "%s/absent.json", dir);
  assert_int_equal(xf_file_read_text(path, 4096, &text, &len, &err), XF_EIO);
  assert_non_null(strstr(err.msg, "cannot open"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(read_text_reads_whole_files_up_to_the_bound),
      cmocka_unit_test(migrations_apply_in_order_and_reopen_is_idempotent),
      cmocka_unit_test(cached_statements_are_reused_reset_and_finalized_on_close),
      cmocka_unit_test(failed_migration_leaves_previous_version),
      cmocka_unit_test(newer_database_is_refused),
      cmocka_unit_test(migrations_must_be_consecutive_from_one),
      cmocka_unit_test(concurrent_openers_apply_each_migration_once),
      cmocka_unit_test(wal_mode_and_foreign_keys_are_on),
      cmocka_unit_test(non_database_file_is_refused),
      cmocka_unit_test(prepare_reports_the_sql_error_and_refuses_two_statements),
      cmocka_unit_test(rollback_discards_and_commit_keeps),
      cmocka_unit_test(backup_copies_a_live_database),
      cmocka_unit_test(backup_refuses_an_existing_destination),
      cmocka_unit_test(damaged_database_fails_quick_check_naming_the_file),
      cmocka_unit_test(blob_roundtrip_by_digest),
      cmocka_unit_test(missing_blob_is_reported_as_noent),
      cmocka_unit_test(removed_blob_is_gone_and_removing_again_is_no_error),
      cmocka_unit_test(corrupted_blob_is_reported_not_returned),
      cmocka_unit_test(aborted_writer_leaves_nothing_behind),
      cmocka_unit_test(temp_file_of_a_live_writer_survives_another_open),
      cmocka_unit_test(writer_killed_mid_write_leaves_no_visible_blob),
      cmocka_unit_test(allocation_failures_are_reported_not_crashed),
      cmocka_unit_test(atomic_write_replaces_whole_files_with_the_given_mode),
      cmocka_unit_test(atomic_write_into_a_missing_directory_fails_naming_the_file),
      cmocka_unit_test(file_write_refuses_every_target_that_is_not_a_regular_file),
      cmocka_unit_test(file_writer_does_not_replace_what_took_the_targets_place),
      cmocka_unit_test(file_write_keeps_the_old_content_when_a_write_fails_midway),
      cmocka_unit_test(file_write_gives_the_callers_mode_whatever_the_umask_and_the_old_file),
      cmocka_unit_test(file_writer_streams_large_outputs_and_abort_leaves_the_target),
      cmocka_unit_test(file_write_frees_everything_when_allocations_fail),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
