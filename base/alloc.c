/* SPDX-License-Identifier: Apache-2.0 */
/* Allocation wrapper with failure injection for tests. */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static atomic_long xf__fail_budget = -1; /* < 0: never fail */
static atomic_ulong xf__count;

/* Decides whether this allocation is allowed: counts it and consumes one unit
 * of the injected budget when a budget is set. */
static int xf__alloc_allowed(void) {
  atomic_fetch_add(&xf__count, 1);
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
