/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the cuda backend against the cpu reference: every op runs on both
 * backends on the same seeded inputs, and the results are compared at the
 * tolerance the op's arithmetic allows (stated at each test). Where CUDA was
 * not built or no GPU is usable, every test is skipped with the reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>

#include "base/alloc.h"
#include "base/result.h"
#include "base/rng.h"
#include "kernels/backend.h"
#include "kernels/model.h"
#include "kernels/net.h"

static xf_backend *cpu_b, *gpu_b;
static char no_gpu_why[700];

static int open_backends(void **state) {
  (void)state;
  xf_errctx err;
  xf_errctx_clear(&err);
  xf_backend_options opt = {XF_BACKEND_CPU, 1, 0};
  if (xf_backend_open(&opt, &cpu_b, &err) != XF_OK) {
    print_error("cannot open the cpu backend: %s\n", err.msg);
    return -1;
  }
  opt.kind = XF_BACKEND_CUDA;
  xf_errctx_clear(&err);
  if (xf_backend_open(&opt, &gpu_b, &err) != XF_OK) {
    gpu_b = NULL;
    xf_errctx_format(&err, no_gpu_why, sizeof(no_gpu_why));
  } else {
    print_message("cuda backend: %s\n", xf_backend_describe(gpu_b));
  }
  return 0;
}

static int close_backends(void **state) {
  (void)state;
  xf_backend_close(gpu_b);
  xf_backend_close(cpu_b);
  return 0;
}

#define REQUIRE_GPU()                                                          \
  do {                                                                         \
    if (!gpu_b) {                                                              \
      print_message("no GPU: %s\n", no_gpu_why);                               \
      skip();                                                                  \
    }                                                                          \
  } while (0)

/* ---- buffers on both backends --------------------------------------------- */

typedef struct twin {
  void *on_cpu, *on_gpu;
  size_t bytes;
} twin;

static void *host_alloc(size_t bytes) {
  void *p = xf_malloc(bytes ? bytes : 1);
  assert_non_null(p);
  return p;
}

/* The same bytes on both backends; zero-filled when init is NULL. */
static twin twin_new(size_t bytes, const void *init) {
  twin t = {NULL, NULL, bytes};
  assert_int_equal(xf_backend_alloc(cpu_b, bytes, &t.on_cpu), XF_OK);
  assert_int_equal(xf_backend_alloc(gpu_b, bytes, &t.on_gpu), XF_OK);
  if (init) {
    assert_int_equal(xf_backend_upload(cpu_b, t.on_cpu, init, bytes), XF_OK);
    assert_int_equal(xf_backend_upload(gpu_b, t.on_gpu, init, bytes), XF_OK);
  }
  return t;
}

static void twin_read(const twin *t, void *from_cpu, void *from_gpu) {
  assert_int_equal(xf_backend_download(cpu_b, from_cpu, t->on_cpu, t->bytes), XF_OK);
  assert_int_equal(xf_backend_download(gpu_b, from_gpu, t->on_gpu, t->bytes), XF_OK);
}

static void twin_free(twin *t) {
  xf_backend_free(cpu_b, t->on_cpu);
  xf_backend_free(gpu_b, t->on_gpu);
  t->on_cpu = t->on_gpu = NULL;
}

static float *cpu_f(const twin *t) { return (float *)t->on_cpu; }
static float *gpu_f(const twin *t) { return (float *)t->on_gpu; }

/* Normal(0, scale) floats; with `step` > 0 rounded to multiples of it, which
 * makes ties and exact zeros common. */
static float *random_floats(xf_rng *rng, size_t n, double scale, double step) {
  float *v = host_alloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) {
    double x = xf_rng_normal(rng) * scale;
    v[i] = (float)(step > 0 ? round(x / step) * step : x);
  }
  return v;
}

/* ---- comparisons ---------------------------------------------------------- */

static void expect_identical_floats(const char *what, const float *want, const float *got,
                                    size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
      fail_msg("%s[%zu]: cpu %.9g, cuda %.9g (must be bit-identical)", what, i, (double)want[i],
               (double)got[i]);
  }
}

static void expect_identical_ints(const char *what, const int32_t *want, const int32_t *got,
                                  size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (want[i] != got[i])
      fail_msg("%s[%zu]: cpu %d, cuda %d", what, i, (int)want[i], (int)got[i]);
  }
}

/* |got - want| <= tol[i] elementwise; NaN must meet NaN. */
static void expect_within(const char *what, const float *want, const float *got,
                          const double *tol, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (isnan(want[i]) || isnan(got[i])) {
      if (!(isnan(want[i]) && isnan(got[i])))
        fail_msg("%s[%zu]: cpu %.9g, cuda %.9g", what, i, (double)want[i], (double)got[i]);
      continue;
    }
    double d = fabs((double)got[i] - (double)want[i]);
    if (!(d <= tol[i]))
      fail_msg("%s[%zu]: cpu %.9g, cuda %.9g, difference %.3g over tolerance %.3g", what, i,
               (double)want[i], (double)got[i], d, tol[i]);
  }
}

/* ---- dense algebra -------------------------------------------------------- */

/* Tolerance: both sides accumulate k products in float, in different orders
 * and blockings, so each element may differ by a few float roundings of the
 * magnitudes involved. The bound is 1e-5 * sqrt(k + 1) times
 * |alpha| * sum_p |op(A)[i][p]| |op(B)[p][j]| + |beta| |C[i][j]|: about 80
 * float epsilons times the typical sqrt(k) growth of rounding error, far
 * below what a wrong index or transpose would give. The padding between
 * rows of C (ldc > n) must come back untouched, bit for bit. */
static void gemm_case(xf_rng *rng, bool ta, bool tb, int m, int n, int k, int pad, float alpha,
                      float beta, bool nan_c) {
  const int ra = ta ? k : m, ca = ta ? m : k, rb = tb ? n : k, cb = tb ? k : n;
  const int lda = (ca > 0 ? ca : 1) + pad, ldb = (cb > 0 ? cb : 1) + pad, ldc = n + pad;
  const size_t na = (size_t)ra * lda, nb = (size_t)rb * ldb, nc = (size_t)m * ldc;
  float *a = random_floats(rng, na, 1.0, 0), *bm = random_floats(rng, nb, 1.0, 0);
  float *c0 = random_floats(rng, nc, 1.0, 0);
  if (nan_c)
    for (size_t i = 0; i < nc; i++) c0[i] = NAN; /* beta == 0: C is not read */
  twin ta_ = twin_new(na * sizeof(float), a), tb_ = twin_new(nb * sizeof(float), bm);
  twin tc = twin_new(nc * sizeof(float), c0);
  xf_k_gemm(cpu_b, ta, tb, m, n, k, alpha, cpu_f(&ta_), lda, cpu_f(&tb_), ldb, beta, cpu_f(&tc),
            ldc);
  xf_k_gemm(gpu_b, ta, tb, m, n, k, alpha, gpu_f(&ta_), lda, gpu_f(&tb_), ldb, beta, gpu_f(&tc),
            ldc);
  assert_int_equal(xf_backend_sync(gpu_b), XF_OK);
  float *want = host_alloc(nc * sizeof(float)), *got = host_alloc(nc * sizeof(float));
  twin_read(&tc, want, got);
  double *tol = host_alloc(nc * sizeof(double));
  char what[96];
  snprintf(what, sizeof(what), "gemm %c%c m=%d n=%d k=%d pad=%d", ta ? 'T' : 'N', tb ? 'T' : 'N',
           m, n, k, pad);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < ldc; j++) {
      size_t at = (size_t)i * ldc + j;
      if (j >= n) { /* padding: never written */
        expect_identical_floats(what, &c0[at], &got[at], 1);
        tol[at] = INFINITY;
        continue;
      }
      double mag = 0;
      for (int p = 0; p < k; p++) {
        float av = ta ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
        float bv = tb ? bm[(size_t)j * ldb + p] : bm[(size_t)p * ldb + j];
        mag += fabs((double)av) * fabs((double)bv);
      }
      mag = fabs((double)alpha) * mag + (beta != 0.0f ? fabs((double)beta * c0[at]) : 0.0);
      tol[at] = 1e-5 * sqrt((double)k + 1.0) * mag;
    }
  }
  expect_within(what, want, got, tol, nc);
  xf_free(tol);
  xf_free(want);
  xf_free(got);
  twin_free(&ta_);
  twin_free(&tb_);
  twin_free(&tc);
  xf_free(a);
  xf_free(bm);
  xf_free(c0);
}

static void gemm_matches_cpu_for_all_transposes_and_shapes(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 11, 0);
  static const int shapes[][3] = {{1, 1, 1},     {1, 37, 5},    {33, 1, 65},  {64, 64, 64},
                                  {127, 95, 211}, {300, 257, 129}, {31, 33, 7}, {2, 3, 1000}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    for (int t = 0; t < 4; t++) {
      const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      gemm_case(&rng, t & 1, t & 2, m, n, k, 0, 1.0f, 0.0f, false);
      gemm_case(&rng, t & 1, t & 2, m, n, k, 3, -0.75f, 1.25f, false);
    }
  }
}

/* The three products of a conv layer's step at fedavg-cnn's second conv
 * (batch 32: 6,272 output positions, 800 = 5*5*32 inputs, 64 channels):
 * forward col W^T, the weight gradient dY^T col (k = 6,272) and the column
 * gradient dY W. */
static void gemm_matches_cpu_at_the_conv_layer_shapes(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 13, 0);
  gemm_case(&rng, false, true, 6272, 64, 800, 0, 1.0f, 0.0f, false);
  gemm_case(&rng, true, false, 64, 800, 6272, 0, 1.0f, 0.0f, false);
  gemm_case(&rng, false, false, 6272, 800, 64, 0, 1.0f, 0.0f, false);
}

static void gemm_edge_cases_follow_blas(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 12, 0);
  gemm_case(&rng, false, false, 5, 7, 0, 0, 1.0f, 0.5f, false);  /* k = 0: C = beta C */
  gemm_case(&rng, true, false, 5, 7, 0, 2, 1.0f, 0.0f, true);    /* k = 0, beta 0: C = 0 */
  gemm_case(&rng, false, true, 9, 4, 6, 1, 0.0f, -2.0f, false);  /* alpha 0 */
  gemm_case(&rng, true, true, 17, 19, 23, 0, 1.5f, 0.0f, true);  /* beta 0 clears NaN */
  gemm_case(&rng, false, false, 1, 1, 4097, 0, 1.0f, 0.0f, false); /* long dot product */
}

/* bias_add adds one float to one float: bit-identical. */
static void bias_add_is_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 13, 0);
  static const int shapes[][2] = {{1, 1}, {1, 33}, {7, 10}, {513, 3}, {3136, 64}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    const int rows = shapes[s][0], cols = shapes[s][1];
    const size_t ny = (size_t)rows * cols;
    float *y = random_floats(&rng, ny, 1.0, 0), *bias = random_floats(&rng, (size_t)cols, 1.0, 0);
    twin ty = twin_new(ny * sizeof(float), y), tbias = twin_new((size_t)cols * sizeof(float), bias);
    xf_k_bias_add(cpu_b, cpu_f(&ty), cpu_f(&tbias), rows, cols);
    xf_k_bias_add(gpu_b, gpu_f(&ty), gpu_f(&tbias), rows, cols);
    float *want = host_alloc(ny * sizeof(float)), *got = host_alloc(ny * sizeof(float));
    twin_read(&ty, want, got);
    expect_identical_floats("bias_add", want, got, ny);
    xf_free(want);
    xf_free(got);
    twin_free(&ty);
    twin_free(&tbias);
    xf_free(y);
    xf_free(bias);
  }
}

/* cpu sums each column row by row in float; cuda sums chunks of rows in
 * double and rounds once. Tolerance: 1e-6 * sqrt(rows) * sum_r |dy[r][c]|,
 * above the float rounding of the cpu's running sum (about 6e-8 * sqrt(rows)
 * of that sum even without cancellation) and below the 1/rows share of a
 * single dropped or doubled row for the sizes here. */
static void bias_grad_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 14, 0);
  static const int shapes[][2] = {{1, 1}, {1, 33}, {7, 10}, {513, 3}, {50176, 32}, {0, 5},
                                  {64, 1}, {16385, 10}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    const int rows = shapes[s][0], cols = shapes[s][1];
    const size_t ny = (size_t)rows * cols;
    float *dy = random_floats(&rng, ny, 1.0, 0);
    float *stale = random_floats(&rng, (size_t)cols, 1.0, 0); /* db is overwritten */
    twin tdy = twin_new(ny * sizeof(float), dy), tdb = twin_new((size_t)cols * sizeof(float), stale);
    xf_k_bias_grad(cpu_b, cpu_f(&tdb), cpu_f(&tdy), rows, cols);
    xf_k_bias_grad(gpu_b, gpu_f(&tdb), gpu_f(&tdy), rows, cols);
    float *want = host_alloc((size_t)cols * sizeof(float));
    float *got = host_alloc((size_t)cols * sizeof(float));
    twin_read(&tdb, want, got);
    double *tol = host_alloc((size_t)cols * sizeof(double));
    for (int c = 0; c < cols; c++) {
      double abs_sum = 0;
      for (int r = 0; r < rows; r++) abs_sum += fabs((double)dy[(size_t)r * cols + c]);
      tol[c] = 1e-6 * sqrt((double)rows) * abs_sum;
    }
    char what[64];
    snprintf(what, sizeof(what), "bias_grad rows=%d cols=%d", rows, cols);
    expect_within(what, want, got, tol, (size_t)cols);
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    twin_free(&tdy);
    twin_free(&tdb);
    xf_free(dy);
    xf_free(stale);
  }
}

/* ---- element-wise --------------------------------------------------------- */

static const size_t elementwise_sizes[] = {1, 31, 1000, (1u << 20) + 3};

/* relu, axpy, scale, fill and copy are one IEEE operation per element (no
 * FMA contraction on either side): bit-identical. */
