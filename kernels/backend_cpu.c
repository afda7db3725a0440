/* SPDX-License-Identifier: Apache-2.0 */
/* The cpu backend: OpenBLAS for GEMM, plain C loops written so the compiler
 * vectorizes them. It is the reference the cuda backend is checked against,
 * so every reduction runs in a fixed order (no threads outside OpenBLAS,
 * whose SGEMM partitions output blocks and so sums each element in one
 * order for a given thread count). */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "kernels/backend_internal.h"

static void cpu_close(xf_backend *b) { (void)b; }

static xf_err cpu_alloc(xf_backend *b, size_t bytes, void **out) {
  (void)b;
  void *p = xf_aligned_alloc(bytes);
  if (!p) return XF_ENOMEM;
  memset(p, 0, bytes);
  *out = p;
  return XF_OK;
}

static void cpu_free(xf_backend *b, void *p) {
  (void)b;
  xf_aligned_free(p);
}

static xf_err cpu_copy_bytes(xf_backend *b, void *dst, const void *src, size_t bytes) {
  (void)b;
  if (bytes) memmove(dst, src, bytes);
  return XF_OK;
}

static xf_err cpu_sync(xf_backend *b) {
  (void)b;
  return XF_OK;
}

/* OpenBLAS splits a GEMM over threads by blocks of C; when C is thin (a conv
 * layer's 6 or 16 output channels) or the product small, the split leaves
 * threads idle and the hand-off costs more than it saves: measured on the
 * lenet5 benchmark, two threads ran its GEMMs slower than one. Such GEMMs run
 * on one thread. Which thread count runs a GEMM does not change its result
 * (OpenBLAS never splits the k dimension). */
#define XF__GEMM_PARALLEL_MIN_MACS (1L << 21)
#define XF__GEMM_PARALLEL_MIN_SIDE 32

static void cpu_gemm(xf_backend *b, bool ta, bool tb, int m, int n, int k, float alpha,
                     const float *a, int lda, const float *bm, int ldb, float beta, float *c,
                     int ldc) {
  int threads = 1, own = b->threads - b->lent;
  if (own > 1 && (long)m * n * k >= XF__GEMM_PARALLEL_MIN_MACS &&
      m >= XF__GEMM_PARALLEL_MIN_SIDE && n >= XF__GEMM_PARALLEL_MIN_SIDE)
    threads = own;
  if (threads != openblas_get_num_threads()) openblas_set_num_threads(threads);
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
              n, k, alpha, a, lda, bm, ldb, beta, c, ldc);
}

/* One GEMM after another: the products here (a conv layer's per-example
 * weight gradient, out_c x k over one image's positions) are small, so each
 * takes cpu_gemm's one-thread path and the loop order fixes every result. */
static void cpu_gemm_strided_batched(xf_backend *b, bool ta, bool tb, int m, int n, int k,
                                     float alpha, const float *a, int lda, long long stride_a,
                                     const float *bm, int ldb, long long stride_b, float beta,
                                     float *c, int ldc, long long stride_c, int batch) {
  for (int i = 0; i < batch; i++)
    cpu_gemm(b, ta, tb, m, n, k, alpha, a + i * stride_a, lda, bm + i * stride_b, ldb, beta,
             c + i * stride_c, ldc);
}

static void cpu_bias_add(xf_backend *b, float *restrict y, const float *restrict bias, int rows,
                         int cols) {
  (void)b;
  for (int r = 0; r < rows; r++) {
    float *restrict row = y + (size_t)r * cols;
    for (int c = 0; c < cols; c++) row[c] += bias[c];
  }
}

static void cpu_bias_grad(xf_backend *b, float *restrict db, const float *restrict dy, int rows,
                          int cols) {
  (void)b;
  memset(db, 0, sizeof(float) * (size_t)cols);
  for (int r = 0; r < rows; r++) {
    const float *restrict row = dy + (size_t)r * cols;
    for (int c = 0; c < cols; c++) db[c] += row[c];
  }
}

