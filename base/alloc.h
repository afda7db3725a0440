/* SPDX-License-Identifier: Apache-2.0 */
/* The one allocation wrapper of xfed. Every heap allocation outside third-party
 * libraries goes through it, so tests can make the n-th allocation fail and
 * check that every error path frees what it took and reports XF_ENOMEM. */
#ifndef XF_BASE_ALLOC_H
#define XF_BASE_ALLOC_H

#include <stddef.h>

/* Like malloc/calloc/realloc/free/strdup; return NULL on failure (including an
 * injected one). xf_calloc and xf_mallocarray check n * size for overflow. The
 * caller owns the result and releases it with xf_free. */
void *xf_malloc(size_t size);
void *xf_calloc(size_t n, size_t size);
void *xf_mallocarray(size_t n, size_t size);
void *xf_realloc(void *ptr, size_t size);
char *xf_strdup(const char *s);
void xf_free(void *ptr);

/* 64-byte aligned memory for vectorized kernels, released with
 * xf_aligned_free (not xf_free). */
void *xf_aligned_alloc(size_t size);
void xf_aligned_free(void *ptr);

/* Testing hook: after `n` more successful allocations, every allocation fails
 * until xf_alloc_fail_reset(). Thread-safe. n < 0 disables the injection. */
void xf_alloc_fail_after(long n);
void xf_alloc_fail_reset(void);
/* Number of allocations made through the wrapper since start-up. */
unsigned long xf_alloc_count(void);

/* Torture mode (tests/torture.sh, docs/development.md), read once from the
 * environment before main and then removed from it, so that programs this
 * process starts run without it:
 *   XF_ALLOC_FAIL_AT=n     the n-th allocation since start-up (counting from
 *                          1, in the order xf_alloc_count counts) fails, once;
 *                          every other allocation succeeds. Independent of
 *                          xf_alloc_fail_after, which keeps working.
 *   XF_ALLOC_COUNT_FILE=p  at a normal exit, xf_alloc_count() is written to
 *                          the file p as a decimal number and a newline.
 * Only allocations through this wrapper are counted and failed: third-party
 * libraries (SQLite, OpenSSL, jansson, cmocka) allocate with their own. */
/* The n of XF_ALLOC_FAIL_AT, or 0 when the mode is off. */
unsigned long xf_alloc_fail_at(void);

#endif
