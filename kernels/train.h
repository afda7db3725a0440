/* SPDX-License-Identifier: Apache-2.0 */
/* Local training: epochs of shuffled mini-batch SGD over samples in host
 * memory, and evaluation. The same loop serves `xfed train` (the centralized
 * baseline) and a site's local round. */
#ifndef XF_KERNELS_TRAIN_H
#define XF_KERNELS_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "privacy/accountant.h"
#include "privacy/noise.h"
#include "kernels/net.h"

/* Borrowed view of labelled samples: n rows of `features` floats, labels in
 * [0, classes). */
typedef struct xf_samples {
  const float *x;
  const int32_t *y;
  size_t n;
  size_t features;
} xf_samples;

typedef struct xf_epoch_report {
  int epoch, epochs;      /* 1-based */
  size_t samples;         /* trained this epoch (DP: the sampled batches' sizes summed) */
  size_t steps;           /* SGD steps taken this epoch */
  double train_loss;      /* mean over the epoch's batches, weighted by size */
  double train_accuracy;  /* on the batches as trained (before each step) */
  double test_loss;       /* -1 when no test set was given */
  double test_accuracy;   /* -1 when no test set was given */
  double seconds;         /* wall time of the epoch's training (not evaluation) */
} xf_epoch_report;

typedef void (*xf_epoch_fn)(const xf_epoch_report *r, void *user);
/* Asked before every batch; true stops the run there. Called on the thread
 * that runs xf_train, so it must be cheap and thread-safe (an atomic load). */
typedef bool (*xf_stop_fn)(void *user);

/* DP-SGD (Abadi et al. 2016) with Poisson sampling: record-level
 * differential privacy for the records of one xf_train call. Each step
 * includes every record independently with probability q = L / n, clips each
 * included record's gradient to L2 norm C (xf_net_run_clipped), adds
 * N(0, (zC)^2) to every coordinate of the clipped sum and divides it by L.
 * The privacy of E epochs is that of E * xf_dp_steps_per_epoch(n, L) steps
 * of the sampled Gaussian mechanism at rate q and noise multiplier z
 * (privacy/accountant.h). */
typedef struct xf_dp_sgd {
  double clip;             /* C > 0: per-example gradient L2 bound */
  double noise_multiplier; /* z >= 0: each step's clipped sum gets N(0, (zC)^2) per coordinate */
  int expected_batch;      /* L: each step draws every record independently with probability
                              q = L/n (Poisson sampling); the noisy sum is divided by L */
  xf_noise *noise;         /* draws the Poisson sample and the noise: keyed from the CSPRNG in
                              production (privacy/noise.h); borrowed */
} xf_dp_sgd;

/* xf_dp_steps_per_epoch (privacy/accountant.h) counts the steps of one epoch. */

/* One DP-SGD step's noise, N(0, sigma^2) per coordinate on the grid of
 * xf_noise_gaussian_vec (the bits xf_noise_gaussian_vec_par gives from the
 * same state of noise), added to net's gradient: in place on the cpu
 * backend, whose tensors are host memory, elsewhere through a host copy.
 * xf_dp_noiser_start after the step's Poisson sample, before its clipped
 * backward; xf_dp_noiser_finish after it adds the noise to the gradient,
 * or refuses a gradient that is not finite or out of the grid's range
 * (XF_ERANGE, the gradient left as it was). With two or more backend
 * threads the noise is drawn on a thread of its own during the backward,
 * and the backend lends it one of its threads (xf_backend_lend_threads) so
 * that the two do not compete for cores; with one, finish draws it. Either
 * way the gradient gets the same bits: the thread count changes when the
 * noise is drawn, not what. noise must be used by no one else between
 * start and finish. The one noising step of xf_train's DP loop and of its
 * benchmark. */
typedef struct xf_dp_noiser xf_dp_noiser;
xf_err xf_dp_noiser_new(xf_net *net, xf_noise *noise, double sigma,
                        xf_dp_noiser **out) XF_WARN_UNUSED;
