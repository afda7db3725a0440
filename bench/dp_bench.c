/* SPDX-License-Identifier: Apache-2.0 */
/* The cost of a DP-SGD step against a plain one: milliseconds per step for
 * the plain step (xf_net_run backward + SGD), the clipped step without noise
 * (xf_net_run_clipped + 1/L + SGD) and the full DP-SGD step (the same plus
 * the noise: xf_dp_noiser_start before the clipped backward, _finish after it, the
 * step xf_train takes), on one fixed batch of
 * random data, with the noise's own time and the Poisson sampling's
 * (xf_noise_poisson_sample over --records records per step) measured apart. Prints one
 * JSON object per line for bench/dp.sh.
 *
 * usage: xfed-bench-dp --model mlp|lenet5 [--batch N] [--steps N] [--threads N]
 *                      [--records N] */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "bench/bench_util.h"
#include "privacy/noise.h"
#include "kernels/backend.h"
#include "kernels/net.h"
#include "kernels/train.h"

static int die(const char *what) {
  fprintf(stderr, "xfed-bench-dp: %s failed\n", what);
  return 1;
}

typedef enum step_kind { STEP_PLAIN, STEP_CLIP, STEP_DP } step_kind;

typedef struct bench {
  xf_net *net;
  xf_backend *b;
  const float *x;
  const int32_t *y;
  int batch;
  size_t n_params;
  xf_noise *noise;
  xf_dp_noiser *noiser; /* the step's noise, as xf_train draws it */
  double noise_seconds; /* spent in xf_dp_noiser_finish: what the step waits for */
} bench;

static const xf_sgd_params sgd = {.lr = 0.01f, .momentum = 0.9f};
#define CLIP 1.0
#define NOISE_MULTIPLIER 1.0

static xf_err step(bench *s, step_kind kind) {
  double loss;
  int correct;
  if (kind == STEP_PLAIN) {
    XF_GUARD(xf_net_run(s->net, s->x, s->y, s->batch, true, &loss, &correct));
  } else {
    if (kind == STEP_DP) XF_GUARD(xf_dp_noiser_start(s->noiser));
    XF_GUARD(xf_net_run_clipped(s->net, s->x, s->y, s->batch, CLIP, false, &loss, &correct));
    float *g = xf_net_grads_device(s->net);
    if (kind == STEP_DP) {
      double t = xf_bench_now();
      XF_GUARD(xf_dp_noiser_finish(s->noiser));
      s->noise_seconds += xf_bench_now() - t;
    }
    xf_k_scale(s->b, g, 1.0f / (float)s->batch, s->n_params);
  }
  xf_net_sgd_step(s->net, &sgd);
  return XF_OK;
}

/* Seconds per step over `steps` steps after a tenth as many to warm up. */
static xf_err time_steps(bench *s, step_kind kind, long steps, double *per_step) {
  for (long i = 0; i < steps / 10 + 1; i++) XF_GUARD(step(s, kind));
  XF_GUARD(xf_backend_sync(s->b));
  s->noise_seconds = 0;
  double t0 = xf_bench_now();
  for (long i = 0; i < steps; i++) XF_GUARD(step(s, kind));
  XF_GUARD(xf_backend_sync(s->b));
  *per_step = (xf_bench_now() - t0) / (double)steps;
  return XF_OK;
}

