/* SPDX-License-Identifier: Apache-2.0 */
/* The coordinator's journal: its SQLite schema (jobs, rounds, participants,
 * metrics) and the writes that let a killed coordinator resume each job at
 * the round it was in (docs/rounds.md). */
#ifndef XF_COORDINATOR_JOURNAL_H
#define XF_COORDINATOR_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "job/jobspec.h"
#include "policy/policy.h"
#include "coordinator/round.h"
#include "crypto/digest.h"
#include "storage/blob.h"
#include "storage/db.h"

/* The migration list of the coordinator database, versions 1..*n. It is the
 * one list for that file (storage/db.h): the policy and audit tables append
 * their migrations to it. Owned by the module (static). */
const xf_migration *xf_journal_migrations(size_t *n);

/* xf_db_open(path, xf_journal_migrations()) — opens or creates the
 * coordinator database with its schema up to date. Errors and ownership as
 * xf_db_open. */
xf_err xf_journal_open(const char *path, xf_db **out, xf_errctx *err) XF_WARN_UNUSED;

/* Checks that every blob the jobs table names (each job's current model and
 * server optimizer state, what a restarted coordinator resumes from) is in
 * `blobs`: one stat each, no reading. XF_ENOENT naming the first one missing
 * (the job, which blob, the digest and where it should be) and how many are
 * missing; XF_EDB or XF_EFORMAT when the table cannot be read. */
xf_err xf_journal_check_blobs(xf_db *db, const xf_blob_store *blobs,
                              xf_errctx *err) XF_WARN_UNUSED;

typedef enum xf_job_state {
  XF_JOB_QUEUED = 0, /* "queued": submitted, no round opened yet */
  XF_JOB_RUNNING,    /* "running" */
  XF_JOB_PAUSED,     /* "paused": e.g. no longer allowed by policy */
  XF_JOB_DONE,       /* "done": every round committed */
  XF_JOB_FAILED,     /* "failed": message says why */
  XF_JOB_CANCELLED   /* "cancelled" */
} xf_job_state;

/* The journal's spelling of a job state; "unknown" outside the enum. */
const char *xf_job_state_name(xf_job_state s);

/* Times passed to the journal are Unix seconds from the caller's clock; the
 * journal stores them as given. Site ids are 0..INT64_MAX (SQLite integers
 * are signed); a larger id is XF_ERANGE. Rounds and attempts are 1-based as
 * in coordinator/round.h. Every function returns XF_EDB (with SQLite's
 * message, the database named in err) for a failing statement and leaves no
 * part of its change behind: a function that writes more than one row does
 * so in one transaction, rolled back on any failure. */

/* Records a new job in state queued at round 1 with its spec as canonical
 * JSON (xf_jobspec_to_json) and its initial model digest. *job gets the id.
 * XF_ENOMEM. */
xf_err xf_journal_job_create(xf_db *db, const xf_jobspec *spec, const xf_digest *model,
                             double now, int64_t *job, xf_errctx *err) XF_WARN_UNUSED;

/* Sets the job's state and message (NULL: none), e.g. paused by policy,
 * cancelled by the user. XF_ENOENT for an unknown job. Failure at a round
 * goes through xf_journal_job_fail instead, which also closes the round. */
xf_err xf_journal_job_set_state(xf_db *db, int64_t job, xf_job_state state,
                                const char *message, double now,
                                xf_errctx *err) XF_WARN_UNUSED;

/* Opens (round, attempt) of the job in one transaction: the rounds row
 * (state open, deadline, invited = n) and one participants row per invited
 * site (state invited), and the job becomes running at that round. The
 * round must be the job's current round. An attempt left open by a crash
 * is opened afresh: its old participants are replaced. XF_ENOENT for an
 * unknown job, XF_EINVAL for a round other than the current one, a job that
 * is done, failed or cancelled, or a closed attempt. */
xf_err xf_journal_round_open(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                             const uint64_t *invited, size_t n, double deadline, double now,
                             xf_errctx *err) XF_WARN_UNUSED;

/* One participant's progress in an open attempt: its state, and the samples
 * and bytes so far (they replace the stored values). XF_ENOENT when the
 * site was not invited to that attempt or the attempt is not open. */
