/* SPDX-License-Identifier: Apache-2.0 */
/* The cuda backend: cuBLAS for GEMM and CUDA kernels for every other op, all
 * queued on one stream, checked against the cpu backend by test_kernels_gpu.
 *
 * What a caller may rely on beyond backend.h:
 *  - Every op runs on the backend's one stream, in call order; transfers and
 *    ops that return host values synchronize that stream before returning,
 *    so host buffers may be reused as soon as they return.
 *  - The first failure of a void op (a launch, a cuBLAS call, a device fault)
 *    is latched together with its message, logged once, and returned by every
 *    later xf_backend_sync, transfer and xf_k_softmax_xent. The latch is never
 *    cleared: after an error the backend skips all further work and only
 *    xf_backend_free and xf_backend_close remain useful. A failed
 *    xf_backend_alloc is returned directly and does not latch.
 *  - A backend is driven by one thread at a time (any thread: each entry
 *    point makes the backend's device current first).
 *  - Element-wise ops (mul_acc, mul, scale_rows and clip_factors included),
 *    bias_add, im2col, col2im, maxpool_fwd, avgpool_fwd, avgpool_bwd (a
 *    gather in the cpu scatter's order, as col2im), the backward of tanh and
 *    sigmoid, embedding_fwd (a copy), dropout_mask (integer hashing; the
 *    kept value and the threshold are computed on the host as the cpu does),
 *    sgd_step and adam_step give bit-identical results to cpu: the
 *    arithmetic is written with the round-to-nearest intrinsics (__fmul_rn,
 *    __fadd_rn, ...) that nvcc never contracts into FMA, in the cpu's
 *    evaluation order, and nothing here is built with --use_fast_math (no
 *    flush-to-zero). GEMM, the reductions and maxpool_bwd with overlapping
 *    windows differ from cpu only by summation order; docs/kernels.md gives
 *    the tolerances the tests hold them to.
 *  - The other layers' ops are held to cpu within rounding: act_fwd and
 *    gelu's backward follow the cpu's double formulas but CUDA's erf, exp
 *    and tanh differ from glibc's (and tanh from tanhf) in the last bits;
 *    softmax_fwd/bwd, norm_fwd/bwd and embedding_sqnorm sum in double in
 *    block order, not the cpu's sequence; embedding_bwd adds rows that share
 *    an id with atomics.
 *  - Reductions (bias_grad, l2norm, row_dot, softmax_xent, scalar_loss,
 *    softmax_fwd/bwd, norm_fwd/bwd, embedding_sqnorm) sum in a fixed order
 *    that depends only on the sizes, so they repeat bit for bit on one GPU
 *    model; maxpool_bwd with overlapping windows and embedding_bwd with
 *    repeated ids use atomics and do not. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The base headers are C without C++ guards; give their functions C linkage.
 * Only their types and macros are used: this file is the cuda module
 * (libxfed-cuda.so), which links nothing of xfed and reaches the process's
 * allocator, log and error context through the host table it is opened with
 * (backend_internal.h). */
extern "C" {
#include "base/log.h"
#include "base/result.h"
#include "kernels/backend.h"
}
#include "kernels/backend_internal.h"

#ifndef XF_VERSION
#error "XF_VERSION must name the project version the module is built from"
#endif

/* Threads per block for every kernel; reductions rely on it being a power of
 * two. 256 keeps eight blocks resident per SM on Hopper. */
#define XF__THREADS 256
/* Grid-stride kernels use at most this many blocks (plenty to fill 132 SMs);
 * the l2norm partial sums depend on it, so it is a constant, not a function
 * of the device, to keep that sum's order the same on every GPU. */
#define XF__MAX_BLOCKS 1024
/* bias_grad sums chunks of at least this many rows per partial, and at most
 * this many partials per column, so its scratch stays parts * cols doubles. */
#define XF__BIAS_CHUNK_MIN 64
#define XF__BIAS_PARTS_MAX 256
/* Smallest scratch allocation; it grows by doubling when an op needs more. */
#define XF__SCRATCH_MIN ((size_t)64 << 10)

typedef struct cuda_state {
  const xf__backend_host *host; /* the process's services; outlives the state */
  int device;
  cudaStream_t stream;
  cublasHandle_t blas;
  /* Device workspace shared by the reductions. Ops use it in stream order, so
   * one buffer serves them all; growing it waits for the stream first. */
  void *scratch;
  size_t scratch_bytes;
  xf_err err; /* first latched failure, XF_OK while healthy */
  char err_msg[256];
} cuda_state;

/* Totals that softmax_xent downloads; sits at the start of the scratch. */
typedef struct softmax_totals {
  double loss;
  int correct;
  int unused;
} softmax_totals;

static cuda_state *state_of(xf_backend *b) { return (cuda_state *)b->impl; }

/* ---- error latch --------------------------------------------------------- */

static void cuda_latch(cuda_state *st, xf_err code, const char *fmt, ...) XF_PRINTF(3, 4);
static void cuda_latch(cuda_state *st, xf_err code, const char *fmt, ...) {
  if (st->err != XF_OK) return; /* the first failure is the one worth reading */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(st->err_msg, sizeof(st->err_msg), fmt, ap);
  va_end(ap);
  st->err = code;
  st->host->log(XF_LOG_ERROR, "cuda_error", "device=%d code=%s msg=\"%s\"", st->device,
                st->host->err_name(code), st->err_msg);
}

/* True on success; otherwise latches `what` with CUDA's words. The runtime's
 * "last error" is read back so a non-sticky failure is not reported a second
 * time by the next launch check. */
static bool cuda_ok(cuda_state *st, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return true;
  (void)cudaGetLastError();
  cuda_latch(st, e == cudaErrorMemoryAllocation ? XF_ENOMEM : XF_EBACKEND, "%s: %s (%s)",
             what, cudaGetErrorString(e), cudaGetErrorName(e));
  return false;
}

static bool blas_ok(cuda_state *st, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  cuda_latch(st, s == CUBLAS_STATUS_ALLOC_FAILED ? XF_ENOMEM : XF_EBACKEND, "%s: %s (%s)",
             what, cublasGetStatusString(s), cublasGetStatusName(s));
  return false;
}

/* Every entry point starts here: false when the backend already failed or
 * its device cannot be made current on this thread. */
static bool cuda_enter(cuda_state *st) {
  if (st->err != XF_OK) return false;
  return cuda_ok(st, cudaSetDevice(st->device), "cudaSetDevice");
}

/* Checks the launch just queued (bad configuration, missing kernel image). */
static bool launched(cuda_state *st, const char *kernel) {
  return cuda_ok(st, cudaGetLastError(), kernel);
}

static unsigned grid_for(size_t n) {
  size_t blocks = (n + XF__THREADS - 1) / XF__THREADS;
  if (blocks > XF__MAX_BLOCKS) blocks = XF__MAX_BLOCKS;
  return blocks ? (unsigned)blocks : 1u;
}

/* At least `bytes` of device scratch, or NULL with the failure latched. */
static void *cuda_scratch(cuda_state *st, size_t bytes) {
  if (bytes <= st->scratch_bytes) return st->scratch;
  size_t want = st->scratch_bytes ? st->scratch_bytes : XF__SCRATCH_MIN;
  while (want < bytes) {
    if (want > SIZE_MAX / 2) {
      want = bytes;
      break;
    }
    want *= 2;
  }
  /* Queued kernels may still read the old buffer. */
  if (!cuda_ok(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize")) return NULL;
  if (st->scratch) {
    cudaError_t e = cudaFree(st->scratch);
    st->scratch = NULL;
    st->scratch_bytes = 0;
    if (!cuda_ok(st, e, "cudaFree (scratch)")) return NULL;
  }
  void *p = NULL;
  if (!cuda_ok(st, cudaMalloc(&p, want), "cudaMalloc (scratch)")) return NULL;
  st->scratch = p;
  st->scratch_bytes = want;
  return p;
}

/* ---- kernels --------------------------------------------------------------
 * Grid-stride loops over size_t indices, so any element count works with any
 * grid. The per-element bodies of the index-heavy ops are __host__ __device__
 * functions of their index, so their arithmetic can also be run on the host
 * and compared with the cpu loops on a machine without a GPU. */

#define XF__FOR_EACH(i, n)                                                      \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);     \
       i += (size_t)gridDim.x * blockDim.x)

/* Sum of v over the block, valid in thread 0; sh holds XF__THREADS doubles.
 * The tree order is fixed, so the result depends only on the inputs. */
static __device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = XF__THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sh[threadIdx.x] += sh[threadIdx.x + half];
    __syncthreads();
  }
  return sh[0];
}

/* C = beta * C for an m x n row-major block: BLAS's result when k == 0 or
 * alpha == 0, with C not read when beta == 0 (so NaNs there are cleared). */
static __global__ void k_gemm_beta(float *c, int m, int n, int ldc, float beta) {
  size_t total = (size_t)m * (size_t)n;
  XF__FOR_EACH(i, total) {
    size_t r = i / (size_t)n, col = i % (size_t)n;
    float *p = c + r * (size_t)ldc + col;
    *p = beta == 0.0f ? 0.0f : __fmul_rn(beta, *p);
  }
}

