/* SPDX-License-Identifier: Apache-2.0 */
/* Tests of the cpu backend ops, the models and the training loop: finite-
 * difference gradient checks for every layer and every model, the optimizer
 * formula, reproducibility, learning on a separable problem, and DP-SGD
 * (per-example clipping against brute force, the noise, the arguments). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "privacy/noise.h"
#include "kernels/backend.h"
#include "kernels/checkpoint.h"
#include "codec/codec.h"
#include "kernels/model.h"
#include "kernels/net.h"
#include "kernels/train.h"

static xf_backend *cpu;

static int setup(void **state) {
  (void)state;
  xf_backend_options opt = {XF_BACKEND_CPU, 1, 0};
  return xf_backend_open(&opt, &cpu, NULL) == XF_OK ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  xf_backend_close(cpu);
  return 0;
}

static float *rand_floats(xf_rng *r, size_t n, float scale) {
  float *v = malloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) v[i] = (float)((2 * xf_rng_uniform(r) - 1) * scale);
  return v;
}

static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}

/* Central differences in float32 have error O(h^2) from curvature plus
 * O(eps * |L| / h) from rounding; with h = 1e-2 and the small objectives here
 * both stay well under 2e-3 absolute, so that (plus 1% relative) is the bound. */
#define FD_H 1e-2f
#define FD_ATOL 2e-3
#define FD_RTOL 1e-2

static void assert_close(double analytic, double numeric, const char *what, size_t i) {
  if (fabs(analytic - numeric) > FD_ATOL + FD_RTOL * fabs(numeric))
    fail_msg("%s[%zu]: analytic %.6f vs finite difference %.6f", what, i, analytic, numeric);
}

/* ---- dense: y = x W^T + b, objective L = <r, y> ---------------------------- */

static double dense_objective(const float *x, const float *w, const float *bias, const float *r,
                              int n, int in, int out, float *y) {
  xf_k_gemm(cpu, false, true, n, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  xf_k_bias_add(cpu, y, bias, n, out);
  return dot(r, y, (size_t)n * out);
}

static void dense_layer_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_rng rng;
  xf_rng_seed(&rng, 1, 0);
  const int n = 3, in = 7, out = 5;
  float *x = rand_floats(&rng, n * in, 1), *w = rand_floats(&rng, out * in, 1);
  float *bias = rand_floats(&rng, out, 1), *r = rand_floats(&rng, n * out, 1);
  float y[15], dw[35], db[5], dx[21];
  xf_k_gemm(cpu, true, false, out, in, n, 1.0f, r, out, x, in, 0.0f, dw, in);
  xf_k_bias_grad(cpu, db, r, n, out);
  xf_k_gemm(cpu, false, false, n, in, out, 1.0f, r, out, w, in, 0.0f, dx, in);
  struct { float *p, *g; int len; const char *name; } sets[] = {
      {w, dw, out * in, "dW"}, {bias, db, out, "db"}, {x, dx, n * in, "dx"}};
  for (int s = 0; s < 3; s++) {
    for (int i = 0; i < sets[s].len; i++) {
      float keep = sets[s].p[i];
      sets[s].p[i] = keep + FD_H;
      double lp = dense_objective(x, w, bias, r, n, in, out, y);
      sets[s].p[i] = keep - FD_H;
      double lm = dense_objective(x, w, bias, r, n, in, out, y);
      sets[s].p[i] = keep;
      assert_close(sets[s].g[i], (lp - lm) / (2 * FD_H), sets[s].name, (size_t)i);
    }
  }
  free(x), free(w), free(bias), free(r);
}

/* ---- conv: im2col + GEMM, with padding and stride ------------------------- */

static double conv_objective(const float *x, const float *w, const float *bias, const float *r,
                             const xf_conv_shape *s, int cout, float *col, float *y) {
  int rows = s->n * s->oh * s->ow, k = s->kh * s->kw * s->c;
  xf_k_im2col(cpu, x, s, col);
  xf_k_gemm(cpu, false, true, rows, cout, k, 1.0f, col, k, w, k, 0.0f, y, cout);
  xf_k_bias_add(cpu, y, bias, rows, cout);
  return dot(r, y, (size_t)rows * cout);
}

static void check_conv(int pad, int stride) {
  xf_rng rng;
  xf_rng_seed(&rng, 2, (uint64_t)(pad * 10 + stride));
  xf_conv_shape s = {.n = 2, .h = 6, .w = 5, .c = 3, .kh = 3, .kw = 3, .pad = pad, .stride = stride};
  assert_int_equal(xf_conv_shape_finish(&s), XF_OK);
  const int cout = 4, rows = s.n * s.oh * s.ow, k = s.kh * s.kw * s.c;
  const int in_len = s.n * s.h * s.w * s.c;
  float *x = rand_floats(&rng, in_len, 1), *w = rand_floats(&rng, cout * k, 1);
  float *bias = rand_floats(&rng, cout, 1), *r = rand_floats(&rng, rows * cout, 1);
  float *col = malloc(sizeof(float) * rows * k), *dcol = malloc(sizeof(float) * rows * k);
  float *y = malloc(sizeof(float) * rows * cout), *dw = malloc(sizeof(float) * cout * k);
  float db[4], *dx = malloc(sizeof(float) * in_len);
  conv_objective(x, w, bias, r, &s, cout, col, y);
  xf_k_gemm(cpu, true, false, cout, k, rows, 1.0f, r, cout, col, k, 0.0f, dw, k);
  xf_k_bias_grad(cpu, db, r, rows, cout);
  xf_k_gemm(cpu, false, false, rows, k, cout, 1.0f, r, cout, w, k, 0.0f, dcol, k);
  xf_k_col2im(cpu, dcol, &s, dx);
  struct { float *p, *g; int len; const char *name; } sets[] = {
      {w, dw, cout * k, "conv dW"}, {bias, db, cout, "conv db"}, {x, dx, in_len, "conv dx"}};
  for (int t = 0; t < 3; t++) {
    for (int i = 0; i < sets[t].len; i++) {
      float keep = sets[t].p[i];
      sets[t].p[i] = keep + FD_H;
      double lp = conv_objective(x, w, bias, r, &s, cout, col, y);
      sets[t].p[i] = keep - FD_H;
      double lm = conv_objective(x, w, bias, r, &s, cout, col, y);
      sets[t].p[i] = keep;
      assert_close(sets[t].g[i], (lp - lm) / (2 * FD_H), sets[t].name, (size_t)i);
    }
  }
  free(x), free(w), free(bias), free(r), free(col), free(dcol), free(y), free(dw), free(dx);
}

static void conv_layer_gradients_match_finite_differences(void **state) {
  (void)state;
  check_conv(0, 1);
  check_conv(1, 1);
  check_conv(1, 2);
  check_conv(2, 3);
}

/* ---- relu and max-pool: inputs kept away from kinks and ties -------------- */

static void relu_gradient_matches_finite_differences(void **state) {
  (void)state;
  xf_rng rng;
  xf_rng_seed(&rng, 3, 0);
  const size_t n = 64;
  float *x = rand_floats(&rng, n, 1), *r = rand_floats(&rng, n, 1), y[64], dx[64];
  for (size_t i = 0; i < n; i++)
    if (fabsf(x[i]) < 0.05f) x[i] = x[i] < 0 ? -0.1f : 0.1f; /* farther than h from 0 */
  xf_k_relu_fwd(cpu, y, x, n);
  xf_k_relu_bwd(cpu, dx, r, y, n);
  const float h = 1e-3f;
  for (size_t i = 0; i < n; i++) {
    float keep = x[i];
    x[i] = keep + h;
    xf_k_relu_fwd(cpu, y, x, n);
    double lp = dot(r, y, n);
    x[i] = keep - h;
    xf_k_relu_fwd(cpu, y, x, n);
    double lm = dot(r, y, n);
    x[i] = keep;
    assert_close(dx[i], (lp - lm) / (2 * h), "relu dx", i);
  }
  free(x), free(r);
}

static void maxpool_gradient_matches_finite_differences(void **state) {
  (void)state;
  xf_rng rng;
  xf_rng_seed(&rng, 4, 0);
  /* Overlapping windows (k 3, stride 2) exercise accumulation in backward. */
  xf_pool_shape s = {.n = 2, .h = 7, .w = 6, .c = 2, .k = 3, .stride = 2};
  assert_int_equal(xf_pool_shape_finish(&s), XF_OK);
  const size_t in = (size_t)s.n * s.h * s.w * s.c, out = (size_t)s.n * s.oh * s.ow * s.c;
  /* A permutation scaled by 0.1 has no ties closer than 0.1 > 2h. */
  uint32_t *perm = malloc(in * sizeof(uint32_t));
  for (size_t i = 0; i < in; i++) perm[i] = (uint32_t)i;
  xf_rng_shuffle_u32(&rng, perm, in);
  float *x = malloc(in * sizeof(float)), *dx = malloc(in * sizeof(float));
  for (size_t i = 0; i < in; i++) x[i] = 0.1f * (float)perm[i];
  float *r = rand_floats(&rng, out, 1), *y = malloc(out * sizeof(float));
  int32_t *arg = malloc(out * sizeof(int32_t));
  xf_k_maxpool_fwd(cpu, x, &s, y, arg);
  xf_k_maxpool_bwd(cpu, r, arg, &s, dx);
  const float h = 1e-3f;
  for (size_t i = 0; i < in; i++) {
    float keep = x[i];
    x[i] = keep + h;
    xf_k_maxpool_fwd(cpu, x, &s, y, arg);
    double lp = dot(r, y, out);
    x[i] = keep - h;
    xf_k_maxpool_fwd(cpu, x, &s, y, arg);
    double lm = dot(r, y, out);
    x[i] = keep;
    assert_close(dx[i], (lp - lm) / (2 * h), "maxpool dx", i);
  }
  free(perm), free(x), free(dx), free(r), free(y), free(arg);
}

static void softmax_xent_gradient_matches_finite_differences(void **state) {
  (void)state;
  xf_rng rng;
  xf_rng_seed(&rng, 5, 0);
  const int n = 4, classes = 6;
  float *z = rand_floats(&rng, n * classes, 3), dz[24];
  int32_t labels[4] = {0, 5, 2, 2};
  double loss;
  int correct;
  assert_int_equal(xf_k_softmax_xent(cpu, z, labels, n, classes, dz, &loss, &correct), XF_OK);
  for (int i = 0; i < n * classes; i++) {
    float keep = z[i];
    double lp, lm;
    z[i] = keep + FD_H;
    assert_int_equal(xf_k_softmax_xent(cpu, z, labels, n, classes, NULL, &lp, &correct), XF_OK);
    z[i] = keep - FD_H;
    assert_int_equal(xf_k_softmax_xent(cpu, z, labels, n, classes, NULL, &lm, &correct), XF_OK);
    z[i] = keep;
    /* dz is the gradient of the mean loss. */
    assert_close(dz[i], (lp - lm) / (2 * FD_H) / n, "softmax dz", (size_t)i);
  }
  free(z);
}

static void softmax_xent_is_stable_for_large_logits(void **state) {
  (void)state;
  float z[3] = {1000.0f, 0.0f, -1000.0f}, dz[3];
  int32_t label = 0;
  double loss;
  int correct;
  assert_int_equal(xf_k_softmax_xent(cpu, z, &label, 1, 3, dz, &loss, &correct), XF_OK);
  assert_true(isfinite(loss) && loss < 1e-6);
  assert_int_equal(correct, 1);
  assert_true(isfinite(dz[0]) && isfinite(dz[2]));
}

/* ---- whole models through xf_net ------------------------------------------ */

/* The training loss: dropout layers draw the first mask of seed 1, the one
 * the analytic gradient below is taken with. */
static double net_loss(xf_net *net, const float *params, const float *x, const int32_t *y, int n) {
  double loss;
  int correct;
  assert_int_equal(xf_net_set_params(net, params), XF_OK);
  xf_net_seed_dropout(net, 1);
  assert_int_equal(xf_net_run(net, x, y, n, true, &loss, &correct), XF_OK);
  return loss / n;
}

/* n records for the model: ids 0..vocab-1 (each record repeating some) for
 * one that starts with an embedding, else uniform in [-1, 1]. */
static float *model_inputs(const xf_model *m, xf_rng *rng, int n) {
  const size_t in = xf_model_input_size(m);
  float *x = rand_floats(rng, (size_t)n * in, 1);
  const xf_layer *first = xf_model_layer(m, 0);
  if (first->kind == XF_LAYER_EMBEDDING)
    for (size_t i = 0; i < (size_t)n * in; i++)
      x[i] = (float)xf_rng_below(rng, (uint64_t)(first->vocab < 4 ? first->vocab : 4));
  return x;
}

/* Checks `samples` parameters of every layer of the model. ReLU and max-pool
 * kinks make a finite difference wrong when a perturbation crosses one; with
 * h = 1e-2 that happens to a handful of coordinates at most, so up to 2% of
 * the checked coordinates may miss the bound, and none by more than 0.05. */