static void cpu_relu_fwd(xf_backend *b, float *y, const float *x, size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void cpu_relu_bwd(xf_backend *b, float *dx, const float *dy, const float *y, size_t n) {
  (void)b;
  /* dy[i] is loaded unconditionally so the select is branch-free and the loop
   * vectorizes; a conditional load compiles to an unpredictable branch. */
  for (size_t i = 0; i < n; i++) {
    float g = dy[i];
    dx[i] = y[i] > 0.0f ? g : 0.0f;
  }
}

static void cpu_axpy(xf_backend *b, float a, const float *restrict x, float *restrict y,
                     size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void cpu_scale(xf_backend *b, float *x, float a, size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

static void cpu_fill(xf_backend *b, float *x, float v, size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) x[i] = v;
}

static void cpu_copy(xf_backend *b, float *dst, const float *src, size_t n) {
  (void)b;
  if (n) memmove(dst, src, n * sizeof(float));
}

static double cpu_l2norm(xf_backend *b, const float *x, size_t n) {
  (void)b;
  /* Four running sums in a fixed interleave: vectorizable, still one order. */
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; j++) s[j] += (double)x[i + j] * x[i + j];
  for (; i < n; i++) s[0] += (double)x[i] * x[i];
  return sqrt((s[0] + s[1]) + (s[2] + s[3]));
}

static void cpu_mul_acc(xf_backend *b, float *restrict y, const float *restrict u,
                        const float *restrict v, size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) y[i] += u[i] * v[i];
}

static void cpu_row_dot(xf_backend *b, float *out, const float *x, const float *y, int rows,
                        int cols, bool accumulate) {
  (void)b;
  for (int r = 0; r < rows; r++) {
    const float *xr = x + (size_t)r * cols, *yr = y + (size_t)r * cols;
    /* Four running sums in a fixed interleave, as in l2norm. */
    double s[4] = {0, 0, 0, 0};
    int c = 0;
    for (; c + 4 <= cols; c += 4)
      for (int j = 0; j < 4; j++) s[j] += (double)xr[c + j] * yr[c + j];
    for (; c < cols; c++) s[0] += (double)xr[c] * yr[c];
    double sum = (s[0] + s[1]) + (s[2] + s[3]);
    out[r] = (float)(accumulate ? (double)out[r] + sum : sum);
  }
}

static void cpu_clip_factors(xf_backend *b, float *factor, const float *sqnorm, int rows,
                             double clip) {
  (void)b;
  const double limit = clip * clip;
  for (int r = 0; r < rows; r++) {
    double s = sqnorm[r];
    factor[r] = s > limit ? (float)(clip / sqrt(s)) : 1.0f;
  }
}

static void cpu_scale_rows(xf_backend *b, float *restrict x, const float *restrict factor,
                           int rows, int cols) {
  (void)b;
  for (int r = 0; r < rows; r++) {
    float *restrict row = x + (size_t)r * cols;
    const float f = factor[r];
    for (int c = 0; c < cols; c++) row[c] *= f;
  }
}

/* Copies n floats; a plain loop (not memcpy) because the spans here are a few
 * dozen floats, where a library call costs more than the copy. */
static inline void copy_span(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t t = 0; t < n; t++) dst[t] = src[t];
}

static inline void add_span(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t t = 0; t < n; t++) dst[t] += src[t];
}

/* In NHWC, the kw pixels of one kernel row are kw*c consecutive floats of the
 * input, so each kernel row is one span copy unless it hangs over the edge. */
