/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers every test executable links: scratch directories that are removed
 * even when a test fails. */
#ifndef XF_TESTS_SUPPORT_H
#define XF_TESTS_SUPPORT_H

#include <stddef.h>

/* Creates a fresh directory "$TMPDIR/xf-NAME-XXXXXX" (TMPDIR defaults to
 * /tmp) and writes its path to buf (n bytes). Returns 0, or -1 on failure. */
int xf_test_mkdtemp(char *buf, size_t n, const char *name);

/* Removes path and, for a directory, everything below it, without following
 * symbolic links. Missing paths are ignored. */
void xf_test_remove_tree(const char *path);

#endif
