/* SPDX-License-Identifier: Apache-2.0 */
/* The Rényi-DP accountant of the Poisson-subsampled Gaussian mechanism:
 * per-step RDP (Mironov, Talwar, Zhang 2019), composition, conversion to
 * (epsilon, delta) and calibration of the noise multiplier. */
#include "privacy/accountant.h"

#include <math.h>

#include "base/alloc.h"

const double xf_dp_default_orders[XF_DP_DEFAULT_ORDER_COUNT] = {
    1.25, 1.5, 1.75, 2,  2.25, 2.5, 3,  4,  5,  6,  7,  8,  9,  10, 11,  12,  13, 14,
    15,   16,  17,   18, 19,   20,  21, 22, 23, 24, 25, 26, 27, 28, 29,  30,  31, 32,
    33,   34,  35,   36, 37,   38,  39, 40, 41, 42, 43, 44, 45, 46, 47,  48,  49, 50,
    51,   52,  53,   54, 55,   56,  57, 58, 59, 60, 61, 62, 63, 64, 128, 256};

/* The series is summed until its next terms are below this fraction of the
 * sum. Past the order the terms alternate in sign and shrink, so the part
 * left out is smaller than the first term left out: at 1e-16 the truncation
 * is below the rounding of the sum itself (well inside the 1e-12 relative
 * the accountant promises for A). What remains is that rounding: A is near 1
 * when the RDP log(A) / (order - 1) is near 0, so RDP values are known to
 * about 1e-15 absolute, not relative. */
#define SERIES_TOLERANCE 1e-16
/* Far beyond the terms any valid input needs (the slowest case, q near 1/2
 * with a noise multiplier near 1e6 at order 1.25, needs about 2 million):
 * a bound that turns a bug into an error rather than a hang. */
#define SERIES_MAX_TERMS 100000000L

/* ---- input checks -------------------------------------------------------- */

static xf_err check_q(double q, xf_errctx *ctx) {
  XF_ENSURE(q >= 0 && q <= 1, ctx, XF_EINVAL, "sampling rate q = %g is outside [0, 1]", q);
  return XF_OK;
}

static xf_err check_sigma(double sigma, xf_errctx *ctx) {
  XF_ENSURE(sigma > 0 && isfinite(sigma), ctx, XF_EINVAL,
            "noise multiplier sigma = %g must be above 0 and finite", sigma);
  return XF_OK;
}

static xf_err check_order(double order, xf_errctx *ctx) {
  XF_ENSURE(order > 1 && order <= XF_DP_MAX_ORDER, ctx, XF_EINVAL,
            "order %g must be above 1 and at most %g", order, XF_DP_MAX_ORDER);
  return XF_OK;
}

static xf_err check_delta(double delta, xf_errctx *ctx) {
  XF_ENSURE(delta > 0 && delta < 1, ctx, XF_EINVAL, "delta = %g is outside (0, 1)", delta);
  return XF_OK;
}

static xf_err check_steps(uint64_t steps, xf_errctx *ctx) {
  XF_ENSURE(steps >= 1, ctx, XF_EINVAL, "steps = 0: at least one step is needed");
  return XF_OK;
}

static xf_err check_orders(const double *orders, size_t n, xf_errctx *ctx) {
  XF_ENSURE(orders && n >= 1, ctx, XF_EINVAL, "the list of orders is empty");
  for (size_t i = 0; i < n; i++) XF_GUARD(check_order(orders[i], ctx));
  return XF_OK;
}

/* ---- log-space arithmetic ------------------------------------------------ */

/* log(erfc(x)) without underflow. Below 20, erfc itself is a normal double
 * with full relative accuracy. From 20 on, the asymptotic expansion
 * erfc(x) = exp(-x^2) / (x sqrt(pi)) * sum_n (-1)^n (2n-1)!! / (2x^2)^n,
 * whose sixth term is below 1e-15 there. */
