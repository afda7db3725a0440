/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's journal on SQLite: schema migrations and the prepared,
 * transactional writes and reads behind coordinator/journal.h. */
#include "coordinator/journal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/alloc.h"
#include "policy/audit.h"
#include "policy/policy.h"

/* ---- schema ------------------------------------------------------------------
 * The one migration list of the coordinator database, append only: a
 * released entry is never edited, a change is a new entry. The policy and
 * audit tables append their migrations here, after these. Times are REAL
 * Unix seconds; digests are 64 lowercase hex digits; REAL metrics that were
 * NaN read back as NULL (SQLite stores no NaN). */
static const xf_migration xf__migrations[] = {
    {1,
     "CREATE TABLE jobs ("
     "  id INTEGER PRIMARY KEY,"
     "  name TEXT NOT NULL,"
     "  spec TEXT NOT NULL," /* canonical JSON, xf_jobspec_to_json */
     "  rounds INTEGER NOT NULL CHECK (rounds >= 1),"
     "  state TEXT NOT NULL CHECK (state IN"
     "    ('queued','running','paused','done','failed','cancelled')),"
     "  created REAL NOT NULL,"
     "  updated REAL NOT NULL,"
     "  current_round INTEGER NOT NULL CHECK (current_round BETWEEN 1 AND rounds + 1),"
     "  model_digest TEXT NOT NULL CHECK (length(model_digest) = 64),"
     "  opt_state_digest TEXT CHECK (opt_state_digest IS NULL OR length(opt_state_digest) = 64),"
     "  message TEXT"
     ");"
     "CREATE TABLE rounds ("
     "  job INTEGER NOT NULL REFERENCES jobs(id),"
     "  round INTEGER NOT NULL CHECK (round >= 1),"
     "  attempt INTEGER NOT NULL CHECK (attempt >= 1),"
     "  state TEXT NOT NULL CHECK (state IN ('open','closed')),"
     "  invited INTEGER NOT NULL CHECK (invited >= 0),"
     "  deadline REAL NOT NULL,"
     "  opened REAL NOT NULL,"
     "  closed REAL,"
     "  reported INTEGER NOT NULL DEFAULT 0 CHECK (reported BETWEEN 0 AND invited),"
     "  outcome TEXT CHECK (outcome IN ('committed','retried','failed')),"
     "  model_digest TEXT CHECK (model_digest IS NULL OR length(model_digest) = 64),"
     "  message TEXT,"
     "  PRIMARY KEY (job, round, attempt),"
     "  CHECK ((state = 'open') = (outcome IS NULL))"
     ");"
     "CREATE TABLE participants ("
     "  job INTEGER NOT NULL,"
     "  round INTEGER NOT NULL,"
     "  attempt INTEGER NOT NULL,"
     "  site INTEGER NOT NULL CHECK (site >= 0),"
     "  state TEXT NOT NULL CHECK (state IN"
     "    ('invited','refused','reporting','reported','dropped')),"
     "  samples INTEGER NOT NULL DEFAULT 0 CHECK (samples >= 0),"
     "  bytes_up INTEGER NOT NULL DEFAULT 0 CHECK (bytes_up >= 0),"
     "  bytes_down INTEGER NOT NULL DEFAULT 0 CHECK (bytes_down >= 0),"
     "  updated REAL NOT NULL,"
     "  PRIMARY KEY (job, round, attempt, site),"
     "  FOREIGN KEY (job, round, attempt) REFERENCES rounds(job, round, attempt)"
     ");"
     "CREATE TABLE metrics ("
     "  job INTEGER NOT NULL REFERENCES jobs(id),"
     "  round INTEGER NOT NULL CHECK (round >= 1),"
     "  site INTEGER NOT NULL CHECK (site >= 0),"
     "  train_loss REAL,"
     "  test_loss REAL,"
     "  test_accuracy REAL,"
     "  samples INTEGER NOT NULL CHECK (samples >= 0),"
     "  epsilon REAL,"
     "  PRIMARY KEY (job, round, site)"
     ");"
     "CREATE INDEX metrics_by_site ON metrics (job, site, round);"
     "CREATE INDEX jobs_by_state ON jobs (state);"},
    /* 2: the daemon's needs. Sites by name (ids are derived from names, this
     * table only remembers them for reports and for resuming), who submitted
     * a job and the bytes it moved, the bytes behind each metrics row, and
     * the queued jobs in submission order. */
    {2,
     "CREATE TABLE sites ("
     "  id INTEGER PRIMARY KEY CHECK (id >= 0),"
     "  name TEXT NOT NULL UNIQUE,"
     "  region TEXT NOT NULL,"
     "  kind TEXT NOT NULL CHECK (kind IN ('site','regional')),"
     "  first_seen REAL NOT NULL,"
     "  last_seen REAL NOT NULL"
     ");"
     "ALTER TABLE jobs ADD COLUMN submitter TEXT;"
     "ALTER TABLE jobs ADD COLUMN bytes_up INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE jobs ADD COLUMN bytes_down INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE metrics ADD COLUMN bytes_up INTEGER;"
     "ALTER TABLE metrics ADD COLUMN bytes_down INTEGER;"},
    /* 3: the federation's residency policy, as immutable versions. */
    {3, xf_policy_schema_sql},
    /* 4: the audit trail (decisions, crossings, policy changes, refusals). */
    {4, xf_audit_schema_sql},
    /* 5: whether the daemon has the trail open, so that a copy of coord.db
     * made without its -wal file is told apart from a whole one. */
    {5, xf_audit_keeper_sql},
    /* 6: datasets the sites announced that the policy does not hold, as
     * each site last described them (docs/policy.md, "Datasets the sites
     * register"). tags is a JSON array of strings. */
    {6,
     "CREATE TABLE pending_datasets ("
     "  site TEXT NOT NULL,"
     "  name TEXT NOT NULL,"
     "  region TEXT NOT NULL,"
     "  classification TEXT NOT NULL,"
     "  tags TEXT NOT NULL,"
     "  train_records INTEGER NOT NULL CHECK (train_records >= 0),"
     "  test_records INTEGER NOT NULL CHECK (test_records >= 0),"
     "  classes INTEGER NOT NULL CHECK (classes >= 0),"
     "  height INTEGER NOT NULL CHECK (height >= 0),"
     "  width INTEGER NOT NULL CHECK (width >= 0),"
     "  channels INTEGER NOT NULL CHECK (channels >= 0),"
     "  first_seen REAL NOT NULL,"
     "  last_seen REAL NOT NULL CHECK (last_seen >= first_seen),"
     "  PRIMARY KEY (site, name)"
     ");"},
    /* 7: the final evaluation's download of the model, kept apart from the
     * round's training traffic in the same row so that each replaces only
     * its own figure (docs/metrics.md, "A job's traffic"). The jobs table's
     * bytes_up and bytes_down (migration 2) are no longer written: a job's
     * traffic is the sum of its metrics rows. */
    {7, "ALTER TABLE metrics ADD COLUMN eval_bytes_down INTEGER;"},
    /* 8: the model digest (the parameters' BLAKE2b-256) of each model blob,
     * so that a job's status names its model without decoding the blob.
     * Blobs are named by their bytes: a row never goes stale. */
    {8,
     "CREATE TABLE model_digests ("
     "  blob TEXT PRIMARY KEY CHECK (length(blob) = 64),"
     "  params TEXT NOT NULL CHECK (length(params) = 64)"
     ");"},
    /* 9: checkpoint retention (docs/storage.md, "Checkpoint retention").
     * Each job's initial model, which no round names once round 1 commits;
     * for a job created before this migration it is known only while no
     * round has committed. Each committed round's server optimizer state
     * beside its model, and when the round's checkpoint was pruned (NULL
     * while it is kept). Blobs whose last reference went, queued for removal
     * until their files are gone, so that a crash between the journal's
     * change and the unlink leaves a list to finish rather than a stray
     * file. Indexes for the reference checks. */
    {9,
     "ALTER TABLE jobs ADD COLUMN initial_model_digest TEXT"
     "  CHECK (initial_model_digest IS NULL OR length(initial_model_digest) = 64);"
     "UPDATE jobs SET initial_model_digest = model_digest WHERE NOT EXISTS"
     "  (SELECT 1 FROM rounds r WHERE r.job = jobs.id AND r.outcome = 'committed');"
     "ALTER TABLE rounds ADD COLUMN opt_state_digest TEXT"
     "  CHECK (opt_state_digest IS NULL OR length(opt_state_digest) = 64);"
     "ALTER TABLE rounds ADD COLUMN pruned REAL;"
     "CREATE INDEX rounds_by_model ON rounds (model_digest);"
     "CREATE INDEX rounds_by_opt_state ON rounds (opt_state_digest);"
     "CREATE INDEX participants_by_site ON participants (job, site, round);"
     "CREATE TABLE blob_garbage ("
     "  blob TEXT PRIMARY KEY CHECK (length(blob) = 64),"
     "  queued REAL NOT NULL"
     ");"},
};

