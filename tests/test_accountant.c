/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests of the Rényi-DP accountant (privacy/accountant.h): the known
 * answers of tests/data/accountant.exp, properties derived independently of
 * them (the two formulas agree, monotonicity, composition, calibration
 * round trips, input checks), and `xfed dp` run as a user runs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "privacy/accountant.h"
#include "support.h"

/* |got - want| <= tol, with both numbers in the failure message. */
#define assert_close(got, want, tol, what)                                                 \
  do {                                                                                     \
    double g__ = (got), w__ = (want), t__ = (tol);                                         \
    if (!(fabs(g__ - w__) <= t__))                                                         \
      fail_msg("%s: got %.17g, want %.17g (tolerance %g)", (what), g__, w__, t__);         \
  } while (0)

static double rdp1(double q, double sigma, double order) {
  double r = -1;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_dp_rdp_sgm(q, sigma, order, &r, &ctx) != XF_OK) fail_msg("rdp: %s", ctx.msg);
  return r;
}

static double series1(double q, double sigma, double order) {
  double r = -1;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_dp_rdp_sgm_series(q, sigma, order, &r, &ctx) != XF_OK) fail_msg("series: %s", ctx.msg);
  return r;
}

static double epsilon_sgm(double q, double sigma, uint64_t steps, double delta, double *order) {
  double eps = -1;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_dp_epsilon_sgm(q, sigma, steps, delta, NULL, 0, XF_DP_CONVERSION_IMPROVED, &eps, order,
                        &ctx) != XF_OK)
    fail_msg("epsilon: %s", ctx.msg);
  return eps;
}

/* ---- known answers ---------------------------------------------------------- */

static void check_rdp_line(const char *line, int lineno) {
  double q, sigma, order, want, tol;
  unsigned long long steps;
  char what[128];
  if (sscanf(line, "rdp %lf %lf %llu %lf %lf %lf", &q, &sigma, &steps, &order, &want, &tol) != 6)
    fail_msg("accountant.exp:%d: malformed rdp line", lineno);
  snprintf(what, sizeof(what), "accountant.exp:%d rdp q=%g sigma=%g steps=%llu order=%g", lineno,
           q, sigma, steps, order);
  double got;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_dp_rdp_steps(q, sigma, steps, &order, 1, &got, &ctx) != XF_OK)
    fail_msg("%s: %s", what, ctx.msg);
  assert_close(got, want, tol, what);
}

static void check_eps_line(const char *line, int lineno) {
  char conv[16], what[128];
  double delta, rdp, want, tol, want_order;
  int first, last;
  if (sscanf(line, "eps %15s %lf %lf %d %d %lf %lf %lf", conv, &delta, &rdp, &first, &last, &want,
             &tol, &want_order) != 8 ||
      first < 2 || last < first || last - first >= 64)
    fail_msg("accountant.exp:%d: malformed eps line", lineno);
  snprintf(what, sizeof(what), "accountant.exp:%d eps %s rdp=%g orders %d..%d", lineno, conv, rdp,
           first, last);
  double orders[64], rdps[64];
  size_t n = 0;
  for (int a = first; a <= last; a++, n++) {
    orders[n] = a;
    rdps[n] = rdp;
  }
  xf_dp_conversion c =
      strcmp(conv, "classic") == 0 ? XF_DP_CONVERSION_CLASSIC : XF_DP_CONVERSION_IMPROVED;
  double eps, order;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  if (xf_dp_epsilon(orders, rdps, n, delta, c, &eps, &order, &ctx) != XF_OK)
    fail_msg("%s: %s", what, ctx.msg);
  assert_close(eps, want, tol, what);
  assert_close(order, want_order, 0, what);
}

static void check_sgm_line(const char *line, int lineno) {
  double q, sigma, delta, want, tol, want_order;
  unsigned long long steps;
  char what[128];
  if (sscanf(line, "sgm %lf %lf %llu %lf %lf %lf %lf", &q, &sigma, &steps, &delta, &want, &tol,
             &want_order) != 7)
    fail_msg("accountant.exp:%d: malformed sgm line", lineno);
  snprintf(what, sizeof(what), "accountant.exp:%d sgm q=%g sigma=%g steps=%llu", lineno, q,
           sigma, steps);
  double order;
  double eps = epsilon_sgm(q, sigma, steps, delta, &order);
  assert_close(eps, want, tol, what);
  assert_close(order, want_order, 0, what);
}

