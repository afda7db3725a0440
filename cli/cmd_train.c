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

/* One run: what it owns (freed by run_free) and what it reports. */
typedef struct train_run {
  xf_jobspec job;
  xf_dataset train, test;
  xf_model *model;
  xf_backend *backend;
  xf_net *net;
  xf_noise *noise;
  float *params;
  size_t n_params;
  json_t *epochs; /* the per-epoch records for --json */
  /* DP-SGD, with --dp-clip: its settings and what the accountant says. */
  xf_dp_sgd dp;
  double dp_q, dp_epsilon;
  uint64_t dp_steps;
  /* The outcome. */
  progress prog;
  int epochs_run;
  double test_loss, test_acc;
  char hex[XF_DIGEST_HEX], blob_hex[XF_DIGEST_HEX];
} train_run;

static void run_free(train_run *r) {
  json_decref(r->epochs);
  xf_free(r->params);
  xf_noise_free(r->noise);
  xf_net_free(r->net);
  xf_backend_close(r->backend);
  xf_model_free(r->model);
  xf_dataset_free(&r->train);
  xf_dataset_free(&r->test);
}

/* The spec and the data, with --epochs applied. */
static xf_err load_job_and_data(xf_cli *cli, const train_args *a, train_run *r) {
  xf_err rc;
  if ((rc = xf_jobspec_parse_centralized(a->spec, &r->job, &cli->err)) != XF_OK) return rc;
  /* A --save that may not be replaced is refused before the training. */
  if (a->save && (rc = xf_file_check_target(a->save, &cli->err)) != XF_OK) return rc;
  if (a->epochs) r->job.local.epochs = (uint32_t)a->epochs;
  if (r->job.privacy.mode != XF_PRIVACY_NONE)
    fprintf(stderr, "%s %s: note: privacy settings apply to federated jobs; this centralized "
                    "baseline trains without them (--dp-clip trains with DP-SGD)\n",
            cli->prog, cli->name);
  double t_load = now_seconds();
  if ((rc = xf_dataset_load_dir(a->data, &r->train, &r->test, &cli->err)) != XF_OK) return rc;
  fprintf(stderr, "data: %u train and %u test records of %ux%ux%u, %u classes (%.1f s)\n",
          r->train.n, r->test.n, r->train.h, r->train.w, r->train.c, r->train.classes,
          now_seconds() - t_load);
  return XF_OK;
}

/* The spec's model for the data's shape on the backend, its parameters
 * initialized from the job's seed. */
static xf_err build_model(xf_cli *cli, const train_args *a, train_run *r) {
  xf_err rc;
  xf_jobspec *job = &r->job;
  xf_dataset *train = &r->train, *test = &r->test;
  xf_model_spec ms;
  xf_errctx_clear(&cli->err);
  if ((rc = xf_jobspec_model_spec(job, train->h, train->w, train->c,
                                   train->classes > test->classes ? train->classes : test->classes,
                                   &ms, &cli->err)) != XF_OK ||
      (rc = xf_model_create(&ms, &r->model, &cli->err)) != XF_OK) {
    xf_errctx_file(&cli->err, a->spec);
    return rc;
  }
  if ((rc = xf_backend_open_env((int)a->threads, &r->backend, &cli->err)) != XF_OK) return rc;
  if ((rc = xf_net_create(r->backend, r->model, (int)job->local.batch_size, &r->net,
                          &cli->err)) != XF_OK)
    return rc;
  r->n_params = xf_model_num_params(r->model);
  r->params = xf_mallocarray(r->n_params, sizeof(float));
  if (!r->params)
    return xf_fail(&cli->err, XF_ENOMEM, "cannot allocate %zu parameters", r->n_params);
  xf_model_init_params(r->model, job->seed, r->params);
  if ((rc = xf_net_set_params(r->net, r->params)) != XF_OK) return rc;
  fprintf(stderr, "model: %s, %zu parameters; backend: %s (%s)\n", xf_model_describe(r->model),
          r->n_params, xf_backend_name(r->backend), xf_backend_describe(r->backend));
  return XF_OK;
}

/* DP-SGD's settings, from the sites' own plan (privacy/plan.h) for one
 * round: expected batch L = local.batch_size, q = L / n, epochs x steps
 * per epoch, the noise calibrated to the target and grown by the grid's
 * slack; and the epsilon the accountant gives them. */
