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
  float *xhat[XF_MODEL_MAX_LAYERS];   /* norm layers: the normalized input */
  float *rstd[XF_MODEL_MAX_LAYERS];   /* norm layers: 1/std per record and group */
  float *mask[XF_MODEL_MAX_LAYERS];   /* dropout: the last training pass's mask */
  float *skip[XF_MODEL_MAX_LAYERS];   /* rows an add reads: the gradient the add sends back */
  bool training;                      /* the last forward pass drew dropout masks */
  uint64_t dropout_seed, dropout_passes;
  float *dcol;                        /* gradient w.r.t. the largest col */
  float *delta[2];                    /* ping-pong gradients w.r.t. activations */
  /* The clipped backward's buffers (xf_net_run_clipped), allocated on its
   * first call so that plain training does not pay for them. */
  bool clip_ready;
  float *sqnorm, *factor;             /* per example: squared gradient norm, clip scale */
  float *row_in, *row_dy;             /* per example: ||a_i||^2 and ||dy_i||^2 of one layer */
  float *ones;                        /* max(max_batch, largest conv output positions) */
  float *dy_kept[XF_MODEL_MAX_LAYERS];     /* dense, embedding: the layer's output gradient */
  float *per_example[XF_MODEL_MAX_LAYERS]; /* conv, norms: each example's weight, then bias,
                                              gradient */
};

static bool is_norm(const xf_layer *l) {
  return l->kind == XF_LAYER_LAYERNORM || l->kind == XF_LAYER_GROUPNORM;
}

/* Layernorm normalizes every position of every record on its own: n x
 * positions "records" of one position and one group. */
static xf_norm_shape norm_shape(const xf_layer *l, int n) {
  const int pos = l->out_h * l->out_w;
  if (l->kind == XF_LAYER_LAYERNORM)
    return (xf_norm_shape){.n = n * pos, .p = 1, .c = l->out_c, .groups = 1, .eps = XF_NORM_EPS};
  return (xf_norm_shape){.n = n, .p = pos, .c = l->out_c, .groups = l->groups,
                         .eps = XF_NORM_EPS};
}

static size_t rstd_size(const xf_layer *l) {
  return l->kind == XF_LAYER_LAYERNORM ? (size_t)l->out_h * l->out_w : (size_t)l->groups;
}

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
    xf_backend_free(b, net->xhat[i]);
    xf_backend_free(b, net->rstd[i]);
    xf_backend_free(b, net->mask[i]);
    xf_backend_free(b, net->skip[i]);
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
    if (is_norm(l) && ((rc = alloc_floats(net, B * out_size(l), &net->xhat[i])) ||
                       (rc = alloc_floats(net, B * rstd_size(l), &net->rstd[i]))))
      goto fail;
    if (l->kind == XF_LAYER_DROPOUT && (rc = alloc_floats(net, B * out_size(l), &net->mask[i])))
      goto fail;
    if (l->kind == XF_LAYER_ADD && l->src >= 0 && !net->skip[l->src] &&
        (rc = alloc_floats(net, B * out_size(xf_model_layer(m, l->src)), &net->skip[l->src])))
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

static xf_act act_of(xf_layer_kind k) {
  return k == XF_LAYER_GELU ? XF_ACT_GELU : k == XF_LAYER_TANH ? XF_ACT_TANH : XF_ACT_SIGMOID;
}

/* One pass's dropout seed per layer: the net's seed, the pass and the row
 * mixed by splitmix64, so that no two masks share a stream. */