static double log_erfc(double x) {
  if (x < 20) return log(erfc(x));
  double r = 1 / (2 * x * x), term = 1, sum = 1;
  for (int n = 1; n <= 6; n++) {
    term *= -(2 * n - 1) * r;
    sum += term;
  }
  return -x * x - log(x) - 0.5 * log(M_PI) + log(sum);
}

/* A sum of signed terms given by their logarithms, kept as
 * exp(lmax) * s with lmax the largest logarithm seen, so nothing overflows. */
typedef struct log_sum {
  double lmax;
  double s;
} log_sum;

static void log_sum_add(log_sum *a, double log_term, int sign) {
  if (log_term == -INFINITY) return;
  if (log_term > a->lmax) {
    a->s = a->s * exp(a->lmax - log_term) + sign;
    a->lmax = log_term;
  } else {
    a->s += sign * exp(log_term - a->lmax);
  }
}

/* log of the sum, or NAN when it is not positive. */
static double log_sum_value(const log_sum *a) {
  if (a->lmax == INFINITY) return INFINITY;
  return a->s > 0 ? a->lmax + log(a->s) : NAN;
}

/* ---- the sampled Gaussian mechanism ------------------------------------- */

/* log A_alpha at an integer order (MTZ19, Section 3.2):
 * A = sum_{k=0}^{a} C(a,k) (1-q)^(a-k) q^k exp((k^2 - k) / (2 sigma^2)).
 * Two passes: the largest term first, then the others relative to it, so
 * that log A = lmax + log1p(rest) keeps small RDP values accurate. 0 < q < 1. */
static double log_a_int(double q, double sigma, long a) {
  double lq = log(q), l1q = log1p(-q), s2 = 2 * sigma * sigma;
  double lmax = -INFINITY;
  long kmax = 0;
  double lcoef = 0; /* log C(a, k), built up term by term */
  for (long k = 0; k <= a; k++) {
    if (k > 0) lcoef += log((double)(a - k + 1)) - log((double)k);
    double kd = (double)k;
    double t = lcoef + (double)(a - k) * l1q + kd * lq + (kd * kd - kd) / s2;
    if (t > lmax) {
      lmax = t;
      kmax = k;
    }
  }
  if (lmax == INFINITY || isnan(lmax)) return INFINITY;
  double rest = 0;
  lcoef = 0;
  for (long k = 0; k <= a; k++) {
    if (k > 0) lcoef += log((double)(a - k + 1)) - log((double)k);
    if (k == kmax) continue;
    double kd = (double)k;
    double t = lcoef + (double)(a - k) * l1q + kd * lq + (kd * kd - kd) / s2;
    rest += exp(t - lmax);
  }
  return lmax + log1p(rest);
}

/* log A_alpha by the two-part series of MTZ19, Section 3.3, at any order
 * a > 1 (0 < q < 1). With z0 = sigma^2 log(1/q - 1) + 1/2, A = A0 + A1,
 *   A0 = sum_i C(a,i) q^i (1-q)^(a-i) exp((i^2-i)/(2 sigma^2))
 *        * erfc((i - z0) / (sqrt(2) sigma)) / 2
 *   A1 = sum_i C(a,i) q^(a-i) (1-q)^i exp(((a-i)^2-(a-i))/(2 sigma^2))
 *        * erfc((z0 - (a-i)) / (sqrt(2) sigma)) / 2
 * with the generalized binomial coefficient C(a,i), whose sign alternates
 * once i > a. At an integer order C(a,i) is 0 past i = a and the sums end. */
