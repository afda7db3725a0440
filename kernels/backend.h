/* SPDX-License-Identifier: Apache-2.0 */
/* The compute backend interface: memory on the device and the ops that models,
 * training and the update pipeline are built from. `cpu` (OpenBLAS + plain C)
 * is the reference; `cuda` (cuBLAS + CUDA kernels) is checked against it.
 *
 * Conventions every op follows:
 *  - Pointers named as tensors are device pointers from xf_backend_alloc (host
 *    memory for `cpu`). Matrices are row-major; images are NHWC.
 *  - Ops are asynchronous and do not fail one by one: the first device error is
 *    latched and returned by the next xf_backend_sync, transfer, or op that
 *    returns a value to the host.
 *  - Ops on `cpu` are deterministic for a given thread count: every reduction
 *    runs in a fixed order. */
#ifndef XF_KERNELS_BACKEND_H
#define XF_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

typedef struct xf_backend xf_backend;

typedef enum xf_backend_kind {
  XF_BACKEND_AUTO = 0, /* cuda when a usable GPU is present, else cpu */
  XF_BACKEND_CPU,
  XF_BACKEND_CUDA
} xf_backend_kind;

typedef struct xf_backend_options {
  xf_backend_kind kind;
  int threads; /* CPU threads: cpu's GEMM, and on either backend the host-side
                  work (DP-SGD noise, the update pipeline); 0 = XF_THREADS or
                  all cores */
  int device;  /* CUDA device ordinal */
} xf_backend_options;

/* Parses "auto", "cpu" or "cuda". */
xf_err xf_backend_parse_kind(const char *s, xf_backend_kind *out) XF_WARN_UNUSED;

/* Opens a backend. cuda lives in a module of its own that only the first
 * request for cuda (or auto) loads. With kind AUTO, falls back to cpu when
 * the module cannot be loaded or no GPU is usable; with kind CUDA, fails with
 * XF_ENODEVICE and says why (naming the module's path and dlopen's error).
 * The caller owns *out and closes it with xf_backend_close. */
xf_err xf_backend_open(const xf_backend_options *opt, xf_backend **out,
                       xf_errctx *err) XF_WARN_UNUSED;
