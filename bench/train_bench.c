/* SPDX-License-Identifier: Apache-2.0 */
/* Training-step throughput of xfed's kernels: samples per second for a model
 * at a batch size (forward, loss, backward and SGD step, as in xf_train), the
 * share of step time spent in GEMM, and the backend's raw SGEMM rate as the
 * physical reference. Prints one JSON object per line for bench/train.sh.
 *
 * usage: xfed-bench-train --model mlp|lenet5|fedavg-cnn --batch N
 *                         [--steps N] [--threads N] [--sgemm N] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "kernels/backend.h"
#include "kernels/net.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int die(const char *what, const xf_errctx *err) {
  fprintf(stderr, "xfed-bench-train: %s: %s\n", what, err->msg[0] ? err->msg : "failed");
  return 1;
}

/* GFLOP/s of an n x n x n SGEMM on the backend, best of three. */
static double sgemm_rate(xf_backend *b, int n) {
  float *a, *bb, *c;
  size_t bytes = (size_t)n * n * sizeof(float);
  if (xf_backend_alloc(b, bytes, (void **)&a) || xf_backend_alloc(b, bytes, (void **)&bb) ||
      xf_backend_alloc(b, bytes, (void **)&c))
    return 0;
  xf_k_fill(b, a, 0.5f, (size_t)n * n);
  xf_k_fill(b, bb, 0.25f, (size_t)n * n);
  xf_k_gemm(b, false, false, n, n, n, 1.0f, a, n, bb, n, 0.0f, c, n); /* warm-up */
  double best = 0;
  for (int rep = 0; rep < 3; rep++) {
    if (xf_backend_sync(b) != XF_OK) break;
    double t = now();
    xf_k_gemm(b, false, false, n, n, n, 1.0f, a, n, bb, n, 0.0f, c, n);
    if (xf_backend_sync(b) != XF_OK) break;
    double rate = 2.0 * n * (double)n * n / (now() - t) / 1e9;
    if (rate > best) best = rate;
  }
  xf_backend_free(b, a);
  xf_backend_free(b, bb);
  xf_backend_free(b, c);
  return best;
}

int main(int argc, char **argv) {
  const char *model_name = "mlp";
  long batch = 64, steps = 300, threads = 0, sgemm_n = 0;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"steps", required_argument, 0, 's'},
                                       {"threads", required_argument, 0, 't'},
                                       {"sgemm", required_argument, 0, 'g'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'm': model_name = optarg; break;
    case 'b': batch = atol(optarg); break;
    case 's': steps = atol(optarg); break;
    case 't': threads = atol(optarg); break;
    case 'g': sgemm_n = atol(optarg); break;
    default:
      fprintf(stderr, "usage: xfed-bench-train --model mlp|lenet5|fedavg-cnn --batch N "
                      "[--steps N] [--threads N] [--sgemm N]\n");
      return 2;
    }
  }
  if (batch < 1 || batch > 65536 || steps < 1) {
    fprintf(stderr, "xfed-bench-train: --batch must be 1..65536 and --steps positive\n");
    return 2;
  }
  xf_model_spec spec = {.in_h = 28, .in_w = 28, .in_c = 1, .classes = 10};
  if (strcmp(model_name, "mlp") == 0) {
    spec.arch = XF_ARCH_MLP;
    spec.n_hidden = 2;
    spec.hidden[0] = spec.hidden[1] = 200;
  } else if (strcmp(model_name, "lenet5") == 0) {
    spec.arch = XF_ARCH_CNN;
    spec.preset = XF_CNN_LENET5;
  } else if (strcmp(model_name, "fedavg-cnn") == 0) {
    spec.arch = XF_ARCH_CNN;
    spec.preset = XF_CNN_FEDAVG;
  } else {
    fprintf(stderr, "xfed-bench-train: unknown model '%s'\n", model_name);
    return 2;
  }
  xf_errctx err = {0};
  xf_model *m;
  xf_backend *b;
  xf_net *net;
  if (xf_model_create(&spec, &m, &err)) return die("model", &err);
  if (xf_backend_open_env((int)threads, &b, &err)) return die("backend", &err);
  if (xf_net_create(b, m, (int)batch, &net, &err)) return die("net", &err);
  size_t P = xf_model_num_params(m), in = xf_model_input_size(m);
  float *p = malloc(P * sizeof(float)), *x = malloc((size_t)batch * in * sizeof(float));
  int32_t *y = malloc((size_t)batch * sizeof(int32_t));
  xf_rng rng;
  xf_rng_seed(&rng, 1, 0);
  for (size_t i = 0; i < (size_t)batch * in; i++) x[i] = (float)xf_rng_uniform(&rng);
  for (long i = 0; i < batch; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
  xf_model_init_params(m, 1, p);
  if (xf_net_set_params(net, p)) return die("upload", &err);
  xf_sgd_params sgd = {.lr = 0.01f, .momentum = 0.9f};
  double loss;
  int correct;
  long warm = steps / 10 + 1;
  for (long i = 0; i < warm; i++) {
    if (xf_net_run(net, x, y, (int)batch, true, &loss, &correct)) return die("step", &err);
    xf_net_sgd_step(net, &sgd);
  }
  if (xf_backend_sync(b)) return die("sync", &err);
  double t0 = now();
  for (long i = 0; i < steps; i++) {
    if (xf_net_run(net, x, y, (int)batch, true, &loss, &correct)) return die("step", &err);
    xf_net_sgd_step(net, &sgd);
  }
  if (xf_backend_sync(b)) return die("sync", &err);
  double secs = now() - t0;
  /* A second, profiled pass gives the GEMM share without slowing the first. */
  long prof_steps = steps / 2 + 1;
  xf_backend_profile(b, true);
  double t1 = now();
  for (long i = 0; i < prof_steps; i++) {
    if (xf_net_run(net, x, y, (int)batch, true, &loss, &correct)) return die("step", &err);
    xf_net_sgd_step(net, &sgd);
  }
  if (xf_backend_sync(b)) return die("sync", &err);
  double prof_secs = now() - t1, gemm = xf_backend_gemm_seconds(b);
  xf_backend_profile(b, false);
  double rate = sgemm_n > 0 ? sgemm_rate(b, (int)sgemm_n) : 0;
  printf("{\"impl\": \"xfed\", \"backend\": \"%s\", \"device\": \"%s\", \"threads\": %d, "
         "\"model\": \"%s\", \"batch\": %ld, \"steps\": %ld, \"samples_per_s\": %.1f, "
         "\"gemm_share\": %.3f, \"sgemm_n\": %ld, \"sgemm_gflops\": %.1f, \"final_loss\": %.4f}\n",
         xf_backend_name(b), xf_backend_describe(b), xf_backend_threads(b), model_name, batch,
         steps, (double)steps * batch / secs, gemm / prof_secs, sgemm_n, rate, loss / batch);
  xf_net_free(net);
  xf_backend_close(b);
  xf_model_free(m);
  free(p);
  free(x);
  free(y);
  return 0;
}
