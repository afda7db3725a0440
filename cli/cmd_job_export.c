/* SPDX-License-Identifier: Apache-2.0 */
/* `xfed job export`: a job's model from the coordinator, verified, written
 * as the xfed model file, as ONNX, as a NumPy .npz of named tensors or as a
 * .npy vector with a layer table beside it (docs/model-format.md). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "cli/job_internal.h"
#include "crypto/digest.h"
#include "cli/export_internal.h"
#include "kernels/checkpoint.h"
#include "kernels/export.h"
#include "kernels/model.h"
#include "base/file.h"

/* The parts of a verified model file: its header (parsed) and its
 * parameter bytes (float32 little-endian), read through a cursor. */
typedef struct model_parts {
  json_t *header;
  const uint8_t *params;
  size_t n_params;
} model_parts;

static xf_err split_model(const uint8_t *data, size_t len, size_t n_params, model_parts *out,
                          xf_errctx *err) {
  xf_cursor cur = xf_cursor_make(data, len);
  uint8_t magic[8], h4[4];
  const uint8_t *header = NULL;
  XF_GUARD(xf_cursor_bytes(&cur, magic, sizeof(magic)));
  XF_GUARD(xf_cursor_bytes(&cur, h4, sizeof(h4)));
  size_t h = (size_t)h4[0] | (size_t)h4[1] << 8 | (size_t)h4[2] << 16 | (size_t)h4[3] << 24;
  XF_GUARD(xf_cursor_view(&cur, &header, h));
  XF_GUARD(xf_cursor_view(&cur, &out->params, n_params * sizeof(float)));
  XF_ENSURE(xf_cursor_remaining(&cur) == 0, err, XF_EFORMAT, "bytes follow the parameters");
  out->header = json_loadb((const char *)header, h, 0, NULL);
  XF_ENSURE(json_is_object(out->header), err, XF_EFORMAT, "the model header is not a JSON object");
  out->n_params = n_params;
  return XF_OK;
}

/* One entry of the layer table: a weight or a bias tensor of a layer. */
static json_t *tensor_entry(const xf_layer *l, bool bias) {
  char name[32];
  snprintf(name, sizeof(name), "%s.%s", l->name, bias ? "bias" : "weight");
  int64_t dims[4];
  const int rank = xf_layer_tensor_dims(l, bias, dims);
  json_t *shape = json_array();
  for (int d = 0; shape && d < rank; d++) json_array_append_new(shape, json_integer(dims[d]));
  return json_pack("{s:s,s:s,s:s,s:o,s:I,s:I}", "name", name, "layer", l->name, "kind",
                   xf_layer_kind_name(l->kind), "shape", shape, "offset",
                   (json_int_t)(bias ? l->bias_offset : l->weight_offset), "count",
                   (json_int_t)(bias ? l->bias_count : l->weight_count));
}

/* The sidecar of a .npy export: what the vector is and how to cut it. */
static json_t *sidecar_json(const xf_model *m, const model_parts *p, const char *npy_path,
                            const char *job_id, uint32_t round) {
  const char *slash = strrchr(npy_path, '/');
  json_t *layers = json_array();
  for (int i = 0; layers && i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    if (l->weight_count) json_array_append_new(layers, tensor_entry(l, false));
    if (l->bias_count) json_array_append_new(layers, tensor_entry(l, true));
  }
  json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:s}", "format", "xfed-npy-layers/1", "npy",
                        slash ? slash + 1 : npy_path, "job_id", job_id, "round",
                        (json_int_t)round, "model", xf_model_describe(m), "params",
                        (json_int_t)p->n_params, "dtype", "float32-le");
  if (!o) {
    json_decref(layers);
    return NULL;
  }
  static const char *const copied[] = {"arch",    "hidden",  "preset", "declared",
                                       "input", "classes", "digest"};
  for (size_t i = 0; i < sizeof(copied) / sizeof(copied[0]); i++) {
    json_t *v = json_object_get(p->header, copied[i]);
    if (v) json_object_set(o, copied[i], v);
  }
  json_object_set_new(o, "layers", layers ? layers : json_array());
  return o;
}

static const struct option export_opts[] = {
    XF_CLIENT_OPTIONS,
    {"round", required_argument, 0, XF__JOB_OPT_ROUND},
    {"out", required_argument, 0, XF__JOB_OPT_OUT},
    {"format", required_argument, 0, XF__JOB_OPT_FORMAT},
    {0, 0, 0, 0}};

