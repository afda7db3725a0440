/* SPDX-License-Identifier: Apache-2.0 */
/* The SQLite connection: pragmas, migrations, scripts, transactions, backup.
 * Functions that hold resources release them at one `out:` label; argument
 * checks before anything is held return early. */
#include "storage/db.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/file.h"
#include "storage/storage_internal.h"

/* Statements xf_db_prepare_cached keeps prepared, by their SQL text. */
#define XF__DB_CACHE 48

typedef struct xf__cached {
  const char *sql; /* the caller's string, which outlives the connection */
  sqlite3_stmt *st;
  bool busy;       /* handed out and not yet released */
} xf__cached;

struct xf_db {
  sqlite3 *handle;
  char *path;
  pthread_mutex_t cache_mu; /* a connection may be used from more than one thread */
  xf__cached cache[XF__DB_CACHE];
  size_t n_cache;
};

/* What a person can do about the common SQLite failures; "" otherwise. */
static const char *xf__db_hint(int sqlite_rc) {
  switch (sqlite_rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return "; another connection held the lock for longer than the busy timeout: "
             "retry, or stop the other writer";
    case SQLITE_FULL:
      return "; the disk is full: free space and retry";
    case SQLITE_READONLY:
      return "; the file or its directory is read-only for this user: fix the permissions";
    case SQLITE_CANTOPEN:
      return "; check that the directory exists and is writable by this user";
    case SQLITE_NOTADB:
      return "; the file is not an xfed database: check the path, or restore the file "
             "from a backup";
    case SQLITE_CORRUPT:
      return "; the database is damaged: restore it from a backup";
    case SQLITE_IOERR:
      return "; the storage reported an I/O error: check the disk";
    default:
      return "";
  }
}

/* Copies the start of a statement into buf on one line, for messages. */
static const char *xf__db_excerpt(const char *sql, char *buf, size_t n) {
  size_t used = 0;
  int space = 0;
  while (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r') sql++;
  for (; *sql && used + 6 < n; sql++) { /* room for ' ', a char, "..." and NUL */
    if (*sql == ' ' || *sql == '\t' || *sql == '\n' || *sql == '\r') {
      space = 1;
      continue;
    }
    if (space && used > 0) buf[used++] = ' ';
    space = 0;
    buf[used++] = *sql;
  }
  if (*sql) {
    memcpy(buf + used, "...", 3);
    used += 3;
  }
  buf[used] = '\0';
  return buf;
}

/* Runs every statement of a script, each prepared on its own (the tail
 * pointer walks the script). Returns the SQLite code; on failure `why` holds
 * SQLite's message, a hint and the failing statement. */
static int xf__db_run_script(sqlite3 *h, const char *sql, char *why, size_t why_n) {
  while (sql && *sql) {
    sqlite3_stmt *stmt = NULL;
    const char *tail = NULL;
    int rc = sqlite3_prepare_v2(h, sql, -1, &stmt, &tail);
    if (rc != SQLITE_OK) {
      char excerpt[96];
      snprintf(why, why_n, "%s%s (in: %s)", sqlite3_errmsg(h), xf__db_hint(rc),
               xf__db_excerpt(sql, excerpt, sizeof(excerpt)));
      return rc;
    }
    if (!stmt) break; /* only whitespace or comments remained */
    do rc = sqlite3_step(stmt);
    while (rc == SQLITE_ROW);
    if (rc != SQLITE_DONE) {
      char excerpt[96];
      snprintf(why, why_n, "%s%s (in: %s)", sqlite3_errmsg(h), xf__db_hint(rc),
               xf__db_excerpt(sqlite3_sql(stmt), excerpt, sizeof(excerpt)));
      sqlite3_finalize(stmt);
      return rc;
    }
    sqlite3_finalize(stmt);
    sql = tail;
  }
  return SQLITE_OK;
}

/* Reads the first column of the first row of a single statement. */
static int xf__db_query_int(sqlite3 *h, const char *sql, int *out) {
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(h, sql, -1, &stmt, NULL);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    *out = sqlite3_column_int(stmt, 0);
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_NOTFOUND; /* the pragma is not compiled into this SQLite */
  }
  sqlite3_finalize(stmt);
  return rc;
}

