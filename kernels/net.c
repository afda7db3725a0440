/* SPDX-License-Identifier: Apache-2.0 */
/* Forward and backward passes over a model's layer table, as backend ops. */
#include "kernels/net.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

struct xf_net {
  xf_backend *b;
  const xf_model *m;
  int max_batch;
  size_t n_params;
  float *params, *grads, *velocity, *anchor;
  float *moment2;                     /* adam's second moments (velocity is its first) */
  uint64_t adam_steps;                /* since the last reset */
  float *targets;                     /* bce, mse: the labels as floats, on the device */
  float *targets_host;                /* their host staging */
  float *x;                           /* input batch */
  int32_t *y;                         /* labels */
  float *act[XF_MODEL_MAX_LAYERS];    /* output of each layer */
  float *col[XF_MODEL_MAX_LAYERS];    /* im2col of each conv layer's input */
  int32_t *argmax[XF_MODEL_MAX_LAYERS]; /* winners of each pooling layer */
  float *dcol;                        /* gradient w.r.t. the largest col */
  float *delta[2];                    /* ping-pong gradients w.r.t. activations */
  /* The clipped backward's buffers (xf_net_run_clipped), allocated on its
   * first call so that plain training does not pay for them. */
  bool clip_ready;
  float *sqnorm, *factor;             /* per example: squared gradient norm, clip scale */
  float *row_in, *row_dy;             /* per example: ||a_i||^2 and ||dy_i||^2 of one layer */
  float *ones;                        /* max(max_batch, largest conv output positions) */
  float *dy_kept[XF_MODEL_MAX_LAYERS];     /* dense: the layer's output gradient */
  float *per_example[XF_MODEL_MAX_LAYERS]; /* conv: each example's weight, then bias, gradient */
};

static size_t out_size(const xf_layer *l) { return (size_t)l->out_h * l->out_w * l->out_c; }

static xf_conv_shape conv_shape(const xf_layer *l, int n) {
  xf_conv_shape s = {.n = n, .h = l->in_h, .w = l->in_w, .c = l->in_c, .kh = l->kernel,
                     .kw = l->kernel, .pad = l->pad, .stride = l->stride,
                     .oh = l->out_h, .ow = l->out_w};
  return s;
}

static xf_pool_shape pool_shape(const xf_layer *l, int n) {
  xf_pool_shape s = {.n = n, .h = l->in_h, .w = l->in_w, .c = l->in_c, .k = l->kernel,
                     .stride = l->stride, .oh = l->out_h, .ow = l->out_w};
  return s;
}

static size_t col_size(const xf_layer *l, int n) {
  return (size_t)n * l->out_h * l->out_w * l->kernel * l->kernel * l->in_c;
}

static xf_err alloc_floats(xf_net *net, size_t n, float **out) {
  return xf_backend_alloc(net->b, n * sizeof(float), (void **)out);
}

void xf_net_free(xf_net *net) {
  if (!net) return;
  xf_backend *b = net->b;
  xf_backend_free(b, net->params);
  xf_backend_free(b, net->grads);
  xf_backend_free(b, net->velocity);
  xf_backend_free(b, net->anchor);
  xf_backend_free(b, net->moment2);
  xf_backend_free(b, net->targets);
  xf_free(net->targets_host);
  xf_backend_free(b, net->x);
  xf_backend_free(b, net->y);
  for (int i = 0; i < XF_MODEL_MAX_LAYERS; i++) {
    xf_backend_free(b, net->act[i]);
    xf_backend_free(b, net->col[i]);
    xf_backend_free(b, net->argmax[i]);
  }
  xf_backend_free(b, net->dcol);
  xf_backend_free(b, net->delta[0]);
  xf_backend_free(b, net->delta[1]);
  xf_backend_free(b, net->sqnorm);
  xf_backend_free(b, net->factor);
  xf_backend_free(b, net->row_in);
  xf_backend_free(b, net->row_dy);
  xf_backend_free(b, net->ones);
  for (int i = 0; i < XF_MODEL_MAX_LAYERS; i++) {
    xf_backend_free(b, net->dy_kept[i]);
    xf_backend_free(b, net->per_example[i]);
  }
  xf_free(net);
}

