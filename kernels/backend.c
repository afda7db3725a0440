/* SPDX-License-Identifier: Apache-2.0 */
/* Backend selection and dispatch of the public ops to the chosen backend. */
#include "kernels/backend_internal.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"

/* Where the cuda module is looked for, after XF_BACKEND_DIR: the install
 * directory (${libdir}/xfed) and the build tree's kernels/ directory, which
 * comes first for a program that runs from inside the build tree, so ctest
 * and the benchmarks use the module built with them. CMake passes both. */
#ifndef XF_BACKEND_INSTALL_DIR
#error "XF_BACKEND_INSTALL_DIR must name the directory the cuda module is installed in"
#endif
#ifndef XF_VERSION
#error "XF_VERSION must name the project version"
#endif

xf_err xf_backend_parse_kind(const char *s, xf_backend_kind *out) {
  if (strcmp(s, "auto") == 0) *out = XF_BACKEND_AUTO;
  else if (strcmp(s, "cpu") == 0) *out = XF_BACKEND_CPU;
  else if (strcmp(s, "cuda") == 0) *out = XF_BACKEND_CUDA;
  else return XF_EINVAL;
  return XF_OK;
}

/* ---- the cuda module --------------------------------------------------- */

/* At most: the install directory and the build tree, in either order. */
#define XF__MODULE_DIRS 2

#ifdef XF_BACKEND_BUILD_DIR
/* True when this program's executable lies under the build tree. */
static bool running_from_build_tree(void) {
  static const char root[] = XF_BACKEND_BUILD_ROOT "/";
  char self[4096];
  ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (len <= 0) return false;
  self[len] = '\0';
  return strncmp(self, root, sizeof(root) - 1) == 0;
}
#endif

/* The directories to look for the module in, in order; returns how many.
 * XF_BACKEND_DIR, when set, is the only one: an operator who points at a
 * module gets that one or an error, never another found elsewhere. Else the
 * install directory, then the build tree; a program inside the build tree
 * prefers the module built beside it to one an installed package left. */
static int cuda_module_dirs(const char *dirs[XF__MODULE_DIRS]) {
  int n = 0;
  const char *env = getenv("XF_BACKEND_DIR");
  if (env && *env) {
    dirs[n++] = env;
    return n;
  }
#ifdef XF_BACKEND_BUILD_DIR
  bool in_build = running_from_build_tree();
  if (in_build) dirs[n++] = XF_BACKEND_BUILD_DIR;
  dirs[n++] = XF_BACKEND_INSTALL_DIR;
  if (!in_build) dirs[n++] = XF_BACKEND_BUILD_DIR;
#else
  dirs[n++] = XF_BACKEND_INSTALL_DIR;
#endif
  return n;
}

static const xf__backend_host cuda_host = {
    .abi = XF__BACKEND_ABI,
    .backend_size = sizeof(struct xf_backend),
    .version = XF_VERSION,
    .calloc = xf_calloc,
    .free = xf_free,
    .log = xf_log,
    .fail = xf_fail,
    .err_name = xf_err_name,
    .threads = xf__backend_threads,
};

/* The module is loaded at most once per process, on the first request for
 * cuda, and never unloaded (the CUDA runtime must not be unmapped under live
 * handles). A failure to load is remembered, with its reasons. */
static pthread_once_t cuda_module_once = PTHREAD_ONCE_INIT;
static xf__backend_open_fn cuda_module_open;
static char cuda_module_why[1024];
static size_t cuda_module_why_len;

static void cuda_module_say(const char *fmt, ...) XF_PRINTF(1, 2);
static void cuda_module_say(const char *fmt, ...) {
  size_t room = sizeof(cuda_module_why) - cuda_module_why_len;
  if (room <= 1) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(cuda_module_why + cuda_module_why_len, room, fmt, ap);
  va_end(ap);
  if (w > 0) cuda_module_why_len += (size_t)w < room ? (size_t)w : room - 1;
}

/* dlopen()s path and checks that it is a module for this build; the reason
 * it is not goes into cuda_module_why. */
