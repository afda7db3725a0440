/* SPDX-License-Identifier: Apache-2.0 */
/* The server optimizers that turn a round's aggregate delta into the next
 * global model (fedavg, fedavgm, fedadam, fedyogi, fedadagrad), and their
 * state as bytes for the round journal. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "coordinator/aggregate.h"
#include "crypto/digest.h"

/* Server state vectors, one float per parameter each:
 *   fedavgm:                       mom = the momentum buffer v of Hsu et al.
 *   fedadam, fedyogi, fedadagrad:  mom = m, sec = v of Reddi et al.
 * Kept in float like the parameters (the journal then holds at most twice the
 * model); every step computes in double and rounds each stored value once. */
struct xf_server_opt {
  xf_job_strategy strategy;
  size_t n_params;
  uint64_t steps;
  float *mom;
  float *sec;
};

static bool xf__adaptive(xf_job_strategy_kind k) {
  return k == XF_JOB_STRATEGY_FEDADAM || k == XF_JOB_STRATEGY_FEDYOGI ||
         k == XF_JOB_STRATEGY_FEDADAGRAD;
}

static uint32_t xf__n_vectors(xf_job_strategy_kind k) {
  if (xf__adaptive(k)) return 2;
  return k == XF_JOB_STRATEGY_FEDAVGM ? 1 : 0;
}

static bool xf__unit_interval(double x) { return x >= 0 && x < 1; }

xf_err xf_server_opt_create(const xf_job_strategy *strategy, size_t n_params,
                            xf_server_opt **out, xf_errctx *err) {
  XF_ENSURE(strategy && out, err, XF_EINVAL, "server optimizer: strategy and out are required");
  XF_ENSURE(n_params > 0, err, XF_EINVAL, "server optimizer: a model has at least one parameter");
  xf_job_strategy_kind kind = strategy->kind;
  XF_ENSURE(kind >= XF_JOB_STRATEGY_FEDAVG && kind <= XF_JOB_STRATEGY_TRIMMED_MEAN, err,
            XF_EINVAL, "server optimizer: unknown strategy kind %d", (int)kind);
  XF_ENSURE(isfinite(strategy->server_lr) && strategy->server_lr > 0, err, XF_EINVAL,
            "server optimizer: server_lr must be > 0, got %g", strategy->server_lr);
  XF_ENSURE(kind != XF_JOB_STRATEGY_FEDAVGM || xf__unit_interval(strategy->server_momentum), err,
            XF_EINVAL, "server optimizer: server_momentum must be in [0, 1), got %g",
            strategy->server_momentum);
  if (xf__adaptive(kind)) {
    XF_ENSURE(xf__unit_interval(strategy->beta1), err, XF_EINVAL,
              "server optimizer: beta1 must be in [0, 1), got %g", strategy->beta1);
    XF_ENSURE(kind == XF_JOB_STRATEGY_FEDADAGRAD || xf__unit_interval(strategy->beta2), err,
              XF_EINVAL, "server optimizer: beta2 must be in [0, 1), got %g", strategy->beta2);
    XF_ENSURE(isfinite(strategy->tau) && strategy->tau > 0, err, XF_EINVAL,
              "server optimizer: tau must be > 0, got %g", strategy->tau);
  }
  xf_server_opt *opt = xf_calloc(1, sizeof(*opt));
  if (!opt) return xf_fail(err, XF_ENOMEM, "server optimizer: out of memory");
  opt->strategy = *strategy;
  opt->n_params = n_params;
  uint32_t nv = xf__n_vectors(kind);
  if (nv >= 1) {
    /* Momentum starts at zero: Hsu et al. 2019 (v = 0) and Reddi et al. 2021,
     * Algorithm 2 (m_{-1} = 0). */
    opt->mom = xf_calloc(n_params, sizeof(float));
    if (!opt->mom) goto nomem;
  }
  if (nv >= 2) {
    /* Reddi et al. 2021, Algorithm 2 takes v_{-1} >= tau^2 as input; we start
     * at the bound, v_{-1} = tau^2, so the first denominator sqrt(v) + tau is
     * about the size the paper's analysis assumes. */
    opt->sec = xf_mallocarray(n_params, sizeof(float));
    if (!opt->sec) goto nomem;
    float v0 = (float)(strategy->tau * strategy->tau);
    for (size_t i = 0; i < n_params; i++) opt->sec[i] = v0;
  }
  *out = opt;
  return XF_OK;
nomem:
  xf_server_opt_free(opt);
  return xf_fail(err, XF_ENOMEM, "server optimizer: out of memory for %zu parameters", n_params);
}

