/* SPDX-License-Identifier: Apache-2.0 */
/* Training-step throughput of xfed's kernels: samples per second for a model
 * at a batch size (forward, loss, backward and SGD step, as in xf_train), the
 * share of step time spent in GEMM, and the backend's raw SGEMM rate as the
 * physical reference. Prints one JSON object per line for bench/train.sh.
 *
 * With --dp-clip C, each step is DP-SGD's instead (as in xf_train with
 * DP-SGD, on a fixed batch): the per-example clipped backward pass
 * (xf_net_run_clipped), then, with --dp-noise Z > 0, the Gaussian noise of
 * standard deviation Z*C drawn on the host by the secure sampler and added to
 * the gradient, the division by the batch and the SGD step. Poisson sampling
 * of the batch is left out (it is the same host work for every backend).
 *
 * usage: xfed-bench-train --model mlp|lenet5|lenet5-declared|fedavg-cnn|fmnist-resnet --batch N
 *                         [--steps N] [--threads N] [--sgemm N]
 *                         [--dp-clip C [--dp-noise Z]] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "kernels/backend.h"
#include "kernels/net.h"
#include "privacy/noise.h"

/* CPU seconds of the calling thread: unlike the wall clock, they do not
 * count the time other tenants of a shared machine hold the core. With
 * --threads 1 every op runs on this thread, so it is the step's whole work. */
static double cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

/* One training step: plain, or DP-SGD's when dp_clip > 0 (noise is NULL
 * without noise). */
typedef struct bench_step {
  xf_net *net;
  const float *x;
  const int32_t *y;
  int batch;
  double dp_clip, dp_noise;
  xf_noise *noise;
  float *host_grads;
  const xf_sgd_params *sgd;
  double loss;
} bench_step;

static xf_err run_step(bench_step *s) {
  int correct;
  xf_err rc;
  if (s->dp_clip <= 0) {
    if ((rc = xf_net_run(s->net, s->x, s->y, s->batch, true, &s->loss, &correct))) return rc;
    xf_net_sgd_step(s->net, s->sgd);
    return XF_OK;
  }
  if ((rc = xf_net_run_clipped(s->net, s->x, s->y, s->batch, s->dp_clip, false, &s->loss,
                               &correct)))
    return rc;
  xf_backend *b = xf_net_backend(s->net);
  float *grads = xf_net_grads_device(s->net);
  size_t P = xf_model_num_params(xf_net_model(s->net));
  if (s->noise) {
    if ((rc = xf_net_get_grads(s->net, s->host_grads)) ||
        (rc = xf_noise_gaussian_vec_par(s->noise, s->dp_noise * s->dp_clip, s->host_grads, P,
                                        xf_backend_threads(b))) ||
        (rc = xf_backend_upload(b, grads, s->host_grads, P * sizeof(float))))
      return rc;
  }
  xf_k_scale(b, grads, (float)(1.0 / s->batch), P);
  xf_net_sgd_step(s->net, s->sgd);
  return XF_OK;
}