static int xf__db_query_text(sqlite3 *h, const char *sql, char *out, size_t n) {
  sqlite3_stmt *stmt = NULL;
  int rc = sqlite3_prepare_v2(h, sql, -1, &stmt, NULL);
  if (rc != SQLITE_OK) return rc;
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const unsigned char *text = sqlite3_column_text(stmt, 0);
    snprintf(out, n, "%s", text ? (const char *)text : "");
    rc = SQLITE_OK;
  } else if (rc == SQLITE_DONE) {
    rc = SQLITE_NOTFOUND;
  }
  sqlite3_finalize(stmt);
  return rc;
}

xf_err xf_db_quick_check(xf_db *db, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  if (sqlite3_prepare_v2(db->handle, "PRAGMA quick_check", -1, &st, NULL) != SQLITE_OK)
    return xf_db_fail(db, err, "cannot check the database");
  char first[300] = "", stopped[200] = "";
  size_t problems = 0;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const unsigned char *t = sqlite3_column_text(st, 0);
    const char *line = t ? (const char *)t : "";
    if (strcmp(line, "ok") == 0) continue;
    if (problems++ == 0) snprintf(first, sizeof(first), "%s", line);
  }
  /* Damage bad enough to stop the check (SQLite lists what it found up to
   * there) is damage too; anything else (I/O, locks, memory) says nothing
   * about the file. */
  int code = sqlite3_errcode(db->handle);
  bool cut_short = rc != SQLITE_DONE && (code == SQLITE_CORRUPT || code == SQLITE_NOTADB);
  if (cut_short) snprintf(stopped, sizeof(stopped), "%s", sqlite3_errmsg(db->handle));
  sqlite3_finalize(st);
  if (rc != SQLITE_DONE && !cut_short) return xf_db_fail(db, err, "SQLite's quick_check failed");
  if (problems == 0 && !cut_short) return XF_OK;
  /* The first finding on one line, without the heading SQLite puts before
   * it ("*** in database main ***\nPage 2: ..."). */
  const char *heading = "*** in database main ***";
  char *finding = first;
  if (strncmp(finding, heading, strlen(heading)) == 0) finding += strlen(heading);
  while (*finding == ' ' || *finding == '\n') finding++;
  for (char *c = finding; *c; c++)
    if ((unsigned char)*c < 0x20) *c = ' ';
  char more[48] = "";
  if (problems > 1) snprintf(more, sizeof(more), ", and %zu more", problems - 1);
  if (problems == 0)
    return xf__storage_fail(err, db->path, XF_EINTEGRITY,
                            "SQLite's quick_check cannot read the database to the end: %s",
                            stopped);
  if (cut_short)
    return xf__storage_fail(err, db->path, XF_EINTEGRITY,
                            "SQLite's quick_check finds the database damaged (%s%s) and "
                            "cannot read it to the end: %s",
                            finding, more, stopped);
  return xf__storage_fail(err, db->path, XF_EINTEGRITY,
                          "SQLite's quick_check finds the database damaged: %s%s", finding,
                          more);
}

xf_err xf_db_fail(xf_db *db, xf_errctx *err, const char *doing) {
  int code = sqlite3_extended_errcode(db->handle);
  return xf__storage_fail(err, db->path, XF_EDB, "%s: %s%s", doing,
                          sqlite3_errmsg(db->handle), xf__db_hint(code));
}

static xf_err xf__db_check_migrations(const xf_migration *migrations, size_t n,
                                      xf_errctx *err) {
  XF_ENSURE(n == 0 || migrations, err, XF_EINVAL,
            "%zu migrations given but the array is NULL", n);
  XF_ENSURE(n <= 0x7fffffff, err, XF_EINVAL, "%zu migrations exceed user_version's range", n);
  for (size_t i = 0; i < n; i++) {
    XF_ENSURE(migrations[i].version == (int)i + 1, err, XF_EINVAL,
              "migration at index %zu has version %d, expected %zu: versions must be "
              "consecutive from 1 in array order",
              i, migrations[i].version, i + 1);
    XF_ENSURE(migrations[i].sql, err, XF_EINVAL, "migration %d has no SQL",
              migrations[i].version);
  }
  return XF_OK;
}

