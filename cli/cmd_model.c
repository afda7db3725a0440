/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed model eval` and `xfed model export`: a model file on this machine
 * evaluated on a dataset directory, or written for deployment. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "cli/cli.h"
#include "cli/export_internal.h"
#include "kernels/backend.h"
#include "kernels/checkpoint.h"
#include "kernels/export.h"
#include "kernels/net.h"
#include "kernels/train.h"
#include "data/dataset.h"
#include "base/file.h"

/* Records per forward pass: large enough for the GEMMs to pay, small enough
 * for the activations of the largest preset to stay a few tens of MiB. */
#define EVAL_BATCH 256

/* The model in path: an xfed model file, or an ONNX graph xfed exported
 * (read back exactly, kernels/export.h). A .npz holds tensors without the
 * architecture and is named as what it is. */
static xf_err load_model(xf_cli *cli, const char *path, xf_model **m, float **params) {
  xf_export_format f = XF_EXPORT_XFED;
  xf_export_format_of_path(path, &f);
  xf_err rc;
  if (f == XF_EXPORT_NPZ || f == XF_EXPORT_NPY) {
    rc = xf_fail(&cli->err, XF_EUNSUPPORTED,
                 "a .%s holds tensors without the architecture; give the xfed model file or the "
                 ".onnx it was exported with ('xfed train --save', 'xfed job export')",
                 xf_export_format_name(f));
  } else if (f == XF_EXPORT_ONNX) {
    char *bytes = NULL;
    size_t len = 0;
    rc = xf_file_read_text(path, (size_t)INT32_MAX, &bytes, &len, &cli->err);
    if (rc == XF_OK) rc = xf_export_onnx_read((const uint8_t *)bytes, len, m, params, &cli->err);
    xf_free(bytes);
  } else {
    rc = xf_checkpoint_load_file(path, m, params, &cli->err);
  }
  if (rc != XF_OK) xf_errctx_file(&cli->err, path);
  return rc;
}

/* One predicted class per record, beside its label, as CSV. */
static xf_err write_predictions(xf_cli *cli, const char *path, xf_net *net,
                                const xf_dataset *ds) {
  const int classes = xf_model_spec_of(xf_net_model(net))->classes;
  float *logits = xf_mallocarray((size_t)EVAL_BATCH * (size_t)classes, sizeof(float));
  /* "label,predicted\n" and at most two numbers below 65536 per line. */
  size_t cap = 16 + (size_t)ds->n * 13, used = 0;
  char *text = xf_malloc(cap);
  xf_err rc = logits && text ? XF_OK : xf_fail(&cli->err, XF_ENOMEM, "cannot allocate the "
                                               "predictions of %u records", ds->n);
  if (rc == XF_OK) used = (size_t)snprintf(text, cap, "label,predicted\n");
  for (uint32_t at = 0; rc == XF_OK && at < ds->n; at += EVAL_BATCH) {
    int n = (int)(ds->n - at < EVAL_BATCH ? ds->n - at : EVAL_BATCH);
    rc = xf_net_logits(net, ds->x + (size_t)at * ds->features, n, logits);
    if (rc != XF_OK) {
      xf_fail(&cli->err, rc, "the forward pass failed");
      break;
    }
    for (int i = 0; i < n; i++) {
      const float *row = logits + (size_t)i * (size_t)classes;
      int best = 0;
      for (int k = 1; k < classes; k++)
        if (row[k] > row[best]) best = k;
      used += (size_t)snprintf(text + used, cap - used, "%d,%d\n", (int)ds->y[at + (uint32_t)i],
                               best);
    }
  }
  if (rc == XF_OK) rc = xf_file_write_atomic(path, text, used, 0644, &cli->err);
  xf_free(text);
  xf_free(logits);
  return rc;
}

int xf_cmd_model_eval(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"data", required_argument, 0, 'd'},
                                       {"split", required_argument, 0, 's'},
                                       {"predictions", required_argument, 0, 'p'},
                                       {"threads", required_argument, 0, 't'},
                                       {0, 0, 0, 0}};
  const char *data = NULL, *split = "test", *predictions = NULL;
  long threads = 0;
  opterr = 0;
  optind = 1;
  int ch;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'd': data = optarg; break;
    case 's': split = optarg; break;
    case 'p': predictions = optarg; break;
    case 't':
      if (xf_cli_parse_int(cli, "--threads", optarg, 1, 1024, &threads) != XF_OK)
        return xf_cli_usage(cli, "%s", cli->err.msg);
      break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind >= argc) return xf_cli_usage(cli, "MODEL (an xfed model file) is required");
  if (optind + 1 < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind + 1]);
  const char *path = argv[optind];
  if (!data) return xf_cli_usage(cli, "--data DIR is required");
  if (strcmp(split, "test") != 0 && strcmp(split, "train") != 0)
    return xf_cli_usage(cli, "--split '%s' is not test or train", split);
  if (predictions && xf_file_check_target(predictions, &cli->err) != XF_OK)
    return xf_cli_fail(cli, cli->err.code);

  xf_model *m = NULL;
  float *params = NULL;
  xf_dataset train = {0}, test = {0};
  xf_backend *backend = NULL;
  xf_net *net = NULL;
  xf_err rc = load_model(cli, path, &m, &params);
  if (rc == XF_OK) rc = xf_dataset_load_dir(data, &train, &test, &cli->err);
  if (rc != XF_OK) goto out;
  const xf_dataset *ds = strcmp(split, "train") == 0 ? &train : &test;
  const xf_model_spec *s = xf_model_spec_of(m);
  if (ds->h != (uint32_t)s->in_h || ds->w != (uint32_t)s->in_w || ds->c != (uint32_t)s->in_c) {
    rc = xf_fail(&cli->err, XF_EINVAL, "%s holds records of %ux%ux%u, the model %s takes "
                 "%dx%dx%d: evaluate it on the kind of data it was trained on", data, ds->h,
                 ds->w, ds->c, xf_model_describe(m), s->in_h, s->in_w, s->in_c);
    goto out;
  }
  if (ds->n == 0) {
    rc = xf_fail(&cli->err, XF_EINVAL, "the %s split of %s has no records", split, data);
    goto out;
  }
  if (ds->classes > (uint32_t)s->classes) {
    rc = xf_fail(&cli->err, XF_EINVAL, "%s has labels up to %u, the model tells %d classes "
                 "apart: evaluate it on the data set it was trained for", data, ds->classes - 1,
                 s->classes);
    goto out;
  }
  if ((rc = xf_backend_open_env((int)threads, &backend, &cli->err)) != XF_OK ||
      (rc = xf_net_create(backend, m, EVAL_BATCH, &net, &cli->err)) != XF_OK ||
      (rc = xf_net_set_params(net, params)) != XF_OK)
    goto out;
  xf_samples samples = {ds->x, ds->y, ds->n, ds->features};
  double loss = 0, accuracy = 0;
  if ((rc = xf_evaluate(net, &samples, &loss, &accuracy, &cli->err)) != XF_OK) goto out;
  if (predictions && (rc = write_predictions(cli, predictions, net, ds)) != XF_OK) goto out;

  if (cli->json) {
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I,s:I,s:o,s:o}", "model", path, "architecture",
                          xf_model_describe(m), "data", data, "split", split, "records",
                          (json_int_t)ds->n, "params", (json_int_t)xf_model_num_params(m),
                          "accuracy", isfinite(accuracy) ? json_real(accuracy) : json_null(),
                          "loss", isfinite(loss) ? json_real(loss) : json_null());
    if (o && predictions) json_object_set_new(o, "predictions", json_string(predictions));
    if (!o) {
      rc = xf_fail(&cli->err, XF_ENOMEM, "cannot build the JSON report");
      goto out;
    }
    json_dumpf(o, stdout, JSON_INDENT(2));
    fputc('\n', stdout);
    json_decref(o);
  } else {
    printf("model     %s (%s, %zu parameters)\n", path, xf_model_describe(m),
           xf_model_num_params(m));
    printf("data      %s, %s split, %u records\n", data, split, ds->n);
    printf("accuracy  %.4f\n", accuracy);
    printf("loss      %.4f\n", loss);
    if (predictions) printf("predictions %s\n", predictions);
  }
out:
  xf_net_free(net);
  xf_backend_close(backend);
  xf_dataset_free(&train);
  xf_dataset_free(&test);
  xf_free(params);
  xf_model_free(m);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}

int xf_cmd_model_export(xf_cli *cli, int argc, char **argv) {
  static const struct option opts[] = {{"out", required_argument, 0, 'o'},
                                       {"format", required_argument, 0, 'f'},
                                       {0, 0, 0, 0}};
  const char *out = NULL, *format = NULL;
  opterr = 0;
  optind = 1;
  int ch, st;
  while ((ch = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
    switch (ch) {
    case 'o': out = optarg; break;
    case 'f': format = optarg; break;
    default: return xf_cli_option_error(cli, ch, argv, opts);
    }
  }
  if (optind >= argc) return xf_cli_usage(cli, "MODEL (an xfed model file) is required");
  if (optind + 1 < argc) return xf_cli_usage(cli, "unexpected argument '%s'", argv[optind + 1]);
  const char *path = argv[optind];
  if (!out || !*out) return xf_cli_usage(cli, "--out FILE is required");
  xf_export_format fmt = XF_EXPORT_XFED;
  if ((st = xf__export_pick_format(cli, out, format, false, &fmt)) != XF_EXIT_OK) return st;
  if (xf_file_check_target(out, &cli->err) != XF_OK) return xf_cli_fail(cli, cli->err.code);

  xf_model *m = NULL;
  float *params = NULL;
  uint8_t *file = NULL;
  size_t len = 0;
  xf_err rc = load_model(cli, path, &m, &params);
  if (rc == XF_OK && fmt == XF_EXPORT_XFED)
    rc = xf_checkpoint_encode(m, params, &file, &len, &cli->err);
  if (rc == XF_OK) rc = xf__export_write(cli, fmt, out, m, params, file, len);
  if (rc == XF_OK) {
    if (cli->json) {
      json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "path", out, "format",
                            xf_export_format_name(fmt), "model", path, "architecture",
                            xf_model_describe(m), "params", (json_int_t)xf_model_num_params(m));
      if (o) {
        json_dumpf(o, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
      }
      json_decref(o);
    } else {
      printf("wrote %s (%s): %s, %zu parameters\n", out, xf_export_format_name(fmt),
             xf_model_describe(m), xf_model_num_params(m));
    }
  }
  xf_free(file);
  xf_free(params);
  xf_model_free(m);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