int main(int argc, char **argv) {
  const char *model_name = "mlp";
  long batch = 64, steps = 300, threads = 0, sgemm_n = 0;
  double dp_clip = 0, dp_noise = 0;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"steps", required_argument, 0, 's'},
                                       {"threads", required_argument, 0, 't'},
                                       {"sgemm", required_argument, 0, 'g'},
                                       {"dp-clip", required_argument, 0, 'c'},
                                       {"dp-noise", required_argument, 0, 'z'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'm': model_name = optarg; break;
    case 'b': batch = atol(optarg); break;
    case 's': steps = atol(optarg); break;
    case 't': threads = atol(optarg); break;
    case 'g': sgemm_n = atol(optarg); break;
    case 'c': dp_clip = atof(optarg); break;
    case 'z': dp_noise = atof(optarg); break;
    default:
      fprintf(stderr, "usage: xfed-bench-train --model mlp|lenet5|lenet5-declared|fedavg-cnn|fmnist-resnet "
                      "--batch N "
                      "[--steps N] [--threads N] [--sgemm N] [--dp-clip C [--dp-noise Z]]\n");
      return 2;
    }
  }
  if (batch < 1 || batch > 65536 || steps < 1) {
    fprintf(stderr, "xfed-bench-train: --batch must be 1..65536 and --steps positive\n");
    return 2;
  }
  if (!(dp_clip >= 0) || !(dp_noise >= 0) || (dp_noise > 0 && dp_clip <= 0)) {
    fprintf(stderr, "xfed-bench-train: --dp-clip must be positive and --dp-noise 0 or more "
                    "(and needs --dp-clip)\n");
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
  } else if (strcmp(model_name, "lenet5-declared") == 0) {
    /* lenet5's own layer list, declared as a job spec's model.layers is. */
    xf_model_spec preset = spec;
    preset.arch = XF_ARCH_CNN;
    preset.preset = XF_CNN_LENET5;
    xf_model *pm;
    xf_errctx perr = {0};
    if (xf_model_create(&preset, &pm, &perr)) return die("model", &perr);
    int n = 0;
    const xf_layer_decl *d = xf_model_decls(pm, &n);
    spec.arch = XF_ARCH_LAYERS;
    spec.n_layers = n;
    memcpy(spec.layers, d, (size_t)n * sizeof(*d));
    xf_model_free(pm);
  } else if (strcmp(model_name, "fmnist-resnet") == 0) {
    /* deploy/jobs/fmnist-resnet.json's residual CNN: groupnorm, a residual
     * block and dropout. */
    static const xf_layer_decl resnet[] = {
        {.kind = XF_DECL_CONV2D, .filters = 16, .kernel = 3, .stride = 1, .padding = 1},
        {.kind = XF_DECL_GROUPNORM, .groups = 4},
        {.kind = XF_DECL_RELU},
        {.kind = XF_DECL_MAXPOOL2D, .kernel = 2, .stride = 2},
        {.kind = XF_DECL_CONV2D, .filters = 16, .kernel = 3, .stride = 1, .padding = 1},
        {.kind = XF_DECL_GROUPNORM, .groups = 4},
        {.kind = XF_DECL_RELU},
        {.kind = XF_DECL_CONV2D, .filters = 16, .kernel = 3, .stride = 1, .padding = 1},
        {.kind = XF_DECL_GROUPNORM, .groups = 4},
        {.kind = XF_DECL_ADD, .from = 3},
        {.kind = XF_DECL_RELU},
        {.kind = XF_DECL_MAXPOOL2D, .kernel = 2, .stride = 2},
        {.kind = XF_DECL_FLATTEN},
        {.kind = XF_DECL_DROPOUT, .rate = 0.25f},
        {.kind = XF_DECL_DENSE, .units = 64},
        {.kind = XF_DECL_RELU},
        {.kind = XF_DECL_DENSE, .units = 10}};
    spec.arch = XF_ARCH_LAYERS;
    spec.n_layers = (int)(sizeof(resnet) / sizeof(resnet[0]));
    memcpy(spec.layers, resnet, sizeof(resnet));
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
  bench_step st = {.net = net, .x = x, .y = y, .batch = (int)batch, .dp_clip = dp_clip,
                   .dp_noise = dp_noise, .sgd = &sgd};
  if (dp_noise > 0) {
    static const uint8_t seed[XF_NOISE_SEED_BYTES] = {1};
    st.host_grads = malloc(P * sizeof(float));
    if (!st.host_grads || xf_noise_new_seeded(seed, &st.noise)) {
      fprintf(stderr, "xfed-bench-train: cannot make the noise generator\n");
      return 1;
    }
    xf_noise_use_table(st.noise, true); /* as a job calibrated to a target epsilon draws it */
  }
  long warm = steps / 10 + 1;
  for (long i = 0; i < warm; i++)
    if (run_step(&st)) return die("step", &err);
  if (xf_backend_sync(b)) return die("sync", &err);
  double t0 = now(), c0 = cpu_now();
  for (long i = 0; i < steps; i++)
    if (run_step(&st)) return die("step", &err);
  if (xf_backend_sync(b)) return die("sync", &err);
  double secs = now() - t0, cpu_secs = cpu_now() - c0;
  /* A second, profiled pass gives the GEMM share without slowing the first. */
  long prof_steps = steps / 2 + 1;
  xf_backend_profile(b, true);
  double t1 = now();
  for (long i = 0; i < prof_steps; i++)
    if (run_step(&st)) return die("step", &err);
  if (xf_backend_sync(b)) return die("sync", &err);
  double prof_secs = now() - t1, gemm = xf_backend_gemm_seconds(b);
  xf_backend_profile(b, false);
  double rate = sgemm_n > 0 ? sgemm_rate(b, (int)sgemm_n) : 0;
  printf("{\"impl\": \"xfed\", \"backend\": \"%s\", \"device\": \"%s\", \"threads\": %d, "
         "\"model\": \"%s\", \"batch\": %ld, \"steps\": %ld, \"samples_per_s\": %.1f, "
         "\"gemm_share\": %.3f, \"sgemm_n\": %ld, \"sgemm_gflops\": %.1f, \"final_loss\": %.4f, "
         "\"dp_clip\": %g, \"dp_noise\": %g, \"step_ms\": %.4f, \"samples_per_cpu_s\": %.1f}\n",
         xf_backend_name(b), xf_backend_describe(b), xf_backend_threads(b), model_name, batch,
         steps, (double)steps * batch / secs, gemm / prof_secs, sgemm_n, rate, st.loss / batch,
         dp_clip, dp_noise, secs / (double)steps * 1e3, (double)steps * batch / cpu_secs);
  xf_noise_free(st.noise);
  free(st.host_grads);
  xf_net_free(net);
  xf_backend_close(b);
  xf_model_free(m);
  free(p);
  free(x);
  free(y);
  return 0;
}