static void known_answers_match_accountant_exp(void **state) {
  (void)state;
  const char *src = getenv("XF_SOURCE_DIR");
  if (!src) fail_msg("XF_SOURCE_DIR is not set; run the test through ctest");
  char path[1024];
  snprintf(path, sizeof(path), "%s/tests/data/accountant.exp", src);
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("cannot open %s", path);
  char line[512];
  int lineno = 0, cases = 0, rdps = 0, epss = 0, sgms = 0;
  while (fgets(line, sizeof(line), f)) {
    lineno++;
    const char *p = line + strspn(line, " \t");
    if (*p == '#' || *p == '\n' || *p == '\0') continue;
    if (strncmp(p, "rdp ", 4) == 0) {
      check_rdp_line(p, lineno);
      rdps++;
    } else if (strncmp(p, "eps ", 4) == 0) {
      check_eps_line(p, lineno);
      epss++;
    } else if (strncmp(p, "sgm ", 4) == 0) {
      check_sgm_line(p, lineno);
      sgms++;
    } else {
      fail_msg("accountant.exp:%d: unknown case '%s'", lineno, p);
    }
    cases++;
  }
  fclose(f);
  /* Guards against a file that silently lost its cases. */
  assert_true(rdps >= 20);
  assert_true(epss >= 4);
  assert_true(sgms >= 2);
  assert_int_equal(cases, rdps + epss + sgms);
}

/* ---- properties ------------------------------------------------------------- */

/* At integer orders the two-part series (the fractional-order formula) ends
 * after order + 1 terms and must give the binomial sum. */
static void series_agrees_with_binomial_sum_at_integer_orders(void **state) {
  (void)state;
  const double qs[] = {1e-4, 0.01, 0.1, 0.5, 0.9};
  const double sigmas[] = {0.5, 0.8, 1.1, 2, 10};
  const double orders[] = {2, 3, 5, 8, 16, 32};
  for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++)
    for (size_t j = 0; j < sizeof(sigmas) / sizeof(sigmas[0]); j++)
      for (size_t k = 0; k < sizeof(orders) / sizeof(orders[0]); k++) {
        double a = rdp1(qs[i], sigmas[j], orders[k]);
        double b = series1(qs[i], sigmas[j], orders[k]);
        char what[96];
        snprintf(what, sizeof(what), "q=%g sigma=%g order=%g", qs[i], sigmas[j], orders[k]);
        assert_close(b, a, 1e-10 * a + 1e-15, what);
      }
}

/* RDP is continuous in the order: just either side of an integer, the series
 * must land on the binomial sum at the integer. */
static void fractional_orders_meet_integer_orders(void **state) {
  (void)state;
  const double orders[] = {2, 3, 7, 20};
  for (size_t k = 0; k < sizeof(orders) / sizeof(orders[0]); k++) {
    double at = rdp1(0.05, 1.0, orders[k]);
    double below = rdp1(0.05, 1.0, orders[k] - 1e-7);
    double above = rdp1(0.05, 1.0, orders[k] + 1e-7);
    assert_true(below <= at && at <= above); /* RDP is non-decreasing in the order */
    assert_close(below, at, 1e-5 * at, "just below an integer order");
    assert_close(above, at, 1e-5 * at, "just above an integer order");
  }
}

static void rdp_grows_with_q_and_order_and_falls_with_sigma(void **state) {
  (void)state;
  const double orders[] = {1.25, 1.5, 2, 2.5, 4, 10, 64};
  for (size_t k = 0; k < sizeof(orders) / sizeof(orders[0]); k++) {
    double prev = 0;
    for (double q = 0.001; q <= 1; q *= 3) {
      double r = rdp1(q, 1.2, orders[k]);
      assert_true(r > prev);
      prev = r;
    }
    prev = INFINITY;
    for (double s = 0.5; s <= 50; s *= 1.7) {
      double r = rdp1(0.02, s, orders[k]);
      assert_true(r < prev);
      prev = r;
    }
    if (k > 0) assert_true(rdp1(0.02, 1.2, orders[k]) > rdp1(0.02, 1.2, orders[k - 1]));
  }
}