/* Reads user_version and refuses versions this build cannot handle. */
static xf_err xf__db_read_version(xf_db *db, size_t n, int *out, xf_errctx *err) {
  if (xf__db_query_int(db->handle, "PRAGMA user_version", out) != SQLITE_OK)
    return xf_db_fail(db, err, "cannot read the schema version");
  if (*out < 0)
    return xf__storage_fail(err, db->path, XF_EFORMAT,
                            "schema version %d is negative: this database was not written "
                            "by xfed; check the path",
                            *out);
  if ((size_t)*out > n)
    return xf__storage_fail(err, db->path, XF_EUNSUPPORTED,
                            "schema version %d is newer than this build knows (%zu): "
                            "downgrade is not supported; run the xfed release that wrote it, "
                            "or restore a backup taken before the upgrade",
                            *out, n);
  return XF_OK;
}

/* Applies pending migrations one transaction each. An up-to-date database
 * (the common case) is recognized without taking the write lock. Otherwise
 * the version is read again under the lock, so two processes opening one
 * new database at once apply each migration exactly once. */
static xf_err xf__db_migrate(xf_db *db, const xf_migration *migrations, size_t n,
                             xf_errctx *err) {
  int version = 0;
  XF_GUARD(xf__db_read_version(db, n, &version, err));
  while ((size_t)version < n) {
    XF_GUARD(xf_db_begin(db, err));
    xf_err rc = xf__db_read_version(db, n, &version, err);
    if (rc != XF_OK || (size_t)version == n) {
      xf_db_rollback(db); /* nothing was written; releases the lock */
      return rc;
    }
    const xf_migration *next = &migrations[version];
    char why[400];
    char set_version[64];
    snprintf(set_version, sizeof(set_version), "PRAGMA user_version = %d", next->version);
    if (xf__db_run_script(db->handle, next->sql, why, sizeof(why)) != SQLITE_OK ||
        xf__db_run_script(db->handle, set_version, why, sizeof(why)) != SQLITE_OK) {
      xf_db_rollback(db);
      rc = xf__storage_fail(err, db->path, XF_EDB,
                            "migration to schema version %d failed: %s; the database was "
                            "left at version %d",
                            next->version, why, version);
      xf_errctx_field(err, "migration %d", next->version);
      return rc;
    }
    rc = xf_db_commit(db, err);
    if (rc != XF_OK) {
      xf_db_rollback(db);
      xf_errctx_field(err, "migration %d", next->version);
      return rc;
    }
    version = next->version;
    XF_INFO("db_migrated", "db=\"%s\" version=%d", db->path, version);
  }
  return XF_OK;
}

/* Sets the connection's pragmas and checks the ones whose refusal SQLite
 * reports only by returning the old value. */
static xf_err xf__db_configure(xf_db *db, xf_errctx *err) {
  sqlite3 *h = db->handle;
  sqlite3_extended_result_codes(h, 1);
  if (sqlite3_busy_timeout(h, XF_DB_BUSY_TIMEOUT_MS) != SQLITE_OK)
    return xf_db_fail(db, err, "cannot set the busy timeout");
  /* Switching a new file to WAL needs an exclusive lock, and SQLite answers
   * SQLITE_BUSY at once, without the busy handler, while another connection
   * is doing the same (waiting there could deadlock). Processes that create
   * one database together therefore retry here, within the same budget. */
  char mode[32];
  int src;
  int waited_ms = 0;
  while (((src = xf__db_query_text(h, "PRAGMA journal_mode=WAL", mode, sizeof(mode))) &
          0xff) == SQLITE_BUSY &&
         waited_ms < XF_DB_BUSY_TIMEOUT_MS) {
    sqlite3_sleep(10);
    waited_ms += 10;
  }
  if (src != SQLITE_OK) return xf_db_fail(db, err, "cannot switch to WAL journal mode");
  if (strcmp(mode, "wal") != 0)
    return xf__storage_fail(err, db->path, XF_EUNSUPPORTED,
                            "journal_mode=WAL did not take effect (the mode is '%s'); put "
                            "the database on a local filesystem that supports shared memory "
                            "and locking (not a network share)",
                            mode);
  char why[400];
  if (xf__db_run_script(h, "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON", why,
                        sizeof(why)) != SQLITE_OK)
    return xf__storage_fail(err, db->path, XF_EDB, "cannot set pragmas: %s", why);
  int fk = 0;
  if (xf__db_query_int(h, "PRAGMA foreign_keys", &fk) != SQLITE_OK || fk != 1)
    return xf__storage_fail(err, db->path, XF_EUNSUPPORTED,
                            "this SQLite does not enforce foreign keys; link xfed against "
                            "an SQLite built without SQLITE_OMIT_FOREIGN_KEY");
  return XF_OK;
}