static __global__ void k_bias_add(float *y, const float *bias, int rows, int cols) {
  size_t total = (size_t)rows * (size_t)cols;
  XF__FOR_EACH(i, total) y[i] = __fadd_rn(y[i], bias[i % (size_t)cols]);
}

/* Sum in double of dy[r][c] over rows [part * chunk, (part + 1) * chunk). */
static __host__ __device__ double bias_partial_at(const float *dy, int rows, int cols,
                                                  int chunk, int part, int c) {
  size_t r0 = (size_t)part * (size_t)chunk;
  size_t r1 = r0 + (size_t)chunk;
  if (r1 > (size_t)rows) r1 = (size_t)rows;
  double s = 0.0;
  for (size_t r = r0; r < r1; r++) s += (double)dy[r * (size_t)cols + (size_t)c];
  return s;
}

/* Block (32, 8): x runs over columns so each warp reads one row segment
 * contiguously; y runs over row chunks. */
static __global__ void k_bias_partial(const float *dy, int rows, int cols, int chunk,
                                      int parts, double *partial) {
  int c = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  int part = (int)(blockIdx.y * blockDim.y + threadIdx.y);
  if (c >= cols || part >= parts) return;
  partial[(size_t)part * (size_t)cols + (size_t)c] =
      bias_partial_at(dy, rows, cols, chunk, part, c);
}

static __global__ void k_bias_final(const double *partial, int parts, int cols, float *db) {
  XF__FOR_EACH(c, (size_t)cols) {
    double s = 0.0;
    for (int p = 0; p < parts; p++) s += partial[(size_t)p * (size_t)cols + c];
    db[c] = (float)s;
  }
}

static __global__ void k_relu_fwd(float *y, const float *x, size_t n) {
  XF__FOR_EACH(i, n) {
    float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

static __global__ void k_relu_bwd(float *dx, const float *dy, const float *y, size_t n) {
  XF__FOR_EACH(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static __global__ void k_axpy(float a, const float *x, float *y, size_t n) {
  XF__FOR_EACH(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(a, x[i]));
}

static __global__ void k_scale(float *x, float a, size_t n) {
  XF__FOR_EACH(i, n) x[i] = __fmul_rn(x[i], a);
}

static __global__ void k_fill(float *x, float v, size_t n) {
  XF__FOR_EACH(i, n) x[i] = v;
}

static __global__ void k_mul_acc(float *y, const float *u, const float *v, size_t n) {
  XF__FOR_EACH(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(u[i], v[i]));
}

/* One block per row (grid-striding over rows when there are more rows than
 * blocks): the threads stride the row's columns, then block_sum, so the
 * order depends on the sizes only. A float product is exact in double, so a
 * contracted multiply-add gives the same sum as a separate one. */
static __global__ void k_row_dot(float *out, const float *x, const float *y, int rows, int cols,
                                 bool accumulate) {
  __shared__ double sh[XF__THREADS];
  for (int r = (int)blockIdx.x; r < rows; r += (int)gridDim.x) {
    const float *xr = x + (size_t)r * (size_t)cols, *yr = y + (size_t)r * (size_t)cols;
    double s = 0.0;
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
      s += (double)xr[c] * (double)yr[c];
    double total = block_sum(s, sh);
    if (threadIdx.x == 0) out[r] = (float)(accumulate ? (double)out[r] + total : total);
    __syncthreads(); /* every thread has read sh[0] before the next row reuses sh */
  }
}

/* The cpu formula in double: IEEE sqrt and division, one rounding to float,
 * so the factors are bit-identical. */
static __global__ void k_clip_factors(float *factor, const float *sqnorm, int rows, double clip) {
  const double limit = __dmul_rn(clip, clip);
  XF__FOR_EACH(r, (size_t)rows) {
    double s = (double)sqnorm[r];
    factor[r] = s > limit ? (float)__ddiv_rn(clip, __dsqrt_rn(s)) : 1.0f;
  }
}

static __global__ void k_scale_rows(float *x, const float *factor, int rows, int cols) {
  size_t total = (size_t)rows * (size_t)cols;
  XF__FOR_EACH(i, total) x[i] = __fmul_rn(x[i], factor[i / (size_t)cols]);
}

/* partial[blockIdx.x] = sum of x[i]^2 over this block's grid-stride share. */
static __global__ void k_sumsq_partial(const float *x, size_t n, double *partial) {
  __shared__ double sh[XF__THREADS];
  double s = 0.0;
  XF__FOR_EACH(i, n) {
    double v = (double)x[i];
    s += v * v; /* exact: a float squared fits a double's mantissa */
  }
  double total = block_sum(s, sh);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

/* *out = sum of v[0..count), one block, fixed order. */
static __global__ void k_sum_final(const double *v, unsigned count, double *out) {
  __shared__ double sh[XF__THREADS];
  double s = 0.0;
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) s += v[i];
  double total = block_sum(s, sh);
  if (threadIdx.x == 0) *out = total;
}

/* col entry `idx` of im2col, by the cpu version's index formula. */
static __host__ __device__ float im2col_at(const float *x, xf_conv_shape s, size_t idx) {
  size_t c = (size_t)s.c;
  size_t row_len = (size_t)s.kh * (size_t)s.kw * c;
  size_t row = idx / row_len, rem = idx % row_len;
  int ch = (int)(rem % c);
  size_t t = rem / c;
  int j = (int)(t % (size_t)s.kw), i = (int)(t / (size_t)s.kw);
  int ox = (int)(row % (size_t)s.ow);
  size_t t2 = row / (size_t)s.ow;
  int oy = (int)(t2 % (size_t)s.oh);
  size_t n = t2 / (size_t)s.oh;
  int iy = oy * s.stride - s.pad + i, ix = ox * s.stride - s.pad + j;
  if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) return 0.0f;
  return x[((n * (size_t)s.h + (size_t)iy) * (size_t)s.w + (size_t)ix) * c + (size_t)ch];
}

static __global__ void k_im2col(const float *x, xf_conv_shape s, size_t total, float *col) {
  XF__FOR_EACH(idx, total) col[idx] = im2col_at(x, s, idx);
}

/* dx entry `idx` of col2im as a gather: the sum of the col entries that
 * im2col reads from this pixel. Output positions are visited in ascending
 * (oy, ox), the order the cpu scatter adds them in, and the sum starts from
 * 0.0f as the cpu's memset does, so the result is bit-identical and needs no
 * atomics. */
static __host__ __device__ float col2im_at(const float *col, xf_conv_shape s, size_t idx) {
  size_t c = (size_t)s.c;
  size_t row_len = (size_t)s.kh * (size_t)s.kw * c;
  int ch = (int)(idx % c);
  size_t t = idx / c;
  int ix = (int)(t % (size_t)s.w);
  t /= (size_t)s.w;
  int iy = (int)(t % (size_t)s.h);
  size_t n = t / (size_t)s.h;
  /* Window row i = iy + pad - oy * stride must lie in [0, kh). */
  int ylo_num = iy + s.pad - s.kh + 1, xlo_num = ix + s.pad - s.kw + 1;
  int oy_lo = ylo_num <= 0 ? 0 : (ylo_num + s.stride - 1) / s.stride;
  int ox_lo = xlo_num <= 0 ? 0 : (xlo_num + s.stride - 1) / s.stride;
  int oy_hi = (iy + s.pad) / s.stride, ox_hi = (ix + s.pad) / s.stride;
  if (oy_hi > s.oh - 1) oy_hi = s.oh - 1;
  if (ox_hi > s.ow - 1) ox_hi = s.ow - 1;
  float sum = 0.0f;
  for (int oy = oy_lo; oy <= oy_hi; oy++) {
    int i = iy + s.pad - oy * s.stride;
    for (int ox = ox_lo; ox <= ox_hi; ox++) {
      int j = ix + s.pad - ox * s.stride;
      size_t row = (n * (size_t)s.oh + (size_t)oy) * (size_t)s.ow + (size_t)ox;
      sum += col[row * row_len + ((size_t)i * (size_t)s.kw + (size_t)j) * c + (size_t)ch];
    }
  }
  return sum;
}

static __global__ void k_col2im(const float *col, xf_conv_shape s, size_t total, float *dx) {
  XF__FOR_EACH(idx, total) dx[idx] = col2im_at(col, s, idx);
}

/* Where output o's pooling window starts in x (NHWC): its top-left input,
 * channel included; the window's input (i, j) is at origin + (i w + j) c. */
static __host__ __device__ size_t pool_origin(xf_pool_shape s, size_t o) {
  size_t c = (size_t)s.c;
  size_t ch = o % c;
  size_t t = o / c;
  size_t ox = t % (size_t)s.ow;
  t /= (size_t)s.ow;
  size_t oy = t % (size_t)s.oh;
  size_t n = t / (size_t)s.oh;
  size_t y0 = oy * (size_t)s.stride, x0 = ox * (size_t)s.stride;
  return ((n * (size_t)s.h + y0) * (size_t)s.w + x0) * c + ch;
}

/* Output `o` of max pooling: the first maximum in window order, as on cpu. */
static __host__ __device__ void maxpool_at(const float *x, xf_pool_shape s, size_t o,
                                           float *y, int32_t *argmax) {
  size_t org = pool_origin(s, o), c = (size_t)s.c, w = (size_t)s.w;
  size_t best_i = org;
  float best = x[best_i];
  for (size_t i = 0; i < (size_t)s.k; i++) {
    for (size_t j = 0; j < (size_t)s.k; j++) {
      size_t idx = org + (i * w + j) * c;
      if (x[idx] > best) {
        best = x[idx];
        best_i = idx;
      }
    }
  }
  y[o] = best;
  argmax[o] = (int32_t)best_i;
}

static __global__ void k_maxpool_fwd(const float *x, xf_pool_shape s, size_t total, float *y,
                                     int32_t *argmax) {
  XF__FOR_EACH(o, total) maxpool_at(x, s, o, y, argmax);
}

/* dx[argmax[i]] += dy[i]. Windows overlap when stride < k, so several
 * outputs may hit one input: atomics, in no fixed order. An index outside x
 * (a caller bug) is skipped rather than written out of bounds. */
static __global__ void k_maxpool_bwd(const float *dy, const int32_t *argmax, size_t out,
                                     size_t in, float *dx) {
  XF__FOR_EACH(i, out) {
    int32_t a = argmax[i];
    if (a >= 0 && (size_t)a < in) atomicAdd(dx + a, dy[i]);
  }
}

/* Row r of softmax cross-entropy, in the cpu version's order: the loss in
 * double, whether the argmax (first maximum) is the label, and the gradient
 * row of the mean loss when dlogits is not NULL. A label outside [0, classes)
 * (a caller bug) gives a NaN loss and a gradient without the one-hot term
 * instead of a read out of bounds. */
static __host__ __device__ void softmax_row_at(const float *logits, const int32_t *labels,
                                               int classes, float inv_n, float *dlogits,
                                               size_t r, double *loss, int *right) {
  const float *z = logits + r * (size_t)classes;
  int label = labels[r];
  bool label_ok = label >= 0 && label < classes;
  float zmax = z[0];
  int arg = 0;
  for (int c = 1; c < classes; c++) {
    if (z[c] > zmax) {
      zmax = z[c];
      arg = c;
    }
  }
  double sum = 0.0;
  for (int c = 0; c < classes; c++) sum += exp((double)z[c] - zmax);
  *loss = label_ok ? log(sum) - ((double)z[label] - zmax) : (double)NAN;
  *right = label_ok && arg == label;
  if (dlogits) {
    float *d = dlogits + r * (size_t)classes;
    for (int c = 0; c < classes; c++) {
      float p = (float)(exp((double)z[c] - zmax) / sum);
      d[c] = (p - (c == label ? 1.0f : 0.0f)) * inv_n;
    }
  }
}

/* One thread per row; rows are independent and class counts small. */
static __global__ void k_softmax_rows(const float *logits, const int32_t *labels, int n,
                                      int classes, float inv_n, float *dlogits,
                                      double *row_loss, int *row_right) {
  XF__FOR_EACH(r, (size_t)n) {
    softmax_row_at(logits, labels, classes, inv_n, dlogits, r, row_loss + r, row_right + r);
  }
}

/* One block: totals of the per-row losses and correct flags, fixed order. */
static __global__ void k_softmax_total(const double *row_loss, const int *row_right, int n,
                                       softmax_totals *out) {
  __shared__ double sh[XF__THREADS];
  double loss = 0.0, right = 0.0;
  for (int r = (int)threadIdx.x; r < n; r += (int)blockDim.x) {
    loss += row_loss[r];
    right += (double)row_right[r];
  }
  double loss_total = block_sum(loss, sh);
  __syncthreads(); /* every thread has read sh[0] before sh is reused */
  double right_total = block_sum(right, sh);
  if (threadIdx.x == 0) {
    out->loss = loss_total;
    out->correct = (int)right_total; /* counts up to 2^31 are exact in double */
  }
}

/* The cpu formula term by term, same order, no FMA:
 *   g' = (g + wd * w) [+ mu * (w - w_ref)];  v = mom * v + g';  w -= lr * v */
static __global__ void k_sgd_step(float *w, const float *g, float *v, const float *w_ref,
                                  size_t n, float lr, float mom, float wd, float mu,
                                  bool nesterov) {
  XF__FOR_EACH(i, n) {
    float wi = w[i];
    float gi = __fadd_rn(g[i], __fmul_rn(wd, wi));
    if (w_ref) gi = __fadd_rn(gi, __fmul_rn(mu, __fsub_rn(wi, w_ref[i])));
    float vi = __fadd_rn(__fmul_rn(mom, v[i]), gi);
    v[i] = vi;
    /* nesterov: w -= lr * (g' + mom * v) */
    float dir = nesterov ? __fadd_rn(gi, __fmul_rn(mom, vi)) : vi;
    w[i] = __fsub_rn(wi, __fmul_rn(lr, dir));
  }
}

/* The cpu adam step term by term, same order, no FMA (backend.h has the
 * formula); step = lr / bias1 and root2 = sqrt(bias2) come from the host as
 * the cpu version computes them. */
static __global__ void k_adam_step(float *w, const float *g, float *m, float *v,
                                   const float *w_ref, size_t n, float b1, float b2, float c1,
                                   float c2, float step, float root2, float wd, float mu,
                                   float eps, float keep, bool decoupled) {
  XF__FOR_EACH(i, n) {
    float wi = w[i], gi = g[i];
    if (!decoupled) gi = __fadd_rn(gi, __fmul_rn(wd, wi));
    if (w_ref) gi = __fadd_rn(gi, __fmul_rn(mu, __fsub_rn(wi, w_ref[i])));
    if (decoupled) wi = __fmul_rn(wi, keep);
    float mi = __fadd_rn(__fmul_rn(b1, m[i]), __fmul_rn(c1, gi));
    float vi = __fadd_rn(__fmul_rn(b2, v[i]), __fmul_rn(c2, __fmul_rn(gi, gi)));
    m[i] = mi;
    v[i] = vi;
    float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), root2), eps);
    w[i] = __fsub_rn(wi, __fmul_rn(step, __fdiv_rn(mi, denom)));
  }
}