static void check_model_h(const xf_model_spec *spec, int samples, float h) {
  xf_model *m;
  assert_int_equal(xf_model_create(spec, &m, NULL), XF_OK);
  const int n = 3;
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, n, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
  float *p = malloc(P * sizeof(float)), *g = malloc(P * sizeof(float));
  xf_model_init_params(m, 9, p);
  xf_rng rng;
  xf_rng_seed(&rng, 6, 0);
  float *x = model_inputs(m, &rng, n);
  (void)in;
  int32_t y[3] = {1, 0, (int32_t)(spec->classes - 1)};
  double loss;
  int correct;
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  xf_net_seed_dropout(net, 1);
  assert_int_equal(xf_net_run(net, x, y, n, true, &loss, &correct), XF_OK);
  assert_int_equal(xf_net_get_grads(net, g), XF_OK);
  int checked = 0, missed = 0;
  for (int li = 0; li < xf_model_num_layers(m); li++) {
    const xf_layer *l = xf_model_layer(m, li);
    if (!l->weight_count) continue;
    for (int t = 0; t < samples; t++) {
      size_t i = t % 4 == 3 && l->bias_count ? l->bias_offset + xf_rng_below(&rng, l->bias_count)
                            : l->weight_offset + xf_rng_below(&rng, l->weight_count);
      float keep = p[i];
      p[i] = keep + h;
      double lp = net_loss(net, p, x, y, n);
      p[i] = keep - h;
      double lm = net_loss(net, p, x, y, n);
      p[i] = keep;
      double num = (lp - lm) / (2 * h), err = fabs(g[i] - num);
      checked++;
      if (err > FD_ATOL + FD_RTOL * fabs(num)) {
        missed++;
        if (err > 0.05)
          fail_msg("%s %s param %zu: analytic %.6f vs finite difference %.6f",
                   xf_model_describe(m), l->name, i, g[i], num);
      }
    }
  }
  if (missed * 50 > checked)
    fail_msg("%s: %d of %d coordinates off", xf_model_describe(m), missed, checked);
  xf_net_free(net);
  xf_model_free(m);
  free(p), free(g), free(x);
}

static void check_model(const xf_model_spec *spec, int samples) {
  check_model_h(spec, samples, FD_H);
}

static void scalar_loss_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_rng rng;
  xf_rng_seed(&rng, 15, 0);
  const int n = 6;
  float *z = rand_floats(&rng, n, 3), t[6] = {0, 1, 1, 0, 1, 0}, dz[6];
  for (int kind = XF_SCALAR_LOSS_BCE; kind <= XF_SCALAR_LOSS_MSE; kind++) {
    if (kind == XF_SCALAR_LOSS_MSE)
      for (int i = 0; i < n; i++) t[i] = (float)(i - 2) * 0.75f;
    double loss;
    int correct;
    assert_int_equal(xf_k_scalar_loss(cpu, (xf_scalar_loss)kind, z, t, n, dz, &loss, &correct),
                     XF_OK);
    for (int i = 0; i < n; i++) {
      float keep = z[i];
      double lp, lm;
      z[i] = keep + FD_H;
      assert_int_equal(xf_k_scalar_loss(cpu, (xf_scalar_loss)kind, z, t, n, NULL, &lp, &correct),
                       XF_OK);
      z[i] = keep - FD_H;
      assert_int_equal(xf_k_scalar_loss(cpu, (xf_scalar_loss)kind, z, t, n, NULL, &lm, &correct),
                       XF_OK);
      z[i] = keep;
      assert_close(dz[i], (lp - lm) / (2 * FD_H) / n, kind ? "mse dz" : "bce dz", (size_t)i);
    }
  }
  free(z);
}

static void scalar_losses_have_their_closed_forms(void **state) {
  (void)state;
  /* bce at z = 0 is log 2 whatever the label; stable at |z| = 1000. */
  float z[4] = {0.0f, 0.0f, 1000.0f, -1000.0f}, t[4] = {0, 1, 1, 1}, d[4];
  double loss;
  int correct;
  assert_int_equal(xf_k_scalar_loss(cpu, XF_SCALAR_LOSS_BCE, z, t, 4, d, &loss, &correct), XF_OK);
  assert_float_equal(loss, 2 * log(2.0) + 0.0 + 1000.0, 1e-9);
  /* z = 0 is class 0 (t 0 right, t 1 wrong); 1000 right; -1000 wrong. */
  assert_int_equal(correct, 2);
  assert_float_equal(d[0], 0.5 / 4, 1e-7);
  assert_float_equal(d[1], -0.5 / 4, 1e-7);
  assert_float_equal(d[3], -1.0 / 4, 1e-7);
  float y[2] = {3.0f, -1.0f}, u[2] = {1.0f, 1.0f};
  assert_int_equal(xf_k_scalar_loss(cpu, XF_SCALAR_LOSS_MSE, y, u, 2, d, &loss, &correct), XF_OK);
  assert_float_equal(loss, 4.0 + 4.0, 1e-12);
  assert_int_equal(correct, 0);
  assert_float_equal(d[0], 2.0, 1e-7);
  assert_float_equal(d[1], -2.0, 1e-7);
}

static void bce_and_mse_mlp_gradients_match_finite_differences(void **state) {
  (void)state;
  for (int loss = XF_LOSS_BCE; loss <= XF_LOSS_MSE; loss++) {
    xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {16, 8}, .n_hidden = 2, .in_h = 1,
                       .in_w = 1, .in_c = 10, .classes = 2, .loss = (xf_loss)loss};
    /* The squared error's larger gradients make a crossed ReLU kink miss by
     * more; a smaller step crosses fewer (the loss, near 1, keeps float
     * rounding far below the bound at this step). */
    check_model_h(&s, 40, 1e-3f);
  }
}

static void logreg_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 12, .classes = 4};
  check_model(&s, 40);
}

static void mlp_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {16, 8}, .n_hidden = 2,
                     .in_h = 1, .in_w = 1, .in_c = 10, .classes = 3};
  check_model(&s, 40);
}

static void lenet5_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                     .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  check_model(&s, 24);
}

static void fedavg_cnn_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_FEDAVG,
                     .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  check_model(&s, 12);
}

static void model_presets_have_the_published_sizes(void **state) {
  (void)state;
  xf_model *m;
  xf_model_spec fed = {.arch = XF_ARCH_CNN, .preset = XF_CNN_FEDAVG,
                       .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  assert_int_equal(xf_model_create(&fed, &m, NULL), XF_OK);
  assert_int_equal(xf_model_num_params(m), 1663370); /* McMahan et al. 2017 */
  xf_model_free(m);
  xf_model_spec le = fed;
  le.preset = XF_CNN_LENET5;
  assert_int_equal(xf_model_create(&le, &m, NULL), XF_OK);
  assert_int_equal(xf_model_num_params(m), 44426);
  xf_model_free(m);
  xf_model_spec mlp = {.arch = XF_ARCH_MLP, .hidden = {200, 200}, .n_hidden = 2,
                       .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  assert_int_equal(xf_model_create(&mlp, &m, NULL), XF_OK);
  assert_int_equal(xf_model_num_params(m), 784 * 200 + 200 + 200 * 200 + 200 + 200 * 10 + 10);
  xf_model_free(m);
}

static void cnn_on_tabular_data_is_refused_with_a_reason(void **state) {
  (void)state;
  xf_model *m;
  xf_errctx err = {0};
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                     .in_h = 1, .in_w = 1, .in_c = 20, .classes = 2};
  assert_int_equal(xf_model_create(&s, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.preset"));
}

static void init_is_seeded_and_bounded_by_fan_in(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {50}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 100, .classes = 10};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *a = malloc(P * 4), *b = malloc(P * 4), *c = malloc(P * 4);
  xf_model_init_params(m, 5, a);
  xf_model_init_params(m, 5, b);
  xf_model_init_params(m, 6, c);
  assert_memory_equal(a, b, P * 4);
  assert_memory_not_equal(a, c, P * 4);
  const xf_layer *l = xf_model_layer(m, 0);
  for (size_t i = 0; i < l->weight_count; i++) assert_true(fabsf(a[i]) <= 0.1f); /* 1/sqrt(100) */
  xf_model_free(m);
  free(a), free(b), free(c);
}

static void sgd_step_follows_the_pytorch_formula_with_prox(void **state) {
  (void)state;
  float w[3] = {1.0f, -2.0f, 0.5f}, g[3] = {0.1f, 0.2f, -0.3f}, v[3] = {0.5f, 0.0f, -1.0f};
  float ref[3] = {0.0f, -1.0f, 1.0f};
  xf_sgd_params p = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .prox_mu = 0.5f};
  float ew[3], ev[3];
  for (int i = 0; i < 3; i++) {
    float gi = g[i] + p.weight_decay * w[i] + p.prox_mu * (w[i] - ref[i]);
    ev[i] = p.momentum * v[i] + gi;
    ew[i] = w[i] - p.lr * ev[i];
  }
  xf_k_sgd_step(cpu, w, g, v, ref, 3, &p);
  for (int i = 0; i < 3; i++) {
    assert_float_equal(v[i], ev[i], 1e-7);
    assert_float_equal(w[i], ew[i], 1e-7);
  }
}

/* Two Nesterov steps from v = 0 with the values written out by hand
 * (lr 0.1, momentum 0.9, no decay), g = 1 then g = 2:
 *   step 1: v = 1,            w = 1 - 0.1 (1 + 0.9 * 1)      = 0.81
 *   step 2: v = 0.9 + 2 = 2.9, w = 0.81 - 0.1 (2 + 0.9 * 2.9) = 0.349 */
static void nesterov_step_matches_the_hand_computed_steps(void **state) {
  (void)state;
  float w = 1.0f, v = 0.0f, g = 1.0f;
  xf_sgd_params p = {.lr = 0.1f, .momentum = 0.9f, .nesterov = true};
  xf_k_sgd_step(cpu, &w, &g, &v, NULL, 1, &p);
  assert_float_equal(v, 1.0, 1e-7);
  assert_float_equal(w, 0.81, 1e-6);
  g = 2.0f;
  xf_k_sgd_step(cpu, &w, &g, &v, NULL, 1, &p);
  assert_float_equal(v, 2.9, 1e-6);
  assert_float_equal(w, 0.349, 1e-6);
  /* Without nesterov the same two steps are heavy ball: 0.9 then 0.61. */
  w = 1.0f, v = 0.0f, g = 1.0f, p.nesterov = false;
  xf_k_sgd_step(cpu, &w, &g, &v, NULL, 1, &p);
  assert_float_equal(w, 0.9, 1e-6);
  g = 2.0f;
  xf_k_sgd_step(cpu, &w, &g, &v, NULL, 1, &p);
  assert_float_equal(w, 0.61, 1e-6);
}

/* Adam on f(w) = w^2 / 2 (gradient w) against the textbook algorithm in
 * double (Kingma & Ba, Algorithm 1, with bias-corrected moments). Its first
 * step is lr * g / (|g| + eps): lr in the direction of -sign(w). */
static void adam_follows_the_textbook_steps_on_a_quadratic(void **state) {
  (void)state;
  xf_net *net;
  xf_model *m;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 1, .classes = 2};
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  assert_int_equal(xf_net_create(cpu, m, 1, &net, NULL), XF_OK);
  const size_t P = xf_model_num_params(m); /* 2 weights, 2 biases */
  float w[4] = {1.5f, -0.25f, 3.0f, -2.0f}, got[4];
  double rw[4], rm[4] = {0}, rv[4] = {0};
  for (size_t i = 0; i < P; i++) rw[i] = w[i];
  assert_int_equal(xf_net_set_params(net, w), XF_OK);
  const xf_adam_params p = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  xf_net_reset_optimizer(net);
  for (int t = 1; t <= 5; t++) {
    assert_int_equal(xf_net_get_params(net, got), XF_OK);
    xf_k_copy(cpu, xf_net_grads_device(net), xf_net_params_device(net), P); /* g = w */
    assert_int_equal(xf_net_adam_step(net, &p), XF_OK);
    for (size_t i = 0; i < P; i++) {
      double g = rw[i];
      rm[i] = 0.9 * rm[i] + 0.1 * g;
      rv[i] = 0.999 * rv[i] + 0.001 * g * g;
      double mh = rm[i] / (1 - pow(0.9, t)), vh = rv[i] / (1 - pow(0.999, t));
      rw[i] -= 0.1 * mh / (sqrt(vh) + 1e-8);
    }
    assert_int_equal(xf_net_get_params(net, got), XF_OK);
    for (size_t i = 0; i < P; i++) assert_float_equal(got[i], rw[i], 2e-6);
    if (t == 1)
      for (size_t i = 0; i < P; i++)
        assert_float_equal(got[i], w[i] - 0.1 * (w[i] > 0 ? 1 : -1), 1e-6);
  }
  /* A reset starts the bias correction again: the next step is lr-sized. */
  assert_int_equal(xf_net_get_params(net, w), XF_OK);
  xf_net_reset_optimizer(net);
  xf_k_copy(cpu, xf_net_grads_device(net), xf_net_params_device(net), P);
  assert_int_equal(xf_net_adam_step(net, &p), XF_OK);
  assert_int_equal(xf_net_get_params(net, got), XF_OK);
  for (size_t i = 0; i < P; i++) assert_float_equal(got[i], w[i] - 0.1 * (w[i] > 0 ? 1 : -1), 1e-6);
  xf_net_free(net);
  xf_model_free(m);
}

/* With a zero gradient, adamw only decays the weights: w (1 - lr wd),
 * exactly; adam's coupled L2 makes wd * w the gradient, so its first step
 * is lr * sign(w) like any other gradient's. */
static void adamw_decay_is_decoupled_and_adam_decay_is_l2(void **state) {
  (void)state;
  float w[2] = {2.0f, -4.0f}, g[2] = {0, 0}, m[2] = {0, 0}, v[2] = {0, 0};
  xf_adam_params p = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                      .weight_decay = 0.5f, .decoupled = true,
                      .bias1 = 1 - 0.9, .bias2 = 1 - 0.999};
  xf_k_adam_step(cpu, w, g, m, v, NULL, 2, &p);
  assert_true(w[0] == 2.0f * (1.0f - 0.1f * 0.5f));
  assert_true(w[1] == -4.0f * (1.0f - 0.1f * 0.5f));
  assert_true(m[0] == 0.0f && v[0] == 0.0f);
  float u[2] = {2.0f, -4.0f};
  m[0] = m[1] = v[0] = v[1] = 0;
  p.decoupled = false;
  xf_k_adam_step(cpu, u, g, m, v, NULL, 2, &p);
  assert_float_equal(u[0], 1.9, 1e-6);
  assert_float_equal(u[1], -3.9, 1e-6);
}