static xf__backend_open_fn cuda_module_try(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    cuda_module_say("%s%s", cuda_module_why_len ? "; " : "", e ? e : path);
    return NULL;
  }
  /* POSIX lets dlsym's object pointer be converted to a function pointer. */
  void *sym = dlsym(h, XF__CUDA_ENTRY);
  xf__backend_open_fn fn;
  memcpy(&fn, &sym, sizeof(fn));
  const char *why = NULL;
  if (!fn)
    why = "it has no " XF__CUDA_ENTRY ", so it is not an xfed backend module";
  else if (fn(&cuda_host, NULL, NULL, NULL) != XF_OK)
    why = "it was built from another version of xfed than this program (" XF_VERSION ")";
  if (!why) return fn;
  cuda_module_say("%s%s: %s", cuda_module_why_len ? "; " : "", path, why);
  dlclose(h);
  return NULL;
}

static void cuda_module_load(void) {
  const char *dirs[XF__MODULE_DIRS];
  int n = cuda_module_dirs(dirs);
  bool found = false;
  for (int i = 0; i < n && !cuda_module_open; i++) {
    char path[4096];
    int len = snprintf(path, sizeof(path), "%s/%s", dirs[i], XF__CUDA_MODULE);
    if (len < 0 || (size_t)len >= sizeof(path) || access(path, F_OK) != 0) continue;
    found = true;
    cuda_module_open = cuda_module_try(path);
    if (cuda_module_open) XF_DEBUG("backend_module", "path=%s", path);
  }
  if (found) return;
  cuda_module_say("%s is in none of", XF__CUDA_MODULE);
  for (int i = 0; i < n; i++) cuda_module_say("%s %s", i ? "," : "", dirs[i]);
}

/* The module's entry point, or NULL with the reasons in cuda_module_why. */
static xf__backend_open_fn cuda_module(void) {
  pthread_once(&cuda_module_once, cuda_module_load);
  return cuda_module_open;
}

bool xf_backend_cuda_built(void) {
  const char *dirs[XF__MODULE_DIRS];
  int n = cuda_module_dirs(dirs);
  for (int i = 0; i < n; i++) {
    char path[4096];
    int len = snprintf(path, sizeof(path), "%s/%s", dirs[i], XF__CUDA_MODULE);
    if (len > 0 && (size_t)len < sizeof(path) && access(path, R_OK) == 0) return true;
  }
  return false;
}

xf_err xf__backend_threads(const xf_backend_options *opt, int *threads_out, xf_errctx *err) {
  int threads = opt->threads;
  const char *env = getenv("XF_THREADS");
  if (threads <= 0 && env && *env) {
    char *end = NULL;
    errno = 0;
    long v = strtol(env, &end, 10);
    if (errno || *end != '\0' || v < 1 || v > 1024)
      return xf_fail(err, XF_EINVAL, "XF_THREADS=%s is not a thread count: use 1 to 1024, "
                     "or unset it to use every core", env);
    threads = (int)v;
  }
  if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (threads <= 0) threads = 1;
  if (threads > 1024)
    return xf_fail(err, XF_EINVAL, "%d threads requested: at most 1024", threads);
  *threads_out = threads;
  return XF_OK;
}

