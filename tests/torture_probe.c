/* SPDX-License-Identifier: Apache-2.0 */
/* A program for the torture to refuse (tests/torture.cmake): an error path
 * that, as XF_TORTURE_PROBE says, frees what it took (unset), drops it
 * ("leak") or writes through the pointer whose allocation failed ("crash").
 * Run plainly, its one test passes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/result.h"

static const char *probe;

/* Two buffers, both or neither: on failure *a and *b are NULL. */
static xf_err pair_make(char **a, char **b) {
  *b = NULL;
  *a = xf_malloc(16);
  if (!*a) return XF_ENOMEM;
  *b = xf_malloc(16);
  if (!*b) {
    if (strcmp(probe, "crash") == 0) {
      volatile char *volatile broken = *b;
      broken[0] = 1;
    }
    if (strcmp(probe, "leak") != 0) xf_free(*a);
    *a = NULL;
    return XF_ENOMEM;
  }
  return XF_OK;
}

static void a_pair_is_made_whole(void **state) {
  (void)state;
  char *a, *b;
  assert_int_equal(pair_make(&a, &b), XF_OK);
  xf_free(a);
  xf_free(b);
}

int main(void) {
  probe = getenv("XF_TORTURE_PROBE");
  if (!probe) probe = "";
  const struct CMUnitTest tests[] = {cmocka_unit_test(a_pair_is_made_whole)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