static void l2norm_axpy_scale_fill_copy(void **state) {
  (void)state;
  float x[5] = {3, 4, 0, 0, 0}, y[5] = {1, 1, 1, 1, 1};
  assert_float_equal(xf_k_l2norm(cpu, x, 5), 5.0, 1e-12);
  xf_k_axpy(cpu, 2.0f, x, y, 5);
  assert_float_equal(y[0], 7.0f, 0);
  assert_float_equal(y[4], 1.0f, 0);
  xf_k_scale(cpu, y, 0.5f, 5);
  assert_float_equal(y[1], 4.5f, 0);
  xf_k_fill(cpu, y, -1.0f, 5);
  assert_float_equal(y[3], -1.0f, 0);
  xf_k_copy(cpu, y, x, 5);
  assert_memory_equal(x, y, sizeof(x));
}

/* ---- training -------------------------------------------------------------- */

/* Two Gaussian blobs per class in 8 dimensions: separable, so a trained
 * logreg must classify the held-out part almost perfectly. */
static void make_blobs(size_t n, float *x, int32_t *y, uint64_t seed) {
  xf_rng r;
  xf_rng_seed(&r, seed, 0);
  for (size_t i = 0; i < n; i++) {
    int label = (int)xf_rng_below(&r, 3);
    y[i] = label;
    for (int f = 0; f < 8; f++)
      x[i * 8 + f] = (float)((f % 3 == label ? 3.0 : 0.0) + 0.5 * xf_rng_normal(&r));
  }
}

static void run_training(uint64_t seed, int threads, float *params_out, double *acc) {
  xf_backend *b;
  xf_backend_options opt = {XF_BACKEND_CPU, threads, 0};
  assert_int_equal(xf_backend_open(&opt, &b, NULL), XF_OK);
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {16}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(b, m, 32, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * 4);
  xf_model_init_params(m, seed, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  float x[600 * 8], tx[200 * 8];
  int32_t y[600], ty[200];
  make_blobs(600, x, y, 11);
  make_blobs(200, tx, ty, 12);
  xf_samples train = {x, y, 600, 8}, test = {tx, ty, 200, 8};
  xf_train_options o = {.epochs = 5, .batch_size = 32,
                        .sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f,
                                .prox_mu = 0.01f},
                        .seed = seed};
  assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
  double loss;
  assert_int_equal(xf_evaluate(net, &test, &loss, acc, NULL), XF_OK);
  assert_int_equal(xf_net_get_params(net, params_out), XF_OK);
  xf_net_free(net);
  xf_model_free(m);
  xf_backend_close(b);
  free(p);
}

/* Each optimizer, from the same start on the blobs, lowers the training
 * loss from its first epoch to its last and classifies the test blobs. */
typedef struct epoch_losses {
  double first, last;
} epoch_losses;

static void keep_losses(const xf_epoch_report *r, void *user) {
  epoch_losses *e = user;
  if (r->epoch == 1) e->first = r->train_loss;
  e->last = r->train_loss;
}

static void every_optimizer_trains_an_mlp(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {16}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  static float x[600 * 8], tx[200 * 8];
  static int32_t y[600], ty[200];
  make_blobs(600, x, y, 11);
  make_blobs(200, tx, ty, 12);
  xf_samples train = {x, y, 600, 8}, test = {tx, ty, 200, 8};
  const size_t P = xf_model_num_params(m);
  float *p = malloc(P * sizeof(float));
  static const struct {
    xf_optimizer opt;
    xf_sgd_params sgd;
    double clip_norm;
  } cases[] = {
      {XF_OPTIMIZER_SGD, {.lr = 0.05f, .momentum = 0.9f, .nesterov = true}, 0},
      {XF_OPTIMIZER_ADAM, {.lr = 0.01f, .weight_decay = 1e-4f}, 0},
      {XF_OPTIMIZER_ADAMW, {.lr = 0.01f, .weight_decay = 0.01f}, 0},
      {XF_OPTIMIZER_ADAMW, {.lr = 0.01f, .weight_decay = 0.01f, .prox_mu = 0.01f}, 1.0},
      {XF_OPTIMIZER_SGD, {.lr = 0.05f}, 0.5},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    xf_net *net;
    assert_int_equal(xf_net_create(cpu, m, 32, &net, NULL), XF_OK);
    xf_model_init_params(m, 4, p);
    assert_int_equal(xf_net_set_params(net, p), XF_OK);
    epoch_losses e = {0};
    xf_train_options o = {.epochs = 5, .batch_size = 32, .sgd = cases[c].sgd,
                          .optimizer = cases[c].opt, .beta1 = 0.9f, .beta2 = 0.999f,
                          .eps = 1e-8f, .clip_norm = cases[c].clip_norm, .seed = 1,
                          .on_epoch = keep_losses, .user = &e};
    assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
    double loss, acc;
    assert_int_equal(xf_evaluate(net, &test, &loss, &acc, NULL), XF_OK);
    if (!(e.last < 0.5 * e.first) || acc < 0.95)
      fail_msg("case %zu: training loss %.4f -> %.4f, test accuracy %.3f", c, e.first, e.last,
               acc);
    xf_net_free(net);
  }
  free(p);
  xf_model_free(m);
}

/* Clipping by global norm leaves a short gradient alone and scales a long
 * one to the bound, direction kept. */
static void clip_grad_norm_scales_only_long_gradients(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 1, .classes = 2};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 1, &net, NULL), XF_OK);
  float g[4] = {3, 0, 0, 4}, got[4];
  memcpy(xf_net_grads_device(net), g, sizeof(g));
  double norm;
  xf_net_clip_grad_norm(net, 10.0, &norm);
  assert_float_equal(norm, 5.0, 1e-12);
  assert_int_equal(xf_net_get_grads(net, got), XF_OK);
  assert_memory_equal(got, g, sizeof(g));
  xf_net_clip_grad_norm(net, 1.0, &norm);
  assert_int_equal(xf_net_get_grads(net, got), XF_OK);
  assert_float_equal(got[0], 0.6, 1e-6);
  assert_float_equal(got[3], 0.8, 1e-6);
  assert_float_equal(xf_k_l2norm(cpu, xf_net_grads_device(net), 4), 1.0, 1e-6);
  xf_net_free(net);
  xf_model_free(m);
}

/* Binary cross-entropy on one logit learns two blobs; mse regresses a
 * label that is a linear function of the features, and its accuracy field
 * is R^2 (near 1 for a fit, in [0, 1] always). */
static void bce_and_mse_train_and_report_their_accuracy(void **state) {
  (void)state;
  static float x[400 * 4];
  static int32_t y[400];
  xf_rng r;
  xf_rng_seed(&r, 8, 0);
  for (int i = 0; i < 400; i++) {
    y[i] = (int32_t)(i % 2);
    for (int f = 0; f < 4; f++)
      x[i * 4 + f] = (float)((y[i] ? 1.5 : -1.5) + xf_rng_normal(&r) * 0.5);
  }
  xf_samples d = {x, y, 400, 4};
  for (int loss = XF_LOSS_BCE; loss <= XF_LOSS_MSE; loss++) {
    xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 4, .classes = 2,
                       .loss = (xf_loss)loss};
    xf_model *m;
    assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
    assert_int_equal(xf_model_num_params(m), 5); /* one output */
    xf_net *net;
    assert_int_equal(xf_net_create(cpu, m, 20, &net, NULL), XF_OK);
    float p[5];
    xf_model_init_params(m, 2, p);
    assert_int_equal(xf_net_set_params(net, p), XF_OK);
    double l0, a0, l1, a1;
    assert_int_equal(xf_evaluate(net, &d, &l0, &a0, NULL), XF_OK);
    xf_train_options o = {.epochs = 10, .batch_size = 20, .optimizer = XF_OPTIMIZER_ADAM,
                          .sgd = {.lr = 0.05f}, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
    assert_int_equal(xf_train(net, &d, &o, NULL), XF_OK);
    assert_int_equal(xf_evaluate(net, &d, &l1, &a1, NULL), XF_OK);
    assert_true(l1 < 0.5 * l0);
    assert_true(a0 >= 0.0 && a0 <= 1.0 && a1 >= 0.0 && a1 <= 1.0);
    if (a1 < 0.9) fail_msg("%s: accuracy %.3f after training", xf_loss_name((xf_loss)loss), a1);
    xf_net_free(net);
    xf_model_free(m);
  }
  /* bce takes labels 0 and 1 only. */
  xf_model_spec three = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 4, .classes = 3,
                         .loss = XF_LOSS_BCE};
  xf_model *m;
  xf_errctx err = {0};
  assert_int_equal(xf_model_create(&three, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "binary_cross_entropy needs labels 0 and 1"));
}

static void training_learns_a_separable_problem(void **state) {
  (void)state;
  float p[8 * 16 + 16 + 16 * 3 + 3];
  double acc;
  run_training(3, 1, p, &acc);
  assert_true(acc > 0.97);
}

static void same_seed_and_threads_give_identical_parameters(void **state) {
  (void)state;
  float a[8 * 16 + 16 + 16 * 3 + 3], b[8 * 16 + 16 + 16 * 3 + 3], c[8 * 16 + 16 + 16 * 3 + 3];
  double acc;
  run_training(21, 2, a, &acc);
  run_training(21, 2, b, &acc);
  run_training(22, 2, c, &acc);
  assert_memory_equal(a, b, sizeof(a));
  assert_memory_not_equal(a, c, sizeof(a));
}

/* A stop hook that says yes once it has been asked `after` times. */
typedef struct stop_count {
  int asked, after, epochs_reported;
} stop_count;

static bool stop_after(void *user) {
  stop_count *c = user;
  return ++c->asked > c->after;
}

static void count_epoch(const xf_epoch_report *r, void *user) {
  (void)r;
  ((stop_count *)user)->epochs_reported++;
}

static void training_stops_before_the_next_batch_when_asked(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 10, &net, NULL), XF_OK);
  float x[100 * 8], start[8 * 3 + 3], after[8 * 3 + 3];
  int32_t y[100];
  make_blobs(100, x, y, 5);
  xf_model_init_params(m, 1, start);
  xf_samples d = {x, y, 100, 8};
  /* 100 records in batches of 10: 10 batches an epoch. Stopped when asked
   * for the 15th batch: one whole epoch and 4 batches of the second ran. */
  stop_count c = {.after = 14};
  xf_train_options o = {.epochs = 1000, .batch_size = 10, .sgd = {.lr = 0.1f},
                        .on_epoch = count_epoch, .should_stop = stop_after, .user = &c};
  assert_int_equal(xf_net_set_params(net, start), XF_OK);
  assert_int_equal(xf_train(net, &d, &o, NULL), XF_OK);
  assert_int_equal(c.asked, 15);
  assert_int_equal(c.epochs_reported, 1);
  assert_int_equal(xf_net_get_params(net, after), XF_OK);
  assert_memory_not_equal(start, after, sizeof(start));
  /* Asked to stop at once: not one step is taken. */
  c = (stop_count){.after = 0};
  assert_int_equal(xf_net_set_params(net, start), XF_OK);
  assert_int_equal(xf_train(net, &d, &o, NULL), XF_OK);
  assert_int_equal(c.asked, 1);
  assert_int_equal(c.epochs_reported, 0);
  assert_int_equal(xf_net_get_params(net, after), XF_OK);
  assert_memory_equal(start, after, sizeof(start));
  xf_net_free(net);
  xf_model_free(m);
}

static void out_of_range_labels_are_refused_before_training(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 2, .classes = 2};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 4, &net, NULL), XF_OK);
  float x[6] = {0};
  int32_t y[3] = {0, 1, 7};
  xf_samples d = {x, y, 3, 2};
  xf_train_options o = {.epochs = 1, .batch_size = 2, .sgd = {.lr = 0.1f}};
  xf_errctx err = {0};
  assert_int_equal(xf_train(net, &d, &o, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "record 2 has label 7"));
  xf_net_free(net);
  xf_model_free(m);
}

/* ---- DP-SGD: per-example clipping and the DP training loop ---------------- */

/* The clipped sum by brute force from each example's own gradient (run
 * alone through xf_net_run, where n = 1 makes the mean loss its own) and its
 * norm in double: factor min(1, clip / norm), scaled gradients summed in
 * double. */
static void clipped_sum_by_brute_force(int n, const float *per_example, const double *norms,
                                       double clip, size_t P, double *sum, double *abs_sum) {
  for (size_t j = 0; j < P; j++) sum[j] = abs_sum[j] = 0;
  for (int i = 0; i < n; i++) {
    double f = norms[i] > clip ? clip / norms[i] : 1.0;
    const float *g = per_example + (size_t)i * P;
    for (size_t j = 0; j < P; j++) {
      sum[j] += f * g[j];
      abs_sum[j] += fabs(f * g[j]);
    }
  }
}

/* Float GEMMs and float squared norms against double sums: each coordinate
 * may be off by a few roundings of the magnitudes summed into it (bound
 * 1e-4 of them) plus 1e-6 of the largest coordinate for the ones where the
 * examples cancel. A wrong factor or a missed example is off by O(1) of
 * the coordinate. */
static void expect_clipped_sum(const char *what, const float *got, const double *want,
                               const double *abs_sum, size_t P) {
  double biggest = 0;
  for (size_t j = 0; j < P; j++) biggest = fmax(biggest, fabs(want[j]));
  for (size_t j = 0; j < P; j++) {
    double tol = 1e-4 * abs_sum[j] + 1e-6 * biggest;
    if (!(fabs(got[j] - want[j]) <= tol))
      fail_msg("%s: coordinate %zu is %.9g, per-example brute force gives %.9g (tolerance %.3g)",
               what, j, (double)got[j], want[j], tol);
  }
}