xf_err xf_net_create(xf_backend *b, const xf_model *m, int max_batch, xf_net **out,
                     xf_errctx *err) {
  if (max_batch < 1 || max_batch > 65536)
    return xf_fail(err, XF_EINVAL, "batch size %d: must be 1 to 65536", max_batch);
  xf_net *net = xf_calloc(1, sizeof(*net));
  if (!net) return xf_fail(err, XF_ENOMEM, "cannot allocate the network");
  net->b = b;
  net->m = m;
  net->max_batch = max_batch;
  net->n_params = xf_model_num_params(m);
  const size_t B = (size_t)max_batch;
  size_t max_col = 0;
  xf_err rc = XF_OK;
  if ((rc = alloc_floats(net, net->n_params, &net->params)) ||
      (rc = alloc_floats(net, net->n_params, &net->grads)) ||
      (rc = alloc_floats(net, net->n_params, &net->velocity)) ||
      (rc = alloc_floats(net, B * xf_model_input_size(m), &net->x)) ||
      (rc = xf_backend_alloc(b, B * sizeof(int32_t), (void **)&net->y)) ||
      (rc = alloc_floats(net, B * xf_model_max_activation(m), &net->delta[0])) ||
      (rc = alloc_floats(net, B * xf_model_max_activation(m), &net->delta[1])))
    goto fail;
  if (xf_model_spec_of(m)->loss != XF_LOSS_CROSS_ENTROPY) {
    if ((rc = alloc_floats(net, B, &net->targets))) goto fail;
    if (!(net->targets_host = xf_mallocarray(B, sizeof(float)))) {
      rc = XF_ENOMEM;
      goto fail;
    }
  }
  for (int i = 0; i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    if ((rc = alloc_floats(net, B * out_size(l), &net->act[i]))) goto fail;
    if (l->kind == XF_LAYER_CONV) {
      size_t n = col_size(l, max_batch);
      if (n > max_col) max_col = n;
      if ((rc = alloc_floats(net, n, &net->col[i]))) goto fail;
    }
    if (l->kind == XF_LAYER_MAXPOOL &&
        (rc = xf_backend_alloc(b, B * out_size(l) * sizeof(int32_t), (void **)&net->argmax[i])))
      goto fail;
  }
  if (max_col && (rc = alloc_floats(net, max_col, &net->dcol))) goto fail;
  *out = net;
  return XF_OK;
fail:
  xf_net_free(net);
  return xf_fail(err, rc, "cannot allocate %s buffers for batches of %d on the %s backend",
                 xf_model_describe(m), max_batch, xf_backend_name(b));
}

const xf_model *xf_net_model(const xf_net *net) { return net->m; }
xf_backend *xf_net_backend(const xf_net *net) { return net->b; }
int xf_net_max_batch(const xf_net *net) { return net->max_batch; }
float *xf_net_params_device(xf_net *net) { return net->params; }
float *xf_net_grads_device(xf_net *net) { return net->grads; }

xf_err xf_net_set_params(xf_net *net, const float *host) {
  return xf_backend_upload(net->b, net->params, host, net->n_params * sizeof(float));
}

xf_err xf_net_get_params(xf_net *net, float *host) {
  return xf_backend_download(net->b, host, net->params, net->n_params * sizeof(float));
}

xf_err xf_net_get_grads(xf_net *net, float *host) {
  return xf_backend_download(net->b, host, net->grads, net->n_params * sizeof(float));
}

xf_err xf_net_anchor(xf_net *net) {
  if (!net->anchor) XF_GUARD(alloc_floats(net, net->n_params, &net->anchor));
  xf_k_copy(net->b, net->anchor, net->params, net->n_params);
  return XF_OK;
}

