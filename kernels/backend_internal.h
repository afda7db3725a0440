/* SPDX-License-Identifier: Apache-2.0 */
/* The table each backend fills in. backend.c dispatches every public xf_k_*
 * call through it; a backend file (backend_cpu.c, backend_cuda.cu) defines one
 * table and one open function and nothing else visible. */
#ifndef XF_KERNELS_BACKEND_INTERNAL_H
#define XF_KERNELS_BACKEND_INTERNAL_H

#include "base/log.h"
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
  void (*avgpool_fwd)(xf_backend *b, const float *x, const xf_pool_shape *s, float *y);
  void (*avgpool_bwd)(xf_backend *b, const float *dy, const xf_pool_shape *s, float *dx);
  void (*act_fwd)(xf_backend *b, xf_act act, float *y, const float *x, size_t n);
  void (*act_bwd)(xf_backend *b, xf_act act, float *dx, const float *dy, const float *x,
                  const float *y, size_t n);
  void (*softmax_fwd)(xf_backend *b, float *y, const float *x, int rows, int cols);
  void (*softmax_bwd)(xf_backend *b, float *dx, const float *dy, const float *y, int rows,
                      int cols);
  void (*norm_fwd)(xf_backend *b, const xf_norm_shape *s, const float *x, const float *gamma,
                   const float *beta, float *y, float *xhat, float *rstd);
  void (*norm_bwd)(xf_backend *b, const xf_norm_shape *s, const float *dy, const float *xhat,
                   const float *rstd, const float *gamma, float *dx);
  void (*mul)(xf_backend *b, float *y, const float *u, const float *v, size_t n);
  void (*dropout_mask)(xf_backend *b, float *mask, size_t n, float rate, uint64_t seed);
  void (*embedding_fwd)(xf_backend *b, const float *ids, const float *table, int rows, int dim,
                        float *y);
  void (*embedding_bwd)(xf_backend *b, const float *ids, const float *dy, int rows, int dim,
                        int vocab, float beta, float *dtable);
  void (*embedding_sqnorm)(xf_backend *b, float *out, const float *ids, const float *dy, int n,
                           int f, int dim, bool accumulate);
  xf_err (*softmax_xent)(xf_backend *b, const float *logits, const int32_t *labels, int n,
                         int classes, float *dlogits, double *loss_sum, int *correct);
  void (*sgd_step)(xf_backend *b, float *w, const float *g, float *v, const float *w_ref,
                   size_t n, const xf_sgd_params *p);
  void (*adam_step)(xf_backend *b, float *w, const float *g, float *m, float *v,
                    const float *w_ref, size_t n, const xf_adam_params *p);
  xf_err (*scalar_loss)(xf_backend *b, xf_scalar_loss kind, const float *z, const float *t,
                        int n, float *dout, double *loss_sum, int *correct);
} xf__backend_ops;

struct xf_backend {
  const xf__backend_ops *ops;
  xf_backend_kind kind;
  int threads;
  int lent; /* host threads lent to other work (xf_backend_lend_threads) */
  char description[160];
  bool profiling;
  double gemm_seconds;
  void *impl; /* the backend's own state, owned by it */
};

/* The host thread count a backend runs its host-side work on: opt->threads,
 * else XF_THREADS, else every core. XF_EINVAL, said, for a bad XF_THREADS or
 * more than 1024. */
xf_err xf__backend_threads(const xf_backend_options *opt, int *threads, xf_errctx *err);

/* Fills b->ops, b->impl, b->description and b->threads. On failure it
 * leaves b->impl NULL and explains in err. */
xf_err xf__cpu_open(xf_backend *b, const xf_backend_options *opt, xf_errctx *err);

/* ---- the cuda module ------------------------------------------------------
 * The cuda backend is a shared object of its own (libxfed-cuda.so), so that
 * only a process that opens it maps the CUDA runtime and cuBLAS. backend.c
 * dlopen()s it on the first request for cuda and calls its one exported
 * symbol, XF__CUDA_ENTRY. The module links nothing of xfed: what it needs from
 * the process (allocation, logging, error context, the thread count) comes in
 * the host table, so the process's own allocator hooks and log format apply. */

/* Raised whenever this table, xf__backend_ops or struct xf_backend changes
 * shape; a module built for another value refuses to open. */
#define XF__BACKEND_ABI 3
#define XF__CUDA_MODULE "libxfed-cuda.so"
#define XF__CUDA_ENTRY "xf_cuda_backend_open"

typedef struct xf__backend_host {
  unsigned abi;        /* XF__BACKEND_ABI of the process */
  size_t backend_size; /* sizeof(struct xf_backend) of the process */
  const char *version; /* the project version the process was built from */
  void *(*calloc)(size_t n, size_t size);
  void (*free)(void *p);
  void (*log)(xf_log_level level, const char *event, const char *fields, ...) XF_PRINTF(3, 4);
  xf_err (*fail)(xf_errctx *ctx, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
  const char *(*err_name)(xf_err code);
  xf_err (*threads)(const xf_backend_options *opt, int *threads, xf_errctx *err);
} xf__backend_host;

/* The module's entry point: opens the cuda backend into b as xf__cpu_open
 * does for cpu. `host` outlives every backend the module opens. A module
 * built for another ABI, struct size or version returns XF_EUNSUPPORTED
 * without touching b or err (the host table may not be what it expects);
 * the caller says why. With b NULL it only makes that check and returns
 * XF_OK when the module fits the process; it touches no device then. */
typedef xf_err (*xf__backend_open_fn)(const xf__backend_host *host, xf_backend *b,
                                      const xf_backend_options *opt, xf_errctx *err);

#ifdef __cplusplus
}
#endif

#endif