static void check_clipped(const xf_model_spec *spec, uint64_t seed) {
  xf_model *m;
  assert_int_equal(xf_model_create(spec, &m, NULL), XF_OK);
  const int n = 4;
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, n, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
  float *p = malloc(P * sizeof(float)), *got = malloc(P * sizeof(float));
  float *per_example = malloc((size_t)n * P * sizeof(float));
  double *want = malloc(P * sizeof(double)), *abs_sum = malloc(P * sizeof(double));
  xf_model_init_params(m, seed, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  xf_rng rng;
  xf_rng_seed(&rng, seed, 1);
  float *x = model_inputs(m, &rng, n);
  int32_t y[4];
  for (int i = 0; i < n; i++) y[i] = (int32_t)xf_rng_below(&rng, (uint64_t)spec->classes);
  double norms[4], loss, want_loss = 0, lo = INFINITY, hi = 0;
  int correct, want_correct = 0;
  for (int i = 0; i < n; i++) {
    assert_int_equal(xf_net_run(net, x + (size_t)i * in, y + i, 1, true, &loss, &correct), XF_OK);
    assert_int_equal(xf_net_get_grads(net, per_example + (size_t)i * P), XF_OK);
    norms[i] = sqrt(dot(per_example + (size_t)i * P, per_example + (size_t)i * P, P));
    lo = fmin(lo, norms[i]);
    hi = fmax(hi, norms[i]);
    want_loss += loss;
    want_correct += correct;
  }
  /* Below every norm (all clipped), between (some), above every norm (none). */
  const double clips[] = {0.5 * lo, 0.5 * (lo + hi), 2 * hi};
  char what[96];
  for (int t = 0; t < 3; t++) {
    clipped_sum_by_brute_force(n, per_example, norms, clips[t], P, want, abs_sum);
    assert_int_equal(xf_net_run_clipped(net, x, y, n, clips[t], false, &loss, &correct), XF_OK);
    assert_int_equal(xf_net_get_grads(net, got), XF_OK);
    snprintf(what, sizeof(what), "%s clip %.4g (norms %.4g..%.4g)", xf_model_describe(m),
             clips[t], lo, hi);
    expect_clipped_sum(what, got, want, abs_sum, P);
    assert_float_equal(loss, want_loss, 1e-4 * want_loss);
    assert_int_equal(correct, want_correct);
    /* accumulate: two micro-batches of 2 sum to the batch of 4. */
    assert_int_equal(xf_net_run_clipped(net, x, y, 2, clips[t], false, &loss, &correct), XF_OK);
    assert_int_equal(xf_net_run_clipped(net, x + 2 * in, y + 2, 2, clips[t], true, &loss,
                                        &correct), XF_OK);
    assert_int_equal(xf_net_get_grads(net, got), XF_OK);
    snprintf(what, sizeof(what), "%s clip %.4g in two accumulated halves", xf_model_describe(m),
             clips[t]);
    expect_clipped_sum(what, got, want, abs_sum, P);
  }
  assert_int_equal(xf_net_run_clipped(net, x, y, 0, 1.0, false, &loss, &correct), XF_EINVAL);
  assert_int_equal(xf_net_run_clipped(net, x, y, n + 1, 1.0, false, &loss, &correct), XF_EINVAL);
  assert_int_equal(xf_net_run_clipped(net, x, y, n, 0.0, false, &loss, &correct), XF_EINVAL);
  assert_int_equal(xf_net_run_clipped(net, x, y, n, NAN, false, &loss, &correct), XF_EINVAL);
  xf_net_free(net);
  xf_model_free(m);
  free(p), free(got), free(per_example), free(want), free(abs_sum), free(x);
}

static void clipped_gradient_matches_per_example_brute_force(void **state) {
  (void)state;
  xf_model_spec logreg = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 12, .classes = 4};
  xf_model_spec mlp = {.arch = XF_ARCH_MLP, .hidden = {16, 8}, .n_hidden = 2,
                       .in_h = 1, .in_w = 1, .in_c = 10, .classes = 3};
  xf_model_spec lenet = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                         .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  xf_model_spec fedavg = lenet;
  fedavg.preset = XF_CNN_FEDAVG;
  check_clipped(&logreg, 31);
  check_clipped(&mlp, 32);
  check_clipped(&lenet, 33);
  check_clipped(&fedavg, 34);
}

/* ---- declared models ------------------------------------------------------- */

#define DENSE(u) {.kind = XF_DECL_DENSE, .units = (u)}
#define CONV(f, k, s, p) \
  {.kind = XF_DECL_CONV2D, .filters = (f), .kernel = (k), .stride = (s), .padding = (p)}
#define POOL(k, s) {.kind = XF_DECL_MAXPOOL2D, .kernel = (k), .stride = (s)}
#define RELU {.kind = XF_DECL_RELU}
#define FLAT {.kind = XF_DECL_FLATTEN}

static const xf_layer_decl lenet5_declared[] = {
    CONV(6, 5, 1, 0), RELU, POOL(2, 2), CONV(16, 5, 1, 0), RELU, POOL(2, 2), FLAT,
    DENSE(120), RELU, DENSE(84), RELU, DENSE(10)};

static xf_model_spec declared_spec(const xf_layer_decl *layers, int n, int h, int w, int c,
                                   int classes) {
  xf_model_spec s = {.arch = XF_ARCH_LAYERS, .in_h = h, .in_w = w, .in_c = c,
                     .classes = classes, .n_layers = n};
  memcpy(s.layers, layers, (size_t)n * sizeof(*layers));
  return s;
}

/* Trains a model from seed 5 for two epochs on random 28x28 records and
 * returns its parameters (malloc'd). */
static float *train_28x28(const xf_model_spec *spec, size_t *P_out, bool dp) {
  xf_model *m;
  assert_int_equal(xf_model_create(spec, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 16, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * sizeof(float));
  xf_model_init_params(m, 5, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  xf_rng rng;
  xf_rng_seed(&rng, 77, 0);
  enum { N = 64 };
  float *x = rand_floats(&rng, (size_t)N * 784, 1);
  int32_t y[N];
  for (int i = 0; i < N; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
  xf_samples train = {x, y, N, 784};
  xf_train_options o = {.epochs = 2, .batch_size = 16,
                        .sgd = {.lr = 0.05f, .momentum = 0.9f}, .seed = 3};
  if (dp) {
    /* Per-example clipping of every step, without noise: the clipped
     * backward's arithmetic alone. */
    for (int i = 0; i < N; i += 16)
      assert_int_equal(xf_net_run_clipped(net, x + (size_t)i * 784, y + i, 16, 0.5, false,
                                          &(double){0}, &(int){0}),
                       XF_OK), xf_net_sgd_step(net, &o.sgd);
  } else {
    assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
  }
  assert_int_equal(xf_net_get_params(net, p), XF_OK);
  xf_net_free(net);
  xf_model_free(m);
  free(x);
  *P_out = P;
  return p;
}

/* lenet5 written out as model.layers is the preset: the same table (names,
 * shapes, offsets), the same initial parameters and bit-identical training,
 * plain and with per-example clipping. */
static void declared_lenet5_is_the_preset_lenet5(void **state) {
  (void)state;
  xf_model_spec preset = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                          .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  xf_model_spec declared = declared_spec(lenet5_declared, 12, 28, 28, 1, 10);
  xf_model *a, *b;
  assert_int_equal(xf_model_create(&preset, &a, NULL), XF_OK);
  assert_int_equal(xf_model_create(&declared, &b, NULL), XF_OK);
  assert_int_equal(xf_model_num_params(a), xf_model_num_params(b));
  assert_int_equal(xf_model_num_layers(a), xf_model_num_layers(b));
  for (int i = 0; i < xf_model_num_layers(a); i++)
    assert_memory_equal(xf_model_layer(a, i), xf_model_layer(b, i), sizeof(xf_layer));
  int na, nb;
  const xf_layer_decl *da = xf_model_decls(a, &na), *db = xf_model_decls(b, &nb);
  assert_int_equal(na, nb);
  for (int i = 0; i < na; i++) assert_true(xf_layer_decl_equal(&da[i], &db[i]));
  assert_string_equal(xf_model_describe(b), "layers(12)");
  xf_model_free(a);
  xf_model_free(b);
  for (int dp = 0; dp < 2; dp++) {
    size_t pa, pb;
    float *wa = train_28x28(&preset, &pa, dp), *wb = train_28x28(&declared, &pb, dp);
    assert_int_equal(pa, pb);
    xf_digest ga, gb;
    xf_params_digest(wa, pa, &ga);
    xf_params_digest(wb, pb, &gb);
    assert_memory_equal(ga.bytes, gb.bytes, XF_DIGEST_BYTES);
    free(wa), free(wb);
  }
}

/* A model no preset is: strided and padded convolutions, an overlapping
 * pool, flatten and two dense layers, on 3-channel 12x12 records. */
static const xf_layer_decl strided_declared[] = {
    CONV(4, 3, 2, 1), RELU, CONV(6, 3, 1, 1), RELU, POOL(3, 2), FLAT, DENSE(12), RELU, DENSE(5)};

static void declared_strided_cnn_gradients_match_finite_differences(void **state) {
  (void)state;
  xf_model_spec s = declared_spec(strided_declared, 9, 12, 12, 3, 5);
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  /* 12x12x3 -conv s2 p1-> 6x6x4 -conv p1-> 6x6x6 -pool 3/2-> 2x2x6 -> 12 -> 5 */
  const xf_layer *pool = xf_model_layer(m, 4);
  assert_int_equal(pool->kind, XF_LAYER_MAXPOOL);
  assert_int_equal(pool->out_h, 2);
  assert_int_equal(xf_model_layer(m, 0)->out_h, 6);
  assert_int_equal(xf_model_num_params(m),
                   (4 * 27 + 4) + (6 * 36 + 6) + (12 * 24 + 12) + (5 * 12 + 5));
  xf_model_free(m);
  /* A small step: with few values per map, h = 1e-2 crosses ReLU and pool
   * kinks too often for the presets' tolerance. */
  check_model_h(&s, 48, 1e-3f);
}

static void declared_strided_cnn_clipped_gradient_matches_brute_force(void **state) {
  (void)state;
  xf_model_spec s = declared_spec(strided_declared, 9, 12, 12, 3, 5);
  check_clipped(&s, 35);
}

/* The strided model learns: its training loss falls on separable records
 * (the class is which quadrant is bright). */
static void declared_strided_cnn_trains(void **state) {
  (void)state;
  xf_model_spec s = declared_spec(strided_declared, 9, 12, 12, 3, 5);
  s.classes = 4;
  s.layers[8].units = 4;
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 16, &net, NULL), XF_OK);
  float *p = malloc(xf_model_num_params(m) * sizeof(float));
  xf_model_init_params(m, 8, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  enum { N = 256, F = 12 * 12 * 3 };
  float *x = malloc((size_t)N * F * sizeof(float));
  int32_t y[N];
  xf_rng rng;
  xf_rng_seed(&rng, 4, 0);
  for (int i = 0; i < N; i++) {
    y[i] = (int32_t)xf_rng_below(&rng, 4);
    for (int r = 0; r < 12; r++)
      for (int c = 0; c < 12; c++)
        for (int ch = 0; ch < 3; ch++) {
          int quad = (r >= 6) * 2 + (c >= 6);
          x[((size_t)i * 144 + r * 12 + c) * 3 + ch] =
              (float)((quad == y[i] ? 1.0 : 0.0) + 0.3 * xf_rng_normal(&rng));
        }
  }
  xf_samples train = {x, y, N, F};
  epoch_losses e = {0, 0};
  xf_train_options o = {.epochs = 8, .batch_size = 16, .sgd = {.lr = 0.05f, .momentum = 0.9f},
                        .seed = 1, .on_epoch = keep_losses, .user = &e};
  assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
  double loss, acc;
  assert_int_equal(xf_evaluate(net, &train, &loss, &acc, NULL), XF_OK);
  if (!(e.last < 0.5 * e.first) || acc < 0.9)
    fail_msg("loss %.4f -> %.4f, accuracy %.3f", e.first, e.last, acc);
  xf_net_free(net);
  xf_model_free(m);
  free(p), free(x);
}

/* Each refusal names the layer and the field, and says what would fit. */
static void declared_models_that_do_not_fit_are_refused_naming_the_layer(void **state) {
  (void)state;
  static const struct {
    const char *why;
    int h, w, c, classes;
    xf_loss loss;
    int n;
    xf_layer_decl layers[4];
    const char *want[2];
  } cases[] = {
      {"kernel larger than its input", 5, 5, 1, 10, XF_LOSS_CROSS_ENTROPY, 3,
       {CONV(4, 7, 1, 0), FLAT, DENSE(10)},
       {"model.layers[0].kernel: 7 is larger than its input 5x5", "at most 5"}},
      {"pool after pooling shrank it", 8, 8, 1, 10, XF_LOSS_CROSS_ENTROPY, 3,
       {POOL(4, 4), POOL(3, 3), DENSE(10)},
       {"model.layers[1].kernel: 3 is larger than its input 2x2", NULL}},
      {"conv after flatten", 8, 8, 1, 10, XF_LOSS_CROSS_ENTROPY, 3,
       {FLAT, CONV(2, 1, 1, 0), DENSE(10)}, {"model.layers[1]: a conv2d layer needs an image", NULL}},
      {"last layer not dense", 4, 4, 1, 10, XF_LOSS_CROSS_ENTROPY, 2, {DENSE(10), RELU},
       {"model.layers[1]: the last layer is relu", "dense layer giving 10 outputs"}},
      {"wrong output width", 4, 4, 1, 10, XF_LOSS_CROSS_ENTROPY, 1, {DENSE(62)},
       {"model.layers[0].units: the last layer gives 62 outputs", "needs 10"}},
      {"bce needs one output", 4, 4, 1, 2, XF_LOSS_BCE, 1, {DENSE(2)},
       {"model.layers[0].units", "binary_cross_entropy (one logit) needs 1"}},
      {"units 0", 4, 4, 1, 10, XF_LOSS_CROSS_ENTROPY, 2, {DENSE(0), DENSE(10)},
       {"model.layers[0].units: 0", "1 to 65536"}},
      {"padding as large as the kernel", 8, 8, 1, 10, XF_LOSS_CROSS_ENTROPY, 2,
       {CONV(2, 3, 1, 3), DENSE(10)}, {"model.layers[0].padding: 3", "0 to 2"}},
      {"too many filters", 8, 8, 1, 10, XF_LOSS_CROSS_ENTROPY, 2, {CONV(5000, 3, 1, 0), DENSE(10)},
       {"model.layers[0].filters: 5000", NULL}},
      {"output too large", 4096, 4096, 1, 10, XF_LOSS_CROSS_ENTROPY, 2,
       {CONV(64, 1, 1, 0), DENSE(10)}, {"model.layers[0]: its output of 4096x4096x64", NULL}},
      {"dense past 2^34 parameters", 4096, 4096, 1, 10, XF_LOSS_CROSS_ENTROPY, 2,
       {DENSE(65536), DENSE(10)}, {"model.layers[0].units: 65536 units on 16777216 inputs", NULL}},
      {"empty", 4, 4, 1, 10, XF_LOSS_CROSS_ENTROPY, 0, {DENSE(10)},
       {"model.layers: 0 layers", "1 to 32"}},
  };
  for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
    xf_model_spec s = declared_spec(cases[t].layers, cases[t].n, cases[t].h, cases[t].w,
                                    cases[t].c, cases[t].classes);
    s.loss = cases[t].loss;
    xf_model *m = NULL;
    xf_errctx err = {0};
    if (xf_model_create(&s, &m, &err) != XF_EINVAL) fail_msg("%s: not refused", cases[t].why);
    for (int k = 0; k < 2; k++)
      if (cases[t].want[k] && !strstr(err.msg, cases[t].want[k]))
        fail_msg("%s: \"%s\" lacks \"%s\"", cases[t].why, err.msg, cases[t].want[k]);
  }
  /* 33 layers are one too many. */
  xf_layer_decl many[XF_MODEL_MAX_LAYERS + 1];
  for (int i = 0; i < XF_MODEL_MAX_LAYERS + 1; i++) many[i] = (xf_layer_decl)RELU;
  xf_model_spec s = {.arch = XF_ARCH_LAYERS, .in_h = 1, .in_w = 1, .in_c = 4, .classes = 2,
                     .n_layers = XF_MODEL_MAX_LAYERS + 1};
  memcpy(s.layers, many, sizeof(s.layers));
  xf_model *m = NULL;
  xf_errctx err = {0};
  assert_int_equal(xf_model_create(&s, &m, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.layers: 33 layers"));
}

/* A declared model's file records its list; it decodes to the same list,
 * table and parameters. */
static char *find_bytes(const void *hay, size_t n, const char *needle) {
  size_t k = strlen(needle);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp((const char *)hay + i, needle, k) == 0) return (char *)hay + i;
  return NULL;
}

static void declared_model_file_records_its_layer_list(void **state) {
  (void)state;
  xf_model_spec s = declared_spec(strided_declared, 9, 12, 12, 3, 5);
  xf_model *m, *back;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * 4), *q;
  xf_model_init_params(m, 2, p);
  uint8_t *buf;
  size_t len;
  assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
  const char *hdr = (const char *)buf + 12;
  assert_non_null(find_bytes(hdr, len - 12, "\"arch\":\"layers\""));
  assert_non_null(find_bytes(
      hdr, len - 12, "{\"filters\":4,\"kernel\":3,\"kind\":\"conv2d\",\"padding\":1,\"stride\":2}"));
  assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, NULL), XF_OK);
  assert_int_equal(xf_model_spec_of(back)->arch, XF_ARCH_LAYERS);
  int n;
  const xf_layer_decl *d = xf_model_decls(back, &n);
  assert_int_equal(n, 9);
  for (int i = 0; i < n; i++) assert_true(xf_layer_decl_equal(&d[i], &strided_declared[i]));
  for (int i = 0; i < xf_model_num_layers(m); i++)
    assert_memory_equal(xf_model_layer(m, i), xf_model_layer(back, i), sizeof(xf_layer));
  assert_memory_equal(p, q, P * 4);
  xf_model_free(back);
  free(q);
  /* A list that does not fit the header's input is refused, naming the layer. */
  xf_errctx err = {0};
  char *at = find_bytes(buf + 12, len - 12, "\"input\":[12,12,3]");
  assert_non_null(at);
  memcpy(at, "\"input\":[12, 2,3]", 17);
  assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, &err), XF_EINVAL);
  assert_non_null(strstr(err.msg, "model.layers[4].kernel: 3 is larger than its input"));
  free(buf);
  free(p);
  xf_model_free(m);
  /* A preset's header is what it always was: its name, no list. */
  xf_model_spec le = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                      .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  assert_int_equal(xf_model_create(&le, &m, NULL), XF_OK);
  p = calloc(xf_model_num_params(m), sizeof(float));
  assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
  uint32_t hlen;
  memcpy(&hlen, buf + 8, 4);
  assert_null(find_bytes(buf + 12, hlen, "declared"));
  assert_non_null(find_bytes(buf + 12, hlen, "\"arch\":\"cnn\""));
  assert_non_null(find_bytes(buf + 12, hlen, "\"preset\":\"lenet5\""));
  free(buf);
  free(p);
  xf_model_free(m);
}