/* One thread per row of xf_k_scalar_loss, the cpu row's steps in double. */
static __global__ void k_scalar_rows(int kind, const float *z, const float *t, int n,
                                     float inv_n, float *dout, double *row_loss,
                                     int *row_right) {
  XF__FOR_EACH(r, (size_t)n) {
    float zf = z[r], tf = t[r];
    double zd = (double)zf, td = (double)tf;
    if (kind == (int)XF_SCALAR_LOSS_BCE) {
      row_loss[r] = (zd > 0.0 ? zd : 0.0) - zd * td + log1p(exp(-fabs(zd)));
      row_right[r] = (zf > 0.0f) == (tf > 0.5f);
      if (dout) {
        double sig = zd >= 0.0 ? 1.0 / (1.0 + exp(-zd)) : exp(zd) / (1.0 + exp(zd));
        dout[r] = __fmul_rn((float)(sig - td), inv_n);
      }
    } else {
      double e = zd - td;
      row_loss[r] = e * e;
      row_right[r] = 0;
      if (dout) dout[r] = __fmul_rn((float)(2.0 * e), inv_n);
    }
  }
}

/* ---- the other layers' kernels ---------------------------------------------- */

/* a * b rounded once and never fused with a later addition: __fmul_rn on
 * the device; on the host (where only checks of the index arithmetic run
 * these bodies) the plain product. */
static __host__ __device__ float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

/* Input pixel `idx` of average pooling's backward as a gather: the sum of
 * dy[o] * inv (inv = 1 / (k k) in float) over the windows o that read the
 * pixel, visited in ascending (oy, ox) from 0.0f, the order in which the
 * cpu's scatter adds them, so the result is bit-identical without atomics;
 * pixels no window reads get 0. */
static __host__ __device__ float avgpool_bwd_at(const float *dy, xf_pool_shape s, float inv,
                                                size_t idx) {
  size_t c = (size_t)s.c;
  size_t ch = idx % c;
  size_t t = idx / c;
  int ix = (int)(t % (size_t)s.w);
  t /= (size_t)s.w;
  int iy = (int)(t % (size_t)s.h);
  size_t n = t / (size_t)s.h;
  /* Window row i = iy - oy * stride must lie in [0, k). */
  int ylo_num = iy - s.k + 1, xlo_num = ix - s.k + 1;
  int oy_lo = ylo_num <= 0 ? 0 : (ylo_num + s.stride - 1) / s.stride;
  int ox_lo = xlo_num <= 0 ? 0 : (xlo_num + s.stride - 1) / s.stride;
  int oy_hi = iy / s.stride, ox_hi = ix / s.stride;
  if (oy_hi > s.oh - 1) oy_hi = s.oh - 1;
  if (ox_hi > s.ow - 1) ox_hi = s.ow - 1;
  float sum = 0.0f;
  for (int oy = oy_lo; oy <= oy_hi; oy++) {
    for (int ox = ox_lo; ox <= ox_hi; ox++) {
      size_t o = ((n * (size_t)s.oh + (size_t)oy) * (size_t)s.ow + (size_t)ox) * c + ch;
      sum += mul_rn(dy[o], inv);
    }
  }
  return sum;
}

/* Output `o` of average pooling: the window summed in float in window order
 * from 0.0f, then times inv = 1 / (k k), as on cpu: bit-identical. */
