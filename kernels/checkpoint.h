/* SPDX-License-Identifier: Apache-2.0 */
/* The xfed model file: a model's architecture and its flat parameters in one
 * self-describing, checksummed byte string, stored as a file or as a blob.
 *
 * Layout (all integers little-endian):
 *   8 bytes  magic "XFMODEL1"
 *   4 bytes  header length H (at most 1 MiB)
 *   H bytes  header, UTF-8 JSON: {"format": 1, "arch": "mlp", "hidden": [..],
 *            "preset": "lenet5", "input": [h, w, c], "classes": K,
 *            "params": P, "dtype": "float32-le", "digest": "<hex>",
 *            "layers": [{"name", "kind", "weight": [offset, count],
 *                        "bias": [offset, count]}, ...]}
 *   4*P bytes the parameters, float32 little-endian, in layer-table order
 *            (2*P bytes of IEEE half or bfloat16 when "dtype" is
 *            "float16-le" or "bfloat16-le": the downlink's compressed models)
 * "digest" is the BLAKE2b-256 of the parameters as float32 little-endian
 * bytes (for a half file, of the float32 values it decodes to): the
 * model_digest that `xfed train` prints. docs/model-format.md describes it
 * for other tools. */
#ifndef XF_KERNELS_CHECKPOINT_H
#define XF_KERNELS_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "crypto/digest.h"
#include "kernels/model.h"
#include "storage/blob.h"

/* The name a layer table row's kind goes by in model files, .npy sidecars
 * and trainer tasks ("dense", "conv", "relu", "maxpool", "avgpool",
 * "dropout", "layernorm", "groupnorm", "embedding", "gelu", "tanh",
 * "sigmoid", "softmax", "add"); NULL for another value. */
const char *xf_layer_kind_name(xf_layer_kind k);

/* The shape of l's weight (bias false) or bias in xfed's layout, as model
 * files' readers, .npy sidecars and trainer tasks describe it: dense
 * [out, in], conv [out, kh, kw, in], embedding [vocab, dim], a norm's gamma
 * [channels], a bias [out]. Writes dims[0..rank) and returns the rank. */
int xf_layer_tensor_dims(const xf_layer *l, bool bias, int64_t dims[4]);

/* BLAKE2b-256 of n float32 parameters as little-endian bytes. */
void xf_params_digest(const float *params, size_t n, xf_digest *out);

/* How the parameters are stored. */
typedef enum xf_checkpoint_dtype {
  XF_CHECKPOINT_F32 = 0, /* float32: exact */
  XF_CHECKPOINT_F16,     /* IEEE half, round to nearest even */
  XF_CHECKPOINT_BF16     /* bfloat16, round to nearest even */
} xf_checkpoint_dtype;

/* Encodes m's architecture and params (xf_model_num_params floats) with the
 * parameters stored as dtype. params_digest (may be NULL) receives the
 * digest of the float32 values the file decodes to (the rounded ones for a
 * half dtype): what a reader will check. XF_ERANGE for a NaN or infinite
 * value in a half dtype. The caller owns *out (*len bytes; xf_free). */
xf_err xf_checkpoint_encode_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                               uint8_t **out, size_t *len, xf_digest *params_digest,
                               xf_errctx *err) XF_WARN_UNUSED;

/* Encodes m's architecture and params (xf_model_num_params floats) as
 * float32. The caller owns *out (*len bytes) and frees it with xf_free. */
xf_err xf_checkpoint_encode(const xf_model *m, const float *params, uint8_t **out, size_t *len,
                            xf_errctx *err) XF_WARN_UNUSED;

/* The members of m's model file header that name its architecture (arch,
 * hidden, preset, input, classes, loss, declared) as canonical JSON: compact,
 * keys sorted, the same text a model file of m holds for them. Exports record
 * it (an ONNX model's metadata_props "xfed.model"). The caller owns *out (a
 * string; xf_free). XF_ENOMEM. */
xf_err xf_checkpoint_arch_encode(const xf_model *m, char **out, xf_errctx *err) XF_WARN_UNUSED;

/* Reads such a text from an untrusted source (len bytes, up to 1 MiB) with
 * the checks a model file header gets: a JSON object without duplicate
 * keys, a known arch, every field in range. where names the text in
 * messages ("model header: ..."). xf_model_create then checks that the spec
 * builds. XF_EFORMAT naming what is wrong. */
xf_err xf_checkpoint_arch_decode(const char *text, size_t len, const char *where,
                                 xf_model_spec *spec, xf_errctx *err) XF_WARN_UNUSED;

/* Decodes and verifies bytes from an untrusted source: magic, header, that the
 * architecture rebuilds to the stated layer table and parameter count, and
 * the digest. On success the caller owns *model (xf_model_free) and *params
 * (xf_free). XF_EFORMAT / XF_ETRUNCATED / XF_EINTEGRITY with what is wrong. */
xf_err xf_checkpoint_decode(const uint8_t *data, size_t len, xf_model **model, float **params,
                            xf_errctx *err) XF_WARN_UNUSED;
/* xf_checkpoint_decode, and *params_digest the parameters' digest it has
 * verified (xf_params_digest of *params), for a caller that compares it with
 * one it was given instead of hashing the parameters a second time. */
xf_err xf_checkpoint_decode_digest(const uint8_t *data, size_t len, xf_model **model,
                                   float **params, xf_digest *params_digest,
                                   xf_errctx *err) XF_WARN_UNUSED;

/* Writes the encoding to path atomically (temporary file, fsync, rename), so
 * a reader never sees half a model. */
xf_err xf_checkpoint_save_file(const char *path, const xf_model *m, const float *params,
                               xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_checkpoint_load_file(const char *path, xf_model **model, float **params,
                               xf_errctx *err) XF_WARN_UNUSED;

/* The same through the content-addressed blob store; *blob names the stored
 * encoding (not the parameter digest). */
xf_err xf_checkpoint_save_blob(xf_blob_store *store, const xf_model *m, const float *params,
                               xf_digest *blob, xf_errctx *err) XF_WARN_UNUSED;
xf_err xf_checkpoint_load_blob(xf_blob_store *store, const xf_digest *blob, xf_model **model,
                               float **params, xf_errctx *err) XF_WARN_UNUSED;

#endif
