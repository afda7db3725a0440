/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the database and the blob store: failures that name the
 * file at fault, thread-safe errno text; directory fsync and random names
 * from base/file.h. */
#ifndef XF_STORAGE_INTERNAL_H
#define XF_STORAGE_INTERNAL_H

#include <stddef.h>

#include "base/file.h"
#include "base/result.h"

/* Like xf_fail, and also records `path` as the file at fault and clears a
 * field left over from an earlier failure. Returns code; err may be NULL. */
xf_err xf__storage_fail(xf_errctx *err, const char *path, xf_err code, const char *fmt,
                        ...) XF_PRINTF(4, 5);

/* The message of errno value e, written to buf (strerror's static buffer is
 * not safe across threads). Returns buf. */
const char *xf__storage_errno(int e, char *buf, size_t n);

/* base/file.h's directory fsyncs and random names, by the names the
 * database and the blob store call them. */
#define XF_STORAGE_NAME_HEX XF_FILE_NAME_HEX
static inline int xf__storage_fsync_dir(const char *dir) { return xf_file_fsync_dir(dir); }
static inline int xf__storage_fsync_parent(const char *path) {
  return xf_file_fsync_parent(path);
}
static inline xf_err xf__storage_random_name(char out[XF_STORAGE_NAME_HEX],
                                             xf_errctx *err) XF_WARN_UNUSED;
static inline xf_err xf__storage_random_name(char out[XF_STORAGE_NAME_HEX], xf_errctx *err) {
  return xf_file_random_name(out, err);
}

#endif