static void elementwise_ops_are_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 15, 0);
  for (size_t s = 0; s < sizeof(elementwise_sizes) / sizeof(elementwise_sizes[0]); s++) {
    const size_t n = elementwise_sizes[s], bytes = n * sizeof(float);
    float *x = random_floats(&rng, n, 1.0, 0), *y0 = random_floats(&rng, n, 1.0, 0.25);
    twin tx = twin_new(bytes, x), ty = twin_new(bytes, y0), tz = twin_new(bytes, NULL);
    float *want = host_alloc(bytes), *got = host_alloc(bytes);

    xf_k_relu_fwd(cpu_b, cpu_f(&tz), cpu_f(&tx), n);
    xf_k_relu_fwd(gpu_b, gpu_f(&tz), gpu_f(&tx), n);
    twin_read(&tz, want, got);
    expect_identical_floats("relu_fwd", want, got, n);

    xf_k_relu_bwd(cpu_b, cpu_f(&ty), cpu_f(&ty), cpu_f(&tz), n); /* dx aliases dy */
    xf_k_relu_bwd(gpu_b, gpu_f(&ty), gpu_f(&ty), gpu_f(&tz), n);
    twin_read(&ty, want, got);
    expect_identical_floats("relu_bwd", want, got, n);

    xf_k_relu_fwd(cpu_b, cpu_f(&ty), cpu_f(&ty), n); /* in place, with exact zeros */
    xf_k_relu_fwd(gpu_b, gpu_f(&ty), gpu_f(&ty), n);
    twin_read(&ty, want, got);
    expect_identical_floats("relu_fwd in place", want, got, n);

    xf_k_axpy(cpu_b, -0.37f, cpu_f(&tx), cpu_f(&ty), n);
    xf_k_axpy(gpu_b, -0.37f, gpu_f(&tx), gpu_f(&ty), n);
    twin_read(&ty, want, got);
    expect_identical_floats("axpy", want, got, n);

    xf_k_scale(cpu_b, cpu_f(&ty), 1.7f, n);
    xf_k_scale(gpu_b, gpu_f(&ty), 1.7f, n);
    twin_read(&ty, want, got);
    expect_identical_floats("scale", want, got, n);

    xf_k_copy(cpu_b, cpu_f(&tz), cpu_f(&ty), n);
    xf_k_copy(gpu_b, gpu_f(&tz), gpu_f(&ty), n);
    twin_read(&tz, want, got);
    expect_identical_floats("copy", want, got, n);

    if (n > 1) { /* overlapping ranges move like memmove */
      xf_k_copy(cpu_b, cpu_f(&tz) + 1, cpu_f(&tz), n - 1);
      xf_k_copy(gpu_b, gpu_f(&tz) + 1, gpu_f(&tz), n - 1);
      twin_read(&tz, want, got);
      expect_identical_floats("copy overlapping", want, got, n);
    }

    xf_k_fill(cpu_b, cpu_f(&tz), -2.5f, n);
    xf_k_fill(gpu_b, gpu_f(&tz), -2.5f, n);
    twin_read(&tz, want, got);
    expect_identical_floats("fill", want, got, n);

    xf_free(want);
    xf_free(got);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&tz);
    xf_free(x);
    xf_free(y0);
  }
}

/* Both sides square exactly in double and sum positive terms in different
 * orders; the rounding of n such sums differs by at most n * DBL_EPSILON
 * relative (and halves under the square root): that is the tolerance. */
static void l2norm_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 16, 0);
  static const size_t sizes[] = {0, 1, 255, 256, 257, 100003, (size_t)1 << 22};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    const size_t n = sizes[s];
    float *x = random_floats(&rng, n, 3.0, 0);
    twin tx = twin_new(n * sizeof(float), x);
    double want = xf_k_l2norm(cpu_b, cpu_f(&tx), n);
    double got = xf_k_l2norm(gpu_b, gpu_f(&tx), n);
    assert_int_equal(xf_backend_sync(gpu_b), XF_OK);
    if (!(fabs(got - want) <= (double)n * DBL_EPSILON * want))
      fail_msg("l2norm n=%zu: cpu %.17g, cuda %.17g", n, want, got);
    twin_free(&tx);
    xf_free(x);
  }
}

/* ---- convolution and pooling ---------------------------------------------- */

static const xf_conv_shape conv_shapes[] = {
    {1, 1, 1, 1, 1, 1, 0, 1, 0, 0},  {2, 5, 7, 3, 3, 3, 1, 1, 0, 0},
    {3, 28, 28, 1, 5, 5, 2, 1, 0, 0}, {2, 13, 11, 6, 3, 2, 0, 2, 0, 0},
    {1, 9, 9, 4, 4, 4, 1, 3, 0, 0},  {4, 8, 8, 16, 3, 3, 1, 2, 0, 0},
    {2, 6, 5, 3, 5, 5, 2, 3, 0, 0},  {1, 4, 4, 33, 2, 2, 0, 2, 0, 0},
    {1, 2, 2, 1, 2, 2, 3, 1, 0, 0},  /* pad > kernel: whole windows outside */
    {1, 10, 10, 2, 2, 2, 0, 3, 0, 0}, /* stride > kernel: pixels never read */
    {32, 14, 14, 32, 5, 5, 2, 1, 0, 0}, /* fedavg-cnn's second conv, batch 32 */
};

/* im2col copies and col2im adds in the cpu's order (a gather that visits the
 * windows in the same order the cpu scatters them): both bit-identical. */
static void im2col_and_col2im_are_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 17, 0);
  for (size_t s = 0; s < sizeof(conv_shapes) / sizeof(conv_shapes[0]); s++) {
    xf_conv_shape sh = conv_shapes[s];
    assert_int_equal(xf_conv_shape_finish(&sh), XF_OK);
    const size_t nx = (size_t)sh.n * sh.h * sh.w * sh.c;
    const size_t ncol = (size_t)sh.n * sh.oh * sh.ow * sh.kh * sh.kw * sh.c;
    float *x = random_floats(&rng, nx, 1.0, 0), *col = random_floats(&rng, ncol, 1.0, 0);
    float *stale = random_floats(&rng, nx > ncol ? nx : ncol, 1.0, 0);
    twin tx = twin_new(nx * sizeof(float), x), tcol = twin_new(ncol * sizeof(float), stale);
    char what[96];
    snprintf(what, sizeof(what), "im2col n=%d h=%d w=%d c=%d k=%dx%d pad=%d stride=%d", sh.n,
             sh.h, sh.w, sh.c, sh.kh, sh.kw, sh.pad, sh.stride);
    xf_k_im2col(cpu_b, cpu_f(&tx), &sh, cpu_f(&tcol));
    xf_k_im2col(gpu_b, gpu_f(&tx), &sh, gpu_f(&tcol));
    float *want = host_alloc(ncol * sizeof(float)), *got = host_alloc(ncol * sizeof(float));
    twin_read(&tcol, want, got);
    expect_identical_floats(what, want, got, ncol);
    xf_free(want);
    xf_free(got);

    twin tcol2 = twin_new(ncol * sizeof(float), col), tdx = twin_new(nx * sizeof(float), stale);
    xf_k_col2im(cpu_b, cpu_f(&tcol2), &sh, cpu_f(&tdx));
    xf_k_col2im(gpu_b, gpu_f(&tcol2), &sh, gpu_f(&tdx));
    want = host_alloc(nx * sizeof(float));
    got = host_alloc(nx * sizeof(float));
    twin_read(&tdx, want, got);
    snprintf(what, sizeof(what), "col2im n=%d h=%d w=%d c=%d k=%dx%d pad=%d stride=%d", sh.n,
             sh.h, sh.w, sh.c, sh.kh, sh.kw, sh.pad, sh.stride);
    expect_identical_floats(what, want, got, nx);
    xf_free(want);
    xf_free(got);
    twin_free(&tx);
    twin_free(&tcol);
    twin_free(&tcol2);
    twin_free(&tdx);
    xf_free(x);
    xf_free(col);
    xf_free(stale);
  }
}

static const xf_pool_shape pool_shapes[] = {
    {1, 1, 1, 1, 1, 1, 0, 0},   {2, 28, 28, 8, 2, 2, 0, 0}, {3, 13, 13, 5, 3, 2, 0, 0},
    {1, 7, 9, 3, 3, 1, 0, 0},   {2, 9, 7, 33, 4, 3, 0, 0},  {1, 10, 10, 2, 2, 3, 0, 0},
};

/* Forward: the same comparisons in the same window order, bit-identical y
 * and argmax, also with many ties (inputs rounded to integers). Backward:
 * bit-identical when windows do not overlap; when they do, cuda adds with
 * atomics in no fixed order, so a pixel fed by up to m = ceil(k/stride)^2
 * windows may differ by (m - 1) * FLT_EPSILON * (sum of |dy| fed to it). */
static void maxpool_matches_cpu_with_ties_and_overlap(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 18, 0);
  for (size_t s = 0; s < sizeof(pool_shapes) / sizeof(pool_shapes[0]); s++) {
    for (int ties = 0; ties < 2; ties++) {
      xf_pool_shape sh = pool_shapes[s];
      assert_int_equal(xf_pool_shape_finish(&sh), XF_OK);
      const size_t nx = (size_t)sh.n * sh.h * sh.w * sh.c;
      const size_t ny = (size_t)sh.n * sh.oh * sh.ow * sh.c;
      float *x = random_floats(&rng, nx, 1.0, ties ? 1.0 : 0);
      float *dy = random_floats(&rng, ny, 1.0, 0);
      twin tx = twin_new(nx * sizeof(float), x), ty = twin_new(ny * sizeof(float), NULL);
      twin targ = twin_new(ny * sizeof(int32_t), NULL), tdy = twin_new(ny * sizeof(float), dy);
      twin tdx = twin_new(nx * sizeof(float), x); /* stale: must be cleared */
      xf_k_maxpool_fwd(cpu_b, cpu_f(&tx), &sh, cpu_f(&ty), (int32_t *)targ.on_cpu);
      xf_k_maxpool_fwd(gpu_b, gpu_f(&tx), &sh, gpu_f(&ty), (int32_t *)targ.on_gpu);
      float *want = host_alloc(nx * sizeof(float)), *got = host_alloc(nx * sizeof(float));
      int32_t *arg_want = host_alloc(ny * sizeof(int32_t));
      int32_t *arg_got = host_alloc(ny * sizeof(int32_t));
      char what[96];
      snprintf(what, sizeof(what), "maxpool n=%d h=%d w=%d c=%d k=%d stride=%d ties=%d", sh.n,
               sh.h, sh.w, sh.c, sh.k, sh.stride, ties);
      twin_read(&ty, want, got);
      expect_identical_floats(what, want, got, ny);
      twin_read(&targ, arg_want, arg_got);
      expect_identical_ints(what, arg_want, arg_got, ny);

      xf_k_maxpool_bwd(cpu_b, cpu_f(&tdy), (const int32_t *)targ.on_cpu, &sh, cpu_f(&tdx));
      xf_k_maxpool_bwd(gpu_b, gpu_f(&tdy), (const int32_t *)targ.on_gpu, &sh, gpu_f(&tdx));
      twin_read(&tdx, want, got);
      const int per = (sh.k + sh.stride - 1) / sh.stride, m = per * per;
      double *tol = host_alloc(nx * sizeof(double));
      for (size_t i = 0; i < nx; i++) tol[i] = 0;
      for (size_t i = 0; i < ny; i++) tol[arg_want[i]] += fabs((double)dy[i]);
      for (size_t i = 0; i < nx; i++) tol[i] *= (double)(m - 1) * FLT_EPSILON;
      snprintf(what, sizeof(what), "maxpool_bwd n=%d h=%d w=%d c=%d k=%d stride=%d ties=%d",
               sh.n, sh.h, sh.w, sh.c, sh.k, sh.stride, ties);
      expect_within(what, want, got, tol, nx);
      xf_free(tol);
      xf_free(want);
      xf_free(got);
      xf_free(arg_want);
      xf_free(arg_got);
      twin_free(&tx);
      twin_free(&ty);
      twin_free(&targ);
      twin_free(&tdy);
      twin_free(&tdx);
      xf_free(x);
      xf_free(dy);
    }
  }
}

/* ---- loss and optimizer --------------------------------------------------- */

/* The same per-row formulas in double; only exp and log (CUDA's libdevice vs
 * glibc, within 2 ulp in double) and the order of the row sum differ.
 * loss_sum: 1e-9 relative. correct: exact (the argmax scan is the same
 * float comparisons in the same order, ties included). dlogits: the float
 * rounding of softmax may land one ulp apart, and the subtraction and the
 * scaling by 1/n round once each: 4 * FLT_EPSILON / n absolute. */
static void softmax_xent_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 19, 0);
  static const struct {
    int n, classes;
    double scale, step;
  } cases[] = {{1, 1, 1, 0},    {1, 10, 3, 0},   {64, 10, 3, 0},  {33, 100, 3, 0},
               {257, 1000, 3, 0}, {1000, 3, 30, 0}, {128, 10, 2, 1.0}, {5000, 10, 3, 0}};
  for (size_t s = 0; s < sizeof(cases) / sizeof(cases[0]); s++) {
    const int n = cases[s].n, classes = cases[s].classes;
    const size_t nz = (size_t)n * classes;
    float *z = random_floats(&rng, nz, cases[s].scale, cases[s].step);
    int32_t *labels = host_alloc((size_t)n * sizeof(int32_t));
    for (int r = 0; r < n; r++) labels[r] = (int32_t)xf_rng_below(&rng, (uint64_t)classes);
    twin tz = twin_new(nz * sizeof(float), z);
    twin tl = twin_new((size_t)n * sizeof(int32_t), labels);
    twin td = twin_new(nz * sizeof(float), z); /* stale: overwritten */
    double loss_want = -1, loss_got = -2, loss_nograd = -3;
    int right_want = -1, right_got = -2, right_nograd = -3;
    assert_int_equal(xf_k_softmax_xent(cpu_b, cpu_f(&tz), (const int32_t *)tl.on_cpu, n,
                                       classes, cpu_f(&td), &loss_want, &right_want),
                     XF_OK);
    assert_int_equal(xf_k_softmax_xent(gpu_b, gpu_f(&tz), (const int32_t *)tl.on_gpu, n,
                                       classes, gpu_f(&td), &loss_got, &right_got),
                     XF_OK);
    assert_int_equal(xf_k_softmax_xent(gpu_b, gpu_f(&tz), (const int32_t *)tl.on_gpu, n,
                                       classes, NULL, &loss_nograd, &right_nograd),
                     XF_OK);
    char what[64];
    snprintf(what, sizeof(what), "softmax_xent n=%d classes=%d", n, classes);
    if (!(fabs(loss_got - loss_want) <= 1e-9 * fabs(loss_want) + 1e-12))
      fail_msg("%s: loss_sum cpu %.17g, cuda %.17g", what, loss_want, loss_got);
    assert_int_equal(right_got, right_want);
    /* Without dlogits the same kernels run, minus the gradient. */
    assert_true(loss_nograd == loss_got);
    assert_int_equal(right_nograd, right_got);
    float *want = host_alloc(nz * sizeof(float)), *got = host_alloc(nz * sizeof(float));
    twin_read(&td, want, got);
    double *tol = host_alloc(nz * sizeof(double));
    for (size_t i = 0; i < nz; i++) tol[i] = 4.0 * FLT_EPSILON / n;
    expect_within(what, want, got, tol, nz);
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    twin_free(&tz);
    twin_free(&tl);
    twin_free(&td);
    xf_free(z);
    xf_free(labels);
  }
}

/* Each element follows the same float formula in the same order, with no
 * FMA on either side: w and v bit-identical after several steps. */