/* Same, with the kind from XF_BACKEND (auto|cpu|cuda; default auto). */
xf_err xf_backend_open_env(int threads, xf_backend **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_backend_close(xf_backend *b);

/* "cpu" or "cuda". */
const char *xf_backend_name(const xf_backend *b);
xf_backend_kind xf_backend_kind_of(const xf_backend *b);
/* Human description: CPU model and thread count, or the GPU's name. */
const char *xf_backend_describe(const xf_backend *b);
int xf_backend_threads(const xf_backend *b);

/* n of the backend's host threads are busy with other work of the caller's
 * (DP-SGD's noise, drawn during the step) until lent again with 0: the cpu
 * backend's GEMMs run on the rest, at least one. Results do not change
 * (OpenBLAS splits a GEMM by blocks of its output, never its sum). */
void xf_backend_lend_threads(xf_backend *b, int n);
/* True when the cuda backend's module (libxfed-cuda.so) is where this
 * program looks for it (docs/kernels.md); says nothing of a GPU. Does not
 * load it. */
bool xf_backend_cuda_built(void);

/* Profiling for benchmarks: while on, the wall time spent inside GEMM calls
 * is accumulated (on cuda each GEMM is bracketed by stream syncs, which costs
 * the overlap it measures; leave it off outside benchmarks). Turning it on
 * resets the total. */
void xf_backend_profile(xf_backend *b, bool on);
double xf_backend_gemm_seconds(const xf_backend *b);

/* Device memory, zero-filled, 64-byte aligned at least. NULL-safe free. */
xf_err xf_backend_alloc(xf_backend *b, size_t bytes, void **out) XF_WARN_UNUSED;
void xf_backend_free(xf_backend *b, void *p);
xf_err xf_backend_upload(xf_backend *b, void *dst, const void *src, size_t bytes) XF_WARN_UNUSED;
xf_err xf_backend_download(xf_backend *b, void *dst, const void *src,
                           size_t bytes) XF_WARN_UNUSED;
/* Waits for queued ops; returns the first latched device error. */
xf_err xf_backend_sync(xf_backend *b) XF_WARN_UNUSED;

/* ---- dense algebra -------------------------------------------------------- */

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k. */
void xf_k_gemm(xf_backend *b, bool trans_a, bool trans_b, int m, int n, int k, float alpha,
               const float *a, int lda, const float *bm, int ldb, float beta, float *c,
               int ldc);
/* `batch` independent GEMMs: for i < batch, C_i = alpha op(A_i) op(B_i) +
 * beta C_i with X_i = x + i * stride_x (strides in floats; a stride of 0
 * reuses one operand for every product). Same layout rules as xf_k_gemm; the
 * C_i must not overlap. cpu runs them one after another, cuda as one
 * cublasSgemmStridedBatched. */
void xf_k_gemm_strided_batched(xf_backend *b, bool trans_a, bool trans_b, int m, int n, int k,
                               float alpha, const float *a, int lda, long long stride_a,
                               const float *bm, int ldb, long long stride_b, float beta,
                               float *c, int ldc, long long stride_c, int batch);
/* y[r][c] += bias[c] for a rows x cols matrix. */
void xf_k_bias_add(xf_backend *b, float *y, const float *bias, int rows, int cols);
/* db[c] = sum over r of dy[r][c]. */
void xf_k_bias_grad(xf_backend *b, float *db, const float *dy, int rows, int cols);

/* ---- element-wise --------------------------------------------------------- */

/* y = max(x, 0); y may be x. */
void xf_k_relu_fwd(xf_backend *b, float *y, const float *x, size_t n);
/* dx = dy where y > 0, else 0; dx may be dy. */
void xf_k_relu_bwd(xf_backend *b, float *dx, const float *dy, const float *y, size_t n);
/* y += a * x */
void xf_k_axpy(xf_backend *b, float a, const float *x, float *y, size_t n);
/* x *= a */
void xf_k_scale(xf_backend *b, float *x, float a, size_t n);
void xf_k_fill(xf_backend *b, float *x, float v, size_t n);
void xf_k_copy(xf_backend *b, float *dst, const float *src, size_t n);
/* Euclidean norm of x, accumulated in double (host result). */
double xf_k_l2norm(xf_backend *b, const float *x, size_t n);
/* y[i] += u[i] * v[i] (two roundings, never fused). */
void xf_k_mul_acc(xf_backend *b, float *y, const float *u, const float *v, size_t n);

/* ---- per-row ops (per-example gradients) ----------------------------------- */

/* out[r] = sum over c of x[r][c] * y[r][c] for a rows x cols matrix, summed
 * in double and rounded once; added to out[r] (in double, then rounded) when
 * `accumulate`. x == y gives squared row norms. */
void xf_k_row_dot(xf_backend *b, float *out, const float *x, const float *y, int rows, int cols,
                  bool accumulate);
/* factor[r] = min(1, clip / sqrt(sqnorm[r])), computed in double: the scale
 * that brings a row of squared norm sqnorm[r] to norm at most clip (1 for a
 * zero row). clip > 0. */
void xf_k_clip_factors(xf_backend *b, float *factor, const float *sqnorm, int rows, double clip);
/* x[r][c] *= factor[r] for a rows x cols matrix. */
void xf_k_scale_rows(xf_backend *b, float *x, const float *factor, int rows, int cols);

/* ---- convolution and pooling (NHWC) --------------------------------------- */

typedef struct xf_conv_shape {
  int n, h, w, c;        /* input batch, height, width, channels */
  int kh, kw, pad, stride;
  int oh, ow;            /* output size: (h + 2 pad - kh) / stride + 1, ... */
} xf_conv_shape;

/* Fills oh and ow from the rest; XF_EINVAL when the window does not fit. */
xf_err xf_conv_shape_finish(xf_conv_shape *s) XF_WARN_UNUSED;

/* col[(n*oh + y)*ow + x][(i*kw + j)*c + ch] = x[n][y*stride - pad + i][..][ch],
 * zero outside the image: a (n*oh*ow) x (kh*kw*c) matrix. */
void xf_k_im2col(xf_backend *b, const float *x, const xf_conv_shape *s, float *col);
/* The adjoint of im2col: dx = 0, then every col entry is added back to the
 * input pixel it was read from. */
void xf_k_col2im(xf_backend *b, const float *col, const xf_conv_shape *s, float *dx);

typedef struct xf_pool_shape {
  int n, h, w, c;
  int k, stride;
  int oh, ow; /* (h - k) / stride + 1 */
} xf_pool_shape;

xf_err xf_pool_shape_finish(xf_pool_shape *s) XF_WARN_UNUSED;

/* Max pooling; argmax[i] is the index into x of the winner for y[i] (the
 * first maximum in window order on ties). */
void xf_k_maxpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y,
                      int32_t *argmax);