static void cpu_im2col(xf_backend *b, const float *restrict x, const xf_conv_shape *s,
                       float *restrict col) {
  (void)b;
  const size_t c = (size_t)s->c, span = (size_t)s->kw * c, row_len = (size_t)s->kh * span;
  for (int n = 0; n < s->n; n++) {
    const float *img = x + (size_t)n * s->h * s->w * c;
    for (int oy = 0; oy < s->oh; oy++) {
      for (int ox = 0; ox < s->ow; ox++) {
        float *row = col + (((size_t)n * s->oh + oy) * s->ow + ox) * row_len;
        const int ix0 = ox * s->stride - s->pad;
        const bool inside_x = ix0 >= 0 && ix0 + s->kw <= s->w;
        for (int i = 0; i < s->kh; i++) {
          const int iy = oy * s->stride - s->pad + i;
          float *dst = row + (size_t)i * span;
          if (iy < 0 || iy >= s->h) {
            for (size_t t = 0; t < span; t++) dst[t] = 0.0f;
            continue;
          }
          const float *src = img + (size_t)iy * s->w * c;
          if (inside_x) {
            copy_span(dst, src + (size_t)ix0 * c, span);
            continue;
          }
          for (int j = 0; j < s->kw; j++) {
            const int ix = ix0 + j;
            if (ix < 0 || ix >= s->w)
              for (size_t t = 0; t < c; t++) dst[(size_t)j * c + t] = 0.0f;
            else
              copy_span(dst + (size_t)j * c, src + (size_t)ix * c, c);
          }
        }
      }
    }
  }
}

static void cpu_col2im(xf_backend *b, const float *restrict col, const xf_conv_shape *s,
                       float *restrict dx) {
  (void)b;
  const size_t c = (size_t)s->c, span = (size_t)s->kw * c, row_len = (size_t)s->kh * span;
  memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * c);
  for (int n = 0; n < s->n; n++) {
    float *img = dx + (size_t)n * s->h * s->w * c;
    for (int oy = 0; oy < s->oh; oy++) {
      for (int ox = 0; ox < s->ow; ox++) {
        const float *row = col + (((size_t)n * s->oh + oy) * s->ow + ox) * row_len;
        const int ix0 = ox * s->stride - s->pad;
        const bool inside_x = ix0 >= 0 && ix0 + s->kw <= s->w;
        for (int i = 0; i < s->kh; i++) {
          const int iy = oy * s->stride - s->pad + i;
          if (iy < 0 || iy >= s->h) continue;
          const float *src = row + (size_t)i * span;
          float *dst = img + (size_t)iy * s->w * c;
          if (inside_x) {
            add_span(dst + (size_t)ix0 * c, src, span);
            continue;
          }
          for (int j = 0; j < s->kw; j++) {
            const int ix = ix0 + j;
            if (ix >= 0 && ix < s->w) add_span(dst + (size_t)ix * c, src + (size_t)j * c, c);
          }
        }
      }
    }
  }
}

static void cpu_maxpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y,
                            int32_t *argmax) {
  (void)b;
  size_t o = 0;
  for (int n = 0; n < s->n; n++) {
    size_t base = (size_t)n * s->h * s->w * s->c;
    for (int oy = 0; oy < s->oh; oy++) {
      for (int ox = 0; ox < s->ow; ox++) {
        for (int ch = 0; ch < s->c; ch++, o++) {
          size_t best_i = base + ((size_t)(oy * s->stride) * s->w + ox * s->stride) * s->c + ch;
          float best = x[best_i];
          for (int i = 0; i < s->k; i++) {
            for (int j = 0; j < s->k; j++) {
              size_t idx =
                  base + ((size_t)(oy * s->stride + i) * s->w + ox * s->stride + j) * s->c + ch;
              if (x[idx] > best) {
                best = x[idx];
                best_i = idx;
              }
            }
          }
          y[o] = best;
          argmax[o] = (int32_t)best_i;
        }
      }
    }
  }
}

static void cpu_maxpool_bwd(xf_backend *b, const float *dy, const int32_t *argmax,
                            const xf_pool_shape *s, float *dx) {
  (void)b;
  size_t in = (size_t)s->n * s->h * s->w * s->c;
  size_t out = (size_t)s->n * s->oh * s->ow * s->c;
  memset(dx, 0, sizeof(float) * in);
  for (size_t i = 0; i < out; i++) dx[argmax[i]] += dy[i];
}

