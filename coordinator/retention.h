/* SPDX-License-Identifier: Apache-2.0 */
/* Checkpoint retention: which of a job's per-round model checkpoints the
 * global coordinator keeps, and the removal of the others from the journal
 * and the blob store in an order a crash cannot hurt (docs/storage.md,
 * "Checkpoint retention"). */
#ifndef XF_COORDINATOR_RETENTION_H
#define XF_COORDINATOR_RETENTION_H

#include <stdint.h>

#include "base/result.h"
#include "storage/blob.h"
#include "storage/db.h"

/* The largest checkpoint_retention accepted. */
#define XF_RETENTION_MAX 1000000000u

/* The configuration value of checkpoint_retention as JSON gave it: a whole
 * number from 0 to XF_RETENTION_MAX. 0 (like an absent key) keeps every
 * checkpoint; N keeps the checkpoints of each job's last N committed
 * rounds and those that are always kept (below). XF_ERANGE with a message
 * saying what is accepted (the caller names the key). */
xf_err xf_retention_parse(double value, uint32_t *keep, xf_errctx *err) XF_WARN_UNUSED;

/* What one call removed. */
typedef struct xf_retention_result {
  uint32_t rounds; /* rounds whose checkpoint was let go */
  uint32_t blobs;  /* blob files removed */
  uint64_t bytes;  /* their size */
} xf_retention_result;

/* Lets go of the checkpoints (model and server optimizer state) of job's
 * committed rounds that fall outside its last `keep` committed rounds
 * (keep >= 1; 0 does nothing), then removes every blob nothing refers to
 * any more. Never let go of, whatever keep says:
 *   - the job's current model and optimizer state (what a restarted
 *     coordinator resumes from) and its initial model;
 *   - the checkpoint of round r when some site's first update that
 *     counted came in round r + 1: the last checkpoint before that
 *     dataset's first contribution, from which a retraining without it
 *     starts (docs/storage.md);
 * and a blob is removed only when no job and no kept round of any job names
 * it (identical bytes share one blob). Order: one transaction marks the
 * rounds pruned, queues the blobs that lost their last reference and drops
 * their model-digest rows; then each queued file is unlinked; then the
 * queue rows go. A crash after the transaction leaves the queue, finished
 * by the next call (xf_retention_collect); a crash before it changes
 * nothing. *out (may be NULL) gets what was removed. XF_EDB, XF_EIO (a
 * blob that cannot be unlinked stays queued). */
xf_err xf_retention_prune(xf_db *db, xf_blob_store *blobs, int64_t job, uint32_t keep,
                          double now, xf_retention_result *out, xf_errctx *err) XF_WARN_UNUSED;

/* xf_retention_prune for every job in the journal (at start, so that a
 * lowered setting applies to jobs that are over), summed into *out. */
xf_err xf_retention_prune_all(xf_db *db, xf_blob_store *blobs, uint32_t keep, double now,
                              xf_retention_result *out, xf_errctx *err) XF_WARN_UNUSED;

/* Finishes the removals queued by an earlier prune: a queued blob that is
 * referenced again (a later round produced the same bytes) leaves the
 * queue and stays; the others are unlinked and leave it. Adds to *out (may
 * be NULL). XF_EDB, XF_EIO. */
xf_err xf_retention_collect(xf_db *db, xf_blob_store *blobs, xf_retention_result *out,
                            xf_errctx *err) XF_WARN_UNUSED;

#endif