void xf_server_opt_free(xf_server_opt *opt) {
  if (!opt) return;
  xf_free(opt->mom);
  xf_free(opt->sec);
  xf_free(opt);
}

uint64_t xf_server_opt_steps(const xf_server_opt *opt) { return opt->steps; }

static double xf__sign(double x) { return (double)((x > 0) - (x < 0)); }

/* Our delta is site model minus global model, the negative of the
 * "pseudo-gradient" direction, so every rule below adds where the papers'
 * gradient form subtracts; Reddi et al. define Delta the same way and add. */
void xf_server_opt_step(xf_server_opt *opt, float *w, const float *delta) {
  const xf_job_strategy *s = &opt->strategy;
  const double eta = s->server_lr;
  const size_t n = opt->n_params;
  switch (s->kind) {
  case XF_JOB_STRATEGY_FEDAVGM: {
    /* Hsu, Qi and Brown 2019, "Measuring the Effects of Non-Identical Data
     * Distribution for Federated Visual Classification" (FedAvgM):
     * v <- beta v + Delta, w <- w + eta v (their w <- w - v with eta = 1 and
     * Delta taken as w_global - w_site). */
    const double beta = s->server_momentum;
    for (size_t i = 0; i < n; i++) {
      float v = (float)(beta * (double)opt->mom[i] + (double)delta[i]);
      opt->mom[i] = v;
      w[i] = (float)((double)w[i] + eta * (double)v);
    }
    break;
  }
  case XF_JOB_STRATEGY_FEDADAM:
  case XF_JOB_STRATEGY_FEDYOGI:
  case XF_JOB_STRATEGY_FEDADAGRAD: {
    /* Reddi et al. 2021, "Adaptive Federated Optimization", Algorithm 2
     * (FedAdagrad, FedYogi and FedAdam). Its update lines carry no equation
     * numbers; in its notation, for round t:
     *   m_t = beta1 m_{t-1} + (1 - beta1) Delta_t
     *   FedAdagrad: v_t = v_{t-1} + Delta_t^2
     *   FedYogi:    v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
     *   FedAdam:    v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2
     *   x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)
     * with no bias correction, as in the paper. */
    const double b1 = s->beta1, b2 = s->beta2, tau = s->tau;
    for (size_t i = 0; i < n; i++) {
      double d = (double)delta[i], d2 = d * d, v = (double)opt->sec[i];
      float m = (float)(b1 * (double)opt->mom[i] + (1.0 - b1) * d);
      if (s->kind == XF_JOB_STRATEGY_FEDADAGRAD) v = v + d2;
      else if (s->kind == XF_JOB_STRATEGY_FEDYOGI) v = v - (1.0 - b2) * d2 * xf__sign(v - d2);
      else v = b2 * v + (1.0 - b2) * d2;
      float vf = (float)v;
      opt->mom[i] = m;
      opt->sec[i] = vf;
      w[i] = (float)((double)w[i] + eta * (double)m / (sqrt((double)vf) + tau));
    }
    break;
  }
  default:
    /* fedavg (McMahan et al. 2017) with a server step size, fedprox (Li et
     * al. 2020: the proximal term acts at the sites, the server averages),
     * median and trimmed mean (Yin et al. 2018): w <- w + eta Delta. */
    for (size_t i = 0; i < n; i++) w[i] = (float)((double)w[i] + eta * (double)delta[i]);
    break;
  }
  opt->steps++;
}

/* ---- state as bytes ----------------------------------------------------------
 * Big-endian throughout:
 *   "XFSO"  u32 version (1)  u32 kind  u64 n_params  u64 steps
 *   f64 server_lr, server_momentum, beta1, beta2, tau, trim_fraction (bits)
 *   u32 vectors (0, 1 or 2), then each vector: n_params float32 bits
 *   32-byte BLAKE2b-256 of everything before it. */

