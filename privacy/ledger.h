/* SPDX-License-Identifier: Apache-2.0 */
/* The privacy-budget ledger of a site's datasets: every release of an update
 * is one append-only row (what it cost: sampling rate, accounted noise
 * multiplier, steps), keyed by dataset name, job, round and attempt; a
 * dataset's spend is the Renyi-DP composition of its rows, converted to
 * epsilon at the delta asked for. docs/privacy.md ("The ledger").
 *
 * The table is `privacy_ledger` of the database that holds it: a migration
 * of that database runs XF_LEDGER_SCHEMA_SQL (the site's registry does in
 * its migration 2). */
#ifndef XF_PRIVACY_LEDGER_H
#define XF_PRIVACY_LEDGER_H

#include <stdint.h>

#include "base/result.h"
#include "storage/db.h"

/* The ledger's table and the triggers that keep it append-only, as one
 * migration's SQL (a string literal, so that a database's own migration can
 * prepend statements of its own). */
#define XF_LEDGER_SCHEMA_SQL                                                              \
  "CREATE TABLE privacy_ledger (\n"                                                       \
  "  id INTEGER PRIMARY KEY,\n"                                                           \
  "  dataset TEXT NOT NULL,\n"                                                            \
  "  job TEXT NOT NULL,\n"                                                                \
  "  round INTEGER NOT NULL CHECK (round >= 0),\n"                                        \
  "  attempt INTEGER NOT NULL CHECK (attempt >= 0),\n"                                    \
  "  sampling_rate REAL NOT NULL CHECK (sampling_rate > 0 AND sampling_rate <= 1),\n"     \
  "  noise_multiplier REAL NOT NULL CHECK (noise_multiplier >= 0),\n"                     \
  "  steps INTEGER NOT NULL CHECK (steps >= 1),\n"                                        \
  "  charged_at INTEGER NOT NULL,\n"                                                      \
  "  UNIQUE (dataset, job, round, attempt)\n"                                             \
  ");\n"                                                                                  \
  "CREATE TRIGGER privacy_ledger_no_update BEFORE UPDATE ON privacy_ledger\n"             \
  "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;\n"                \
  "CREATE TRIGGER privacy_ledger_no_delete BEFORE DELETE ON privacy_ledger\n"             \
  "BEGIN SELECT RAISE(ABORT, 'the privacy ledger is append-only'); END;\n"

/* What one released update cost a dataset: `steps` applications of the
 * subsampled Gaussian at sampling rate q with the accounted noise
 * multiplier. */
typedef struct xf_privacy_charge {
  double sampling_rate;    /* (0, 1] */
  double noise_multiplier; /* >= 0; 0 means no privacy (epsilon infinite) */
  uint64_t steps;          /* >= 1 */
} xf_privacy_charge;

/* The epsilon at `delta` of everything the ledger holds for dataset (only
 * job's rows when job is not NULL), plus *extra when extra is not NULL,
 * composed in RDP over the accountant's default orders and converted with
 * the improved conversion. No rows and no extra: 0. INFINITY when a charge
 * had no noise. XF_EDB, XF_ERANGE (a bad delta). */
xf_err xf_ledger_epsilon(xf_db *db, const char *dataset, const char *job,
                         const xf_privacy_charge *extra, double delta, double *eps,
                         xf_errctx *err) XF_WARN_UNUSED;

/* Records that dataset released an update for (job, round, attempt) at
 * Unix time now. The same (dataset, job, round, attempt) again is a no-op:
 * an update sent again after a reconnect is the same release. XF_EINVAL for
 * a charge out of range, XF_EDB. */
xf_err xf_ledger_charge(xf_db *db, const char *dataset, const char *job, uint32_t round,
                        uint32_t attempt, const xf_privacy_charge *c, int64_t now,
                        xf_errctx *err) XF_WARN_UNUSED;

/* One job's spend on a dataset. */
typedef struct xf_ledger_job {
  char job[64];
  uint32_t rounds;       /* releases charged */
  uint64_t steps;        /* noised steps over them */
  double epsilon;        /* this job alone, at the delta asked for */
  int64_t first, last;   /* Unix times of the first and last charge */
} xf_ledger_job;

/* The jobs that charged dataset, oldest first, each with its epsilon at
 * delta. *out (n entries, NULL when none) is owned by the caller: xf_free. */
xf_err xf_ledger_jobs(xf_db *db, const char *dataset, double delta, xf_ledger_job **out,
                      size_t *n, xf_errctx *err) XF_WARN_UNUSED;

#endif
