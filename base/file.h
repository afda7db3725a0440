/* SPDX-License-Identifier: Apache-2.0 */
/* Durable whole-file writes that replace only regular files and never write
 * through a link: a reader sees the old file or the new one, never part of
 * the new one, even across a crash or power loss. And whole reads of small
 * text files. */
#ifndef XF_BASE_FILE_H
#define XF_BASE_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "base/result.h"

/* The rule for every file xfed writes: what is at the path, if anything,
 * must be a regular file. A symbolic link (dangling or not), a FIFO, a
 * socket, a device node or a directory is refused with XF_EEXISTS naming
 * what it is, and left as it was; nothing is ever written through a link in
 * the last component. Links in the directories above it are followed as
 * usual. The new content goes to a temporary sibling
 * "PATH.tmp-<32 hex>" (created O_EXCL|O_NOFOLLOW, mode 0600 while written),
 * is given the caller's mode, fsynced and renamed over path, and the
 * directory is fsynced: a reader sees the old file or the new one, never
 * part of the new one. The replaced file's mode and owner are not kept: the
 * new file has `mode` (the umask does not apply) and belongs to the writer.
 * The kind of the target is checked when writing starts and again right
 * before the rename. */

/* The kind of file an st_mode describes, for messages: "a regular file",
 * "a directory", "a symbolic link", "a FIFO", "a socket", "a character
 * device", "a block device" or "a special file". Never NULL. */
const char *xf_file_kind(mode_t mode);

/* XF_OK when path is absent or a regular file (its last component not
 * followed); XF_EEXISTS naming what else it is, with how to fix it; XF_EIO
 * when it cannot be inspected (a missing parent is not a failure here: the
 * write reports it). Commands call it before long work (a download,
 * training) so that a wrong --out is refused before the work is spent.
 * err->file is path. */
xf_err xf_file_check_target(const char *path, xf_errctx *err) XF_WARN_UNUSED;

/* Writes len bytes at data (borrowed) to path with permission bits `mode`
 * (0600 for private keys and what only its owner may read, 0644 for models
 * and documents), by the rule above. On failure the temporary file is
 * removed and path is unchanged. XF_EEXISTS for a target that is not a
 * regular file; XF_EIO names the step that failed; XF_ERANGE when the path
 * is too long; XF_ENOMEM. err->file is path. */
xf_err xf_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                            xf_errctx *err) XF_WARN_UNUSED;

/* A file being written by the rule above, for outputs too large to hold in
 * memory (dataset shards, models): begin, write any number of times, then
 * commit or abort. Not safe for concurrent use. */
typedef struct xf_file_writer xf_file_writer;

/* Checks path (as xf_file_check_target) and creates its temporary sibling.
 * *out is owned by the caller until commit or abort, which free it. Errors
 * as xf_file_write_atomic; err->file is path. */
xf_err xf_file_writer_begin(const char *path, mode_t mode, xf_file_writer **out,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Appends len bytes at data (borrowed). Small writes are gathered in a
 * buffer that is wiped when the writer is freed. After a failure (XF_EIO
 * naming the cause) the writer takes no more bytes; commit reports the
 * failure again, and either call frees it. */
xf_err xf_file_writer_write(xf_file_writer *w, const void *data, size_t len,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Makes the written bytes the content of path: mode, fsync, the target's
 * kind checked again, rename, directory fsync. Frees w whatever happens; on
 * failure the temporary file is removed and path is unchanged. */
xf_err xf_file_writer_commit(xf_file_writer *w, xf_errctx *err) XF_WARN_UNUSED;

/* Drops what was written: the temporary file is removed, path is untouched,
 * w is freed. NULL is ignored. */
void xf_file_writer_abort(xf_file_writer *w);

/* Reads the whole of a small file (a policy document, a rule, a case list)
 * into a NUL-terminated buffer the caller frees with xf_free; *len (may be
 * NULL) gets its length. A file above max_bytes is XF_ERANGE (the bound keeps
 * a wrong path — a dataset, a model — out of memory); XF_EIO when it cannot
 * be opened or read; XF_ENOMEM. err->file is path. */
xf_err xf_file_read_text(const char *path, size_t max_bytes, char **text, size_t *len,
                         xf_errctx *err) XF_WARN_UNUSED;

/* fsync of a directory, so that entries created or renamed in it survive a
 * power loss; a filesystem that refuses fsync on directories (EINVAL) is not
 * a failure. Returns 0 or an errno value. */
int xf_file_fsync_dir(const char *dir);
/* fsync of the directory that holds path ("." when path has no '/'). */
int xf_file_fsync_parent(const char *path);

/* XF_FILE_NAME_HEX - 1 random lowercase hex digits (128 bits from the
 * kernel's getrandom) and a terminator, for temporary file names that no
 * other writer will pick. Not key material. XF_EINTERNAL when the kernel's
 * random source cannot be read. */
#define XF_FILE_NAME_HEX 33
xf_err xf_file_random_name(char out[XF_FILE_NAME_HEX], xf_errctx *err) XF_WARN_UNUSED;

#endif
