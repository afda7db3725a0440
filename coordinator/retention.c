/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint retention over the journal (coordinator/journal.c's schema,
 * migration 9) and the blob store: which rounds let go of their
 * checkpoints, and the crash-safe removal of the blobs nobody names. */
#include "coordinator/retention.h"

#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "base/alloc.h"
#include "crypto/digest.h"

xf_err xf_retention_parse(double value, uint32_t *keep, xf_errctx *err) {
  XF_ENSURE(value >= 0 && value <= XF_RETENTION_MAX && floor(value) == value, err, XF_ERANGE,
            "must be a whole number of rounds from 1 to %u, or 0 to keep every checkpoint",
            XF_RETENTION_MAX);
  *keep = (uint32_t)value;
  return XF_OK;
}

/* A blob is referenced while a job names it (current model and optimizer
 * state, initial model) or a committed round that kept its checkpoint
 * does. ?1 is the blob's hex digest. */
#define XF__REFERENCED                                                                       \
  "SELECT EXISTS (SELECT 1 FROM jobs WHERE model_digest = ?1 OR opt_state_digest = ?1"      \
  "   OR initial_model_digest = ?1)"                                                         \
  " OR EXISTS (SELECT 1 FROM rounds WHERE pruned IS NULL AND outcome = 'committed'"          \
  "   AND model_digest = ?1)"                                                                \
  " OR EXISTS (SELECT 1 FROM rounds WHERE pruned IS NULL AND outcome = 'committed'"          \
  "   AND opt_state_digest = ?1)"

/* The rounds of job ?1 that let go of their checkpoint when the job's last
 * committed round is ?2 and ?3 are kept: committed, still kept, older than
 * the last ?3, and not the round before some site's first counted update.
 * A site's update counted in a round when it reported in the attempt that
 * committed. */
#define XF__PRUNABLE                                                                         \
  " FROM rounds r WHERE r.job = ?1 AND r.outcome = 'committed' AND r.pruned IS NULL"        \
  " AND r.round <= ?2 - ?3"                                                                  \
  " AND NOT EXISTS (SELECT 1 FROM participants p JOIN rounds c ON c.job = p.job"            \
  "   AND c.round = p.round AND c.attempt = p.attempt AND c.outcome = 'committed'"          \
  "   WHERE p.job = ?1 AND p.round = r.round + 1 AND p.state = 'reported'"                  \
  "   AND NOT EXISTS (SELECT 1 FROM participants q JOIN rounds e ON e.job = q.job"          \
  "     AND e.round = q.round AND e.attempt = q.attempt AND e.outcome = 'committed'"        \
  "     WHERE q.job = ?1 AND q.site = p.site AND q.round <= r.round"                        \
  "     AND q.state = 'reported'))"

/* The digests a query's rows name in column 0 and, where present, 1 (text,
 * NULL skipped), appended to *v. Finalizes st. */
static xf_err collect_digests(xf_db *db, sqlite3_stmt *st, int cols, char (**v)[XF_DIGEST_HEX],
                              size_t *n, uint32_t *rows, xf_errctx *err) {
  xf_err e = XF_OK;
  int rc;
  while (e == XF_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (rows) (*rows)++;
    for (int c = 0; c < cols && e == XF_OK; c++) {
      const unsigned char *t = sqlite3_column_text(st, c);
      if (!t) continue;
      char(*grown)[XF_DIGEST_HEX] = xf_realloc(*v, (*n + 1) * sizeof(**v));
      if (!grown) {
        e = xf_fail(err, XF_ENOMEM, "out of memory listing checkpoints");
        break;
      }
      *v = grown;
      snprintf((*v)[(*n)++], XF_DIGEST_HEX, "%s", (const char *)t);
    }
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "listing checkpoints");
  sqlite3_finalize(st);
  return e;
}

static xf_err prepare(xf_db *db, const char *sql, sqlite3_stmt **st, xf_errctx *err) {
  return xf_db_prepare(db, sql, st, err);
}

/* Steps a statement that returns no rows (bound by the caller) and
 * finalizes it. */