const xf_migration *xf_journal_migrations(size_t *n) {
  *n = sizeof(xf__migrations) / sizeof(xf__migrations[0]);
  return xf__migrations;
}

xf_err xf_journal_open(const char *path, xf_db **out, xf_errctx *err) {
  size_t n;
  const xf_migration *m = xf_journal_migrations(&n);
  return xf_db_open(path, m, n, out, err);
}

const char *xf_job_state_name(xf_job_state s) {
  switch (s) {
  case XF_JOB_QUEUED: return "queued";
  case XF_JOB_RUNNING: return "running";
  case XF_JOB_PAUSED: return "paused";
  case XF_JOB_DONE: return "done";
  case XF_JOB_FAILED: return "failed";
  case XF_JOB_CANCELLED: return "cancelled";
  }
  return "unknown";
}

static xf_err xf__job_state_from_name(const char *s, xf_job_state *out) {
  for (int i = XF_JOB_QUEUED; i <= XF_JOB_CANCELLED; i++) {
    if (strcmp(s, xf_job_state_name((xf_job_state)i)) == 0) {
      *out = (xf_job_state)i;
      return XF_OK;
    }
  }
  return XF_EFORMAT;
}

/* ---- statements -----------------------------------------------------------------
 * Every statement is prepared and bound through one type string:
 *   'i' int64_t   'd' double   't' const char * (NULL binds NULL)
 *   'h' const xf_digest * as hex (NULL binds NULL)
 * Values are copied at bind time (SQLITE_TRANSIENT). */

/* With cached, the statement comes from the connection's cache
 * (xf_db_prepare_cached) and goes back with xf_db_release. */
