/* SPDX-License-Identifier: Apache-2.0 */
/* The SQLite base under all coordinator state (jobs, rounds, policy, audit,
 * ledger): one connection in WAL mode, schema migrations by user_version,
 * prepared statements only, transactions and online backup. */
#ifndef XF_STORAGE_DB_H
#define XF_STORAGE_DB_H

#include <stdbool.h>
#include <stddef.h>

#include <sqlite3.h>

#include "base/result.h"

/* One connection to one database file. Use it from one thread at a time;
 * threads that need the database concurrently open their own. */
typedef struct xf_db xf_db;

/* One schema step: the SQL script that takes the schema from version - 1 to
 * version. A module keeps its migrations in one static array, append only:
 * a released migration is never edited, a change is a new one. The script
 * runs inside a transaction, so it must not contain BEGIN/COMMIT, VACUUM or
 * PRAGMA journal_mode. */
typedef struct xf_migration {
  int version;
  const char *sql;
} xf_migration;

/* How long a statement waits for another connection's lock before it fails
 * with "database is locked" (XF_EDB). */
#define XF_DB_BUSY_TIMEOUT_MS 5000

/* Opens or creates the database at `path` (created with mode 0600), sets
 * journal_mode=WAL (and checks that it took), busy_timeout, foreign_keys=ON
 * and synchronous=FULL, then brings the schema up to date.
 *
 * `migrations` must hold versions 1, 2, ... n_migrations in order
 * (XF_EINVAL otherwise; n_migrations may be 0). Each pending migration runs
 * in its own IMMEDIATE transaction together with setting user_version, so a
 * failing one leaves the database at the previous version; the error is
 * XF_EDB with field "migration N" and SQLite's message. Concurrent openers
 * are safe: the version is re-read under the write lock. All modules that
 * share one database file share one migration list (one user_version).
 *
 * A database whose user_version is above n_migrations was written by a newer
 * build and is refused with XF_EUNSUPPORTED (downgrade is not supported).
 * A file that is not an SQLite database, or a path that cannot be opened or
 * does not support WAL (":memory:", some network filesystems), is XF_EDB or
 * XF_EINVAL. XF_ENOMEM when out of memory.
 *
 * On success the caller owns *out and releases it with xf_db_close; on
 * failure *out is NULL. err (may be NULL) names the database file. */
xf_err xf_db_open(const char *path, const xf_migration *migrations, size_t n_migrations,
                  xf_db **out, xf_errctx *err) XF_WARN_UNUSED;

/* What xf_db_open_readonly found beside the file before opening it. */
typedef struct xf_db_file_info {
  bool wal_mode;   /* the header says the database was last written in WAL mode */
  bool wal_beside; /* a non-empty PATH-wal file sits next to it */
} xf_db_file_info;

/* Opens an existing database file for reading only, the way an auditor
 * opens a copy: no migration, no pragma that writes, no checkpoint, and the
 * file's bytes and modification time stay as they are. A file that does not
 * start with SQLite's header is refused (XF_EFORMAT) before SQLite sees it;
 * a missing path is XF_ENOENT, anything but a regular file XF_EEXISTS.
 *
 * A WAL-mode file with no -wal beside it (a cleanly closed database, or a
 * plain copy of a live one) is opened as immutable, so SQLite creates no
 * -wal or -shm file next to it; with a -wal beside it SQLite reads the
 * committed rows it holds (and may create the -shm index, never writing the
 * database or the -wal). `info` (may be NULL) says which case it was.
 * Ownership and errors otherwise as xf_db_open. */
