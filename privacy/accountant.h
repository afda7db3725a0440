/* SPDX-License-Identifier: Apache-2.0 */
/* The Rényi differential privacy (RDP) accountant: the RDP of the
 * Poisson-subsampled Gaussian mechanism, its composition over steps, rounds
 * and jobs, conversion to (epsilon, delta), and calibration of the noise
 * multiplier to a target epsilon. docs/privacy.md has the formulas and their
 * references.
 *
 * Conventions of every function here: plain double precision, computed in
 * log space so that no intermediate overflows for large orders or small noise;
 * inputs are checked and a bad one is refused with XF_EINVAL and a message in
 * ctx (which may be NULL) naming the value; outputs are written only on
 * success. RDP values are in nats. */
#ifndef XF_PRIVACY_ACCOUNTANT_H
#define XF_PRIVACY_ACCOUNTANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

/* The largest order accepted. The exact formula at an integer order alpha
 * sums alpha + 1 terms; 1e6 keeps one evaluation well under a second while
 * being far beyond any order that gives the best epsilon in practice. */
#define XF_DP_MAX_ORDER 1e6

/* The default orders: 1.25, 1.5, 1.75, 2, 2.25, 2.5, then every integer
 * 3 .. 64, then 128 and 256 (70 orders, increasing). Small fractional orders
 * serve large epsilons (few steps, little noise), large orders serve small
 * epsilons and small delta; the integers in between are where the optimum of
 * typical DP-SGD settings falls. */
#define XF_DP_DEFAULT_ORDER_COUNT 70
extern const double xf_dp_default_orders[XF_DP_DEFAULT_ORDER_COUNT];

/* How RDP is turned into (epsilon, delta)-DP. */
typedef enum xf_dp_conversion {
  /* Balle et al. 2020 / Canonne, Kamath, Steinke 2020:
   * eps = rdp + log((alpha-1)/alpha) - (log(delta) + log(alpha)) / (alpha-1).
   * Never larger than the classic one; the default. When RDP r at an order
   * satisfies 1 - exp(-r) <= delta^2, epsilon is 0 there: r bounds the KL
   * divergence and the total variation is at most sqrt(1 - exp(-KL)). */
  XF_DP_CONVERSION_IMPROVED,
  /* Mironov 2017, Proposition 3: eps = rdp - log(delta) / (alpha-1). */
  XF_DP_CONVERSION_CLASSIC
} xf_dp_conversion;

/* RDP at `order` of one step of the sampled Gaussian mechanism (Mironov,
 * Talwar, Zhang 2019): each record is included with probability q (Poisson
 * sampling), the sum of the included, L2-clipped contributions gets Gaussian
 * noise of standard deviation sigma times the clipping norm.
 * @param q      sampling rate in [0, 1]; 0 gives 0, 1 gives the plain Gaussian
 *               mechanism, order / (2 sigma^2)
 * @param sigma  noise multiplier, > 0 and finite
 * @param order  > 1 and <= XF_DP_MAX_ORDER. Integer orders use the exact
 *               binomial sum; other orders the two-part series of the paper
 *               (Section 3.3), summed until a term is below 1e-16 of the sum.
 *               Near 0 the RDP is accurate to about 1e-15 absolute (it is
 *               log(A) with A near 1), elsewhere to about 1e-13 relative.
 * @param rdp    out: the RDP, >= 0 (+inf when it overflows a double)
 * @return XF_OK, XF_EINVAL for a bad input, XF_EINTERNAL if the series
 *         fails to converge (not expected for valid inputs). */
xf_err xf_dp_rdp_sgm(double q, double sigma, double order, double *rdp,
                     xf_errctx *ctx) XF_WARN_UNUSED;

/* The same quantity, always by the two-part series, at any order (at an
 * integer order the series ends after order + 1 terms). Slower than
 * xf_dp_rdp_sgm at integer orders; there so that the two formulas can be
 * checked against each other. Same contract as xf_dp_rdp_sgm. */