static xf_err plan_dp(xf_cli *cli, const train_args *a, train_run *r, size_t n_records) {
  xf_err rc;
  xf_jobspec *job = &r->job;
  int L = (int)job->local.batch_size;
  job->rounds = 1;
  job->privacy = (xf_privacy_spec){.unit = XF_PRIVACY_UNIT_RECORD,
                                   .mode = XF_PRIVACY_LOCAL,
                                   .clip = a->dp_clip,
                                   .has_target_epsilon = a->has_target,
                                   .target_epsilon = a->dp_target,
                                   .has_noise_multiplier = a->has_noise,
                                   .noise_multiplier = a->dp_noise,
                                   .delta = a->dp_delta};
  xf_privacy_plan plan;
  if ((rc = xf_job_privacy_plan(job, n_records, r->n_params, &plan, &cli->err)) != XF_OK)
    return rc;
  r->dp_q = plan.sampling_rate;
  r->dp_steps = plan.planned_steps;
  if ((rc = xf_noise_new_random(&r->noise)) != XF_OK)
    return xf_fail(&cli->err, rc, "cannot start the noise generator");
  r->dp = (xf_dp_sgd){.clip = a->dp_clip, .noise_multiplier = plan.noise_multiplier,
                      .expected_batch = L, .noise = r->noise};
  if (plan.accounted_multiplier > 0 &&
      (rc = xf_dp_epsilon_sgm(r->dp_q, plan.accounted_multiplier, r->dp_steps, a->dp_delta, NULL,
                              0, XF_DP_CONVERSION_IMPROVED, &r->dp_epsilon, NULL, &cli->err)) !=
          XF_OK) {
    if (rc != XF_ERANGE) return rc;
    r->dp_epsilon = INFINITY; /* far too little noise: no finite guarantee */
    xf_errctx_clear(&cli->err);
  }
  fprintf(stderr, "dp-sgd: clip %g, noise multiplier %.4f, expected batch %d of %zu (q %.5f), "
                  "%llu steps, epsilon %.4g at delta %g\n",
          a->dp_clip, plan.noise_multiplier, L, n_records, r->dp_q,
          (unsigned long long)r->dp_steps, r->dp_epsilon, a->dp_delta);
  return XF_OK;
}

/* The trained parameters' digest, and their copies to --save and --blobs. */
static xf_err keep_model(xf_cli *cli, const train_args *a, train_run *r) {
  xf_err rc;
  xf_digest digest;
  xf_params_digest(r->params, r->n_params, &digest);
  xf_digest_hex(&digest, r->hex);
  if (a->save && (rc = xf_checkpoint_save_file(a->save, r->model, r->params, &cli->err)) != XF_OK)
    return rc;
  if (a->blobs) {
    xf_blob_store *store;
    xf_digest blob;
    if ((rc = xf_blob_store_open(a->blobs, &store, &cli->err)) != XF_OK) return rc;
    rc = xf_checkpoint_save_blob(store, r->model, r->params, &blob, &cli->err);
    xf_blob_store_close(store);
    if (rc != XF_OK) return rc;
    xf_digest_hex(&blob, r->blob_hex);
  }
  return XF_OK;
}

static xf_err report_json(xf_cli *cli, const train_args *a, const train_run *r, double sps) {
  json_t *o = json_pack(
      "{s:o,s:o,s:o,s:o,s:s,s:s,s:i,s:s,s:I,s:s,s:i,s:i,s:I,s:O}", "test_accuracy",
      figure(r->test_acc), "test_loss", figure(r->test_loss), "train_seconds",
      figure(r->prog.seconds), "samples_per_second", figure(sps), "backend",
      xf_backend_name(r->backend), "backend_description", xf_backend_describe(r->backend),
      "threads", xf_backend_threads(r->backend), "model", xf_model_describe(r->model), "params",
      (json_int_t)r->n_params, "model_digest", r->hex, "batch_size", (int)r->job.local.batch_size,
      "epochs_run", r->epochs_run, "seed", (json_int_t)r->job.seed, "epochs", r->epochs);
  if (!o) return xf_fail(&cli->err, XF_ENOMEM, "cannot build the JSON report");
  if (a->save) json_object_set_new(o, "saved", json_string(a->save));
  if (a->dp)
    json_object_set_new(
        o, "dp",
        json_pack("{s:o,s:o,s:i,s:o,s:I,s:o,s:o}", "clip", figure(r->dp.clip), "noise_multiplier",
                  figure(r->dp.noise_multiplier), "expected_batch", r->dp.expected_batch,
                  "sampling_rate", figure(r->dp_q), "steps", (json_int_t)r->dp_steps, "delta",
                  figure(a->dp_delta), "epsilon", figure(r->dp_epsilon)));
  if (a->blobs) json_object_set_new(o, "blob", json_string(r->blob_hex));
  json_dumpf(o, stdout, JSON_INDENT(2));
  fputc('\n', stdout);
  json_decref(o);
  return XF_OK;
}