static void sgd_step_is_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 20, 0);
  static const xf_sgd_params params[] = {
      {0.1f, 0.0f, 0.0f, 0.0f, false},    {0.05f, 0.9f, 5e-4f, 0.0f, false},
      {0.01f, 0.9f, 1e-4f, 0.01f, false}, {0.01f, 0.0f, 0.0f, 0.1f, false},
      {0.05f, 0.9f, 5e-4f, 0.0f, true},   {0.01f, 0.9f, 1e-4f, 0.01f, true},
  };
  static const size_t sizes[] = {1, 33, 100003};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    for (size_t p = 0; p < sizeof(params) / sizeof(params[0]); p++) {
      for (int with_ref = 0; with_ref < 2; with_ref++) {
        const size_t n = sizes[s], bytes = n * sizeof(float);
        float *w = random_floats(&rng, n, 1.0, 0), *ref = random_floats(&rng, n, 1.0, 0);
        twin tw = twin_new(bytes, w), tv = twin_new(bytes, NULL), tref = twin_new(bytes, ref);
        twin tg = twin_new(bytes, NULL);
        for (int step = 0; step < 3; step++) {
          float *g = random_floats(&rng, n, 0.5, 0);
          assert_int_equal(xf_backend_upload(cpu_b, tg.on_cpu, g, bytes), XF_OK);
          assert_int_equal(xf_backend_upload(gpu_b, tg.on_gpu, g, bytes), XF_OK);
          xf_k_sgd_step(cpu_b, cpu_f(&tw), cpu_f(&tg), cpu_f(&tv), with_ref ? cpu_f(&tref) : NULL,
                        n, &params[p]);
          xf_k_sgd_step(gpu_b, gpu_f(&tw), gpu_f(&tg), gpu_f(&tv), with_ref ? gpu_f(&tref) : NULL,
                        n, &params[p]);
          xf_free(g);
        }
        float *want = host_alloc(bytes), *got = host_alloc(bytes);
        twin_read(&tw, want, got);
        expect_identical_floats("sgd_step w", want, got, n);
        twin_read(&tv, want, got);
        expect_identical_floats("sgd_step v", want, got, n);
        xf_free(want);
        xf_free(got);
        twin_free(&tw);
        twin_free(&tv);
        twin_free(&tref);
        twin_free(&tg);
        xf_free(w);
        xf_free(ref);
      }
    }
  }
}

/* Adam and AdamW: the same float formula in the same order on both sides,
 * the host constants computed once by each backend the same way: w, m and v
 * bit-identical after several steps. */
static void adam_step_is_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 24, 0);
  static const xf_adam_params params[] = {
      {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
      {.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f, .weight_decay = 1e-2f},
      {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f,
       .decoupled = true},
      {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f,
       .prox_mu = 0.1f, .decoupled = true},
  };
  static const size_t sizes[] = {1, 33, 100003};
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    for (size_t p = 0; p < sizeof(params) / sizeof(params[0]); p++) {
      const size_t n = sizes[s], bytes = n * sizeof(float);
      float *w = random_floats(&rng, n, 1.0, 0), *ref = random_floats(&rng, n, 1.0, 0);
      twin tw = twin_new(bytes, w), tm = twin_new(bytes, NULL), tv = twin_new(bytes, NULL);
      twin tref = twin_new(bytes, ref), tg = twin_new(bytes, NULL);
      for (int step = 1; step <= 3; step++) {
        float *g = random_floats(&rng, n, 0.5, 0);
        assert_int_equal(xf_backend_upload(cpu_b, tg.on_cpu, g, bytes), XF_OK);
        assert_int_equal(xf_backend_upload(gpu_b, tg.on_gpu, g, bytes), XF_OK);
        xf_adam_params q = params[p];
        q.bias1 = 1.0 - pow(q.beta1, step);
        q.bias2 = 1.0 - pow(q.beta2, step);
        xf_k_adam_step(cpu_b, cpu_f(&tw), cpu_f(&tg), cpu_f(&tm), cpu_f(&tv), cpu_f(&tref), n,
                       &q);
        xf_k_adam_step(gpu_b, gpu_f(&tw), gpu_f(&tg), gpu_f(&tm), gpu_f(&tv), gpu_f(&tref), n,
                       &q);
        xf_free(g);
      }
      float *want = host_alloc(bytes), *got = host_alloc(bytes);
      twin_read(&tw, want, got);
      expect_identical_floats("adam_step w", want, got, n);
      twin_read(&tm, want, got);
      expect_identical_floats("adam_step m", want, got, n);
      twin_read(&tv, want, got);
      expect_identical_floats("adam_step v", want, got, n);
      xf_free(want);
      xf_free(got);
      twin_free(&tw);
      twin_free(&tm);
      twin_free(&tv);
      twin_free(&tref);
      twin_free(&tg);
      xf_free(w);
      xf_free(ref);
    }
  }
}

/* bce and mse: each row's loss and gradient in double from the same float
 * inputs; the device's exp and log1p may differ from glibc's in the last
 * place, so the sums and the gradient are held to a few roundings. */
static void scalar_loss_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 25, 0);
  static const int sizes[] = {1, 7, 1000, 70001};
  for (int kind = 0; kind < 2; kind++) {
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
      const int n = sizes[s];
      const size_t bytes = (size_t)n * sizeof(float);
      float *z = random_floats(&rng, (size_t)n, 8.0, 0), *t = host_alloc(bytes);
      for (int i = 0; i < n; i++)
        t[i] = kind == XF_SCALAR_LOSS_BCE ? (float)xf_rng_below(&rng, 2) : z[i] * 0.5f + 1.0f;
      twin tz = twin_new(bytes, z), tt = twin_new(bytes, t), td = twin_new(bytes, NULL);
      double lw = -1, lg = -2;
      int rw = -1, rg = -2;
      assert_int_equal(xf_k_scalar_loss(cpu_b, (xf_scalar_loss)kind, cpu_f(&tz), cpu_f(&tt), n,
                                        cpu_f(&td), &lw, &rw),
                       XF_OK);
      assert_int_equal(xf_k_scalar_loss(gpu_b, (xf_scalar_loss)kind, gpu_f(&tz), gpu_f(&tt), n,
                                        gpu_f(&td), &lg, &rg),
                       XF_OK);
      char what[64];
      snprintf(what, sizeof(what), "scalar_loss kind=%d n=%d", kind, n);
      if (!(fabs(lg - lw) <= 1e-9 * fabs(lw) + 1e-12))
        fail_msg("%s: loss_sum cpu %.17g, cuda %.17g", what, lw, lg);
      assert_int_equal(rg, rw);
      float *want = host_alloc(bytes), *got = host_alloc(bytes);
      twin_read(&td, want, got);
      double *tol = host_alloc((size_t)n * sizeof(double));
      for (int i = 0; i < n; i++) tol[i] = 4.0 * FLT_EPSILON * (fabs((double)want[i]) + 1.0 / n);
      expect_within(what, want, got, tol, (size_t)n);
      xf_free(tol);
      xf_free(want);
      xf_free(got);
      twin_free(&tz);
      twin_free(&tt);
      twin_free(&td);
      xf_free(z);
      xf_free(t);
    }
  }
}

/* ---- per-example ops and the clipped backward ------------------------------ */

/* Strided-batched GEMM: each product is held to gemm_case's bound; stride 0
 * shares A across the batch, as the conv bias's row of ones does. */
static void gemm_strided_batched_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 21, 0);
  static const int shapes[][5] = {/* m, n, k, batch, share A */
                                  {16, 150, 64, 5, 0}, {6, 25, 576, 3, 0}, {1, 16, 64, 7, 1},
                                  {3, 4, 1, 2, 0}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    const int m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], batch = shapes[s][3];
    const bool share = shapes[s][4];
    /* A_i = dy_i^T as the conv layer uses it: k x m stored, transposed. */
    const long long sa = share ? 0 : (long long)k * m, sb = (long long)k * n;
    const long long sc = (long long)m * n + 3; /* rows of C apart by more than C */
    const size_t na = (size_t)(share ? 1 : batch) * (size_t)k * (size_t)m;
    const size_t nb = (size_t)batch * (size_t)sb, nc = (size_t)batch * (size_t)sc;
    float *a = random_floats(&rng, na, 1.0, 0), *bm = random_floats(&rng, nb, 1.0, 0);
    float *c0 = random_floats(&rng, nc, 1.0, 0);
    twin ta = twin_new(na * sizeof(float), a), tb = twin_new(nb * sizeof(float), bm);
    twin tc = twin_new(nc * sizeof(float), c0);
    xf_k_gemm_strided_batched(cpu_b, true, false, m, n, k, 1.0f, cpu_f(&ta), m, sa, cpu_f(&tb),
                              n, sb, 0.5f, cpu_f(&tc), n, sc, batch);
    xf_k_gemm_strided_batched(gpu_b, true, false, m, n, k, 1.0f, gpu_f(&ta), m, sa, gpu_f(&tb),
                              n, sb, 0.5f, gpu_f(&tc), n, sc, batch);
    assert_int_equal(xf_backend_sync(gpu_b), XF_OK);
    float *want = host_alloc(nc * sizeof(float)), *got = host_alloc(nc * sizeof(float));
    twin_read(&tc, want, got);
    double *tol = host_alloc(nc * sizeof(double));
    for (int bi = 0; bi < batch; bi++) {
      const float *ai = a + bi * sa, *bi_ = bm + bi * sb;
      for (long long j = 0; j < sc; j++) {
        size_t at = (size_t)(bi * sc + j);
        if (j >= (long long)m * n) { /* the gap between products: untouched */
          expect_identical_floats("gemm_strided_batched gap", &c0[at], &got[at], 1);
          tol[at] = INFINITY;
          continue;
        }
        int i = (int)(j / n), col = (int)(j % n);
        double mag = 0;
        for (int p = 0; p < k; p++)
          mag += fabs((double)ai[(size_t)p * m + i]) * fabs((double)bi_[(size_t)p * n + col]);
        tol[at] = 1e-5 * sqrt((double)k + 1.0) * (mag + 0.5 * fabs((double)c0[at]));
      }
    }
    char what[80];
    snprintf(what, sizeof(what), "gemm_strided_batched m=%d n=%d k=%d batch=%d", m, n, k, batch);
    expect_within(what, want, got, tol, nc);
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    twin_free(&ta);
    twin_free(&tb);
    twin_free(&tc);
    xf_free(a);
    xf_free(bm);
    xf_free(c0);
  }
}

/* row_dot sums exact products in double on both sides, in different orders,
 * and rounds once: within 2 float roundings of the result (plus, with
 * accumulate, one more of the sum). clip_factors (double sqrt and division,
 * one rounding), scale_rows and mul_acc (one IEEE operation per step, no
 * FMA) are bit-identical. */
static void per_row_ops_match_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 22, 0);
  static const int shapes[][2] = {{1, 1}, {4, 3}, {64, 784}, {70000, 5}, {3, 51264}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    const int rows = shapes[s][0], cols = shapes[s][1];
    const size_t nx = (size_t)rows * cols, rb = (size_t)rows * sizeof(float);
    float *x = random_floats(&rng, nx, 1.0, 0), *y = random_floats(&rng, nx, 1.0, 0);
    float *start = random_floats(&rng, (size_t)rows, 1.0, 0);
    for (int r = 0; r < rows; r++) start[r] = fabsf(start[r]);
    twin tx = twin_new(nx * sizeof(float), x), ty = twin_new(nx * sizeof(float), y);
    twin tout = twin_new(rb, start), tsq = twin_new(rb, NULL), tf = twin_new(rb, NULL);
    float *want = host_alloc(rb), *got = host_alloc(rb);
    double *tol = host_alloc((size_t)rows * sizeof(double));
    for (int acc = 0; acc < 2; acc++) {
      xf_k_row_dot(cpu_b, cpu_f(&tout), cpu_f(&tx), cpu_f(&ty), rows, cols, acc);
      xf_k_row_dot(gpu_b, gpu_f(&tout), gpu_f(&tx), gpu_f(&ty), rows, cols, acc);
      twin_read(&tout, want, got);
      for (int r = 0; r < rows; r++) tol[r] = 3 * FLT_EPSILON * fabs((double)want[r]) + 1e-30;
      expect_within(acc ? "row_dot accumulate" : "row_dot", want, got, tol, (size_t)rows);
    }
    /* Squared norms from the cpu, shared, so the factors see equal inputs. */
    xf_k_row_dot(cpu_b, cpu_f(&tsq), cpu_f(&tx), cpu_f(&tx), rows, cols, false);
    assert_int_equal(xf_backend_download(cpu_b, want, tsq.on_cpu, rb), XF_OK);
    assert_int_equal(xf_backend_upload(gpu_b, tsq.on_gpu, want, rb), XF_OK);
    const double clip = sqrt((double)cols) * 0.9; /* about half the rows are clipped */
    xf_k_clip_factors(cpu_b, cpu_f(&tf), cpu_f(&tsq), rows, clip);
    xf_k_clip_factors(gpu_b, gpu_f(&tf), gpu_f(&tsq), rows, clip);
    twin_read(&tf, want, got);
    expect_identical_floats("clip_factors", want, got, (size_t)rows);
    xf_k_scale_rows(cpu_b, cpu_f(&tx), cpu_f(&tf), rows, cols);
    xf_k_scale_rows(gpu_b, gpu_f(&tx), gpu_f(&tf), rows, cols);
    xf_k_mul_acc(cpu_b, cpu_f(&ty), cpu_f(&tx), cpu_f(&tx), nx);
    xf_k_mul_acc(gpu_b, gpu_f(&ty), gpu_f(&tx), gpu_f(&tx), nx);
    float *want_x = host_alloc(nx * sizeof(float)), *got_x = host_alloc(nx * sizeof(float));
    twin_read(&tx, want_x, got_x);
    expect_identical_floats("scale_rows", want_x, got_x, nx);
    twin_read(&ty, want_x, got_x);
    expect_identical_floats("mul_acc", want_x, got_x, nx);
    xf_free(want_x);
    xf_free(got_x);
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&tout);
    twin_free(&tsq);
    twin_free(&tf);
    xf_free(x);
    xf_free(y);
    xf_free(start);
  }
}

/* ---- the other layers' ops --------------------------------------------------- */

static const xf_pool_shape avgpool_shapes[] = {
    {1, 1, 1, 1, 1, 1, 0, 0},   {2, 28, 28, 8, 2, 2, 0, 0}, {3, 13, 13, 5, 3, 2, 0, 0},
    {1, 7, 9, 3, 3, 1, 0, 0},   {2, 9, 7, 33, 4, 3, 0, 0},  {1, 10, 10, 2, 2, 3, 0, 0},
};

/* The same float sums in the same window order times the same float
 * 1 / (k k); the backward gathers, per pixel, in the order the cpu scatters:
 * both bit-identical, with overlapping windows (stride < k), gaps between
 * them (stride > k) and leftover rows. The stale dx must be overwritten, and
 * pixels that no window reads must be 0. */