xf_err xf_dp_rdp_sgm_series(double q, double sigma, double order, double *rdp,
                            xf_errctx *ctx) XF_WARN_UNUSED;

/* RDP of `steps` steps at each of n orders: rdp[i] = steps * per-step RDP at
 * orders[i] (composition of adaptive mechanisms adds RDP at each order).
 * @param steps  >= 1
 * @param orders n orders (n >= 1), each > 1 and <= XF_DP_MAX_ORDER
 * @param rdp    out: n values (caller-owned) */
xf_err xf_dp_rdp_steps(double q, double sigma, uint64_t steps, const double *orders,
                       size_t n, double *rdp, xf_errctx *ctx) XF_WARN_UNUSED;

/* Composition across rounds and jobs on the same data: total[i] += add[i]
 * for the n orders both vectors were computed at (same orders, same order
 * of the list; the caller keeps them aligned). add must hold finite or +inf
 * values >= 0; on failure total is unchanged. */
xf_err xf_dp_rdp_compose(double *total, const double *add, size_t n,
                         xf_errctx *ctx) XF_WARN_UNUSED;

/* The smallest epsilon of (epsilon, delta)-DP implied by RDP rdp[i] at
 * orders[i], i < n, by the given conversion, and the order that gave it.
 * @param delta  in (0, 1)
 * @param rdp    n values >= 0
 * @param eps    out: epsilon, >= 0 (a negative bound is reported as 0)
 * @param order  out (may be NULL): the order of the minimum
 * @return XF_OK, XF_EINVAL, or XF_ERANGE when epsilon is infinite at every
 *         order (RDP overflowed: the noise is far too small). */
xf_err xf_dp_epsilon(const double *orders, const double *rdp, size_t n, double delta,
                     xf_dp_conversion conversion, double *eps, double *order,
                     xf_errctx *ctx) XF_WARN_UNUSED;

/* xf_dp_rdp_steps then xf_dp_epsilon: the epsilon of `steps` steps of the
 * sampled Gaussian mechanism. orders NULL means the default orders (n is then
 * ignored). XF_ENOMEM when the RDP vector cannot be allocated. */
xf_err xf_dp_epsilon_sgm(double q, double sigma, uint64_t steps, double delta,
                         const double *orders, size_t n, xf_dp_conversion conversion,
                         double *eps, double *order, xf_errctx *ctx) XF_WARN_UNUSED;

/* The search range of calibration: noise multipliers in [XF_DP_SIGMA_MIN,
 * XF_DP_SIGMA_MAX]. Beyond 1e6 the per-step RDP is below 1e-12 at every
 * default order, so more noise buys nothing the orders can certify. */
#define XF_DP_SIGMA_MIN 1e-3
#define XF_DP_SIGMA_MAX 1e6

/* The smallest noise multiplier whose epsilon (default orders, improved
 * conversion) after `steps` steps at sampling rate q is <= target_eps, found
 * by bisection to 1e-6 relative; the value returned always meets the target.
 * @param target_eps > 0 and finite
 * @param q          in (0, 1]: at q = 0 no noise is needed and none is found
 * @param sigma      out: the noise multiplier
 * @param eps, order out (may be NULL): the epsilon at *sigma and its order
 * @return XF_OK, XF_EINVAL, XF_ENOMEM, or XF_ERANGE when the target is out of
 *         reach: even XF_DP_SIGMA_MAX gives more epsilon (the message says
 *         how much, and what would lower it).
 * @note   When XF_DP_SIGMA_MIN already meets the target, *sigma is
 *         XF_DP_SIGMA_MIN: less noise than that is not searched. */
xf_err xf_dp_calibrate(double target_eps, double q, uint64_t steps, double delta,
                       double *sigma, double *eps, double *order,
                       xf_errctx *ctx) XF_WARN_UNUSED;

/* Steps in one DP-SGD epoch over n records at expected batch L: n / L
 * rounded to the nearest integer (halves up), at least 1. The accountant
 * needs exactly this count. 0 when n or L is 0 or L is negative. */
uint64_t xf_dp_steps_per_epoch(size_t n, int expected_batch);

#endif