static void sampling_rate_limits(void **state) {
  (void)state;
  /* q = 1: the plain Gaussian mechanism, also through the series. */
  assert_close(rdp1(1, 3, 2.5), 2.5 / 18, 1e-15, "q=1");
  assert_close(series1(1, 3, 2.5), 2.5 / 18, 1e-15, "q=1 series");
  /* q = 0: nothing; q -> 0: RDP vanishes like q^2 (MTZ19: about
   * 2 q^2 alpha (e^(1/sigma^2) - 1) / 2 for small q). */
  assert_true(rdp1(0, 1, 3) == 0);
  double small = rdp1(1e-6, 1, 3), smaller = rdp1(1e-7, 1, 3);
  assert_true(small < 1e-10 && smaller < small);
  assert_close(small / smaller, 100, 1e-3, "RDP ~ q^2 as q -> 0");
  assert_true(rdp1(1e-7, 1, 2.5) < 1e-12);
  /* q just below 1 approaches the Gaussian mechanism from below. */
  double near = rdp1(1 - 1e-9, 2, 6);
  assert_true(near <= 6.0 / 8 && near > 6.0 / 8 - 1e-6);
}

static void steps_and_compose_add_rdp(void **state) {
  (void)state;
  const double *orders = xf_dp_default_orders;
  size_t n = XF_DP_DEFAULT_ORDER_COUNT;
  double one[XF_DP_DEFAULT_ORDER_COUNT], t300[XF_DP_DEFAULT_ORDER_COUNT],
      t500[XF_DP_DEFAULT_ORDER_COUNT], total[XF_DP_DEFAULT_ORDER_COUNT];
  assert_int_equal(xf_dp_rdp_steps(0.01, 1.1, 1, orders, n, one, NULL), XF_OK);
  assert_int_equal(xf_dp_rdp_steps(0.01, 1.1, 300, orders, n, t300, NULL), XF_OK);
  assert_int_equal(xf_dp_rdp_steps(0.01, 1.1, 500, orders, n, t500, NULL), XF_OK);
  /* Two jobs (or two runs of rounds) on the same data: 300 + 200 steps. */
  double t200[XF_DP_DEFAULT_ORDER_COUNT];
  assert_int_equal(xf_dp_rdp_steps(0.01, 1.1, 200, orders, n, t200, NULL), XF_OK);
  memcpy(total, t300, sizeof(total));
  assert_int_equal(xf_dp_rdp_compose(total, t200, n, NULL), XF_OK);
  for (size_t i = 0; i < n; i++) {
    assert_close(t300[i], 300 * one[i], 1e-12 * t300[i], "300 steps");
    assert_close(total[i], t500[i], 1e-12 * t500[i], "300 + 200 steps");
  }
  /* Composing a negative value is refused and leaves the total alone. */
  double bad[2] = {0.1, -0.1}, acc[2] = {1, 1};
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_dp_rdp_compose(acc, bad, 2, &ctx), XF_EINVAL);
  assert_non_null(strstr(ctx.msg, "-0.1"));
  assert_true(acc[0] == 1 && acc[1] == 1);
}

static void improved_conversion_never_exceeds_classic(void **state) {
  (void)state;
  const double *orders = xf_dp_default_orders;
  size_t n = XF_DP_DEFAULT_ORDER_COUNT;
  double rdp[XF_DP_DEFAULT_ORDER_COUNT];
  const double sigmas[] = {0.7, 1.1, 4};
  const double deltas[] = {1e-3, 1e-5, 1e-9};
  for (size_t i = 0; i < 3; i++)
    for (size_t j = 0; j < 3; j++) {
      assert_int_equal(xf_dp_rdp_steps(0.02, sigmas[i], 1000, orders, n, rdp, NULL), XF_OK);
      double imp, cla, o;
      assert_int_equal(xf_dp_epsilon(orders, rdp, n, deltas[j], XF_DP_CONVERSION_IMPROVED, &imp,
                                     &o, NULL),
                       XF_OK);
      assert_int_equal(xf_dp_epsilon(orders, rdp, n, deltas[j], XF_DP_CONVERSION_CLASSIC, &cla,
                                     &o, NULL),
                       XF_OK);
      assert_true(imp <= cla);
      assert_true(imp > 0);
    }
  /* Epsilon falls as delta grows and as noise grows. */
  assert_true(epsilon_sgm(0.01, 1.1, 1000, 1e-3, NULL) < epsilon_sgm(0.01, 1.1, 1000, 1e-6, NULL));
  assert_true(epsilon_sgm(0.01, 2.0, 1000, 1e-5, NULL) < epsilon_sgm(0.01, 1.1, 1000, 1e-5, NULL));
}

