/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed dp epsilon` and `xfed dp calibrate`: the Rényi-DP accountant of the
 * sampled Gaussian mechanism on the command line (privacy/accountant.h). */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <string.h>

#include "cli/cli.h"
#include "privacy/accountant.h"

typedef struct dp_args {
  double q, sigma, delta, target;
  long steps;
  bool has_q, has_sigma, has_delta, has_target;
  double orders[256];
  size_t n_orders; /* 0: the default orders */
  xf_dp_conversion conversion;
} dp_args;

/* A number for flag within (lo, hi] or [lo, hi]: xf_cli_parse_double's
 * range is closed, so an open lower end is checked here. */
static xf_err parse_number(xf_cli *cli, const char *flag, const char *s, double lo, double hi,
                           bool lo_open, double *out) {
  XF_GUARD(xf_cli_parse_double(cli, flag, s, lo, hi, out));
  XF_ENSURE(!lo_open || *out > lo, &cli->err, XF_EUSAGE, "%s '%s' must be above %g", flag, s,
            lo);
  return XF_OK;
}

/* --orders A,B,...: each a number above 1 and at most XF_DP_MAX_ORDER. */
static xf_err parse_orders(xf_cli *cli, const char *list, dp_args *a) {
  a->n_orders = 0;
  const char *p = list;
  for (;;) {
    size_t len = strcspn(p, ",");
    char item[64];
    XF_ENSURE(len > 0, &cli->err, XF_EUSAGE, "--orders '%s' has an empty item", list);
    XF_ENSURE(len < sizeof(item), &cli->err, XF_EUSAGE, "--orders '%s' has an item too long",
              list);
    XF_ENSURE(a->n_orders < sizeof(a->orders) / sizeof(a->orders[0]), &cli->err, XF_EUSAGE,
              "--orders: at most %zu orders", sizeof(a->orders) / sizeof(a->orders[0]));
    memcpy(item, p, len);
    item[len] = '\0';
    XF_GUARD(parse_number(cli, "--orders", item, 1, XF_DP_MAX_ORDER, true,
                          &a->orders[a->n_orders++]));
    if (p[len] == '\0') break;
    p += len + 1;
  }
  return XF_OK;
}

enum { OPT_Q = 'q', OPT_SIGMA = 'z', OPT_STEPS = 't', OPT_DELTA = 'd', OPT_ORDERS = 'o',
       OPT_CONVERSION = 'c', OPT_TARGET = 'e' };

/* Parses the flags of either verb; `calibrate` selects which are allowed
 * and required. Returns an exit status (XF_EXIT_OK to go on). */
static int parse_args(xf_cli *cli, int argc, char **argv, bool calibrate, dp_args *a) {
  static const struct option epsilon_opts[] = {
      {"sampling-rate", required_argument, 0, OPT_Q},
      {"noise-multiplier", required_argument, 0, OPT_SIGMA},
      {"steps", required_argument, 0, OPT_STEPS},
      {"delta", required_argument, 0, OPT_DELTA},
      {"orders", required_argument, 0, OPT_ORDERS},
      {"conversion", required_argument, 0, OPT_CONVERSION},
      {0, 0, 0, 0}};
  static const struct option calibrate_opts[] = {
      {"target-epsilon", required_argument, 0, OPT_TARGET},
      {"sampling-rate", required_argument, 0, OPT_Q},
      {"steps", required_argument, 0, OPT_STEPS},
      {"delta", required_argument, 0, OPT_DELTA},
      {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->conversion = XF_DP_CONVERSION_IMPROVED;
  opterr = 0;
  optind = 1;
  int ch;
  xf_err rc = XF_OK;
  while (rc == XF_OK && (ch = getopt_long(argc, argv, ":", calibrate ? calibrate_opts : epsilon_opts,
                                          NULL)) != -1) {
    switch (ch) {
    case OPT_Q:
      rc = parse_number(cli, "--sampling-rate", optarg, 0, 1, false, &a->q);
      a->has_q = true;
      break;
    case OPT_SIGMA:
      rc = parse_number(cli, "--noise-multiplier", optarg, 0, 1e300, true, &a->sigma);
      a->has_sigma = true;
      break;
    case OPT_STEPS: rc = xf_cli_parse_int(cli, "--steps", optarg, 1, LONG_MAX, &a->steps); break;
    case OPT_DELTA:
      rc = parse_number(cli, "--delta", optarg, 0, 1, true, &a->delta);
      if (rc == XF_OK && a->delta >= 1)
        rc = xf_fail(&cli->err, XF_EUSAGE, "--delta '%s' must be below 1", optarg);
      a->has_delta = true;
      break;
    case OPT_TARGET:
      rc = parse_number(cli, "--target-epsilon", optarg, 0, 1e300, true, &a->target);
      a->has_target = true;
      break;
    case OPT_ORDERS: rc = parse_orders(cli, optarg, a); break;
    case OPT_CONVERSION:
      if (strcmp(optarg, "improved") == 0)
        a->conversion = XF_DP_CONVERSION_IMPROVED;
      else if (strcmp(optarg, "classic") == 0)
        a->conversion = XF_DP_CONVERSION_CLASSIC;
      else
        return xf_cli_usage(cli, "--conversion '%s' is not improved or classic", optarg);
      break;
    default: return xf_cli_option_error(cli, ch, argv, calibrate ? calibrate_opts : epsilon_opts);
    }
  }
  if (rc != XF_OK) return xf_cli_usage(cli, "%s", cli->err.msg);
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (calibrate && !a->has_target) return xf_cli_usage(cli, "--target-epsilon E is required");
  if (!a->has_q) return xf_cli_usage(cli, "--sampling-rate Q is required");
  if (!calibrate && !a->has_sigma) return xf_cli_usage(cli, "--noise-multiplier Z is required");
  if (!a->steps) return xf_cli_usage(cli, "--steps T is required");
  if (!a->has_delta) return xf_cli_usage(cli, "--delta D is required");
  if (calibrate && a->q == 0)
    return xf_cli_usage(cli, "--sampling-rate 0 releases nothing: there is no noise to calibrate");
  return XF_EXIT_OK;
}

/* Orders print as integers when they are ("order 12", not "order 12.0"). */
static json_t *order_json(double order) {
  if (order == (double)(long long)order) return json_integer((json_int_t)order);
  return json_real(order);
}

int xf_cmd_dp_epsilon(xf_cli *cli, int argc, char **argv) {
  dp_args a;
  int status = parse_args(cli, argc, argv, false, &a);
  if (status != XF_EXIT_OK) return status;
  double eps, order;
  xf_err rc = xf_dp_epsilon_sgm(a.q, a.sigma, (uint64_t)a.steps, a.delta,
                                a.n_orders ? a.orders : NULL, a.n_orders, a.conversion, &eps,
                                &order, &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    json_t *o = json_object();
    json_object_set_new(o, "epsilon", json_real(eps));
    json_object_set_new(o, "order", order_json(order));
    xf_cli_print_json(o);
  } else {
    printf("epsilon %.6g at order %g (delta %g, %s conversion)\n", eps, order, a.delta,
           a.conversion == XF_DP_CONVERSION_CLASSIC ? "classic" : "improved");
  }
  return XF_EXIT_OK;
}

int xf_cmd_dp_calibrate(xf_cli *cli, int argc, char **argv) {
  dp_args a;
  int status = parse_args(cli, argc, argv, true, &a);
  if (status != XF_EXIT_OK) return status;
  double sigma, eps, order;
  xf_err rc = xf_dp_calibrate(a.target, a.q, (uint64_t)a.steps, a.delta, &sigma, &eps, &order,
                              &cli->err);
  if (rc != XF_OK) return xf_cli_fail(cli, rc);
  if (cli->json) {
    json_t *o = json_object();
    json_object_set_new(o, "noise_multiplier", json_real(sigma));
    json_object_set_new(o, "epsilon", json_real(eps));
    json_object_set_new(o, "order", order_json(order));
    xf_cli_print_json(o);
  } else {
    printf("noise multiplier %.7g gives epsilon %.6g at order %g (delta %g)\n", sigma, eps,
           order, a.delta);
  }
  return XF_EXIT_OK;
}
