/* SPDX-License-Identifier: Apache-2.0 */
/* The audit trail: an append-only table of decisions, boundary crossings,
 * policy changes and refusals in SQLite, each row carrying the BLAKE2b-256
 * digest of the row before it (docs/audit.md). */
#ifndef XF_POLICY_AUDIT_H
#define XF_POLICY_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "base/result.h"
#include "crypto/digest.h"
#include "storage/db.h"

/* The migration that creates the audit table and the triggers that refuse
 * UPDATE and DELETE on it. A database that keeps the trail (the coordinator's
 * journal) appends this script to its own migration list, as one entry; it
 * contains no transaction statements (storage/db.h). */
extern const char xf_audit_schema_sql[];

/* Opens or creates a database at `path` that holds only the audit trail (its
 * migration list is xf_audit_schema_sql alone), for `--db` use and tests.
 * Errors and ownership as xf_db_open: the caller closes *out with
 * xf_db_close. */
xf_err xf_audit_open(const char *path, xf_db **out, xf_errctx *err) XF_WARN_UNUSED;

/* The migration after xf_audit_schema_sql for a database a daemon keeps the
 * trail in: one row saying whether the daemon has it open (running) and
 * when it last made the main file whole (checkpointed). A plain copy of the
 * main file alone then tells xf_audit_open_readonly it was taken from a
 * running daemon without its -wal file. Append it after xf_audit_schema_sql
 * as its own entry. */
extern const char xf_audit_keeper_sql[];

/* The daemon's side of the keeper row (db holds xf_audit_keeper_sql). Each
 * writes the row and checkpoints the -wal file into the main file
 * (storage/db.h), so that the main file alone holds every row appended so
 * far: start when the daemon opens the trail, mark at points worth a
 * checkpoint (a job's end), stop before it closes. now is Unix seconds.
 * XF_EDB on failure; the trail itself is unaffected. */