static void avgpool_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 40, 0);
  for (size_t s = 0; s < sizeof(avgpool_shapes) / sizeof(avgpool_shapes[0]); s++) {
    xf_pool_shape sh = avgpool_shapes[s];
    assert_int_equal(xf_pool_shape_finish(&sh), XF_OK);
    const size_t nx = (size_t)sh.n * sh.h * sh.w * sh.c;
    const size_t ny = (size_t)sh.n * sh.oh * sh.ow * sh.c;
    float *x = random_floats(&rng, nx, 1.0, 0), *dy = random_floats(&rng, ny, 1.0, 0);
    twin tx = twin_new(nx * sizeof(float), x), ty = twin_new(ny * sizeof(float), NULL);
    twin tdy = twin_new(ny * sizeof(float), dy);
    twin tdx = twin_new(nx * sizeof(float), x); /* stale: must be cleared */
    xf_k_avgpool_fwd(cpu_b, cpu_f(&tx), &sh, cpu_f(&ty));
    xf_k_avgpool_fwd(gpu_b, gpu_f(&tx), &sh, gpu_f(&ty));
    xf_k_avgpool_bwd(cpu_b, cpu_f(&tdy), &sh, cpu_f(&tdx));
    xf_k_avgpool_bwd(gpu_b, gpu_f(&tdy), &sh, gpu_f(&tdx));
    /* Which pixels some window reads. */
    bool *read = host_alloc(nx * sizeof(bool));
    for (size_t i = 0; i < nx; i++) read[i] = false;
    for (int n = 0; n < sh.n; n++)
      for (int oy = 0; oy < sh.oh; oy++)
        for (int ox = 0; ox < sh.ow; ox++)
          for (int i = 0; i < sh.k; i++)
            for (int j = 0; j < sh.k; j++)
              for (int c = 0; c < sh.c; c++)
                read[(((size_t)n * sh.h + oy * sh.stride + i) * sh.w + ox * sh.stride + j) *
                         sh.c + c] = true;
    float *want = host_alloc(nx * sizeof(float)), *got = host_alloc(nx * sizeof(float));
    char what[96];
    snprintf(what, sizeof(what), "avgpool n=%d h=%d w=%d c=%d k=%d stride=%d", sh.n, sh.h, sh.w,
             sh.c, sh.k, sh.stride);
    twin_read(&ty, want, got);
    expect_identical_floats(what, want, got, ny);
    snprintf(what, sizeof(what), "avgpool_bwd n=%d h=%d w=%d c=%d k=%d stride=%d", sh.n, sh.h,
             sh.w, sh.c, sh.k, sh.stride);
    twin_read(&tdx, want, got);
    expect_identical_floats(what, want, got, nx);
    for (size_t i = 0; i < nx; i++)
      if (!read[i]) assert_true(got[i] == 0.0f);
    xf_free(read);
    xf_free(want);
    xf_free(got);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&tdy);
    twin_free(&tdx);
    xf_free(x);
    xf_free(dy);
  }
}

static const size_t act_sizes[] = {1, 31, 1001, (1u << 20) + 3};

/* The activations' library functions (erf, tanh, exp) differ between CUDA
 * and glibc, and between their float and double forms, by an ulp or two, so
 * the forward is held to 4 FLT_EPSILON of the value, plus for gelu 4
 * FLT_EPSILON of |x| (1 + erf(x / sqrt 2) cancels for negative x, so a
 * last-bit difference in erf is an ulp of 1, times x / 2). gelu's backward,
 * with erf and exp: 4 FLT_EPSILON of the value and of |dy| (1 + |x|). The
 * backward of tanh and sigmoid is the same float formula of y on both
 * sides: bit-identical. dx is written over dy, and tanh and sigmoid run in
 * place, as backend.h allows. */
static void activations_match_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 41, 0);
  static const xf_act acts[] = {XF_ACT_GELU, XF_ACT_TANH, XF_ACT_SIGMOID};
  static const char *const names[] = {"gelu", "tanh", "sigmoid"};
  for (size_t a = 0; a < 3; a++) {
    for (size_t s = 0; s < sizeof(act_sizes) / sizeof(act_sizes[0]); s++) {
      const size_t n = act_sizes[s], bytes = n * sizeof(float);
      const bool gelu = acts[a] == XF_ACT_GELU;
      float *x = random_floats(&rng, n, 3.0, 0), *dy = random_floats(&rng, n, 1.0, 0);
      twin tx = twin_new(bytes, x), ty = twin_new(bytes, x), tdy = twin_new(bytes, dy);
      float *want = host_alloc(bytes), *got = host_alloc(bytes);
      double *tol = host_alloc(n * sizeof(double));
      char what[64];
      /* gelu writes y apart from x; tanh and sigmoid in place (ty holds x). */
      const float *xin_c = gelu ? cpu_f(&tx) : cpu_f(&ty);
      const float *xin_g = gelu ? gpu_f(&tx) : gpu_f(&ty);
      xf_k_act_fwd(cpu_b, acts[a], cpu_f(&ty), xin_c, n);
      xf_k_act_fwd(gpu_b, acts[a], gpu_f(&ty), xin_g, n);
      twin_read(&ty, want, got);
      for (size_t i = 0; i < n; i++)
        tol[i] = 4 * FLT_EPSILON * (fabs((double)want[i]) + (gelu ? fabs((double)x[i]) : 0)) +
                 FLT_MIN;
      snprintf(what, sizeof(what), "%s_fwd n=%zu", names[a], n);
      expect_within(what, want, got, tol, n);
      /* The backward from the cpu's y on both sides, so only its own
       * arithmetic is compared. */
      assert_int_equal(xf_backend_upload(gpu_b, ty.on_gpu, want, bytes), XF_OK);
      xf_k_act_bwd(cpu_b, acts[a], cpu_f(&tdy), cpu_f(&tdy), cpu_f(&tx), cpu_f(&ty), n);
      xf_k_act_bwd(gpu_b, acts[a], gpu_f(&tdy), gpu_f(&tdy), gpu_f(&tx), gpu_f(&ty), n);
      twin_read(&tdy, want, got);
      snprintf(what, sizeof(what), "%s_bwd n=%zu", names[a], n);
      if (gelu) {
        for (size_t i = 0; i < n; i++)
          tol[i] = 4 * FLT_EPSILON *
                       (fabs((double)want[i]) + fabs((double)dy[i]) * (1 + fabs((double)x[i]))) +
                   FLT_MIN;
        expect_within(what, want, got, tol, n);
      } else {
        expect_identical_floats(what, want, got, n);
      }
      xf_free(tol);
      xf_free(want);
      xf_free(got);
      twin_free(&tx);
      twin_free(&ty);
      twin_free(&tdy);
      xf_free(x);
      xf_free(dy);
    }
  }
}

/* One IEEE multiplication per element, also with y aliasing u: identical. */
static void mul_is_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 42, 0);
  for (size_t s = 0; s < sizeof(act_sizes) / sizeof(act_sizes[0]); s++) {
    const size_t n = act_sizes[s], bytes = n * sizeof(float);
    float *u = random_floats(&rng, n, 1e3, 0), *v = random_floats(&rng, n, 1e-3, 0);
    twin tu = twin_new(bytes, u), tv = twin_new(bytes, v), ty = twin_new(bytes, NULL);
    float *want = host_alloc(bytes), *got = host_alloc(bytes);
    xf_k_mul(cpu_b, cpu_f(&ty), cpu_f(&tu), cpu_f(&tv), n);
    xf_k_mul(gpu_b, gpu_f(&ty), gpu_f(&tu), gpu_f(&tv), n);
    twin_read(&ty, want, got);
    expect_identical_floats("mul", want, got, n);
    xf_k_mul(cpu_b, cpu_f(&tu), cpu_f(&tu), cpu_f(&ty), n);
    xf_k_mul(gpu_b, gpu_f(&tu), gpu_f(&tu), gpu_f(&ty), n);
    twin_read(&tu, want, got);
    expect_identical_floats("mul in place", want, got, n);
    xf_free(want);
    xf_free(got);
    twin_free(&tu);
    twin_free(&tv);
    twin_free(&ty);
    xf_free(u);
    xf_free(v);
  }
}

/* Mask value i by backend.h's text: its splitmix64 draw, and the kept value
 * 1 / (1 - rate) in float. */
static float dropout_reference(size_t i, float rate, uint64_t seed) {
  uint64_t z = seed + ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull;
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  const uint64_t threshold = (uint64_t)((double)rate * 4294967296.0);
  return (z >> 32) < threshold ? 0.0f : 1.0f / (1.0f - rate);
}

/* The mask is integer hashing of the index: bit-identical on both backends,
 * and equal to backend.h's formula; the share dropped is the rate (within 5
 * standard deviations of a binomial on the largest size). */
static void dropout_mask_is_identical_to_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  static const float rates[] = {0.0f, 0.1f, 0.5f, 0.9f, 0.999f};
  static const uint64_t seeds[] = {0, 0x0123456789ABCDEFull, UINT64_MAX};
  for (size_t s = 0; s < sizeof(act_sizes) / sizeof(act_sizes[0]); s++) {
    const size_t n = act_sizes[s], bytes = n * sizeof(float);
    twin tm = twin_new(bytes, NULL);
    float *want = host_alloc(bytes), *got = host_alloc(bytes);
    for (size_t r = 0; r < sizeof(rates) / sizeof(rates[0]); r++) {
      for (size_t k = 0; k < sizeof(seeds) / sizeof(seeds[0]); k++) {
        xf_k_dropout_mask(cpu_b, cpu_f(&tm), n, rates[r], seeds[k]);
        xf_k_dropout_mask(gpu_b, gpu_f(&tm), n, rates[r], seeds[k]);
        twin_read(&tm, want, got);
        char what[80];
        snprintf(what, sizeof(what), "dropout_mask n=%zu rate=%g seed=%#llx", n,
                 (double)rates[r], (unsigned long long)seeds[k]);
        expect_identical_floats(what, want, got, n);
        size_t dropped = 0;
        for (size_t i = 0; i < n; i++) {
          float ref = dropout_reference(i, rates[r], seeds[k]);
          if (memcmp(&ref, &got[i], sizeof(float)) != 0)
            fail_msg("%s[%zu]: cuda %.9g, backend.h's formula %.9g", what, i, (double)got[i],
                     (double)ref);
          dropped += got[i] == 0.0f;
        }
        if (n > 1000000) {
          const double p = rates[r], sd = sqrt((double)n * p * (1 - p));
          assert_true(fabs((double)dropped - (double)n * p) <= 5 * sd + 1);
        }
      }
    }
    xf_free(want);
    xf_free(got);
    twin_free(&tm);
  }
}

/* rows x cols: one value, odd widths, more rows than a grid's 65535 blocks. */
static const int softmax_shapes[][2] = {{1, 1}, {3, 7}, {33, 10}, {257, 1001}, {70001, 3}};

/* Forward: exp of (x - max) over the row's sum; the exps (CUDA's against
 * glibc's, float or double) and the sum's order differ, so each value is held
 * to (8 + sqrt(cols)) FLT_EPSILON of itself. Backward: y (dy - <dy, y>),
 * where the difference cancels: the same factor times y (|dy| + sum |dy y|).
 * The backward runs from the cpu's y on both sides and writes over dy. */
static void softmax_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 43, 0);
  for (size_t s = 0; s < sizeof(softmax_shapes) / sizeof(softmax_shapes[0]); s++) {
    const int rows = softmax_shapes[s][0], cols = softmax_shapes[s][1];
    const size_t n = (size_t)rows * cols, bytes = n * sizeof(float);
    float *x = random_floats(&rng, n, 4.0, 0), *dy = random_floats(&rng, n, 1.0, 0);
    twin tx = twin_new(bytes, x), ty = twin_new(bytes, NULL), tdy = twin_new(bytes, dy);
    float *want = host_alloc(bytes), *got = host_alloc(bytes), *y = host_alloc(bytes);
    double *tol = host_alloc(n * sizeof(double));
    const double factor = (8 + sqrt((double)cols)) * FLT_EPSILON;
    char what[64];
    xf_k_softmax_fwd(cpu_b, cpu_f(&ty), cpu_f(&tx), rows, cols);
    xf_k_softmax_fwd(gpu_b, gpu_f(&ty), gpu_f(&tx), rows, cols);
    twin_read(&ty, y, got);
    for (size_t i = 0; i < n; i++) tol[i] = factor * fabs((double)y[i]) + FLT_MIN;
    snprintf(what, sizeof(what), "softmax_fwd rows=%d cols=%d", rows, cols);
    expect_within(what, y, got, tol, n);
    assert_int_equal(xf_backend_upload(gpu_b, ty.on_gpu, y, bytes), XF_OK);
    xf_k_softmax_bwd(cpu_b, cpu_f(&tdy), cpu_f(&tdy), cpu_f(&ty), rows, cols);
    xf_k_softmax_bwd(gpu_b, gpu_f(&tdy), gpu_f(&tdy), gpu_f(&ty), rows, cols);
    twin_read(&tdy, want, got);
    for (int r = 0; r < rows; r++) {
      double mag = 0;
      for (int c = 0; c < cols; c++) {
        size_t at = (size_t)r * cols + c;
        mag += fabs((double)dy[at] * y[at]);
      }
      for (int c = 0; c < cols; c++) {
        size_t at = (size_t)r * cols + c;
        tol[at] = factor * fabs((double)y[at]) * (fabs((double)dy[at]) + mag) + FLT_MIN;
      }
    }
    snprintf(what, sizeof(what), "softmax_bwd rows=%d cols=%d", rows, cols);
    expect_within(what, want, got, tol, n);
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    xf_free(y);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&tdy);
    xf_free(x);
    xf_free(dy);
  }
}

/* n, p, c, groups: one value, layernorm's shape (p = 1, groups = 1) with
 * odd widths, groupnorm on images, one channel per group, and more
 * (record, group) pairs than a grid's 65535 blocks. */
static const xf_norm_shape norm_shapes[] = {
    {1, 1, 1, 1, XF_NORM_EPS},  {7, 1, 33, 1, XF_NORM_EPS}, {3, 13, 12, 4, XF_NORM_EPS},
    {2, 49, 30, 3, XF_NORM_EPS}, {5, 3, 8, 8, XF_NORM_EPS}, {66001, 1, 5, 1, XF_NORM_EPS},
};

/* Mean and variance are summed in double on both sides, in different
 * orders: far below float rounding. xhat = (x - mean) rstd may round the
 * difference in float and use the float rstd: 4 FLT_EPSILON of |xhat| and of
 * |x| rstd. rstd: 4 FLT_EPSILON of itself. y = xhat gamma + beta: gamma times
 * xhat's tolerance plus 4 FLT_EPSILON of |xhat gamma| + |beta|. Backward,
 * from the cpu's xhat and rstd on both sides: rstd (g - mean(g) - xhat
 * mean(g xhat)) cancels, so 8 FLT_EPSILON of rstd (|g| + mean |g| + |xhat|
 * mean |g xhat|). The inputs sit around 3 so that the mean matters. */