/* Every kind after relu, in two lists (an embedding must come first, and an
 * add of the input needs the input's shape): ids of 4 positions embedded,
 * and a 4x4x4 image with a residual branch. */
static const xf_layer_decl embedded_declared[] = {
    {.kind = XF_DECL_EMBEDDING, .vocab = 50, .dim = 8},
    {.kind = XF_DECL_LAYERNORM},
    {.kind = XF_DECL_DROPOUT, .rate = 0.1f},
    {.kind = XF_DECL_ADD, .from = 0},
    FLAT,
    DENSE(3)};
static const xf_layer_decl residual_declared[] = {
    CONV(4, 3, 1, 1),
    {.kind = XF_DECL_GELU},
    {.kind = XF_DECL_ADD, .from = -1},
    {.kind = XF_DECL_GROUPNORM, .groups = 2},
    {.kind = XF_DECL_AVGPOOL2D, .kernel = 2, .stride = 2},
    {.kind = XF_DECL_TANH},
    {.kind = XF_DECL_SIGMOID},
    {.kind = XF_DECL_SOFTMAX},
    FLAT,
    {.kind = XF_DECL_DROPOUT, .rate = 0.3333333333f},
    DENSE(3)};

/* A model file of a declared model of the later kinds records each kind's
 * fields (rate as a number, from -1 for the input), names the table rows'
 * kinds, and reads back to the same list, table and parameters. */
static void declared_model_file_of_every_kind_round_trips(void **state) {
  (void)state;
  const struct {
    const xf_layer_decl *layers;
    int n, h, w, c;
    const char *says[4];
  } models[] = {
      {embedded_declared, 6, 1, 4, 1,
       {"{\"dim\":8,\"kind\":\"embedding\",\"vocab\":50}", "{\"kind\":\"layernorm\"}",
        "{\"kind\":\"dropout\",\"rate\":0.10000000149011612}", "{\"from\":0,\"kind\":\"add\"}"}},
      {residual_declared, 11, 4, 4, 4,
       {"{\"from\":-1,\"kind\":\"add\"}", "{\"groups\":2,\"kind\":\"groupnorm\"}",
        "{\"kernel\":2,\"kind\":\"avgpool2d\",\"stride\":2}", "\"kind\":\"softmax\""}},
  };
  for (size_t k = 0; k < sizeof(models) / sizeof(models[0]); k++) {
    xf_model_spec s = declared_spec(models[k].layers, models[k].n, models[k].h, models[k].w,
                                    models[k].c, 3);
    xf_model *m, *back;
    xf_errctx err = {0};
    if (xf_model_create(&s, &m, &err) != XF_OK) fail_msg("model %zu: %s", k, err.msg);
    size_t P = xf_model_num_params(m);
    float *p = malloc(P * 4), *q;
    xf_model_init_params(m, 3, p);
    uint8_t *buf;
    size_t len;
    assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
    uint32_t hlen;
    memcpy(&hlen, buf + 8, 4);
    for (int i = 0; i < 4; i++)
      if (!find_bytes(buf + 12, hlen, models[k].says[i]))
        fail_msg("model %zu: the header lacks %s: %.*s", k, models[k].says[i], (int)hlen,
                 (const char *)buf + 12);
    /* The layer table names every row's kind. */
    for (int i = 0; i < xf_model_num_layers(m); i++) {
      const char *kind = xf_layer_kind_name(xf_model_layer(m, i)->kind);
      assert_non_null(kind);
      char entry[64];
      snprintf(entry, sizeof(entry), "\"kind\":\"%s\"", kind);
      assert_non_null(find_bytes(buf + 12, hlen, entry));
    }
    if (xf_checkpoint_decode(buf, len, &back, &q, &err) != XF_OK)
      fail_msg("model %zu: %s", k, err.msg);
    int n;
    const xf_layer_decl *d = xf_model_decls(back, &n);
    assert_int_equal(n, models[k].n);
    for (int i = 0; i < n; i++) assert_true(xf_layer_decl_equal(&d[i], &models[k].layers[i]));
    assert_int_equal(xf_model_num_layers(back), xf_model_num_layers(m));
    for (int i = 0; i < xf_model_num_layers(m); i++)
      assert_memory_equal(xf_model_layer(m, i), xf_model_layer(back, i), sizeof(xf_layer));
    assert_memory_equal(p, q, P * 4);
    xf_model_free(back);
    free(q);
    free(buf);
    free(p);
    xf_model_free(m);
  }
}

/* A header whose later fields are out of their range, or of the wrong type,
 * is refused naming the layer and the field. */
static void declared_model_file_with_bad_later_fields_is_refused(void **state) {
  (void)state;
  static const struct {
    const char *from, *to, *says;
  } edits[] = {
      {"\"rate\":0.10000000149011612", "\"rate\":1.50000000000000000", "declared[2].rate"},
      {"\"rate\":0.10000000149011612", "\"rate\":\"0.100000001490116\"", "declared[2].rate"},
      {"\"vocab\":50", "\"vocab\":-1", "declared[0].vocab"},
      {"\"dim\":8", "\"dim\":0", "model.layers[0].dim"},
      {"\"from\":0", "\"from\":3", "model.layers[3].from"},
      /* the dropout made an add of -2, the same length */
      {"{\"kind\":\"dropout\",\"rate\":0.10000000149011612}",
       "{\"kind\":\"add\",\"from\":-2,\"x\":0.10000000149011}", "declared[2].from"},
  };
  xf_model_spec s = declared_spec(embedded_declared, 6, 1, 4, 1, 3);
  xf_model *m, *back;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  float *p = calloc(xf_model_num_params(m), sizeof(float)), *q;
  uint8_t *buf;
  size_t len;
  assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
  for (size_t i = 0; i < sizeof(edits) / sizeof(edits[0]); i++) {
    uint8_t *copy = malloc(len);
    memcpy(copy, buf, len);
    char *at = find_bytes(copy + 12, len - 12, edits[i].from);
    assert_non_null(at);
    assert_int_equal(strlen(edits[i].from), strlen(edits[i].to));
    memcpy(at, edits[i].to, strlen(edits[i].to));
    xf_errctx err = {0};
    assert_int_not_equal(xf_checkpoint_decode(copy, len, &back, &q, &err), XF_OK);
    if (!strstr(err.msg, edits[i].says))
      fail_msg("edit %zu: expected \"%s\" in: %s", i, edits[i].says, err.msg);
    free(copy);
  }
  free(buf);
  free(p);
  xf_model_free(m);
}

static void dp_steps_per_epoch_rounds_n_over_l(void **state) {
  (void)state;
  assert_int_equal(xf_dp_steps_per_epoch(100, 10), 10);
  assert_int_equal(xf_dp_steps_per_epoch(104, 10), 10);
  assert_int_equal(xf_dp_steps_per_epoch(105, 10), 11); /* halves round up */
  assert_int_equal(xf_dp_steps_per_epoch(60000, 64), 938);
  assert_int_equal(xf_dp_steps_per_epoch(7, 7), 1);
  assert_int_equal(xf_dp_steps_per_epoch(3, 7), 1); /* at least one */
  assert_int_equal(xf_dp_steps_per_epoch(0, 7), 0);
  assert_int_equal(xf_dp_steps_per_epoch(7, 0), 0);
}

static xf_noise *seeded_noise(uint8_t tag) {
  uint8_t seed[XF_NOISE_SEED_BYTES] = {0};
  seed[0] = tag;
  xf_noise *g;
  assert_int_equal(xf_noise_new_seeded(seed, &g), XF_OK);
  return g;
}

static void record_report(const xf_epoch_report *r, void *user) { *(xf_epoch_report *)user = *r; }

/* With q = 1 every record is in the step; with a clip no gradient reaches
 * and no noise, the DP step is the plain step on the mean gradient (L = n),
 * up to float rounding: here over micro-batches of 8, 8 and 4. */