static xf_err xf__vprepare(xf_db *db, sqlite3_stmt **st, xf_errctx *err, bool cached,
                           const char *sql, const char *types, va_list ap) {
  XF_GUARD(cached ? xf_db_prepare_cached(db, sql, st, err) : xf_db_prepare(db, sql, st, err));
  int rc = SQLITE_OK;
  for (int i = 0; types[i] && rc == SQLITE_OK; i++) {
    int col = i + 1;
    switch (types[i]) {
    case 'i': rc = sqlite3_bind_int64(*st, col, va_arg(ap, int64_t)); break;
    case 'd': rc = sqlite3_bind_double(*st, col, va_arg(ap, double)); break;
    case 't': {
      const char *s = va_arg(ap, const char *);
      rc = s ? sqlite3_bind_text(*st, col, s, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(*st, col);
      break;
    }
    case 'h': {
      const xf_digest *d = va_arg(ap, const xf_digest *);
      char hex[XF_DIGEST_HEX];
      if (d) xf_digest_hex(d, hex);
      rc = d ? sqlite3_bind_text(*st, col, hex, -1, SQLITE_TRANSIENT) : sqlite3_bind_null(*st, col);
      break;
    }
    default: rc = SQLITE_MISUSE; break;
    }
  }
  if (rc != SQLITE_OK) {
    xf_err e = xf_db_fail(db, err, "binding a journal statement");
    if (cached) xf_db_release(db, *st);
    else sqlite3_finalize(*st);
    *st = NULL;
    return e;
  }
  return XF_OK;
}

static xf_err xf__prepare(xf_db *db, sqlite3_stmt **st, xf_errctx *err, const char *sql,
                          const char *types, ...) {
  va_list ap;
  va_start(ap, types);
  xf_err e = xf__vprepare(db, st, err, false, sql, types, ap);
  va_end(ap);
  return e;
}

/* Runs a statement that returns no rows; *changes (may be NULL) gets the rows
 * it changed. `doing` names the step in the error. sql is a literal: the
 * statement is kept prepared for the next call (xf_db_prepare_cached). */
static xf_err xf__run(xf_db *db, xf_errctx *err, const char *doing, int *changes,
                      const char *sql, const char *types, ...) {
  sqlite3_stmt *st = NULL;
  va_list ap;
  va_start(ap, types);
  xf_err e = xf__vprepare(db, &st, err, true, sql, types, ap);
  va_end(ap);
  if (e != XF_OK) return e;
  int rc = sqlite3_step(st);
  if (rc != SQLITE_DONE) {
    e = xf_db_fail(db, err, doing);
    xf_db_release(db, st);
    return e;
  }
  if (changes) *changes = sqlite3_changes(xf_db_handle(db));
  xf_db_release(db, st);
  return XF_OK;
}

static xf_err xf__check_id(uint64_t v, const char *what, xf_errctx *err) {
  XF_ENSURE(v <= (uint64_t)INT64_MAX, err, XF_ERANGE,
            "%s %llu is above the journal's limit of 2^63 - 1", what, (unsigned long long)v);
  return XF_OK;
}

/* Column text as a digest; XF_EFORMAT for anything but 64 hex digits. */
static xf_err xf__column_digest(sqlite3_stmt *st, int col, xf_digest *out, bool *has,
                                xf_errctx *err) {
  const unsigned char *t = sqlite3_column_text(st, col);
  if (has) *has = t != NULL;
  if (!t) {
    memset(out, 0, sizeof(*out));
    XF_ENSURE(has != NULL, err, XF_EFORMAT, "a model digest is missing from the journal");
    return XF_OK;
  }
  XF_ENSURE(xf_digest_parse((const char *)t, out) == XF_OK, err, XF_EFORMAT,
            "the journal holds a damaged digest \"%.70s\"", (const char *)t);
  return XF_OK;
}

/* ---- the blobs it names ------------------------------------------------------------ */

xf_err xf_journal_check_blobs(xf_db *db, const xf_blob_store *blobs, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT id, model_digest, opt_state_digest FROM jobs ORDER BY id", ""));
  size_t missing = 0;
  char first[512] = "";
  xf_err e = XF_OK;
  int rc = SQLITE_DONE;
  while (e == XF_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    for (int col = 1; col <= 2 && e == XF_OK; col++) {
      xf_digest d;
      bool has = false;
      e = xf__column_digest(st, col, &d, &has, err);
      if (e != XF_OK || !has || xf_blob_exists(blobs, &d)) continue;
      if (missing++ == 0) {
        char hex[XF_DIGEST_HEX], path[1024] = "?";
        xf_digest_hex(&d, hex);
        if (xf_blob_path(blobs, &d, path, sizeof(path)) != XF_OK) snprintf(path, 2, "?");
        snprintf(first, sizeof(first), "job %lld's %s %s, which belongs at %.360s",
                 (long long)sqlite3_column_int64(st, 0),
                 col == 1 ? "model" : "server optimizer state", hex, path);
      }
    }
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "reading the jobs");
  sqlite3_finalize(st);
  if (e != XF_OK || missing == 0) return e;
  xf_errctx_file(err, xf_db_path(db));
  return xf_fail(err, XF_ENOENT,
                 "the blob store lacks %zu blob%s the journal names; the first is %s", missing,
                 missing == 1 ? "" : "s", first);
}

/* ---- jobs -------------------------------------------------------------------------- */

xf_err xf_journal_job_create(xf_db *db, const xf_jobspec *spec, const xf_digest *model,
                             double now, int64_t *job, xf_errctx *err) {
  char *json = NULL;
  if (xf_jobspec_to_json(spec, &json) != XF_OK)
    return xf_fail(err, XF_ENOMEM, "out of memory writing the job spec");
  xf_err e = xf__run(db, err, "recording the job", NULL,
                     "INSERT INTO jobs (name, spec, rounds, state, created, updated,"
                     " current_round, model_digest, initial_model_digest)"
                     " VALUES (?, ?, ?, 'queued', ?, ?, 1, ?, ?)",
                     "ttiddhh", spec->name, json, (int64_t)spec->rounds, now, now, model, model);
  xf_free(json);
  if (e != XF_OK) return e;
  *job = sqlite3_last_insert_rowid(xf_db_handle(db));
  return XF_OK;
}

xf_err xf_journal_job_set_state(xf_db *db, int64_t job, xf_job_state state,
                                const char *message, double now, xf_errctx *err) {
  XF_ENSURE(state >= XF_JOB_QUEUED && state <= XF_JOB_CANCELLED, err, XF_EINVAL,
            "job state %d is not one of the journal's", (int)state);
  int changes = 0;
  XF_GUARD(xf__run(db, err, "setting the job state", &changes,
                   "UPDATE jobs SET state = ?, message = ?, updated = ? WHERE id = ?", "ttdi",
                   xf_job_state_name(state), message, now, job));
  XF_ENSURE(changes == 1, err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  return XF_OK;
}

/* The job's state and current round, for the checks before a round write. */
static xf_err xf__job_position(xf_db *db, int64_t job, xf_job_state *state, uint32_t *round,
                               xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, "SELECT state, current_round FROM jobs WHERE id = ?", "i",
                       job));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW) {
    const unsigned char *s = sqlite3_column_text(st, 0);
    if (!s || xf__job_state_from_name((const char *)s, state) != XF_OK)
      e = xf_fail(err, XF_EFORMAT, "job %lld has an unknown state in the journal",
                  (long long)job);
    *round = (uint32_t)sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    e = xf_fail(err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  } else {
    e = xf_db_fail(db, err, "reading the job");
  }
  sqlite3_finalize(st);
  return e;
}

/* ---- rounds ------------------------------------------------------------------------- */

static xf_err xf__round_open_tx(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                                const uint64_t *invited, size_t n, double deadline, double now,
                                xf_errctx *err) {
  xf_job_state state = XF_JOB_QUEUED;
  uint32_t current = 0;
  XF_GUARD(xf__job_position(db, job, &state, &current, err));
  XF_ENSURE(state == XF_JOB_QUEUED || state == XF_JOB_RUNNING || state == XF_JOB_PAUSED, err,
            XF_EINVAL, "job %lld is %s: no round can open", (long long)job,
            xf_job_state_name(state));
  XF_ENSURE(round == current, err, XF_EINVAL,
            "job %lld is at round %u, not round %u", (long long)job, current, round);
  /* An attempt left open by a crash starts afresh: its participants go. */
  XF_GUARD(xf__run(db, err, "clearing the participants of a reopened round", NULL,
                   "DELETE FROM participants WHERE job = ? AND round = ? AND attempt = ?", "iii",
                   job, (int64_t)round, (int64_t)attempt));
  int changes = 0;
  XF_GUARD(xf__run(db, err, "opening the round", &changes,
                   "INSERT INTO rounds (job, round, attempt, state, invited, deadline, opened)"
                   " VALUES (?, ?, ?, 'open', ?, ?, ?)"
                   " ON CONFLICT (job, round, attempt) DO UPDATE SET"
                   " invited = excluded.invited, deadline = excluded.deadline,"
                   " opened = excluded.opened, reported = 0"
                   " WHERE rounds.state = 'open'",
                   "iiiidd", job, (int64_t)round, (int64_t)attempt, (int64_t)n, deadline, now));
  XF_ENSURE(changes == 1, err, XF_EINVAL, "round %u attempt %u of job %lld is already closed",
            round, attempt, (long long)job);
  for (size_t i = 0; i < n; i++) {
    XF_GUARD(xf__run(db, err, "recording an invited site", NULL,
                     "INSERT INTO participants (job, round, attempt, site, state, updated)"
                     " VALUES (?, ?, ?, ?, 'invited', ?)",
                     "iiiid", job, (int64_t)round, (int64_t)attempt, (int64_t)invited[i], now));
  }
  return xf__run(db, err, "marking the job running", NULL,
                 "UPDATE jobs SET state = 'running', message = NULL, updated = ? WHERE id = ?",
                 "di", now, job);
}