static xf_err log_a_series(double q, double sigma, double a, double *out, xf_errctx *ctx) {
  double lq = log(q), l1q = log1p(-q), s2 = 2 * sigma * sigma;
  double z0 = sigma * sigma * (l1q - lq) + 0.5;
  double erfc_scale = M_SQRT2 * sigma, lhalf = log(0.5);
  log_sum a0 = {-INFINITY, 0}, a1 = {-INFINITY, 0};
  double lcoef = 0; /* log |C(a, i)| */
  int sign = 1;     /* the sign of C(a, i) */
  for (long i = 0;; i++) {
    if (i > 0) {
      double f = a - (double)(i - 1);
      if (f == 0) break; /* integer order: every further C(a, i) is 0 */
      lcoef += log(fabs(f)) - log((double)i);
      if (f < 0) sign = -sign;
    }
    double id = (double)i, j = a - id;
    double ls0 = lcoef + id * lq + j * l1q + (id * id - id) / s2 + lhalf +
                 log_erfc((id - z0) / erfc_scale);
    double ls1 = lcoef + j * lq + id * l1q + (j * j - j) / s2 + lhalf +
                 log_erfc((z0 - j) / erfc_scale);
    /* inf - inf: a noise multiplier so small that exp((i^2-i)/(2 sigma^2))
     * overflows while erfc underflows; the RDP is beyond a double anyway. */
    if (isnan(ls0) || isnan(ls1) || ls0 == INFINITY || ls1 == INFINITY) {
      *out = INFINITY;
      return XF_OK;
    }
    log_sum_add(&a0, ls0, sign);
    log_sum_add(&a1, ls1, sign);
    if (id > a + 1) {
      log_sum total = a0;
      log_sum_add(&total, log_sum_value(&a1), 1);
      double lt = log_sum_value(&total);
      if (fmax(ls0, ls1) < lt + log(SERIES_TOLERANCE)) break;
    }
    XF_ENSURE(i < SERIES_MAX_TERMS, ctx, XF_EINTERNAL,
              "the RDP series at order %g (q = %g, sigma = %g) did not converge in %ld terms",
              a, q, sigma, SERIES_MAX_TERMS);
  }
  log_sum total = a0;
  log_sum_add(&total, log_sum_value(&a1), 1);
  double la = log_sum_value(&total);
  XF_ENSURE(!isnan(la), ctx, XF_EINTERNAL,
            "the RDP series at order %g (q = %g, sigma = %g) lost its precision", a, q, sigma);
  *out = la;
  return XF_OK;
}

/* The cases every formula shares; returns 1 when *rdp is set. */
static int rdp_trivial(double q, double sigma, double order, double *rdp) {
  if (q == 0) {
    *rdp = 0;
    return 1;
  }
  if (q == 1) { /* the Gaussian mechanism, sensitivity 1, noise sigma */
    *rdp = order / (2 * sigma * sigma);
    return 1;
  }
  return 0;
}

static double rdp_from_log_a(double log_a, double order) {
  double r = log_a / (order - 1);
  return r > 0 ? r : 0; /* A >= 1 exactly; a negative value is rounding */
}

xf_err xf_dp_rdp_sgm(double q, double sigma, double order, double *rdp, xf_errctx *ctx) {
  XF_GUARD(check_q(q, ctx));
  XF_GUARD(check_sigma(sigma, ctx));
  XF_GUARD(check_order(order, ctx));
  if (rdp_trivial(q, sigma, order, rdp)) return XF_OK;
  double log_a;
  if (order == floor(order))
    log_a = log_a_int(q, sigma, (long)order);
  else
    XF_GUARD(log_a_series(q, sigma, order, &log_a, ctx));
  *rdp = rdp_from_log_a(log_a, order);
  return XF_OK;
}

xf_err xf_dp_rdp_sgm_series(double q, double sigma, double order, double *rdp,
                            xf_errctx *ctx) {
  XF_GUARD(check_q(q, ctx));
  XF_GUARD(check_sigma(sigma, ctx));
  XF_GUARD(check_order(order, ctx));
  if (rdp_trivial(q, sigma, order, rdp)) return XF_OK;
  double log_a;
  XF_GUARD(log_a_series(q, sigma, order, &log_a, ctx));
  *rdp = rdp_from_log_a(log_a, order);
  return XF_OK;
}