#define XF__OPT_MAGIC "XFSO"
#define XF__OPT_VERSION 1u
#define XF__OPT_HEADER (4 + 4 + 4 + 8 + 8 + 6 * 8 + 4)

static uint8_t *xf__put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
  p[3] = (uint8_t)v;
  return p + 4;
}

static uint8_t *xf__put64(uint8_t *p, uint64_t v) {
  return xf__put32(xf__put32(p, (uint32_t)(v >> 32)), (uint32_t)v);
}

static uint64_t xf__f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof(u));
  return u;
}

/* The hyperparameters in file order, so save, load and its messages agree. */
static void xf__hyper(const xf_job_strategy *s, double h[6]) {
  h[0] = s->server_lr, h[1] = s->server_momentum, h[2] = s->beta1;
  h[3] = s->beta2, h[4] = s->tau, h[5] = s->trim_fraction;
}
static const char *const xf__hyper_names[6] = {"server_lr", "server_momentum", "beta1",
                                               "beta2",     "tau",             "trim_fraction"};

xf_err xf_server_opt_save(const xf_server_opt *opt, uint8_t **out, size_t *len) {
  uint32_t nv = xf__n_vectors(opt->strategy.kind);
  if (opt->n_params > (SIZE_MAX - XF__OPT_HEADER - XF_DIGEST_BYTES) / 8) return XF_ENOMEM;
  size_t total = XF__OPT_HEADER + (size_t)nv * opt->n_params * 4 + XF_DIGEST_BYTES;
  uint8_t *buf = xf_malloc(total);
  if (!buf) return XF_ENOMEM;
  uint8_t *p = buf;
  memcpy(p, XF__OPT_MAGIC, 4);
  p = xf__put32(p + 4, XF__OPT_VERSION);
  p = xf__put32(p, (uint32_t)opt->strategy.kind);
  p = xf__put64(p, (uint64_t)opt->n_params);
  p = xf__put64(p, opt->steps);
  double h[6];
  xf__hyper(&opt->strategy, h);
  for (int i = 0; i < 6; i++) p = xf__put64(p, xf__f64_bits(h[i]));
  p = xf__put32(p, nv);
  const float *vecs[2] = {opt->mom, opt->sec};
  for (uint32_t v = 0; v < nv; v++) {
    for (size_t i = 0; i < opt->n_params; i++) {
      uint32_t u;
      memcpy(&u, &vecs[v][i], sizeof(u));
      p = xf__put32(p, u);
    }
  }
  xf_digest d;
  xf_digest_buf(buf, (size_t)(p - buf), &d);
  memcpy(p, d.bytes, XF_DIGEST_BYTES);
  *out = buf;
  *len = total;
  return XF_OK;
}

static xf_err xf__get64(xf_cursor *c, uint64_t *out) {
  uint32_t hi, lo;
  XF_GUARD(xf_cursor_u32be(c, &hi));
  XF_GUARD(xf_cursor_u32be(c, &lo));
  *out = (uint64_t)hi << 32 | lo;
  return XF_OK;
}

/* Reads vector `which` of the payload at c; with dst NULL only checks it. */
static xf_err xf__read_vector(xf_cursor *c, size_t n, int which, float *dst, xf_errctx *err) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    float f;
    if (xf_cursor_u32be(c, &u) != XF_OK)
      return xf_fail(err, XF_ETRUNCATED, "server state: ends inside its vectors");
    memcpy(&f, &u, sizeof(f));
    if (!isfinite(f) || (which == 1 && f < 0))
      return xf_fail(err, XF_EFORMAT, "server state: %s[%zu] is %g, which cannot occur",
                     which == 0 ? "momentum" : "second moment", i, (double)f);
    if (dst) dst[i] = f;
  }
  return XF_OK;
}