static xf_err step_done(xf_db *db, sqlite3_stmt *st, const char *doing, xf_errctx *err) {
  int rc = sqlite3_step(st);
  xf_err e = rc == SQLITE_DONE ? XF_OK : xf_db_fail(db, err, doing);
  sqlite3_finalize(st);
  return e;
}

static xf_err referenced(xf_db *db, const char *hex, bool *out, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(db, XF__REFERENCED, &st, err));
  sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW)
    *out = sqlite3_column_int(st, 0) != 0;
  else
    e = xf_db_fail(db, err, "checking what refers to a checkpoint");
  sqlite3_finalize(st);
  return e;
}

/* Runs sql with ?1 bound to hex. */
static xf_err run_hex(xf_db *db, const char *sql, const char *hex, double now, const char *doing,
                      xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(db, sql, &st, err));
  sqlite3_bind_text(st, 1, hex, -1, SQLITE_TRANSIENT);
  if (sqlite3_bind_parameter_count(st) >= 2) sqlite3_bind_double(st, 2, now);
  return step_done(db, st, doing, err);
}

/* The journal's half of a prune, inside the caller's transaction. */
static xf_err prune_tx(xf_db *db, int64_t job, uint32_t keep, double now, uint32_t *rounds,
                       xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(db,
                   "SELECT max(round) FROM rounds WHERE job = ? AND outcome = 'committed'", &st,
                   err));
  sqlite3_bind_int64(st, 1, job);
  int rc = sqlite3_step(st);
  if (rc != SQLITE_ROW) {
    xf_err e = xf_db_fail(db, err, "reading the job's last committed round");
    sqlite3_finalize(st);
    return e;
  }
  int64_t last = sqlite3_column_int64(st, 0); /* 0 (NULL) before any commit */
  sqlite3_finalize(st);
  if (last <= (int64_t)keep) return XF_OK;

  char(*digests)[XF_DIGEST_HEX] = NULL;
  size_t n = 0;
  xf_err e = prepare(db, "SELECT r.model_digest, r.opt_state_digest" XF__PRUNABLE, &st, err);
  if (e == XF_OK) {
    sqlite3_bind_int64(st, 1, job);
    sqlite3_bind_int64(st, 2, last);
    sqlite3_bind_int64(st, 3, keep);
    e = collect_digests(db, st, 2, &digests, &n, rounds, err);
  }
  if (e == XF_OK && *rounds > 0) {
    e = prepare(db, "UPDATE rounds SET pruned = ?4 WHERE rowid IN (SELECT r.rowid" XF__PRUNABLE
                    ")", &st, err);
    if (e == XF_OK) {
      sqlite3_bind_int64(st, 1, job);
      sqlite3_bind_int64(st, 2, last);
      sqlite3_bind_int64(st, 3, keep);
      sqlite3_bind_double(st, 4, now);
      e = step_done(db, st, "marking pruned checkpoints", err);
    }
  }
  for (size_t i = 0; e == XF_OK && i < n; i++) {
    bool ref = true;
    e = referenced(db, digests[i], &ref, err);
    if (e != XF_OK || ref) continue;
    e = run_hex(db, "INSERT OR IGNORE INTO blob_garbage (blob, queued) VALUES (?1, ?2)",
                digests[i], now, "queueing a checkpoint's removal", err);
    if (e == XF_OK)
      e = run_hex(db, "DELETE FROM model_digests WHERE blob = ?1", digests[i], now,
                  "forgetting a pruned checkpoint's digest", err);
  }
  xf_free(digests);
  return e;
}

xf_err xf_retention_prune(xf_db *db, xf_blob_store *blobs, int64_t job, uint32_t keep,
                          double now, xf_retention_result *out, xf_errctx *err) {
  xf_retention_result mine = {0};
  if (!out) out = &mine;
  if (keep == 0) return XF_OK;
  uint32_t rounds = 0;
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = prune_tx(db, job, keep, now, &rounds, err);
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) {
    xf_db_rollback(db);
    return e;
  }
  out->rounds += rounds;
  return xf_retention_collect(db, blobs, out, err);
}