static __host__ __device__ float avgpool_at(const float *x, xf_pool_shape s, float inv,
                                            size_t o) {
  size_t org = pool_origin(s, o), c = (size_t)s.c, w = (size_t)s.w;
  float sum = 0.0f;
  for (size_t i = 0; i < (size_t)s.k; i++)
    for (size_t j = 0; j < (size_t)s.k; j++) sum += x[org + (i * w + j) * c];
  return mul_rn(sum, inv);
}

static __global__ void k_avgpool_fwd(const float *x, xf_pool_shape s, float inv, size_t total,
                                     float *y) {
  XF__FOR_EACH(o, total) y[o] = avgpool_at(x, s, inv, o);
}

static __global__ void k_avgpool_bwd(const float *dy, xf_pool_shape s, float inv, size_t total,
                                     float *dx) {
  XF__FOR_EACH(idx, total) dx[idx] = avgpool_bwd_at(dy, s, inv, idx);
}

/* gelu and sigmoid in double as the cpu writes them (the double intrinsics
 * keep nvcc from fusing what the C code rounds twice), tanh in double: each
 * rounded to float once. Only the library's erf, exp and tanh differ from
 * glibc's (and tanhf's), in the last bits. gelu's derivative is
 * Phi(x) + x phi(x). */
#define XF__INV_SQRT2 0.70710678118654752440
#define XF__INV_SQRT_2PI 0.39894228040143267794

static __global__ void k_act_fwd(int act, float *y, const float *x, size_t n) {
  XF__FOR_EACH(i, n) {
    double v = (double)x[i];
    double r;
    if (act == (int)XF_ACT_GELU)
      r = __dmul_rn(__dmul_rn(0.5, v), __dadd_rn(1.0, erf(__dmul_rn(v, XF__INV_SQRT2))));
    else if (act == (int)XF_ACT_TANH)
      r = tanh(v);
    else
      r = 1.0 / (1.0 + exp(-v));
    y[i] = (float)r;
  }
}

/* tanh and sigmoid take the derivative from y in float, in backend.h's
 * order (dy (1 - y y), dy (y (1 - y))), without FMA: bit-identical to cpu. */
static __global__ void k_act_bwd(int act, float *dx, const float *dy, const float *x,
                                 const float *y, size_t n) {
  XF__FOR_EACH(i, n) {
    if (act == (int)XF_ACT_GELU) {
      double v = (double)x[i];
      double phi = exp(__dmul_rn(__dmul_rn(-0.5, v), v));
      double d = __dadd_rn(__dmul_rn(0.5, __dadd_rn(1.0, erf(__dmul_rn(v, XF__INV_SQRT2)))),
                           __dmul_rn(__dmul_rn(v, XF__INV_SQRT_2PI), phi));
      dx[i] = (float)__dmul_rn((double)dy[i], d);
    } else if (act == (int)XF_ACT_TANH) {
      float yi = y[i];
      dx[i] = __fmul_rn(dy[i], __fsub_rn(1.0f, __fmul_rn(yi, yi)));
    } else {
      float yi = y[i];
      dx[i] = __fmul_rn(dy[i], __fmul_rn(yi, __fsub_rn(1.0f, yi)));
    }
  }
}

static __global__ void k_mul(float *y, const float *u, const float *v, size_t n) {
  XF__FOR_EACH(i, n) y[i] = __fmul_rn(u[i], v[i]);
}

/* Maximum of v over the block, valid in every thread; sh holds XF__THREADS
 * floats. The maximum does not depend on the order. */
static __device__ float block_max(float v, float *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = XF__THREADS / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + half]);
    __syncthreads();
  }
  float m = sh[0];
  __syncthreads(); /* every thread has read sh[0] before sh is reused */
  return m;
}

/* block_sum's total in every thread (its last barrier makes sh[0] final
 * for all of them); the barrier after the read lets sh be reused. */
static __device__ double block_sum_all(double v, double *sh) {
  double s = block_sum(v, sh);
  __syncthreads();
  return s;
}

/* One block per row (grid-striding over rows): the row's maximum, the sum of
 * exp(x - max) in double in block_sum's fixed order, and each value's
 * exp(x - max) / sum rounded once. */
static __global__ void k_softmax_fwd(float *y, const float *x, int rows, int cols) {
  __shared__ double sh[XF__THREADS];
  __shared__ float shf[XF__THREADS];
  for (int r = (int)blockIdx.x; r < rows; r += (int)gridDim.x) {
    const float *xr = x + (size_t)r * (size_t)cols;
    float *yr = y + (size_t)r * (size_t)cols;
    float m = -INFINITY;
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x) m = fmaxf(m, xr[c]);
    m = block_max(m, shf);
    double s = 0.0;
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
      s += exp((double)xr[c] - (double)m);
    double total = block_sum_all(s, sh);
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
      yr[c] = (float)(exp((double)xr[c] - (double)m) / total);
  }
}

/* dx = y (dy - sum of dy y), the row's sum in double; dx may be dy (each
 * thread reads its dy before writing the same element, after the sum). */
static __global__ void k_softmax_bwd(float *dx, const float *dy, const float *y, int rows,
                                     int cols) {
  __shared__ double sh[XF__THREADS];
  for (int r = (int)blockIdx.x; r < rows; r += (int)gridDim.x) {
    const float *dyr = dy + (size_t)r * (size_t)cols, *yr = y + (size_t)r * (size_t)cols;
    float *dxr = dx + (size_t)r * (size_t)cols;
    double s = 0.0;
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
      s += (double)dyr[c] * (double)yr[c];
    double dot = block_sum_all(s, sh);
    for (int c = (int)threadIdx.x; c < cols; c += (int)blockDim.x)
      dxr[c] = (float)((double)yr[c] * ((double)dyr[c] - dot));
  }
}

/* Element `j` of group `g` of record `r`: positions outer, the group's
 * channels inner, NHWC. */
static __device__ size_t norm_index(xf_norm_shape s, int r, int g, size_t j) {
  size_t cg = (size_t)(s.c / s.groups);
  size_t pos = j / cg, ch = (size_t)g * cg + j % cg;
  return ((size_t)r * (size_t)s.p + pos) * (size_t)s.c + ch;
}

/* One block per (record, group), grid-striding over them: the mean, then
 * the biased variance about it (two passes, both in double, block_sum's
 * order), rstd = 1 / sqrt(var + eps) in double, xhat = (x - mean) rstd
 * rounded once, y = xhat gamma + beta without FMA. */
static __global__ void k_norm_fwd(xf_norm_shape s, const float *x, const float *gamma,
                                  const float *beta, float *y, float *xhat, float *rstd) {
  __shared__ double sh[XF__THREADS];
  const size_t m = (size_t)s.p * (size_t)(s.c / s.groups);
  const int units = s.n * s.groups;
  for (int u = (int)blockIdx.x; u < units; u += (int)gridDim.x) {
    const int r = u / s.groups, g = u % s.groups;
    double sum = 0.0;
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) sum += (double)x[norm_index(s, r, g, j)];
    const double mean = block_sum_all(sum, sh) / (double)m;
    double sq = 0.0;
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
      double d = (double)x[norm_index(s, r, g, j)] - mean;
      sq += d * d;
    }
    const double var = block_sum_all(sq, sh) / (double)m;
    const double rs = 1.0 / sqrt(__dadd_rn(var, (double)s.eps));
    if (threadIdx.x == 0) rstd[u] = (float)rs;
    const size_t cg = (size_t)(s.c / s.groups);
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
      size_t at = norm_index(s, r, g, j);
      size_t ch = (size_t)g * cg + j % cg;
      float h = (float)__dmul_rn((double)x[at] - mean, rs);
      xhat[at] = h;
      y[at] = __fadd_rn(__fmul_rn(h, gamma[ch]), beta[ch]);
    }
  }
}

/* One block per (record, group): with g = dy gamma (exact in double), the
 * sums of g and g xhat in double, then dx = rstd (g - mean(g) - xhat
 * mean(g xhat)) in double in the cpu's order, unfused, rounded once. */
static __global__ void k_norm_bwd(xf_norm_shape s, const float *dy, const float *xhat,
                                  const float *rstd, const float *gamma, float *dx) {
  __shared__ double sh[XF__THREADS];
  const size_t cg = (size_t)(s.c / s.groups);
  const size_t m = (size_t)s.p * cg;
  const int units = s.n * s.groups;
  for (int u = (int)blockIdx.x; u < units; u += (int)gridDim.x) {
    const int r = u / s.groups, g = u % s.groups;
    double sg = 0.0, sgx = 0.0;
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
      size_t at = norm_index(s, r, g, j);
      double gv = (double)dy[at] * (double)gamma[(size_t)g * cg + j % cg];
      sg += gv;
      sgx += gv * (double)xhat[at];
    }
    const double mean_g = block_sum_all(sg, sh) / (double)m;
    const double mean_gx = block_sum_all(sgx, sh) / (double)m;
    const double rs = (double)rstd[u];
    for (size_t j = threadIdx.x; j < m; j += blockDim.x) {
      size_t at = norm_index(s, r, g, j);
      double gv = (double)dy[at] * (double)gamma[(size_t)g * cg + j % cg];
      dx[at] = (float)__dmul_rn(
          rs, __dsub_rn(__dsub_rn(gv, mean_g), __dmul_rn((double)xhat[at], mean_gx)));
    }
  }
}