static void cpu_avgpool_fwd(xf_backend *b, const float *x, const xf_pool_shape *s, float *y) {
  (void)b;
  const float inv = 1.0f / (float)(s->k * s->k);
  size_t o = 0;
  for (int n = 0; n < s->n; n++) {
    const float *img = x + (size_t)n * s->h * s->w * s->c;
    for (int oy = 0; oy < s->oh; oy++)
      for (int ox = 0; ox < s->ow; ox++)
        for (int ch = 0; ch < s->c; ch++, o++) {
          float sum = 0.0f;
          for (int i = 0; i < s->k; i++)
            for (int j = 0; j < s->k; j++)
              sum += img[((size_t)(oy * s->stride + i) * s->w + ox * s->stride + j) * s->c + ch];
          y[o] = sum * inv;
        }
  }
}

static void cpu_avgpool_bwd(xf_backend *b, const float *dy, const xf_pool_shape *s, float *dx) {
  (void)b;
  const float inv = 1.0f / (float)(s->k * s->k);
  memset(dx, 0, sizeof(float) * (size_t)s->n * s->h * s->w * s->c);
  size_t o = 0;
  for (int n = 0; n < s->n; n++) {
    float *img = dx + (size_t)n * s->h * s->w * s->c;
    for (int oy = 0; oy < s->oh; oy++)
      for (int ox = 0; ox < s->ow; ox++)
        for (int ch = 0; ch < s->c; ch++, o++) {
          const float g = dy[o] * inv;
          for (int i = 0; i < s->k; i++)
            for (int j = 0; j < s->k; j++)
              img[((size_t)(oy * s->stride + i) * s->w + ox * s->stride + j) * s->c + ch] += g;
        }
  }
}

#define XF__SQRT1_2 0.70710678118654752440
#define XF__INV_SQRT_2PI 0.39894228040143267794

static void cpu_act_fwd(xf_backend *b, xf_act act, float *y, const float *x, size_t n) {
  (void)b;
  switch (act) {
  case XF_ACT_GELU:
    for (size_t i = 0; i < n; i++) {
      const double v = x[i];
      y[i] = (float)(0.5 * v * (1.0 + erf(v * XF__SQRT1_2)));
    }
    break;
  case XF_ACT_TANH:
    for (size_t i = 0; i < n; i++) y[i] = tanhf(x[i]);
    break;
  case XF_ACT_SIGMOID:
    for (size_t i = 0; i < n; i++) y[i] = (float)(1.0 / (1.0 + exp(-(double)x[i])));
    break;
  }
}

static void cpu_act_bwd(xf_backend *b, xf_act act, float *dx, const float *dy, const float *x,
                        const float *y, size_t n) {
  (void)b;
  switch (act) {
  case XF_ACT_GELU:
    /* d/dx x Phi(x) = Phi(x) + x phi(x). */
    for (size_t i = 0; i < n; i++) {
      const double v = x[i];
      const double d = 0.5 * (1.0 + erf(v * XF__SQRT1_2)) + v * XF__INV_SQRT_2PI * exp(-0.5 * v * v);
      dx[i] = (float)(dy[i] * d);
    }
    break;
  case XF_ACT_TANH:
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    break;
  case XF_ACT_SIGMOID:
    for (size_t i = 0; i < n; i++) dx[i] = dy[i] * (y[i] * (1.0f - y[i]));
    break;
  }
}

static void cpu_softmax_fwd(xf_backend *b, float *y, const float *x, int rows, int cols) {
  (void)b;
  for (int r = 0; r < rows; r++) {
    const float *z = x + (size_t)r * cols;
    float *p = y + (size_t)r * cols;
    float zmax = z[0];
    for (int c = 1; c < cols; c++) zmax = z[c] > zmax ? z[c] : zmax;
    double sum = 0.0;
    for (int c = 0; c < cols; c++) sum += exp((double)z[c] - zmax);
    for (int c = 0; c < cols; c++) p[c] = (float)(exp((double)z[c] - zmax) / sum);
  }
}