void xf_net_reset_optimizer(xf_net *net) {
  xf_k_fill(net->b, net->velocity, 0.0f, net->n_params);
  if (net->moment2) xf_k_fill(net->b, net->moment2, 0.0f, net->n_params);
  net->adam_steps = 0;
}

/* The loss of the last layer's output against the n labels uploaded to
 * net->y (cross-entropy) or passed here (the others, which take them as
 * floats). dout gets the mean loss's gradient when not NULL. */
static xf_err run_loss(xf_net *net, const int32_t *y, int n, float *dout, double *loss_sum,
                       int *correct) {
  const xf_model_spec *ms = xf_model_spec_of(net->m);
  const float *out = net->act[xf_model_num_layers(net->m) - 1];
  if (ms->loss == XF_LOSS_CROSS_ENTROPY)
    return xf_k_softmax_xent(net->b, out, net->y, n, ms->classes, dout, loss_sum, correct);
  for (int i = 0; i < n; i++) net->targets_host[i] = (float)y[i];
  XF_GUARD(xf_backend_upload(net->b, net->targets, net->targets_host, (size_t)n * sizeof(float)));
  return xf_k_scalar_loss(net->b, ms->loss == XF_LOSS_BCE ? XF_SCALAR_LOSS_BCE : XF_SCALAR_LOSS_MSE,
                          out, net->targets, n, dout, loss_sum, correct);
}

static void forward(xf_net *net, int n) {
  xf_backend *b = net->b;
  const float *in = net->x;
  for (int i = 0; i < xf_model_num_layers(net->m); i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    float *y = net->act[i];
    const float *w = net->params + l->weight_offset;
    const float *bias = net->params + l->bias_offset;
    switch (l->kind) {
    case XF_LAYER_DENSE: {
      int fan_in = l->in_h * l->in_w * l->in_c;
      xf_k_gemm(b, false, true, n, l->out_c, fan_in, 1.0f, in, fan_in, w, fan_in, 0.0f, y,
                l->out_c);
      xf_k_bias_add(b, y, bias, n, l->out_c);
      break;
    }
    case XF_LAYER_CONV: {
      xf_conv_shape s = conv_shape(l, n);
      int rows = n * l->out_h * l->out_w, k = l->kernel * l->kernel * l->in_c;
      xf_k_im2col(b, in, &s, net->col[i]);
      xf_k_gemm(b, false, true, rows, l->out_c, k, 1.0f, net->col[i], k, w, k, 0.0f, y,
                l->out_c);
      xf_k_bias_add(b, y, bias, rows, l->out_c);
      break;
    }
    case XF_LAYER_RELU:
      xf_k_relu_fwd(b, y, in, (size_t)n * out_size(l));
      break;
    case XF_LAYER_MAXPOOL: {
      xf_pool_shape s = pool_shape(l, n);
      xf_k_maxpool_fwd(b, in, &s, y, net->argmax[i]);
      break;
    }
    }
    in = y;
  }
}

/* Back-propagates net->delta[cur] (the gradient w.r.t. the last layer's
 * output) through every layer, writing parameter gradients. */