/* backend.h's draw: splitmix64's finalizer on seed + (i + 1) * golden, kept
 * when the top 32 bits reach `threshold`. Integer arithmetic only, so it is
 * the cpu's mask bit for bit. */
static __host__ __device__ float dropout_at(size_t i, uint64_t seed, uint64_t threshold,
                                            float keep) {
  uint64_t z = seed + ((uint64_t)i + 1u) * 0x9E3779B97F4A7C15ull;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z >> 32) < threshold ? 0.0f : keep;
}

static __global__ void k_dropout_mask(float *mask, size_t n, uint64_t seed, uint64_t threshold,
                                      float keep) {
  XF__FOR_EACH(i, n) mask[i] = dropout_at(i, seed, threshold, keep);
}

/* The id a float holds; the caller has checked it is a whole number in
 * [0, vocab). */
static __device__ size_t embedding_id(float id) { return (size_t)id; }

static __global__ void k_embedding_fwd(const float *ids, const float *table, int rows, int dim,
                                       float *y) {
  size_t total = (size_t)rows * (size_t)dim;
  XF__FOR_EACH(i, total) {
    size_t r = i / (size_t)dim, d = i % (size_t)dim;
    y[i] = table[embedding_id(ids[r]) * (size_t)dim + d];
  }
}

/* dtable[ids[r]] += dy[r]: rows sharing an id add with atomics, in no fixed
 * order. */
static __global__ void k_embedding_bwd(const float *ids, const float *dy, int rows, int dim,
                                       float *dtable) {
  size_t total = (size_t)rows * (size_t)dim;
  XF__FOR_EACH(i, total) {
    size_t r = i / (size_t)dim, d = i % (size_t)dim;
    atomicAdd(dtable + embedding_id(ids[r]) * (size_t)dim + d, dy[i]);
  }
}

/* One block per record (grid-striding over records): every thread takes ids
 * a in turn and adds <dy_a, dy_b> over the b < f with the same id, in double;
 * then block_sum's fixed order. */
static __global__ void k_embedding_sqnorm(float *out, const float *ids, const float *dy, int n,
                                          int f, int dim, bool accumulate) {
  __shared__ double sh[XF__THREADS];
  for (int r = (int)blockIdx.x; r < n; r += (int)gridDim.x) {
    const float *idr = ids + (size_t)r * (size_t)f;
    const float *dyr = dy + (size_t)r * (size_t)f * (size_t)dim;
    double s = 0.0;
    for (int a = (int)threadIdx.x; a < f; a += (int)blockDim.x) {
      const float *va = dyr + (size_t)a * (size_t)dim;
      for (int bb = 0; bb < f; bb++) {
        if (idr[bb] != idr[a]) continue;
        const float *vb = dyr + (size_t)bb * (size_t)dim;
        for (int d = 0; d < dim; d++) s += (double)va[d] * (double)vb[d];
      }
    }
    double total = block_sum(s, sh);
    if (threadIdx.x == 0) out[r] = (float)(accumulate ? (double)out[r] + total : total);
    __syncthreads(); /* every thread has read sh[0] before the next record reuses sh */
  }
}

/* ---- memory and transfers ------------------------------------------------ */

static xf_err cuda_alloc(xf_backend *b, size_t bytes, void **out) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return st->err;
  void *p = NULL;
  /* A zero-byte request still gets a distinct pointer, as on cpu. cudaMalloc
   * aligns to 256 bytes, more than the 64 backend.h promises. */
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 64);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* out of memory is not sticky: keep it out of the latch */
    st->host->log(XF_LOG_DEBUG, "cuda_alloc_failed", "bytes=%zu error=%s", bytes,
                  cudaGetErrorName(e));
    return e == cudaErrorMemoryAllocation ? XF_ENOMEM : XF_EBACKEND;
  }
  /* Queued before any op that can use p, so every op sees zeros. */
  if (bytes && !cuda_ok(st, cudaMemsetAsync(p, 0, bytes, st->stream), "cudaMemsetAsync")) {
    (void)cudaFree(p);
    return st->err;
  }
  *out = p;
  return XF_OK;
}

static void cuda_free(xf_backend *b, void *p) {
  cuda_state *st = state_of(b);
  /* Free even after a latched error, so closing a failed backend does not
   * leak; ops queued before may still use p, hence the wait. */
  if (cudaSetDevice(st->device) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  (void)cuda_ok(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize (free)");
  (void)cuda_ok(st, cudaFree(p), "cudaFree");
}

/* Both directions: cudaMemcpyDefault lets unified addressing tell host from
 * device pointers, so a copy between two device buffers works as on cpu. */
static xf_err cuda_transfer(xf_backend *b, void *dst, const void *src, size_t bytes) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return st->err;
  if (bytes &&
      !cuda_ok(st, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, st->stream),
               "cudaMemcpyAsync"))
    return st->err;
  (void)cuda_ok(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize");
  return st->err;
}

static xf_err cuda_sync(xf_backend *b) {
  cuda_state *st = state_of(b);
  if (cuda_enter(st))
    (void)cuda_ok(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize");
  return st->err;
}

/* ---- ops ------------------------------------------------------------------ */

/* cuBLAS is column-major. A row-major m x n C with leading dimension ldc is
 * the column-major n x m matrix C^T with the same leading dimension, and
 * C^T = op(B)^T op(A)^T, so the call swaps the operands and the sizes m and
 * n and keeps each operand's own transpose flag. The handle keeps
 * CUBLAS_DEFAULT_MATH (set at open): full FP32 arithmetic, never TF32 tensor
 * cores, so results stay within float rounding of the cpu backend. */
static void cuda_gemm(xf_backend *b, bool ta, bool tb, int m, int n, int k, float alpha,
                      const float *a, int lda, const float *bm, int ldb, float beta, float *c,
                      int ldc) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  if (m < 0 || n < 0 || k < 0) {
    cuda_latch(st, XF_EINVAL, "gemm: negative size m=%d n=%d k=%d", m, n, k);
    return;
  }
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    /* BLAS reads neither A nor B here; doing it ourselves keeps the
     * beta == 0 convention explicit and matches OpenBLAS exactly. */
    if (ldc < n) {
      cuda_latch(st, XF_EINVAL, "gemm: ldc=%d < n=%d", ldc, n);
      return;
    }
    k_gemm_beta<<<grid_for((size_t)m * (size_t)n), XF__THREADS, 0, st->stream>>>(c, m, n, ldc,
                                                                              beta);
    (void)launched(st, "k_gemm_beta");
    return;
  }
  (void)blas_ok(st,
                cublasSgemm(st->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                            ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, bm, ldb, a, lda,
                            &beta, c, ldc),
                "cublasSgemm");
}

/* The operand swap of cuda_gemm, per product, with the strides passed
 * through: cuBLAS takes a stride of 0 as one operand shared by every product. */
static void cuda_gemm_strided_batched(xf_backend *b, bool ta, bool tb, int m, int n, int k,
                                      float alpha, const float *a, int lda, long long stride_a,
                                      const float *bm, int ldb, long long stride_b, float beta,
                                      float *c, int ldc, long long stride_c, int batch) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  if (m < 0 || n < 0 || k < 0 || batch < 0) {
    cuda_latch(st, XF_EINVAL, "gemm_strided_batched: negative size m=%d n=%d k=%d batch=%d", m,
               n, k, batch);
    return;
  }
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0 || alpha == 0.0f) {
    if (ldc < n) {
      cuda_latch(st, XF_EINVAL, "gemm_strided_batched: ldc=%d < n=%d", ldc, n);
      return;
    }
    for (int i = 0; i < batch; i++) {
      k_gemm_beta<<<grid_for((size_t)m * (size_t)n), XF__THREADS, 0, st->stream>>>(
          c + (long long)i * stride_c, m, n, ldc, beta);
      if (!launched(st, "k_gemm_beta")) return;
    }
    return;
  }
  (void)blas_ok(st,
                cublasSgemmStridedBatched(st->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                          ta ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, bm,
                                          ldb, stride_b, a, lda, stride_a, &beta, c, ldc,
                                          stride_c, batch),
                "cublasSgemmStridedBatched");
}

static void cuda_bias_add(xf_backend *b, float *y, const float *bias, int rows, int cols) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0 || cols <= 0) return;
  k_bias_add<<<grid_for((size_t)rows * (size_t)cols), XF__THREADS, 0, st->stream>>>(y, bias,
                                                                                 rows, cols);
  (void)launched(st, "k_bias_add");
}

/* Two passes so that long columns (conv layers: rows = n * oh * ow) still
 * spread over the GPU: partial sums of row chunks, then each column's
 * partials in order. Sums are in double, rounded to float once. */