typedef struct xf_journal_participant {
  uint64_t site;
  xf_participant_state state;
  uint64_t samples;
  uint64_t bytes_up;
  uint64_t bytes_down;
} xf_journal_participant;

xf_err xf_journal_participant_set(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                                  const xf_journal_participant *p, double now,
                                  xf_errctx *err) XF_WARN_UNUSED;

/* The evaluation a site sent with its update in one round. A later record
 * for the same (job, round, site) — a retried attempt, or the evaluation of
 * the round's model arriving with the next round's report — merges into it:
 * each figure it gives (not NaN; epsilon and bytes when their flags are set)
 * replaces the stored one, the others are kept; samples keeps the larger. */
typedef struct xf_journal_metrics {
  uint32_t round;
  uint64_t site;
  double train_loss;
  double test_loss;
  double test_accuracy;
  uint64_t samples;
  bool has_epsilon;
  double epsilon;   /* privacy spent so far; meaningful when has_epsilon */
  bool has_bytes;
  uint64_t bytes_up, bytes_down; /* the site's training traffic that round, when has_bytes */
  bool has_eval_bytes;
  uint64_t eval_bytes_down; /* the final evaluation's download of this round's model */
} xf_journal_metrics;

/* A row's traffic: the training task's update up and model down, and the
 * final evaluation's model down. The one definition of a job's traffic: every
 * view (status, watch, metrics rows, Prometheus, the dashboard, the report)
 * is this summed over the job's rows (docs/metrics.md, "A job's traffic"). */
void xf_journal_metrics_bytes(const xf_journal_metrics *m, uint64_t *up, uint64_t *down);

xf_err xf_journal_metrics_add(xf_db *db, int64_t job, const xf_journal_metrics *m,
                              xf_errctx *err) XF_WARN_UNUSED;

/* The metrics of one round (site ascending), or of one site (round
 * ascending). On success the caller owns *out (*n entries; freed with
 * xf_free, NULL when *n is 0). XF_ENOMEM. */