/* The refusal of a database path that is not a regular file. */
static xf_err not_a_database_file(const char *path, mode_t mode, xf_errctx *err) {
  return xf__storage_fail(err, path, XF_EEXISTS,
                          "is %s, not a database file; give the path of a database file (a "
                          "new one is created)", xf_file_kind(mode));
}

xf_err xf_db_open(const char *path, const xf_migration *migrations, size_t n_migrations,
                  xf_db **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_db_open needs an output handle");
  *out = NULL;
  XF_ENSURE(path && path[0], err, XF_EINVAL, "no database path given");
  if (strcmp(path, ":memory:") == 0 || strncmp(path, "file:", 5) == 0)
    return xf__storage_fail(err, path, XF_EINVAL,
                            "in-memory and URI databases are not supported (WAL needs a "
                            "file); give a plain file path");
  XF_GUARD(xf__db_check_migrations(migrations, n_migrations, err));

  xf_err rc = XF_OK;
  xf_db *db = NULL;
  char ebuf[128];
  /* Created here rather than by SQLite so the file (and the -wal and -shm
   * files SQLite gives the same mode) is private to this user. */
  /* A link to a database is followed (SQLite does), but a FIFO, a device
   * or a directory is never opened as one. O_NONBLOCK: opening a FIFO that
   * appeared meanwhile does not wait for a writer. */
  struct stat st;
  if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
    return not_a_database_file(path, st.st_mode, err);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    int e = errno;
    return xf__storage_fail(err, path, XF_EIO,
                            "cannot open or create the database file: %s; check that the "
                            "directory exists and is writable by this user",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  }
  if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    close(fd);
    return not_a_database_file(path, st.st_mode, err);
  }
  close(fd);

  db = xf_calloc(1, sizeof(*db));
  if (db) pthread_mutex_init(&db->cache_mu, NULL);
  if (!db) {
    rc = xf__storage_fail(err, path, XF_ENOMEM, "out of memory opening the database");
    goto out;
  }
  db->path = xf_strdup(path);
  if (!db->path) {
    rc = xf__storage_fail(err, path, XF_ENOMEM, "out of memory opening the database");
    goto out;
  }
  int src = sqlite3_open_v2(path, &db->handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
                            NULL);
  if (src != SQLITE_OK) {
    if (!db->handle) {
      rc = xf__storage_fail(err, path, XF_ENOMEM, "SQLite is out of memory");
    } else {
      rc = xf_db_fail(db, err, "cannot open the database");
    }
    goto out;
  }
  rc = xf__db_configure(db, err);
  if (rc != XF_OK) goto out;
  rc = xf__db_migrate(db, migrations, n_migrations, err);
  if (rc != XF_OK) goto out;
  *out = db;
  db = NULL;
out:
  xf_db_close(db);
  return rc;
}

/* Percent-encodes path into a file: URI (RFC 3986 unreserved characters
 * and '/' kept as they are). False when it does not fit. */
static bool xf__db_uri(const char *path, const char *query, char *out, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t used = 0;
  const char *head = "file:";
  for (const char *c = head; *c; c++) {
    if (used + 1 >= n) return false;
    out[used++] = *c;
  }
  for (const unsigned char *c = (const unsigned char *)path; *c; c++) {
    bool plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                 (*c >= '0' && *c <= '9') || *c == '/' || *c == '-' || *c == '_' ||
                 *c == '.' || *c == '~';
    if (used + (plain ? 1 : 3) >= n) return false;
    if (plain) {
      out[used++] = (char)*c;
    } else {
      out[used++] = '%';
      out[used++] = hex[*c >> 4];
      out[used++] = hex[*c & 15];
    }
  }
  size_t q = strlen(query);
  if (used + q >= n) return false;
  memcpy(out + used, query, q + 1);
  return true;
}