static void cpu_softmax_bwd(xf_backend *b, float *dx, const float *dy, const float *y, int rows,
                            int cols) {
  (void)b;
  for (int r = 0; r < rows; r++) {
    const float *g = dy + (size_t)r * cols, *p = y + (size_t)r * cols;
    float *d = dx + (size_t)r * cols;
    double dot = 0.0;
    for (int c = 0; c < cols; c++) dot += (double)g[c] * p[c];
    for (int c = 0; c < cols; c++) d[c] = (float)((double)p[c] * ((double)g[c] - dot));
  }
}

/* Group normalization walks each record in blocks of up to NORM_BLOCK
 * channels: sums over the positions per channel first, contiguous so that
 * the loops vectorize (a group of a few channels would leave an inner loop
 * too short to), then per group, all in double. */
#define NORM_BLOCK 256

static int block_len(int c, int k0) { return c - k0 < NORM_BLOCK ? c - k0 : NORM_BLOCK; }

static void cpu_norm_fwd(xf_backend *b, const xf_norm_shape *s, const float *x,
                         const float *gamma, const float *beta, float *y, float *xhat,
                         float *rstd) {
  (void)b;
  const int c = s->c, cg = c / s->groups, G = s->groups;
  const double m = (double)s->p * cg;
  double mean[XF_NORM_GROUPS_MAX], rs[XF_NORM_GROUPS_MAX];
  double acc[NORM_BLOCK], mk[NORM_BLOCK], rk[NORM_BLOCK];
  for (int r = 0; r < s->n; r++) {
    const size_t base = (size_t)r * s->p * c;
    const float *xr = x + base;
    for (int g = 0; g < G; g++) mean[g] = rs[g] = 0.0;
    for (int k0 = 0; k0 < c; k0 += NORM_BLOCK) {
      const int kn = block_len(c, k0);
      for (int k = 0; k < kn; k++) acc[k] = 0.0;
      for (int q = 0; q < s->p; q++) {
        const float *v = xr + (size_t)q * c + k0;
        for (int k = 0; k < kn; k++) acc[k] += v[k];
      }
      for (int k = 0; k < kn; k++) mean[(k0 + k) / cg] += acc[k];
    }
    for (int g = 0; g < G; g++) mean[g] /= m;
    for (int k0 = 0; k0 < c; k0 += NORM_BLOCK) {
      const int kn = block_len(c, k0);
      for (int k = 0; k < kn; k++) {
        acc[k] = 0.0;
        mk[k] = mean[(k0 + k) / cg];
      }
      for (int q = 0; q < s->p; q++) {
        const float *v = xr + (size_t)q * c + k0;
        for (int k = 0; k < kn; k++) {
          const double d = v[k] - mk[k];
          acc[k] += d * d;
        }
      }
      for (int k = 0; k < kn; k++) rs[(k0 + k) / cg] += acc[k];
    }
    for (int g = 0; g < G; g++) {
      rs[g] = 1.0 / sqrt(rs[g] / m + (double)s->eps);
      rstd[(size_t)r * G + g] = (float)rs[g];
    }
    for (int k0 = 0; k0 < c; k0 += NORM_BLOCK) {
      const int kn = block_len(c, k0);
      for (int k = 0; k < kn; k++) {
        mk[k] = mean[(k0 + k) / cg];
        rk[k] = rs[(k0 + k) / cg];
      }
      for (int q = 0; q < s->p; q++) {
        const size_t at = base + (size_t)q * c + k0;
        for (int k = 0; k < kn; k++) {
          const float h = (float)((x[at + k] - mk[k]) * rk[k]);
          xhat[at + k] = h;
          y[at + k] = h * gamma[k0 + k] + beta[k0 + k];
        }
      }
    }
  }
}