static void dp_step_with_everything_sampled_and_no_noise_is_the_plain_step(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {16}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *small, *whole;
  assert_int_equal(xf_net_create(cpu, m, 8, &small, NULL), XF_OK);
  assert_int_equal(xf_net_create(cpu, m, 20, &whole, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *start = malloc(P * 4), *dp = malloc(P * 4), *plain = malloc(P * 4);
  xf_model_init_params(m, 4, start);
  float x[20 * 8];
  int32_t y[20];
  make_blobs(20, x, y, 7);
  xf_samples d = {x, y, 20, 8};
  xf_sgd_params sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-3f};
  xf_noise *g = seeded_noise(1);
  xf_dp_sgd dps = {.clip = 1e6, .noise_multiplier = 0, .expected_batch = 20, .noise = g};
  xf_epoch_report rep = {0};
  xf_train_options o = {.epochs = 1, .sgd = sgd, .dp = &dps, .on_epoch = record_report,
                        .user = &rep};
  assert_int_equal(xf_net_set_params(small, start), XF_OK);
  assert_int_equal(xf_train(small, &d, &o, NULL), XF_OK);
  assert_int_equal(xf_net_get_params(small, dp), XF_OK);
  assert_int_equal(rep.steps, 1);
  assert_int_equal(rep.samples, 20);
  xf_train_options po = {.epochs = 1, .batch_size = 20, .sgd = sgd};
  assert_int_equal(xf_net_set_params(whole, start), XF_OK);
  assert_int_equal(xf_train(whole, &d, &po, NULL), XF_OK);
  assert_int_equal(xf_net_get_params(whole, plain), XF_OK);
  for (size_t j = 0; j < P; j++) {
    assert_true(dp[j] != start[j] || plain[j] == start[j]);
    if (fabsf(dp[j] - plain[j]) > 1e-6f + 1e-5f * fabsf(plain[j] - start[j]))
      fail_msg("param %zu: DP step %.9g, plain step %.9g (from %.9g)", j, (double)dp[j],
               (double)plain[j], (double)start[j]);
  }
  xf_noise_free(g);
  xf_net_free(small);
  xf_net_free(whole);
  xf_model_free(m);
  free(start), free(dp), free(plain);
}

/* Two runs from one seed draw the same Poisson samples (the sample is drawn
 * before the noise in every step), so with lr 1 and no momentum the
 * parameters differ by exactly the noise over L: standard deviation zC/L. */
static void dp_noise_lands_with_standard_deviation_zc_over_l(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {64}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 16, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *start = malloc(P * 4), *quiet = malloc(P * 4), *noisy = malloc(P * 4);
  xf_model_init_params(m, 5, start);
  float x[64 * 8];
  int32_t y[64];
  make_blobs(64, x, y, 8);
  xf_samples d = {x, y, 64, 8};
  const double clip = 0.5, z = 1.5;
  const int L = 16;
  float *out[2] = {quiet, noisy};
  for (int run = 0; run < 2; run++) {
    xf_noise *g = seeded_noise(2);
    xf_dp_sgd dps = {.clip = clip, .noise_multiplier = run ? z : 0.0, .expected_batch = L,
                     .noise = g};
    xf_train_options o = {.epochs = 1, .sgd = {.lr = 1.0f}, .dp = &dps};
    assert_int_equal(xf_net_set_params(net, start), XF_OK);
    assert_int_equal(xf_train(net, &d, &o, NULL), XF_OK);
    assert_int_equal(xf_net_get_params(net, out[run]), XF_OK);
    xf_noise_free(g);
  }
  /* 4 steps of independent noise: the difference has sd 2 zC/L. */
  double ss = 0;
  for (size_t j = 0; j < P; j++) ss += (double)(noisy[j] - quiet[j]) * (noisy[j] - quiet[j]);
  double sd = sqrt(ss / (double)P), expect = 2 * z * clip / L;
  if (fabs(sd / expect - 1) > 0.1)
    fail_msg("noise sd %.5g, expected %.5g over %zu parameters", sd, expect, P);
  xf_net_free(net);
  xf_model_free(m);
  free(start), free(quiet), free(noisy);
}

/* With two backend threads a step's noise is drawn on a thread of its own
 * during the clipped backward (xf_dp_noiser), with one it is drawn after
 * it: the model trained is the same bits either way. */
static void dp_training_is_the_same_bits_whether_the_noise_is_drawn_beside_the_step(
    void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {64}, .n_hidden = 1,
                     .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *start = malloc(P * 4), *out[2] = {malloc(P * 4), malloc(P * 4)};
  xf_model_init_params(m, 9, start);
  static float x[300 * 8];
  static int32_t y[300];
  make_blobs(300, x, y, 13);
  xf_samples d = {x, y, 300, 8};
  for (int t = 0; t < 2; t++) {
    xf_backend *b;
    xf_backend_options opt = {XF_BACKEND_CPU, t + 1, 0};
    assert_int_equal(xf_backend_open(&opt, &b, NULL), XF_OK);
    xf_net *net;
    assert_int_equal(xf_net_create(b, m, 16, &net, NULL), XF_OK);
    assert_int_equal(xf_net_set_params(net, start), XF_OK);
    xf_noise *g = seeded_noise(4);
    xf_dp_sgd dps = {.clip = 1.0, .noise_multiplier = 1.1, .expected_batch = 24, .noise = g};
    xf_train_options o = {.epochs = 2, .sgd = {.lr = 0.3f, .momentum = 0.5f}, .dp = &dps};
    assert_int_equal(xf_train(net, &d, &o, NULL), XF_OK);
    assert_int_equal(xf_net_get_params(net, out[t]), XF_OK);
    xf_noise_free(g);
    xf_net_free(net);
    xf_backend_close(b);
  }
  assert_memory_equal(out[0], out[1], P * 4);
  assert_memory_not_equal(start, out[0], P * 4);
  xf_model_free(m);
  free(start), free(out[0]), free(out[1]);
}

static void dp_training_learns_a_separable_problem(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 16, &net, NULL), XF_OK);
  float p[8 * 3 + 3];
  xf_model_init_params(m, 3, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  static float x[600 * 8], tx[200 * 8];
  static int32_t y[600], ty[200];
  make_blobs(600, x, y, 11);
  make_blobs(200, tx, ty, 12);
  xf_samples train = {x, y, 600, 8}, test = {tx, ty, 200, 8};
  xf_noise *g = seeded_noise(3);
  /* Batches of 32 expected over micro-batches of at most 16. */
  xf_dp_sgd dps = {.clip = 1.0, .noise_multiplier = 1.0, .expected_batch = 32, .noise = g};
  xf_epoch_report rep = {0};
  xf_train_options o = {.epochs = 3, .sgd = {.lr = 0.5f, .momentum = 0.5f}, .dp = &dps,
                        .on_epoch = record_report, .user = &rep};
  assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
  assert_int_equal(rep.steps, 19); /* 600 / 32 = 18.75 */
  assert_true(rep.samples > 400 && rep.samples < 800);
  double loss, acc;
  assert_int_equal(xf_evaluate(net, &test, &loss, &acc, NULL), XF_OK);
  if (acc < 0.9) fail_msg("DP-SGD test accuracy %.3f", acc);
  xf_noise_free(g);
  xf_net_free(net);
  xf_model_free(m);
}

/* DP-SGD's noisy clipped gradient feeds every optimizer (post-processing),
 * with the FedProx term; clip_norm on top of it is refused. */
static void dp_sgd_trains_with_adam_and_refuses_clip_norm(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 16, &net, NULL), XF_OK);
  float p[8 * 3 + 3];
  xf_model_init_params(m, 3, p);
  static float x[600 * 8], tx[200 * 8];
  static int32_t y[600], ty[200];
  make_blobs(600, x, y, 11);
  make_blobs(200, tx, ty, 12);
  xf_samples train = {x, y, 600, 8}, test = {tx, ty, 200, 8};
  for (int opt = XF_OPTIMIZER_ADAM; opt <= XF_OPTIMIZER_ADAMW; opt++) {
    assert_int_equal(xf_net_set_params(net, p), XF_OK);
    xf_noise *g = seeded_noise(3);
    xf_dp_sgd dps = {.clip = 1.0, .noise_multiplier = 1.0, .expected_batch = 32, .noise = g};
    xf_train_options o = {.epochs = 3, .sgd = {.lr = 0.05f, .weight_decay = 1e-3f,
                                               .prox_mu = 0.01f},
                          .optimizer = (xf_optimizer)opt, .beta1 = 0.9f, .beta2 = 0.999f,
                          .eps = 1e-8f, .dp = &dps};
    assert_int_equal(xf_train(net, &train, &o, NULL), XF_OK);
    double loss, acc;
    assert_int_equal(xf_evaluate(net, &test, &loss, &acc, NULL), XF_OK);
    if (acc < 0.9) fail_msg("DP-SGD with optimizer %d: test accuracy %.3f", opt, acc);
    o.clip_norm = 1.0;
    xf_errctx err = {0};
    assert_int_equal(xf_train(net, &train, &o, &err), XF_EINVAL);
    assert_non_null(strstr(err.msg, "local.clip_norm cannot be used with DP-SGD"));
    xf_noise_free(g);
  }
  xf_net_free(net);
  xf_model_free(m);
}

static void dp_sgd_arguments_are_refused_with_a_reason(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_LOGREG, .in_h = 1, .in_w = 1, .in_c = 8, .classes = 3};
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 4, &net, NULL), XF_OK);
  float x[10 * 8];
  int32_t y[10];
  make_blobs(10, x, y, 9);
  xf_samples d = {x, y, 10, 8};
  xf_noise *g = seeded_noise(4);
  const struct {
    xf_dp_sgd dp;
    xf_err rc;
    const char *says;
  } cases[] = {
      {{.clip = 0, .noise_multiplier = 1, .expected_batch = 4, .noise = g}, XF_EINVAL, "clip"},
      {{.clip = NAN, .noise_multiplier = 1, .expected_batch = 4, .noise = g}, XF_EINVAL, "clip"},
      {{.clip = 1, .noise_multiplier = -1, .expected_batch = 4, .noise = g}, XF_EINVAL,
       "noise multiplier"},
      {{.clip = 1, .noise_multiplier = 1, .expected_batch = 0, .noise = g}, XF_EINVAL,
       "expected batch 0"},
      {{.clip = 1, .noise_multiplier = 1, .expected_batch = 11, .noise = g}, XF_EINVAL,
       "1 to the 10 training records"},
      {{.clip = 1, .noise_multiplier = 1, .expected_batch = 4, .noise = NULL}, XF_EINVAL,
       "noise generator"},
      {{.clip = 1e-20, .noise_multiplier = 1e-3, .expected_batch = 4, .noise = g}, XF_ERANGE,
       "z*C"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_errctx err = {0};
    /* batch_size is not looked at in DP mode. */
    xf_train_options o = {.epochs = 1, .batch_size = 0, .sgd = {.lr = 0.1f}, .dp = &cases[i].dp};
    assert_int_equal(xf_train(net, &d, &o, &err), cases[i].rc);
    if (!strstr(err.msg, cases[i].says))
      fail_msg("case %zu: message '%s' does not say '%s'", i, err.msg, cases[i].says);
  }
  xf_noise_free(g);
  xf_net_free(net);
  xf_model_free(m);
}

/* ---- model files ----------------------------------------------------------- */

/* The downlink's half-precision model files: half the parameter bytes, the
 * values rounded to nearest even, and the digest of what a reader decodes
 * (which is what the encoder reports), so a site can check it. */
static void half_model_files_carry_rounded_values_and_their_digest(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {9}, .n_hidden = 1,
                     .in_h = 3, .in_w = 3, .in_c = 1, .classes = 3};
  xf_model *m, *back;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * 4), *q, *want = malloc(P * 4);
  uint16_t *h = malloc(P * 2);
  xf_model_init_params(m, 3, p);
  uint8_t *f32, *buf;
  size_t len32, len;
  assert_int_equal(xf_checkpoint_encode(m, p, &f32, &len32, NULL), XF_OK);
  for (int bf16 = 0; bf16 <= 1; bf16++) {
    xf_digest stated, got;
    assert_int_equal(xf_checkpoint_encode_as(m, p, bf16 ? XF_CHECKPOINT_BF16 : XF_CHECKPOINT_F16,
                                             &buf, &len, &stated, NULL),
                     XF_OK);
    assert_true(len32 - len >= 2 * P - 16); /* the header differs by a few bytes */
    assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, NULL), XF_OK);
    assert_int_equal(xf_codec_to_half(p, P, bf16, h), XF_OK);
    xf_codec_from_half(h, P, bf16, want);
    assert_memory_equal(q, want, P * 4);
    xf_params_digest(q, P, &got);
    assert_memory_equal(got.bytes, stated.bytes, XF_DIGEST_BYTES);
    xf_model_free(back);
    free(q);
    xf_errctx err = {0};
    buf[len - 1] ^= 0x01;
    assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, &err), XF_EINTEGRITY);
    free(buf);
  }
  p[0] = NAN;
  xf_errctx err = {0};
  assert_int_not_equal(xf_checkpoint_encode_as(m, p, XF_CHECKPOINT_F16, &buf, &len, NULL, &err),
                       XF_OK);
  free(f32);
  free(h);
  free(want);
  free(p);
  xf_model_free(m);
}

/* The loss travels in the model file (it sets the output width), and a
 * cross-entropy model's file does not mention it, as before the field. */
static void model_file_carries_the_loss(void **state) {
  (void)state;
  for (int loss = XF_LOSS_CROSS_ENTROPY; loss <= XF_LOSS_MSE; loss++) {
    xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {3}, .n_hidden = 1, .in_h = 1, .in_w = 1,
                       .in_c = 4, .classes = 2, .loss = (xf_loss)loss};
    xf_model *m, *back;
    assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
    assert_int_equal(xf_model_outputs(m), loss == XF_LOSS_CROSS_ENTROPY ? 2 : 1);
    size_t P = xf_model_num_params(m);
    float *p = malloc(P * 4), *q;
    xf_model_init_params(m, 1, p);
    uint8_t *buf;
    size_t len;
    assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
    bool says_loss = false;
    for (size_t i = 0; i + 6 <= len && !says_loss; i++)
      says_loss = memcmp(buf + i, "\"loss\"", 6) == 0;
    assert_true(says_loss == (loss != XF_LOSS_CROSS_ENTROPY));
    assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, NULL), XF_OK);
    assert_int_equal(xf_model_spec_of(back)->loss, loss);
    assert_int_equal(xf_model_num_params(back), P);
    xf_model_free(back);
    free(q);
    free(buf);
    free(p);
    xf_model_free(m);
  }
}