static uint64_t dropout_seed(const xf_net *net, int row) {
  uint64_t z = net->dropout_seed + (net->dropout_passes * XF_MODEL_MAX_LAYERS + (uint64_t)row + 1) *
                                       0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* With `training`, dropout layers draw a fresh mask; otherwise they pass
 * their input through. */
static void forward(xf_net *net, int n, bool training) {
  xf_backend *b = net->b;
  const float *in = net->x;
  net->training = training;
  if (training) net->dropout_passes++;
  for (int i = 0; i < xf_model_num_layers(net->m); i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    float *y = net->act[i];
    const float *w = net->params + l->weight_offset;
    const float *bias = net->params + l->bias_offset;
    const size_t count = (size_t)n * out_size(l);
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
      xf_k_relu_fwd(b, y, in, count);
      break;
    case XF_LAYER_MAXPOOL: {
      xf_pool_shape s = pool_shape(l, n);
      xf_k_maxpool_fwd(b, in, &s, y, net->argmax[i]);
      break;
    }
    case XF_LAYER_AVGPOOL: {
      xf_pool_shape s = pool_shape(l, n);
      xf_k_avgpool_fwd(b, in, &s, y);
      break;
    }
    case XF_LAYER_DROPOUT:
      if (training && l->rate > 0.0f) {
        xf_k_dropout_mask(b, net->mask[i], count, l->rate, dropout_seed(net, i));
        xf_k_mul(b, y, in, net->mask[i], count);
      } else {
        xf_k_copy(b, y, in, count);
      }
      break;
    case XF_LAYER_LAYERNORM:
    case XF_LAYER_GROUPNORM: {
      xf_norm_shape s = norm_shape(l, n);
      xf_k_norm_fwd(b, &s, in, w, bias, y, net->xhat[i], net->rstd[i]);
      break;
    }
    case XF_LAYER_EMBEDDING:
      xf_k_embedding_fwd(b, in, w, n * l->out_w, l->out_c, y);
      break;
    case XF_LAYER_GELU:
    case XF_LAYER_TANH:
    case XF_LAYER_SIGMOID:
      xf_k_act_fwd(b, act_of(l->kind), y, in, count);
      break;
    case XF_LAYER_SOFTMAX:
      xf_k_softmax_fwd(b, y, in, n * l->out_h * l->out_w, l->out_c);
      break;
    case XF_LAYER_ADD:
      xf_k_copy(b, y, in, count);
      xf_k_axpy(b, 1.0f, l->src >= 0 ? net->act[l->src] : net->x, y, count);
      break;
    }
    in = y;
  }
}

/* Back-propagates through row i the layers without parameters, which both
 * backward passes share. net->delta[*cur] holds the gradient w.r.t. the
 * row's output; *cur moves to the buffer holding the gradient w.r.t. its
 * input. False for a parameter layer. */
static bool backward_shared(xf_net *net, int i, int n, int *cur) {
  xf_backend *b = net->b;
  const xf_layer *l = xf_model_layer(net->m, i);
  const float *in = i > 0 ? net->act[i - 1] : net->x;
  float *dy = net->delta[*cur], *dx = net->delta[*cur ^ 1];
  const size_t count = (size_t)n * out_size(l);
  switch (l->kind) {
  case XF_LAYER_RELU:
    /* In place: the gradient stays in the same buffer. */
    xf_k_relu_bwd(b, dy, dy, net->act[i], count);
    return true;
  case XF_LAYER_GELU:
  case XF_LAYER_TANH:
  case XF_LAYER_SIGMOID:
    xf_k_act_bwd(b, act_of(l->kind), dy, dy, in, net->act[i], count);
    return true;
  case XF_LAYER_SOFTMAX:
    xf_k_softmax_bwd(b, dy, dy, net->act[i], n * l->out_h * l->out_w, l->out_c);
    return true;
  case XF_LAYER_DROPOUT:
    if (net->training && l->rate > 0.0f) xf_k_mul(b, dy, dy, net->mask[i], count);
    return true;
  case XF_LAYER_ADD:
    /* The sum's gradient goes on unchanged and, through the skip buffer, to
     * the row it read. */
    if (l->src >= 0) xf_k_axpy(b, 1.0f, dy, net->skip[l->src], count);
    return true;
  case XF_LAYER_MAXPOOL: {
    xf_pool_shape s = pool_shape(l, n);
    xf_k_maxpool_bwd(b, dy, net->argmax[i], &s, dx);
    *cur ^= 1;
    return true;
  }
  case XF_LAYER_AVGPOOL: {
    xf_pool_shape s = pool_shape(l, n);
    xf_k_avgpool_bwd(b, dy, &s, dx);
    *cur ^= 1;
    return true;
  }
  default: return false;
  }
}

/* Before row i's backward: adds what the add layers that read its output
 * sent back. Before the walk: zeroes those buffers. */
static void take_skip(xf_net *net, int i, int n, int cur) {
  if (!net->skip[i]) return;
  const xf_layer *l = xf_model_layer(net->m, i);
  xf_k_axpy(net->b, 1.0f, net->skip[i], net->delta[cur], (size_t)n * out_size(l));
}

static void clear_skips(xf_net *net, int n) {
  for (int i = 0; i < xf_model_num_layers(net->m); i++)
    if (net->skip[i])
      xf_k_fill(net->b, net->skip[i], 0.0f, (size_t)n * out_size(xf_model_layer(net->m, i)));
}

/* The input gradient of a norm layer, after its parameter gradients were
 * formed from dy. */