xf_err xf_dp_noiser_start(xf_dp_noiser *d) XF_WARN_UNUSED;
xf_err xf_dp_noiser_finish(xf_dp_noiser *d) XF_WARN_UNUSED;
void xf_dp_noiser_free(xf_dp_noiser *d);

typedef enum xf_optimizer {
  XF_OPTIMIZER_SGD = 0, /* xf_k_sgd_step: momentum, nesterov, weight decay */
  XF_OPTIMIZER_ADAM,    /* xf_k_adam_step with weight decay added to the gradient (L2) */
  XF_OPTIMIZER_ADAMW    /* xf_k_adam_step with weight decay applied to the weights */
} xf_optimizer;

typedef struct xf_train_options {
  int epochs;
  int batch_size;
  /* lr, weight_decay and prox_mu apply to every optimizer; momentum and
   * nesterov to sgd only. */
  xf_sgd_params sgd;
  xf_optimizer optimizer;   /* default sgd */
  float beta1, beta2, eps;  /* adam and adamw: beta1, beta2 in [0, 1), eps > 0 */
  double clip_norm;         /* > 0: each step's gradient is scaled to L2 norm at most this
                               (not with dp, which clips per example); 0: off */
  uint64_t seed;            /* shuffling order and dropout masks; with the same seed, data and thread
                               count the cpu backend repeats bit for bit */
  const xf_samples *test;   /* evaluated after every epoch when not NULL */
  xf_epoch_fn on_epoch;     /* called after every epoch when not NULL */
  xf_stop_fn should_stop;   /* asked before every batch when not NULL */
  void *user;               /* passed to on_epoch and should_stop */
  const xf_dp_sgd *dp;      /* DP-SGD when not NULL (borrowed); batch_size is then unused */
} xf_train_options;

/* Trains the net's current parameters in place. Resets the optimizer's
 * state first (momentum, Adam's moments and step count: every call starts
 * fresh) and, when prox_mu > 0, anchors the proximal term at the starting
 * parameters. With clip_norm > 0 each step's mean gradient is scaled to that
 * L2 norm when it is longer, before weight decay and the FedProx term;
 * XF_EINVAL when it is set together with dp. Every label is checked
 * against the model's classes before the first step (XF_EINVAL naming the record). The last batch of an epoch
 * may be smaller than batch_size. When should_stop says so, the run ends
 * before the next batch and returns XF_OK with the parameters as far as they
 * got and no report for the unfinished epoch: the caller, which asked for
 * the stop, knows the result is partial (a daemon shutting down, a task
 * withdrawn).
 *
 * With opt->dp, an epoch is xf_dp_steps_per_epoch(n, L) steps; each step's
 * Poisson sample (possibly empty, possibly larger than L) runs through
 * xf_net_run_clipped in micro-batches of at most the net's max_batch, the
 * sum gets its noise on the host (xf_noise_gaussian_vec) and is divided by
 * L; momentum, weight decay and the FedProx term then apply as usual, after
 * the noise. train_loss and train_accuracy are over the sampled records:
 * they are not private, and releasing them is the caller's decision.
 * XF_EINVAL when clip is not positive, z is negative, L is not in 1..n or
 * noise is NULL; XF_ERANGE (from the sampler) when zC is outside its range. */
xf_err xf_train(xf_net *net, const xf_samples *train, const xf_train_options *opt,
                xf_errctx *err) XF_WARN_UNUSED;

/* Mean loss and accuracy of the net on data, in batches of the net's size.
 * For the mse loss, whose outputs classify nothing, the accuracy is the
 * coefficient of determination R^2 = 1 - SSE / SST of the outputs against
 * the labels' values, floored at 0 so that it stays in [0, 1] (1: perfect
 * fit; 0: no better than predicting the mean); epoch reports use the same
 * definition. */
xf_err xf_evaluate(xf_net *net, const xf_samples *data, double *loss, double *accuracy,
                   xf_errctx *err) XF_WARN_UNUSED;

#endif
