/* SPDX-License-Identifier: Apache-2.0 */
/* The hash-chained audit trail behind policy/audit.h: its schema, the
 * canonical row encoding that is hashed, appending, verification, listing
 * and the JSON-lines export. */
#include "policy/audit.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"

/* ---- schema ------------------------------------------------------------------
 * No CHECK on kind: the set grows, and SQLite cannot change a CHECK without
 * rebuilding the table; xf_audit_append enforces it instead. The triggers
 * stop mistakes and ordinary writers, not someone who can rewrite the file:
 * that is what the chain is for. */
const char xf_audit_schema_sql[] =
    "CREATE TABLE audit (\n"
    "  seq INTEGER PRIMARY KEY,\n"
    "  at REAL NOT NULL,\n"
    "  actor TEXT NOT NULL,\n"
    "  kind TEXT NOT NULL,\n"
    "  subject TEXT NOT NULL,\n"
    "  detail TEXT NOT NULL,\n"
    "  prev TEXT NOT NULL,\n"
    "  digest TEXT NOT NULL\n"
    ");\n"
    "CREATE INDEX audit_by_time ON audit (at);\n"
    "CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;\n"
    "CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit\n"
    "BEGIN SELECT RAISE(ABORT, 'the audit trail is append-only'); END;\n";


/* One row, id 1: created with the trail's keeper migration so the daemons
 * only ever update it. */
const char xf_audit_keeper_sql[] =
    "CREATE TABLE audit_keeper (\n"
    "  id INTEGER PRIMARY KEY CHECK (id = 1),\n"
    "  running INTEGER NOT NULL CHECK (running IN (0, 1)),\n"
    "  since REAL NOT NULL,\n"
    "  checkpointed REAL NOT NULL\n"
    ");\n"
    "INSERT INTO audit_keeper (id, running, since, checkpointed) VALUES (1, 0, 0, 0);\n";

/* The standalone audit database's migration list: append only. */
static const xf_migration audit_migrations[] = {{1, xf_audit_schema_sql},
                                                {2, xf_audit_keeper_sql}};

/* Sets the keeper row with one UPDATE, then checkpoints. */
static xf_err keeper_write(xf_db *db, const char *sql, double now, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db, sql, &st, err));
  sqlite3_bind_double(st, 1, now);
  int s = sqlite3_step(st);
  sqlite3_finalize(st);
  if (s != SQLITE_DONE) return xf_db_fail(db, err, "cannot update the audit keeper row");
  return xf_db_checkpoint(db, err);
}

xf_err xf_audit_keeper_start(xf_db *db, double now, xf_errctx *err) {
  return keeper_write(db, "UPDATE audit_keeper SET running = 1, since = ?1, checkpointed = ?1",
                      now, err);
}

xf_err xf_audit_keeper_mark(xf_db *db, double now, xf_errctx *err) {
  return keeper_write(db, "UPDATE audit_keeper SET checkpointed = ?1", now, err);
}

xf_err xf_audit_keeper_stop(xf_db *db, double now, xf_errctx *err) {
  return keeper_write(db, "UPDATE audit_keeper SET running = 0, checkpointed = ?1", now, err);
}

const char *xf_audit_trail_kind_name(xf_audit_trail_kind k) {
  switch (k) {
  case XF_AUDIT_TRAIL_STANDALONE: return "audit trail";
  case XF_AUDIT_TRAIL_COORDINATOR: return "coordinator journal";
  case XF_AUDIT_TRAIL_SITE: return "site database";
  }
  return "?";
}

/* Whether the file's schema holds a table of that name. */
static bool has_table(xf_db *db, const char *name) {
  sqlite3_stmt *st = NULL;
  xf_errctx ignored = {0};
  if (xf_db_prepare(db, "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", &st,
                    &ignored) != XF_OK)
    return false;
  sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
  bool found = sqlite3_step(st) == SQLITE_ROW;
  sqlite3_finalize(st);
  return found;
}

/* The audit table's columns, in order, comma-separated, into buf. */
static xf_err audit_columns(xf_db *db, char *buf, size_t n, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  buf[0] = '\0';
  XF_GUARD(xf_db_prepare(db, "SELECT name FROM pragma_table_info('audit') ORDER BY cid", &st,
                         err));
  size_t used = 0;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    const char *c = (const char *)sqlite3_column_text(st, 0);
    int w = snprintf(buf + used, n - used, "%s%s", used ? "," : "", c ? c : "");
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
  }
  sqlite3_finalize(st);
  if (s != SQLITE_ROW && s != SQLITE_DONE) return xf_db_fail(db, err, "reading the audit table");
  return XF_OK;
}