xf_err xf_dp_rdp_steps(double q, double sigma, uint64_t steps, const double *orders, size_t n,
                       double *rdp, xf_errctx *ctx) {
  XF_GUARD(check_q(q, ctx));
  XF_GUARD(check_sigma(sigma, ctx));
  XF_GUARD(check_steps(steps, ctx));
  XF_GUARD(check_orders(orders, n, ctx));
  XF_ENSURE(rdp, ctx, XF_EINVAL, "no room for the RDP values");
  for (size_t i = 0; i < n; i++) {
    double r;
    XF_GUARD(xf_dp_rdp_sgm(q, sigma, orders[i], &r, ctx));
    rdp[i] = (double)steps * r;
  }
  return XF_OK;
}

xf_err xf_dp_rdp_compose(double *total, const double *add, size_t n, xf_errctx *ctx) {
  XF_ENSURE(total && add, ctx, XF_EINVAL, "no RDP vector to compose");
  for (size_t i = 0; i < n; i++) {
    XF_ENSURE(add[i] >= 0, ctx, XF_EINVAL, "RDP value %g at index %zu is negative or not a number",
              add[i], i);
    XF_ENSURE(total[i] >= 0, ctx, XF_EINVAL,
              "accumulated RDP value %g at index %zu is negative or not a number", total[i], i);
  }
  for (size_t i = 0; i < n; i++) total[i] += add[i];
  return XF_OK;
}

/* ---- conversion to (epsilon, delta) ------------------------------------- */

/* epsilon at one order; +inf when rdp is. */
static double epsilon_at(double order, double rdp, double delta, xf_dp_conversion conversion) {
  if (conversion == XF_DP_CONVERSION_CLASSIC) return rdp - log(delta) / (order - 1);
  /* RDP at any order > 1 bounds the KL divergence, and the total variation
   * distance is at most sqrt(1 - exp(-KL)) (Canonne, Kamath, Steinke 2020):
   * when that is within delta, (0, delta)-DP holds outright. */
  if (delta * delta + expm1(-rdp) >= 0) return 0;
  return rdp + log1p(-1 / order) - (log(delta) + log(order)) / (order - 1);
}

xf_err xf_dp_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                     xf_dp_conversion conversion, double *eps, double *order, xf_errctx *ctx) {
  XF_GUARD(check_orders(orders, n, ctx));
  XF_GUARD(check_delta(delta, ctx));
  XF_ENSURE(rdp && eps, ctx, XF_EINVAL, "no RDP values or no place for epsilon");
  XF_ENSURE(conversion == XF_DP_CONVERSION_IMPROVED || conversion == XF_DP_CONVERSION_CLASSIC,
            ctx, XF_EINVAL, "unknown conversion %d", (int)conversion);
  double best = INFINITY, best_order = orders[0];
  for (size_t i = 0; i < n; i++) {
    XF_ENSURE(rdp[i] >= 0, ctx, XF_EINVAL,
              "RDP value %g at order %g is negative or not a number", rdp[i], orders[i]);
    double e = epsilon_at(orders[i], rdp[i], delta, conversion);
    if (e < best) {
      best = e;
      best_order = orders[i];
    }
  }
  XF_ENSURE(best < INFINITY, ctx, XF_ERANGE,
            "epsilon is infinite at every order: the RDP overflowed (far too little noise)");
  *eps = best > 0 ? best : 0;
  if (order) *order = best_order;
  return XF_OK;
}

xf_err xf_dp_epsilon_sgm(double q, double sigma, uint64_t steps, double delta,
                         const double *orders, size_t n, xf_dp_conversion conversion,
                         double *eps, double *order, xf_errctx *ctx) {
  if (!orders) {
    orders = xf_dp_default_orders;
    n = XF_DP_DEFAULT_ORDER_COUNT;
  }
  XF_GUARD(check_delta(delta, ctx));
  XF_GUARD(check_orders(orders, n, ctx));
  double *rdp = xf_mallocarray(n, sizeof(*rdp));
  XF_ENSURE(rdp, ctx, XF_ENOMEM, "no memory for %zu RDP values", n);
  xf_err rc = xf_dp_rdp_steps(q, sigma, steps, orders, n, rdp, ctx);
  if (rc == XF_OK) rc = xf_dp_epsilon(orders, rdp, n, delta, conversion, eps, order, ctx);
  xf_free(rdp);
  return rc;
}