static void norm_input_grad(xf_net *net, const xf_layer *l, int i, int n, const float *dy,
                            float *dx) {
  xf_norm_shape s = norm_shape(l, n);
  xf_k_norm_bwd(net->b, &s, dy, net->xhat[i], net->rstd[i], net->params + l->weight_offset, dx);
}

/* Back-propagates net->delta[cur] (the gradient w.r.t. the last layer's
 * output) through every layer, writing parameter gradients. */
static void backward(xf_net *net, int n, int cur) {
  xf_backend *b = net->b;
  clear_skips(net, n);
  for (int i = xf_model_num_layers(net->m) - 1; i >= 0; i--) {
    take_skip(net, i, n, cur);
    if (backward_shared(net, i, n, &cur)) continue;
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
    case XF_LAYER_LAYERNORM:
    case XF_LAYER_GROUPNORM: {
      /* dgamma = column sums of dy * xhat (formed in dx's buffer first),
       * dbeta = column sums of dy. */
      const int rows = n * l->out_h * l->out_w;
      xf_k_mul(b, dx, dy, net->xhat[i], (size_t)rows * l->out_c);
      xf_k_bias_grad(b, dw, dx, rows, l->out_c);
      xf_k_bias_grad(b, db, dy, rows, l->out_c);
      if (need_dx) norm_input_grad(net, l, i, n, dy, dx);
      cur ^= 1;
      break;
    }
    case XF_LAYER_EMBEDDING:
      xf_k_embedding_bwd(b, net->x, dy, n * l->out_w, l->out_c, l->vocab, 0.0f, dw);
      break;
    default: break;
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
 *  - layernorm, groupnorm: an example's dgamma and dbeta are column sums
 *    over its positions (of dy * xhat, and of dy): two strided-batched
 *    1 x P GEMMs give every example's 2c values, kept as for conv.
 *  - embedding: an example's table gradient adds its dy rows at its ids, so
 *    its squared norm is the sum of <dy_a, dy_b> over the pairs of its ids
 *    that are equal (f^2 dim per example for f ids); dy is kept.
 * Once every example's norm is known, its factor min(1, C / ||g_i||) scales
 * the kept dy rows of the dense and embedding layers, whose gradients are
 * then formed as usual, and weights the conv and norm layers' per-example
 * gradients in one 1 x n GEMM. Layers without parameters pass the gradient
 * back as in the plain backward. */

/* Allocates (once) what only the clipped backward needs. A failed call keeps
 * what it got, for the next call or xf_net_free. */
static xf_err clip_prepare(xf_net *net) {
  if (net->clip_ready) return XF_OK;
  const size_t B = (size_t)net->max_batch;
  size_t ones = B;
  for (int i = 0; i < xf_model_num_layers(net->m); i++) {
    const xf_layer *l = xf_model_layer(net->m, i);
    size_t pos = (size_t)l->out_h * l->out_w;
    if ((l->kind == XF_LAYER_CONV || is_norm(l)) && pos > ones) ones = pos;
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
    if (l->kind == XF_LAYER_EMBEDDING && !net->dy_kept[i])
      XF_GUARD(alloc_floats(net, B * out_size(l), &net->dy_kept[i]));
    if ((l->kind == XF_LAYER_CONV || is_norm(l)) && !net->per_example[i])
      XF_GUARD(alloc_floats(net, B * (l->weight_count + l->bias_count), &net->per_example[i]));
  }
  net->clip_ready = true;
  return XF_OK;
}

/* Row r of g (the per-example gradients of a layer whose parameters are a
 * weight of oc x k then a bias of oc) gets 1^T t_r (a reduction over the
 * example's `pos` rows of t, oc wide) at column `at`: one strided-batched
 * 1 x pos GEMM per call. */
static void per_example_colsum(xf_net *net, const float *t, int pos, int oc, float *g,
                               long long row, int n) {
  xf_k_gemm_strided_batched(net->b, false, false, 1, oc, pos, 1.0f, net->ones, pos, 0, t, oc,
                            (long long)pos * oc, 0.0f, g, oc, row, n);
}

/* backward's walk with per-example norms: net->delta[0] holds each example's
 * gradient of its own loss w.r.t. the logits. */
static void backward_clipped(xf_net *net, int n, double clip, bool accumulate) {
  xf_backend *b = net->b;
  const int layers = xf_model_num_layers(net->m);
  int cur = 0;
  xf_k_fill(b, net->sqnorm, 0.0f, (size_t)n);
  clear_skips(net, n);
  for (int i = layers - 1; i >= 0; i--) {
    take_skip(net, i, n, cur);
    if (backward_shared(net, i, n, &cur)) continue;
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
      per_example_colsum(net, dy, pos, oc, g + l->weight_count, row, n);
      xf_k_row_dot(b, net->sqnorm, g, g, n, (int)row, true);
      if (need_dx) {
        xf_conv_shape s = conv_shape(l, n);
        xf_k_gemm(b, false, false, n * pos, k, oc, 1.0f, dy, oc, w, k, 0.0f, net->dcol, k);
        xf_k_col2im(b, net->dcol, &s, dx);
      }
      cur ^= 1;
      break;
    }
    case XF_LAYER_LAYERNORM:
    case XF_LAYER_GROUPNORM: {
      /* Row i of g: the example's dgamma (column sums over its positions of
       * dy * xhat, formed in dx's buffer), then its dbeta. */
      const int pos = l->out_h * l->out_w, oc = l->out_c;
      const long long row = 2LL * oc;
      float *g = net->per_example[i];
      xf_k_mul(b, dx, dy, net->xhat[i], (size_t)n * pos * oc);
      per_example_colsum(net, dx, pos, oc, g, row, n);
      per_example_colsum(net, dy, pos, oc, g + oc, row, n);
      xf_k_row_dot(b, net->sqnorm, g, g, n, (int)row, true);
      if (need_dx) norm_input_grad(net, l, i, n, dy, dx);
      cur ^= 1;
      break;
    }
    case XF_LAYER_EMBEDDING:
      xf_k_copy(b, net->dy_kept[i], dy, (size_t)n * out_size(l));
      xf_k_embedding_sqnorm(b, net->sqnorm, net->x, dy, n, l->out_w, l->out_c, true);
      break;
    default: break;
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
    } else if (l->kind == XF_LAYER_CONV || is_norm(l)) {
      int row = (int)(l->weight_count + l->bias_count);
      xf_k_gemm(b, false, false, 1, row, n, 1.0f, net->factor, n, net->per_example[i], row, beta,
                dw, row);
    } else if (l->kind == XF_LAYER_EMBEDDING) {
      float *dy = net->dy_kept[i];
      xf_k_scale_rows(b, dy, net->factor, n, (int)out_size(l));
      xf_k_embedding_bwd(b, net->x, dy, n * l->out_w, l->out_c, l->vocab, beta, dw);
    }
  }
}

