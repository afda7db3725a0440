/* SPDX-License-Identifier: Apache-2.0 */
/* Durable whole-file writes: a reader sees the old file or the new one, never
 * part of the new one, even across a crash or power loss. And whole reads of
 * small text files. */
#ifndef XF_STORAGE_FILE_H
#define XF_STORAGE_FILE_H

#include <stddef.h>
#include <sys/types.h>

#include "base/result.h"

/* Writes len bytes at data (borrowed) to path with permission bits `mode`
 * (e.g. 0600 for private keys, 0644 for models): a temporary file with a
 * random name in the same directory, written, fsynced, renamed over path,
 * and the directory fsynced. On failure the temporary file is removed and
 * path is unchanged. XF_EIO names the step that failed; XF_ERANGE when the
 * path is too long. err->file is path. */
xf_err xf_file_write_atomic(const char *path, const void *data, size_t len, mode_t mode,
                            xf_errctx *err) XF_WARN_UNUSED;

/* Reads the whole of a small file (a policy document, a rule, a case list)
 * into a NUL-terminated buffer the caller frees with xf_free; *len (may be
 * NULL) gets its length. A file above max_bytes is XF_ERANGE (the bound keeps
 * a wrong path — a dataset, a model — out of memory); XF_EIO when it cannot
 * be opened or read; XF_ENOMEM. err->file is path. */
xf_err xf_file_read_text(const char *path, size_t max_bytes, char **text, size_t *len,
                         xf_errctx *err) XF_WARN_UNUSED;

#endif