xf_err xf_db_open_readonly(const char *path, xf_db **out, xf_db_file_info *info,
                           xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_db_open_readonly needs an output handle");
  *out = NULL;
  XF_ENSURE(path && path[0], err, XF_EINVAL, "no database path given");
  xf_db_file_info found = {0};
  if (info) *info = found;
  char ebuf[128];
  struct stat st;
  if (stat(path, &st) != 0) {
    int e = errno;
    return xf__storage_fail(err, path, e == ENOENT ? XF_ENOENT : XF_EIO,
                            "cannot read the database file: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  }
  if (!S_ISREG(st.st_mode))
    return xf__storage_fail(err, path, XF_EEXISTS, "is %s, not a database file",
                            xf_file_kind(st.st_mode));
  /* The header (sqlite.org/fileformat.html): the magic string, and bytes
   * 18 and 19 (write and read format) are 2 in WAL mode. */
  unsigned char head[100];
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  ssize_t got = fd >= 0 ? read(fd, head, sizeof(head)) : -1;
  int e = errno;
  if (fd >= 0) close(fd);
  if (got < 0)
    return xf__storage_fail(err, path, XF_EIO, "cannot read the database file: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  if (got < (ssize_t)sizeof(head) || memcmp(head, "SQLite format 3", 16) != 0)
    return xf__storage_fail(err, path, XF_EFORMAT,
                            "is not an SQLite database (%s); check the path",
                            got == 0 ? "the file is empty" : "its header does not say SQLite");
  found.wal_mode = head[18] == 2 && head[19] == 2;
  size_t wlen = strlen(path) + sizeof("-wal");
  char *wal = xf_malloc(wlen);
  if (!wal) return xf__storage_fail(err, path, XF_ENOMEM, "out of memory opening the database");
  snprintf(wal, wlen, "%s-wal", path);
  found.wal_beside = stat(wal, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0;
  xf_free(wal);
  if (info) *info = found;

  /* immutable=1: SQLite takes no lock and makes no -wal or -shm file; only
   * right when no -wal holds rows (or a rollback journal would have to be
   * played back, which a read-only connection refuses anyway). */
  bool immutable = found.wal_mode && !found.wal_beside;
  size_t ulen = 3 * strlen(path) + 64;
  char *uri = xf_malloc(ulen);
  xf_db *db = xf_calloc(1, sizeof(*db));
  if (db) pthread_mutex_init(&db->cache_mu, NULL);
  xf_err rc = XF_OK;
  if (!uri || !db || !(db->path = xf_strdup(path)) ||
      !xf__db_uri(path, immutable ? "?mode=ro&immutable=1" : "?mode=ro", uri, ulen)) {
    rc = xf__storage_fail(err, path, XF_ENOMEM, "out of memory opening the database");
    goto out;
  }
  int src = sqlite3_open_v2(uri, &db->handle, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, NULL);
  if (src != SQLITE_OK) {
    rc = db->handle ? xf_db_fail(db, err, "cannot open the database for reading")
                    : xf__storage_fail(err, path, XF_ENOMEM, "SQLite is out of memory");
    goto out;
  }
  sqlite3_busy_timeout(db->handle, XF_DB_BUSY_TIMEOUT_MS);
  /* Reading the schema is the first access: a damaged file fails here. */
  int n = 0;
  src = xf__db_query_int(db->handle, "SELECT count(*) FROM sqlite_master", &n);
  if (src != SQLITE_OK) {
    rc = xf_db_fail(db, err, "cannot read the database");
    goto out;
  }
  *out = db;
  db = NULL;
out:
  xf_free(uri);
  xf_db_close(db);
  return rc;
}

xf_err xf_db_schema_version(xf_db *db, int *version, xf_errctx *err) {
  XF_ENSURE(db && version, err, XF_EINVAL, "xf_db_schema_version needs a database");
  *version = 0;
  if (xf__db_query_int(db->handle, "PRAGMA user_version", version) != SQLITE_OK)
    return xf_db_fail(db, err, "cannot read the schema version");
  return XF_OK;
}

xf_err xf_db_checkpoint(xf_db *db, xf_errctx *err) {
  XF_ENSURE(db, err, XF_EINVAL, "xf_db_checkpoint needs a database");
  int logged = 0, copied = 0;
  int rc = sqlite3_wal_checkpoint_v2(db->handle, "main", SQLITE_CHECKPOINT_PASSIVE, &logged,
                                     &copied);
  if (rc != SQLITE_OK) return xf_db_fail(db, err, "cannot checkpoint the -wal file");
  return XF_OK;
}

void xf_db_close(xf_db *db) {
  if (!db) return;
  for (size_t i = 0; i < db->n_cache; i++) sqlite3_finalize(db->cache[i].st);
  db->n_cache = 0;
  pthread_mutex_destroy(&db->cache_mu);
  if (db->handle) {
    if (sqlite3_next_stmt(db->handle, NULL))
      XF_WARN("db_close_with_open_statements",
              "db=\"%s\" note=\"the connection closes when they are finalized\"", db->path);
    sqlite3_close_v2(db->handle);
  }
  xf_free(db->path);
  xf_free(db);
}

const char *xf_db_path(const xf_db *db) { return db->path; }

sqlite3 *xf_db_handle(xf_db *db) { return db->handle; }

xf_err xf_db_prepare(xf_db *db, const char *sql, sqlite3_stmt **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_db_prepare needs an output statement");
  *out = NULL;
  XF_ENSURE(db && sql, err, XF_EINVAL, "xf_db_prepare needs a database and SQL");
  const char *tail = NULL;
  sqlite3_stmt *stmt = NULL;
  char excerpt[96];
  int rc = sqlite3_prepare_v2(db->handle, sql, -1, &stmt, &tail);
  if (rc != SQLITE_OK)
    return xf__storage_fail(err, db->path, XF_EDB, "cannot prepare SQL: %s%s (in: %s)",
                            sqlite3_errmsg(db->handle), xf__db_hint(rc),
                            xf__db_excerpt(sql, excerpt, sizeof(excerpt)));
  if (!stmt)
    return xf__storage_fail(err, db->path, XF_EINVAL, "the SQL holds no statement: '%s'",
                            xf__db_excerpt(sql, excerpt, sizeof(excerpt)));
  while (tail && (*tail == ';' || *tail == ' ' || *tail == '\t' || *tail == '\n' ||
                  *tail == '\r'))
    tail++;
  if (tail && *tail) {
    sqlite3_finalize(stmt);
    return xf__storage_fail(err, db->path, XF_EINVAL,
                            "xf_db_prepare takes one statement but more follows (%s); use "
                            "xf_db_exec for scripts",
                            xf__db_excerpt(tail, excerpt, sizeof(excerpt)));
  }
  *out = stmt;
  return XF_OK;
}

xf_err xf_db_prepare_cached(xf_db *db, const char *sql, sqlite3_stmt **out, xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_db_prepare_cached needs an output statement");
  *out = NULL;
  XF_ENSURE(db && sql, err, XF_EINVAL, "xf_db_prepare_cached needs a database and SQL");
  pthread_mutex_lock(&db->cache_mu);
  for (size_t i = 0; i < db->n_cache; i++) {
    xf__cached *c = &db->cache[i];
    if (!c->busy && c->sql == sql && strcmp(sqlite3_sql(c->st), sql) == 0) {
      c->busy = true;
      *out = c->st;
      pthread_mutex_unlock(&db->cache_mu);
      return XF_OK;
    }
  }
  pthread_mutex_unlock(&db->cache_mu);
  XF_GUARD(xf_db_prepare(db, sql, out, err));
  pthread_mutex_lock(&db->cache_mu);
  if (db->n_cache < XF__DB_CACHE)
    db->cache[db->n_cache++] = (xf__cached){.sql = sql, .st = *out, .busy = true};
  pthread_mutex_unlock(&db->cache_mu);
  return XF_OK;
}

void xf_db_release(xf_db *db, sqlite3_stmt *st) {
  if (!st) return;
  if (db) {
    pthread_mutex_lock(&db->cache_mu);
    for (size_t i = 0; i < db->n_cache; i++)
      if (db->cache[i].st == st) {
        sqlite3_reset(st);
        sqlite3_clear_bindings(st);
        db->cache[i].busy = false;
        pthread_mutex_unlock(&db->cache_mu);
        return;
      }
    pthread_mutex_unlock(&db->cache_mu);
  }
  sqlite3_finalize(st);
}

xf_err xf_db_exec(xf_db *db, const char *sql, xf_errctx *err) {
  XF_ENSURE(db && sql, err, XF_EINVAL, "xf_db_exec needs a database and SQL");
  char why[400];
  if (xf__db_run_script(db->handle, sql, why, sizeof(why)) != SQLITE_OK)
    return xf__storage_fail(err, db->path, XF_EDB, "%s", why);
  return XF_OK;
}

xf_err xf_db_begin(xf_db *db, xf_errctx *err) {
  return xf_db_exec(db, "BEGIN IMMEDIATE", err);
}

xf_err xf_db_commit(xf_db *db, xf_errctx *err) { return xf_db_exec(db, "COMMIT", err); }

void xf_db_rollback(xf_db *db) {
  if (!db || sqlite3_get_autocommit(db->handle)) return; /* no transaction open */
  char why[400];
  if (xf__db_run_script(db->handle, "ROLLBACK", why, sizeof(why)) != SQLITE_OK)
    XF_ERROR("db_rollback_failed", "db=\"%s\" why=\"%s\"", db->path, why);
}

/* Steps a backup to the end, retrying while the source or destination is
 * locked for at most the busy timeout. */
static int xf__db_backup_run(sqlite3_backup *b) {
  int waited_ms = 0;
  for (;;) {
    int rc = sqlite3_backup_step(b, -1);
    if (rc == SQLITE_DONE || rc == SQLITE_OK) {
      if (rc == SQLITE_DONE) return SQLITE_DONE;
      continue;
    }
    if ((rc & 0xff) != SQLITE_BUSY && (rc & 0xff) != SQLITE_LOCKED) return rc;
    if (waited_ms >= XF_DB_BUSY_TIMEOUT_MS) return rc;
    sqlite3_sleep(20);
    waited_ms += 20;
  }
}

/* Refuses a backup inside an open transaction, and one to a destination
 * that exists or is not a place for a new plain file. */
static xf_err xf__db_backup_check(xf_db *db, const char *dest_path, xf_errctx *err) {
  if (!sqlite3_get_autocommit(db->handle))
    return xf__storage_fail(err, db->path, XF_EINVAL,
                            "a backup inside an open transaction would copy uncommitted "
                            "changes; commit or roll back first");
  char ebuf[128];
  struct stat st;
  XF_GUARD(xf_file_check_target(dest_path, err)); /* names a link, FIFO, device, directory */
  if (lstat(dest_path, &st) == 0)
    return xf__storage_fail(err, dest_path, XF_EEXISTS,
                            "the backup destination already exists; choose a new file name "
                            "or move the old backup away");
  if (errno != ENOENT) {
    int e = errno;
    return xf__storage_fail(err, dest_path, XF_EIO, "cannot check the backup destination: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  }
  return XF_OK;
}

/* Copies db into the empty file tmp with SQLite's backup API, and leaves
 * the copy closed as one self-contained file that passes quick_check. */
static xf_err xf__db_backup_copy(xf_db *db, const char *tmp, xf_errctx *err) {
  xf_err rc = XF_OK;
  sqlite3 *dest = NULL;
  int src = sqlite3_open_v2(tmp, &dest, SQLITE_OPEN_READWRITE, NULL);
  if (src != SQLITE_OK) {
    rc = dest ? xf__storage_fail(err, tmp, XF_EDB, "cannot open the backup file: %s%s",
                                 sqlite3_errmsg(dest), xf__db_hint(src))
              : xf__storage_fail(err, tmp, XF_ENOMEM, "SQLite is out of memory");
    goto out;
  }
  char why[400];
  if (xf__db_run_script(dest, "PRAGMA synchronous=FULL", why, sizeof(why)) != SQLITE_OK) {
    rc = xf__storage_fail(err, tmp, XF_EDB, "cannot configure the backup file: %s", why);
    goto out;
  }
  sqlite3_backup *b = sqlite3_backup_init(dest, "main", db->handle, "main");
  if (!b) {
    rc = xf__storage_fail(err, tmp, XF_EDB, "cannot start the backup: %s",
                          sqlite3_errmsg(dest));
    goto out;
  }
  src = xf__db_backup_run(b);
  int fin = sqlite3_backup_finish(b);
  if (src != SQLITE_DONE || fin != SQLITE_OK) {
    int code = src != SQLITE_DONE ? src : fin;
    rc = xf__storage_fail(err, tmp, XF_EDB, "backup of %s failed: %s%s", db->path,
                          sqlite3_errstr(code), xf__db_hint(code));
    goto out;
  }
  /* The copy keeps the source's WAL flag in its header; in rollback mode it
   * is one self-contained file, whatever is copied beside it or not. */
  if (xf__db_run_script(dest, "PRAGMA journal_mode=DELETE", why, sizeof(why)) != SQLITE_OK) {
    rc = xf__storage_fail(err, tmp, XF_EDB, "cannot make the backup one file: %s", why);
    goto out;
  }
  char check[64] = "no result";
  if (xf__db_query_text(dest, "PRAGMA quick_check", check, sizeof(check)) != SQLITE_OK ||
      strcmp(check, "ok") != 0) {
    rc = xf__storage_fail(err, tmp, XF_EINTEGRITY,
                          "the backup copy fails SQLite's quick_check (%s); check the disk "
                          "and run the backup again",
                          check);
    goto out;
  }
  if (sqlite3_close(dest) != SQLITE_OK) {
    rc = xf__storage_fail(err, tmp, XF_EDB, "cannot close the backup file: %s",
                          sqlite3_errmsg(dest));
    goto out;
  }
  dest = NULL;
out:
  if (dest) sqlite3_close(dest);
  return rc;
}

/* Flushes the finished copy tmp to disk, moves it to dest_path unless
 * something took that place meanwhile, and flushes the directory; *placed
 * says whether tmp was moved (and so is no longer the caller's to remove). */
static xf_err xf__db_backup_place(const char *tmp, const char *dest_path, bool *placed,
                                  xf_errctx *err) {
  char ebuf[128];
  struct stat st;
  /* SQLite synced its commit; this sync does not depend on its settings. */
  int fd = open(tmp, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fsync(fd) != 0) {
    int e = errno;
    if (fd >= 0) close(fd);
    return xf__storage_fail(err, tmp, XF_EIO, "cannot flush the backup file to disk: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  }
  close(fd);
  /* What took the destination's place while the copy was made (a file, a
   * link, a FIFO) is not replaced either. */
  if (lstat(dest_path, &st) == 0)
    return S_ISREG(st.st_mode)
               ? xf__storage_fail(err, dest_path, XF_EEXISTS,
                                  "the backup destination appeared while the backup was made; "
                                  "choose a new file name or move it away")
               : xf_file_check_target(dest_path, err);
  if (rename(tmp, dest_path) != 0) {
    int e = errno;
    return xf__storage_fail(err, dest_path, XF_EIO, "cannot move the backup into place: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  }
  *placed = true;
  int e = xf__storage_fsync_parent(dest_path);
  if (e != 0)
    return xf__storage_fail(err, dest_path, XF_EIO,
                            "the backup is in place but its directory could not be flushed "
                            "to disk: %s",
                            xf__storage_errno(e, ebuf, sizeof(ebuf)));
  return XF_OK;
}

xf_err xf_db_backup(xf_db *db, const char *dest_path, xf_errctx *err) {
  XF_ENSURE(db && dest_path && dest_path[0], err, XF_EINVAL,
            "xf_db_backup needs a database and a destination path");
  XF_GUARD(xf__db_backup_check(db, dest_path, err));

  char ebuf[128];
  xf_err rc = XF_OK;
  char *tmp = NULL;
  char *journal = NULL;
  int created = 0;
  char name[XF_STORAGE_NAME_HEX];
  rc = xf__storage_random_name(name, err);
  if (rc != XF_OK) goto out;
  size_t len = strlen(dest_path) + sizeof(".tmp-") + sizeof(name) + sizeof("-journal");
  tmp = xf_malloc(len);
  journal = xf_malloc(len);
  if (!tmp || !journal) {
    rc = xf__storage_fail(err, dest_path, XF_ENOMEM, "out of memory starting a backup");
    goto out;
  }
  /* Next to the destination, so the final rename stays on one filesystem
   * and is atomic. */
  snprintf(tmp, len, "%s.tmp-%s", dest_path, name);
  snprintf(journal, len, "%s-journal", tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    rc = xf__storage_fail(err, dest_path, XF_EIO,
                          "cannot create a temporary file next to the backup destination: "
                          "%s; check that the directory exists and is writable",
                          xf__storage_errno(e, ebuf, sizeof(ebuf)));
    goto out;
  }
  close(fd);
  created = 1;

  if ((rc = xf__db_backup_copy(db, tmp, err)) != XF_OK) goto out;
  bool placed = false;
  rc = xf__db_backup_place(tmp, dest_path, &placed, err);
  if (placed) created = 0;
  if (rc != XF_OK) goto out;
  XF_INFO("db_backup_done", "db=\"%s\" dest=\"%s\"", db->path, dest_path);
out:
  if (created) {
    unlink(tmp);
    unlink(journal);
  }
  xf_free(journal);
  xf_free(tmp);
  return rc;
}
