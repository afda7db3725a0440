/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation wrapper with failure injection for tests. */
#include "base/alloc.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_long xf__fail_budget = -1; /* < 0: never fail */
static atomic_ulong xf__count;
static unsigned long xf__fail_at;  /* XF_ALLOC_FAIL_AT; 0: off */
static char *xf__count_file;       /* XF_ALLOC_COUNT_FILE; NULL: off */

static void xf__write_count(void) {
  FILE *f = fopen(xf__count_file, "w");
  if (!f) return;
  fprintf(f, "%lu\n", xf_alloc_count());
  fclose(f);
}

/* Reads the torture-mode variables before any constructor of default
 * priority (tests' own included) can allocate, so the count starts at the
 * first allocation of the program. Invalid values leave the mode off. */
__attribute__((constructor(101))) static void xf__alloc_read_env(void) {
  const char *at = getenv("XF_ALLOC_FAIL_AT");
  if (at && *at) {
    char *end;
    errno = 0;
    unsigned long n = strtoul(at, &end, 10);
    if (errno == 0 && *end == '\0' && at[0] != '-') xf__fail_at = n;
  }
  const char *file = getenv("XF_ALLOC_COUNT_FILE");
  /* strdup, not xf_strdup: this copy is not one of the program's counted
   * allocations. */
  if (file && *file && (xf__count_file = strdup(file)) != NULL) atexit(xf__write_count);
  unsetenv("XF_ALLOC_FAIL_AT");
  unsetenv("XF_ALLOC_COUNT_FILE");
}

/* Decides whether this allocation is allowed: counts it, fails the one
 * XF_ALLOC_FAIL_AT names, and consumes one unit of the injected budget when a
 * budget is set. */
static int xf__alloc_allowed(void) {
  unsigned long nth = atomic_fetch_add(&xf__count, 1) + 1;
  if (nth == xf__fail_at) return 0;
  long budget = atomic_load(&xf__fail_budget);
  while (budget >= 0) {
    if (budget == 0) return 0;
    if (atomic_compare_exchange_weak(&xf__fail_budget, &budget, budget - 1))
      return 1;
  }
  return 1;
}

void xf_alloc_fail_after(long n) { atomic_store(&xf__fail_budget, n < 0 ? -1 : n); }
void xf_alloc_fail_reset(void) { atomic_store(&xf__fail_budget, -1); }
unsigned long xf_alloc_count(void) { return atomic_load(&xf__count); }
unsigned long xf_alloc_fail_at(void) { return xf__fail_at; }

void *xf_malloc(size_t size) {
  if (!xf__alloc_allowed()) return NULL;
  return malloc(size ? size : 1);
}

void *xf_calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  if (!xf__alloc_allowed()) return NULL;
  return calloc(n ? n : 1, size ? size : 1);
}

void *xf_mallocarray(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  return xf_malloc(n * size);
}

void *xf_realloc(void *ptr, size_t size) {
  if (!xf__alloc_allowed()) return NULL;
  return realloc(ptr, size ? size : 1);
}

char *xf_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = xf_malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void xf_free(void *ptr) { free(ptr); }

void *xf_aligned_alloc(size_t size) {
  if (!xf__alloc_allowed()) return NULL;
  void *p = NULL;
  if (posix_memalign(&p, 64, size ? size : 64) != 0) return NULL;
  return p;
}

void xf_aligned_free(void *ptr) { free(ptr); }