static void calibrate_round_trips_with_epsilon(void **state) {
  (void)state;
  const struct {
    double target, q, delta;
    uint64_t steps;
  } cases[] = {{3, 0.01, 1e-5, 10000}, {1, 0.004, 1e-5, 5000}, {8, 0.1, 1e-6, 100},
               {0.5, 1, 1e-5, 1},      {10, 0.5, 1e-3, 20}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    double sigma, eps, order;
    xf_errctx ctx;
    xf_errctx_clear(&ctx);
    if (xf_dp_calibrate(cases[i].target, cases[i].q, cases[i].steps, cases[i].delta, &sigma, &eps,
                        &order, &ctx) != XF_OK)
      fail_msg("calibrate case %zu: %s", i, ctx.msg);
    double again, again_order;
    again = epsilon_sgm(cases[i].q, sigma, cases[i].steps, cases[i].delta, &again_order);
    assert_true(again == eps && again_order == order);
    assert_true(eps <= cases[i].target);
    /* The smallest: a little less noise misses the target. */
    double less = epsilon_sgm(cases[i].q, sigma * (1 - 2e-6), cases[i].steps, cases[i].delta,
                              NULL);
    if (!(less > cases[i].target))
      fail_msg("calibrate case %zu: sigma %.9g is not the smallest (%.9g gives %.9g)", i, sigma,
               sigma * (1 - 2e-6), less);
    assert_close(eps, cases[i].target, 1e-4 * cases[i].target, "epsilon near the target");
  }
  /* q = 1, one step: the Gaussian mechanism, whose calibration is known in
   * closed form per order; the default orders make it no better than that. */
  double sigma;
  assert_int_equal(xf_dp_calibrate(0.5, 1, 1, 1e-5, &sigma, NULL, NULL, NULL), XF_OK);
  assert_true(sigma > 5 && sigma < 12);
}

static void calibrate_reports_unreachable_target(void **state) {
  (void)state;
  double sigma = -1;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  assert_int_equal(xf_dp_calibrate(1e-3, 0.5, 10000, 1e-5, &sigma, NULL, NULL, &ctx), XF_ERANGE);
  assert_non_null(strstr(ctx.msg, "out of reach"));
  assert_non_null(strstr(ctx.msg, "1e+06"));
  assert_true(sigma == -1);
}