static void cuda_bias_grad(xf_backend *b, float *db, const float *dy, int rows, int cols) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || cols <= 0) return;
  if (rows <= 0) { /* an empty sum, as the cpu's memset leaves it */
    (void)cuda_ok(st, cudaMemsetAsync(db, 0, sizeof(float) * (size_t)cols, st->stream),
                  "cudaMemsetAsync");
    return;
  }
  int chunk = (rows + XF__BIAS_PARTS_MAX - 1) / XF__BIAS_PARTS_MAX;
  if (chunk < XF__BIAS_CHUNK_MIN) chunk = XF__BIAS_CHUNK_MIN;
  int parts = (rows + chunk - 1) / chunk;
  double *partial = (double *)cuda_scratch(st, sizeof(double) * (size_t)parts * (size_t)cols);
  if (!partial) return;
  dim3 block(32, 8);
  dim3 grid((unsigned)((cols + 31) / 32), (unsigned)((parts + 7) / 8));
  k_bias_partial<<<grid, block, 0, st->stream>>>(dy, rows, cols, chunk, parts, partial);
  if (!launched(st, "k_bias_partial")) return;
  k_bias_final<<<grid_for((size_t)cols), XF__THREADS, 0, st->stream>>>(partial, parts, cols,
                                                                      db);
  (void)launched(st, "k_bias_final");
}

static void cuda_relu_fwd(xf_backend *b, float *y, const float *x, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_relu_fwd<<<grid_for(n), XF__THREADS, 0, st->stream>>>(y, x, n);
  (void)launched(st, "k_relu_fwd");
}

static void cuda_relu_bwd(xf_backend *b, float *dx, const float *dy, const float *y, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_relu_bwd<<<grid_for(n), XF__THREADS, 0, st->stream>>>(dx, dy, y, n);
  (void)launched(st, "k_relu_bwd");
}

static void cuda_axpy(xf_backend *b, float a, const float *x, float *y, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_axpy<<<grid_for(n), XF__THREADS, 0, st->stream>>>(a, x, y, n);
  (void)launched(st, "k_axpy");
}

static void cuda_scale(xf_backend *b, float *x, float a, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_scale<<<grid_for(n), XF__THREADS, 0, st->stream>>>(x, a, n);
  (void)launched(st, "k_scale");
}

static void cuda_fill(xf_backend *b, float *x, float v, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_fill<<<grid_for(n), XF__THREADS, 0, st->stream>>>(x, v, n);
  (void)launched(st, "k_fill");
}

/* memmove semantics like cpu: cudaMemcpyAsync within one device is not
 * promised to handle overlap, so overlapping ranges (a caller's rarity) go
 * through a scratch copy. */
static void cuda_copy(xf_backend *b, float *dst, const float *src, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0 || dst == src) return;
  size_t bytes = n * sizeof(float);
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  bool overlap = d < s + bytes && s < d + bytes;
  if (!overlap) {
    (void)cuda_ok(st, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, st->stream),
                  "cudaMemcpyAsync (copy)");
    return;
  }
  void *tmp = cuda_scratch(st, bytes);
  if (!tmp) return;
  if (cuda_ok(st, cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, st->stream),
              "cudaMemcpyAsync (copy)"))
    (void)cuda_ok(st, cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, st->stream),
                  "cudaMemcpyAsync (copy)");
}

/* Returns NaN when the backend has failed (the error itself comes from the
 * next sync or transfer: this op has no error channel of its own). */
static double cuda_l2norm(xf_backend *b, const float *x, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return NAN;
  if (n == 0) return 0.0;
  unsigned blocks = grid_for(n);
  double *partial = (double *)cuda_scratch(st, sizeof(double) * ((size_t)blocks + 1));
  if (!partial) return NAN;
  k_sumsq_partial<<<blocks, XF__THREADS, 0, st->stream>>>(x, n, partial);
  if (!launched(st, "k_sumsq_partial")) return NAN;
  k_sum_final<<<1, XF__THREADS, 0, st->stream>>>(partial, blocks, partial + blocks);
  if (!launched(st, "k_sum_final")) return NAN;
  double sumsq = 0.0;
  if (!cuda_ok(st,
               cudaMemcpyAsync(&sumsq, partial + blocks, sizeof(sumsq), cudaMemcpyDeviceToHost,
                               st->stream),
               "cudaMemcpyAsync (l2norm)") ||
      !cuda_ok(st, cudaStreamSynchronize(st->stream), "cudaStreamSynchronize (l2norm)"))
    return NAN;
  return sqrt(sumsq);
}

static void cuda_mul_acc(xf_backend *b, float *y, const float *u, const float *v, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_mul_acc<<<grid_for(n), XF__THREADS, 0, st->stream>>>(y, u, v, n);
  (void)launched(st, "k_mul_acc");
}

/* Rows beyond 65535 share blocks (the kernel strides over rows). */
static void cuda_row_dot(xf_backend *b, float *out, const float *x, const float *y, int rows,
                         int cols, bool accumulate) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0) return;
  if (cols <= 0) { /* empty rows: a sum of nothing, as the cpu loop gives */
    if (!accumulate)
      (void)cuda_ok(st, cudaMemsetAsync(out, 0, sizeof(float) * (size_t)rows, st->stream),
                    "cudaMemsetAsync (row_dot)");
    return;
  }
  unsigned blocks = rows < 65535 ? (unsigned)rows : 65535u;
  k_row_dot<<<blocks, XF__THREADS, 0, st->stream>>>(out, x, y, rows, cols, accumulate);
  (void)launched(st, "k_row_dot");
}

static void cuda_clip_factors(xf_backend *b, float *factor, const float *sqnorm, int rows,
                              double clip) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0) return;
  k_clip_factors<<<grid_for((size_t)rows), XF__THREADS, 0, st->stream>>>(factor, sqnorm, rows,
                                                                         clip);
  (void)launched(st, "k_clip_factors");
}

static void cuda_scale_rows(xf_backend *b, float *x, const float *factor, int rows, int cols) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0 || cols <= 0) return;
  k_scale_rows<<<grid_for((size_t)rows * (size_t)cols), XF__THREADS, 0, st->stream>>>(
      x, factor, rows, cols);
  (void)launched(st, "k_scale_rows");
}

static void cuda_im2col(xf_backend *b, const float *x, const xf_conv_shape *s, float *col) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t total = (size_t)s->n * (size_t)s->oh * (size_t)s->ow * (size_t)s->kh * (size_t)s->kw *
                 (size_t)s->c;
  if (total == 0) return;
  k_im2col<<<grid_for(total), XF__THREADS, 0, st->stream>>>(x, *s, total, col);
  (void)launched(st, "k_im2col");
}

static void cuda_col2im(xf_backend *b, const float *col, const xf_conv_shape *s, float *dx) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t total = (size_t)s->n * (size_t)s->h * (size_t)s->w * (size_t)s->c;
  if (total == 0) return;
  /* Every dx entry is written (zero where no window reads the pixel). */
  k_col2im<<<grid_for(total), XF__THREADS, 0, st->stream>>>(col, *s, total, dx);
  (void)launched(st, "k_col2im");
}

static void cuda_maxpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y,
                             int32_t *argmax) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t total = (size_t)s->n * (size_t)s->oh * (size_t)s->ow * (size_t)s->c;
  if (total == 0) return;
  k_maxpool_fwd<<<grid_for(total), XF__THREADS, 0, st->stream>>>(x, *s, total, y, argmax);
  (void)launched(st, "k_maxpool_fwd");
}

static void cuda_maxpool_bwd(xf_backend *b, const float *dy, const int32_t *argmax,
                             const xf_pool_shape *s, float *dx) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t in = (size_t)s->n * (size_t)s->h * (size_t)s->w * (size_t)s->c;
  size_t out = (size_t)s->n * (size_t)s->oh * (size_t)s->ow * (size_t)s->c;
  if (in == 0) return;
  if (!cuda_ok(st, cudaMemsetAsync(dx, 0, sizeof(float) * in, st->stream),
               "cudaMemsetAsync (maxpool_bwd)") ||
      out == 0)
    return;
  k_maxpool_bwd<<<grid_for(out), XF__THREADS, 0, st->stream>>>(dy, argmax, out, in, dx);
  (void)launched(st, "k_maxpool_bwd");
}

/* A per-row loss's scratch: the totals, then n row losses, then n correct
 * flags. False (the error latched) when it cannot be had. */
typedef struct loss_rows {
  softmax_totals *totals;
  double *loss;
  int *right;
} loss_rows;

static bool loss_rows_get(cuda_state *st, int n, loss_rows *r) {
  size_t loss_off = (sizeof(softmax_totals) + 7) & ~(size_t)7;
  size_t right_off = loss_off + sizeof(double) * (size_t)n;
  char *scratch = (char *)cuda_scratch(st, right_off + sizeof(int) * (size_t)n);
  if (!scratch) return false;
  r->totals = (softmax_totals *)scratch;
  r->loss = (double *)(scratch + loss_off);
  r->right = (int *)(scratch + right_off);
  return true;
}

/* Sums the rows on the device (k_softmax_total's fixed order) and brings
 * the totals to the host; `what` names the op in errors. */
static xf_err loss_rows_total(cuda_state *st, const loss_rows *r, int n, const char *what,
                              double *loss_sum, int *correct) {
  k_softmax_total<<<1, XF__THREADS, 0, st->stream>>>(r->loss, r->right, n, r->totals);
  if (!launched(st, "k_softmax_total")) return st->err;
  softmax_totals host;
  memset(&host, 0, sizeof(host));
  char copy[64], sync[64];
  snprintf(copy, sizeof(copy), "cudaMemcpyAsync (%s)", what);
  snprintf(sync, sizeof(sync), "cudaStreamSynchronize (%s)", what);
  if (!cuda_ok(st,
               cudaMemcpyAsync(&host, r->totals, sizeof(host), cudaMemcpyDeviceToHost,
                               st->stream),
               copy) ||
      !cuda_ok(st, cudaStreamSynchronize(st->stream), sync))
    return st->err;
  *loss_sum = host.loss;
  *correct = host.correct;
  return XF_OK;
}