static void norm_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 44, 0);
  for (size_t s = 0; s < sizeof(norm_shapes) / sizeof(norm_shapes[0]); s++) {
    const xf_norm_shape sh = norm_shapes[s];
    const size_t n = (size_t)sh.n * sh.p * sh.c, bytes = n * sizeof(float);
    const size_t units = (size_t)sh.n * sh.groups, cg = (size_t)(sh.c / sh.groups);
    const size_t m = (size_t)sh.p * cg;
    float *x = random_floats(&rng, n, 2.0, 0), *dy = random_floats(&rng, n, 1.0, 0);
    for (size_t i = 0; i < n; i++) x[i] += 3.0f;
    float *gamma = random_floats(&rng, (size_t)sh.c, 1.0, 0);
    float *beta = random_floats(&rng, (size_t)sh.c, 1.0, 0);
    twin tx = twin_new(bytes, x), ty = twin_new(bytes, NULL), th = twin_new(bytes, NULL);
    twin trs = twin_new(units * sizeof(float), NULL), tdy = twin_new(bytes, dy);
    twin tdx = twin_new(bytes, x); /* stale: must be overwritten */
    twin tg = twin_new((size_t)sh.c * sizeof(float), gamma);
    twin tb = twin_new((size_t)sh.c * sizeof(float), beta);
    xf_k_norm_fwd(cpu_b, &sh, cpu_f(&tx), cpu_f(&tg), cpu_f(&tb), cpu_f(&ty), cpu_f(&th),
                  cpu_f(&trs));
    xf_k_norm_fwd(gpu_b, &sh, gpu_f(&tx), gpu_f(&tg), gpu_f(&tb), gpu_f(&ty), gpu_f(&th),
                  gpu_f(&trs));
    float *want = host_alloc(bytes), *got = host_alloc(bytes), *xhat = host_alloc(bytes);
    float *rs_want = host_alloc(units * sizeof(float)), *rs_got = host_alloc(units * sizeof(float));
    double *tol = host_alloc(n * sizeof(double)), *tol_rs = host_alloc(units * sizeof(double));
    char what[96];
    snprintf(what, sizeof(what), "norm n=%d p=%d c=%d groups=%d", sh.n, sh.p, sh.c, sh.groups);
    twin_read(&trs, rs_want, rs_got);
    for (size_t u = 0; u < units; u++) tol_rs[u] = 4 * FLT_EPSILON * fabs((double)rs_want[u]);
    expect_within(what, rs_want, rs_got, tol_rs, units);
    twin_read(&th, xhat, got);
    /* Element j of (r, g): positions outer, the group's channels inner. */
    for (size_t u = 0; u < units; u++) {
      const size_t r = u / (size_t)sh.groups, g = u % (size_t)sh.groups;
      for (size_t j = 0; j < m; j++) {
        size_t at = (r * sh.p + j / cg) * sh.c + g * cg + j % cg;
        tol[at] = 4 * FLT_EPSILON * (fabs((double)xhat[at]) + fabs((double)x[at]) * rs_want[u]);
      }
    }
    expect_within(what, xhat, got, tol, n);
    twin_read(&ty, want, got);
    for (size_t i = 0; i < n; i++) {
      const size_t ch = i % (size_t)sh.c;
      tol[i] = fabs((double)gamma[ch]) * tol[i] +
               4 * FLT_EPSILON * (fabs((double)xhat[i] * gamma[ch]) + fabs((double)beta[ch]));
    }
    expect_within(what, want, got, tol, n);

    assert_int_equal(xf_backend_upload(gpu_b, th.on_gpu, xhat, bytes), XF_OK);
    assert_int_equal(xf_backend_upload(gpu_b, trs.on_gpu, rs_want, units * sizeof(float)),
                     XF_OK);
    xf_k_norm_bwd(cpu_b, &sh, cpu_f(&tdy), cpu_f(&th), cpu_f(&trs), cpu_f(&tg), cpu_f(&tdx));
    xf_k_norm_bwd(gpu_b, &sh, gpu_f(&tdy), gpu_f(&th), gpu_f(&trs), gpu_f(&tg), gpu_f(&tdx));
    twin_read(&tdx, want, got);
    for (size_t u = 0; u < units; u++) {
      const size_t r = u / (size_t)sh.groups, g = u % (size_t)sh.groups;
      double sum_g = 0, sum_gx = 0;
      for (size_t j = 0; j < m; j++) {
        size_t at = (r * sh.p + j / cg) * sh.c + g * cg + j % cg;
        double gv = fabs((double)dy[at] * gamma[g * cg + j % cg]);
        sum_g += gv;
        sum_gx += gv * fabs((double)xhat[at]);
      }
      for (size_t j = 0; j < m; j++) {
        size_t at = (r * sh.p + j / cg) * sh.c + g * cg + j % cg;
        double gv = fabs((double)dy[at] * gamma[g * cg + j % cg]);
        tol[at] = 8 * FLT_EPSILON * rs_want[u] *
                      (gv + sum_g / (double)m + fabs((double)xhat[at]) * sum_gx / (double)m) +
                  FLT_MIN;
      }
    }
    snprintf(what, sizeof(what), "norm_bwd n=%d p=%d c=%d groups=%d", sh.n, sh.p, sh.c,
             sh.groups);
    expect_within(what, want, got, tol, n);
    xf_free(tol);
    xf_free(tol_rs);
    xf_free(want);
    xf_free(got);
    xf_free(xhat);
    xf_free(rs_want);
    xf_free(rs_got);
    twin_free(&tx);
    twin_free(&ty);
    twin_free(&th);
    twin_free(&trs);
    twin_free(&tdy);
    twin_free(&tdx);
    twin_free(&tg);
    twin_free(&tb);
    xf_free(x);
    xf_free(dy);
    xf_free(gamma);
    xf_free(beta);
  }
}

/* n records, f ids each, dim, vocab: one id, odd sizes, a vocabulary far
 * smaller than the ids (many repeats), and one larger (few). */
static const int embedding_shapes[][4] = {
    {1, 1, 1, 1}, {3, 7, 5, 4}, {4, 33, 16, 9}, {2, 301, 3, 1000}, {5, 11, 129, 2}};

/* Forward is a copy: identical. Backward adds the dy rows that share an id,
 * with atomics on cuda: within (count - 1) FLT_EPSILON of the sum of their
 * |dy|, on a cleared table (beta 0, over stale values) and added to one (beta
 * 1). sqnorm: sums of exact double products in another order, rounded once
 * to float: FLT_EPSILON of the sum of |products| and of the value, with and
 * without accumulate. */
static void embedding_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 45, 0);
  for (size_t s = 0; s < sizeof(embedding_shapes) / sizeof(embedding_shapes[0]); s++) {
    const int n = embedding_shapes[s][0], f = embedding_shapes[s][1];
    const int dim = embedding_shapes[s][2], vocab = embedding_shapes[s][3];
    const int rows = n * f;
    const size_t ny = (size_t)rows * dim, nt = (size_t)vocab * dim;
    float *ids = host_alloc((size_t)rows * sizeof(float));
    for (int r = 0; r < rows; r++) ids[r] = (float)xf_rng_below(&rng, (uint64_t)vocab);
    float *table = random_floats(&rng, nt, 1.0, 0), *dy = random_floats(&rng, ny, 1.0, 0);
    float *start = random_floats(&rng, (size_t)n, 1.0, 0);
    twin tid = twin_new((size_t)rows * sizeof(float), ids), tt = twin_new(nt * sizeof(float), table);
    twin ty = twin_new(ny * sizeof(float), NULL), tdy = twin_new(ny * sizeof(float), dy);
    twin tdt = twin_new(nt * sizeof(float), table); /* stale: beta 0 must clear it */
    twin tout = twin_new((size_t)n * sizeof(float), start);
    char what[96];
    snprintf(what, sizeof(what), "embedding n=%d f=%d dim=%d vocab=%d", n, f, dim, vocab);

    float *want = host_alloc(ny * sizeof(float)), *got = host_alloc(ny * sizeof(float));
    xf_k_embedding_fwd(cpu_b, cpu_f(&tid), cpu_f(&tt), rows, dim, cpu_f(&ty));
    xf_k_embedding_fwd(gpu_b, gpu_f(&tid), gpu_f(&tt), rows, dim, gpu_f(&ty));
    twin_read(&ty, want, got);
    expect_identical_floats(what, want, got, ny);
    xf_free(want);
    xf_free(got);

    /* Per table row: how many ids hit it; per entry: the sum of |dy| fed. */
    int *hits = host_alloc((size_t)vocab * sizeof(int));
    double *mag = host_alloc(nt * sizeof(double)), *tol = host_alloc(nt * sizeof(double));
    for (int v = 0; v < vocab; v++) hits[v] = 0;
    for (size_t i = 0; i < nt; i++) mag[i] = 0;
    for (int r = 0; r < rows; r++) {
      const size_t id = (size_t)ids[r];
      hits[id]++;
      for (int d = 0; d < dim; d++) mag[id * dim + d] += fabs((double)dy[(size_t)r * dim + d]);
    }
    want = host_alloc(nt * sizeof(float));
    got = host_alloc(nt * sizeof(float));
    for (int beta = 0; beta < 2; beta++) {
      xf_k_embedding_bwd(cpu_b, cpu_f(&tid), cpu_f(&tdy), rows, dim, vocab, (float)beta,
                         cpu_f(&tdt));
      xf_k_embedding_bwd(gpu_b, gpu_f(&tid), gpu_f(&tdy), rows, dim, vocab, (float)beta,
                         gpu_f(&tdt));
      twin_read(&tdt, want, got);
      /* beta 1 adds to the beta 0 result: one more term per entry hit. */
      for (size_t i = 0; i < nt; i++) {
        const int count = hits[i / (size_t)dim] * (beta + 1);
        tol[i] = (count > 1 ? count - 1 : 0) * FLT_EPSILON * mag[i] * (beta + 1);
      }
      snprintf(what, sizeof(what), "embedding_bwd n=%d f=%d dim=%d vocab=%d beta=%d", n, f, dim,
               vocab, beta);
      expect_within(what, want, got, tol, nt);
    }
    xf_free(want);
    xf_free(got);

    want = host_alloc((size_t)n * sizeof(float));
    got = host_alloc((size_t)n * sizeof(float));
    double *row_tol = host_alloc((size_t)n * sizeof(double));
    double *abs_sum = host_alloc((size_t)n * sizeof(double));
    for (int r = 0; r < n; r++) {
      double t = 0;
      for (int a = 0; a < f; a++)
        for (int b = 0; b < f; b++) {
          if (ids[r * f + a] != ids[r * f + b]) continue;
          for (int d = 0; d < dim; d++)
            t += fabs((double)dy[((size_t)r * f + a) * dim + d] *
                      dy[((size_t)r * f + b) * dim + d]);
        }
      abs_sum[r] = t;
    }
    for (int acc = 0; acc < 2; acc++) {
      xf_k_embedding_sqnorm(cpu_b, cpu_f(&tout), cpu_f(&tid), cpu_f(&tdy), n, f, dim, acc);
      xf_k_embedding_sqnorm(gpu_b, gpu_f(&tout), gpu_f(&tid), gpu_f(&tdy), n, f, dim, acc);
      twin_read(&tout, want, got);
      for (int r = 0; r < n; r++)
        row_tol[r] = FLT_EPSILON * (abs_sum[r] * (acc + 1) + fabs((double)want[r])) + FLT_MIN;
      snprintf(what, sizeof(what), "embedding_sqnorm n=%d f=%d dim=%d vocab=%d accumulate=%d",
               n, f, dim, vocab, acc);
      expect_within(what, want, got, row_tol, (size_t)n);
    }
    xf_free(row_tol);
    xf_free(abs_sum);
    xf_free(want);
    xf_free(got);
    xf_free(hits);
    xf_free(mag);
    xf_free(tol);
    twin_free(&tid);
    twin_free(&tt);
    twin_free(&ty);
    twin_free(&tdy);
    twin_free(&tdt);
    twin_free(&tout);
    xf_free(ids);
    xf_free(table);
    xf_free(dy);
    xf_free(start);
  }
}

/* The models the net-level tests train on 28x28x1 images: an mlp, both
 * cnn presets, and a declared model no preset is (strided and padded
 * convolutions, an overlapping pool). */
static const xf_model_spec net_specs[] = {
    {.arch = XF_ARCH_MLP, .hidden = {200, 200}, .n_hidden = 2, .in_h = 28, .in_w = 28,
     .in_c = 1, .classes = 10},
    {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5, .in_h = 28, .in_w = 28, .in_c = 1,
     .classes = 10},
    {.arch = XF_ARCH_CNN, .preset = XF_CNN_FEDAVG, .in_h = 28, .in_w = 28, .in_c = 1,
     .classes = 10},
    {.arch = XF_ARCH_LAYERS, .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10, .n_layers = 9,
     .layers = {{.kind = XF_DECL_CONV2D, .filters = 16, .kernel = 5, .stride = 2, .padding = 2},
                {.kind = XF_DECL_RELU},
                {.kind = XF_DECL_CONV2D, .filters = 32, .kernel = 3, .stride = 1, .padding = 1},
                {.kind = XF_DECL_RELU},
                {.kind = XF_DECL_MAXPOOL2D, .kernel = 3, .stride = 2},
                {.kind = XF_DECL_FLATTEN},
                {.kind = XF_DECL_DENSE, .units = 64},
                {.kind = XF_DECL_RELU},
                {.kind = XF_DECL_DENSE, .units = 10}}},
};

/* xf_net_run_clipped on both backends from the same parameters and batch,
 * at a clip below every example's norm and one above. The tolerance,
 * 1e-3 of a coordinate plus 1e-4 of the largest, allows the GEMM rounding
 * differences to grow through the layers (and a rare ReLU whose input sits
 * within rounding of 0); a wrong clip factor moves whole examples' shares,
 * tens of percent of a coordinate. */
static void clipped_gradient_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 23, 0);
  for (size_t s = 0; s < sizeof(net_specs) / sizeof(net_specs[0]); s++) {
    xf_model *m;
    assert_int_equal(xf_model_create(&net_specs[s], &m, NULL), XF_OK);
    const int n = 16;
    xf_net *on_cpu, *on_gpu;
    assert_int_equal(xf_net_create(cpu_b, m, n, &on_cpu, NULL), XF_OK);
    assert_int_equal(xf_net_create(gpu_b, m, n, &on_gpu, NULL), XF_OK);
    const size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
    float *p = host_alloc(P * sizeof(float));
    xf_model_init_params(m, 7, p);
    assert_int_equal(xf_net_set_params(on_cpu, p), XF_OK);
    assert_int_equal(xf_net_set_params(on_gpu, p), XF_OK);
    float *x = random_floats(&rng, (size_t)n * in, 1.0, 0);
    int32_t y[16];
    for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
    float *want = host_alloc(P * sizeof(float)), *got = host_alloc(P * sizeof(float));
    double *tol = host_alloc(P * sizeof(double));
    static const double clips[] = {1e-3, 1e3};
    for (size_t c = 0; c < 2; c++) {
      double lw, lg;
      int cw, cg;
      assert_int_equal(xf_net_run_clipped(on_cpu, x, y, n, clips[c], false, &lw, &cw), XF_OK);
      assert_int_equal(xf_net_run_clipped(on_gpu, x, y, n, clips[c], false, &lg, &cg), XF_OK);
      assert_int_equal(xf_net_get_grads(on_cpu, want), XF_OK);
      assert_int_equal(xf_net_get_grads(on_gpu, got), XF_OK);
      assert_int_equal(cw, cg);
      assert_true(fabs(lw - lg) <= 1e-5 * fabs(lw));
      double biggest = 0;
      for (size_t j = 0; j < P; j++) biggest = fmax(biggest, fabs((double)want[j]));
      for (size_t j = 0; j < P; j++) tol[j] = 1e-3 * fabs((double)want[j]) + 1e-4 * biggest;
      char what[80];
      snprintf(what, sizeof(what), "clipped gradient %s clip %g", xf_model_describe(m), clips[c]);
      expect_within(what, want, got, tol, P);
    }
    xf_free(tol);
    xf_free(want);
    xf_free(got);
    xf_free(x);
    xf_free(p);
    xf_net_free(on_gpu);
    xf_net_free(on_cpu);
    xf_model_free(m);
  }
}

/* Three plain training steps (forward, backward of the mean loss, SGD with
 * momentum) of every model from the same parameters and batch: the cuda and
 * cpu nets classify the batch alike, their losses agree to float rounding,
 * and the update each made (parameters after minus before) agrees to 1e-3 in
 * relative L2 norm, as float32 arithmetic in two summation orders does. Not
 * element by element: a ReLU or max-pool tie that rounding tips the other way
 * moves a few parameters of fedavg-cnn by 1e-3 of their size (seen on an
 * H100); a wrong op moves the whole update by far more. */