static void report_text(const train_args *a, const train_run *r, double sps) {
  printf("model          %s (%zu parameters)\n", xf_model_describe(r->model), r->n_params);
  printf("backend        %s, %s\n", xf_backend_name(r->backend), xf_backend_describe(r->backend));
  printf("epochs         %d\n", r->epochs_run);
  if (r->prog.r_squared)
    printf("test R^2       %.4f (mse %.4f)\n", r->test_acc, r->test_loss);
  else
    printf("test accuracy  %.4f (loss %.4f)\n", r->test_acc, r->test_loss);
  if (a->dp)
    printf("privacy        epsilon %.4g at delta %g (DP-SGD: clip %g, noise multiplier %.4f, "
           "q %.5f, %llu steps)\n",
           r->dp_epsilon, a->dp_delta, r->dp.clip, r->dp.noise_multiplier, r->dp_q,
           (unsigned long long)r->dp_steps);
  printf("train time     %.1f s, %.0f samples/s\n", r->prog.seconds, sps);
  printf("model digest   %s\n", r->hex);
  if (a->save) printf("saved          %s\n", a->save);
  if (a->blobs) printf("blob           %s/%s\n", a->blobs, r->blob_hex);
}

int xf_cmd_train(xf_cli *cli, int argc, char **argv) {
  train_args a;
  int status = parse_args(cli, argc, argv, &a);
  if (status != XF_EXIT_OK) return status;

  train_run r = {.epochs = json_array(), .dp_epsilon = INFINITY};
  xf_err rc;
  if ((rc = load_job_and_data(cli, &a, &r)) != XF_OK || (rc = build_model(cli, &a, &r)) != XF_OK)
    goto fail;

  xf_samples tr = {r.train.x, r.train.y, r.train.n, r.train.features};
  xf_samples te = {r.test.x, r.test.y, r.test.n, r.test.features};
  r.prog = (progress){.cli = cli, .epochs = r.epochs, .r_squared = r.job.model.loss == XF_LOSS_MSE};
  if (a.dp && (rc = plan_dp(cli, &a, &r, tr.n)) != XF_OK) goto fail;
  xf_train_options opt = {
      .epochs = (int)r.job.local.epochs,
      .batch_size = (int)r.job.local.batch_size,
      .seed = r.job.seed,
      .test = &te,
      .on_epoch = on_epoch,
      .user = &r.prog,
      .dp = a.dp ? &r.dp : NULL};
  /* The centralized baseline is one run: round 1's learning rate, and no
   * proximal term (there is no global model to stay near). */
  xf_jobspec_train_options(&r.job, 1, &opt);
  opt.sgd.prox_mu = 0.0f;
  if ((rc = xf_train(r.net, &tr, &opt, &cli->err)) != XF_OK) goto fail;
  r.epochs_run = opt.epochs;
  if ((rc = xf_evaluate(r.net, &te, &r.test_loss, &r.test_acc, &cli->err)) != XF_OK ||
      (rc = xf_net_get_params(r.net, r.params)) != XF_OK)
    goto fail;
  if ((rc = keep_model(cli, &a, &r)) != XF_OK) goto fail;

  double sps = (double)r.train.n * opt.epochs / r.prog.seconds;
  if (cli->json) {
    if ((rc = report_json(cli, &a, &r, sps)) != XF_OK) goto fail;
  } else {
    report_text(&a, &r, sps);
  }
  status = XF_EXIT_OK;
  goto out;
fail:
  status = xf_cli_fail(cli, rc);
out:
  run_free(&r);
  return status;
}