xf_err xf_server_opt_load(xf_server_opt *opt, const uint8_t *buf, size_t len, xf_errctx *err) {
  XF_ENSURE(opt && (buf || len == 0), err, XF_EINVAL, "server state: opt and buf are required");
  xf_cursor c = xf_cursor_make(buf, len);
  uint8_t magic[4];
  uint32_t version, kind, nv;
  uint64_t n_params, steps;
  if (xf_cursor_bytes(&c, magic, 4) != XF_OK || xf_cursor_u32be(&c, &version) != XF_OK)
    return xf_fail(err, XF_ETRUNCATED, "server state: %zu bytes are too short for a header", len);
  XF_ENSURE(memcmp(magic, XF__OPT_MAGIC, 4) == 0, err, XF_EFORMAT,
            "server state: not a saved server optimizer state");
  XF_ENSURE(version == XF__OPT_VERSION, err, XF_EFORMAT,
            "server state: version %u is not known to this build (it reads %u)", version,
            XF__OPT_VERSION);
  if (xf_cursor_u32be(&c, &kind) != XF_OK || xf__get64(&c, &n_params) != XF_OK ||
      xf__get64(&c, &steps) != XF_OK)
    return xf_fail(err, XF_ETRUNCATED, "server state: ends inside its header");
  XF_ENSURE(kind == (uint32_t)opt->strategy.kind, err, XF_EFORMAT,
            "server state: saved for strategy %s, this job uses %s",
            xf_job_strategy_kind_name((xf_job_strategy_kind)kind),
            xf_job_strategy_kind_name(opt->strategy.kind));
  XF_ENSURE(n_params == (uint64_t)opt->n_params, err, XF_EFORMAT,
            "server state: saved for %llu parameters, the model has %zu",
            (unsigned long long)n_params, opt->n_params);
  double h[6];
  xf__hyper(&opt->strategy, h);
  for (int i = 0; i < 6; i++) {
    uint64_t bits;
    if (xf__get64(&c, &bits) != XF_OK)
      return xf_fail(err, XF_ETRUNCATED, "server state: ends inside its header");
    if (bits != xf__f64_bits(h[i])) {
      double saved;
      memcpy(&saved, &bits, sizeof(saved));
      return xf_fail(err, XF_EFORMAT, "server state: saved with %s %.17g, this job has %.17g",
                     xf__hyper_names[i], saved, h[i]);
    }
  }
  if (xf_cursor_u32be(&c, &nv) != XF_OK)
    return xf_fail(err, XF_ETRUNCATED, "server state: ends inside its header");
  XF_ENSURE(nv == xf__n_vectors(opt->strategy.kind), err, XF_EFORMAT,
            "server state: holds %u vectors, %s keeps %u", nv,
            xf_job_strategy_kind_name(opt->strategy.kind), xf__n_vectors(opt->strategy.kind));
  /* Sizes before content: the payload must be exactly the vectors and the
   * digest. n_params matched the model, so the product cannot overflow. */
  size_t payload = (size_t)nv * opt->n_params * 4;
  size_t rest = xf_cursor_remaining(&c);
  if (rest < payload + XF_DIGEST_BYTES)
    return xf_fail(err, XF_ETRUNCATED, "server state: %zu bytes after the header, %zu needed",
                   rest, payload + XF_DIGEST_BYTES);
  XF_ENSURE(rest == payload + XF_DIGEST_BYTES, err, XF_EFORMAT,
            "server state: %zu bytes follow the digest", rest - payload - XF_DIGEST_BYTES);
  size_t body = c.off + payload;
  xf_digest d;
  xf_digest_buf(buf, body, &d);
  XF_ENSURE(memcmp(d.bytes, buf + body, XF_DIGEST_BYTES) == 0, err, XF_EINTEGRITY,
            "server state: digest mismatch; the saved state is damaged");
  /* Check every value first, then copy, so that a refusal changes nothing. */
  float *dst[2] = {opt->mom, opt->sec};
  for (int pass = 0; pass < 2; pass++) {
    xf_cursor vc = c;
    for (uint32_t v = 0; v < nv; v++)
      XF_GUARD(xf__read_vector(&vc, opt->n_params, (int)v, pass ? dst[v] : NULL, err));
  }
  opt->steps = steps;
  return XF_OK;
}