/* The tables a file holds, comma-separated, for a refusal. */
static void table_names(xf_db *db, char *buf, size_t n) {
  sqlite3_stmt *st = NULL;
  xf_errctx ignored = {0};
  snprintf(buf, n, "none");
  if (xf_db_prepare(db, "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
                    &st, &ignored) != XF_OK)
    return;
  size_t used = 0;
  while (sqlite3_step(st) == SQLITE_ROW) {
    const char *t = (const char *)sqlite3_column_text(st, 0);
    int w = snprintf(buf + used, n - used, "%s%s", used ? ", " : "", t ? t : "");
    if (w < 0 || (size_t)w >= n - used) break;
    used += (size_t)w;
  }
  sqlite3_finalize(st);
}

xf_err xf_audit_open_readonly(const char *path, xf_db **out, xf_audit_trail_info *info,
                              xf_errctx *err) {
  XF_ENSURE(out, err, XF_EINVAL, "xf_audit_open_readonly needs an output handle");
  *out = NULL;
  xf_audit_trail_info found;
  memset(&found, 0, sizeof(found));
  if (info) *info = found;
  xf_db *db = NULL;
  XF_GUARD(xf_db_open_readonly(path, &db, &found.file, err));
  xf_err rc = xf_db_schema_version(db, &found.schema_version, err);
  if (rc != XF_OK) goto out;
  if (!has_table(db, "audit")) {
    char tables[200];
    table_names(db, tables, sizeof(tables));
    rc = xf_fail(err, XF_EFORMAT,
                 "is an SQLite database but not an audit trail: it has no audit table "
                 "(tables: %s); give a coordinator journal (coord.db), a regional "
                 "aggregator's audit.db, a site database or a backup of one",
                 tables);
    xf_errctx_file(err, path);
    goto out;
  }
  char columns[200];
  if ((rc = audit_columns(db, columns, sizeof(columns), err)) != XF_OK) goto out;
  if (strcmp(columns, "seq,at,actor,kind,subject,detail,prev,digest") != 0) {
    rc = xf_fail(err, XF_EUNSUPPORTED,
                 "its audit table has the columns %s, not those this build reads "
                 "(seq,at,actor,kind,subject,detail,prev,digest): verify it with the build "
                 "that wrote it",
                 columns);
    xf_errctx_file(err, path);
    goto out;
  }
  found.kind = has_table(db, "jobs") && has_table(db, "policy_version")
                   ? XF_AUDIT_TRAIL_COORDINATOR
               : has_table(db, "datasets") ? XF_AUDIT_TRAIL_SITE
                                           : XF_AUDIT_TRAIL_STANDALONE;
  found.kept = has_table(db, "audit_keeper");
  if (found.kept) {
    sqlite3_stmt *st = NULL;
    if ((rc = xf_db_prepare(db, "SELECT running, checkpointed FROM audit_keeper WHERE id = 1",
                            &st, err)) != XF_OK)
      goto out;
    if (sqlite3_step(st) == SQLITE_ROW) {
      found.running = sqlite3_column_int(st, 0) != 0;
      found.checkpointed = sqlite3_column_double(st, 1);
    }
    sqlite3_finalize(st);
  }
  if (found.running && found.file.wal_mode && !found.file.wal_beside) {
    char when[40] = "never";
    if (found.checkpointed > 0) {
      time_t t = (time_t)found.checkpointed;
      struct tm tm;
      if (gmtime_r(&t, &tm)) strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    }
    rc = xf_fail(err, XF_ETRUNCATED,
                 "is a plain copy of a running daemon's %s made without its -wal file: rows "
                 "appended after its last checkpoint (%s) may be missing, so it cannot be "
                 "verified as complete. Copy it with 'xfed-coord backup --state DIR --out "
                 "FILE' (or stop the daemon first, or copy FILE-wal with it)",
                 xf_audit_trail_kind_name(found.kind), when);
    xf_errctx_file(err, path);
    goto out;
  }
  if (info) *info = found;
  *out = db;
  db = NULL;
out:
  xf_db_close(db);
  return rc;
}

xf_err xf_audit_open(const char *path, xf_db **out, xf_errctx *err) {
  return xf_db_open(path, audit_migrations, sizeof(audit_migrations) / sizeof(audit_migrations[0]),
                    out, err);
}