xf_err xf_journal_round_open(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                             const uint64_t *invited, size_t n, double deadline, double now,
                             xf_errctx *err) {
  XF_ENSURE(round >= 1 && attempt >= 1, err, XF_EINVAL, "rounds and attempts count from 1");
  for (size_t i = 0; i < n; i++) XF_GUARD(xf__check_id(invited[i], "site", err));
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = xf__round_open_tx(db, job, round, attempt, invited, n, deadline, now, err);
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) xf_db_rollback(db);
  return e;
}

xf_err xf_journal_participant_set(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                                  const xf_journal_participant *p, double now,
                                  xf_errctx *err) {
  XF_GUARD(xf__check_id(p->site, "site", err));
  XF_GUARD(xf__check_id(p->samples, "samples", err));
  XF_GUARD(xf__check_id(p->bytes_up, "bytes_up", err));
  XF_GUARD(xf__check_id(p->bytes_down, "bytes_down", err));
  /* A site that accepted and waits for GO has taken the task: "reporting". */
  const char *state = xf_participant_state_name(
      p->state == XF_PARTICIPANT_ACCEPTED ? XF_PARTICIPANT_REPORTING : p->state);
  XF_ENSURE(strcmp(state, "unknown") != 0, err, XF_EINVAL,
            "participant state %d is not one of the journal's", (int)p->state);
  int changes = 0;
  XF_GUARD(xf__run(db, err, "recording a participant", &changes,
                   "UPDATE participants SET state = ?, samples = ?, bytes_up = ?,"
                   " bytes_down = ?, updated = ?"
                   " WHERE job = ? AND round = ? AND attempt = ? AND site = ?"
                   " AND EXISTS (SELECT 1 FROM rounds r WHERE r.job = participants.job"
                   "   AND r.round = participants.round AND r.attempt = participants.attempt"
                   "   AND r.state = 'open')",
                   "tiiidiiii", state, (int64_t)p->samples, (int64_t)p->bytes_up,
                   (int64_t)p->bytes_down, now, job, (int64_t)round, (int64_t)attempt,
                   (int64_t)p->site));
  XF_ENSURE(changes == 1, err, XF_ENOENT,
            "site %llu is not invited to an open round %u attempt %u of job %lld",
            (unsigned long long)p->site, round, attempt, (long long)job);
  return XF_OK;
}

/* Closes an open attempt with `outcome`: pending participants become
 * dropped and the reported count is taken from the participants. Runs inside
 * the caller's transaction. */
static xf_err xf__round_close(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                              const char *outcome, const xf_digest *model, const char *message,
                              double now, xf_errctx *err) {
  XF_GUARD(xf__run(db, err, "dropping the round's pending sites", NULL,
                   "UPDATE participants SET state = 'dropped', updated = ?"
                   " WHERE job = ? AND round = ? AND attempt = ?"
                   " AND state IN ('invited', 'reporting')",
                   "diii", now, job, (int64_t)round, (int64_t)attempt));
  int changes = 0;
  XF_GUARD(xf__run(db, err, "closing the round", &changes,
                   "UPDATE rounds SET state = 'closed', outcome = ?, closed = ?,"
                   " model_digest = ?, message = ?,"
                   " reported = (SELECT count(*) FROM participants p WHERE p.job = rounds.job"
                   "   AND p.round = rounds.round AND p.attempt = rounds.attempt"
                   "   AND p.state = 'reported')"
                   " WHERE job = ? AND round = ? AND attempt = ? AND state = 'open'",
                   "tdhtiii", outcome, now, model, message, job, (int64_t)round,
                   (int64_t)attempt));
  XF_ENSURE(changes == 1, err, XF_EINVAL, "round %u attempt %u of job %lld is not open", round,
            attempt, (long long)job);
  return XF_OK;
}

static xf_err xf__round_commit_tx(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                                  const xf_digest *model, const xf_digest *opt_state,
                                  double now, xf_errctx *err) {
  XF_GUARD(xf__round_close(db, job, round, attempt, "committed", model, NULL, now, err));
  XF_GUARD(xf__run(db, err, "recording the round's optimizer state", NULL,
                   "UPDATE rounds SET opt_state_digest = ? WHERE job = ? AND round = ?"
                   " AND attempt = ?",
                   "hiii", opt_state, job, (int64_t)round, (int64_t)attempt));
  int changes = 0;
  XF_GUARD(xf__run(db, err, "recording the round's model", &changes,
                   "UPDATE jobs SET model_digest = ?, opt_state_digest = ?,"
                   " current_round = current_round + 1,"
                   " state = CASE WHEN current_round + 1 > rounds THEN 'done' ELSE state END,"
                   " updated = ?"
                   " WHERE id = ? AND current_round = ? AND state = 'running'",
                   "hhdii", model, opt_state, now, job, (int64_t)round));
  XF_ENSURE(changes == 1, err, XF_EINVAL, "job %lld is not running at round %u",
            (long long)job, round);
  return XF_OK;
}

xf_err xf_journal_round_commit(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                               const xf_digest *model, const xf_digest *opt_state,
                               double now, xf_errctx *err) {
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = xf__round_commit_tx(db, job, round, attempt, model, opt_state, now, err);
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) xf_db_rollback(db);
  return e;
}

xf_err xf_journal_round_retry(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                              const char *note, double now, xf_errctx *err) {
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = xf__round_close(db, job, round, attempt, "retried", NULL, note, now, err);
  if (e == XF_OK) {
    e = xf__run(db, err, "recording the retry", NULL,
                "UPDATE jobs SET updated = ? WHERE id = ?", "di", now, job);
  }
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) xf_db_rollback(db);
  return e;
}

xf_err xf_journal_job_fail(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                           const char *message, double now, xf_errctx *err) {
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = xf__round_close(db, job, round, attempt, "failed", NULL, message, now, err);
  int changes = 0;
  if (e == XF_OK) {
    e = xf__run(db, err, "recording the job's failure", &changes,
                "UPDATE jobs SET state = 'failed', message = ?, updated = ? WHERE id = ?",
                "tdi", message, now, job);
  }
  if (e == XF_OK && changes != 1)
    e = xf_fail(err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) xf_db_rollback(db);
  return e;
}

/* ---- metrics ------------------------------------------------------------------------ */

