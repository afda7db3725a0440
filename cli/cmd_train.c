/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed train`: the centralized baseline — a job spec's model trained with its
 * local settings on one machine, with the same kernels sites use. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "job/jobmodel.h"
#include "job/jobprivacy.h"
#include "job/jobspec.h"
#include "privacy/accountant.h"
#include "privacy/noise.h"
#include "kernels/backend.h"
#include "kernels/checkpoint.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "data/dataset.h"
#include "storage/blob.h"
#include "base/file.h"

typedef struct train_args {
  const char *spec, *data, *save, *blobs;
  long threads, epochs;
  /* DP-SGD: on with --dp-clip; the noise is given or calibrated. */
  double dp_clip, dp_noise, dp_target, dp_delta;
  bool dp, has_noise, has_target, has_delta;
} train_args;

/* Progress and the per-epoch record kept for --json. */
typedef struct progress {
  const xf_cli *cli;
  json_t *epochs;
  double seconds;
  bool r_squared; /* mse: the accuracy figures are R^2 (docs/jobs.md) */
} progress;

/* A figure for --json: JSON has no inf or nan, so a run that diverged reports
 * null there rather than failing to print its report. */
static json_t *figure(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void on_epoch(const xf_epoch_report *r, void *user) {
  progress *p = user;
  p->seconds += r->seconds;
  if (p->r_squared)
    fprintf(stderr,
            "epoch %d/%d  mse %.4f  train R^2 %.4f  test R^2 %.4f  %.1f s  %.0f samples/s\n",
            r->epoch, r->epochs, r->train_loss, r->train_accuracy, r->test_accuracy, r->seconds,
            (double)r->samples / r->seconds);
  else
    fprintf(stderr, "epoch %d/%d  loss %.4f  train %.2f%%  test %.2f%%  %.1f s  %.0f samples/s\n",
            r->epoch, r->epochs, r->train_loss, 100 * r->train_accuracy, 100 * r->test_accuracy,
            r->seconds, (double)r->samples / r->seconds);
  json_array_append_new(p->epochs,
                        json_pack("{s:i,s:I,s:o,s:o,s:o,s:o,s:o}", "epoch", r->epoch, "steps",
                                  (json_int_t)r->steps, "train_loss", figure(r->train_loss),
                                  "train_accuracy", figure(r->train_accuracy), "test_loss",
                                  figure(r->test_loss), "test_accuracy",
                                  figure(r->test_accuracy), "seconds", figure(r->seconds)));
}

enum { OPT_DP_CLIP = 'C', OPT_DP_NOISE = 'Z', OPT_DP_TARGET = 'E', OPT_DP_DELTA = 'D' };

/* A DP flag's number in [lo, hi], above lo when lo_open. */
static int parse_dp_number(xf_cli *cli, const char *flag, double lo, double hi, bool lo_open,
                           double *out) {
  if (xf_cli_parse_double(cli, flag, optarg, lo, hi, out) != XF_OK)
    return xf_cli_usage(cli, "%s", cli->err.msg);
  if (lo_open && !(*out > lo)) return xf_cli_usage(cli, "%s '%s' must be above %g", flag, optarg, lo);
  return XF_EXIT_OK;
}

static int parse_args(xf_cli *cli, int argc, char **argv, train_args *a) {
  static const struct option opts[] = {
      {"spec", required_argument, 0, 's'},    {"data", required_argument, 0, 'd'},
      {"threads", required_argument, 0, 't'}, {"epochs", required_argument, 0, 'e'},
      {"save", required_argument, 0, 'o'},    {"blobs", required_argument, 0, 'b'},
      {"dp-clip", required_argument, 0, OPT_DP_CLIP},
      {"dp-noise-multiplier", required_argument, 0, OPT_DP_NOISE},
      {"dp-target-epsilon", required_argument, 0, OPT_DP_TARGET},
      {"dp-delta", required_argument, 0, OPT_DP_DELTA},
      {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->dp_delta = 1e-5;
  int st;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 's': a->spec = optarg; break;
    case 'd': a->data = optarg; break;
    case 'o': a->save = optarg; break;
    case 'b': a->blobs = optarg; break;
    case 't':
      if (xf_cli_parse_int(cli, "--threads", optarg, 1, 1024, &a->threads) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    case 'e':
      if (xf_cli_parse_int(cli, "--epochs", optarg, 1, 10000, &a->epochs) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    case OPT_DP_CLIP:
      if ((st = parse_dp_number(cli, "--dp-clip", 0, 1e6, true, &a->dp_clip)) != XF_EXIT_OK)
        return st;
      a->dp = true;
      break;
    case OPT_DP_NOISE:
      if ((st = parse_dp_number(cli, "--dp-noise-multiplier", 0, XF_DP_SIGMA_MAX, false,
                                &a->dp_noise)) != XF_EXIT_OK)
        return st;
      a->has_noise = true;
      break;
    case OPT_DP_TARGET:
      if ((st = parse_dp_number(cli, "--dp-target-epsilon", 0, 1e6, true, &a->dp_target)) !=
          XF_EXIT_OK)
        return st;
      a->has_target = true;
      break;
    case OPT_DP_DELTA:
      if ((st = parse_dp_number(cli, "--dp-delta", 0, 0.5, true, &a->dp_delta)) != XF_EXIT_OK)
        return st;
      a->has_delta = true;
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind]);
  if (!a->spec) return xf_cli_usage(cli, "--spec JOB.json is required");
  if (!a->data) return xf_cli_usage(cli, "--data DIR is required");
  if (!a->dp && (a->has_noise || a->has_target || a->has_delta))
    return xf_cli_usage(cli, "--dp-clip C is required with the other --dp- options");
  if (a->dp && a->has_noise == a->has_target)
    return xf_cli_usage(cli, "--dp-clip needs one of --dp-noise-multiplier Z or "
                             "--dp-target-epsilon E");
  return XF_EXIT_OK;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int xf_cmd_train(xf_cli *cli, int argc, char **argv) {
  train_args a;
  int status = parse_args(cli, argc, argv, &a);
  if (status != XF_EXIT_OK) return status;

  xf_jobspec job;
  xf_dataset train = {0}, test = {0};
  xf_model *model = NULL;
  xf_backend *backend = NULL;
  xf_net *net = NULL;
  xf_noise *noise = NULL;
  float *params = NULL;
  json_t *epochs = json_array();
  xf_err rc;
  xf_dp_sgd dp = {0};
  double dp_q = 0, dp_epsilon = INFINITY;
  uint64_t dp_steps = 0;

  if ((rc = xf_jobspec_parse_centralized(a.spec, &job, &cli->err)) != XF_OK) goto fail;
  /* A --save that may not be replaced is refused before the training. */
  if (a.save && (rc = xf_file_check_target(a.save, &cli->err)) != XF_OK) goto fail;
  if (a.epochs) job.local.epochs = (uint32_t)a.epochs;
  if (job.privacy.mode != XF_PRIVACY_NONE)
    fprintf(stderr, "%s %s: note: privacy settings apply to federated jobs; this centralized "
                    "baseline trains without them (--dp-clip trains with DP-SGD)\n",
            cli->prog, cli->name);
  double t_load = now_seconds();
  if ((rc = xf_dataset_load_dir(a.data, &train, &test, &cli->err)) != XF_OK) goto fail;
  fprintf(stderr, "data: %u train and %u test records of %ux%ux%u, %u classes (%.1f s)\n",
          train.n, test.n, train.h, train.w, train.c, train.classes, now_seconds() - t_load);

  xf_model_spec ms;
  xf_errctx_clear(&cli->err);
  if ((rc = xf_jobspec_model_spec(&job, train.h, train.w, train.c,
                                   train.classes > test.classes ? train.classes : test.classes,
                                   &ms, &cli->err)) != XF_OK ||
      (rc = xf_model_create(&ms, &model, &cli->err)) != XF_OK) {
    xf_errctx_file(&cli->err, a.spec);
    goto fail;
  }
  if ((rc = xf_backend_open_env((int)a.threads, &backend, &cli->err)) != XF_OK) goto fail;
  if ((rc = xf_net_create(backend, model, (int)job.local.batch_size, &net, &cli->err)) != XF_OK)
    goto fail;
  size_t n_params = xf_model_num_params(model);
  params = xf_mallocarray(n_params, sizeof(float));
  if (!params) {
    rc = xf_fail(&cli->err, XF_ENOMEM, "cannot allocate %zu parameters", n_params);
    goto fail;
  }
  xf_model_init_params(model, job.seed, params);
  if ((rc = xf_net_set_params(net, params)) != XF_OK) goto fail;
  fprintf(stderr, "model: %s, %zu parameters; backend: %s (%s)\n", xf_model_describe(model),
          n_params, xf_backend_name(backend), xf_backend_describe(backend));

  xf_samples tr = {train.x, train.y, train.n, train.features};
  xf_samples te = {test.x, test.y, test.n, test.features};
  progress prog = {.cli = cli, .epochs = epochs, .r_squared = job.model.loss == XF_LOSS_MSE};
  if (a.dp) {
    /* The sites' own plan (privacy/plan.h) for one round: expected
     * batch L = local.batch_size, q = L / n, epochs x steps per epoch, the
     * noise calibrated to the target and grown by the grid's slack. */
    int L = (int)job.local.batch_size;
    job.rounds = 1;
    job.privacy = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_RECORD,
                                   .mode = XF_PRIVACY_LOCAL,
                                   .clip = a.dp_clip,
                                   .has_target_epsilon = a.has_target,
                                   .target_epsilon = a.dp_target,
                                   .has_noise_multiplier = a.has_noise,
                                   .noise_multiplier = a.dp_noise,
                                   .delta = a.dp_delta};
    xf_privacy_plan plan;
    if ((rc = xf_job_privacy_plan(&job, tr.n, n_params, &plan, &cli->err)) != XF_OK) goto fail;
    dp_q = plan.sampling_rate;
    dp_steps = plan.planned_steps;
    if ((rc = xf_noise_new_random(&noise)) != XF_OK) {
      rc = xf_fail(&cli->err, rc, "cannot start the noise generator");
      goto fail;
    }
    dp = (xf_dp_sgd){.clip = a.dp_clip, .noise_multiplier = plan.noise_multiplier,
                     .expected_batch = L, .noise = noise};
    if (plan.accounted_multiplier > 0 &&
        (rc = xf_dp_epsilon_sgm(dp_q, plan.accounted_multiplier, dp_steps, a.dp_delta, NULL, 0,
                                XF_DP_CONVERSION_IMPROVED, &dp_epsilon, NULL, &cli->err)) !=
            XF_OK) {
      if (rc != XF_ERANGE) goto fail;
      dp_epsilon = INFINITY; /* far too little noise: no finite guarantee */
      xf_errctx_clear(&cli->err);
    }
    fprintf(stderr, "dp-sgd: clip %g, noise multiplier %.4f, expected batch %d of %zu (q %.5f), "
                    "%llu steps, epsilon %.4g at delta %g\n",
            a.dp_clip, plan.noise_multiplier, L, tr.n, dp_q, (unsigned long long)dp_steps,
            dp_epsilon, a.dp_delta);
  }
  xf_train_options opt = {
      .epochs = (int)job.local.epochs,
      .batch_size = (int)job.local.batch_size,
      .seed = job.seed,
      .test = &te,
      .on_epoch = on_epoch,
      .user = &prog,
      .dp = a.dp ? &dp : NULL};
  /* The centralized baseline is one run: round 1's learning rate, and no
   * proximal term (there is no global model to stay near). */
  xf_jobspec_train_options(&job, 1, &opt);
  opt.sgd.prox_mu = 0.0f;
  if ((rc = xf_train(net, &tr, &opt, &cli->err)) != XF_OK) goto fail;
  double test_loss, test_acc;
  if ((rc = xf_evaluate(net, &te, &test_loss, &test_acc, &cli->err)) != XF_OK ||
      (rc = xf_net_get_params(net, params)) != XF_OK)
    goto fail;

  xf_digest digest;
  char hex[XF_DIGEST_HEX], blob_hex[XF_DIGEST_HEX] = "";
  xf_params_digest(params, n_params, &digest);
  xf_digest_hex(&digest, hex);
  if (a.save && (rc = xf_checkpoint_save_file(a.save, model, params, &cli->err)) != XF_OK)
    goto fail;
  if (a.blobs) {
    xf_blob_store *store;
    xf_digest blob;
    if ((rc = xf_blob_store_open(a.blobs, &store, &cli->err)) != XF_OK) goto fail;
    rc = xf_checkpoint_save_blob(store, model, params, &blob, &cli->err);
    xf_blob_store_close(store);
    if (rc != XF_OK) goto fail;
    xf_digest_hex(&blob, blob_hex);
  }

  double sps = (double)train.n * opt.epochs / prog.seconds;
  if (cli->json) {
    json_t *o = json_pack(
        "{s:o,s:o,s:o,s:o,s:s,s:s,s:i,s:s,s:I,s:s,s:i,s:i,s:I,s:O}", "test_accuracy",
        figure(test_acc), "test_loss", figure(test_loss), "train_seconds", figure(prog.seconds),
        "samples_per_second", figure(sps), "backend", xf_backend_name(backend),
        "backend_description", xf_backend_describe(backend), "threads", xf_backend_threads(backend),
        "model", xf_model_describe(model), "params", (json_int_t)n_params, "model_digest", hex,
        "batch_size", (int)job.local.batch_size, "epochs_run", opt.epochs, "seed",
        (json_int_t)job.seed, "epochs", epochs);
    if (!o) {
      rc = xf_fail(&cli->err, XF_ENOMEM, "cannot build the JSON report");
      goto fail;
    }
    if (a.save) json_object_set_new(o, "saved", json_string(a.save));
    if (a.dp)
      json_object_set_new(
          o, "dp",
          json_pack("{s:o,s:o,s:i,s:o,s:I,s:o,s:o}", "clip", figure(dp.clip), "noise_multiplier",
                    figure(dp.noise_multiplier), "expected_batch", dp.expected_batch,
                    "sampling_rate", figure(dp_q), "steps", (json_int_t)dp_steps, "delta",
                    figure(a.dp_delta), "epsilon", figure(dp_epsilon)));
    if (a.blobs) json_object_set_new(o, "blob", json_string(blob_hex));
    json_dumpf(o, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(o);
  } else {
    printf("model          %s (%zu parameters)\n", xf_model_describe(model), n_params);
    printf("backend        %s, %s\n", xf_backend_name(backend), xf_backend_describe(backend));
    printf("epochs         %d\n", opt.epochs);
    if (prog.r_squared)
      printf("test R^2       %.4f (mse %.4f)\n", test_acc, test_loss);
    else
      printf("test accuracy  %.4f (loss %.4f)\n", test_acc, test_loss);
    if (a.dp)
      printf("privacy        epsilon %.4g at delta %g (DP-SGD: clip %g, noise multiplier %.4f, "
             "q %.5f, %llu steps)\n",
             dp_epsilon, a.dp_delta, dp.clip, dp.noise_multiplier, dp_q,
             (unsigned long long)dp_steps);
    printf("train time     %.1f s, %.0f samples/s\n", prog.seconds, sps);
    printf("model digest   %s\n", hex);
    if (a.save) printf("saved          %s\n", a.save);
    if (a.blobs) printf("blob           %s/%s\n", a.blobs, blob_hex);
  }
  status = XF_EXIT_OK;
  goto out;
fail:
  status = xf_cli_fail(cli, rc);
out:
  json_decref(epochs);
  xf_free(params);
  xf_noise_free(noise);
  xf_net_free(net);
  xf_backend_close(backend);
  xf_model_free(model);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  return status;
}