static void model_file_roundtrips_and_rejects_damage(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_MLP, .hidden = {7, 5}, .n_hidden = 2,
                     .in_h = 2, .in_w = 3, .in_c = 1, .classes = 4};
  xf_model *m, *back;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * 4), *q;
  xf_model_init_params(m, 1, p);
  uint8_t *buf;
  size_t len;
  assert_int_equal(xf_checkpoint_encode(m, p, &buf, &len, NULL), XF_OK);
  assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, NULL), XF_OK);
  assert_int_equal(xf_model_num_params(back), P);
  assert_string_equal(xf_model_describe(back), "mlp(7,5)");
  assert_memory_equal(p, q, P * 4);
  xf_model_free(back);
  free(q);
  xf_errctx err = {0};
  /* One flipped parameter bit: the digest catches it. */
  buf[len - 3] ^= 0x10;
  assert_int_equal(xf_checkpoint_decode(buf, len, &back, &q, &err), XF_EINTEGRITY);
  buf[len - 3] ^= 0x10;
  /* Cut short: truncated, not a crash. */
  assert_int_equal(xf_checkpoint_decode(buf, len - 1, &back, &q, &err), XF_ETRUNCATED);
  assert_null(back);
  /* Not a model at all. */
  assert_int_equal(xf_checkpoint_decode((const uint8_t *)"hello", 5, &back, &q, &err), XF_EFORMAT);
  free(buf);

  char dir[256], path[300];
  assert_int_equal(xf_test_mkdtemp(dir, sizeof(dir), "ckpt"), 0);
  snprintf(path, sizeof(path), "%s/model.xfm", dir);
  assert_int_equal(xf_checkpoint_save_file(path, m, p, NULL), XF_OK);
  assert_int_equal(xf_checkpoint_load_file(path, &back, &q, NULL), XF_OK);
  assert_memory_equal(p, q, P * 4);
  xf_model_free(back);
  free(q);

  char blobs[300];
  snprintf(blobs, sizeof(blobs), "%s/blobs", dir);
  xf_blob_store *store;
  assert_int_equal(xf_blob_store_open(blobs, &store, NULL), XF_OK);
  xf_digest d;
  assert_int_equal(xf_checkpoint_save_blob(store, m, p, &d, NULL), XF_OK);
  assert_int_equal(xf_checkpoint_load_blob(store, &d, &back, &q, NULL), XF_OK);
  assert_memory_equal(p, q, P * 4);
  xf_model_free(back);
  free(q);
  xf_blob_store_close(store);
  xf_test_remove_tree(dir);
  xf_model_free(m);
  free(p);
}

/* Every allocation of model, net, training and model-file code can fail: each
 * failure must come back as XF_ENOMEM with everything freed (the sanitizer
 * pass checks the freeing), and enough room must eventually succeed. */
static void allocation_failures_are_reported_not_crashed(void **state) {
  (void)state;
  xf_model_spec s = {.arch = XF_ARCH_CNN, .preset = XF_CNN_LENET5,
                     .in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  static float x[4 * 784];
  int32_t y[4] = {1, 2, 3, 4};
  xf_samples d = {x, y, 4, 784};
  xf_train_options o = {.epochs = 1, .batch_size = 2, .sgd = {.lr = 0.1f, .prox_mu = 0.1f}};
  bool succeeded = false;
  for (long n = 0; n < 200 && !succeeded; n++) {
    xf_model *m = NULL;
    xf_net *net = NULL;
    uint8_t *buf = NULL;
    size_t len;
    float *p = NULL;
    xf_alloc_fail_after(n);
    xf_err rc = xf_model_create(&s, &m, NULL);
    if (rc == XF_OK) rc = xf_net_create(cpu, m, 2, &net, NULL);
    if (rc == XF_OK) {
      p = xf_malloc(xf_model_num_params(m) * sizeof(float));
      rc = p ? XF_OK : XF_ENOMEM;
    }
    if (rc == XF_OK) {
      xf_model_init_params(m, 1, p);
      rc = xf_net_set_params(net, p);
    }
    if (rc == XF_OK) rc = xf_train(net, &d, &o, NULL);
    double loss;
    int correct;
    if (rc == XF_OK) rc = xf_net_run_clipped(net, x, y, 2, 1.0, false, &loss, &correct);
    if (rc == XF_OK) rc = xf_checkpoint_encode(m, p, &buf, &len, NULL);
    xf_alloc_fail_reset();
    if (rc == XF_OK) succeeded = true;
    else assert_int_equal(rc, XF_ENOMEM);
    xf_free(buf);
    xf_free(p);
    xf_net_free(net);
    xf_model_free(m);
  }
  assert_true(succeeded);
}

/* ---- the other layer kinds ---------------------------------------------------
 * One small model per kind, the kind between parameter layers so that the
 * parameter gradients checked below flow back through it: finite
 * differences check its backward, brute force its per-example clipping. */

#define AVGPOOL(k, s) {.kind = XF_DECL_AVGPOOL2D, .kernel = (k), .stride = (s)}
#define DROPOUT(r) {.kind = XF_DECL_DROPOUT, .rate = (r)}
#define LAYERNORM {.kind = XF_DECL_LAYERNORM}
#define GROUPNORM(g) {.kind = XF_DECL_GROUPNORM, .groups = (g)}
#define EMBEDDING(v, d) {.kind = XF_DECL_EMBEDDING, .vocab = (v), .dim = (d)}
#define GELU {.kind = XF_DECL_GELU}
#define TANH {.kind = XF_DECL_TANH}
#define SIGMOID {.kind = XF_DECL_SIGMOID}
#define SOFTMAX {.kind = XF_DECL_SOFTMAX}
#define ADD(f) {.kind = XF_DECL_ADD, .from = (f)}

typedef struct layer_case {
  const char *name;
  int h, w, c, classes;
  int n;
  xf_layer_decl layers[12];
} layer_case;

static const layer_case layer_cases[] = {
    {"gelu", 1, 1, 10, 3, 3, {DENSE(8), GELU, DENSE(3)}},
    {"tanh", 1, 1, 10, 3, 3, {DENSE(8), TANH, DENSE(3)}},
    {"sigmoid", 1, 1, 10, 3, 3, {DENSE(8), SIGMOID, DENSE(3)}},
    {"softmax", 1, 1, 10, 3, 3, {DENSE(8), SOFTMAX, DENSE(3)}},
    {"layernorm (flat)", 1, 1, 10, 3, 4, {DENSE(8), LAYERNORM, TANH, DENSE(3)}},
    {"layernorm (image)", 6, 6, 2, 3, 4, {CONV(4, 3, 1, 1), LAYERNORM, FLAT, DENSE(3)}},
    {"groupnorm", 6, 6, 2, 3, 5, {CONV(4, 3, 1, 1), GROUPNORM(2), TANH, FLAT, DENSE(3)}},
    {"groupnorm (one group)", 6, 6, 2, 3, 4, {CONV(4, 3, 1, 1), GROUPNORM(1), FLAT, DENSE(3)}},
    {"avgpool2d", 6, 6, 2, 3, 4, {CONV(4, 3, 1, 1), AVGPOOL(2, 2), FLAT, DENSE(3)}},
    {"avgpool2d (overlapping)", 7, 7, 2, 3, 4, {CONV(3, 3, 1, 0), AVGPOOL(3, 2), FLAT, DENSE(3)}},
    {"embedding", 1, 1, 6, 3, 3, {EMBEDDING(7, 4), FLAT, DENSE(3)}},
    {"add (residual)", 6, 6, 2, 3, 8,
     {CONV(4, 3, 1, 1), TANH, CONV(4, 3, 1, 1), GROUPNORM(2), ADD(1), GELU, FLAT, DENSE(3)}},
    {"add (the input)", 1, 1, 10, 3, 4, {DENSE(10), TANH, ADD(-1), DENSE(3)}},
};

static const layer_case dropout_case = {"dropout", 1, 1, 10, 3, 4,
                                        {DENSE(8), TANH, DROPOUT(0.4f), DENSE(3)}};

static xf_model_spec layer_case_spec(const layer_case *c) {
  return declared_spec(c->layers, c->n, c->h, c->w, c->c, c->classes);
}

static void every_layer_kind_gradients_match_finite_differences(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(layer_cases) / sizeof(layer_cases[0]); i++) {
    xf_model_spec s = layer_case_spec(&layer_cases[i]);
    print_message("%s\n", layer_cases[i].name);
    /* Tanh, gelu and the norms are smooth: no kinks for the step to cross. */
    check_model_h(&s, 40, 1e-2f);
  }
}

/* Dropout's gradient with the mask of the pass it was drawn for: the
 * finite differences redraw the same mask (seed 1, first pass). */
static void dropout_gradient_matches_finite_differences_under_its_mask(void **state) {
  (void)state;
  xf_model_spec s = layer_case_spec(&dropout_case);
  check_model_h(&s, 40, 1e-2f);
}

static void every_layer_kind_clipped_gradient_matches_brute_force(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof(layer_cases) / sizeof(layer_cases[0]); i++) {
    xf_model_spec s = layer_case_spec(&layer_cases[i]);
    print_message("%s\n", layer_cases[i].name);
    check_clipped(&s, 40 + i);
  }
}

/* DP-SGD through dropout: one example per pass, so that the clipped pass and
 * the example's own gradient draw the same mask; the clipped gradient is
 * the example's own scaled to the clip, and accumulating examples sums them. */
static void dropout_clipped_gradient_is_each_examples_own_scaled(void **state) {
  (void)state;
  xf_model_spec s = layer_case_spec(&dropout_case);
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 1, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
  float *p = malloc(P * sizeof(float)), *own = malloc(P * sizeof(float));
  float *got = malloc(P * sizeof(float));
  double *sum = calloc(P, sizeof(double));
  xf_model_init_params(m, 12, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  xf_rng rng;
  xf_rng_seed(&rng, 12, 1);
  float *x = rand_floats(&rng, 3 * in, 1);
  int32_t y[3] = {0, 2, 1};
  double loss;
  int correct;
  const double clip = 0.05;
  for (int e = 0; e < 3; e++) {
    xf_net_seed_dropout(net, 100 + (uint64_t)e);
    assert_int_equal(xf_net_run(net, x + e * in, y + e, 1, true, &loss, &correct), XF_OK);
    assert_int_equal(xf_net_get_grads(net, own), XF_OK);
    double norm = sqrt(dot(own, own, P)), f = norm > clip ? clip / norm : 1.0;
    assert_true(norm > clip); /* the clip binds */
    for (size_t j = 0; j < P; j++) sum[j] += f * own[j];
    xf_net_seed_dropout(net, 100 + (uint64_t)e);
    assert_int_equal(xf_net_run_clipped(net, x + e * in, y + e, 1, clip, false, &loss, &correct),
                     XF_OK);
    assert_int_equal(xf_net_get_grads(net, got), XF_OK);
    for (size_t j = 0; j < P; j++) assert_float_equal(got[j], f * own[j], 1e-6 + 1e-4 * fabs(own[j]));
  }
  for (int e = 0; e < 3; e++) {
    xf_net_seed_dropout(net, 100 + (uint64_t)e);
    assert_int_equal(xf_net_run_clipped(net, x + e * in, y + e, 1, clip, e > 0, &loss, &correct),
                     XF_OK);
  }
  assert_int_equal(xf_net_get_grads(net, got), XF_OK);
  for (size_t j = 0; j < P; j++) assert_float_equal(got[j], sum[j], 1e-6 + 1e-4 * fabs(sum[j]));
  xf_net_free(net);
  xf_model_free(m);
  free(p), free(own), free(got), free(sum), free(x);
}

/* Dropout zeroes about `rate` of the values while training and scales the
 * rest by 1/(1 - rate); in evaluation it is the identity. The mask follows
 * the seed, and a new pass draws a new one. */
static void dropout_drops_while_training_and_passes_through_in_eval(void **state) {
  (void)state;
  enum { N = 4096 };
  float *mask = malloc(N * sizeof(float)), *again = malloc(N * sizeof(float));
  xf_k_dropout_mask(cpu, mask, N, 0.25f, 7);
  int dropped = 0;
  for (int i = 0; i < N; i++) {
    if (mask[i] == 0.0f) dropped++;
    else assert_float_equal(mask[i], 1.0f / 0.75f, 0);
  }
  assert_in_range(dropped, N / 4 - 150, N / 4 + 150);
  xf_k_dropout_mask(cpu, again, N, 0.25f, 7);
  assert_memory_equal(mask, again, N * sizeof(float));
  xf_k_dropout_mask(cpu, again, N, 0.25f, 8);
  assert_true(memcmp(mask, again, N * sizeof(float)) != 0);
  xf_k_dropout_mask(cpu, again, N, 0.0f, 7);
  for (int i = 0; i < N; i++) assert_float_equal(again[i], 1.0f, 0);

  xf_model_spec s = layer_case_spec(&dropout_case);
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 2, &net, NULL), XF_OK);
  size_t P = xf_model_num_params(m);
  float *p = malloc(P * sizeof(float));
  xf_model_init_params(m, 3, p);
  assert_int_equal(xf_net_set_params(net, p), XF_OK);
  float x[20], a[6], b[6];
  for (int i = 0; i < 20; i++) x[i] = (float)(i % 7) / 7.0f - 0.4f;
  int32_t y[2] = {0, 1};
  assert_int_equal(xf_net_logits(net, x, 2, a), XF_OK);
  assert_int_equal(xf_net_logits(net, x, 2, b), XF_OK);
  assert_memory_equal(a, b, sizeof(a));
  double l1, l2, l3;
  int c;
  xf_net_seed_dropout(net, 5);
  assert_int_equal(xf_net_run(net, x, y, 2, true, &l1, &c), XF_OK);
  assert_int_equal(xf_net_run(net, x, y, 2, true, &l2, &c), XF_OK);
  xf_net_seed_dropout(net, 5);
  assert_int_equal(xf_net_run(net, x, y, 2, true, &l3, &c), XF_OK);
  assert_true(l1 == l3);
  assert_true(l1 != l2);
  xf_net_free(net);
  xf_model_free(m);
  free(p), free(mask), free(again);
}