xf_err xf_journal_metrics_add(xf_db *db, int64_t job, const xf_journal_metrics *m,
                              xf_errctx *err) {
  XF_GUARD(xf__check_id(m->site, "site", err));
  XF_GUARD(xf__check_id(m->samples, "samples", err));
  if (m->has_bytes) {
    XF_GUARD(xf__check_id(m->bytes_up, "bytes_up", err));
    XF_GUARD(xf__check_id(m->bytes_down, "bytes_down", err));
  }
  if (m->has_eval_bytes) XF_GUARD(xf__check_id(m->eval_bytes_down, "eval_bytes_down", err));
  XF_ENSURE(m->round >= 1, err, XF_EINVAL, "rounds count from 1");
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "INSERT INTO metrics (job, round, site, train_loss, test_loss,"
                       " test_accuracy, samples, epsilon, bytes_up, bytes_down, eval_bytes_down)"
                       " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                       " ON CONFLICT (job, round, site) DO UPDATE SET"
                       " train_loss = coalesce(excluded.train_loss, train_loss),"
                       " test_loss = coalesce(excluded.test_loss, test_loss),"
                       " test_accuracy = coalesce(excluded.test_accuracy, test_accuracy),"
                       " samples = max(excluded.samples, samples),"
                       " epsilon = coalesce(excluded.epsilon, epsilon),"
                       " bytes_up = coalesce(excluded.bytes_up, bytes_up),"
                       " bytes_down = coalesce(excluded.bytes_down, bytes_down),"
                       " eval_bytes_down = coalesce(excluded.eval_bytes_down, eval_bytes_down)",
                       "iiidddi", job, (int64_t)m->round, (int64_t)m->site, m->train_loss,
                       m->test_loss, m->test_accuracy, (int64_t)m->samples));
  int rc = m->has_epsilon ? sqlite3_bind_double(st, 8, m->epsilon) : sqlite3_bind_null(st, 8);
  if (rc == SQLITE_OK)
    rc = m->has_bytes ? sqlite3_bind_int64(st, 9, (int64_t)m->bytes_up) : sqlite3_bind_null(st, 9);
  if (rc == SQLITE_OK)
    rc = m->has_bytes ? sqlite3_bind_int64(st, 10, (int64_t)m->bytes_down)
                      : sqlite3_bind_null(st, 10);
  if (rc == SQLITE_OK)
    rc = m->has_eval_bytes ? sqlite3_bind_int64(st, 11, (int64_t)m->eval_bytes_down)
                           : sqlite3_bind_null(st, 11);
  if (rc == SQLITE_OK) rc = sqlite3_step(st);
  xf_err e = rc == SQLITE_DONE ? XF_OK : xf_db_fail(db, err, "recording metrics");
  sqlite3_finalize(st);
  return e;
}

static double xf__column_real(sqlite3_stmt *st, int col) {
  return sqlite3_column_type(st, col) == SQLITE_NULL ? NAN : sqlite3_column_double(st, col);
}

/* The current row of a metrics query (columns in the order of
 * xf_journal_metrics). */
static void xf__metrics_row(sqlite3_stmt *st, xf_journal_metrics *m) {
  m->round = (uint32_t)sqlite3_column_int64(st, 0);
  m->site = (uint64_t)sqlite3_column_int64(st, 1);
  m->train_loss = xf__column_real(st, 2);
  m->test_loss = xf__column_real(st, 3);
  m->test_accuracy = xf__column_real(st, 4);
  m->samples = (uint64_t)sqlite3_column_int64(st, 5);
  m->has_epsilon = sqlite3_column_type(st, 6) != SQLITE_NULL;
  m->epsilon = m->has_epsilon ? sqlite3_column_double(st, 6) : 0.0;
  m->has_bytes = sqlite3_column_type(st, 7) != SQLITE_NULL;
  m->bytes_up = (uint64_t)sqlite3_column_int64(st, 7);
  m->bytes_down = (uint64_t)sqlite3_column_int64(st, 8);
  m->has_eval_bytes = sqlite3_column_type(st, 9) != SQLITE_NULL;
  m->eval_bytes_down = (uint64_t)sqlite3_column_int64(st, 9);
}

/* Reads every row of a prepared metrics query (columns in the order of
 * xf_journal_metrics) into a new array. Finalizes st. */
static xf_err xf__metrics_collect(xf_db *db, sqlite3_stmt *st, xf_journal_metrics **out,
                                  size_t *n, xf_errctx *err) {
  xf_journal_metrics *v = NULL;
  size_t len = 0, cap = 0;
  xf_err e = XF_OK;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 16;
      xf_journal_metrics *nv = xf_realloc(v, ncap * sizeof(*nv));
      if (!nv) {
        e = xf_fail(err, XF_ENOMEM, "out of memory reading metrics");
        break;
      }
      v = nv;
      cap = ncap;
    }
    xf__metrics_row(st, &v[len++]);
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "reading metrics");
  sqlite3_finalize(st);
  if (e != XF_OK) {
    xf_free(v);
    return e;
  }
  if (len == 0) {
    xf_free(v);
    v = NULL;
  }
  *out = v;
  *n = len;
  return XF_OK;
}

#define XF__METRICS_COLUMNS \
  "SELECT round, site, train_loss, test_loss, test_accuracy, samples, epsilon, bytes_up," \
  " bytes_down, eval_bytes_down FROM metrics"

xf_err xf_journal_metrics_round(xf_db *db, int64_t job, uint32_t round,
                                xf_journal_metrics **out, size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       XF__METRICS_COLUMNS " WHERE job = ? AND round = ? ORDER BY site", "ii",
                       job, (int64_t)round));
  return xf__metrics_collect(db, st, out, n, err);
}

xf_err xf_journal_metrics_site(xf_db *db, int64_t job, uint64_t site,
                               xf_journal_metrics **out, size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  XF_GUARD(xf__check_id(site, "site", err));
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       XF__METRICS_COLUMNS " WHERE job = ? AND site = ? ORDER BY round", "ii",
                       job, (int64_t)site));
  return xf__metrics_collect(db, st, out, n, err);
}

/* ---- resume --------------------------------------------------------------------------- */

static xf_err xf__load_job_row(xf_db *db, int64_t job, xf_journal_job *out, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT spec, state, current_round, model_digest, opt_state_digest,"
                       " message, created, updated FROM jobs WHERE id = ?",
                       "i", job));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_DONE) {
    e = xf_fail(err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  } else if (rc != SQLITE_ROW) {
    e = xf_db_fail(db, err, "reading the job");
  } else {
    const char *spec = (const char *)sqlite3_column_text(st, 0);
    const char *state = (const char *)sqlite3_column_text(st, 1);
    const char *message = (const char *)sqlite3_column_text(st, 5);
    if (!spec || xf_jobspec_parse_string(spec, strlen(spec), "journal", &out->spec, err) != XF_OK)
      e = xf_fail(err, XF_EFORMAT, "job %lld: the journaled spec does not parse",
                  (long long)job);
    else if (!state || xf__job_state_from_name(state, &out->state) != XF_OK)
      e = xf_fail(err, XF_EFORMAT, "job %lld has an unknown state in the journal",
                  (long long)job);
    if (e == XF_OK) e = xf__column_digest(st, 3, &out->model, NULL, err);
    if (e == XF_OK) e = xf__column_digest(st, 4, &out->opt_state, &out->has_opt_state, err);
    out->round = (uint32_t)sqlite3_column_int64(st, 2);
    snprintf(out->message, sizeof(out->message), "%s", message ? message : "");
    out->created = sqlite3_column_double(st, 6);
    out->updated = sqlite3_column_double(st, 7);
  }
  sqlite3_finalize(st);
  return e;
}

