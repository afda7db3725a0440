/* SPDX-License-Identifier: Apache-2.0 */
/* The table each backend fills in. backend.c dispatches every public xf_k_*
 * call through it; a backend file (backend_cpu.c, backend_cuda.cu) defines one
 * table and one open function and nothing else visible. */
#ifndef XF_KERNELS_BACKEND_INTERNAL_H
#define XF_KERNELS_BACKEND_INTERNAL_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct xf__backend_ops {
  const char *name;
  void (*close)(xf_backend *b);
  xf_err (*alloc)(xf_backend *b, size_t bytes, void **out);
  void (*free)(xf_backend *b, void *p);
  xf_err (*upload)(xf_backend *b, void *dst, const void *src, size_t bytes);
  xf_err (*download)(xf_backend *b, void *dst, const void *src, size_t bytes);
  xf_err (*sync)(xf_backend *b);

  void (*gemm)(xf_backend *b, bool ta, bool tb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *bm, int ldb, float beta, float *c, int ldc);
  void (*gemm_strided_batched)(xf_backend *b, bool ta, bool tb, int m, int n, int k,
                               float alpha, const float *a, int lda, long long stride_a,
                               const float *bm, int ldb, long long stride_b, float beta,
                               float *c, int ldc, long long stride_c, int batch);
  void (*bias_add)(xf_backend *b, float *y, const float *bias, int rows, int cols);
  void (*bias_grad)(xf_backend *b, float *db, const float *dy, int rows, int cols);
  void (*relu_fwd)(xf_backend *b, float *y, const float *x, size_t n);
  void (*relu_bwd)(xf_backend *b, float *dx, const float *dy, const float *y, size_t n);
  void (*axpy)(xf_backend *b, float a, const float *x, float *y, size_t n);
  void (*scale)(xf_backend *b, float *x, float a, size_t n);
  void (*fill)(xf_backend *b, float *x, float v, size_t n);
  void (*copy)(xf_backend *b, float *dst, const float *src, size_t n);
  double (*l2norm)(xf_backend *b, const float *x, size_t n);
  void (*mul_acc)(xf_backend *b, float *y, const float *u, const float *v, size_t n);
  void (*row_dot)(xf_backend *b, float *out, const float *x, const float *y, int rows, int cols,
                  bool accumulate);
  void (*clip_factors)(xf_backend *b, float *factor, const float *sqnorm, int rows, double clip);
  void (*scale_rows)(xf_backend *b, float *x, const float *factor, int rows, int cols);
  void (*im2col)(xf_backend *b, const float *x, const xf_conv_shape *s, float *col);
  void (*col2im)(xf_backend *b, const float *col, const xf_conv_shape *s, float *dx);
  void (*maxpool_fwd)(xf_backend *b, const float *x, const xf_pool_shape *s, float *y,
                      int32_t *argmax);
  void (*maxpool_bwd)(xf_backend *b, const float *dy, const int32_t *argmax,
                      const xf_pool_shape *s, float *dx);
  xf_err (*softmax_xent)(xf_backend *b, const float *logits, const int32_t *labels, int n,
                         int classes, float *dlogits, double *loss_sum, int *correct);
  void (*sgd_step)(xf_backend *b, float *w, const float *g, float *v, const float *w_ref,
                   size_t n, const xf_sgd_params *p);
} xf__backend_ops;

struct xf_backend {
  const xf__backend_ops *ops;
  xf_backend_kind kind;
  int threads;
  char description[160];
  bool profiling;
  double gemm_seconds;
  void *impl; /* the backend's own state, owned by it */
};

/* The host thread count a backend runs its host-side work on: opt->threads,
 * else XF_THREADS, else every core. XF_EINVAL, said, for a bad XF_THREADS or
 * more than 1024. */
xf_err xf__backend_threads(const xf_backend_options *opt, int *threads, xf_errctx *err);

/* Each fills b->ops, b->impl, b->description and b->threads. On failure
 * they leave b->impl NULL and explain in err. */
xf_err xf__cpu_open(xf_backend *b, const xf_backend_options *opt, xf_errctx *err);
#ifdef XF_HAVE_CUDA
xf_err xf__cuda_open(xf_backend *b, const xf_backend_options *opt, xf_errctx *err);
#endif

#ifdef __cplusplus
}
#endif

#endif