static void cpu_norm_bwd(xf_backend *b, const xf_norm_shape *s, const float *dy,
                         const float *xhat, const float *rstd, const float *gamma, float *dx) {
  (void)b;
  const int c = s->c, cg = c / s->groups, G = s->groups;
  const double m = (double)s->p * cg;
  double ga[XF_NORM_GROUPS_MAX], gax[XF_NORM_GROUPS_MAX];
  double sg[NORM_BLOCK], sgx[NORM_BLOCK], rk[NORM_BLOCK];
  for (int r = 0; r < s->n; r++) {
    const size_t base = (size_t)r * s->p * c;
    /* mean(g) and mean(g xhat) per group, g = dy gamma. */
    for (int g = 0; g < G; g++) ga[g] = gax[g] = 0.0;
    for (int k0 = 0; k0 < c; k0 += NORM_BLOCK) {
      const int kn = block_len(c, k0);
      for (int k = 0; k < kn; k++) sg[k] = sgx[k] = 0.0;
      for (int q = 0; q < s->p; q++) {
        const size_t at = base + (size_t)q * c + k0;
        for (int k = 0; k < kn; k++) {
          sg[k] += dy[at + k];
          sgx[k] += (double)dy[at + k] * xhat[at + k];
        }
      }
      for (int k = 0; k < kn; k++) {
        ga[(k0 + k) / cg] += sg[k] * gamma[k0 + k];
        gax[(k0 + k) / cg] += sgx[k] * gamma[k0 + k];
      }
    }
    for (int k0 = 0; k0 < c; k0 += NORM_BLOCK) {
      const int kn = block_len(c, k0);
      for (int k = 0; k < kn; k++) {
        const int g = (k0 + k) / cg;
        sg[k] = ga[g] / m;
        sgx[k] = gax[g] / m;
        rk[k] = rstd[(size_t)r * G + g];
      }
      for (int q = 0; q < s->p; q++) {
        const size_t at = base + (size_t)q * c + k0;
        for (int k = 0; k < kn; k++)
          dx[at + k] = (float)(rk[k] * ((double)dy[at + k] * gamma[k0 + k] - sg[k] -
                                        xhat[at + k] * sgx[k]));
      }
    }
  }
}

static void cpu_mul(xf_backend *b, float *y, const float *u, const float *v, size_t n) {
  (void)b;
  for (size_t i = 0; i < n; i++) y[i] = u[i] * v[i];
}

