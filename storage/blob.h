/* SPDX-License-Identifier: Apache-2.0 */
/* Content-addressed blob store for model checkpoints: each blob is a file
 * named by the BLAKE2b-256 digest of its bytes, written temp-then-rename so
 * that a crash never leaves a partial blob visible under a digest. */
#ifndef XF_STORAGE_BLOB_H
#define XF_STORAGE_BLOB_H

#include <stdbool.h>
#include <stddef.h>

#include "base/result.h"
#include "crypto/digest.h"

/* A store rooted at one directory. Layout:
 *   DIR/tmp/<32 hex>.part   blobs being written (private to their writer)
 *   DIR/<2 hex>/<62 hex>    committed blobs, read-only (0400), named by the
 *                           lowercase hex digest split after two digits
 * A store is immutable once open, so threads may share it; several
 * processes may open one directory at once. */
typedef struct xf_blob_store xf_blob_store;

/* One blob being written. Used by one thread at a time. */
typedef struct xf_blob_writer xf_blob_writer;

/* Opens the store at `dir`, creating dir and dir/tmp (mode 0700; the parent
 * of dir must exist) when absent. Removes temporary files that writers left
 * behind when they crashed; files of live writers (in this or another
 * process) are kept, as each writer holds a lock on its file. XF_EIO names
 * the directory that cannot be created or read; XF_ENOMEM when out of
 * memory. On success the caller owns *out and releases it with
 * xf_blob_store_close; on failure *out is NULL. */
xf_err xf_blob_store_open(const char *dir, xf_blob_store **out, xf_errctx *err) XF_WARN_UNUSED;

/* Releases the store; NULL is allowed. Every writer begun on the store must
 * have been committed or aborted first. */
void xf_blob_store_close(xf_blob_store *store);

/* Starts a blob: creates a new temporary file with a random name (O_EXCL)
 * in dir/tmp. On success the caller owns *out and ends it with exactly one
 * xf_blob_writer_commit or xf_blob_writer_abort; on failure *out is NULL.
 * XF_EIO / XF_ENOMEM. */
xf_err xf_blob_writer_begin(xf_blob_store *store, xf_blob_writer **out,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Appends n bytes (data is borrowed for the call) and hashes them. On
 * failure (XF_EIO, e.g. a full disk) the writer is spoiled: only
 * xf_blob_writer_abort remains, and commit refuses. */
xf_err xf_blob_writer_write(xf_blob_writer *w, const void *data, size_t n,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Finishes the blob: flushes the file to disk, renames it to its digest's
 * path and flushes the directories, then stores the digest in *out. If an
 * intact blob with that digest already exists the new file is discarded and
 * the call succeeds (content addressing makes commits idempotent); a damaged
 * one is replaced. Consumes w whether it succeeds or fails; on failure no
 * blob became visible. XF_EIO / XF_ENOMEM. */
xf_err xf_blob_writer_commit(xf_blob_writer *w, xf_digest *out, xf_errctx *err) XF_WARN_UNUSED;

/* Discards the blob and its temporary file and releases w; NULL is allowed. */
void xf_blob_writer_abort(xf_blob_writer *w);

/* One-shot begin, write, commit of n bytes at data (borrowed). */
xf_err xf_blob_put(xf_blob_store *store, const void *data, size_t n, xf_digest *out,
                   xf_errctx *err) XF_WARN_UNUSED;

/* Reads the blob named by digest into a new buffer and re-hashes it. On
 * success the caller owns *data (*n bytes; at least one byte is allocated,
 * so *data is not NULL for an empty blob) and frees it with xf_free. On
 * failure *data is NULL and *n is 0: XF_ENOENT when no such blob exists,
 * XF_EINTEGRITY (naming the file) when its bytes no longer match the digest,
 * i.e. bit rot or tampering, XF_EIO, XF_ENOMEM. */
xf_err xf_blob_get(xf_blob_store *store, const xf_digest *digest, void **data, size_t *n,
                   xf_errctx *err) XF_WARN_UNUSED;

/* Whether a committed blob file exists under digest. Does not read it: use
 * xf_blob_get to check its content. */
bool xf_blob_exists(const xf_blob_store *store, const xf_digest *digest);

/* Removes the blob named by digest, if there is one, and flushes its shard
 * directory so that the removal survives a power loss. A blob already gone
 * is not an error: removing is idempotent, so a caller that crashed half-way
 * through a list of removals can run the list again. The caller must know
 * that nothing still refers to the blob (coordinator/retention.h decides
 * that for checkpoints). XF_EIO names the file that cannot be removed. */
xf_err xf_blob_remove(xf_blob_store *store, const xf_digest *digest, xf_errctx *err) XF_WARN_UNUSED;

/* Writes the path of digest's blob (whether or not it exists) to buf, which
 * holds n bytes. XF_ERANGE when the path does not fit. */
xf_err xf_blob_path(const xf_blob_store *store, const xf_digest *digest, char *buf,
                    size_t n) XF_WARN_UNUSED;

#endif