static const char *const kind_names[] = {
#define XF__AUDIT_KIND_NAME(name, text) text,
    XF_AUDIT_KINDS(XF__AUDIT_KIND_NAME)
#undef XF__AUDIT_KIND_NAME
};

bool xf_audit_kind_valid(const char *kind) {
  if (!kind) return false;
  for (size_t i = 0; i < sizeof(kind_names) / sizeof(kind_names[0]); i++)
    if (strcmp(kind, kind_names[i]) == 0) return true;
  return false;
}

/* ---- the digest ----------------------------------------------------------------
 * docs/audit.md gives this encoding byte by byte; changing it is a new domain
 * tag, never an edit of this one. */

#define AUDIT_DOMAIN "xfed-audit-v1"

typedef struct text_span {
  const void *p;
  size_t n;
} text_span;

static void put_u64(xf_digest_ctx *ctx, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (56 - 8 * i));
  xf_digest_update(ctx, b, sizeof(b));
}

/* fields: actor, kind, subject, detail. */
static void row_digest(uint64_t seq, double at, const text_span fields[4], const xf_digest *prev,
                       xf_digest *out) {
  xf_digest_ctx ctx;
  uint64_t at_bits;
  memcpy(&at_bits, &at, sizeof(at_bits));
  xf_digest_init(&ctx);
  xf_digest_update(&ctx, AUDIT_DOMAIN, sizeof(AUDIT_DOMAIN)); /* with its NUL */
  put_u64(&ctx, seq);
  put_u64(&ctx, at_bits);
  for (int i = 0; i < 4; i++) {
    put_u64(&ctx, (uint64_t)fields[i].n);
    if (fields[i].n) xf_digest_update(&ctx, fields[i].p, fields[i].n);
  }
  xf_digest_update(&ctx, prev->bytes, sizeof(prev->bytes));
  xf_digest_final(&ctx, out);
}

xf_err xf_audit_row_digest(const xf_audit_row *row, xf_digest *out) {
  xf_digest prev;
  XF_GUARD(xf_digest_parse(row->prev, &prev));
  const char *s[4] = {row->actor, row->kind, row->subject, row->detail};
  text_span f[4];
  for (int i = 0; i < 4; i++) f[i] = (text_span){s[i] ? s[i] : "", s[i] ? strlen(s[i]) : 0};
  row_digest(row->seq, row->at, f, &prev, out);
  return XF_OK;
}