/* An embedding reads its input as ids: every value must be one, or the
 * lookup would read outside the table. */
static xf_err check_ids(const xf_net *net, const float *x, int n) {
  const xf_layer *l = xf_model_layer(net->m, 0);
  if (l->kind != XF_LAYER_EMBEDDING) return XF_OK;
  return xf_model_check_ids(net->m, x, (size_t)n, NULL, NULL);
}

void xf_net_seed_dropout(xf_net *net, uint64_t seed) {
  net->dropout_seed = seed;
  net->dropout_passes = 0;
}

xf_err xf_net_run(xf_net *net, const float *x, const int32_t *y, int n, bool backward_pass,
                  double *loss_sum, int *correct) {
  if (n < 1 || n > net->max_batch) return XF_EINVAL;
  XF_GUARD(check_ids(net, x, n));
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  XF_GUARD(xf_backend_upload(net->b, net->y, y, (size_t)n * sizeof(int32_t)));
  forward(net, n, backward_pass);
  XF_GUARD(run_loss(net, y, n, backward_pass ? net->delta[0] : NULL, loss_sum, correct));
  if (backward_pass) backward(net, n, 0);
  return XF_OK;
}

xf_err xf_net_logits(xf_net *net, const float *x, int n, float *logits) {
  if (n < 1 || n > net->max_batch) return XF_EINVAL;
  XF_GUARD(check_ids(net, x, n));
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  forward(net, n, false);
  const int last = xf_model_num_layers(net->m) - 1, classes = xf_model_spec_of(net->m)->classes;
  return xf_backend_download(net->b, logits, net->act[last],
                             (size_t)n * (size_t)classes * sizeof(float));
}

xf_err xf_net_run_clipped(xf_net *net, const float *x, const int32_t *y, int n, double clip,
                          bool accumulate, double *loss_sum, int *correct) {
  if (n < 1 || n > net->max_batch || !(clip > 0.0) || !isfinite(clip)) return XF_EINVAL;
  XF_GUARD(check_ids(net, x, n));
  XF_GUARD(clip_prepare(net));
  XF_GUARD(xf_backend_upload(net->b, net->x, x, (size_t)n * xf_model_input_size(net->m) *
                                                    sizeof(float)));
  XF_GUARD(xf_backend_upload(net->b, net->y, y, (size_t)n * sizeof(int32_t)));
  forward(net, n, true);
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