/* The attempt of the job's current round: the open one, the next after the
 * last closed one, or 1. */
static xf_err xf__load_attempt(xf_db *db, xf_journal_job *out, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT attempt, state FROM rounds WHERE job = ? AND round = ?"
                       " ORDER BY attempt DESC LIMIT 1",
                       "ii", out->id, (int64_t)out->round));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  out->attempt = 1;
  out->round_open = false;
  if (rc == SQLITE_ROW) {
    uint32_t attempt = (uint32_t)sqlite3_column_int64(st, 0);
    const char *state = (const char *)sqlite3_column_text(st, 1);
    out->round_open = state && strcmp(state, "open") == 0;
    out->attempt = out->round_open ? attempt : attempt + 1;
  } else if (rc != SQLITE_DONE) {
    e = xf_db_fail(db, err, "reading the job's round");
  }
  sqlite3_finalize(st);
  if (e != XF_OK) return e;

  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT count(*) FROM rounds WHERE job = ? AND outcome = 'committed'",
                       "i", out->id));
  rc = sqlite3_step(st);
  if (rc == SQLITE_ROW)
    out->rounds_committed = (uint32_t)sqlite3_column_int64(st, 0);
  else
    e = xf_db_fail(db, err, "counting the job's rounds");
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_job_load(xf_db *db, int64_t job, xf_journal_job *out, xf_errctx *err) {
  xf_journal_job j;
  memset(&j, 0, sizeof(j));
  j.id = job;
  /* One read transaction, so the job row and its rounds are one snapshot. */
  XF_GUARD(xf__run(db, err, "starting a read", NULL, "BEGIN", ""));
  xf_err e = xf__load_job_row(db, job, &j, err);
  if (e == XF_OK) e = xf__load_attempt(db, &j, err);
  if (e == XF_OK) e = xf_db_commit(db, err);
  if (e != XF_OK) {
    xf_db_rollback(db);
    return e;
  }
  *out = j;
  return XF_OK;
}

static xf_err xf__job_ids(xf_db *db, const char *sql, int64_t **ids, size_t *n,
                          xf_errctx *err) {
  *ids = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, sql, ""));
  int64_t *v = NULL;
  size_t len = 0, cap = 0;
  xf_err e = XF_OK;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    if (len == cap) {
      size_t ncap = cap ? cap * 2 : 8;
      int64_t *nv = xf_realloc(v, ncap * sizeof(*nv));
      if (!nv) {
        e = xf_fail(err, XF_ENOMEM, "out of memory listing jobs");
        break;
      }
      v = nv;
      cap = ncap;
    }
    v[len++] = sqlite3_column_int64(st, 0);
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "listing jobs");
  sqlite3_finalize(st);
  if (e != XF_OK || len == 0) {
    xf_free(v);
    return e;
  }
  *ids = v;
  *n = len;
  return XF_OK;
}

xf_err xf_journal_running_jobs(xf_db *db, int64_t **ids, size_t *n, xf_errctx *err) {
  return xf__job_ids(db, "SELECT id FROM jobs WHERE state IN ('running', 'paused') ORDER BY id", ids, n, err);
}

xf_err xf_journal_queued_jobs(xf_db *db, int64_t **ids, size_t *n, xf_errctx *err) {
  return xf__job_ids(db, "SELECT id FROM jobs WHERE state = 'queued' ORDER BY id", ids, n, err);
}

xf_err xf_journal_all_jobs(xf_db *db, int64_t **ids, size_t *n, xf_errctx *err) {
  return xf__job_ids(db, "SELECT id FROM jobs ORDER BY id", ids, n, err);
}

/* ---- the daemon's bookkeeping ------------------------------------------------------------ */

xf_err xf_journal_site_seen(xf_db *db, uint64_t site, const char *name, const char *region,
                            bool regional, double now, xf_errctx *err) {
  XF_GUARD(xf__check_id(site, "site", err));
  return xf__run(db, err, "recording the site", NULL,
                 "INSERT INTO sites (id, name, region, kind, first_seen, last_seen)"
                 " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET"
                 " region = excluded.region, kind = excluded.kind, last_seen = excluded.last_seen",
                 "itttdd", (int64_t)site, name, region, regional ? "regional" : "site", now, now);
}

xf_err xf_journal_site_name(xf_db *db, uint64_t site, char *name, size_t name_len,
                            char *region, size_t region_len, xf_errctx *err) {
  XF_GUARD(xf__check_id(site, "site", err));
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, "SELECT name, region FROM sites WHERE id = ?", "i",
                       (int64_t)site));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW) {
    snprintf(name, name_len, "%s", (const char *)sqlite3_column_text(st, 0));
    snprintf(region, region_len, "%s", (const char *)sqlite3_column_text(st, 1));
  } else if (rc == SQLITE_DONE) {
    e = xf_fail(err, XF_ENOENT, "no site %llu in the journal", (unsigned long long)site);
  } else {
    e = xf_db_fail(db, err, "reading a site");
  }
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_job_submitter(xf_db *db, int64_t job, const char *submitter,
                                xf_errctx *err) {
  int changes = 0;
  XF_GUARD(xf__run(db, err, "recording the job's submitter", &changes,
                   "UPDATE jobs SET submitter = ? WHERE id = ?", "ti", submitter, job));
  XF_ENSURE(changes == 1, err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  return XF_OK;
}

xf_err xf_journal_job_submitter_get(xf_db *db, int64_t job, char *submitter,
                                    size_t submitter_len, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, "SELECT submitter FROM jobs WHERE id = ?", "i", job));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW) {
    const char *sub = (const char *)sqlite3_column_text(st, 0);
    snprintf(submitter, submitter_len, "%s", sub ? sub : "");
  } else if (rc == SQLITE_DONE) {
    e = xf_fail(err, XF_ENOENT, "no job %lld in the journal", (long long)job);
  } else {
    e = xf_db_fail(db, err, "reading the job");
  }
  sqlite3_finalize(st);
  return e;
}

void xf_journal_metrics_bytes(const xf_journal_metrics *m, uint64_t *up, uint64_t *down) {
  *up = m->has_bytes ? m->bytes_up : 0;
  *down = (m->has_bytes ? m->bytes_down : 0) + (m->has_eval_bytes ? m->eval_bytes_down : 0);
}