int main(int argc, char **argv) {
  const char *model_name = "mlp";
  long batch = 64, steps = 200, threads = 0, records = 60000;
  static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                       {"batch", required_argument, 0, 'b'},
                                       {"steps", required_argument, 0, 's'},
                                       {"threads", required_argument, 0, 't'},
                                       {"records", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'm': model_name = optarg; break;
    case 'b': batch = atol(optarg); break;
    case 's': steps = atol(optarg); break;
    case 't': threads = atol(optarg); break;
    case 'r': records = atol(optarg); break;
    default:
      fprintf(stderr, "usage: xfed-bench-dp --model mlp|lenet5 [--batch N] [--steps N] "
                      "[--threads N] [--records N]\n");
      return 2;
    }
  }
  if (batch < 1 || batch > 65536 || steps < 1 || records < batch) {
    fprintf(stderr, "xfed-bench-dp: --batch must be 1..65536, --steps positive and --records "
                    "at least --batch\n");
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
  } else {
    fprintf(stderr, "xfed-bench-dp: unknown model '%s'\n", model_name);
    return 2;
  }
  xf_errctx err = {0};
  xf_model *m;
  bench s = {.batch = (int)batch};
  if (xf_model_create(&spec, &m, &err)) return die("model");
  if (xf_backend_open_env((int)threads, &s.b, &err)) {
    fprintf(stderr, "xfed-bench-dp: %s\n", err.msg);
    return 1;
  }
  if (xf_net_create(s.b, m, (int)batch, &s.net, &err)) return die("net");
  if (xf_noise_new_random(&s.noise)) return die("noise generator");
  xf_noise_use_table(s.noise, true); /* as a job calibrated to a target epsilon draws it */
  s.n_params = xf_model_num_params(m);
  size_t in = xf_model_input_size(m);
  float *p = malloc(s.n_params * sizeof(float)), *x = malloc((size_t)batch * in * sizeof(float));
  int32_t *y = malloc((size_t)batch * sizeof(int32_t));
  if (!p || !x || !y) return die("allocation");
  if (xf_dp_noiser_new(s.net, s.noise, NOISE_MULTIPLIER * CLIP, &s.noiser)) return die("noiser");
  xf_rng rng;
  xf_rng_seed(&rng, 1, 0);
  for (size_t i = 0; i < (size_t)batch * in; i++) x[i] = (float)xf_rng_uniform(&rng);
  for (long i = 0; i < batch; i++) y[i] = (int32_t)xf_rng_below(&rng, 10);
  xf_model_init_params(m, 1, p);
  if (xf_net_set_params(s.net, p)) return die("upload");
  s.x = x;
  s.y = y;

  double plain, clip, dp;
  if (time_steps(&s, STEP_PLAIN, steps, &plain)) return die("plain step");
  if (time_steps(&s, STEP_CLIP, steps, &clip)) return die("clipped step");
  if (time_steps(&s, STEP_DP, steps, &dp)) return die("DP-SGD step");
  double noise = s.noise_seconds / (double)steps;

  /* Poisson sampling as xf_train draws it (xf_noise_poisson_sample): each
   * of the records taken with probability L / records. */
  long sample_steps = steps / 10 + 1, kept = 0;
  uint32_t *picked = malloc((size_t)records * sizeof(uint32_t));
  if (!picked) return die("sampling");
  double t0 = xf_bench_now();
  for (long i = 0; i < sample_steps; i++) {
    size_t got = 0;
    if (xf_noise_poisson_sample(s.noise, (uint64_t)batch, (uint64_t)records, picked, &got)) {
      free(picked);
      return die("sampling");
    }
    kept += (long)got;
  }
  free(picked);
  double sampling = (xf_bench_now() - t0) / (double)sample_steps;

  printf("{\"backend\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"model\": \"%s\", "
         "\"params\": %zu, \"batch\": %ld, \"steps\": %ld, \"records\": %ld, "
         "\"plain_ms\": %.4f, \"clip_ms\": %.4f, \"dp_ms\": %.4f, \"noise_ms\": %.4f, "
         "\"sampling_ms\": %.4f, \"mean_sampled\": %.1f}\n",
         xf_backend_name(s.b), xf_backend_describe(s.b), xf_backend_threads(s.b), model_name,
         s.n_params, batch, steps, records, plain * 1e3, clip * 1e3, dp * 1e3, noise * 1e3,
         sampling * 1e3, (double)kept / (double)sample_steps);
  xf_dp_noiser_free(s.noiser);
  xf_noise_free(s.noise);
  xf_net_free(s.net);
  xf_backend_close(s.b);
  xf_model_free(m);
  free(p);
  free(x);
  free(y);
  return 0;
}