static void cpu_dropout_mask(xf_backend *b, float *mask, size_t n, float rate, uint64_t seed) {
  (void)b;
  const uint64_t threshold = (uint64_t)((double)rate * 4294967296.0);
  const float keep = 1.0f / (1.0f - rate);
  for (size_t i = 0; i < n; i++) {
    uint64_t z = seed + (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    mask[i] = (z >> 32) < threshold ? 0.0f : keep;
  }
}

static void cpu_embedding_fwd(xf_backend *b, const float *ids, const float *table, int rows,
                              int dim, float *y) {
  (void)b;
  for (int r = 0; r < rows; r++)
    memcpy(y + (size_t)r * dim, table + (size_t)ids[r] * dim, sizeof(float) * (size_t)dim);
}

static void cpu_embedding_bwd(xf_backend *b, const float *ids, const float *dy, int rows, int dim,
                              int vocab, float beta, float *dtable) {
  (void)b;
  if (beta == 0.0f) memset(dtable, 0, sizeof(float) * (size_t)vocab * dim);
  for (int r = 0; r < rows; r++) {
    float *t = dtable + (size_t)ids[r] * dim;
    const float *g = dy + (size_t)r * dim;
    for (int k = 0; k < dim; k++) t[k] += g[k];
  }
}

static void cpu_embedding_sqnorm(xf_backend *b, float *out, const float *ids, const float *dy,
                                 int n, int f, int dim, bool accumulate) {
  (void)b;
  for (int r = 0; r < n; r++) {
    const float *id = ids + (size_t)r * f;
    const float *g = dy + (size_t)r * f * dim;
    double sum = accumulate ? out[r] : 0.0;
    for (int a = 0; a < f; a++)
      for (int c = 0; c < f; c++) {
        if (id[a] != id[c]) continue;
        double dot = 0.0;
        for (int k = 0; k < dim; k++) dot += (double)g[(size_t)a * dim + k] * g[(size_t)c * dim + k];
        sum += dot;
      }
    out[r] = (float)sum;
  }
}

static xf_err cpu_softmax_xent(xf_backend *b, const float *logits, const int32_t *labels,
                               int n, int classes, float *dlogits, double *loss_sum,
                               int *correct) {
  (void)b;
  double loss = 0.0;
  int right = 0;
  const float inv_n = 1.0f / (float)n;
  for (int r = 0; r < n; r++) {
    const float *z = logits + (size_t)r * classes;
    int label = labels[r];
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
    loss += log(sum) - ((double)z[label] - zmax);
    right += arg == label;
    if (dlogits) {
      float *d = dlogits + (size_t)r * classes;
      for (int c = 0; c < classes; c++) {
        float p = (float)(exp((double)z[c] - zmax) / sum);
        d[c] = (p - (c == label ? 1.0f : 0.0f)) * inv_n;
      }
    }
  }
  *loss_sum = loss;
  *correct = right;
  return XF_OK;
}

static void cpu_sgd_step(xf_backend *b, float *restrict w, const float *restrict g,
                         float *restrict v, const float *restrict w_ref, size_t n,
                         const xf_sgd_params *p) {
  (void)b;
  const float lr = p->lr, mom = p->momentum, wd = p->weight_decay, mu = p->prox_mu;
  if (p->nesterov) {
    /* Kept apart from the heavy-ball loops below so that their arithmetic
     * (and so the default training's bits) does not change. */
    const bool prox = mu != 0.0f && w_ref;
    for (size_t i = 0; i < n; i++) {
      float gi = g[i] + wd * w[i];
      if (prox) gi = gi + mu * (w[i] - w_ref[i]);
      float vi = mom * v[i] + gi;
      v[i] = vi;
      w[i] = w[i] - lr * (gi + mom * vi);
    }
  } else if (mu != 0.0f && w_ref) {
    for (size_t i = 0; i < n; i++) {
      float gi = g[i] + wd * w[i] + mu * (w[i] - w_ref[i]);
      v[i] = mom * v[i] + gi;
      w[i] -= lr * v[i];
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float gi = g[i] + wd * w[i];
      v[i] = mom * v[i] + gi;
      w[i] -= lr * v[i];
    }
  }
}

static void cpu_adam_step(xf_backend *b, float *restrict w, const float *restrict g,
                          float *restrict m, float *restrict v, const float *restrict w_ref,
                          size_t n, const xf_adam_params *p) {
  (void)b;
  const float b1 = p->beta1, b2 = p->beta2, c1 = 1.0f - p->beta1, c2 = 1.0f - p->beta2;
  const float step = (float)((double)p->lr / p->bias1), root2 = (float)sqrt(p->bias2);
  const float wd = p->weight_decay, mu = p->prox_mu, eps = p->eps;
  const float keep = 1.0f - p->lr * p->weight_decay;
  const bool prox = mu != 0.0f && w_ref;
  for (size_t i = 0; i < n; i++) {
    float wi = w[i], gi = g[i];
    if (!p->decoupled) gi = gi + wd * wi;
    if (prox) gi = gi + mu * (wi - w_ref[i]);
    if (p->decoupled) wi = wi * keep;
    float mi = b1 * m[i] + c1 * gi;
    float vi = b2 * v[i] + c2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) / root2 + eps;
    w[i] = wi - step * (mi / denom);
  }
}

/* One row of xf_k_scalar_loss; shared in spirit with the cuda kernel, which
 * repeats the same double-precision steps. */