xf_err xf_retention_prune_all(xf_db *db, xf_blob_store *blobs, uint32_t keep, double now,
                              xf_retention_result *out, xf_errctx *err) {
  xf_retention_result mine = {0};
  if (!out) out = &mine;
  XF_GUARD(xf_retention_collect(db, blobs, out, err));
  if (keep == 0) return XF_OK;
  sqlite3_stmt *st = NULL;
  XF_GUARD(prepare(db, "SELECT id FROM jobs ORDER BY id", &st, err));
  int64_t *ids = NULL;
  size_t n = 0;
  xf_err e = XF_OK;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t *grown = xf_realloc(ids, (n + 1) * sizeof(*ids));
    if (!grown) {
      e = xf_fail(err, XF_ENOMEM, "out of memory listing jobs");
      break;
    }
    ids = grown;
    ids[n++] = sqlite3_column_int64(st, 0);
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "listing jobs");
  sqlite3_finalize(st);
  for (size_t i = 0; e == XF_OK && i < n; i++)
    e = xf_retention_prune(db, blobs, ids[i], keep, now, out, err);
  xf_free(ids);
  return e;
}

/* The queue's rows that nothing refers to, after dropping (in one
 * transaction) those referenced again. */
static xf_err queue_unreferenced(xf_db *db, char (**v)[XF_DIGEST_HEX], size_t *n,
                                 xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  char(*queued)[XF_DIGEST_HEX] = NULL;
  size_t nq = 0;
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = prepare(db, "SELECT blob FROM blob_garbage ORDER BY blob", &st, err);
  if (e == XF_OK) e = collect_digests(db, st, 1, &queued, &nq, NULL, err);
  for (size_t i = 0; e == XF_OK && i < nq; i++) {
    bool ref = true;
    e = referenced(db, queued[i], &ref, err);
    if (e == XF_OK && ref)
      e = run_hex(db, "DELETE FROM blob_garbage WHERE blob = ?1", queued[i], 0,
                  "keeping a checkpoint referenced again", err);
    else if (e == XF_OK)
      memmove(queued[(*n)++], queued[i], XF_DIGEST_HEX);
  }
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) {
    xf_db_rollback(db);
    xf_free(queued);
    *n = 0;
    return e;
  }
  *v = queued;
  return XF_OK;
}

xf_err xf_retention_collect(xf_db *db, xf_blob_store *blobs, xf_retention_result *out,
                            xf_errctx *err) {
  xf_retention_result mine = {0};
  if (!out) out = &mine;
  char(*gone)[XF_DIGEST_HEX] = NULL;
  size_t n = 0;
  XF_GUARD(queue_unreferenced(db, &gone, &n, err));
  size_t removed = 0;
  xf_err e = XF_OK;
  for (; e == XF_OK && removed < n; removed++) {
    xf_digest d;
    if (xf_digest_parse(gone[removed], &d) != XF_OK) {
      e = xf_fail(err, XF_EFORMAT, "the journal's removal queue holds a damaged digest \"%s\"",
                  gone[removed]);
      break;
    }
    char path[4096];
    struct stat sb;
    bool had = xf_blob_path(blobs, &d, path, sizeof(path)) == XF_OK && lstat(path, &sb) == 0;
    e = xf_blob_remove(blobs, &d, err);
    if (e == XF_OK && had) {
      out->blobs++;
      out->bytes += (uint64_t)sb.st_size;
    }
    if (e != XF_OK) break;
  }
  /* Rows whose file is gone leave the queue; the rest wait for the next
   * call. */
  if (removed > 0) {
    xf_errctx ignore = {0};
    xf_errctx *rerr = e == XF_OK ? err : &ignore;
    xf_err e2 = xf_db_begin(db, rerr);
    if (e2 == XF_OK) {
      for (size_t i = 0; e2 == XF_OK && i < removed; i++)
        e2 = run_hex(db, "DELETE FROM blob_garbage WHERE blob = ?1", gone[i], 0,
                     "clearing the removal queue", rerr);
      if (e2 == XF_OK) e2 = xf_db_commit(db, rerr);
      if (e2 != XF_OK) xf_db_rollback(db);
    }
    if (e == XF_OK) e = e2;
  }
  xf_free(gone);
  return e;
}