static void bad_inputs_are_refused_with_the_value(void **state) {
  (void)state;
  double r = 42, o = 2;
  const double orders[] = {2, 1};
  struct {
    xf_err rc;
    const char *needle;
  } got[16];
  size_t n = 0;
  xf_errctx ctx[16];
  for (size_t i = 0; i < 16; i++) xf_errctx_clear(&ctx[i]);
#define TRY(call, text)                                                                    \
  do {                                                                                     \
    got[n].rc = (call);                                                                    \
    got[n].needle = (text);                                                                \
    n++;                                                                                   \
  } while (0)
  TRY(xf_dp_rdp_sgm(-0.1, 1, 2, &r, &ctx[n]), "q = -0.1");
  TRY(xf_dp_rdp_sgm(1.5, 1, 2, &r, &ctx[n]), "q = 1.5");
  TRY(xf_dp_rdp_sgm(NAN, 1, 2, &r, &ctx[n]), "q = nan");
  TRY(xf_dp_rdp_sgm(0.1, 0, 2, &r, &ctx[n]), "sigma = 0");
  TRY(xf_dp_rdp_sgm(0.1, -2, 2, &r, &ctx[n]), "sigma = -2");
  TRY(xf_dp_rdp_sgm(0.1, INFINITY, 2, &r, &ctx[n]), "sigma = inf");
  TRY(xf_dp_rdp_sgm(0.1, 1, 1, &r, &ctx[n]), "order 1 ");
  TRY(xf_dp_rdp_sgm_series(0.1, 1, 0.5, &r, &ctx[n]), "order 0.5");
  TRY(xf_dp_rdp_sgm(0.1, 1, 2e6, &r, &ctx[n]), "order 2e+06");
  TRY(xf_dp_rdp_steps(0.1, 1, 0, orders, 1, &r, &ctx[n]), "steps = 0");
  TRY(xf_dp_rdp_steps(0.1, 1, 5, orders, 2, &r, &ctx[n]), "order 1 ");
  TRY(xf_dp_epsilon(orders, &r, 1, 1, XF_DP_CONVERSION_IMPROVED, &r, &o, &ctx[n]), "delta = 1");
  TRY(xf_dp_epsilon(orders, &r, 1, 0, XF_DP_CONVERSION_CLASSIC, &r, &o, &ctx[n]), "delta = 0");
  TRY(xf_dp_calibrate(0, 0.1, 10, 1e-5, &r, NULL, NULL, &ctx[n]), "target epsilon 0");
  TRY(xf_dp_calibrate(1, 0, 10, 1e-5, &r, NULL, NULL, &ctx[n]), "q = 0");
  TRY(xf_dp_calibrate(1, 0.1, 0, 1e-5, &r, NULL, NULL, &ctx[n]), "steps = 0");
#undef TRY
  for (size_t i = 0; i < n; i++) {
    if (got[i].rc != XF_EINVAL || !strstr(ctx[i].msg, got[i].needle))
      fail_msg("case %zu: got %s '%s', want XF_EINVAL naming '%s'", i, xf_err_name(got[i].rc),
               ctx[i].msg, got[i].needle);
  }
  assert_true(r == 42 && o == 2); /* nothing written on failure */
  /* A negative RDP value handed to the conversion is refused too. */
  double neg = -1e-3, eps;
  assert_int_equal(xf_dp_epsilon(orders, &neg, 1, 1e-5, XF_DP_CONVERSION_IMPROVED, &eps, NULL,
                                 NULL),
                   XF_EINVAL);
}

static void allocation_failure_is_reported(void **state) {
  (void)state;
  double eps;
  xf_errctx ctx;
  xf_errctx_clear(&ctx);
  xf_alloc_fail_after(0);
  xf_err rc = xf_dp_epsilon_sgm(0.01, 1, 10, 1e-5, NULL, 0, XF_DP_CONVERSION_IMPROVED, &eps, NULL,
                                &ctx);
  xf_alloc_fail_reset();
  assert_int_equal(rc, XF_ENOMEM);
}

/* ---- `xfed dp` ---------------------------------------------------------------- */

static char xfed_path[1024];

static void xfed(xf_test_run *r, const char *arg, ...) {
  xf_test_exec_opts o = {.path = xfed_path, .deadline_s = 60};
  va_list ap;
  va_start(ap, arg);
  xf_test_vexec(&o, r, "xfed", arg, ap);
  va_end(ap);
}

static json_t *stdout_json(const xf_test_run *r) {
  json_error_t jerr;
  json_t *j = json_loads(r->out, 0, &jerr);
  if (!j) {
    xf_test_run_show(r);
    fail_msg("%s: stdout is not JSON: %s", r->line, jerr.text);
  }
  return j;
}