xf_err xf_audit_keeper_start(xf_db *db, double now, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_audit_keeper_mark(xf_db *db, double now, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_audit_keeper_stop(xf_db *db, double now, xf_errctx *err) XF_WARN_UNUSED;

/* What xf_audit_open_readonly found a file to be. */
typedef enum xf_audit_trail_kind {
  XF_AUDIT_TRAIL_STANDALONE,  /* the audit table alone: a regional aggregator's
                               * audit.db, or a trail kept with --db */
  XF_AUDIT_TRAIL_COORDINATOR, /* the global coordinator's journal (coord.db) */
  XF_AUDIT_TRAIL_SITE,        /* a site's database (site.db) */
} xf_audit_trail_kind;

/* "audit trail", "coordinator journal", "site database". */
const char *xf_audit_trail_kind_name(xf_audit_trail_kind k);

typedef struct xf_audit_trail_info {
  xf_audit_trail_kind kind;
  int schema_version;    /* the file's user_version */
  xf_db_file_info file;  /* WAL mode, -wal beside it */
  bool kept;             /* it has the keeper row (xf_audit_keeper_sql) */
  bool running;          /* the keeper row says a daemon had it open */
  double checkpointed;   /* when the daemon last made the main file whole; 0: never */
} xf_audit_trail_info;

/* Opens a file to read its trail offline, changing nothing (no migration,
 * no checkpoint: xf_db_open_readonly), and tells what it is by the tables
 * it holds: any xfed database with an audit table of the columns this build
 * reads (seq, at, actor, kind, subject, detail, prev, digest). Refused:
 * a file that is not SQLite (XF_EFORMAT), an SQLite file with no audit table
 * (XF_EFORMAT, naming the tables it has), an audit table of other columns
 * (XF_EUNSUPPORTED: written by another build), and a plain copy of a
 * running daemon's WAL database made without its -wal file (XF_ETRUNCATED:
 * the keeper row says the daemon was running, the file is in WAL mode and
 * no -wal is beside it, so rows appended since the last checkpoint may be
 * missing; the message says to use 'xfed-coord backup'). On success the
 * caller closes *out with xf_db_close; info (may be NULL) says what it is. */
xf_err xf_audit_open_readonly(const char *path, xf_db **out, xf_audit_trail_info *info,
                              xf_errctx *err) XF_WARN_UNUSED;

/* The kinds of event the trail records (docs/audit.md lists what each one's
 * detail holds). A kind is stored by name; new kinds are added at the end. */
#define XF_AUDIT_KINDS(X)                                                      \
  X(DECISION, "decision")                                                      \
  X(CROSSING, "crossing")                                                      \
  X(POLICY_CHANGE, "policy_change")                                            \
  X(REFUSED_CONNECTION, "refused_connection")                                  \
  X(REFUSED_TASK, "refused_task")                                              \
  X(JOB, "job")                                                                \
  X(REFUSED_REPORT, "refused_report")                                          \
  X(STATS_RELEASE, "stats_release")

/* True when kind is one of XF_AUDIT_KINDS' names. */
bool xf_audit_kind_valid(const char *kind);

/* One row as read back. Strings are owned by the row (released by
 * xf_audit_rows_free); prev and digest are the stored hex text, cut to 64
 * characters when a tampered row holds more. */
typedef struct xf_audit_row {
  uint64_t seq;     /* 1, 2, 3, ... in the order rows were appended */
  double at;        /* Unix seconds, as the appender gave it */
  char *actor;      /* who acted: a certificate identity or a daemon's name */
  char *kind;       /* one of XF_AUDIT_KINDS */
  char *subject;    /* what it was about: a job, site, dataset, policy version */
  char *detail;     /* compact JSON text with sorted keys */
  char prev[XF_DIGEST_HEX];   /* digest of row seq - 1; 64 zeros for row 1 */
  char digest[XF_DIGEST_HEX]; /* this row's digest */
} xf_audit_row;

/* The last row of a trail: what a caller records elsewhere (another machine,
 * a signed log, a ticket) to detect later that rows were cut off the end.
 * seq 0 and the zero digest for an empty trail. */
typedef struct xf_audit_anchor {
  uint64_t seq;
  char digest[XF_DIGEST_HEX];
} xf_audit_anchor;

/* Appends one row in its own IMMEDIATE transaction: reads the last row's seq
 * and digest, and writes seq + 1 chained to it, so concurrent appenders on
 * other connections stay one chain. db must not be inside a transaction.
 *
 * at must be finite; actor, kind and subject must be non-empty; kind must be
 * xf_audit_kind_valid; detail_json must be one JSON value without duplicate
 * object keys, and is stored in its compact form with sorted keys. Anything
 * else is XF_EINVAL with err's field naming the argument. XF_EDB on SQLite
 * failures (the row is then not written), XF_ENOMEM.
 *
 * seq_out (may be NULL) receives the new row's seq. */
xf_err xf_audit_append(xf_db *db, double at, const char *actor, const char *kind,
                       const char *subject, const char *detail_json, uint64_t *seq_out,
                       xf_errctx *err) XF_WARN_UNUSED;

/* The digest a row must carry, computed from its seq, at, actor, kind,
 * subject, detail and prev with the encoding of docs/audit.md. XF_EFORMAT
 * when row->prev is not 64 hex digits. For external verifiers and tests. */
xf_err xf_audit_row_digest(const xf_audit_row *row, xf_digest *out) XF_WARN_UNUSED;

/* The trail's head: the last row's seq and digest (seq 0 and 64 zeros when
 * empty), to be kept somewhere the database's writers cannot reach. */
xf_err xf_audit_head(xf_db *db, xf_audit_anchor *out, xf_errctx *err) XF_WARN_UNUSED;

/* What verification found. */
typedef enum xf_audit_fault {
  XF_AUDIT_INTACT = 0, /* every row checks out */
  XF_AUDIT_EDITED,     /* a row's contents no longer match its digest */
  XF_AUDIT_INSERTED,   /* a row that was not appended sits in the chain */
  XF_AUDIT_DELETED,    /* a row is missing from the middle or the start */
  XF_AUDIT_TRUNCATED,  /* rows are missing after the last one (anchor only) */
} xf_audit_fault;

/* "intact", "edited", "inserted", "deleted", "truncated"; "?" out of range. */
const char *xf_audit_fault_name(xf_audit_fault f);

typedef struct xf_audit_verdict {
  xf_audit_fault fault;
  uint64_t rows;       /* rows read (all of them when intact) */
  uint64_t seq;        /* the first bad row's seq; 0 when intact */
  xf_audit_anchor head; /* the last row read */
  char what[320];      /* one sentence for a person: what is wrong where, or
                        * "N rows, chain intact" */
} xf_audit_verdict;

/* Walks the trail in seq order, recomputing every row's digest and checking
 * that each row's prev is the digest of the row before it, and reports the
 * first bad row in *out: an edited row, an inserted row, or a deleted one
 * (docs/audit.md explains how each is told apart). Returns XF_OK whenever the
 * walk completed, whatever it found: a damaged trail is out->fault, not an
 * error. XF_EDB when the table cannot be read.
 *
 * Without an anchor, rows cut off the end of the trail leave a shorter chain
 * that is intact: use xf_audit_verify_anchored for that. */
xf_err xf_audit_verify(xf_db *db, xf_audit_verdict *out, xf_errctx *err) XF_WARN_UNUSED;

/* xf_audit_verify, and also checks the trail against a head recorded earlier
 * with xf_audit_head: the row at anchor->seq must exist and carry
 * anchor->digest (XF_AUDIT_TRUNCATED when the trail ends before it,
 * XF_AUDIT_EDITED when that row differs, i.e. the chain was rewritten).
 * anchor may be NULL (no anchor). */
xf_err xf_audit_verify_anchored(xf_db *db, const xf_audit_anchor *anchor, xf_audit_verdict *out,
                                xf_errctx *err) XF_WARN_UNUSED;

/* The rows with at >= since, in seq order, at most `limit` of them (0: no
 * limit). On success the caller owns *rows (NULL when *n is 0) and releases
 * it with xf_audit_rows_free; on failure *rows is NULL and *n is 0. */
xf_err xf_audit_list(xf_db *db, double since, size_t limit, xf_audit_row **rows, size_t *n,
                     xf_errctx *err) XF_WARN_UNUSED;

void xf_audit_rows_free(xf_audit_row *rows, size_t n);

/* How many rows of kind are about subject, and the newest one's detail
 * (compact JSON; the caller xf_frees *last_detail, NULL when *count is 0).
 * A scan of the trail: for answers about one thing, not for every request.
 * XF_EDB, XF_ENOMEM. */
xf_err xf_audit_about(xf_db *db, const char *kind, const char *subject, uint64_t *count,
                      char **last_detail, xf_errctx *err) XF_WARN_UNUSED;

/* Writes the rows with at >= since to out as JSON lines, in seq order: one
 * object per row with the members seq, at, actor, kind, subject, detail (the
 * JSON value itself, or its text as a string if a tampered row holds
 * something that does not parse), prev and digest. Reads one row at a time.
 * XF_EIO when writing fails, XF_EDB, XF_ENOMEM. */
xf_err xf_audit_export(xf_db *db, double since, FILE *out, xf_errctx *err) XF_WARN_UNUSED;

/* One page of xf_audit_export's lines, for a reader that pages through a
 * trail it cannot stream (the coordinator answering `xfed audit`): the rows
 * with at >= since and seq > after_seq, in seq order, at most `limit` of them
 * (>= 1) and no more than max_bytes of text unless the first row alone is
 * larger (a page always holds at least one row when one remains). *more is
 * true when rows remain after the page's last one (ask again with its seq),
 * *last_seq receives that seq (after_seq when the page is empty) and *n the
 * page's row count. The caller frees *text (never NULL on success; "" when
 * empty) with xf_free. Errors as xf_audit_export. */
xf_err xf_audit_export_page(xf_db *db, double since, uint64_t after_seq, size_t limit,
                            size_t max_bytes, char **text, size_t *n, uint64_t *last_seq,
                            bool *more, xf_errctx *err) XF_WARN_UNUSED;

#endif