static void training_steps_match_cpu_for_every_model(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 29, 0);
  for (size_t s = 0; s < sizeof(net_specs) / sizeof(net_specs[0]); s++) {
    const int n = 32;
    if (net_specs[s].arch == XF_ARCH_CNN && net_specs[s].preset == XF_CNN_FEDAVG) {
      /* fedavg-cnn's step is checked op by op, with its decisions counted,
       * by fedavg_cnn_step_ops_at_the_training_tests_data on this very
       * batch: one winner of its second max pool lies within rounding of a
       * tie, and that one flipped term moves its conv gradients by 1%. Its
       * batch is still drawn, so the models after it see the same data. */
      xf_free(random_floats(&rng, (size_t)n * 28 * 28, 1.0, 0));
      for (int i = 0; i < n; i++) (void)xf_rng_below(&rng, 10);
      continue;
    }
    xf_model *m;
    assert_int_equal(xf_model_create(&net_specs[s], &m, NULL), XF_OK);
    xf_net *on_cpu, *on_gpu;
    assert_int_equal(xf_net_create(cpu_b, m, n, &on_cpu, NULL), XF_OK);
    assert_int_equal(xf_net_create(gpu_b, m, n, &on_gpu, NULL), XF_OK);
    const size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
    float *p = host_alloc(P * sizeof(float));
    xf_model_init_params(m, 11, p);
    assert_int_equal(xf_net_set_params(on_cpu, p), XF_OK);
    assert_int_equal(xf_net_set_params(on_gpu, p), XF_OK);
    float *x = random_floats(&rng, (size_t)n * in, 1.0, 0);
    int32_t y[32];
    for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
    const xf_sgd_params sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f};
    float *want = host_alloc(P * sizeof(float)), *got = host_alloc(P * sizeof(float));
    for (int step = 0; step < 3; step++) {
      double lw, lg;
      int cw, cg;
      assert_int_equal(xf_net_run(on_cpu, x, y, n, true, &lw, &cw), XF_OK);
      assert_int_equal(xf_net_run(on_gpu, x, y, n, true, &lg, &cg), XF_OK);
      assert_int_equal(cw, cg);
      assert_true(fabs(lw - lg) <= 1e-5 * fabs(lw));
      if (step == 0) { /* the first gradient, layer by layer, from equal parameters */
        assert_int_equal(xf_net_get_grads(on_cpu, want), XF_OK);
        assert_int_equal(xf_net_get_grads(on_gpu, got), XF_OK);
        double worst = 0;
        for (int l = 0; l < xf_model_num_layers(m); l++) {
          const xf_layer *ly = xf_model_layer(m, l);
          const size_t off[2] = {ly->weight_offset, ly->bias_offset};
          const size_t cnt[2] = {ly->weight_count, ly->bias_count};
          for (int part = 0; part < 2; part++) {
            double norm = 0, diff = 0;
            for (size_t j = off[part]; j < off[part] + cnt[part]; j++) {
              double d = (double)got[j] - (double)want[j];
              norm += (double)want[j] * want[j];
              diff += d * d;
            }
            if (cnt[part] == 0) continue;
            const double rel = norm > 0 ? sqrt(diff / norm) : sqrt(diff);
            if (rel > 1e-5)
              print_message("%s layer %d %s gradient: apart by %.2e of its norm\n",
                            xf_model_describe(m), l, part ? "bias" : "weight", rel);
            worst = fmax(worst, rel);
          }
        }
        assert_true(worst <= 1e-4);
      }
      xf_net_sgd_step(on_cpu, &sgd);
      xf_net_sgd_step(on_gpu, &sgd);
    }
    assert_int_equal(xf_net_get_params(on_cpu, want), XF_OK);
    assert_int_equal(xf_net_get_params(on_gpu, got), XF_OK);
    double moved = 0, apart = 0;
    for (size_t j = 0; j < P; j++) {
      double d = (double)want[j] - (double)p[j], e = (double)got[j] - (double)want[j];
      moved += d * d;
      apart += e * e;
    }
    const double rel = sqrt(apart) / sqrt(moved);
    print_message("%s: update apart by %.2e of its norm\n", xf_model_describe(m), rel);
    assert_true(moved > 0);
    assert_true(rel <= 1e-3);
    xf_free(want);
    xf_free(got);
    xf_free(x);
    xf_free(p);
    xf_net_free(on_gpu);
    xf_net_free(on_cpu);
    xf_model_free(m);
  }
}

/* ---- fedavg-cnn's step, op by op, at batch 64 ------------------------------ */

/* Every tensor of one fedavg-cnn training step (forward, mean softmax
 * cross-entropy, backward), each written by exactly one stage. The step runs
 * four times: on the cpu; on cuda from the same inputs all the way through
 * ("propagated": rounding differences travel down the layers); on cuda with
 * each stage fed the cpu's values of its inputs ("isolated": the op alone,
 * at this exact shape); and propagated on cuda but with the cpu's decisions
 * in the backward ("steered"). Isolated, every op must match the cpu to
 * float rounding and every decision (a ReLU's sign, a max pool's winner)
 * must be the same; steered, the whole step must match to 1e-5. Propagated,
 * a decision whose inputs lie within rounding of a tie may tip, and one
 * tipped winner sends a whole term down another path: the table printed
 * says which tensor moved and by how much. */
enum {
  FC_X, FC_Y, FC_W1, FC_B1, FC_W2, FC_B2, FC_W3, FC_B3, FC_W4, FC_B4, /* inputs */
  FC_COL1, FC_Z1, FC_A1, FC_P1, FC_ARG1, FC_COL2, FC_Z2, FC_A2, FC_P2, FC_ARG2,
  FC_H, FC_HA, FC_L, FC_DL, FC_DW4, FC_DB4, FC_DHA, FC_DH, FC_DW3, FC_DB3, FC_DP2,
  FC_DA2, FC_DZ2, FC_DW2, FC_DB2, FC_DCOL2, FC_DP1, FC_DA1, FC_DZ1, FC_DW1, FC_DB1,
  FC_TENSORS,
  FC_INPUTS = FC_COL1
};
static const char *const fc_names[FC_TENSORS] = {
    "x", "y", "w1", "b1", "w2", "b2", "w3", "b3", "w4", "b4", "col1", "z1", "a1", "p1",
    "arg1", "col2", "z2", "a2", "p2", "arg2", "h", "ha", "logits", "dlogits", "dw4", "db4",
    "dha", "dh", "dw3", "db3", "dp2", "da2", "dz2", "dw2", "db2", "dcol2", "dp1", "da1",
    "dz1", "dw1", "db1"};

typedef struct fc_step {
  int n, r1, r2; /* the batch, and the output positions of each conv layer */
  xf_conv_shape s1, s2;
  xf_pool_shape q1, q2;
  size_t count[FC_TENSORS]; /* elements: floats, or int32 for y and the argmaxes */
} fc_step;

static fc_step fc_shapes(int n) {
  const size_t FC_N = (size_t)n, FC_R1 = FC_N * 28 * 28, FC_R2 = FC_N * 14 * 14;
  fc_step f = {.n = n, .r1 = (int)FC_R1, .r2 = (int)FC_R2,
               .s1 = {n, 28, 28, 1, 5, 5, 2, 1, 0, 0},
               .s2 = {n, 14, 14, 32, 5, 5, 2, 1, 0, 0},
               .q1 = {n, 28, 28, 32, 2, 2, 0, 0},
               .q2 = {n, 14, 14, 64, 2, 2, 0, 0}};
  assert_int_equal(xf_conv_shape_finish(&f.s1), XF_OK);
  assert_int_equal(xf_conv_shape_finish(&f.s2), XF_OK);
  assert_int_equal(xf_pool_shape_finish(&f.q1), XF_OK);
  assert_int_equal(xf_pool_shape_finish(&f.q2), XF_OK);
  const size_t c[FC_TENSORS] = {
      [FC_X] = FC_N * 784,      [FC_Y] = FC_N,           [FC_W1] = 32 * 25,
      [FC_B1] = 32,             [FC_W2] = 64 * 800,      [FC_B2] = 64,
      [FC_W3] = 512 * 3136,     [FC_B3] = 512,           [FC_W4] = 10 * 512,
      [FC_B4] = 10,             [FC_COL1] = FC_R1 * 25,  [FC_Z1] = FC_R1 * 32,
      [FC_A1] = FC_R1 * 32,     [FC_P1] = FC_R2 * 32,    [FC_ARG1] = FC_R2 * 32,
      [FC_COL2] = FC_R2 * 800,  [FC_Z2] = FC_R2 * 64,    [FC_A2] = FC_R2 * 64,
      [FC_P2] = FC_N * 3136,    [FC_ARG2] = FC_N * 3136, [FC_H] = FC_N * 512,
      [FC_HA] = FC_N * 512,     [FC_L] = FC_N * 10,      [FC_DL] = FC_N * 10,
      [FC_DW4] = 10 * 512,      [FC_DB4] = 10,           [FC_DHA] = FC_N * 512,
      [FC_DH] = FC_N * 512,     [FC_DW3] = 512 * 3136,   [FC_DB3] = 512,
      [FC_DP2] = FC_N * 3136,   [FC_DA2] = FC_R2 * 64,   [FC_DZ2] = FC_R2 * 64,
      [FC_DW2] = 64 * 800,      [FC_DB2] = 64,           [FC_DCOL2] = FC_R2 * 800,
      [FC_DP1] = FC_R2 * 32,    [FC_DA1] = FC_R1 * 32,   [FC_DZ1] = FC_R1 * 32,
      [FC_DW1] = 32 * 25,       [FC_DB1] = 32};
  memcpy(f.count, c, sizeof(c));
  return f;
}

/* The stages, each with the tensors it reads (up to 4, -1 ends the list). */
enum { FC_STAGES = 23 };
static const int fc_reads[FC_STAGES][4] = {
    {FC_X, -1},                    {FC_COL1, FC_W1, FC_B1, -1}, {FC_Z1, -1},
    {FC_A1, -1},                   {FC_P1, -1},                 {FC_COL2, FC_W2, FC_B2, -1},
    {FC_Z2, -1},                   {FC_A2, -1},                 {FC_P2, FC_W3, FC_B3, -1},
    {FC_H, -1},                    {FC_HA, FC_W4, FC_B4, -1},   {FC_L, FC_Y, -1},
    {FC_DL, FC_HA, FC_W4, -1},     {FC_DHA, FC_HA, -1},         {FC_DH, FC_P2, FC_W3, -1},
    {FC_DP2, FC_ARG2, -1},         {FC_DA2, FC_A2, -1},         {FC_DZ2, FC_COL2, -1},
    {FC_DZ2, FC_W2, -1},           {FC_DCOL2, -1},              {FC_DP1, FC_ARG1, -1},
    {FC_DA1, FC_A1, -1},           {FC_DZ1, FC_COL1, -1}};

static void fc_run_stage(xf_backend *b, const fc_step *f, void *const *t, int stage) {
  float *const *v = (float *const *)t;
  const int32_t *arg1 = (const int32_t *)t[FC_ARG1], *arg2 = (const int32_t *)t[FC_ARG2];
  const int FC_N = f->n, FC_R1 = f->r1, FC_R2 = f->r2;
  switch (stage) {
  case 0: xf_k_im2col(b, v[FC_X], &f->s1, v[FC_COL1]); break;
  case 1:
    xf_k_gemm(b, false, true, FC_R1, 32, 25, 1.0f, v[FC_COL1], 25, v[FC_W1], 25, 0.0f, v[FC_Z1],
              32);
    xf_k_bias_add(b, v[FC_Z1], v[FC_B1], FC_R1, 32);
    break;
  case 2: xf_k_relu_fwd(b, v[FC_A1], v[FC_Z1], f->count[FC_Z1]); break;
  case 3: xf_k_maxpool_fwd(b, v[FC_A1], &f->q1, v[FC_P1], (int32_t *)t[FC_ARG1]); break;
  case 4: xf_k_im2col(b, v[FC_P1], &f->s2, v[FC_COL2]); break;
  case 5:
    xf_k_gemm(b, false, true, FC_R2, 64, 800, 1.0f, v[FC_COL2], 800, v[FC_W2], 800, 0.0f,
              v[FC_Z2], 64);
    xf_k_bias_add(b, v[FC_Z2], v[FC_B2], FC_R2, 64);
    break;
  case 6: xf_k_relu_fwd(b, v[FC_A2], v[FC_Z2], f->count[FC_Z2]); break;
  case 7: xf_k_maxpool_fwd(b, v[FC_A2], &f->q2, v[FC_P2], (int32_t *)t[FC_ARG2]); break;
  case 8:
    xf_k_gemm(b, false, true, FC_N, 512, 3136, 1.0f, v[FC_P2], 3136, v[FC_W3], 3136, 0.0f,
              v[FC_H], 512);
    xf_k_bias_add(b, v[FC_H], v[FC_B3], FC_N, 512);
    break;
  case 9: xf_k_relu_fwd(b, v[FC_HA], v[FC_H], f->count[FC_H]); break;
  case 10:
    xf_k_gemm(b, false, true, FC_N, 10, 512, 1.0f, v[FC_HA], 512, v[FC_W4], 512, 0.0f, v[FC_L],
              10);
    xf_k_bias_add(b, v[FC_L], v[FC_B4], FC_N, 10);
    break;
  case 11: {
    double loss;
    int correct;
    assert_int_equal(xf_k_softmax_xent(b, v[FC_L], (const int32_t *)t[FC_Y], FC_N, 10, v[FC_DL],
                                       &loss, &correct),
                     XF_OK);
    break;
  }
  case 12:
    xf_k_gemm(b, true, false, 10, 512, FC_N, 1.0f, v[FC_DL], 10, v[FC_HA], 512, 0.0f, v[FC_DW4],
              512);
    xf_k_bias_grad(b, v[FC_DB4], v[FC_DL], FC_N, 10);
    xf_k_gemm(b, false, false, FC_N, 512, 10, 1.0f, v[FC_DL], 10, v[FC_W4], 512, 0.0f,
              v[FC_DHA], 512);
    break;
  case 13: xf_k_relu_bwd(b, v[FC_DH], v[FC_DHA], v[FC_HA], f->count[FC_H]); break;
  case 14:
    xf_k_gemm(b, true, false, 512, 3136, FC_N, 1.0f, v[FC_DH], 512, v[FC_P2], 3136, 0.0f,
              v[FC_DW3], 3136);
    xf_k_bias_grad(b, v[FC_DB3], v[FC_DH], FC_N, 512);
    xf_k_gemm(b, false, false, FC_N, 3136, 512, 1.0f, v[FC_DH], 512, v[FC_W3], 3136, 0.0f,
              v[FC_DP2], 3136);
    break;
  case 15: xf_k_maxpool_bwd(b, v[FC_DP2], arg2, &f->q2, v[FC_DA2]); break;
  case 16: xf_k_relu_bwd(b, v[FC_DZ2], v[FC_DA2], v[FC_A2], f->count[FC_Z2]); break;
  case 17:
    xf_k_gemm(b, true, false, 64, 800, FC_R2, 1.0f, v[FC_DZ2], 64, v[FC_COL2], 800, 0.0f,
              v[FC_DW2], 800);
    xf_k_bias_grad(b, v[FC_DB2], v[FC_DZ2], FC_R2, 64);
    break;
  case 18:
    xf_k_gemm(b, false, false, FC_R2, 800, 64, 1.0f, v[FC_DZ2], 64, v[FC_W2], 800, 0.0f,
              v[FC_DCOL2], 800);
    break;
  case 19: xf_k_col2im(b, v[FC_DCOL2], &f->s2, v[FC_DP1]); break;
  case 20: xf_k_maxpool_bwd(b, v[FC_DP1], arg1, &f->q1, v[FC_DA1]); break;
  case 21: xf_k_relu_bwd(b, v[FC_DZ1], v[FC_DA1], v[FC_A1], f->count[FC_Z1]); break;
  case 22:
    xf_k_gemm(b, true, false, 32, 25, FC_R1, 1.0f, v[FC_DZ1], 32, v[FC_COL1], 25, 0.0f,
              v[FC_DW1], 25);
    xf_k_bias_grad(b, v[FC_DB1], v[FC_DZ1], FC_R1, 32);
    break;
  }
}