xf_err xf_backend_open(const xf_backend_options *opt, xf_backend **out, xf_errctx *err) {
  xf_backend *b = xf_calloc(1, sizeof(*b));
  if (!b) return xf_fail(err, XF_ENOMEM, "cannot allocate the compute backend");
  xf_err rc = XF_ENODEVICE;
  xf_errctx cuda_err = {0};
  if (opt->kind == XF_BACKEND_CUDA || opt->kind == XF_BACKEND_AUTO) {
    xf_errctx *why = opt->kind == XF_BACKEND_CUDA ? err : &cuda_err;
    xf__backend_open_fn open_cuda = cuda_module();
    if (open_cuda)
      rc = open_cuda(&cuda_host, b, opt, why);
    else
      rc = xf_fail(why, XF_ENODEVICE,
                   "the cuda backend module could not be loaded (%s): install the xfed-cuda "
                   "package, or build with -DXF_CUDA=ON, or point XF_BACKEND_DIR at the "
                   "directory holding %s, or use XF_BACKEND=cpu",
                   cuda_module_why, XF__CUDA_MODULE);
    if (rc == XF_OK) b->kind = XF_BACKEND_CUDA;
    else if (opt->kind == XF_BACKEND_AUTO)
      XF_DEBUG("backend_fallback", "from=cuda to=cpu reason=\"%s\"", cuda_err.msg);
  }
  if (rc != XF_OK && opt->kind != XF_BACKEND_CUDA) {
    memset(b, 0, sizeof(*b));
    rc = xf__cpu_open(b, opt, err);
    if (rc == XF_OK) b->kind = XF_BACKEND_CPU;
  }
  if (rc != XF_OK) {
    xf_free(b);
    return rc;
  }
  *out = b;
  return XF_OK;
}

xf_err xf_backend_open_env(int threads, xf_backend **out, xf_errctx *err) {
  xf_backend_options opt = {XF_BACKEND_AUTO, threads, 0};
  const char *env = getenv("XF_BACKEND");
  if (env && *env && xf_backend_parse_kind(env, &opt.kind) != XF_OK)
    return xf_fail(err, XF_EINVAL, "XF_BACKEND=%s is not a backend: use auto, cpu or cuda",
                   env);
  return xf_backend_open(&opt, out, err);
}

void xf_backend_close(xf_backend *b) {
  if (!b) return;
  if (b->ops && b->ops->close) b->ops->close(b);
  xf_free(b);
}

const char *xf_backend_name(const xf_backend *b) { return b->ops->name; }
xf_backend_kind xf_backend_kind_of(const xf_backend *b) { return b->kind; }
const char *xf_backend_describe(const xf_backend *b) { return b->description; }
int xf_backend_threads(const xf_backend *b) { return b->threads; }

void xf_backend_lend_threads(xf_backend *b, int n) {
  if (b) b->lent = n < 0 ? 0 : n;
}

xf_err xf_backend_alloc(xf_backend *b, size_t bytes, void **out) {
  return b->ops->alloc(b, bytes, out);
}
void xf_backend_free(xf_backend *b, void *p) {
  if (p) b->ops->free(b, p);
}
xf_err xf_backend_upload(xf_backend *b, void *dst, const void *src, size_t bytes) {
  return b->ops->upload(b, dst, src, bytes);
}
xf_err xf_backend_download(xf_backend *b, void *dst, const void *src, size_t bytes) {
  return b->ops->download(b, dst, src, bytes);
}
xf_err xf_backend_sync(xf_backend *b) { return b->ops->sync(b); }

xf_err xf_conv_shape_finish(xf_conv_shape *s) {
  if (s->n <= 0 || s->h <= 0 || s->w <= 0 || s->c <= 0 || s->kh <= 0 || s->kw <= 0 ||
      s->pad < 0 || s->stride <= 0)
    return XF_EINVAL;
  int hh = s->h + 2 * s->pad - s->kh, ww = s->w + 2 * s->pad - s->kw;
  if (hh < 0 || ww < 0) return XF_EINVAL;
  s->oh = hh / s->stride + 1;
  s->ow = ww / s->stride + 1;
  return XF_OK;
}

xf_err xf_pool_shape_finish(xf_pool_shape *s) {
  if (s->n <= 0 || s->h <= 0 || s->w <= 0 || s->c <= 0 || s->k <= 0 || s->stride <= 0 ||
      s->k > s->h || s->k > s->w)
    return XF_EINVAL;
  s->oh = (s->h - s->k) / s->stride + 1;
  s->ow = (s->w - s->k) / s->stride + 1;
  return XF_OK;
}

void xf_backend_profile(xf_backend *b, bool on) {
  b->profiling = on;
  b->gemm_seconds = 0.0;
}

double xf_backend_gemm_seconds(const xf_backend *b) { return b->gemm_seconds; }