xf_err xf_journal_job_bytes(xf_db *db, int64_t job, uint64_t *bytes_up, uint64_t *bytes_down,
                            xf_errctx *err) {
  *bytes_up = *bytes_down = 0;
  /* Row by row: a status query must not hold all of a long job's rows. */
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, XF__METRICS_COLUMNS " WHERE job = ?", "i", job));
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    xf_journal_metrics m;
    uint64_t up, down;
    xf__metrics_row(st, &m);
    xf_journal_metrics_bytes(&m, &up, &down);
    *bytes_up += up;
    *bytes_down += down;
  }
  xf_err e = rc == SQLITE_DONE ? XF_OK : xf_db_fail(db, err, "reading the job's traffic");
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_metrics_newest_round(xf_db *db, int64_t job, uint32_t at_most, bool evaluated,
                                       uint32_t *round, xf_errctx *err) {
  *round = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       evaluated ? "SELECT round FROM metrics WHERE job = ? AND round <= ?"
                                   " AND test_accuracy IS NOT NULL ORDER BY round DESC LIMIT 1"
                                 : "SELECT round FROM metrics WHERE job = ? AND round <= ?"
                                   " ORDER BY round DESC LIMIT 1",
                       "ii", job, (int64_t)at_most));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW)
    *round = (uint32_t)sqlite3_column_int64(st, 0);
  else if (rc != SQLITE_DONE)
    e = xf_db_fail(db, err, "reading the job's newest metrics");
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_model_digest_note(xf_db *db, const xf_digest *blob, const xf_digest *params,
                                    xf_errctx *err) {
  char b[XF_DIGEST_HEX], p[XF_DIGEST_HEX];
  xf_digest_hex(blob, b);
  xf_digest_hex(params, p);
  return xf__run(db, err, "recording a model digest", NULL,
                 "INSERT OR IGNORE INTO model_digests (blob, params) VALUES (?, ?)", "tt", b, p);
}

xf_err xf_journal_model_digest(xf_db *db, const xf_digest *blob, xf_digest *params,
                               xf_errctx *err) {
  char b[XF_DIGEST_HEX];
  xf_digest_hex(blob, b);
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, "SELECT params FROM model_digests WHERE blob = ?", "t", b));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW)
    e = xf__column_digest(st, 0, params, NULL, err);
  else if (rc == SQLITE_DONE)
    e = xf_fail(err, XF_ENOENT, "no model digest noted for blob %s", b);
  else
    e = xf_db_fail(db, err, "reading a model digest");
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_round_model(xf_db *db, int64_t job, uint32_t round, xf_digest *model,
                              xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT model_digest, pruned FROM rounds WHERE job = ? AND round = ?"
                       " AND outcome = 'committed'",
                       "ii", job, (int64_t)round));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW && sqlite3_column_type(st, 1) != SQLITE_NULL)
    e = xf_fail(err, XF_ENOENT,
                "the checkpoint of job %lld round %u was pruned by the coordinator's "
                "checkpoint_retention; the latest rounds are kept (raise "
                "checkpoint_retention to keep more)",
                (long long)job, (unsigned)round);
  else if (rc == SQLITE_ROW)
    e = xf__column_digest(st, 0, model, NULL, err);
  else if (rc == SQLITE_DONE)
    e = xf_fail(err, XF_ENOENT, "job %lld has no committed round %u", (long long)job,
                (unsigned)round);
  else
    e = xf_db_fail(db, err, "reading the round's model");
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_round_sites(xf_db *db, int64_t job, uint32_t round, uint32_t *invited,
                              uint32_t *reported, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT invited, reported FROM rounds WHERE job = ? AND round = ?"
                       " AND outcome = 'committed'",
                       "ii", job, (int64_t)round));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW) {
    *invited = (uint32_t)sqlite3_column_int64(st, 0);
    *reported = (uint32_t)sqlite3_column_int64(st, 1);
  } else if (rc == SQLITE_DONE) {
    e = xf_fail(err, XF_ENOENT, "job %lld has no committed round %u", (long long)job,
                (unsigned)round);
  } else {
    e = xf_db_fail(db, err, "reading the round's sites");
  }
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_metrics_job(xf_db *db, int64_t job, xf_journal_metrics **out, size_t *n,
                              xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, XF__METRICS_COLUMNS " WHERE job = ? ORDER BY round, site",
                       "i", job));
  return xf__metrics_collect(db, st, out, n, err);
}

xf_err xf_journal_metrics_page(xf_db *db, int64_t job, uint32_t after_round,
                               uint64_t after_site, size_t limit, xf_journal_metrics **out,
                               size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__check_id(after_site, "site", err));
  XF_GUARD(xf__prepare(db, &st, err,
                       XF__METRICS_COLUMNS " WHERE job = ? AND (round > ? OR (round = ? AND"
                                           " site > ?)) ORDER BY round, site LIMIT ?",
                       "iiiii", job, (int64_t)after_round, (int64_t)after_round,
                       (int64_t)after_site, (int64_t)(limit > INT64_MAX ? INT64_MAX : limit)));
  return xf__metrics_collect(db, st, out, n, err);
}

xf_err xf_journal_site_epsilon(xf_db *db, int64_t job, uint32_t round, bool *has, double *eps,
                               xf_errctx *err) {
  *has = false;
  *eps = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT max(epsilon) FROM metrics WHERE job = ? AND round <= ?"
                       " AND epsilon IS NOT NULL",
                       "ii", job, (int64_t)round));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW) {
    *has = sqlite3_column_type(st, 0) != SQLITE_NULL;
    *eps = *has ? sqlite3_column_double(st, 0) : 0;
  } else {
    e = xf_db_fail(db, err, "reading the job's privacy spend");
  }
  sqlite3_finalize(st);
  return e;
}

xf_err xf_journal_last_invited(xf_db *db, int64_t job, uint32_t *n, xf_errctx *err) {
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT invited FROM rounds WHERE job = ? ORDER BY round DESC,"
                       " attempt DESC LIMIT 1",
                       "i", job));
  int rc = sqlite3_step(st);
  xf_err e = XF_OK;
  if (rc == SQLITE_ROW)
    *n = (uint32_t)sqlite3_column_int64(st, 0);
  else if (rc != SQLITE_DONE)
    e = xf_db_fail(db, err, "reading the job's last round");
  sqlite3_finalize(st);
  return e;
}

/* ---- datasets the sites announced, pending in the policy --------------------------------- */

/* A JSON array of the tags, as text (the caller frees it with free()). */
static char *tags_text(const char *const *tags, size_t n) {
  json_t *a = json_array();
  for (size_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_string(tags[i] ? tags[i] : "")) != 0) {
      json_decref(a);
      a = NULL;
    }
  char *t = a ? json_dumps(a, JSON_COMPACT) : NULL;
  json_decref(a);
  return t;
}

/* Drops the rows of `site` that the announcement no longer names: what a
 * site announces replaces what it said before. */
