/* SPDX-License-Identifier: Apache-2.0 */
/* Export for deployment: a model's layer table and parameters as an ONNX
 * graph, as a NumPy .npz of named tensors, or as a bare .npy vector. The
 * exporters walk the layer table, one case per layer kind, and write each
 * parameter tensor in the layout other frameworks use (docs/model-format.md
 * "Export for deployment"). */
#ifndef XF_KERNELS_EXPORT_H
#define XF_KERNELS_EXPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"
#include "kernels/model.h"

/* The ONNX operator set and IR version written: opset 13 is read by
 * onnxruntime and by ONNX 1.8 and later (Debian's python3-onnx 1.12
 * included); IR version 7 is the one that came with it. */
#define XF_ONNX_OPSET 13
#define XF_ONNX_IR_VERSION 7
/* The ModelProto metadata_props key under which a declared model's export
 * records its architecture (xf_checkpoint_arch_encode's JSON). */
#define XF_ONNX_ARCH_KEY "xfed.model"

typedef enum xf_export_format {
  XF_EXPORT_XFED = 0, /* the xfed model file (kernels/checkpoint.h) */
  XF_EXPORT_NPY,      /* the flat parameter vector as one .npy */
  XF_EXPORT_NPZ,      /* one .npy per tensor in a zip archive */
  XF_EXPORT_ONNX      /* an ONNX ModelProto */
} xf_export_format;

/* "xfed", "npy", "npz", "onnx". */
const char *xf_export_format_name(xf_export_format f);
/* The format a --format word names; false for another word. */
bool xf_export_format_parse(const char *word, xf_export_format *f);
/* The format a path's extension names (.xfm, .npy, .npz, .onnx); false for
 * any other extension or none. */
bool xf_export_format_of_path(const char *path, xf_export_format *f);

/* One parameter tensor in the deployment layout: a dense layer's weight
 * [out, in] with the inputs in NCHW order (channel, row, column), a conv
 * layer's weight [out, in, kh, kw] (OIHW), a layernorm's or groupnorm's
 * weight (gamma) and bias (beta) [c], an embedding's table [vocab, dim]
 * (no bias), a bias [out]. */
typedef struct xf_export_tensor {
  char name[40];   /* "<layer>.weight" or "<layer>.bias": "conv1.weight", "ln1.bias" */
  int rank;        /* 1, 2 or 4 */
  int64_t dims[4];
  size_t count;    /* the product of dims */
  float *data;     /* count floats, owned by the array (xf_export_tensors_free) */
} xf_export_tensor;

/* The model's parameter tensors in layer-table order, each converted from
 * xfed's NHWC layout (kernels/model.h) to the deployment layout above. The
 * caller owns *out (*n entries) and frees it with xf_export_tensors_free.
 * XF_ENOMEM; XF_EUNSUPPORTED naming a layer of a kind without a mapping. */
xf_err xf_export_tensors(const xf_model *m, const float *params, xf_export_tensor **out, int *n,
                         xf_errctx *err) XF_WARN_UNUSED;
void xf_export_tensors_free(xf_export_tensor *t, int n);

/* An ONNX ModelProto (opset XF_ONNX_OPSET): input `input` float32
 * [N, C, H, W], output `logits` float32 [N, classes] and `probabilities`
 * (Softmax over logits); the parameters are initializers named as
 * xf_export_tensors names them. Kinds opset 13 has no operator for
 * (layernorm, groupnorm, gelu, embedding) are decomposed into its
 * operators, with their constants as Constant nodes (docs/model-format.md
 * lists the nodes of each kind). description goes into the model's
 * doc_string (may be NULL). The caller owns *out (*len bytes; xf_free).
 * XF_EUNSUPPORTED naming a layer the graph cannot take; XF_ERANGE for a
 * model of 2 GiB or more (protocol buffers' limit; ONNX's external data is
 * not written); XF_ENOMEM. */
xf_err xf_export_onnx(const xf_model *m, const float *params, const char *description,
                      uint8_t **out, size_t *len, xf_errctx *err) XF_WARN_UNUSED;

/* Reads back an ONNX model that xf_export_onnx wrote, from an untrusted
 * source: the graph must be exactly the graph xfed writes for one of its
 * architectures (the same nodes, attributes, initializer names and shapes,
 * input and output shapes, opset XF_ONNX_OPSET), and the initializers
 * float32 (raw_data or float_data) of the stated sizes; the parameters are
 * converted back to xfed's layout. The architecture is the one metadata_props
 * XF_ONNX_ARCH_KEY states (read as a model file's header is), or without
 * that key the preset the graph's shapes name; either way the graph must be
 * the one xfed writes for it. A graph from another tool, or edited, is
 * refused (XF_EFORMAT naming what differs; XF_EUNSUPPORTED for an
 * architecture xfed has no table for). On success the caller owns *model
 * (xf_model_free) and *params (xf_free). */
xf_err xf_export_onnx_read(const uint8_t *data, size_t len, xf_model **model, float **params,
                           xf_errctx *err) XF_WARN_UNUSED;

/* A .npz: a zip archive (entries stored, CRC-32 from zlib) holding
 * "<tensor name>.npy" for every tensor of xf_export_tensors, '<f4' with its
 * shape. XF_ERANGE when the archive would reach 4 GiB (that needs ZIP64,
 * which is not written). The caller owns *out (*len bytes; xf_free). */
xf_err xf_export_npz(const xf_model *m, const float *params, uint8_t **out, size_t *len,
                     xf_errctx *err) XF_WARN_UNUSED;

/* n floats as a NumPy format 1.0 .npy of shape (n,), '<f4'. The caller
 * owns *out (*len bytes; xf_free). */
xf_err xf_export_npy_vector(const float *values, size_t n, uint8_t **out, size_t *len,
                            xf_errctx *err) XF_WARN_UNUSED;

#endif