xf_err xf_journal_metrics_round(xf_db *db, int64_t job, uint32_t round,
                                xf_journal_metrics **out, size_t *n,
                                xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_journal_metrics_site(xf_db *db, int64_t job, uint64_t site,
                               xf_journal_metrics **out, size_t *n,
                               xf_errctx *err) XF_WARN_UNUSED;

/* The round's result, in ONE transaction: the attempt closes with outcome
 * committed (participants still invited or reporting become dropped, the
 * reported count is taken from the participants), and the job gets the new
 * model digest, the server optimizer's state digest (NULL: the strategy has
 * none) and moves to round + 1 — or to done after its last round. A crash
 * or failure at any point leaves the attempt open and the previous model in
 * place. The blobs must be in the blob store before this call (a blob whose
 * commit never happened is harmless: nothing points to it). XF_EINVAL when
 * the attempt is not open, is not the job's current round, or the job is not
 * running (paused, say): then nothing of the result is kept. */
xf_err xf_journal_round_commit(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                               const xf_digest *model, const xf_digest *opt_state,
                               double now, xf_errctx *err) XF_WARN_UNUSED;

/* Closes the attempt with outcome retried (RETRY action); `note` (may be
 * NULL) is kept as the round's message. The job stays at the round. */
xf_err xf_journal_round_retry(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                              const char *note, double now, xf_errctx *err) XF_WARN_UNUSED;

/* Closes the attempt with outcome failed and the job as failed with
 * `message`, in one transaction (FAIL_JOB action). */
xf_err xf_journal_job_fail(xf_db *db, int64_t job, uint32_t round, uint32_t attempt,
                           const char *message, double now, xf_errctx *err) XF_WARN_UNUSED;

/* What a restarted coordinator needs to carry on with a job. */
typedef struct xf_journal_job {
  int64_t id;
  xf_jobspec spec;           /* parsed back from the journaled JSON */
  xf_job_state state;
  uint32_t round;            /* the round the job is in (rounds + 1 once done) */
  uint32_t attempt;          /* the attempt open, or the next one to open */
  bool round_open;           /* an attempt was open: the coordinator stopped
                                during it, and opens it afresh */
  uint32_t rounds_committed; /* rounds with a committed result */
  xf_digest model;           /* the last committed model */
  bool has_opt_state;
  xf_digest opt_state;       /* the server optimizer state committed with it */
  char message[XF_ROUND_MSG_MAX * 2]; /* why it failed or paused; "" */
  double created;
  double updated;
} xf_journal_job;

/* Loads one job. XF_ENOENT for an unknown id, XF_EFORMAT when the journaled
 * spec or a digest does not parse (a damaged database). */
xf_err xf_journal_job_load(xf_db *db, int64_t job, xf_journal_job *out,
                           xf_errctx *err) XF_WARN_UNUSED;

/* The ids of jobs in state running or paused (ascending): the ones a
 * restarted coordinator resumes (a paused one stays the active job, waiting
 * for the residency policy to allow it again). The caller owns *ids (xf_free; NULL when *n is 0). */
xf_err xf_journal_running_jobs(xf_db *db, int64_t **ids, size_t *n,
                               xf_errctx *err) XF_WARN_UNUSED;

/* Jobs in state queued (submission order), and every job (ascending id). */
xf_err xf_journal_queued_jobs(xf_db *db, int64_t **ids, size_t *n,
                              xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_journal_all_jobs(xf_db *db, int64_t **ids, size_t *n, xf_errctx *err) XF_WARN_UNUSED;

/* ---- the daemon's bookkeeping (migration 2) ---------------------------------- */

/* Remembers a site (or regional aggregator) by id with its name and region;
 * a known id gets its region, kind and last_seen updated. */
xf_err xf_journal_site_seen(xf_db *db, uint64_t site, const char *name, const char *region,
                            bool regional, double now, xf_errctx *err) XF_WARN_UNUSED;
/* Name and region of a remembered site; XF_ENOENT for an unknown id. */
xf_err xf_journal_site_name(xf_db *db, uint64_t site, char *name, size_t name_len,
                            char *region, size_t region_len, xf_errctx *err) XF_WARN_UNUSED;
/* Records who submitted the job. */
xf_err xf_journal_job_submitter(xf_db *db, int64_t job, const char *submitter,
                                xf_errctx *err) XF_WARN_UNUSED;
/* Reads it back ("" when none was recorded); XF_ENOENT for an unknown job. */
xf_err xf_journal_job_submitter_get(xf_db *db, int64_t job, char *submitter,
                                    size_t submitter_len, xf_errctx *err) XF_WARN_UNUSED;
/* The job's traffic: xf_journal_metrics_bytes summed over its metrics rows
 * (0 and 0 for a job without any), read row by row in constant memory. */
xf_err xf_journal_job_bytes(xf_db *db, int64_t job, uint64_t *bytes_up, uint64_t *bytes_down,
                            xf_errctx *err) XF_WARN_UNUSED;
/* The model digest of a model blob (the BLAKE2b-256 of its parameters,
 * docs/model-format.md's `digest`) as noted (migration 8); XF_ENOENT when
 * none was. Noting the same blob again keeps the first row: a blob's bytes,
 * and so its parameters, never change. */
xf_err xf_journal_model_digest(xf_db *db, const xf_digest *blob, xf_digest *params,
                               xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_journal_model_digest_note(xf_db *db, const xf_digest *blob, const xf_digest *params,
                                    xf_errctx *err) XF_WARN_UNUSED;
/* The model committed by a round; XF_ENOENT when the round has none, or
 * when checkpoint retention pruned it (the message says so). */
xf_err xf_journal_round_model(xf_db *db, int64_t job, uint32_t round, xf_digest *model,
                              xf_errctx *err) XF_WARN_UNUSED;
/* Of the attempt that committed a round: the sites invited and those whose
 * updates counted. XF_ENOENT when the round has not committed. */
xf_err xf_journal_round_sites(xf_db *db, int64_t job, uint32_t round, uint32_t *invited,
                              uint32_t *reported, xf_errctx *err) XF_WARN_UNUSED;
/* Sites invited to the job's latest attempt (0 before its first). */
xf_err xf_journal_last_invited(xf_db *db, int64_t job, uint32_t *n, xf_errctx *err) XF_WARN_UNUSED;
/* The largest epsilon sites reported for the job up to round (sites that
 * account for themselves: unit record, mode local): *has is false when no
 * row carries one. */
xf_err xf_journal_site_epsilon(xf_db *db, int64_t job, uint32_t round, bool *has, double *eps,
                               xf_errctx *err) XF_WARN_UNUSED;
/* The newest round up to at_most with a metrics row of the job (with
 * evaluated: a row that carries a test accuracy); 0 when there is none.
 * One index probe, whatever the job's length. */
xf_err xf_journal_metrics_newest_round(xf_db *db, int64_t job, uint32_t at_most, bool evaluated,
                                       uint32_t *round, xf_errctx *err) XF_WARN_UNUSED;
/* Every metrics row of a job, by round then site. Ownership as
 * xf_journal_metrics_round. */
xf_err xf_journal_metrics_job(xf_db *db, int64_t job, xf_journal_metrics **out, size_t *n,
                              xf_errctx *err) XF_WARN_UNUSED;
/* A page of them: at most limit rows after (after_round, after_site) in
 * that order (0, 0: from the first). Ownership as xf_journal_metrics_round. */
xf_err xf_journal_metrics_page(xf_db *db, int64_t job, uint32_t after_round,
                               uint64_t after_site, size_t limit, xf_journal_metrics **out,
                               size_t *n, xf_errctx *err) XF_WARN_UNUSED;

/* ---- datasets the sites announced, pending in the policy ------------------------------------
 * A site announces the datasets it registered; those the current policy
 * does not hold (by name and site) are pending until a compliance identity
 * adopts them into the policy (docs/policy.md, "Datasets the sites
 * register"). Pending grants nothing: decisions read only the policy. */

/* One dataset of an announcement. Strings are borrowed for the call. */
typedef struct xf_journal_announced {
  const char *name;
  const char *classification; /* what the site registered it as; may be NULL */
  const char *const *tags;
  size_t n_tags;
  uint32_t train_records, test_records, classes, height, width, channels;
} xf_journal_announced;

/* A pending dataset as its site last described it. tags is a JSON array
 * of strings, owned by the row. */
typedef struct xf_journal_pending {
  char site[XF_JOB_IDENT_MAX];
  char name[XF_JOB_IDENT_MAX];
  char region[XF_JOB_IDENT_MAX];
  char classification[16];
  char *tags;
  uint32_t train_records, test_records, classes, height, width, channels;
  double first_seen, last_seen; /* Unix seconds */
} xf_journal_pending;

/* What one site announced: the whole list of its datasets. */
typedef struct xf_journal_site_datasets {
  const char *site, *region;
  const xf_journal_announced *ds;
  size_t n;
} xf_journal_site_datasets;

/* Records the announcements of n sites (a site's own, or those a regional
 * aggregator forwards for the sites behind it) in one transaction. Of each
 * site's datasets, one that `policy` (borrowed; NULL: the empty policy)
 * does not hold is pending, with first_seen kept from its first
 * announcement and everything else as now announced; one the policy holds,
 * or the site no longer announces, is no longer pending. The same
 * announcement twice leaves the same rows (last_seen moved on). XF_EINVAL
 * for a site or a dataset without a name (nothing is recorded then). */
xf_err xf_journal_datasets_seen(xf_db *db, const xf_journal_site_datasets *sites, size_t n,
                                const xf_policy *policy, double now, xf_errctx *err) XF_WARN_UNUSED;

/* The pending datasets that `policy` (borrowed; NULL: the empty policy)
 * does not hold, by site then name: the caller owns *out
 * (xf_journal_pending_free; NULL when *n is 0). XF_ENOMEM. */
xf_err xf_journal_datasets_pending(xf_db *db, const xf_policy *policy, xf_journal_pending **out,
                                   size_t *n, xf_errctx *err) XF_WARN_UNUSED;
void xf_journal_pending_free(xf_journal_pending *rows, size_t n);

#endif