static void backward(xf_net *net, int n, int cur) {
  xf_backend *b = net->b;
  for (int i = xf_model_num_layers(net->m) - 1; i >= 0; i--) {
    const xf_layer *l = xf_model_layer(net->m, i);
    const float *in = i > 0 ? net->act[i - 1] : net->x;
    float *dy = net->delta[cur], *dx = net->delta[cur ^ 1];
    const float *w = net->params + l->weight_offset;
    float *dw = net->grads + l->weight_offset, *db = net->grads + l->bias_offset;
    bool need_dx = i > 0;
    switch (l->kind) {
    case XF_LAYER_DENSE: {
      int fan_in = l->in_h * l->in_w * l->in_c;
      xf_k_gemm(b, true, false, l->out_c, fan_in, n, 1.0f, dy, l->out_c, in, fan_in, 0.0f, dw,
                fan_in);
      xf_k_bias_grad(b, db, dy, n, l->out_c);
      if (need_dx)
        xf_k_gemm(b, false, false, n, fan_in, l->out_c, 1.0f, dy, l->out_c, w, fan_in, 0.0f, dx,
                  fan_in);
      cur ^= 1;
      break;
    }
    case XF_LAYER_CONV: {
      int rows = n * l->out_h * l->out_w, k = l->kernel * l->kernel * l->in_c;
      xf_k_gemm(b, true, false, l->out_c, k, rows, 1.0f, dy, l->out_c, net->col[i], k, 0.0f, dw,
                k);
      xf_k_bias_grad(b, db, dy, rows, l->out_c);
      if (need_dx) {
        xf_conv_shape s = conv_shape(l, n);
        xf_k_gemm(b, false, false, rows, k, l->out_c, 1.0f, dy, l->out_c, w, k, 0.0f, net->dcol,
                  k);
        xf_k_col2im(b, net->dcol, &s, dx);
      }
      cur ^= 1;
      break;
    }
    case XF_LAYER_RELU:
      /* In place: the gradient stays in the same buffer. */
      xf_k_relu_bwd(b, dy, dy, net->act[i], (size_t)n * out_size(l));
      break;
    case XF_LAYER_MAXPOOL: {
      xf_pool_shape s = pool_shape(l, n);
      xf_k_maxpool_bwd(b, dy, net->argmax[i], &s, dx);
      cur ^= 1;
      break;
    }
    }
  }
}

/* ---- the clipped backward -------------------------------------------------
 * One backward pass over the batch gives every example's activation
 * gradients; what differs from `backward` is the parameter layers. Each
 * example's squared gradient norm is summed layer by layer without forming
 * its gradient where the layer allows:
 *  - dense: grad W_i = dy_i a_i^T is an outer product, so ||grad W_i||^2 =
 *    ||a_i||^2 ||dy_i||^2 and ||grad b_i||^2 = ||dy_i||^2; dy is kept.
 *  - conv: grad W_i = dy_i^T col_i (out_c x k over the image's positions P)
 *    is formed for every example by one strided-batched GEMM, the same
 *    multiply-adds as the layer's plain weight GEMM. The ghost-norm identity
 *    sum_pq (col_i col_i^T)_pq (dy_i dy_i^T)_pq would cost P^2 (k + out_c)
 *    instead of P k out_c, more for every preset's conv layers (P is 576 and
 *    64 for lenet5, 784 and 196 for fedavg-cnn), so it is not used.
 * Once every example's norm is known, its factor min(1, C / ||g_i||) scales
 * the kept dy rows of the dense layers, whose weight and bias gradients are
 * then the usual GEMMs, and weights the conv layers' per-example gradients
 * in one 1 x n GEMM. */

/* Allocates (once) what only the clipped backward needs. A failed call keeps
 * what it got, for the next call or xf_net_free. */
static xf_err clip_prepare(xf_net *net) {
  if (net->clip_ready) return XF_OK;
  const size_t B = (size_t)net->max_batch;
  size_t ones = B;
  for (int i = 0; i < xf_model_num_layers(net->m); i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    size_t pos = (size_t)l->out_h * l->out_w;
    if (l->kind == XF_LAYER_CONV && pos > ones) ones = pos;
  }
  float **per_batch[] = {&net->sqnorm, &net->factor, &net->row_in, &net->row_dy};
  for (size_t j = 0; j < sizeof(per_batch) / sizeof(per_batch[0]); j++)
    if (!*per_batch[j]) XF_GUARD(alloc_floats(net, B, per_batch[j]));
  if (!net->ones) {
    XF_GUARD(alloc_floats(net, ones, &net->ones));
    xf_k_fill(net->b, net->ones, 1.0f, ones);
  }
  for (int i = 0; i < xf_model_num_layers(net->m); i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    if (l->kind == XF_LAYER_DENSE && !net->dy_kept[i])
      XF_GUARD(alloc_floats(net, B * (size_t)l->out_c, &net->dy_kept[i]));
    if (l->kind == XF_LAYER_CONV && !net->per_example[i])
      XF_GUARD(alloc_floats(net, B * (l->weight_count + l->bias_count), &net->per_example[i]));
  }
  net->clip_ready = true;
  return XF_OK;
}

