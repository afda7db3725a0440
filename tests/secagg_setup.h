/* SPDX-License-Identifier: Apache-2.0 */
/* The secure-aggregation setup a coordinator's Go carries, for the site's
 * tests: a cohort of up to four named sites, this site at index 1, every
 * site needed (threshold n), a fixed graph seed and the quantizer of the
 * plain-model tests. Header-only: the tests that use it link no common file
 * beyond tests/support.c, which needs no protobuf. */
#ifndef XF_TESTS_SECAGG_SETUP_H
#define XF_TESTS_SECAGG_SETUP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "net/xfed.pb-c.h"

static char *xf_test_cohort_names[] = {"eu-berlin", "eu-paris", "eu-rome", "eu-oslo"};

/* Fills *su for a cohort of the first n names; `seed` (32 bytes, the
 * caller's) holds the graph seed *su points to. */
static inline void xf_test_secagg_setup(Xfed__SecAggSetup *su, uint8_t seed[32], uint32_t n) {
  Xfed__SecAggSetup init = XFED__SEC_AGG_SETUP__INIT;
  *su = init;
  assert_true(n <= sizeof(xf_test_cohort_names) / sizeof(xf_test_cohort_names[0]));
  su->n_cohort = n;
  su->cohort = xf_test_cohort_names;
  for (int i = 0; i < 32; i++) seed[i] = (uint8_t)(3 * i + 1);
  su->n = n;
  su->index = 1;
  su->threshold = n;
  su->bits = 20;
  su->degree = n - 1;
  su->graph_seed.data = seed;
  su->graph_seed.len = 32;
  su->step = 1e-4;
  su->bound = 1000;
  su->scale = 0.5;
}

#endif