static bool fc_is_int(int t) { return t == FC_Y || t == FC_ARG1 || t == FC_ARG2; }

/* Relative L2 distance of got from want, and how many elements differ in
 * their decision: the sign for a ReLU's output, the winner for an argmax. */
static double fc_apart(int t, const void *want, const void *got, size_t n, size_t *decisions) {
  *decisions = 0;
  if (fc_is_int(t)) {
    const int32_t *a = want, *g = got;
    for (size_t i = 0; i < n; i++) *decisions += a[i] != g[i];
    return *decisions ? 1.0 : 0.0;
  }
  const float *a = want, *g = got;
  double num = 0, den = 0;
  bool relu = t == FC_A1 || t == FC_A2 || t == FC_HA;
  for (size_t i = 0; i < n; i++) {
    double d = (double)g[i] - (double)a[i];
    num += d * d;
    den += (double)a[i] * a[i];
    if (relu) *decisions += (a[i] > 0.0f) != (g[i] > 0.0f);
    if (g[i] != g[i]) return INFINITY; /* NaN never passes */
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* One fedavg-cnn step at batch n on data drawn from data_seed (after skip
 * batches of that size), the four ways; the isolated and steered checks are
 * asserted, the propagated figures returned: the decisions that differ, and
 * the worst relative L2 distance of a parameter gradient. */
static void fc_check(int n, uint64_t data_seed, int skip, size_t *decisions, double *worst_grad) {
  const fc_step f = fc_shapes(n);
  xf_model_spec spec = net_specs[2];
  xf_model *m;
  assert_int_equal(xf_model_create(&spec, &m, NULL), XF_OK);
  float *params = host_alloc(xf_model_num_params(m) * sizeof(float));
  xf_model_init_params(m, 11, params);
  void *host[FC_TENSORS], *c[FC_TENSORS], *g[FC_TENSORS], *iso[FC_TENSORS], *st[FC_TENSORS];
  for (int t = 0; t < FC_TENSORS; t++) {
    size_t bytes = f.count[t] * 4;
    host[t] = host_alloc(bytes);
    assert_int_equal(xf_backend_alloc(cpu_b, bytes, &c[t]), XF_OK);
    assert_int_equal(xf_backend_alloc(gpu_b, bytes, &g[t]), XF_OK);
    assert_int_equal(xf_backend_alloc(gpu_b, bytes, &iso[t]), XF_OK);
    assert_int_equal(xf_backend_alloc(gpu_b, bytes, &st[t]), XF_OK);
  }
  xf_rng rng;
  xf_rng_seed(&rng, data_seed, 0);
  for (int k = 0; k < skip; k++) { /* batches an earlier model of a test drew */
    for (size_t i = 0; i < f.count[FC_X]; i++) (void)xf_rng_normal(&rng);
    for (int i = 0; i < n; i++) (void)xf_rng_below(&rng, 10);
  }
  float *x = host[FC_X];
  for (size_t i = 0; i < f.count[FC_X]; i++) x[i] = (float)xf_rng_normal(&rng);
  int32_t *y = host[FC_Y];
  for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
  static const int layer_of[] = {0, 3, 6, 8}; /* fedavg-cnn's conv, conv, dense, dense */
  for (int k = 0; k < 4; k++) {
    const xf_layer *ly = xf_model_layer(m, layer_of[k]);
    assert_int_equal(ly->weight_count, f.count[FC_W1 + 2 * k]);
    assert_int_equal(ly->bias_count, f.count[FC_B1 + 2 * k]);
    memcpy(host[FC_W1 + 2 * k], params + ly->weight_offset, ly->weight_count * 4);
    memcpy(host[FC_B1 + 2 * k], params + ly->bias_offset, ly->bias_count * 4);
  }
  for (int t = 0; t < FC_INPUTS; t++) {
    assert_int_equal(xf_backend_upload(cpu_b, c[t], host[t], f.count[t] * 4), XF_OK);
    assert_int_equal(xf_backend_upload(gpu_b, g[t], host[t], f.count[t] * 4), XF_OK);
    assert_int_equal(xf_backend_upload(gpu_b, st[t], host[t], f.count[t] * 4), XF_OK);
  }
  for (int s = 0; s < FC_STAGES; s++) fc_run_stage(cpu_b, &f, c, s);
  for (int s = 0; s < FC_STAGES; s++) fc_run_stage(gpu_b, &f, g, s);
  for (int s = 0; s < FC_STAGES; s++) { /* each stage from the cpu's inputs */
    for (int r = 0; r < 4 && fc_reads[s][r] >= 0; r++) {
      int t = fc_reads[s][r];
      assert_int_equal(xf_backend_download(cpu_b, host[t], c[t], f.count[t] * 4), XF_OK);
      assert_int_equal(xf_backend_upload(gpu_b, iso[t], host[t], f.count[t] * 4), XF_OK);
    }
    fc_run_stage(gpu_b, &f, iso, s);
  }
  /* "Steered": propagated on cuda, but the backward takes the cpu's
   * decisions (the winners of both pools, the signs of the three ReLUs), so
   * that a decision rounding tipped cannot move whole terms of a sum. */
  for (int s = 0; s < FC_STAGES; s++) {
    int steer = s == 13 ? FC_HA : s == 15 ? FC_ARG2 : s == 16 ? FC_A2 : s == 20 ? FC_ARG1
                : s == 21 ? FC_A1 : -1;
    if (steer >= 0) {
      assert_int_equal(xf_backend_download(cpu_b, host[steer], c[steer], f.count[steer] * 4),
                       XF_OK);
      assert_int_equal(xf_backend_upload(gpu_b, st[steer], host[steer], f.count[steer] * 4),
                       XF_OK);
    }
    fc_run_stage(gpu_b, &f, st, s);
  }
  assert_int_equal(xf_backend_sync(gpu_b), XF_OK);
  void *got = host_alloc(f.count[FC_W3] > f.count[FC_DCOL2] ? f.count[FC_W3] * 4
                                                             : f.count[FC_DCOL2] * 4);
  double worst_iso = 0;
  size_t iso_decisions = 0;
  *decisions = 0;
  *worst_grad = 0;
  print_message("batch %d, data seed %llu\n", n, (unsigned long long)data_seed);
  double worst_steered = 0;
  print_message("%-8s %12s %10s %12s %10s %12s\n", "tensor", "isolated", "decisions",
                "propagated", "decisions", "steered");
  for (int t = FC_INPUTS; t < FC_TENSORS; t++) {
    size_t cnt = f.count[t], di, dp;
    assert_int_equal(xf_backend_download(cpu_b, host[t], c[t], cnt * 4), XF_OK);
    assert_int_equal(xf_backend_download(gpu_b, got, iso[t], cnt * 4), XF_OK);
    double ai = fc_apart(t, host[t], got, cnt, &di);
    assert_int_equal(xf_backend_download(gpu_b, got, g[t], cnt * 4), XF_OK);
    double ap = fc_apart(t, host[t], got, cnt, &dp);
    size_t ds;
    assert_int_equal(xf_backend_download(gpu_b, got, st[t], cnt * 4), XF_OK);
    double as = fc_apart(t, host[t], got, cnt, &ds);
    print_message("%-8s %12.3e %10zu %12.3e %10zu %12.3e\n", fc_names[t], ai, di, ap, dp, as);
    worst_iso = fmax(worst_iso, ai);
    iso_decisions += di;
    *decisions += dp;
    if (t == FC_DW4 || t == FC_DB4 || t == FC_DW3 || t == FC_DB3 || t == FC_DW2 ||
        t == FC_DB2 || t == FC_DW1 || t == FC_DB1) { /* a parameter gradient */
      *worst_grad = fmax(*worst_grad, ap);
      worst_steered = fmax(worst_steered, as);
    }
  }
  xf_free(got);
  /* The net runs the same ops in the same order on its own buffers: on each
   * backend its gradient must be the chain's, bit for bit, or the net's use
   * of its buffers (not an op) is what differs. */
  float *grads = host_alloc(xf_model_num_params(m) * sizeof(float));
  for (int side = 0; side < 2; side++) {
    xf_backend *b = side ? gpu_b : cpu_b;
    void *const *chain = side ? g : c;
    xf_net *net;
    assert_int_equal(xf_net_create(b, m, n, &net, NULL), XF_OK);
    assert_int_equal(xf_net_set_params(net, params), XF_OK);
    double loss;
    int correct;
    assert_int_equal(xf_net_run(net, x, y, n, true, &loss, &correct), XF_OK);
    assert_int_equal(xf_net_get_grads(net, grads), XF_OK);
    size_t differ = 0;
    for (int k = 0; k < 4; k++) {
      const xf_layer *ly = xf_model_layer(m, layer_of[k]);
      static const int grad_of[4][2] = {{FC_DW1, FC_DB1}, {FC_DW2, FC_DB2}, {FC_DW3, FC_DB3},
                                        {FC_DW4, FC_DB4}};
      const size_t off[2] = {ly->weight_offset, ly->bias_offset};
      double apart[2];
      for (int part = 0; part < 2; part++) { /* weight, bias */
        const int t = grad_of[k][part];
        float *want = host_alloc(f.count[t] * 4);
        assert_int_equal(xf_backend_download(b, want, chain[t], f.count[t] * 4), XF_OK);
        size_t unused;
        apart[part] = fc_apart(t, want, grads + off[part], f.count[t], &unused);
        for (size_t i = 0; i < f.count[t]; i++)
          differ += memcmp(&want[i], grads + off[part] + i, 4) != 0;
        xf_free(want);
      }
      print_message("%s net vs chain, layer %d: weight %.3e, bias %.3e\n", side ? "cuda" : "cpu",
                    layer_of[k], apart[0], apart[1]);
    }
    xf_net_free(net);
    print_message("%s net vs chain: %zu gradient entries differ\n", side ? "cuda" : "cpu", differ);
    assert_int_equal(differ, 0);
  }
  xf_free(grads);
  for (int t = 0; t < FC_TENSORS; t++) {
    xf_backend_free(cpu_b, c[t]);
    xf_backend_free(gpu_b, g[t]);
    xf_backend_free(gpu_b, iso[t]);
    xf_backend_free(gpu_b, st[t]);
    xf_free(host[t]);
  }
  xf_free(params);
  xf_model_free(m);
  print_message("propagated: %zu decisions differ, worst gradient %.3e\n", *decisions,
                *worst_grad);
  print_message("steered: worst gradient %.3e\n", worst_steered);
  assert_int_equal(iso_decisions, 0);
  assert_true(worst_iso <= 1e-5);
  /* The whole step, given the same decisions, to 1e-5; and rounding tips
   * few of them (about one in a million is within rounding of a tie; a
   * wrong op would change thousands). */
  assert_true(worst_steered <= 1e-5);
  assert_true(*decisions <= 8);
}

static void fedavg_cnn_step_ops_match_cpu_at_batch_64(void **state) {
  (void)state;
  REQUIRE_GPU();
  size_t decisions;
  double worst;
  fc_check(64, 31, 0, &decisions, &worst);
}

/* The data of training_steps_match_cpu_for_every_model (batch 32, seed 29
 * after the mlp's and lenet5's batches, parameters from seed 11). */
static void fedavg_cnn_step_ops_at_the_training_tests_data(void **state) {
  (void)state;
  REQUIRE_GPU();
  size_t decisions;
  double worst;
  fc_check(32, 29, 2, &decisions, &worst);
}

/* The one-output losses through a whole net: an mlp trained on bce and on
 * mse with Nesterov SGD takes the same steps on both backends, within the
 * bound training_steps_match_cpu_for_every_model holds the presets to.
 * (Adam's step is checked element by element in adam_step_is_identical_to_cpu;
 * through a net it would magnify the GEMMs' rounding differences on
 * coordinates whose gradient is near 0, by design of its normalization.) */
static void one_output_losses_train_as_on_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_rng rng;
  xf_rng_seed(&rng, 30, 0);
  for (int loss = XF_LOSS_BCE; loss <= XF_LOSS_MSE; loss++) {
    xf_model_spec spec = {.arch = XF_ARCH_MLP, .hidden = {64}, .n_hidden = 1, .in_h = 1,
                          .in_w = 1, .in_c = 20, .classes = 2, .loss = (xf_loss)loss};
    xf_model *m;
    assert_int_equal(xf_model_create(&spec, &m, NULL), XF_OK);
    const int n = 32;
    xf_net *on_cpu, *on_gpu;
    assert_int_equal(xf_net_create(cpu_b, m, n, &on_cpu, NULL), XF_OK);
    assert_int_equal(xf_net_create(gpu_b, m, n, &on_gpu, NULL), XF_OK);
    const size_t P = xf_model_num_params(m);
    float *p = host_alloc(P * sizeof(float));
    xf_model_init_params(m, 12, p);
    assert_int_equal(xf_net_set_params(on_cpu, p), XF_OK);
    assert_int_equal(xf_net_set_params(on_gpu, p), XF_OK);
    float *x = random_floats(&rng, (size_t)n * 20, 1.0, 0);
    int32_t y[32];
    for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, 2);
    const xf_sgd_params sgd = {.lr = 0.05f, .momentum = 0.9f, .nesterov = true};
    for (int step = 0; step < 3; step++) {
      double lw, lg;
      int cw, cg;
      assert_int_equal(xf_net_run(on_cpu, x, y, n, true, &lw, &cw), XF_OK);
      assert_int_equal(xf_net_run(on_gpu, x, y, n, true, &lg, &cg), XF_OK);
      assert_int_equal(cw, cg);
      assert_true(fabs(lw - lg) <= 1e-5 * fabs(lw));
      xf_net_sgd_step(on_cpu, &sgd);
      xf_net_sgd_step(on_gpu, &sgd);
    }
    float *want = host_alloc(P * sizeof(float)), *got = host_alloc(P * sizeof(float));
    assert_int_equal(xf_net_get_params(on_cpu, want), XF_OK);
    assert_int_equal(xf_net_get_params(on_gpu, got), XF_OK);
    double moved = 0, apart = 0;
    for (size_t j = 0; j < P; j++) {
      double d = (double)want[j] - (double)p[j], e = (double)got[j] - (double)want[j];
      moved += d * d;
      apart += e * e;
    }
    assert_true(moved > 0);
    assert_true(sqrt(apart) / sqrt(moved) <= 1e-3);
    xf_free(want);
    xf_free(got);
    xf_free(x);
    xf_free(p);
    xf_net_free(on_gpu);
    xf_net_free(on_cpu);
    xf_model_free(m);
  }
}

/* ---- declared models with the other layer kinds ------------------------------- */