int xf__export_pick_format(xf_cli *cli, const char *out, const char *flag, bool allow_npy,
                           xf_export_format *fmt) {
  xf_export_format by_ext = XF_EXPORT_XFED, by_flag = XF_EXPORT_XFED;
  bool ext = xf_export_format_of_path(out, &by_ext);
  const char *words = allow_npy ? "onnx, npz, npy or xfed" : "onnx, npz or xfed";
  if (flag && (!xf_export_format_parse(flag, &by_flag) ||
               (!allow_npy && by_flag == XF_EXPORT_NPY)))
    return xf_cli_usage(cli, "--format '%s' is not %s", flag, words);
  if (ext && !allow_npy && by_ext == XF_EXPORT_NPY)
    return xf_cli_usage(cli, "'%s': a .npy is written by 'xfed job export'; name the file "
                        ".onnx, .npz or .xfm", out);
  if (flag && ext && by_flag != by_ext)
    return xf_cli_usage(cli, "--format %s disagrees with the extension of '%s' (%s); drop "
                        "--format or name the file %s", flag, out,
                        xf_export_format_name(by_ext),
                        by_flag == XF_EXPORT_XFED ? ".xfm" :
                        by_flag == XF_EXPORT_NPY ? ".npy" :
                        by_flag == XF_EXPORT_NPZ ? ".npz" : ".onnx");
  /* A file named otherwise is the xfed model file unless --format says. */
  *fmt = flag ? by_flag : ext ? by_ext : XF_EXPORT_XFED;
  return XF_EXIT_OK;
}

xf_err xf__export_write(xf_cli *cli, xf_export_format fmt, const char *out, const xf_model *m,
                        const float *params, const uint8_t *xfed_file, size_t xfed_len) {
  uint8_t *bytes = NULL;
  size_t len = 0;
  xf_err rc;
  switch (fmt) {
  case XF_EXPORT_XFED:
    return xf_file_write_atomic(out, xfed_file, xfed_len, 0644, &cli->err);
  case XF_EXPORT_NPY:
    rc = xf_export_npy_vector(params, xf_model_num_params(m), &bytes, &len, &cli->err);
    break;
  case XF_EXPORT_NPZ:
    rc = xf_export_npz(m, params, &bytes, &len, &cli->err);
    break;
  case XF_EXPORT_ONNX:
    rc = xf_export_onnx(m, params, NULL, &bytes, &len, &cli->err);
    break;
  default:
    rc = xf_fail(&cli->err, XF_EINVAL, "unknown export format %d", (int)fmt);
  }
  if (rc == XF_OK) rc = xf_file_write_atomic(out, bytes, len, 0644, &cli->err);
  xf_free(bytes);
  return rc;
}

/* Writes the model in the chosen format; the .npy's sidecar first, so that
 * a reader who finds the vector finds its layer table. */
static xf_err write_export(xf_cli *cli, xf_export_format fmt, const char *out,
                           const uint8_t *data, size_t len, const xf_model *m,
                           const float *params, const model_parts *p, const char *job_id,
                           uint32_t round, char *sidecar, size_t n) {
  sidecar[0] = '\0';
  if (fmt != XF_EXPORT_NPY) return xf__export_write(cli, fmt, out, m, params, data, len);
  int w = snprintf(sidecar, n, "%s.json", out);
  if (w < 0 || (size_t)w >= n) return xf_fail(&cli->err, XF_ERANGE, "--out is too long");
  json_t *side = sidecar_json(m, p, out, job_id, round);
  char *text = side ? json_dumps(side, JSON_INDENT(2)) : NULL;
  json_decref(side);
  if (!text) return xf_fail(&cli->err, XF_ENOMEM, "cannot build the layer table");
  size_t tl = strlen(text);
  char *file = xf_malloc(tl + 1);
  if (file) {
    memcpy(file, text, tl);
    file[tl] = '\n';
  }
  free(text); /* jansson's allocator */
  if (!file) return xf_fail(&cli->err, XF_ENOMEM, "cannot build the layer table");
  xf_err rc = xf_file_write_atomic(sidecar, file, tl + 1, 0644, &cli->err);
  xf_free(file);
  if (rc != XF_OK) return rc;
  return xf__export_write(cli, fmt, out, m, params, data, len);
}