static bool digest_equal(const xf_digest *a, const xf_digest *b) {
  return memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* ---- appending ------------------------------------------------------------------ */

static xf_err bad_arg(xf_errctx *err, const char *field, const char *fmt, ...) XF_PRINTF(3, 4);
static xf_err bad_arg(xf_errctx *err, const char *field, const char *fmt, ...) {
  va_list ap;
  xf_errctx_clear(err);
  xf_errctx_field(err, "%s", field);
  va_start(ap, fmt);
  xf_err rc = xf_vfail(err, XF_EINVAL, fmt, ap);
  va_end(ap);
  return rc;
}

/* True when s is valid UTF-8 (jansson's check, which export depends on). */
static bool utf8_valid(const char *s) {
  json_t *j = json_string(s);
  json_decref(j);
  return j != NULL;
}

static xf_err check_text(const char *field, const char *s, xf_errctx *err) {
  if (!s || !*s) return bad_arg(err, field, "the audit row's %s must not be empty", field);
  if (!utf8_valid(s)) return bad_arg(err, field, "the audit row's %s is not UTF-8 text", field);
  return XF_OK;
}

/* The compact, key-sorted form of detail_json; the caller frees it with free()
 * (jansson's allocator). */
static xf_err canonical_detail(const char *detail_json, char **out, xf_errctx *err) {
  json_error_t je;
  *out = NULL;
  if (!detail_json) return bad_arg(err, "detail", "the audit row's detail is missing");
  json_t *v = json_loads(detail_json, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
  if (!v) {
    xf_errctx_clear(err);
    xf_errctx_field(err, "detail");
    return xf_fail(err, XF_EINVAL, "the audit row's detail is not valid JSON: %s (line %d, column %d)",
                   je.text, je.line, je.column);
  }
  *out = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
  json_decref(v);
  if (!*out) return xf_fail(err, XF_ENOMEM, "cannot encode the audit row's detail");
  return XF_OK;
}

/* The last row's seq and digest, zero for an empty trail. XF_EINTEGRITY when
 * the stored digest is not a digest (the trail was tampered with). */
static xf_err read_head(xf_db *db, uint64_t *seq, xf_digest *digest, char hex[XF_DIGEST_HEX],
                        xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  *seq = 0;
  memset(digest, 0, sizeof(*digest));
  XF_GUARD(xf_db_prepare(db, "SELECT seq, digest FROM audit ORDER BY seq DESC LIMIT 1", &st, err));
  xf_err rc = XF_OK;
  int s = sqlite3_step(st);
  if (s == SQLITE_ROW) {
    sqlite3_int64 last = sqlite3_column_int64(st, 0);
    const char *text = (const char *)sqlite3_column_text(st, 1);
    if (last < 1 || !text || xf_digest_parse(text, digest) != XF_OK) {
      xf_errctx_clear(err);
      xf_errctx_file(err, xf_db_path(db));
      xf_errctx_field(err, "audit row %lld", (long long)last);
      rc = xf_fail(err, XF_EINTEGRITY,
                   "the last audit row is malformed; 'xfed audit verify' shows what happened");
    } else
      *seq = (uint64_t)last;
  } else if (s != SQLITE_DONE)
    rc = xf_db_fail(db, err, "reading the last audit row");
  sqlite3_finalize(st);
  if (rc == XF_OK && hex) xf_digest_hex(digest, hex);
  return rc;
}

xf_err xf_audit_append(xf_db *db, double at, const char *actor, const char *kind,
                       const char *subject, const char *detail_json, uint64_t *seq_out,
                       xf_errctx *err) {
  if (!isfinite(at)) return bad_arg(err, "at", "the audit row's time is not a finite number");
  /* SQLite may store an integral REAL as an integer, which reads back as +0.0
   * for -0.0: hash what will be read back. */
  if (at == 0) at = 0;
  XF_GUARD(check_text("actor", actor, err));
  XF_GUARD(check_text("kind", kind, err));
  if (!xf_audit_kind_valid(kind))
    return bad_arg(err, "kind",
                   "'%.64s' is not an audit kind: use decision, crossing, policy_change, "
                   "refused_connection, refused_task, job or refused_report",
                   kind ? kind : "");
  XF_GUARD(check_text("subject", subject, err));
  XF_GUARD(xf_crypto_init());

  char *detail = NULL;
  sqlite3_stmt *st = NULL;
  bool in_tx = false;
  xf_err rc = canonical_detail(detail_json, &detail, err);
  if (rc != XF_OK) goto out;
  if ((rc = xf_db_begin(db, err)) != XF_OK) goto out;
  in_tx = true;

  uint64_t last;
  xf_digest prev, digest;
  char prev_hex[XF_DIGEST_HEX], digest_hex[XF_DIGEST_HEX];
  if ((rc = read_head(db, &last, &prev, prev_hex, err)) != XF_OK) goto out;
  if (last >= (uint64_t)INT64_MAX) {
    rc = xf_fail(err, XF_ERANGE, "the audit trail is full");
    goto out;
  }
  const text_span f[4] = {{actor, strlen(actor)},
                          {kind, strlen(kind)},
                          {subject, strlen(subject)},
                          {detail, strlen(detail)}};
  row_digest(last + 1, at, f, &prev, &digest);
  xf_digest_hex(&digest, digest_hex);

  rc = xf_db_prepare(db,
                     "INSERT INTO audit (seq, at, actor, kind, subject, detail, prev, digest) "
                     "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     &st, err);
  if (rc != XF_OK) goto out;
  const char *text[6] = {actor, kind, subject, detail, prev_hex, digest_hex};
  int bound = sqlite3_bind_int64(st, 1, (sqlite3_int64)(last + 1));
  if (bound == SQLITE_OK) bound = sqlite3_bind_double(st, 2, at);
  for (int i = 0; i < 6 && bound == SQLITE_OK; i++)
    bound = sqlite3_bind_text(st, 3 + i, text[i], -1, SQLITE_STATIC);
  if (bound != SQLITE_OK || sqlite3_step(st) != SQLITE_DONE) {
    rc = xf_db_fail(db, err, "appending to the audit trail");
    goto out;
  }
  sqlite3_finalize(st);
  st = NULL;
  if ((rc = xf_db_commit(db, err)) != XF_OK) goto out;
  in_tx = false;
  if (seq_out) *seq_out = last + 1;

out:
  sqlite3_finalize(st);
  if (in_tx) xf_db_rollback(db);
  free(detail);
  return rc;
}

xf_err xf_audit_head(xf_db *db, xf_audit_anchor *out, xf_errctx *err) {
  xf_digest d;
  memset(out, 0, sizeof(*out));
  return read_head(db, &out->seq, &d, out->digest, err);
}

/* ---- verifying ------------------------------------------------------------------ */

#define ROW_COLUMNS "seq, at, actor, kind, subject, detail, prev, digest"

static void verdict_set(xf_audit_verdict *v, xf_audit_fault fault, uint64_t seq,
                        const char *fmt, ...) XF_PRINTF(4, 5);
static void verdict_set(xf_audit_verdict *v, xf_audit_fault fault, uint64_t seq,
                        const char *fmt, ...) {
  va_list ap;
  v->fault = fault;
  v->seq = seq;
  va_start(ap, fmt);
  vsnprintf(v->what, sizeof(v->what), fmt, ap);
  va_end(ap);
}

/* Checks one row against the walk so far; sets the verdict when it is bad.
 * expected: the previous row's digest (zero before row 1); before: the digest
 * of the row before that (have_before false until two rows were read). */
static void check_row(sqlite3_stmt *st, uint64_t last, const xf_digest *expected,
                      const xf_digest *before, bool have_before, const xf_audit_anchor *anchor,
                      xf_digest *stored, xf_audit_verdict *v) {
  sqlite3_int64 raw = sqlite3_column_int64(st, 0);
  if (raw <= (sqlite3_int64)last) { /* only below 1: seq is unique and ordered */
    verdict_set(v, XF_AUDIT_INSERTED, 0,
                "a row with seq %lld was inserted: the trail numbers its rows from 1", (long long)raw);
    return;
  }
  uint64_t seq = (uint64_t)raw;
  if (seq > last + 1) {
    if (seq == last + 2)
      verdict_set(v, XF_AUDIT_DELETED, last + 1, "row %" PRIu64 " was deleted: row %" PRIu64
                  " follows row %" PRIu64, last + 1, seq, last);
    else
      verdict_set(v, XF_AUDIT_DELETED, last + 1, "rows %" PRIu64 " to %" PRIu64
                  " were deleted: row %" PRIu64 " follows row %" PRIu64, last + 1, seq - 1, seq, last);
    return;
  }

  const char *digest_text = (const char *)sqlite3_column_text(st, 7);
  if (!digest_text || xf_digest_parse(digest_text, stored) != XF_OK) {
    verdict_set(v, XF_AUDIT_EDITED, seq, "row %" PRIu64 " was edited: its digest is not 64 hex digits",
                seq);
    return;
  }
  xf_digest prev;
  const char *prev_text = (const char *)sqlite3_column_text(st, 6);
  if (!prev_text || xf_digest_parse(prev_text, &prev) != XF_OK) {
    verdict_set(v, XF_AUDIT_EDITED, seq, "row %" PRIu64 " was edited: its prev is not 64 hex digits",
                seq);
    return;
  }
  double at = sqlite3_column_double(st, 1);
  text_span f[4];
  for (int i = 0; i < 4; i++) {
    const void *p = sqlite3_column_blob(st, 2 + i);
    f[i] = (text_span){p ? p : "", p ? (size_t)sqlite3_column_bytes(st, 2 + i) : 0};
  }

  xf_digest computed;
  row_digest(seq, at, f, &prev, &computed);
  if (!digest_equal(&computed, stored)) {
    /* A row whose digest fits its contents under a neighbouring seq was
     * renumbered: rows after an insertion move up, after a deletion down. */
    row_digest(seq - 1, at, f, &prev, &computed);
    if (seq > 1 && digest_equal(&computed, stored)) {
      verdict_set(v, XF_AUDIT_INSERTED, seq - 1,
                  "row %" PRIu64 " was inserted: the row now numbered %" PRIu64
                  " is the original row %" PRIu64 ", renumbered",
                  seq - 1, seq, seq - 1);
      return;
    }
    row_digest(seq + 1, at, f, &prev, &computed);
    if (digest_equal(&computed, stored)) {
      verdict_set(v, XF_AUDIT_DELETED, seq,
                  "row %" PRIu64 " was deleted: the row now numbered %" PRIu64
                  " is the original row %" PRIu64 ", renumbered",
                  seq, seq, seq + 1);
      return;
    }
    verdict_set(v, XF_AUDIT_EDITED, seq,
                "row %" PRIu64 " was edited: its contents do not match its digest", seq);
    return;
  }
  if (!digest_equal(&prev, expected)) {
    if (seq == 1)
      verdict_set(v, XF_AUDIT_INSERTED, 1,
                  "row 1 was inserted: its digest is valid but it does not start from the zero "
                  "digest");
    else if (have_before && digest_equal(&prev, before))
      verdict_set(v, XF_AUDIT_INSERTED, seq - 1,
                  "row %" PRIu64 " was inserted: row %" PRIu64 " links to row %" PRIu64
                  ", not to it",
                  seq - 1, seq, seq - 2);
    else
      verdict_set(v, XF_AUDIT_INSERTED, seq,
                  "row %" PRIu64 " was inserted (or row %" PRIu64
                  " replaced): its digest is valid but it does not link to row %" PRIu64,
                  seq, seq - 1, seq - 1);
    return;
  }
  if (anchor && seq == anchor->seq) {
    xf_digest a;
    if (xf_digest_parse(anchor->digest, &a) != XF_OK || !digest_equal(&a, stored))
      verdict_set(v, XF_AUDIT_EDITED, seq,
                  "row %" PRIu64 " does not carry the anchored digest: the trail was rewritten "
                  "up to this row",
                  seq);
  }
}

xf_err xf_audit_verify_anchored(xf_db *db, const xf_audit_anchor *anchor, xf_audit_verdict *out,
                                xf_errctx *err) {
  memset(out, 0, sizeof(*out));
  xf_digest zero = {{0}};
  xf_digest_hex(&zero, out->head.digest);
  if (anchor) {
    xf_digest a;
    if (xf_digest_parse(anchor->digest, &a) != XF_OK)
      return bad_arg(err, "anchor", "the anchor's digest '%.80s' is not 64 hex digits",
                     anchor->digest);
  }
  XF_GUARD(xf_crypto_init());

  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db, "SELECT " ROW_COLUMNS " FROM audit ORDER BY seq", &st, err));
  xf_err rc = XF_OK;
  xf_digest expected = zero, before = zero, stored;
  bool have_before = false;
  uint64_t last = 0;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    check_row(st, last, &expected, &before, have_before, anchor, &stored, out);
    if (out->fault != XF_AUDIT_INTACT) break;
    before = expected;
    expected = stored;
    have_before = last > 0;
    last = (uint64_t)sqlite3_column_int64(st, 0);
    out->rows++;
    out->head.seq = last;
    xf_digest_hex(&stored, out->head.digest);
  }
  if (s != SQLITE_ROW && s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the audit trail");
  sqlite3_finalize(st);
  if (rc != XF_OK || out->fault != XF_AUDIT_INTACT) return rc;

  if (anchor && last < anchor->seq)
    verdict_set(out, XF_AUDIT_TRUNCATED, last + 1,
                "the trail ends at row %" PRIu64 " but was anchored at row %" PRIu64
                ": rows %" PRIu64 " to %" PRIu64 " were cut off its end",
                last, anchor->seq, last + 1, anchor->seq);
  else
    snprintf(out->what, sizeof(out->what), "%" PRIu64 " rows, chain intact%s", out->rows,
             anchor ? " up to and beyond the anchor" : " (its end is unanchored)");
  return XF_OK;
}

xf_err xf_audit_verify(xf_db *db, xf_audit_verdict *out, xf_errctx *err) {
  return xf_audit_verify_anchored(db, NULL, out, err);
}

/* ---- reading -------------------------------------------------------------------- */

static xf_err prepare_since(xf_db *db, double since, sqlite3_int64 limit, sqlite3_stmt **st,
                            xf_errctx *err) {
  XF_GUARD(xf_db_prepare(db, "SELECT " ROW_COLUMNS " FROM audit WHERE at >= ? ORDER BY seq LIMIT ?",
                         st, err));
  if (sqlite3_bind_double(*st, 1, since) != SQLITE_OK ||
      sqlite3_bind_int64(*st, 2, limit) != SQLITE_OK) {
    sqlite3_finalize(*st);
    *st = NULL;
    return xf_db_fail(db, err, "reading the audit trail");
  }
  return XF_OK;
}

static char *column_dup(sqlite3_stmt *st, int col) {
  const char *s = (const char *)sqlite3_column_text(st, col);
  return xf_strdup(s ? s : "");
}

static void column_hex(sqlite3_stmt *st, int col, char hex[XF_DIGEST_HEX]) {
  const char *s = (const char *)sqlite3_column_text(st, col);
  snprintf(hex, XF_DIGEST_HEX, "%s", s ? s : "");
}

static void row_free(xf_audit_row *r) {
  xf_free(r->actor);
  xf_free(r->kind);
  xf_free(r->subject);
  xf_free(r->detail);
}

void xf_audit_rows_free(xf_audit_row *rows, size_t n) {
  if (!rows) return;
  for (size_t i = 0; i < n; i++) row_free(&rows[i]);
  xf_free(rows);
}

xf_err xf_audit_list(xf_db *db, double since, size_t limit, xf_audit_row **rows, size_t *n,
                     xf_errctx *err) {
  *rows = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  sqlite3_int64 max = (limit == 0 || limit > (size_t)INT64_MAX) ? -1 : (sqlite3_int64)limit;
  XF_GUARD(prepare_since(db, since, max, &st, err));

  xf_err rc = XF_OK;
  xf_audit_row *list = NULL;
  size_t count = 0, cap = 0;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if (count == cap) {
      size_t grown = cap ? 2 * cap : 16;
      xf_audit_row *bigger = xf_realloc(list, grown * sizeof(*list));
      if (!bigger) {
        rc = xf_fail(err, XF_ENOMEM, "cannot allocate the audit rows");
        goto out;
      }
      list = bigger;
      cap = grown;
    }
    xf_audit_row *r = &list[count];
    memset(r, 0, sizeof(*r));
    r->seq = (uint64_t)sqlite3_column_int64(st, 0);
    r->at = sqlite3_column_double(st, 1);
    r->actor = column_dup(st, 2);
    r->kind = column_dup(st, 3);
    r->subject = column_dup(st, 4);
    r->detail = column_dup(st, 5);
    column_hex(st, 6, r->prev);
    column_hex(st, 7, r->digest);
    count++;
    if (!r->actor || !r->kind || !r->subject || !r->detail) {
      rc = xf_fail(err, XF_ENOMEM, "cannot allocate the audit rows");
      goto out;
    }
  }
  if (s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the audit trail");

out:
  sqlite3_finalize(st);
  if (rc != XF_OK) {
    xf_audit_rows_free(list, count);
    return rc;
  }
  *rows = list;
  *n = count;
  return XF_OK;
}

xf_err xf_audit_about(xf_db *db, const char *kind, const char *subject, uint64_t *count,
                      char **last_detail, xf_errctx *err) {
  *count = 0;
  *last_detail = NULL;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                         "SELECT count(*), (SELECT detail FROM audit WHERE kind = ?1 AND"
                         " subject = ?2 ORDER BY seq DESC LIMIT 1) FROM audit"
                         " WHERE kind = ?1 AND subject = ?2",
                         &st, err));
  xf_err rc = XF_OK;
  if (sqlite3_bind_text(st, 1, kind, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
      sqlite3_bind_text(st, 2, subject, -1, SQLITE_TRANSIENT) != SQLITE_OK ||
      sqlite3_step(st) != SQLITE_ROW) {
    rc = xf_db_fail(db, err, "reading the audit trail");
  } else {
    *count = (uint64_t)sqlite3_column_int64(st, 0);
    if (*count && !(*last_detail = column_dup(st, 1)))
      rc = xf_fail(err, XF_ENOMEM, "cannot allocate an audit row");
  }
  sqlite3_finalize(st);
  return rc;
}