/* The norms' forward: each group's values come out with mean 0 and
 * variance 1 (before gamma and beta), for layernorm each position's
 * channels. */
static void norms_standardize_each_group(void **state) {
  (void)state;
  enum { N = 2, P = 5, C = 6, G = 3 };
  xf_rng rng;
  xf_rng_seed(&rng, 4, 0);
  float *x = rand_floats(&rng, N * P * C, 3), y[N * P * C], xhat[N * P * C], rstd[N * P];
  float gamma[C], beta[C];
  for (int c = 0; c < C; c++) gamma[c] = 1.0f, beta[c] = 0.0f;
  xf_norm_shape gn = {.n = N, .p = P, .c = C, .groups = G, .eps = XF_NORM_EPS};
  xf_k_norm_fwd(cpu, &gn, x, gamma, beta, y, xhat, rstd);
  for (int r = 0; r < N; r++)
    for (int g = 0; g < G; g++) {
      double s = 0, sq = 0;
      for (int q = 0; q < P; q++)
        for (int k = 0; k < C / G; k++) {
          double v = y[(r * P + q) * C + g * (C / G) + k];
          s += v, sq += v * v;
        }
      assert_float_equal(s / (P * C / G), 0.0, 1e-6);
      assert_float_equal(sq / (P * C / G), 1.0, 1e-3);
    }
  xf_norm_shape ln = {.n = N * P, .p = 1, .c = C, .groups = 1, .eps = XF_NORM_EPS};
  for (int c = 0; c < C; c++) gamma[c] = 2.0f, beta[c] = 1.0f;
  xf_k_norm_fwd(cpu, &ln, x, gamma, beta, y, xhat, rstd);
  for (int r = 0; r < N * P; r++) {
    double s = 0;
    for (int c = 0; c < C; c++) s += y[r * C + c];
    assert_float_equal(s / C, 1.0, 1e-5); /* beta */
  }
  free(x);
}

/* An embedding model refuses records that are not ids, naming where. */
static void embedding_refuses_values_that_are_not_ids(void **state) {
  (void)state;
  xf_model_spec s = layer_case_spec(&layer_cases[10]);
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  assert_int_equal(xf_model_layer(m, 0)->kind, XF_LAYER_EMBEDDING);
  float ok[6] = {0, 1, 6, 6, 2, 3}, bad[12] = {0, 1, 2, 3, 4, 5, 0, 1, 2.5f, 3, 4, 5};
  size_t r = 99, f = 99;
  assert_int_equal(xf_model_check_ids(m, ok, 1, &r, &f), XF_OK);
  assert_int_equal(xf_model_check_ids(m, bad, 2, &r, &f), XF_ERANGE);
  assert_int_equal(r, 1);
  assert_int_equal(f, 2);
  bad[8] = 7; /* vocab is 7 */
  assert_int_equal(xf_model_check_ids(m, bad, 2, NULL, NULL), XF_ERANGE);
  bad[8] = -1;
  assert_int_equal(xf_model_check_ids(m, bad, 2, NULL, NULL), XF_ERANGE);
  bad[8] = NAN;
  assert_int_equal(xf_model_check_ids(m, bad, 2, NULL, NULL), XF_ERANGE);
  xf_net *net;
  assert_int_equal(xf_net_create(cpu, m, 2, &net, NULL), XF_OK);
  int32_t y[2] = {0, 1};
  double loss;
  int c;
  assert_int_equal(xf_net_run(net, bad, y, 2, true, &loss, &c), XF_ERANGE);
  float logits[6];
  assert_int_equal(xf_net_logits(net, bad, 2, logits), XF_ERANGE);
  xf_samples data = {bad, y, 2, 6};
  xf_errctx err = {0};
  xf_train_options o = {.epochs = 1, .batch_size = 2, .sgd = {.lr = 0.1f}};
  assert_int_equal(xf_train(net, &data, &o, &err), XF_ERANGE);
  assert_non_null(strstr(err.msg, "training record 1, feature 2"));
  assert_non_null(strstr(err.msg, "0 to 6"));
  xf_net_free(net);
  xf_model_free(m);
}

/* The shapes the new kinds take are checked at build, naming the layer. */
static void new_layer_kinds_that_do_not_fit_are_refused_naming_the_layer(void **state) {
  (void)state;
  static const struct {
    const char *what;
    int h, w, c;
    xf_layer_decl layers[6];
    int n;
    const char *want[2];
  } cases[] = {
      {"groups not dividing the channels", 6, 6, 2, {CONV(6, 3, 1, 1), GROUPNORM(4), FLAT, DENSE(3)}, 4,
       {"model.layers[1].groups: 4 groups", "divisor of 6"}},
      {"groupnorm on a flattened image", 6, 6, 2, {CONV(4, 3, 1, 1), FLAT, GROUPNORM(2), DENSE(3)}, 4,
       {"model.layers[2]: groupnorm", "before the flatten"}},
      {"layernorm on a flattened image", 6, 6, 2, {CONV(4, 3, 1, 1), FLAT, LAYERNORM, DENSE(3)}, 4,
       {"model.layers[2]: layernorm", "after a dense layer"}},
      {"embedding not first", 1, 1, 4, {DENSE(4), EMBEDDING(5, 2), FLAT, DENSE(3)}, 4,
       {"model.layers[1]", "must be the first layer"}},
      {"add from a later layer", 1, 1, 4, {DENSE(4), ADD(2), DENSE(3)}, 3,
       {"model.layers[1].from: 2", "earlier layer (0 to 0)"}},
      {"add of another shape", 6, 6, 2, {CONV(4, 3, 1, 1), CONV(4, 3, 1, 0), ADD(0), FLAT, DENSE(3)}, 5,
       {"model.layers[2].from: the output of that layer is 6x6x4", "input is 4x4x4"}},
      {"dropout rate of 1", 1, 1, 4, {DENSE(4), DROPOUT(1.0f), DENSE(3)}, 3,
       {"model.layers[1].rate: 1", "below 1"}},
      {"avgpool larger than its input", 4, 4, 1, {AVGPOOL(5, 1), FLAT, DENSE(3)}, 3,
       {"model.layers[0].kernel: 5 is larger than its input 4x4", ""}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_model_spec s = declared_spec(cases[i].layers, cases[i].n, cases[i].h, cases[i].w,
                                    cases[i].c, 3);
    xf_model *m = NULL;
    xf_errctx err = {0};
    if (xf_model_create(&s, &m, &err) != XF_EINVAL) fail_msg("%s: accepted", cases[i].what);
    for (int k = 0; k < 2; k++)
      if (!strstr(err.msg, cases[i].want[k]))
        fail_msg("%s: message \"%s\" lacks \"%s\"", cases[i].what, err.msg, cases[i].want[k]);
  }
}

/* The parameters of the new kinds: norms start at gamma 1 and beta 0,
 * embeddings at N(0, 1), as PyTorch's do; the layer table names them. */
static void new_layer_kinds_initialize_as_pytorch_does(void **state) {
  (void)state;
  xf_model_spec s = layer_case_spec(&layer_cases[6]); /* groupnorm */
  xf_model *m;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  const xf_layer *gn = xf_model_layer(m, 1);
  assert_int_equal(gn->kind, XF_LAYER_GROUPNORM);
  assert_string_equal(gn->name, "gn1");
  assert_int_equal(gn->weight_count, 4);
  assert_int_equal(gn->bias_count, 4);
  float *p = malloc(xf_model_num_params(m) * sizeof(float));
  xf_model_init_params(m, 1, p);
  for (int c = 0; c < 4; c++) {
    assert_float_equal(p[gn->weight_offset + c], 1.0f, 0);
    assert_float_equal(p[gn->bias_offset + c], 0.0f, 0);
  }
  free(p);
  xf_model_free(m);
  s = layer_case_spec(&layer_cases[10]); /* embedding 7 x 4 */
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  const xf_layer *e = xf_model_layer(m, 0);
  assert_int_equal(e->weight_count, 28);
  assert_int_equal(e->bias_count, 0);
  assert_int_equal(e->out_w, 6);
  assert_int_equal(e->out_c, 4);
  p = malloc(xf_model_num_params(m) * sizeof(float));
  xf_model_init_params(m, 1, p);
  double sq = 0;
  for (int j = 0; j < 28; j++) sq += (double)p[j] * p[j];
  assert_in_range((long)(sq / 28 * 100), 40, 250); /* variance near 1 */
  free(p);
  xf_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(dense_layer_gradients_match_finite_differences),
      cmocka_unit_test(conv_layer_gradients_match_finite_differences),
      cmocka_unit_test(relu_gradient_matches_finite_differences),
      cmocka_unit_test(maxpool_gradient_matches_finite_differences),
      cmocka_unit_test(softmax_xent_gradient_matches_finite_differences),
      cmocka_unit_test(softmax_xent_is_stable_for_large_logits),
      cmocka_unit_test(logreg_gradients_match_finite_differences),
      cmocka_unit_test(mlp_gradients_match_finite_differences),
      cmocka_unit_test(lenet5_gradients_match_finite_differences),
      cmocka_unit_test(fedavg_cnn_gradients_match_finite_differences),
      cmocka_unit_test(model_presets_have_the_published_sizes),
      cmocka_unit_test(cnn_on_tabular_data_is_refused_with_a_reason),
      cmocka_unit_test(declared_lenet5_is_the_preset_lenet5),
      cmocka_unit_test(declared_strided_cnn_gradients_match_finite_differences),
      cmocka_unit_test(declared_strided_cnn_clipped_gradient_matches_brute_force),
      cmocka_unit_test(declared_strided_cnn_trains),
      cmocka_unit_test(every_layer_kind_gradients_match_finite_differences),
      cmocka_unit_test(dropout_gradient_matches_finite_differences_under_its_mask),
      cmocka_unit_test(every_layer_kind_clipped_gradient_matches_brute_force),
      cmocka_unit_test(dropout_clipped_gradient_is_each_examples_own_scaled),
      cmocka_unit_test(dropout_drops_while_training_and_passes_through_in_eval),
      cmocka_unit_test(norms_standardize_each_group),
      cmocka_unit_test(embedding_refuses_values_that_are_not_ids),
      cmocka_unit_test(new_layer_kinds_that_do_not_fit_are_refused_naming_the_layer),
      cmocka_unit_test(new_layer_kinds_initialize_as_pytorch_does),
      cmocka_unit_test(declared_models_that_do_not_fit_are_refused_naming_the_layer),
      cmocka_unit_test(declared_model_file_records_its_layer_list),
      cmocka_unit_test(declared_model_file_of_every_kind_round_trips),
      cmocka_unit_test(declared_model_file_with_bad_later_fields_is_refused),
      cmocka_unit_test(init_is_seeded_and_bounded_by_fan_in),
      cmocka_unit_test(sgd_step_follows_the_pytorch_formula_with_prox),
      cmocka_unit_test(nesterov_step_matches_the_hand_computed_steps),
      cmocka_unit_test(adam_follows_the_textbook_steps_on_a_quadratic),
      cmocka_unit_test(adamw_decay_is_decoupled_and_adam_decay_is_l2),
      cmocka_unit_test(scalar_loss_gradients_match_finite_differences),
      cmocka_unit_test(scalar_losses_have_their_closed_forms),
      cmocka_unit_test(bce_and_mse_mlp_gradients_match_finite_differences),
      cmocka_unit_test(every_optimizer_trains_an_mlp),
      cmocka_unit_test(clip_grad_norm_scales_only_long_gradients),
      cmocka_unit_test(bce_and_mse_train_and_report_their_accuracy),
      cmocka_unit_test(dp_sgd_trains_with_adam_and_refuses_clip_norm),
      cmocka_unit_test(l2norm_axpy_scale_fill_copy),
      cmocka_unit_test(training_learns_a_separable_problem),
      cmocka_unit_test(same_seed_and_threads_give_identical_parameters),
      cmocka_unit_test(training_stops_before_the_next_batch_when_asked),
      cmocka_unit_test(out_of_range_labels_are_refused_before_training),
      cmocka_unit_test(clipped_gradient_matches_per_example_brute_force),
      cmocka_unit_test(dp_steps_per_epoch_rounds_n_over_l),
      cmocka_unit_test(dp_step_with_everything_sampled_and_no_noise_is_the_plain_step),
      cmocka_unit_test(dp_noise_lands_with_standard_deviation_zc_over_l),
      cmocka_unit_test(dp_training_is_the_same_bits_whether_the_noise_is_drawn_beside_the_step),
      cmocka_unit_test(dp_training_learns_a_separable_problem),
      cmocka_unit_test(dp_sgd_arguments_are_refused_with_a_reason),
      cmocka_unit_test(model_file_roundtrips_and_rejects_damage),
      cmocka_unit_test(model_file_carries_the_loss),
      cmocka_unit_test(half_model_files_carry_rounded_values_and_their_digest),
      cmocka_unit_test(allocation_failures_are_reported_not_crashed),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