static double scalar_row(xf_scalar_loss kind, float z, float t, float inv_n, float *d,
                         int *right) {
  if (kind == XF_SCALAR_LOSS_BCE) {
    double zd = (double)z, td = (double)t;
    double loss = (zd > 0.0 ? zd : 0.0) - zd * td + log1p(exp(-fabs(zd)));
    *right = (z > 0.0f) == (t > 0.5f);
    if (d) {
      double sig = zd >= 0.0 ? 1.0 / (1.0 + exp(-zd)) : exp(zd) / (1.0 + exp(zd));
      *d = (float)(sig - td) * inv_n;
    }
    return loss;
  }
  double e = (double)z - (double)t;
  *right = 0;
  if (d) *d = (float)(2.0 * e) * inv_n;
  return e * e;
}

static xf_err cpu_scalar_loss(xf_backend *b, xf_scalar_loss kind, const float *z,
                              const float *t, int n, float *dout, double *loss_sum,
                              int *correct) {
  (void)b;
  double loss = 0.0;
  int right = 0;
  const float inv_n = n > 0 ? 1.0f / (float)n : 0.0f;
  for (int r = 0; r < n; r++) {
    int ok;
    loss += scalar_row(kind, z[r], t[r], inv_n, dout ? dout + r : NULL, &ok);
    right += ok;
  }
  *loss_sum = loss;
  *correct = right;
  return XF_OK;
}

static const xf__backend_ops cpu_ops = {
    .name = "cpu",
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy_bytes,
    .download = cpu_copy_bytes,
    .sync = cpu_sync,
    .gemm = cpu_gemm,
    .gemm_strided_batched = cpu_gemm_strided_batched,
    .bias_add = cpu_bias_add,
    .bias_grad = cpu_bias_grad,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .axpy = cpu_axpy,
    .scale = cpu_scale,
    .fill = cpu_fill,
    .copy = cpu_copy,
    .l2norm = cpu_l2norm,
    .mul_acc = cpu_mul_acc,
    .row_dot = cpu_row_dot,
    .clip_factors = cpu_clip_factors,
    .scale_rows = cpu_scale_rows,
    .im2col = cpu_im2col,
    .col2im = cpu_col2im,
    .maxpool_fwd = cpu_maxpool_fwd,
    .maxpool_bwd = cpu_maxpool_bwd,
    .avgpool_fwd = cpu_avgpool_fwd,
    .avgpool_bwd = cpu_avgpool_bwd,
    .act_fwd = cpu_act_fwd,
    .act_bwd = cpu_act_bwd,
    .softmax_fwd = cpu_softmax_fwd,
    .softmax_bwd = cpu_softmax_bwd,
    .norm_fwd = cpu_norm_fwd,
    .norm_bwd = cpu_norm_bwd,
    .mul = cpu_mul,
    .dropout_mask = cpu_dropout_mask,
    .embedding_fwd = cpu_embedding_fwd,
    .embedding_bwd = cpu_embedding_bwd,
    .embedding_sqnorm = cpu_embedding_sqnorm,
    .softmax_xent = cpu_softmax_xent,
    .sgd_step = cpu_sgd_step,
    .adam_step = cpu_adam_step,
    .scalar_loss = cpu_scalar_loss,
};

/* First "model name" line of /proc/cpuinfo, or "unknown CPU". */
static void cpu_model_name(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) == 0) {
      const char *v = strchr(line, ':');
      if (v) {
        v++;
        while (*v == ' ') v++;
        snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
      }
      break;
    }
  }
  fclose(f);
}

xf_err xf__cpu_open(xf_backend *b, const xf_backend_options *opt, xf_errctx *err) {
  int threads;
  xf_err rc = xf__backend_threads(opt, &threads, err);
  if (rc != XF_OK) return rc;
  openblas_set_num_threads(threads);
  b->ops = &cpu_ops;
  b->threads = threads;
  b->impl = NULL;
  char model[96];
  cpu_model_name(model, sizeof(model));
  snprintf(b->description, sizeof(b->description), "%s, %d thread%s, OpenBLAS %s", model,
           threads, threads == 1 ? "" : "s", openblas_get_corename());
  return XF_OK;
}