/* backward's walk with per-example norms: net->delta[0] holds each example's
 * gradient of its own loss w.r.t. the logits. */
static void backward_clipped(xf_net *net, int n, double clip, bool accumulate) {
  xf_backend *b = net->b;
  const int layers = xf_model_num_layers(net->m);
  int cur = 0;
  xf_k_fill(b, net->sqnorm, 0.0f, (size_t)n);
  for (int i = layers - 1; i >= 0; i--) {
    const xf_layer *l = xf_model_layer(net->m, i);
    const float *in = i > 0 ? net->act[i - 1] : net->x;
    float *dy = net->delta[cur], *dx = net->delta[cur ^ 1];
    const float *w = net->params + l->weight_offset;
    bool need_dx = i > 0;
    switch (l->kind) {
    case XF_LAYER_DENSE: {
      int fan_in = l->in_h * l->in_w * l->in_c;
      xf_k_copy(b, net->dy_kept[i], dy, (size_t)n * l->out_c);
      xf_k_row_dot(b, net->row_in, in, in, n, fan_in, false);
      xf_k_row_dot(b, net->row_dy, dy, dy, n, l->out_c, false);
      xf_k_axpy(b, 1.0f, net->row_dy, net->sqnorm, (size_t)n);
      xf_k_mul_acc(b, net->sqnorm, net->row_in, net->row_dy, (size_t)n);
      if (need_dx)
        xf_k_gemm(b, false, false, n, fan_in, l->out_c, 1.0f, dy, l->out_c, w, fan_in, 0.0f, dx,
                  fan_in);
      cur ^= 1;
      break;
    }
    case XF_LAYER_CONV: {
      const int pos = l->out_h * l->out_w, k = l->kernel * l->kernel * l->in_c, oc = l->out_c;
      const long long row = (long long)(l->weight_count + l->bias_count);
      float *g = net->per_example[i];
      /* Row i of g: dy_i^T col_i (oc x k), then 1^T dy_i (the bias, oc);
       * the parameter vector holds a layer's bias right after its weight. */
      xf_k_gemm_strided_batched(b, true, false, oc, k, pos, 1.0f, dy, oc, (long long)pos * oc,
                                net->col[i], k, (long long)pos * k, 0.0f, g, k, row, n);
      xf_k_gemm_strided_batched(b, false, false, 1, oc, pos, 1.0f, net->ones, pos, 0, dy, oc,
                                (long long)pos * oc, 0.0f, g + l->weight_count, oc, row, n);
      xf_k_row_dot(b, net->sqnorm, g, g, n, (int)row, true);
      if (need_dx) {
        xf_conv_shape s = conv_shape(l, n);
        xf_k_gemm(b, false, false, n * pos, k, oc, 1.0f, dy, oc, w, k, 0.0f, net->dcol, k);
        xf_k_col2im(b, net->dcol, &s, dx);
      }
      cur ^= 1;
      break;
    }
    case XF_LAYER_RELU:
      xf_k_relu_bwd(b, dy, dy, net->act[i], (size_t)n * out_size(l));
      break;
    case XF_LAYER_MAXPOOL: {
      xf_pool_shape s = pool_shape(l, n);
      xf_k_maxpool_bwd(b, dy, net->argmax[i], &s, dx);
      cur ^= 1;
      break;
    }
    }
  }
  xf_k_clip_factors(b, net->factor, net->sqnorm, n, clip);
  const float beta = accumulate ? 1.0f : 0.0f;
  for (int i = 0; i < layers; i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    float *dw = net->grads + l->weight_offset, *db = net->grads + l->bias_offset;
    if (l->kind == XF_LAYER_DENSE) {
      const float *in = i > 0 ? net->act[i - 1] : net->x;
      int fan_in = l->in_h * l->in_w * l->in_c;
      float *dy = net->dy_kept[i];
      xf_k_scale_rows(b, dy, net->factor, n, l->out_c);
      xf_k_gemm(b, true, false, l->out_c, fan_in, n, 1.0f, dy, l->out_c, in, fan_in, beta, dw,
                fan_in);
      xf_k_gemm(b, false, false, 1, l->out_c, n, 1.0f, net->ones, n, dy, l->out_c, beta, db,
                l->out_c);
    } else if (l->kind == XF_LAYER_CONV) {
      int row = (int)(l->weight_count + l->bias_count);
      xf_k_gemm(b, false, false, 1, row, n, 1.0f, net->factor, n, net->per_example[i], row, beta,
                dw, row);
    }
  }
}

