/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the database and the blob store: failures that name the
 * file at fault, thread-safe errno text, directory fsync, random names. */
#ifndef XF_STORAGE_INTERNAL_H
#define XF_STORAGE_INTERNAL_H

#include <stddef.h>

#include "base/result.h"

/* Like xf_fail, and also records `path` as the file at fault and clears a
 * field left over from an earlier failure. Returns code; err may be NULL. */
xf_err xf__storage_fail(xf_errctx *err, const char *path, xf_err code, const char *fmt,
                        ...) XF_PRINTF(4, 5);

/* The message of errno value e, written to buf (strerror's static buffer is
 * not safe across threads). Returns buf. */
const char *xf__storage_errno(int e, char *buf, size_t n);

/* fsync of a directory, so that entries created or renamed in it survive a
 * power loss. Return 0 or an errno value. */
int xf__storage_fsync_dir(const char *dir);
/* fsync of the directory that holds `path` ("." when path has no '/'). */
int xf__storage_fsync_parent(const char *path);

/* XF_STORAGE_NAME_HEX - 1 random lowercase hex digits and a terminator, for
 * temporary file names that no other writer will pick (128 bits). XF_EINTERNAL
 * when libsodium cannot start. */
#define XF_STORAGE_NAME_HEX 33
xf_err xf__storage_random_name(char out[XF_STORAGE_NAME_HEX], xf_errctx *err) XF_WARN_UNUSED;

#endif