/* dx = 0, then dx[argmax[i]] += dy[i]. */
void xf_k_maxpool_bwd(xf_backend *b, const float *dy, const int32_t *argmax,
                      const xf_pool_shape *s, float *dx);

/* Average pooling: y[i] is the mean of its k x k window. */
void xf_k_avgpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y);
/* dx = 0, then every dy[i] / (k k) is added to each pixel of its window. */
void xf_k_avgpool_bwd(xf_backend *b, const float *dy, const xf_pool_shape *s, float *dx);

/* ---- the other layers ------------------------------------------------------ */

typedef enum xf_act {
  XF_ACT_GELU = 0, /* x Phi(x) = x (1 + erf(x / sqrt 2)) / 2, PyTorch's exact form */
  XF_ACT_TANH,
  XF_ACT_SIGMOID   /* 1 / (1 + exp(-x)) */
} xf_act;

/* y = act(x) element-wise; y may be x only for tanh and sigmoid (gelu's
 * backward reads x). */
void xf_k_act_fwd(xf_backend *b, xf_act act, float *y, const float *x, size_t n);
/* dx = dy * act'(x), act' taken from x (gelu) or from y = act(x) (tanh:
 * 1 - y^2, sigmoid: y (1 - y)); dx may be dy. */
void xf_k_act_bwd(xf_backend *b, xf_act act, float *dx, const float *dy, const float *x,
                  const float *y, size_t n);

/* Softmax over each of `rows` rows of `cols` values, with the row's maximum
 * subtracted first; y may not be x. */
void xf_k_softmax_fwd(xf_backend *b, float *y, const float *x, int rows, int cols);
/* dx = y * (dy - sum over the row of dy * y); dx may be dy. */
void xf_k_softmax_bwd(xf_backend *b, float *dx, const float *dy, const float *y, int rows,
                      int cols);

/* Group normalization over n records of p positions x c channels (NHWC),
 * the channels in `groups` contiguous groups: each record's group is
 * normalized over its p * (c / groups) values,
 *   xhat = (x - mean) * rstd,  rstd = 1 / sqrt(var + eps)  (biased variance)
 *   y = xhat * gamma[ch] + beta[ch]
 * Layernorm over channels is the case p = 1, groups = 1 with n = records x
 * positions. Mean and variance are accumulated in double. */
#define XF_NORM_GROUPS_MAX 4096

typedef struct xf_norm_shape {
  int n, p, c, groups; /* groups: 1..XF_NORM_GROUPS_MAX, dividing c */
  float eps;
} xf_norm_shape;

/* Keeps xhat (n p c floats) and rstd (n groups floats) for the backward. */
void xf_k_norm_fwd(xf_backend *b, const xf_norm_shape *s, const float *x, const float *gamma,
                   const float *beta, float *y, float *xhat, float *rstd);
/* dx from dy: with g = dy * gamma[ch], over each record's group of m values
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
 * (sums in double). dx must not be dy. The parameter gradients are not
 * formed here: dgamma is the column sum of dy * xhat, dbeta that of dy. */
void xf_k_norm_bwd(xf_backend *b, const xf_norm_shape *s, const float *dy, const float *xhat,
                   const float *rstd, const float *gamma, float *dx);

/* y[i] = u[i] * v[i]; y may be u or v. */
void xf_k_mul(xf_backend *b, float *y, const float *u, const float *v, size_t n);

/* Inverted dropout's mask: mask[i] = 1 / (1 - rate) (as float) when value i
 * is kept, else 0. The draw is counter-based, so both backends give the same
 * mask: with z = seed + (i + 1) * 0x9E3779B97F4A7C15 (mod 2^64) put through
 * splitmix64's finalizer (z ^= z >> 30, z *= 0xBF58476D1CE4E5B9, z ^= z >> 27,
 * z *= 0x94D049BB133111EB, z ^= z >> 31), value i is dropped when z >> 32 is
 * below (uint64_t)(rate * 2^32), computed in double. 0 <= rate < 1. */
void xf_k_dropout_mask(xf_backend *b, float *mask, size_t n, float rate, uint64_t seed);

/* Embedding: y[r][0..dim) = table[ids[r]][0..dim) for `rows` ids, given as
 * floats holding whole numbers in [0, vocab) (the caller checks them). */