static xf_err cuda_softmax_xent(xf_backend *b, const float *logits, const int32_t *labels,
                                int n, int classes, float *dlogits, double *loss_sum,
                                int *correct) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return st->err;
  if (n <= 0) { /* no rows: the cpu loop's result */
    *loss_sum = 0.0;
    *correct = 0;
    return XF_OK;
  }
  if (classes <= 0) return XF_EINVAL;
  loss_rows r;
  if (!loss_rows_get(st, n, &r)) return st->err;
  const float inv_n = 1.0f / (float)n;
  k_softmax_rows<<<grid_for((size_t)n), XF__THREADS, 0, st->stream>>>(
      logits, labels, n, classes, inv_n, dlogits, r.loss, r.right);
  if (!launched(st, "k_softmax_rows")) return st->err;
  return loss_rows_total(st, &r, n, "softmax_xent", loss_sum, correct);
}

static void cuda_sgd_step(xf_backend *b, float *w, const float *g, float *v, const float *w_ref,
                          size_t n, const xf_sgd_params *p) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  /* As on cpu, the proximal term is applied only when mu != 0 and w_ref is
   * given; the kernel tests w_ref alone. */
  const float *ref = p->prox_mu != 0.0f ? w_ref : NULL;
  k_sgd_step<<<grid_for(n), XF__THREADS, 0, st->stream>>>(w, g, v, ref, n, p->lr, p->momentum,
                                                         p->weight_decay, p->prox_mu,
                                                         p->nesterov);
  (void)launched(st, "k_sgd_step");
}

static void cuda_adam_step(xf_backend *b, float *w, const float *g, float *m, float *v,
                           const float *w_ref, size_t n, const xf_adam_params *p) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  const float *ref = p->prox_mu != 0.0f ? w_ref : NULL;
  /* The host-side constants exactly as cpu_adam_step computes them. */
  const float c1 = 1.0f - p->beta1, c2 = 1.0f - p->beta2;
  const float step = (float)((double)p->lr / p->bias1), root2 = (float)sqrt(p->bias2);
  const float keep = 1.0f - p->lr * p->weight_decay;
  k_adam_step<<<grid_for(n), XF__THREADS, 0, st->stream>>>(
      w, g, m, v, ref, n, p->beta1, p->beta2, c1, c2, step, root2, p->weight_decay, p->prox_mu,
      p->eps, keep, p->decoupled);
  (void)launched(st, "k_adam_step");
}

static xf_err cuda_scalar_loss(xf_backend *b, xf_scalar_loss kind, const float *z,
                               const float *t, int n, float *dout, double *loss_sum,
                               int *correct) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return st->err;
  if (n <= 0) {
    *loss_sum = 0.0;
    *correct = 0;
    return XF_OK;
  }
  loss_rows r;
  if (!loss_rows_get(st, n, &r)) return st->err;
  const float inv_n = 1.0f / (float)n;
  k_scalar_rows<<<grid_for((size_t)n), XF__THREADS, 0, st->stream>>>(
      (int)kind, z, t, n, inv_n, dout, r.loss, r.right);
  if (!launched(st, "k_scalar_rows")) return st->err;
  return loss_rows_total(st, &r, n, "scalar_loss", loss_sum, correct);
}

static void cuda_avgpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t total = (size_t)s->n * (size_t)s->oh * (size_t)s->ow * (size_t)s->c;
  if (total == 0) return;
  const float inv = 1.0f / (float)(s->k * s->k); /* as cpu_avgpool_fwd computes it */
  k_avgpool_fwd<<<grid_for(total), XF__THREADS, 0, st->stream>>>(x, *s, inv, total, y);
  (void)launched(st, "k_avgpool_fwd");
}

static void cuda_avgpool_bwd(xf_backend *b, const float *dy, const xf_pool_shape *s,
                             float *dx) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st)) return;
  size_t total = (size_t)s->n * (size_t)s->h * (size_t)s->w * (size_t)s->c;
  if (total == 0) return;
  /* Every dx entry is written (zero where no window reads the pixel). */
  const float inv = 1.0f / (float)(s->k * s->k);
  k_avgpool_bwd<<<grid_for(total), XF__THREADS, 0, st->stream>>>(dy, *s, inv, total, dx);
  (void)launched(st, "k_avgpool_bwd");
}

static void cuda_act_fwd(xf_backend *b, xf_act act, float *y, const float *x, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_act_fwd<<<grid_for(n), XF__THREADS, 0, st->stream>>>((int)act, y, x, n);
  (void)launched(st, "k_act_fwd");
}

static void cuda_act_bwd(xf_backend *b, xf_act act, float *dx, const float *dy, const float *x,
                         const float *y, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_act_bwd<<<grid_for(n), XF__THREADS, 0, st->stream>>>((int)act, dx, dy, x, y, n);
  (void)launched(st, "k_act_bwd");
}

/* Rows beyond 65535 share blocks (the kernels stride over rows). */
static unsigned row_blocks(int rows) { return rows < 65535 ? (unsigned)rows : 65535u; }

static void cuda_softmax_fwd(xf_backend *b, float *y, const float *x, int rows, int cols) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0 || cols <= 0) return;
  k_softmax_fwd<<<row_blocks(rows), XF__THREADS, 0, st->stream>>>(y, x, rows, cols);
  (void)launched(st, "k_softmax_fwd");
}

static void cuda_softmax_bwd(xf_backend *b, float *dx, const float *dy, const float *y, int rows,
                             int cols) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0 || cols <= 0) return;
  k_softmax_bwd<<<row_blocks(rows), XF__THREADS, 0, st->stream>>>(dx, dy, y, rows, cols);
  (void)launched(st, "k_softmax_bwd");
}

/* False, latched, for a shape the kernels cannot index (the model builder
 * never makes one). */
static bool norm_shape_ok(cuda_state *st, const xf_norm_shape *s, const char *op) {
  if (s->n < 0 || s->p < 0 || s->c < 0 || s->groups <= 0 || s->c % s->groups != 0 ||
      (long long)s->n * s->groups > INT32_MAX) {
    cuda_latch(st, XF_EINVAL, "%s: bad shape n=%d p=%d c=%d groups=%d", op, s->n, s->p, s->c,
               s->groups);
    return false;
  }
  return true;
}

static void cuda_norm_fwd(xf_backend *b, const xf_norm_shape *s, const float *x,
                          const float *gamma, const float *beta, float *y, float *xhat,
                          float *rstd) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || !norm_shape_ok(st, s, "norm_fwd")) return;
  if (s->n == 0 || s->p == 0 || s->c == 0) return;
  k_norm_fwd<<<row_blocks(s->n * s->groups), XF__THREADS, 0, st->stream>>>(*s, x, gamma, beta, y,
                                                                          xhat, rstd);
  (void)launched(st, "k_norm_fwd");
}

static void cuda_norm_bwd(xf_backend *b, const xf_norm_shape *s, const float *dy,
                          const float *xhat, const float *rstd, const float *gamma, float *dx) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || !norm_shape_ok(st, s, "norm_bwd")) return;
  if (s->n == 0 || s->p == 0 || s->c == 0) return;
  k_norm_bwd<<<row_blocks(s->n * s->groups), XF__THREADS, 0, st->stream>>>(*s, dy, xhat, rstd,
                                                                          gamma, dx);
  (void)launched(st, "k_norm_bwd");
}

static void cuda_mul(xf_backend *b, float *y, const float *u, const float *v, size_t n) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  k_mul<<<grid_for(n), XF__THREADS, 0, st->stream>>>(y, u, v, n);
  (void)launched(st, "k_mul");
}

/* The threshold and the kept value are computed here, on the host, as
 * backend.h gives them, so the kernel only hashes. */
static void cuda_dropout_mask(xf_backend *b, float *mask, size_t n, float rate, uint64_t seed) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n == 0) return;
  if (!(rate >= 0.0f && rate < 1.0f)) {
    cuda_latch(st, XF_EINVAL, "dropout_mask: rate %g is outside [0, 1)", (double)rate);
    return;
  }
  const uint64_t threshold = (uint64_t)((double)rate * 4294967296.0);
  const float keep = 1.0f / (1.0f - rate);
  k_dropout_mask<<<grid_for(n), XF__THREADS, 0, st->stream>>>(mask, n, seed, threshold, keep);
  (void)launched(st, "k_dropout_mask");
}

static void cuda_embedding_fwd(xf_backend *b, const float *ids, const float *table, int rows,
                               int dim, float *y) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || rows <= 0 || dim <= 0) return;
  k_embedding_fwd<<<grid_for((size_t)rows * (size_t)dim), XF__THREADS, 0, st->stream>>>(
      ids, table, rows, dim, y);
  (void)launched(st, "k_embedding_fwd");
}