/* Logits (xf_net_logits), the loss, the correct count and the gradient of
 * xf_net_run's backward, then of xf_net_run_clipped at a clip below every
 * example's norm and one above, on both backends from the same parameters
 * and batch. The tolerance is clipped_gradient_matches_cpu's: 1e-3 of a
 * coordinate plus 1e-4 of the largest, for rounding grown through the
 * layers; a wrong op, index or clip moves whole coordinates. With `ids` the
 * inputs are whole numbers below `vocab`, for a model that starts with an
 * embedding. */
static void declared_model_matches_cpu(const xf_model_spec *spec, bool ids, int vocab) {
  xf_rng rng;
  xf_rng_seed(&rng, 50, 0);
  xf_model *m;
  xf_errctx err;
  xf_errctx_clear(&err);
  if (xf_model_create(spec, &m, &err) != XF_OK) fail_msg("model: %s", err.msg);
  const int n = 7, classes = spec->classes;
  xf_net *on_cpu, *on_gpu;
  assert_int_equal(xf_net_create(cpu_b, m, n, &on_cpu, NULL), XF_OK);
  assert_int_equal(xf_net_create(gpu_b, m, n, &on_gpu, NULL), XF_OK);
  const size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
  float *p = host_alloc(P * sizeof(float));
  xf_model_init_params(m, 13, p);
  assert_int_equal(xf_net_set_params(on_cpu, p), XF_OK);
  assert_int_equal(xf_net_set_params(on_gpu, p), XF_OK);
  /* Equal seeds and the same sequence of passes: the same dropout masks. */
  xf_net_seed_dropout(on_cpu, 0x5EEDull);
  xf_net_seed_dropout(on_gpu, 0x5EEDull);
  float *x = random_floats(&rng, (size_t)n * in, 1.0, 0);
  if (ids)
    for (size_t i = 0; i < (size_t)n * in; i++) x[i] = (float)xf_rng_below(&rng, (uint64_t)vocab);
  int32_t y[7];
  for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, (uint64_t)classes);
  const size_t most = P > (size_t)n * classes ? P : (size_t)n * classes;
  float *want = host_alloc(most * sizeof(float)), *got = host_alloc(most * sizeof(float));
  double *tol = host_alloc(most * sizeof(double));
  char what[96];

  assert_int_equal(xf_net_logits(on_cpu, x, n, want), XF_OK);
  assert_int_equal(xf_net_logits(on_gpu, x, n, got), XF_OK);
  const size_t nl = (size_t)n * classes;
  double biggest = 0;
  for (size_t j = 0; j < nl; j++) biggest = fmax(biggest, fabs((double)want[j]));
  for (size_t j = 0; j < nl; j++) tol[j] = 1e-3 * fabs((double)want[j]) + 1e-4 * biggest;
  snprintf(what, sizeof(what), "logits of %s", xf_layer_decl_name(spec->layers[0].kind));
  expect_within(what, want, got, tol, nl);

  /* Pass 0: xf_net_run's backward; 1 and 2: xf_net_run_clipped. */
  static const double clips[] = {0, 1e-3, 1e3};
  for (int pass = 0; pass < 3; pass++) {
    double lw, lg;
    int cw, cg;
    if (pass == 0) {
      assert_int_equal(xf_net_run(on_cpu, x, y, n, true, &lw, &cw), XF_OK);
      assert_int_equal(xf_net_run(on_gpu, x, y, n, true, &lg, &cg), XF_OK);
    } else {
      assert_int_equal(xf_net_run_clipped(on_cpu, x, y, n, clips[pass], false, &lw, &cw), XF_OK);
      assert_int_equal(xf_net_run_clipped(on_gpu, x, y, n, clips[pass], false, &lg, &cg), XF_OK);
    }
    assert_int_equal(cw, cg);
    if (!(fabs(lw - lg) <= 1e-5 * fabs(lw)))
      fail_msg("loss pass %d: cpu %.17g, cuda %.17g", pass, lw, lg);
    assert_int_equal(xf_net_get_grads(on_cpu, want), XF_OK);
    assert_int_equal(xf_net_get_grads(on_gpu, got), XF_OK);
    biggest = 0;
    for (size_t j = 0; j < P; j++) biggest = fmax(biggest, fabs((double)want[j]));
    assert_true(biggest > 0); /* the gradient reaches the parameters */
    for (size_t j = 0; j < P; j++) tol[j] = 1e-3 * fabs((double)want[j]) + 1e-4 * biggest;
    snprintf(what, sizeof(what), "%s gradient, %s", xf_model_describe(m),
             pass == 0 ? "backward" : pass == 1 ? "clipped at 1e-3" : "clipped at 1e3");
    expect_within(what, want, got, tol, P);
  }
  xf_free(tol);
  xf_free(want);
  xf_free(got);
  xf_free(x);
  xf_free(p);
  xf_net_free(on_gpu);
  xf_net_free(on_cpu);
  xf_model_free(m);
}

#define D_DENSE(u) {.kind = XF_DECL_DENSE, .units = (u)}
#define D_CONV(f, k, s, p)                                                                   \
  {.kind = XF_DECL_CONV2D, .filters = (f), .kernel = (k), .stride = (s), .padding = (p)}
#define D_RELU {.kind = XF_DECL_RELU}
#define D_FLAT {.kind = XF_DECL_FLATTEN}

static void avgpool2d_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 9, .in_w = 7, .in_c = 3, .classes = 3, .n_layers = 5,
      .layers = {D_CONV(6, 3, 1, 1), D_RELU, {.kind = XF_DECL_AVGPOOL2D, .kernel = 3, .stride = 2},
                 D_FLAT, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

/* Both nets are seeded alike and go through the same passes, so they draw
 * the same masks (dropout_mask_is_identical_to_cpu), in the backward and in
 * each clipped pass; the logits are dropout-free (evaluation). */
static void dropout_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 1, .in_w = 1, .in_c = 13, .classes = 3, .n_layers = 4,
      .layers = {D_DENSE(17), D_RELU, {.kind = XF_DECL_DROPOUT, .rate = 0.3f}, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

/* On an image (each position's channels) and on flat records. */
static void layernorm_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 5, .in_w = 6, .in_c = 2, .classes = 3, .n_layers = 7,
      .layers = {D_CONV(5, 3, 1, 1), {.kind = XF_DECL_LAYERNORM}, D_RELU, D_DENSE(11),
                 {.kind = XF_DECL_LAYERNORM}, D_RELU, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

static void groupnorm_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 7, .in_w = 5, .in_c = 3, .classes = 3, .n_layers = 5,
      .layers = {D_CONV(12, 3, 1, 1), {.kind = XF_DECL_GROUPNORM, .groups = 4}, D_RELU, D_FLAT,
                 D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

/* Few ids over a small vocabulary, so rows share ids within a record (the
 * per-example norm's cross terms) and across the batch (atomics). */
static void embedding_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 1, .in_w = 1, .in_c = 9, .classes = 3, .n_layers = 3,
      .layers = {{.kind = XF_DECL_EMBEDDING, .vocab = 5, .dim = 7}, D_FLAT, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, true, 5);
}

static void activation_model(xf_layer_decl_kind kind) {
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 1, .in_w = 1, .in_c = 13, .classes = 3, .n_layers = 3,
      .layers = {D_DENSE(17), {.kind = kind}, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

static void gelu_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  activation_model(XF_DECL_GELU);
}

static void tanh_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  activation_model(XF_DECL_TANH);
}

static void sigmoid_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  activation_model(XF_DECL_SIGMOID);
}

/* On flat records, and on each position of an image. */
static void softmax_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  activation_model(XF_DECL_SOFTMAX);
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 5, .in_w = 4, .in_c = 2, .classes = 3, .n_layers = 3,
      .layers = {D_CONV(6, 3, 1, 1), {.kind = XF_DECL_SOFTMAX}, D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

/* A residual block over the input and one over an earlier layer's output. */
static void add_model_matches_cpu(void **state) {
  (void)state;
  REQUIRE_GPU();
  const xf_model_spec spec = {
      .arch = XF_ARCH_LAYERS, .in_h = 6, .in_w = 7, .in_c = 4, .classes = 3, .n_layers = 8,
      .layers = {D_CONV(4, 3, 1, 1), D_RELU, {.kind = XF_DECL_ADD, .from = -1},
                 D_CONV(4, 3, 1, 1), {.kind = XF_DECL_ADD, .from = 1}, D_RELU, D_FLAT,
                 D_DENSE(3)}};
  declared_model_matches_cpu(&spec, false, 0);
}

/* ---- memory, errors and selection ----------------------------------------- */

static void alloc_is_zero_filled_and_absurd_sizes_fail_cleanly(void **state) {
  (void)state;
  REQUIRE_GPU();
  void *p = NULL;
  assert_int_not_equal(xf_backend_alloc(gpu_b, (size_t)1 << 62, &p), XF_OK);
  assert_null(p);
  assert_int_not_equal(xf_backend_alloc(gpu_b, SIZE_MAX, &p), XF_OK);
  assert_null(p);
  /* A failed allocation is not a latched error: the backend keeps working. */
  assert_int_equal(xf_backend_sync(gpu_b), XF_OK);
  const size_t n = 4099;
  float *host = host_alloc(n * sizeof(float));
  assert_int_equal(xf_backend_alloc(gpu_b, n * sizeof(float), &p), XF_OK);
  assert_non_null(p);
  assert_true(((uintptr_t)p & 63u) == 0);
  memset(host, 0xff, n * sizeof(float));
  assert_int_equal(xf_backend_download(gpu_b, host, p, n * sizeof(float)), XF_OK);
  for (size_t i = 0; i < n; i++) assert_true(host[i] == 0.0f && !signbit(host[i]));
  xf_k_fill(gpu_b, p, 3.0f, n);
  assert_int_equal(xf_backend_download(gpu_b, host, p, n * sizeof(float)), XF_OK);
  for (size_t i = 0; i < n; i++) assert_true(host[i] == 3.0f);
  xf_backend_free(gpu_b, p);
  void *empty = NULL;
  assert_int_equal(xf_backend_alloc(gpu_b, 0, &empty), XF_OK);
  assert_non_null(empty);
  xf_backend_free(gpu_b, empty);
  xf_free(host);
}

/* An op that fails on the device side is latched: sync and transfers return
 * it from then on, and closing the failed backend still works. cuBLAS
 * refuses ldc < n (column-major ldc < rows) without touching the device. */
static void failed_op_is_latched_until_close(void **state) {
  (void)state;
  REQUIRE_GPU();
  xf_backend_options opt = {XF_BACKEND_CUDA, 0, 0};
  xf_backend *b = NULL;
  assert_int_equal(xf_backend_open(&opt, &b, NULL), XF_OK);
  void *a = NULL, *c = NULL;
  assert_int_equal(xf_backend_alloc(b, 64 * sizeof(float), &a), XF_OK);
  assert_int_equal(xf_backend_alloc(b, 64 * sizeof(float), &c), XF_OK);
  assert_int_equal(xf_backend_sync(b), XF_OK);
  xf_k_gemm(b, false, false, 8, 8, 8, 1.0f, a, 8, a, 8, 0.0f, c, 7);
  assert_int_equal(xf_backend_sync(b), XF_EBACKEND);
  assert_int_equal(xf_backend_sync(b), XF_EBACKEND);
  float host[4];
  assert_int_equal(xf_backend_download(b, host, c, sizeof(host)), XF_EBACKEND);
  xf_backend_free(b, a);
  xf_backend_free(b, c);
  xf_backend_close(b);
}

static void auto_picks_cuda_when_a_gpu_is_present(void **state) {
  (void)state;
  xf_backend_options opt = {XF_BACKEND_AUTO, 1, 0};
  xf_backend *b = NULL;
  assert_int_equal(xf_backend_open(&opt, &b, NULL), XF_OK);
  if (!gpu_b) {
    /* What this machine can check: AUTO falls back to cpu. */
    assert_int_equal(xf_backend_kind_of(b), XF_BACKEND_CPU);
    xf_backend_close(b);
    REQUIRE_GPU();
  }
  assert_int_equal(xf_backend_kind_of(b), XF_BACKEND_CUDA);
  assert_string_equal(xf_backend_name(b), "cuda");
  assert_int_equal(xf_backend_threads(b), 1); /* the host threads asked for */
  assert_non_null(strstr(xf_backend_describe(b), "SMs"));
  xf_backend_close(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gemm_matches_cpu_for_all_transposes_and_shapes),
      cmocka_unit_test(gemm_matches_cpu_at_the_conv_layer_shapes),
      cmocka_unit_test(gemm_edge_cases_follow_blas),
      cmocka_unit_test(bias_add_is_identical_to_cpu),
      cmocka_unit_test(bias_grad_matches_cpu),
      cmocka_unit_test(elementwise_ops_are_identical_to_cpu),
      cmocka_unit_test(l2norm_matches_cpu),
      cmocka_unit_test(im2col_and_col2im_are_identical_to_cpu),
      cmocka_unit_test(maxpool_matches_cpu_with_ties_and_overlap),
      cmocka_unit_test(softmax_xent_matches_cpu),
      cmocka_unit_test(sgd_step_is_identical_to_cpu),
      cmocka_unit_test(adam_step_is_identical_to_cpu),
      cmocka_unit_test(scalar_loss_matches_cpu),
      cmocka_unit_test(gemm_strided_batched_matches_cpu),
      cmocka_unit_test(per_row_ops_match_cpu),
      cmocka_unit_test(clipped_gradient_matches_cpu),
      cmocka_unit_test(training_steps_match_cpu_for_every_model),
      cmocka_unit_test(fedavg_cnn_step_ops_match_cpu_at_batch_64),
      cmocka_unit_test(fedavg_cnn_step_ops_at_the_training_tests_data),
      cmocka_unit_test(one_output_losses_train_as_on_cpu),
      cmocka_unit_test(avgpool_matches_cpu),
      cmocka_unit_test(activations_match_cpu),
      cmocka_unit_test(mul_is_identical_to_cpu),
      cmocka_unit_test(dropout_mask_is_identical_to_cpu),
      cmocka_unit_test(softmax_matches_cpu),
      cmocka_unit_test(norm_matches_cpu),
      cmocka_unit_test(embedding_matches_cpu),
      cmocka_unit_test(avgpool2d_model_matches_cpu),
      cmocka_unit_test(dropout_model_matches_cpu),
      cmocka_unit_test(layernorm_model_matches_cpu),
      cmocka_unit_test(groupnorm_model_matches_cpu),
      cmocka_unit_test(embedding_model_matches_cpu),
      cmocka_unit_test(gelu_model_matches_cpu),
      cmocka_unit_test(tanh_model_matches_cpu),
      cmocka_unit_test(sigmoid_model_matches_cpu),
      cmocka_unit_test(softmax_model_matches_cpu),
      cmocka_unit_test(add_model_matches_cpu),
      cmocka_unit_test(alloc_is_zero_filled_and_absurd_sizes_fail_cleanly),
      cmocka_unit_test(failed_op_is_latched_until_close),
      cmocka_unit_test(auto_picks_cuda_when_a_gpu_is_present),
  };
  /* XF_TEST_FILTER runs only the tests whose names match (cmocka's pattern,
   * * and ? as wildcards): bench/gpu/run.sh uses it to keep memcheck short. */
  const char *filter = getenv("XF_TEST_FILTER");
  if (filter && *filter) cmocka_set_test_filter(filter);
  return cmocka_run_group_tests(tests, open_backends, close_backends);
}
