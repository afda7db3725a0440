/* SPDX-License-Identifier: Apache-2.0 */
/* A model bound to a backend: parameters, gradients, optimizer state and the
 * activation buffers for batches of up to max_batch samples, all on the
 * backend's device. Forward, backward and the SGD step run as backend ops. */
#ifndef XF_KERNELS_NET_H
#define XF_KERNELS_NET_H

#include <stdbool.h>
#include <stdint.h>

#include "base/result.h"
#include "kernels/backend.h"
#include "kernels/model.h"

typedef struct xf_net xf_net;

/* Allocates everything on b for batches of 1..max_batch. The model and the
 * backend are borrowed and must outlive the net. Parameters start at zero:
 * load them with xf_net_set_params. */
xf_err xf_net_create(xf_backend *b, const xf_model *m, int max_batch, xf_net **out,
                     xf_errctx *err) XF_WARN_UNUSED;
void xf_net_free(xf_net *net);

const xf_model *xf_net_model(const xf_net *net);
xf_backend *xf_net_backend(const xf_net *net);
int xf_net_max_batch(const xf_net *net);

/* Host <-> device copies of the flat vectors (xf_model_num_params floats). */
xf_err xf_net_set_params(xf_net *net, const float *host) XF_WARN_UNUSED;
xf_err xf_net_get_params(xf_net *net, float *host) XF_WARN_UNUSED;
xf_err xf_net_get_grads(xf_net *net, float *host) XF_WARN_UNUSED;
/* Device pointers, valid for the net's life: for the update pipeline. */
float *xf_net_params_device(xf_net *net);
float *xf_net_grads_device(xf_net *net);

/* Sets the FedProx anchor w_ref to the current parameters (the global model a
 * local round starts from). */
xf_err xf_net_anchor(xf_net *net) XF_WARN_UNUSED;
/* Zeroes the optimizer's state: the momentum buffer, Adam's moments and its
 * step count (at the start of each local training run, so a site's round
 * starts from fresh state as FedAvg's local SGD does). */
void xf_net_reset_optimizer(xf_net *net);

/* Seeds the dropout masks: the k-th training pass after this call draws
 * the same masks for the same seed (on either backend). A net starts with
 * seed 0. */
void xf_net_seed_dropout(xf_net *net, uint64_t seed);

/* Runs n samples (x: n rows of the model's input size, host memory; y:
 * labels) forward (dropout active when `backward`, else the identity); with `backward`, also computes the gradient of the mean
 * loss into the gradient vector. Returns the loss summed over the samples
 * and the number classified correctly. XF_EINVAL if n is not in
 * 1..max_batch,
 * XF_ERANGE if the model starts with an embedding and a value of x is not
 * one of its ids. */
xf_err xf_net_run(xf_net *net, const float *x, const int32_t *y, int n, bool backward,
                  double *loss_sum, int *correct) XF_WARN_UNUSED;

/* Runs n samples (x: n rows of the model's input size, host memory)
 * forward and copies the last layer's output, the class scores before the
 * softmax, to logits (n x classes floats, host memory). XF_EINVAL if n is
 * not in 1..max_batch. */
xf_err xf_net_logits(xf_net *net, const float *x, int n, float *logits) XF_WARN_UNUSED;

/* The backward pass of DP-SGD: runs n samples forward and leaves in the
 * gradient vector the SUM over the samples of each sample's gradient of its
 * own loss, every sample's whole gradient (all layers together) first scaled
 * by min(1, clip / its L2 norm), so that each sample moves the sum by at
 * most clip. With `accumulate` the sum is added to the gradient vector
 * instead of replacing it (micro-batches of one larger batch). Loss and
 * correct count as for xf_net_run. The first call allocates the per-example
 * buffers (XF_ENOMEM when they cannot be had; the net stays usable). The
 * norms are exact up to float rounding: no sample's contribution exceeds
 * clip by more than a few float roundings of it. XF_EINVAL if n is not in
 * 1..max_batch or clip is not positive and finite. docs/kernels.md has the
 * method and its cost. */
xf_err xf_net_run_clipped(xf_net *net, const float *x, const int32_t *y, int n, double clip,
                          bool accumulate, double *loss_sum, int *correct) XF_WARN_UNUSED;

/* One SGD step from the gradient of the last backward run. */
void xf_net_sgd_step(xf_net *net, const xf_sgd_params *p);

/* One Adam or AdamW step (p->bias1 and p->bias2 are ignored: the net counts
 * its steps since the last xf_net_reset_optimizer and fills them in). The
 * first call allocates the second-moment buffer: XF_ENOMEM when it cannot
 * be had, with nothing changed. */
xf_err xf_net_adam_step(xf_net *net, const xf_adam_params *p) XF_WARN_UNUSED;

/* Scales the gradient of the last backward run to L2 norm at most max_norm
 * (> 0). Stores its norm before clipping in *norm when not NULL. */
void xf_net_clip_grad_norm(xf_net *net, double max_norm, double *norm);

#endif