/* A JSON string for a text column; a tampered row's bytes that are not UTF-8
 * become '?' so that the line stays JSON. NULL only when out of memory. */
static json_t *text_json(sqlite3_stmt *st, int col) {
  const char *p = (const char *)sqlite3_column_text(st, col);
  size_t n = p ? (size_t)sqlite3_column_bytes(st, col) : 0;
  json_t *j = json_stringn(p ? p : "", n);
  if (j || n == 0) return j;
  char *copy = xf_malloc(n);
  if (!copy) return NULL;
  for (size_t i = 0; i < n; i++) copy[i] = ((unsigned char)p[i] < 0x80) ? p[i] : '?';
  j = json_stringn(copy, n);
  xf_free(copy);
  return j;
}

/* The JSON object for the current row; NULL when out of memory. */
static json_t *row_json(sqlite3_stmt *st) {
  json_t *o = json_object();
  if (!o) return NULL;
  const char *detail = (const char *)sqlite3_column_text(st, 5);
  json_t *d = detail ? json_loads(detail, JSON_DECODE_ANY, NULL) : NULL;
  if (!d) d = text_json(st, 5);
  static const char *const names[] = {"actor", "kind", "subject"};
  int bad = json_object_set_new(o, "seq", json_integer(sqlite3_column_int64(st, 0)));
  bad |= json_object_set_new(o, "at", json_real(sqlite3_column_double(st, 1)));
  for (int i = 0; i < 3; i++) bad |= json_object_set_new(o, names[i], text_json(st, 2 + i));
  bad |= json_object_set_new(o, "detail", d);
  bad |= json_object_set_new(o, "prev", text_json(st, 6));
  bad |= json_object_set_new(o, "digest", text_json(st, 7));
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

xf_err xf_audit_export(xf_db *db, double since, FILE *out, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare_since(db, since, -1, &st, err));
  xf_err rc = XF_OK;
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    json_t *o = row_json(st);
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (!line) {
      rc = xf_fail(err, XF_ENOMEM, "cannot encode audit row %lld",
                   (long long)sqlite3_column_int64(st, 0));
      goto out;
    }
    int w = fputs(line, out);
    free(line);
    if (w < 0 || fputc('\n', out) == EOF) {
      rc = xf_fail(err, XF_EIO, "cannot write the audit export");
      goto out;
    }
  }
  if (s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the audit trail");

out:
  sqlite3_finalize(st);
  return rc;
}