static void cli_dp_epsilon_and_calibrate(void **state) {
  (void)state;
  const char *build = getenv("XF_BUILD_DIR");
  if (!build) fail_msg("XF_BUILD_DIR is not set; run the test through ctest");
  snprintf(xfed_path, sizeof(xfed_path), "%s/cli/xfed", build);
  if (access(xfed_path, X_OK) != 0) fail_msg("%s is not an executable", xfed_path);
  xf_test_run r = {0};

  /* q = 0.1, sigma = 2, 10 steps at order 5: RDP 0.0773696848979587, so
   * epsilon = 0.0773696848979587 + log(4/5) - (log(1e-5) + log(5)) / 4 =
   * 2.3300980217177809 (mpmath) by the improved conversion, and
   * 0.0773696848979587 - log(1e-5) / 4 = 2.9556010511405158 by the classic. */
  xfed(&r, "dp", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "2", "--steps", "10",
       "--delta", "1e-5", "--orders", "5", "--json", NULL);
  if (r.status != 0) {
    xf_test_run_show(&r);
    fail_msg("%s: exit %d", r.line, r.status);
  }
  json_t *j = stdout_json(&r);
  assert_close(json_number_value(json_object_get(j, "epsilon")), 2.3300980217177809, 1e-12,
               "cli epsilon");
  assert_close(json_number_value(json_object_get(j, "order")), 5, 0, "cli order");
  json_decref(j);

  xfed(&r, "dp", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "2", "--steps", "10",
       "--delta", "1e-5", "--orders", "2,5", "--conversion", "classic", "--json", NULL);
  assert_int_equal(r.status, 0);
  j = stdout_json(&r);
  assert_close(json_number_value(json_object_get(j, "epsilon")), 2.9556010511405158, 1e-12,
               "cli classic epsilon");
  json_decref(j);

  /* Default orders, the setting of accountant.exp's first sgm case. */
  xfed(&r, "dp", "epsilon", "--json", "--sampling-rate", "0.01", "--noise-multiplier", "1.1",
       "--steps", "10000", "--delta", "1e-5", NULL);
  assert_int_equal(r.status, 0);
  j = stdout_json(&r);
  assert_close(json_number_value(json_object_get(j, "epsilon")), 5.654308000149489, 1e-9,
               "cli default orders");
  assert_close(json_number_value(json_object_get(j, "order")), 5, 0, "cli default order");
  json_decref(j);

  xfed(&r, "dp", "calibrate", "--target-epsilon", "3", "--sampling-rate", "0.01", "--steps",
       "10000", "--delta", "1e-5", "--json", NULL);
  assert_int_equal(r.status, 0);
  j = stdout_json(&r);
  double sigma = json_number_value(json_object_get(j, "noise_multiplier"));
  double eps = json_number_value(json_object_get(j, "epsilon"));
  assert_true(eps <= 3 && eps > 3 - 1e-4);
  assert_close(sigma, 1.66465, 1e-5, "cli calibrate");
  json_decref(j);

  /* Text output names epsilon and the order. */
  xfed(&r, "dp", "epsilon", "--sampling-rate", "1", "--noise-multiplier", "10", "--steps", "1",
       "--delta", "1e-5", "--orders", "20", NULL);
  assert_int_equal(r.status, 0);
  assert_non_null(strstr(r.out, "epsilon"));
  assert_non_null(strstr(r.out, "order 20"));

  /* Usage errors: exit 2, naming the flag. */
  xfed(&r, "dp", "epsilon", "--sampling-rate", "1.5", "--noise-multiplier", "1", "--steps", "1",
       "--delta", "1e-5", NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--sampling-rate"));
  xfed(&r, "dp", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "1",
       NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--delta"));
  xfed(&r, "dp", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1x", "--steps", "1",
       "--delta", "1e-5", NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--noise-multiplier"));
  xfed(&r, "dp", "epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--steps", "1",
       "--delta", "1e-5", "--orders", "2,,3", NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--orders"));
  xfed(&r, "dp", "calibrate", "--target-epsilon", "1", "--sampling-rate", "0.1", "--steps", "0",
       "--delta", "1e-5", NULL);
  assert_int_equal(r.status, 2);
  assert_non_null(strstr(r.err, "--steps"));
  /* An unreachable target is an error of the accountant: exit 1. */
  xfed(&r, "dp", "calibrate", "--target-epsilon", "0.001", "--sampling-rate", "0.5", "--steps",
       "10000", "--delta", "1e-5", NULL);
  assert_int_equal(r.status, 1);
  assert_non_null(strstr(r.err, "out of reach"));
  xf_test_run_free(&r);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(known_answers_match_accountant_exp),
      cmocka_unit_test(series_agrees_with_binomial_sum_at_integer_orders),
      cmocka_unit_test(fractional_orders_meet_integer_orders),
      cmocka_unit_test(rdp_grows_with_q_and_order_and_falls_with_sigma),
      cmocka_unit_test(sampling_rate_limits),
      cmocka_unit_test(steps_and_compose_add_rdp),
      cmocka_unit_test(improved_conversion_never_exceeds_classic),
      cmocka_unit_test(calibrate_round_trips_with_epsilon),
      cmocka_unit_test(calibrate_reports_unreachable_target),
      cmocka_unit_test(bad_inputs_are_refused_with_the_value),
      cmocka_unit_test(allocation_failure_is_reported),
      cmocka_unit_test(cli_dp_epsilon_and_calibrate),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