xf_err xf_db_open_readonly(const char *path, xf_db **out, xf_db_file_info *info,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The schema version (user_version) of an open database. */
xf_err xf_db_schema_version(xf_db *db, int *version, xf_errctx *err) XF_WARN_UNUSED;

/* Copies the committed rows of the -wal file into the database file
 * (PRAGMA wal_checkpoint(PASSIVE): readers are not waited for, so a reader
 * holding an old snapshot can leave frames behind until the next one), so
 * that the main file alone holds them: what a plain copy of the file then
 * carries. XF_EDB on failure. */
xf_err xf_db_checkpoint(xf_db *db, xf_errctx *err) XF_WARN_UNUSED;

/* Closes the connection; NULL is allowed. Statements the caller did not
 * finalize keep the connection alive until they are (and are logged). */
void xf_db_close(xf_db *db);

/* The path the database was opened with; owned by db. */
const char *xf_db_path(const xf_db *db);

/* The underlying connection, for modules that bind and step their own
 * statements. Owned by db: never close it or change its pragmas. */
sqlite3 *xf_db_handle(xf_db *db);

/* Prepares exactly one statement (trailing whitespace and ';' allowed;
 * a second statement is XF_EINVAL: use xf_db_exec for scripts). On success
 * the caller owns *out and finalizes it with sqlite3_finalize; on failure
 * *out is NULL and err carries SQLite's message and the SQL (XF_EDB). */
xf_err xf_db_prepare(xf_db *db, const char *sql, sqlite3_stmt **out,
                     xf_errctx *err) XF_WARN_UNUSED;

/* As xf_db_prepare, from a cache of prepared statements kept by the
 * connection and keyed by the address of sql, which must be a string that
 * lives as long as db and never changes (a literal): parsing a statement
 * costs more than running most of them. Give the statement back with
 * xf_db_release (reset, bindings cleared), never sqlite3_finalize. A
 * statement already handed out is prepared anew; one that does not fit the
 * cache is finalized by xf_db_release. */
xf_err xf_db_prepare_cached(xf_db *db, const char *sql, sqlite3_stmt **out,
                            xf_errctx *err) XF_WARN_UNUSED;
void xf_db_release(xf_db *db, sqlite3_stmt *st);

/* Runs a script of statements without parameters, one prepared statement at
 * a time; rows they return are discarded. Stops at the first failing
 * statement (XF_EDB, naming it); statements before it stay applied unless
 * the caller wraps the call in a transaction. */
xf_err xf_db_exec(xf_db *db, const char *sql, xf_errctx *err) XF_WARN_UNUSED;

/* BEGIN IMMEDIATE: takes the write lock now (waiting up to the busy
 * timeout), so a transaction never fails half-way for lack of it. Every
 * successful xf_db_begin is ended by exactly one xf_db_commit or
 * xf_db_rollback. XF_EDB on failure (e.g. already in a transaction, locked). */
xf_err xf_db_begin(xf_db *db, xf_errctx *err) XF_WARN_UNUSED;
/* Commits; on failure the transaction is still open and the caller must
 * xf_db_rollback it. */
xf_err xf_db_commit(xf_db *db, xf_errctx *err) XF_WARN_UNUSED;
/* Rolls back the open transaction, if any. Meant for error paths, so it does
 * not return an error of its own: a failure (rare: SQLite has then already
 * rolled back or the connection is unusable) is logged. */
void xf_db_rollback(xf_db *db);

/* Copies the database, as of one consistent snapshot of committed data, to
 * the new file `dest_path` with the SQLite online backup API. Other
 * connections keep reading and writing meanwhile (WAL). The copy is written
 * to a temporary file next to dest_path and renamed into place, so
 * dest_path is either absent or a complete database. An existing dest_path is
 * refused (XF_EEXISTS); I/O and SQLite failures are XF_EIO / XF_EDB naming
 * the file at fault. */
xf_err xf_db_backup(xf_db *db, const char *dest_path, xf_errctx *err) XF_WARN_UNUSED;

/* Runs SQLite's `PRAGMA quick_check` over the whole file (every page read
 * once; O(size of the database)). XF_OK when it finds nothing wrong;
 * XF_EINTEGRITY when it finds damage, with err naming the file and the
 * first of SQLite's findings on one line ("Page 5: btree page has invalid
 * type, and 2 more"), also when the damage stops the check
 * (SQLITE_CORRUPT, SQLITE_NOTADB: SQLite's message and what it found up to
 * there); XF_EDB when the check fails for another reason (I/O, locks,
 * memory), which says nothing about the file. */
xf_err xf_db_quick_check(xf_db *db, xf_errctx *err) XF_WARN_UNUSED;

/* For modules that step statements themselves: records the connection's
 * last SQLite error as XF_EDB in err (file = the database, message =
 * "<doing>: <SQLite message>" with a hint for locks, full disks and
 * read-only files) and returns XF_EDB. db must be open. */
xf_err xf_db_fail(xf_db *db, xf_errctx *err, const char *doing);

#endif