/* ---- calibration ---------------------------------------------------------- */

typedef struct calib_point {
  double sigma, eps, order;
} calib_point;

static xf_err calib_eval(double q, uint64_t steps, double delta, double sigma, calib_point *p,
                         xf_errctx *ctx) {
  p->sigma = sigma;
  return xf_dp_epsilon_sgm(q, sigma, steps, delta, NULL, 0, XF_DP_CONVERSION_IMPROVED, &p->eps,
                           &p->order, ctx);
}

/* Epsilon is non-increasing in sigma at every order (more noise never
 * costs privacy), so the search brackets the target between a sigma that
 * misses it (lo) and one that meets it (hi), doubling or halving from 1,
 * then bisects until hi is within 1e-6 of lo. */
xf_err xf_dp_calibrate(double target_eps, double q, uint64_t steps, double delta, double *sigma,
                       double *eps, double *order, xf_errctx *ctx) {
  XF_ENSURE(target_eps > 0 && isfinite(target_eps), ctx, XF_EINVAL,
            "target epsilon %g must be above 0 and finite", target_eps);
  XF_GUARD(check_q(q, ctx));
  XF_ENSURE(q > 0, ctx, XF_EINVAL,
            "sampling rate q = 0 releases nothing: there is no noise to calibrate");
  XF_GUARD(check_steps(steps, ctx));
  XF_GUARD(check_delta(delta, ctx));
  XF_ENSURE(sigma, ctx, XF_EINVAL, "no place for the noise multiplier");

  calib_point lo, hi, p;
  XF_GUARD(calib_eval(q, steps, delta, 1, &p, ctx));
  if (p.eps <= target_eps) {
    hi = p;
    for (;;) {
      double s = fmax(hi.sigma / 2, XF_DP_SIGMA_MIN);
      XF_GUARD(calib_eval(q, steps, delta, s, &p, ctx));
      if (p.eps > target_eps) {
        lo = p;
        break;
      }
      hi = p;
      if (s == XF_DP_SIGMA_MIN) goto done;
    }
  } else {
    lo = p;
    for (;;) {
      double s = fmin(lo.sigma * 2, XF_DP_SIGMA_MAX);
      XF_GUARD(calib_eval(q, steps, delta, s, &p, ctx));
      if (p.eps <= target_eps) {
        hi = p;
        break;
      }
      if (s == XF_DP_SIGMA_MAX)
        return xf_fail(ctx, XF_ERANGE,
                       "target epsilon %g is out of reach: even noise multiplier %g gives "
                       "epsilon %g (order %g) over %llu steps at sampling rate %g and delta %g; "
                       "fewer steps, a lower sampling rate or a larger delta spend less",
                       target_eps, XF_DP_SIGMA_MAX, p.eps, p.order, (unsigned long long)steps, q,
                       delta);
      lo = p;
    }
  }
  while (hi.sigma - lo.sigma > 1e-6 * hi.sigma) {
    XF_GUARD(calib_eval(q, steps, delta, 0.5 * (lo.sigma + hi.sigma), &p, ctx));
    if (p.eps <= target_eps)
      hi = p;
    else
      lo = p;
  }
done:
  *sigma = hi.sigma;
  if (eps) *eps = hi.eps;
  if (order) *order = hi.order;
  return XF_OK;
}

uint64_t xf_dp_steps_per_epoch(size_t n, int expected_batch) {
  if (n == 0 || expected_batch < 1) return 0;
  const uint64_t L = (uint64_t)expected_batch, steps = ((uint64_t)n + L / 2) / L;
  return steps ? steps : 1;
}