static void cuda_embedding_bwd(xf_backend *b, const float *ids, const float *dy, int rows,
                               int dim, int vocab, float beta, float *dtable) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || dim <= 0 || vocab <= 0) return;
  if (beta == 0.0f &&
      !cuda_ok(st,
               cudaMemsetAsync(dtable, 0, sizeof(float) * (size_t)vocab * (size_t)dim,
                               st->stream),
               "cudaMemsetAsync (embedding_bwd)"))
    return;
  if (rows <= 0) return;
  k_embedding_bwd<<<grid_for((size_t)rows * (size_t)dim), XF__THREADS, 0, st->stream>>>(
      ids, dy, rows, dim, dtable);
  (void)launched(st, "k_embedding_bwd");
}

static void cuda_embedding_sqnorm(xf_backend *b, float *out, const float *ids, const float *dy,
                                  int n, int f, int dim, bool accumulate) {
  cuda_state *st = state_of(b);
  if (!cuda_enter(st) || n <= 0) return;
  if (f <= 0 || dim <= 0) { /* a sum of nothing */
    if (!accumulate)
      (void)cuda_ok(st, cudaMemsetAsync(out, 0, sizeof(float) * (size_t)n, st->stream),
                    "cudaMemsetAsync (embedding_sqnorm)");
    return;
  }
  k_embedding_sqnorm<<<row_blocks(n), XF__THREADS, 0, st->stream>>>(out, ids, dy, n, f, dim,
                                                                   accumulate);
  (void)launched(st, "k_embedding_sqnorm");
}

/* ---- open and close ------------------------------------------------------- */

/* Releases whatever cuda_open created, in reverse order; NULL-safe. */
static void cuda_state_destroy(cuda_state *st) {
  if (!st) return;
  if (cudaSetDevice(st->device) == cudaSuccess) {
    if (st->stream) (void)cudaStreamSynchronize(st->stream);
    if (st->scratch) (void)cudaFree(st->scratch);
    if (st->blas) (void)cublasDestroy(st->blas);
    if (st->stream) (void)cudaStreamDestroy(st->stream);
  }
  (void)cudaGetLastError();
  st->host->free(st);
}

static void cuda_close(xf_backend *b) {
  cuda_state_destroy(state_of(b));
  b->impl = NULL;
}

static const xf__backend_ops cuda_ops = {
    .name = "cuda",
    .close = cuda_close,
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_transfer,
    .download = cuda_transfer,
    .sync = cuda_sync,
    .gemm = cuda_gemm,
    .gemm_strided_batched = cuda_gemm_strided_batched,
    .bias_add = cuda_bias_add,
    .bias_grad = cuda_bias_grad,
    .relu_fwd = cuda_relu_fwd,
    .relu_bwd = cuda_relu_bwd,
    .axpy = cuda_axpy,
    .scale = cuda_scale,
    .fill = cuda_fill,
    .copy = cuda_copy,
    .l2norm = cuda_l2norm,
    .mul_acc = cuda_mul_acc,
    .row_dot = cuda_row_dot,
    .clip_factors = cuda_clip_factors,
    .scale_rows = cuda_scale_rows,
    .im2col = cuda_im2col,
    .col2im = cuda_col2im,
    .maxpool_fwd = cuda_maxpool_fwd,
    .maxpool_bwd = cuda_maxpool_bwd,
    .avgpool_fwd = cuda_avgpool_fwd,
    .avgpool_bwd = cuda_avgpool_bwd,
    .act_fwd = cuda_act_fwd,
    .act_bwd = cuda_act_bwd,
    .softmax_fwd = cuda_softmax_fwd,
    .softmax_bwd = cuda_softmax_bwd,
    .norm_fwd = cuda_norm_fwd,
    .norm_bwd = cuda_norm_bwd,
    .mul = cuda_mul,
    .dropout_mask = cuda_dropout_mask,
    .embedding_fwd = cuda_embedding_fwd,
    .embedding_bwd = cuda_embedding_bwd,
    .embedding_sqnorm = cuda_embedding_sqnorm,
    .softmax_xent = cuda_softmax_xent,
    .sgd_step = cuda_sgd_step,
    .adam_step = cuda_adam_step,
    .scalar_loss = cuda_scalar_loss,
};

/* The failing CUDA call in words, for the open path's messages. */
#define XF__CUDA_WHY(e) cudaGetErrorString(e), cudaGetErrorName(e)

/* Creates the stream, the cuBLAS handle and the first scratch on st->device
 * and checks that this build's kernels load there. On failure st keeps what
 * was created, for cuda_state_destroy. */
static xf_err cuda_state_init(cuda_state *st, struct cudaDeviceProp *prop, xf_errctx *err) {
  cudaError_t e = cudaSetDevice(st->device);
  if (e != cudaSuccess)
    return st->host->fail(err, XF_ENODEVICE,
                          "CUDA device %d is not usable: cudaSetDevice says %s (%s)", st->device,
                          XF__CUDA_WHY(e));
  e = cudaGetDeviceProperties(prop, st->device);
  if (e != cudaSuccess)
    return st->host->fail(err, XF_ENODEVICE, "CUDA device %d: cudaGetDeviceProperties says %s (%s)",
                          st->device, XF__CUDA_WHY(e));
  /* The kernels are built for sm_90 plus compute_90 PTX: an older GPU has no
   * image to run. Asking for a kernel's attributes loads it, so the problem
   * shows here, where AUTO can still fall back to cpu, not at the first op. */
  struct cudaFuncAttributes fa;
  e = cudaFuncGetAttributes(&fa, k_fill);
  if (e != cudaSuccess)
    return st->host->fail(err, XF_ENODEVICE,
                          "CUDA device %d (%s, compute capability %d.%d) cannot run this build's "
                          "kernels: %s (%s); rebuild with CMAKE_CUDA_ARCHITECTURES covering it",
                          st->device, prop->name, prop->major, prop->minor, XF__CUDA_WHY(e));
  e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    st->stream = NULL;
    return st->host->fail(err, XF_EBACKEND, "cudaStreamCreate: %s (%s)", XF__CUDA_WHY(e));
  }
  cublasStatus_t s = cublasCreate(&st->blas);
  if (s != CUBLAS_STATUS_SUCCESS) {
    st->blas = NULL;
    return st->host->fail(err, XF_EBACKEND, "cublasCreate: %s (%s)", cublasGetStatusString(s),
                          cublasGetStatusName(s));
  }
  s = cublasSetStream(st->blas, st->stream);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetMathMode(st->blas, CUBLAS_DEFAULT_MATH);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetPointerMode(st->blas, CUBLAS_POINTER_MODE_HOST);
  if (s != CUBLAS_STATUS_SUCCESS)
    return st->host->fail(err, XF_EBACKEND, "configuring cuBLAS: %s (%s)", cublasGetStatusString(s),
                          cublasGetStatusName(s));
  e = cudaMalloc(&st->scratch, XF__SCRATCH_MIN);
  if (e != cudaSuccess) {
    st->scratch = NULL;
    return st->host->fail(err, e == cudaErrorMemoryAllocation ? XF_ENOMEM : XF_EBACKEND,
                          "cudaMalloc (scratch): %s (%s)", XF__CUDA_WHY(e));
  }
  st->scratch_bytes = XF__SCRATCH_MIN;
  return XF_OK;
}

/* The module's one exported symbol (XF__CUDA_ENTRY); the rest of the module
 * is hidden (-fvisibility=hidden). */
extern "C" __attribute__((visibility("default"))) xf_err xf_cuda_backend_open(
    const xf__backend_host *host, xf_backend *b, const xf_backend_options *opt, xf_errctx *err) {
  if (!host || host->abi != XF__BACKEND_ABI || host->backend_size != sizeof(xf_backend) ||
      !host->version || strcmp(host->version, XF_VERSION) != 0)
    return XF_EUNSUPPORTED;
  if (!b) return XF_OK; /* the loader's check of the host table alone */
  b->impl = NULL;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return host->fail(err, XF_ENODEVICE, "no CUDA device: cudaGetDeviceCount says %s (%s)",
                      XF__CUDA_WHY(e));
  }
  if (count <= 0)
    return host->fail(err, XF_ENODEVICE, "no CUDA device: cudaGetDeviceCount says 0 devices");
  if (opt->device < 0 || opt->device >= count)
    return host->fail(err, XF_ENODEVICE, "CUDA device %d requested, this machine has %d (0 to %d)",
                      opt->device, count, count - 1);
  cuda_state *st = (cuda_state *)host->calloc(1, sizeof(*st));
  if (!st) return host->fail(err, XF_ENOMEM, "cannot allocate the cuda backend state");
  st->host = host;
  st->device = opt->device;
  st->err = XF_OK;
  struct cudaDeviceProp prop;
  memset(&prop, 0, sizeof(prop));
  xf_err rc = cuda_state_init(st, &prop, err);
  if (rc != XF_OK) {
    cuda_state_destroy(st);
    return rc;
  }
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
    (void)cudaGetLastError();
    runtime = 0;
  }
  int threads;
  rc = host->threads(opt, &threads, err);
  if (rc != XF_OK) {
    cuda_state_destroy(st);
    return rc;
  }
  b->ops = &cuda_ops;
  b->impl = st;
  b->threads = threads; /* for the host-side work: DP noise, the update pipeline */
  snprintf(b->description, sizeof(b->description),
           "%.80s (sm_%d%d), %d SMs, %.1f GiB, CUDA runtime %d.%d", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount,
           (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), runtime / 1000,
           (runtime % 1000) / 10);
  return XF_OK;
}