static xf_err forget_unnamed(xf_db *db, const char *site, const xf_journal_announced *ds,
                             size_t n, xf_errctx *err) {
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err, "SELECT name FROM pending_datasets WHERE site = ?", "t",
                       site));
  char(*gone)[XF_JOB_IDENT_MAX] = NULL;
  size_t n_gone = 0;
  xf_err e = XF_OK;
  int rc = SQLITE_DONE;
  while (e == XF_OK && (rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *name = (const char *)sqlite3_column_text(st, 0);
    bool named = false;
    for (size_t i = 0; name && !named && i < n; i++) named = strcmp(ds[i].name, name) == 0;
    if (named || !name) continue;
    char(*grown)[XF_JOB_IDENT_MAX] = xf_realloc(gone, (n_gone + 1) * sizeof(*gone));
    if (!grown) {
      e = xf_fail(err, XF_ENOMEM, "out of memory reading the pending datasets");
      break;
    }
    gone = grown;
    snprintf(gone[n_gone++], XF_JOB_IDENT_MAX, "%s", name);
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "reading the pending datasets");
  sqlite3_finalize(st);
  for (size_t i = 0; e == XF_OK && i < n_gone; i++)
    e = xf__run(db, err, "forgetting a dataset the site no longer announces", NULL,
                "DELETE FROM pending_datasets WHERE site = ? AND name = ?", "tt", site, gone[i]);
  xf_free(gone);
  return e;
}

/* One site's announcement, inside the caller's transaction. */
static xf_err site_datasets_seen(xf_db *db, const xf_journal_site_datasets *a,
                                 const xf_policy *policy, double now, xf_errctx *err) {
  XF_ENSURE(a->site && *a->site && a->region, err, XF_EINVAL,
            "a pending dataset needs its site and region");
  for (size_t i = 0; i < a->n; i++)
    XF_ENSURE(a->ds[i].name && *a->ds[i].name, err, XF_EINVAL,
              "site %.64s announced a dataset without a name", a->site);
  XF_GUARD(forget_unnamed(db, a->site, a->ds, a->n, err));
  for (size_t i = 0; i < a->n; i++) {
    const xf_journal_announced *d = &a->ds[i];
    if (xf_policy_dataset_find(policy, d->name, a->site)) {
      XF_GUARD(xf__run(db, err, "forgetting a dataset the policy holds", NULL,
                       "DELETE FROM pending_datasets WHERE site = ? AND name = ?", "tt", a->site,
                       d->name));
      continue;
    }
    char *tags = tags_text(d->tags, d->n_tags);
    XF_ENSURE(tags, err, XF_ENOMEM, "out of memory recording a pending dataset");
    xf_err e = xf__run(
        db, err, "recording a pending dataset", NULL,
        "INSERT INTO pending_datasets (site, name, region, classification, tags,"
        " train_records, test_records, classes, height, width, channels, first_seen,"
        " last_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (site, name) DO UPDATE SET region = excluded.region,"
        " classification = excluded.classification, tags = excluded.tags,"
        " train_records = excluded.train_records, test_records = excluded.test_records,"
        " classes = excluded.classes, height = excluded.height, width = excluded.width,"
        " channels = excluded.channels,"
        " last_seen = max(pending_datasets.first_seen, excluded.last_seen)",
        "tttttiiiiiidd", a->site, d->name, a->region,
        d->classification ? d->classification : "", tags, (int64_t)d->train_records,
        (int64_t)d->test_records, (int64_t)d->classes, (int64_t)d->height, (int64_t)d->width,
        (int64_t)d->channels, now, now);
    free(tags); /* jansson's */
    XF_GUARD(e);
  }
  return XF_OK;
}

xf_err xf_journal_datasets_seen(xf_db *db, const xf_journal_site_datasets *sites, size_t n,
                                const xf_policy *policy, double now, xf_errctx *err) {
  if (n == 0) return XF_OK;
  XF_GUARD(xf_db_begin(db, err));
  xf_err e = XF_OK;
  for (size_t i = 0; e == XF_OK && i < n; i++)
    e = site_datasets_seen(db, &sites[i], policy, now, err);
  if (e == XF_OK) return xf_db_commit(db, err);
  xf_db_rollback(db);
  return e;
}

void xf_journal_pending_free(xf_journal_pending *rows, size_t n) {
  for (size_t i = 0; rows && i < n; i++) xf_free(rows[i].tags);
  xf_free(rows);
}

static void copy_col(char *dst, size_t len, sqlite3_stmt *st, int col) {
  const unsigned char *t = sqlite3_column_text(st, col);
  snprintf(dst, len, "%s", t ? (const char *)t : "");
}

xf_err xf_journal_datasets_pending(xf_db *db, const xf_policy *policy, xf_journal_pending **out,
                                   size_t *n, xf_errctx *err) {
  *out = NULL;
  *n = 0;
  sqlite3_stmt *st = NULL;
  XF_GUARD(xf__prepare(db, &st, err,
                       "SELECT site, name, region, classification, tags, train_records,"
                       " test_records, classes, height, width, channels, first_seen, last_seen"
                       " FROM pending_datasets ORDER BY site, name",
                       ""));
  xf_journal_pending *rows = NULL;
  size_t count = 0, cap = 0;
  xf_err e = XF_OK;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const char *site = (const char *)sqlite3_column_text(st, 0);
    const char *name = (const char *)sqlite3_column_text(st, 1);
    /* A later change of the policy may have added it. */
    if (xf_policy_dataset_find(policy, name, site)) continue;
    if (count == cap) {
      size_t grown_cap = cap ? 2 * cap : 16;
      xf_journal_pending *grown = xf_realloc(rows, grown_cap * sizeof(*rows));
      if (!grown) {
        e = xf_fail(err, XF_ENOMEM, "out of memory reading the pending datasets");
        break;
      }
      rows = grown;
      cap = grown_cap;
    }
    xf_journal_pending *r = &rows[count];
    memset(r, 0, sizeof(*r));
    copy_col(r->site, sizeof(r->site), st, 0);
    copy_col(r->name, sizeof(r->name), st, 1);
    copy_col(r->region, sizeof(r->region), st, 2);
    copy_col(r->classification, sizeof(r->classification), st, 3);
    const unsigned char *tags = sqlite3_column_text(st, 4);
    r->tags = xf_strdup(tags ? (const char *)tags : "[]");
    count++;
    if (!r->tags) {
      e = xf_fail(err, XF_ENOMEM, "out of memory reading the pending datasets");
      break;
    }
    r->train_records = (uint32_t)sqlite3_column_int64(st, 5);
    r->test_records = (uint32_t)sqlite3_column_int64(st, 6);
    r->classes = (uint32_t)sqlite3_column_int64(st, 7);
    r->height = (uint32_t)sqlite3_column_int64(st, 8);
    r->width = (uint32_t)sqlite3_column_int64(st, 9);
    r->channels = (uint32_t)sqlite3_column_int64(st, 10);
    r->first_seen = sqlite3_column_double(st, 11);
    r->last_seen = sqlite3_column_double(st, 12);
  }
  if (e == XF_OK && rc != SQLITE_DONE) e = xf_db_fail(db, err, "reading the pending datasets");
  sqlite3_finalize(st);
  if (e != XF_OK) {
    xf_journal_pending_free(rows, count);
    return e;
  }
  *out = rows;
  *n = count;
  return XF_OK;
}