xf_err xf_net_run(xf_net *net, const float *x, const int32_t *y, int n, bool backward_pass,
                  double *loss_sum, int *correct) {
  if (n < 1 || n > net->max_batch) return XF_EINVAL;
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  XF_GUARD(xf_backend_upload(net->b, net->y, y, (size_t)n * sizeof(int32_t)));
  forward(net, n);
  XF_GUARD(run_loss(net, y, n, backward_pass ? net->delta[0] : NULL, loss_sum, correct));
  if (backward_pass) backward(net, n, 0);
  return XF_OK;
}

xf_err xf_net_logits(xf_net *net, const float *x, int n, float *logits) {
  if (n < 1 || n > net->max_batch) return XF_EINVAL;
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  forward(net, n);
  const int last = xf_model_num_layers(net->m) - 1, classes = xf_model_spec_of(net->m)->classes;
  return xf_backend_download(net->b, logits, net->act[last],
                             (size_t)n * (size_t)classes * sizeof(float));
}

xf_err xf_net_run_clipped(xf_net *net, const float *x, const int32_t *y, int n, double clip,
                          bool accumulate, double *loss_sum, int *correct) {
  if (n < 1 || n > net->max_batch || !(clip > 0.0) || !isfinite(clip)) return XF_EINVAL;
  XF_GUARD(clip_prepare(net));
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  XF_GUARD(xf_backend_upload(net->b, net->y, y, (size_t)n * sizeof(int32_t)));
  forward(net, n);
  const int outputs = xf_model_outputs(net->m);
  XF_GUARD(run_loss(net, y, n, net->delta[0], loss_sum, correct));
  /* The op gives the mean loss's gradient; each example's own loss has n
   * times it. */
  if (n > 1) xf_k_scale(net->b, net->delta[0], (float)n, (size_t)n * outputs);
  backward_clipped(net, n, clip, accumulate);
  return XF_OK;
}

void xf_net_sgd_step(xf_net *net, const xf_sgd_params *p) {
  xf_k_sgd_step(net->b, net->params, net->grads, net->velocity,
                p->prox_mu != 0.0f ? net->anchor : NULL, net->n_params, p);
}

xf_err xf_net_adam_step(xf_net *net, const xf_adam_params *p) {
  if (!net->moment2) {
    XF_GUARD(alloc_floats(net, net->n_params, &net->moment2));
    xf_k_fill(net->b, net->moment2, 0.0f, net->n_params);
  }
  xf_adam_params q = *p;
  net->adam_steps++;
  q.bias1 = 1.0 - pow((double)p->beta1, (double)net->adam_steps);
  q.bias2 = 1.0 - pow((double)p->beta2, (double)net->adam_steps);
  xf_k_adam_step(net->b, net->params, net->grads, net->velocity, net->moment2,
                 p->prox_mu != 0.0f ? net->anchor : NULL, net->n_params, &q);
  return XF_OK;
}

void xf_net_clip_grad_norm(xf_net *net, double max_norm, double *norm) {
  double g = xf_k_l2norm(net->b, net->grads, net->n_params);
  if (norm) *norm = g;
  if (g > max_norm) xf_k_scale(net->b, net->grads, (float)(max_norm / g), net->n_params);
}