xf_err xf_audit_export_page(xf_db *db, double since, uint64_t after_seq, size_t limit,
                            size_t max_bytes, char **text, size_t *n, uint64_t *last_seq,
                            bool *more, xf_errctx *err) {
  *text = NULL;
  *n = 0;
  *last_seq = after_seq;
  *more = false;
  if (limit == 0 || limit >= (size_t)INT64_MAX || after_seq > (uint64_t)INT64_MAX)
    return xf_fail(err, XF_EINVAL, "a page holds 1 or more rows after a valid seq");
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf_db_prepare(db,
                         "SELECT " ROW_COLUMNS " FROM audit WHERE at >= ? AND seq > ? "
                         "ORDER BY seq LIMIT ?",
                         &st, err));
  /* One row beyond the page says whether more remain. */
  if (sqlite3_bind_double(st, 1, since) != SQLITE_OK ||
      sqlite3_bind_int64(st, 2, (sqlite3_int64)after_seq) != SQLITE_OK ||
      sqlite3_bind_int64(st, 3, (sqlite3_int64)limit + 1) != SQLITE_OK) {
    sqlite3_finalize(st);
    return xf_db_fail(db, err, "reading the audit trail");
  }
  xf_err rc = XF_OK;
  size_t len = 0, cap = 4096;
  char *buf = xf_malloc(cap);
  if (!buf) {
    sqlite3_finalize(st);
    return xf_fail(err, XF_ENOMEM, "cannot hold the audit rows");
  }
  buf[0] = '\0';
  int s;
  while ((s = sqlite3_step(st)) == SQLITE_ROW) {
    if (*n == limit) {
      *more = true;
      break;
    }
    json_t *o = row_json(st);
    char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (!line) {
      rc = xf_fail(err, XF_ENOMEM, "cannot encode audit row %lld",
                   (long long)sqlite3_column_int64(st, 0));
      goto out;
    }
    size_t l = strlen(line);
    if (*n > 0 && len + l + 1 > max_bytes) {
      free(line);
      *more = true;
      break;
    }
    if (len + l + 2 > cap) {
      size_t grown = cap;
      while (len + l + 2 > grown) grown *= 2;
      char *bigger = xf_realloc(buf, grown);
      if (!bigger) {
        free(line);
        rc = xf_fail(err, XF_ENOMEM, "cannot hold the audit rows");
        goto out;
      }
      buf = bigger;
      cap = grown;
    }
    memcpy(buf + len, line, l);
    len += l;
    buf[len++] = '\n';
    buf[len] = '\0';
    free(line);
    *last_seq = (uint64_t)sqlite3_column_int64(st, 0);
    (*n)++;
  }
  if (s != SQLITE_ROW && s != SQLITE_DONE) rc = xf_db_fail(db, err, "reading the audit trail");

out:
  sqlite3_finalize(st);
  if (rc != XF_OK) {
    xf_free(buf);
    *n = 0;
    *last_seq = after_seq;
    *more = false;
    return rc;
  }
  *text = buf;
  return XF_OK;
}

const char *xf_audit_fault_name(xf_audit_fault f) {
  switch (f) {
  case XF_AUDIT_INTACT: return "intact";
  case XF_AUDIT_EDITED: return "edited";
  case XF_AUDIT_INSERTED: return "inserted";
  case XF_AUDIT_DELETED: return "deleted";
  case XF_AUDIT_TRUNCATED: return "truncated";
  }
  return "?";
}
