/* SPDX-License-Identifier: Apache-2.0 */
/* The Prometheus text exposition writer (http/prom.h): escaping, value
 * spelling, and histograms with cumulative buckets, +Inf, _sum and _count. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "http/prom.h"

static char *take(xf_prom *p) {
  size_t len = 0;
  char *s = xf_prom_take(p, &len);
  assert_non_null(s);
  assert_int_equal(strlen(s), len);
  return s;
}

static void prom_escapes_help_and_label_values(void **state) {
  (void)state;
  xf_prom p = {0};
  xf_prom_family(&p, "xfed_x_total", "counter", "a \\ b\nc \"q\"");
  const char *labels[] = {"dataset", "a\"b\\c\nd", "kind", "site", NULL};
  xf_prom_sample(&p, "xfed_x_total", labels, 3);
  char *s = take(&p);
  assert_string_equal(s, "# HELP xfed_x_total a \\\\ b\\nc \"q\"\n"
                         "# TYPE xfed_x_total counter\n"
                         "xfed_x_total{dataset=\"a\\\"b\\\\c\\nd\",kind=\"site\"} 3\n");
  xf_free(s);
}

static void prom_spells_values_as_prometheus_reads_them(void **state) {
  (void)state;
  xf_prom p = {0};
  xf_prom_sample(&p, "a", NULL, 0.1);
  xf_prom_sample(&p, "b", NULL, 12345678901234.0);
  xf_prom_sample(&p, "c", NULL, NAN);
  xf_prom_sample(&p, "d", NULL, INFINITY);
  xf_prom_sample(&p, "e", NULL, -INFINITY);
  xf_prom_sample(&p, "f", NULL, 1.0 / 3.0);
  char *s = take(&p);
  assert_string_equal(s, "a 0.1\nb 12345678901234\nc NaN\nd +Inf\ne -Inf\n"
                         "f 0.33333333333333331\n");
  xf_free(s);
}

static void prom_histogram_buckets_are_cumulative_with_inf_sum_and_count(void **state) {
  (void)state;
  static const double bounds[] = {0.5, 1, 2.5};
  xf_prom_hist h;
  xf_prom_hist_init(&h, bounds, 3);
  xf_prom_hist_observe(&h, 0.25); /* le 0.5 */
  xf_prom_hist_observe(&h, 1);    /* le 1: a bound is inclusive */
  xf_prom_hist_observe(&h, 2);    /* le 2.5 */
  xf_prom_hist_observe(&h, 10);   /* only +Inf */
  xf_prom_hist_observe(&h, 0.5);
  xf_prom p = {0};
  const char *labels[] = {"job", "7", NULL};
  xf_prom_histogram(&p, "xfed_round_duration_seconds", labels, &h);
  char *s = take(&p);
  assert_string_equal(s, "xfed_round_duration_seconds_bucket{job=\"7\",le=\"0.5\"} 2\n"
                         "xfed_round_duration_seconds_bucket{job=\"7\",le=\"1\"} 3\n"
                         "xfed_round_duration_seconds_bucket{job=\"7\",le=\"2.5\"} 4\n"
                         "xfed_round_duration_seconds_bucket{job=\"7\",le=\"+Inf\"} 5\n"
                         "xfed_round_duration_seconds_sum{job=\"7\"} 13.75\n"
                         "xfed_round_duration_seconds_count{job=\"7\"} 5\n");
  xf_free(s);
  /* Without labels, le is the only one. */
  xf_prom_hist e;
  xf_prom_hist_init(&e, bounds, 1);
  xf_prom_histogram(&p, "h", NULL, &e);
  s = take(&p);
  assert_string_equal(s, "h_bucket{le=\"0.5\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
  xf_free(s);
}

static void prom_reports_a_failed_allocation_as_no_body(void **state) {
  (void)state;
  xf_prom p = {0};
  xf_alloc_fail_after(0);
  xf_prom_sample(&p, "a", NULL, 1);
  xf_alloc_fail_reset();
  xf_prom_sample(&p, "b", NULL, 2);
  size_t len = 1;
  assert_null(xf_prom_take(&p, &len));
  assert_int_equal(len, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(prom_escapes_help_and_label_values),
      cmocka_unit_test(prom_spells_values_as_prometheus_reads_them),
      cmocka_unit_test(prom_histogram_buckets_are_cumulative_with_inf_sum_and_count),
      cmocka_unit_test(prom_reports_a_failed_allocation_as_no_body),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