int xf_cmd_job_export(xf_cli *cli, int argc, char **argv) {
  xf__job_args a;
  int st = xf__job_parse(cli, argc, argv, export_opts, 1, "ID", &a);
  if (st != XF_EXIT_OK) return st;
  if (!a.out || !*a.out) return xf_cli_usage(cli, "--out FILE is required");
  xf_export_format fmt = XF_EXPORT_XFED;
  if ((st = xf__export_pick_format(cli, a.out, a.format, true, &fmt)) != XF_EXIT_OK) return st;
  /* A target that may not be replaced is refused before the download. */
  char layers[XF_CLIENT_PATH_MAX + 8];
  snprintf(layers, sizeof(layers), "%s.json", a.out);
  if (xf_file_check_target(a.out, &cli->err) != XF_OK ||
      (fmt == XF_EXPORT_NPY && xf_file_check_target(layers, &cli->err) != XF_OK))
    return xf_cli_fail(cli, cli->err.code);

  xf_client *c = NULL;
  if ((st = xf_client_connect(cli, &a.conn, &c)) != XF_EXIT_OK) return st;
  uint8_t *data = NULL;
  size_t len = 0;
  uint32_t round = 0;
  xf_err rc = xf_client_fetch_model(c, a.arg, (uint32_t)a.round, XF_CLIENT_MODEL_MAX, &data, &len,
                                    &round, &cli->err);
  if (rc != XF_OK) {
    st = xf__job_fail(cli, c, rc, XF__JOB_ANY_USER);
    xf_client_close(c);
    return st;
  }
  xf_client_close(c);
  if (a.round && round != (uint32_t)a.round) {
    xf_free(data);
    xf_fail(&cli->err, XF_EFORMAT, "asked for the model after round %ld, the coordinator sent "
            "round %u", a.round, (unsigned)round);
    return xf_cli_fail(cli, XF_EFORMAT);
  }

  xf_model *m = NULL;
  float *params = NULL;
  model_parts p = {0};
  rc = xf_checkpoint_decode(data, len, &m, &params, &cli->err);
  if (rc != XF_OK) {
    char why[sizeof(cli->err.msg)];
    snprintf(why, sizeof(why), "the model the coordinator sent does not verify: %.400s",
             cli->err.msg);
    memcpy(cli->err.msg, why, sizeof(why));
  }
  if (rc == XF_OK) rc = split_model(data, len, xf_model_num_params(m), &p, &cli->err);
  char sidecar[XF_CLIENT_PATH_MAX + 8] = "";
  if (rc == XF_OK)
    rc = write_export(cli, fmt, a.out, data, len, m, params, &p, a.arg, round, sidecar,
                      sizeof(sidecar));
  if (rc == XF_OK) {
    /* As `xfed job status` names them: the model (its parameters) and the
     * model file the coordinator holds (the bytes it sent). */
    xf_digest d, fd;
    char hex[XF_DIGEST_HEX], file_hex[XF_DIGEST_HEX];
    xf_params_digest(params, xf_model_num_params(m), &d);
    xf_digest_hex(&d, hex);
    xf_digest_buf(data, len, &fd);
    xf_digest_hex(&fd, file_hex);
    const char *format = xf_export_format_name(fmt);
    if (cli->json) {
      json_t *o = json_pack("{s:s,s:s,s:s,s:I,s:s,s:I,s:s}", "path", a.out, "format", format,
                            "job_id", a.arg, "round", (json_int_t)round, "model",
                            xf_model_describe(m), "params",
                            (json_int_t)xf_model_num_params(m), "model_digest", hex);
      if (o) json_object_set_new(o, "model_file_digest", json_string(file_hex));
      if (o && sidecar[0]) json_object_set_new(o, "layers", json_string(sidecar));
      xf__job_print_json(o);
    } else {
      printf("wrote %s (%s): job %s after round %u, %s, %zu parameters\n", a.out, format, a.arg,
             (unsigned)round, xf_model_describe(m), xf_model_num_params(m));
      if (sidecar[0]) printf("layers %s\n", sidecar);
      printf("model_digest %s\n", hex);
      printf("model_file_digest %s\n", file_hex);
    }
  }
  json_decref(p.header);
  xf_model_free(m);
  xf_free(params);
  xf_free(data);
  return rc == XF_OK ? XF_EXIT_OK : xf_cli_fail(cli, rc);
}