void xf_k_embedding_fwd(xf_backend *b, const float *ids, const float *table, int rows, int dim,
                        float *y);
/* dtable = beta * dtable, then dtable[ids[r]] += dy[r] for every row (beta 0
 * or 1). On cuda the additions to one id are atomic, in no fixed order. */
void xf_k_embedding_bwd(xf_backend *b, const float *ids, const float *dy, int rows, int dim,
                        int vocab, float beta, float *dtable);
/* For n records of f ids each, the squared norm of each record's table
 * gradient, sum over a, b < f with ids[a] == ids[b] of <dy_a, dy_b> (dy: n
 * x f x dim), in double; added to out[r] when `accumulate`. */
void xf_k_embedding_sqnorm(xf_backend *b, float *out, const float *ids, const float *dy, int n,
                           int f, int dim, bool accumulate);

/* ---- loss and optimizer --------------------------------------------------- */

/* Softmax cross-entropy over n rows of `classes` logits with integer labels.
 * Host results: *loss_sum = sum of per-row losses, *correct = rows whose
 * argmax equals the label. When dlogits is not NULL it receives the gradient
 * of the MEAN loss: (softmax - onehot) / n. Labels outside [0, classes) are a
 * caller bug (checked by dataset loaders). */
xf_err xf_k_softmax_xent(xf_backend *b, const float *logits, const int32_t *labels, int n,
                         int classes, float *dlogits, double *loss_sum,
                         int *correct) XF_WARN_UNUSED;

typedef struct xf_sgd_params {
  float lr;
  float momentum;     /* 0 disables the velocity buffer's effect */
  float weight_decay; /* L2 coefficient added to the gradient */
  float prox_mu;      /* FedProx: adds mu * (w - w_ref) to the gradient */
  bool nesterov;      /* Nesterov momentum (PyTorch's form) */
} xf_sgd_params;

/* PyTorch's SGD (dampening 0), with the FedProx term:
 *   g' = g + weight_decay * w + prox_mu * (w - w_ref)
 *   v  = momentum * v + g'
 *   w -= lr * v                      (heavy ball)
 *   w -= lr * (g' + momentum * v)    (nesterov)
 * w_ref may be NULL when prox_mu is 0. */
void xf_k_sgd_step(xf_backend *b, float *w, const float *g, float *v, const float *w_ref,
                   size_t n, const xf_sgd_params *p);

/* Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), in
 * PyTorch's arithmetic. bias1 = 1 - beta1^t and bias2 = 1 - beta2^t for the
 * step t (1-based) are computed by the caller, in double, once per step.
 *   adam:  g' = g + weight_decay * w [+ prox_mu * (w - w_ref)]
 *   adamw: g' = g [+ prox_mu * (w - w_ref)];  w = w * (1 - lr * weight_decay)
 *   m = beta1 * m + (1 - beta1) * g'
 *   v = beta2 * v + (1 - beta2) * g'^2
 *   w -= (lr / bias1) * m / (sqrt(v) / sqrt(bias2) + eps)
 * The proximal term uses the weight before adamw's decay. w_ref may be NULL
 * when prox_mu is 0. */
typedef struct xf_adam_params {
  float lr, beta1, beta2, eps, weight_decay, prox_mu;
  bool decoupled;     /* adamw: weight decay applied to w, not added to g */
  double bias1, bias2;
} xf_adam_params;

void xf_k_adam_step(xf_backend *b, float *w, const float *g, float *m, float *v,
                    const float *w_ref, size_t n, const xf_adam_params *p);

/* Losses on one output per row (binary cross-entropy on a logit, squared
 * error), against float targets t. Host results: *loss_sum = sum of the
 * per-row losses, *correct = rows classified right (bce: logit > 0 exactly
 * when t > 0.5; mse: 0, since squared error classifies nothing). When dout
 * is not NULL it receives the gradient of the MEAN loss.
 *   bce: max(z, 0) - z t + log(1 + exp(-|z|)),  d = (sigmoid(z) - t) / n
 *   mse: (z - t)^2,                               d = 2 (z - t) / n */
typedef enum xf_scalar_loss {
  XF_SCALAR_LOSS_BCE = 0,
  XF_SCALAR_LOSS_MSE
} xf_scalar_loss;

xf_err xf_k_scalar_loss(xf_backend *b, xf_scalar_loss kind, const float *z, const float *t,
                        int n, float *dout, double *loss_sum, int *correct) XF_WARN_UNUSED;

#endif