static double monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void xf_k_gemm(xf_backend *b, bool ta, bool tb, int m, int n, int k, float alpha,
               const float *a, int lda, const float *bm, int ldb, float beta, float *c,
               int ldc) {
  if (!b->profiling) {
    b->ops->gemm(b, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc);
    return;
  }
  /* The syncs' results are not needed here: a device error stays latched in
   * the backend and reaches the caller at its own next sync. */
  (void)b->ops->sync(b);
  double t0 = monotonic_seconds();
  b->ops->gemm(b, ta, tb, m, n, k, alpha, a, lda, bm, ldb, beta, c, ldc);
  (void)b->ops->sync(b);
  b->gemm_seconds += monotonic_seconds() - t0;
}
void xf_k_gemm_strided_batched(xf_backend *b, bool ta, bool tb, int m, int n, int k,
                               float alpha, const float *a, int lda, long long stride_a,
                               const float *bm, int ldb, long long stride_b, float beta,
                               float *c, int ldc, long long stride_c, int batch) {
  if (!b->profiling) {
    b->ops->gemm_strided_batched(b, ta, tb, m, n, k, alpha, a, lda, stride_a, bm, ldb, stride_b,
                                 beta, c, ldc, stride_c, batch);
    return;
  }
  (void)b->ops->sync(b);
  double t0 = monotonic_seconds();
  b->ops->gemm_strided_batched(b, ta, tb, m, n, k, alpha, a, lda, stride_a, bm, ldb, stride_b,
                               beta, c, ldc, stride_c, batch);
  (void)b->ops->sync(b);
  b->gemm_seconds += monotonic_seconds() - t0;
}
void xf_k_bias_add(xf_backend *b, float *y, const float *bias, int rows, int cols) {
  b->ops->bias_add(b, y, bias, rows, cols);
}
void xf_k_bias_grad(xf_backend *b, float *db, const float *dy, int rows, int cols) {
  b->ops->bias_grad(b, db, dy, rows, cols);
}
void xf_k_relu_fwd(xf_backend *b, float *y, const float *x, size_t n) {
  b->ops->relu_fwd(b, y, x, n);
}
void xf_k_relu_bwd(xf_backend *b, float *dx, const float *dy, const float *y, size_t n) {
  b->ops->relu_bwd(b, dx, dy, y, n);
}
void xf_k_axpy(xf_backend *b, float a, const float *x, float *y, size_t n) {
  b->ops->axpy(b, a, x, y, n);
}
void xf_k_scale(xf_backend *b, float *x, float a, size_t n) { b->ops->scale(b, x, a, n); }
void xf_k_fill(xf_backend *b, float *x, float v, size_t n) { b->ops->fill(b, x, v, n); }
void xf_k_copy(xf_backend *b, float *dst, const float *src, size_t n) {
  b->ops->copy(b, dst, src, n);
}
double xf_k_l2norm(xf_backend *b, const float *x, size_t n) { return b->ops->l2norm(b, x, n); }
void xf_k_mul_acc(xf_backend *b, float *y, const float *u, const float *v, size_t n) {
  b->ops->mul_acc(b, y, u, v, n);
}
void xf_k_row_dot(xf_backend *b, float *out, const float *x, const float *y, int rows, int cols,
                  bool accumulate) {
  b->ops->row_dot(b, out, x, y, rows, cols, accumulate);
}
void xf_k_clip_factors(xf_backend *b, float *factor, const float *sqnorm, int rows, double clip) {
  b->ops->clip_factors(b, factor, sqnorm, rows, clip);
}
void xf_k_scale_rows(xf_backend *b, float *x, const float *factor, int rows, int cols) {
  b->ops->scale_rows(b, x, factor, rows, cols);
}
void xf_k_im2col(xf_backend *b, const float *x, const xf_conv_shape *s, float *col) {
  b->ops->im2col(b, x, s, col);
}
void xf_k_col2im(xf_backend *b, const float *col, const xf_conv_shape *s, float *dx) {
  b->ops->col2im(b, col, s, dx);
}
void xf_k_maxpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y,
                      int32_t *argmax) {
  b->ops->maxpool_fwd(b, x, s, y, argmax);
}
void xf_k_maxpool_bwd(xf_backend *b, const float *dy, const int32_t *argmax,
                      const xf_pool_shape *s, float *dx) {
  b->ops->maxpool_bwd(b, dy, argmax, s, dx);
}
xf_err xf_k_softmax_xent(xf_backend *b, const float *logits, const int32_t *labels, int n,
                         int classes, float *dlogits, double *loss_sum, int *correct) {
  return b->ops->softmax_xent(b, logits, labels, n, classes, dlogits, loss_sum, correct);
}
void xf_k_sgd_step(xf_backend *b, float *w, const float *g, float *v, const float *w_ref,
                   size_t n, const xf_sgd_params *p) {
  b->ops->sgd_step(b, w, g, v, w_ref, n, p);
}
void xf_k_adam_step(xf_backend *b, float *w, const float *g, float *m, float *v,
                    const float *w_ref, size_t n, const xf_adam_params *p) {
  b->ops->adam_step(b, w, g, m, v, w_ref, n, p);
}
xf_err xf_k_scalar_loss(xf_backend *b, xf_scalar_loss kind, const float *z, const float *t,
                        int n, float *dout, double *loss_sum, int *correct) {
  return b->ops->scalar_loss(b, kind, z, t, n, dout, loss_sum, correct);
}
void xf_k_avgpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y) {
  b->ops->avgpool_fwd(b, x, s, y);
}
void xf_k_avgpool_bwd(xf_backend *b, const float *dy, const xf_pool_shape *s, float *dx) {
  b->ops->avgpool_bwd(b, dy, s, dx);
}
void xf_k_act_fwd(xf_backend *b, xf_act act, float *y, const float *x, size_t n) {
  b->ops->act_fwd(b, act, y, x, n);
}
void xf_k_act_bwd(xf_backend *b, xf_act act, float *dx, const float *dy, const float *x,
                  const float *y, size_t n) {
  b->ops->act_bwd(b, act, dx, dy, x, y, n);
}
void xf_k_softmax_fwd(xf_backend *b, float *y, const float *x, int rows, int cols) {
  b->ops->softmax_fwd(b, y, x, rows, cols);
}
void xf_k_softmax_bwd(xf_backend *b, float *dx, const float *dy, const float *y, int rows,
                      int cols) {
  b->ops->softmax_bwd(b, dx, dy, y, rows, cols);
}
void xf_k_norm_fwd(xf_backend *b, const xf_norm_shape *s, const float *x, const float *gamma,
                   const float *beta, float *y, float *xhat, float *rstd) {
  b->ops->norm_fwd(b, s, x, gamma, beta, y, xhat, rstd);
}
void xf_k_norm_bwd(xf_backend *b, const xf_norm_shape *s, const float *dy, const float *xhat,
                   const float *rstd, const float *gamma, float *dx) {
  b->ops->norm_bwd(b, s, dy, xhat, rstd, gamma, dx);
}
void xf_k_mul(xf_backend *b, float *y, const float *u, const float *v, size_t n) {
  b->ops->mul(b, y, u, v, n);
}
void xf_k_dropout_mask(xf_backend *b, float *mask, size_t n, float rate, uint64_t seed) {
  b->ops->dropout_mask(b, mask, n, rate, seed);
}
void xf_k_embedding_fwd(xf_backend *b, const float *ids, const float *table, int rows, int dim,
                        float *y) {
  b->ops->embedding_fwd(b, ids, table, rows, dim, y);
}
void xf_k_embedding_bwd(xf_backend *b, const float *ids, const float *dy, int rows, int dim,
                        int vocab, float beta, float *dtable) {
  b->ops->embedding_bwd(b, ids, dy, rows, dim, vocab, beta, dtable);
}
void xf_k_embedding_sqnorm(xf_backend *b, float *out, const float *ids, const float *dy, int n,
                           int f, int dim, bool accumulate) {
  b->ops->embedding_sqnorm(b, out, ids, dy, n, f, dim, accumulate);
}
