/* SPDX-License-Identifier: Apache-2.0 */
/* Export for deployment: the layer table walked into an ONNX graph (built
 * with the protobuf-c code generated from ONNX's own onnx.proto), a .npz of
 * named tensors, or a .npy vector. */
#include "kernels/export.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "kernels/checkpoint.h"
#include "kernels/onnx/onnx.pb-c.h"

#define NPY_MAGIC "\x93NUMPY"
/* NumPy pads the header so that the data starts on a multiple of 64 bytes. */
#define NPY_ALIGN 64

static const char *const format_names[] = {"xfed", "npy", "npz", "onnx"};
static const char *const format_exts[] = {".xfm", ".npy", ".npz", ".onnx"};
#define N_FORMATS (sizeof(format_names) / sizeof(format_names[0]))

const char *xf_export_format_name(xf_export_format f) {
  return (size_t)f < N_FORMATS ? format_names[f] : "?";
}

bool xf_export_format_parse(const char *word, xf_export_format *f) {
  for (size_t i = 0; i < N_FORMATS; i++)
    if (strcmp(word, format_names[i]) == 0) {
      *f = (xf_export_format)i;
      return true;
    }
  return false;
}

bool xf_export_format_of_path(const char *path, xf_export_format *f) {
  size_t n = strlen(path);
  for (size_t i = 0; i < N_FORMATS; i++) {
    size_t k = strlen(format_exts[i]);
    if (n > k && strcmp(path + n - k, format_exts[i]) == 0) {
      *f = (xf_export_format)i;
      return true;
    }
  }
  return false;
}

/* ---- tensors in the deployment layout ------------------------------------ */

void xf_export_tensors_free(xf_export_tensor *t, int n) {
  for (int i = 0; t && i < n; i++) xf_free(t[i].data);
  xf_free(t);
}

static xf_export_tensor *tensor_new(xf_export_tensor *t, int *n, const xf_layer *l,
                                    const char *what, int rank, const int64_t *dims) {
  xf_export_tensor *e = &t[(*n)++];
  snprintf(e->name, sizeof(e->name), "%s.%s", l->name, what);
  e->rank = rank;
  e->count = 1;
  for (int i = 0; i < rank; i++) {
    e->dims[i] = dims[i];
    e->count *= (size_t)dims[i];
  }
  e->data = xf_mallocarray(e->count, sizeof(float));
  return e->data ? e : NULL;
}

/* Each of `rows` rows holds an H x W x C block in xfed's (row, column,
 * channel) order; the deployment graph wants (channel, row, column). With
 * to_xfed, the other way, for reading an export back. */
static void hwc_rows(size_t rows, size_t H, size_t W, size_t C, const float *src, float *dst,
                     bool to_xfed) {
  const size_t F = H * W * C;
  for (size_t o = 0; o < rows; o++)
    for (size_t c = 0; c < C; c++)
      for (size_t h = 0; h < H; h++)
        for (size_t w = 0; w < W; w++) {
          size_t chw = o * F + (c * H + h) * W + w, hwc = o * F + (h * W + w) * C + c;
          if (to_xfed) dst[hwc] = src[chw];
          else dst[chw] = src[hwc];
        }
}

/* A dense layer's weight: xfed's [out x in] rows take the input in its NHWC
 * order; the deployment graph flattens NCHW, so the columns are permuted to
 * match. For a layer after another dense layer (1x1xF) the permutation is
 * the identity. */
static void dense_weight(const xf_layer *l, const float *src, float *dst, bool to_xfed) {
  hwc_rows((size_t)l->out_c, (size_t)l->in_h, (size_t)l->in_w, (size_t)l->in_c, src, dst,
           to_xfed);
}

/* A conv layer's weight: xfed's [out x (kh*kw*in)] with the inner index
 * (i*kw + j)*in + ch (kernels/model.h) to OIHW, or back with to_xfed. */
static void conv_weight(const xf_layer *l, const float *src, float *dst, bool to_xfed) {
  hwc_rows((size_t)l->out_c, (size_t)l->kernel, (size_t)l->kernel, (size_t)l->in_c, src, dst,
           to_xfed);
}

xf_err xf_export_tensors(const xf_model *m, const float *params, xf_export_tensor **out, int *n,
                         xf_errctx *err) {
  const int layers = xf_model_num_layers(m);
  xf_export_tensor *t = xf_calloc((size_t)layers * 2 + 1, sizeof(*t));
  if (!t) return xf_fail(err, XF_ENOMEM, "cannot allocate the tensor table");
  int k = 0;
  for (int i = 0; i < layers; i++) {
    const xf_layer *l = xf_model_layer(m, i);
    xf_export_tensor *w = NULL, *b = NULL;
    switch (l->kind) {
    case XF_LAYER_DENSE: {
      const int64_t wd[2] = {l->out_c, (int64_t)(l->weight_count / (size_t)l->out_c)};
      if ((w = tensor_new(t, &k, l, "weight", 2, wd)))
        dense_weight(l, params + l->weight_offset, w->data, false);
      break;
    }
    case XF_LAYER_CONV: {
      const int64_t wd[4] = {l->out_c, l->in_c, l->kernel, l->kernel};
      if ((w = tensor_new(t, &k, l, "weight", 4, wd)))
        conv_weight(l, params + l->weight_offset, w->data, false);
      break;
    }
    case XF_LAYER_LAYERNORM:
    case XF_LAYER_GROUPNORM: {
      /* gamma[c] then beta[c], PyTorch's LayerNorm and GroupNorm tensors */
      const int64_t wd[1] = {l->out_c};
      if ((w = tensor_new(t, &k, l, "weight", 1, wd)))
        memcpy(w->data, params + l->weight_offset, l->weight_count * sizeof(float));
      break;
    }
    case XF_LAYER_EMBEDDING: {
      /* [vocab, dim] row-major in both layouts, PyTorch's Embedding.weight */
      const int64_t wd[2] = {l->vocab, l->out_c};
      if ((w = tensor_new(t, &k, l, "weight", 2, wd)))
        memcpy(w->data, params + l->weight_offset, l->weight_count * sizeof(float));
      break;
    }
    case XF_LAYER_RELU:
    case XF_LAYER_MAXPOOL:
    case XF_LAYER_AVGPOOL:
    case XF_LAYER_DROPOUT:
    case XF_LAYER_GELU:
    case XF_LAYER_TANH:
    case XF_LAYER_SIGMOID:
    case XF_LAYER_SOFTMAX:
    case XF_LAYER_ADD:
      continue; /* no parameters */
    default:
      xf_export_tensors_free(t, k);
      return xf_fail(err, XF_EUNSUPPORTED, "layer %s: kind %d has no export mapping", l->name,
                     (int)l->kind);
    }
    const int64_t bd[1] = {(int64_t)l->bias_count};
    if (w && l->bias_count && (b = tensor_new(t, &k, l, "bias", 1, bd)))
      memcpy(b->data, params + l->bias_offset, l->bias_count * sizeof(float));
    if (!w || (l->bias_count && !b)) {
      xf_export_tensors_free(t, k);
      return xf_fail(err, XF_ENOMEM, "cannot allocate the tensors of layer %s", l->name);
    }
  }
  *out = t;
  *n = k;
  return XF_OK;
}

/* float32 little-endian bytes, whatever the host's byte order. */
static void store_f32le(uint8_t *dst, const float *src, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &src[i], sizeof(u));
    dst[4 * i] = (uint8_t)u;
    dst[4 * i + 1] = (uint8_t)(u >> 8);
    dst[4 * i + 2] = (uint8_t)(u >> 16);
    dst[4 * i + 3] = (uint8_t)(u >> 24);
  }
}

/* ---- ONNX ------------------------------------------------------------------ */

/* Room for the whole graph. A layer takes at most XF__LAYER_NODES nodes (a
 * groupnorm on an image: four constants and thirteen operators; opset 13 has
 * no normalization, GELU or affine operator to do it in one), and the
 * Softmax of the logits one more; per node at most three attributes of up
 * to four ints. */
#define XF__LAYER_NODES 17
#define MAX_NODES (XF__LAYER_NODES * XF_MODEL_MAX_LAYERS + 1)
#define MAX_ATTRS 3
#define MAX_INITS (2 * XF_MODEL_MAX_LAYERS)
/* The largest Constant a graph holds: a Reshape's four int64 dimensions. */
#define MAX_CONST_BYTES 32

typedef struct onnx_node {
  Onnx__NodeProto node;
  char *inputs[3];
  char *outputs[1];
  char name[40], out[40];
  Onnx__AttributeProto attr[MAX_ATTRS];
  Onnx__AttributeProto *attr_ptr[MAX_ATTRS];
  int64_t ints[MAX_ATTRS][4];
  Onnx__TensorProto value; /* a Constant's */
  int64_t value_dims[1];
  uint8_t value_bytes[MAX_CONST_BYTES];
} onnx_node;

/* A graph input or output: float32 of shape [N, dims...] with N symbolic. */
typedef struct onnx_value {
  Onnx__ValueInfoProto info;
  Onnx__TypeProto type;
  Onnx__TypeProto__Tensor tensor;
  Onnx__TensorShapeProto shape;
  Onnx__TensorShapeProto__Dimension dim[4];
  Onnx__TensorShapeProto__Dimension *dim_ptr[4];
} onnx_value;

/* Everything the ModelProto points into, so that one free releases it. */
typedef struct onnx_graph {
  onnx_node nodes[MAX_NODES];
  Onnx__NodeProto *node_ptr[MAX_NODES];
  int n_nodes;
  Onnx__TensorProto inits[MAX_INITS];
  Onnx__TensorProto *init_ptr[MAX_INITS];
  int64_t init_dims[MAX_INITS][4];
  uint8_t *init_bytes[MAX_INITS];
  int n_inits;
  onnx_value input, outputs[2];
  Onnx__ValueInfoProto *input_ptr[1], *output_ptr[2];
  Onnx__GraphProto graph;
  Onnx__OperatorSetIdProto opset;
  Onnx__OperatorSetIdProto *opset_ptr[1];
  Onnx__ModelProto model;
  Onnx__StringStringEntryProto meta;
  Onnx__StringStringEntryProto *meta_ptr[1];
  char *arch_text; /* the metadata's value, xf_checkpoint_arch_encode's */
} onnx_graph;

static onnx_node *add_node(onnx_graph *g, const char *op, const char *name) {
  onnx_node *n = &g->nodes[g->n_nodes];
  g->node_ptr[g->n_nodes++] = &n->node;
  onnx__node_proto__init(&n->node);
  snprintf(n->name, sizeof(n->name), "%s", name);
  snprintf(n->out, sizeof(n->out), "%s", name);
  n->node.op_type = (char *)op;
  n->node.name = n->name;
  /* The previous node's output, by pointer: renaming it (to "logits")
   * renames the input that reads it. */
  n->inputs[0] = g->n_nodes > 1 ? g->nodes[g->n_nodes - 2].out : "input";
  n->node.input = n->inputs;
  n->node.n_input = 1;
  n->outputs[0] = n->out;
  n->node.output = n->outputs;
  n->node.n_output = 1;
  n->node.attribute = n->attr_ptr;
  return n;
}

static Onnx__AttributeProto *add_attr(onnx_node *n, const char *name) {
  size_t k = n->node.n_attribute++;
  Onnx__AttributeProto *a = &n->attr[k];
  onnx__attribute_proto__init(a);
  a->name = (char *)name;
  a->has_type = 1;
  n->attr_ptr[k] = a;
  return a;
}

static void add_int(onnx_node *n, const char *name, int64_t v) {
  Onnx__AttributeProto *a = add_attr(n, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
  a->has_i = 1;
  a->i = v;
}

/* count is at most 4 (a 2-D convolution's pads). */
static void add_ints(onnx_node *n, const char *name, const int64_t *v, size_t count) {
  size_t k = n->node.n_attribute;
  Onnx__AttributeProto *a = add_attr(n, name);
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
  memcpy(n->ints[k], v, count * sizeof(int64_t));
  a->ints = n->ints[k];
  a->n_ints = count;
}

/* A node reading a (and b, when not NULL) instead of the previous node's
 * output; a and b point at the producing node's out (or name "input"), so
 * renaming that output renames the inputs that read it. */
static onnx_node *add_op(onnx_graph *g, const char *op, const char *name, const char *a,
                         const char *b) {
  onnx_node *n = add_node(g, op, name);
  n->inputs[0] = (char *)a;
  if (b) {
    n->inputs[1] = (char *)b;
    n->node.n_input = 2;
  }
  return n;
}

/* A Constant node holding a rank-1 tensor of count values (float32 from f,
 * or int64 from i when f is NULL), little-endian in raw_data. Returns its
 * output's name. */
static const char *add_const(onnx_graph *g, const char *name, const float *f, const int64_t *i,
                             size_t count) {
  onnx_node *n = add_node(g, "Constant", name);
  n->node.n_input = 0;
  Onnx__TensorProto *t = &n->value;
  onnx__tensor_proto__init(t);
  n->value_dims[0] = (int64_t)count;
  t->dims = n->value_dims;
  t->n_dims = 1;
  t->has_data_type = 1;
  t->data_type = f ? ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT : ONNX__TENSOR_PROTO__DATA_TYPE__INT64;
  if (f) {
    store_f32le(n->value_bytes, f, count);
  } else {
    for (size_t k = 0; k < count; k++)
      for (int byte = 0; byte < 8; byte++)
        n->value_bytes[8 * k + (size_t)byte] = (uint8_t)((uint64_t)i[k] >> (8 * byte));
  }
  t->has_raw_data = 1;
  t->raw_data.data = n->value_bytes;
  t->raw_data.len = count * (f ? sizeof(float) : sizeof(int64_t));
  Onnx__AttributeProto *a = add_attr(n, "value");
  a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
  a->t = t;
  return n->out;
}

static const char *add_const_f(onnx_graph *g, const char *layer, const char *what, float v) {
  char name[40];
  snprintf(name, sizeof(name), "%s.%s", layer, what);
  return add_const(g, name, &v, NULL, 1);
}

static const char *add_const_i(onnx_graph *g, const char *layer, const char *what,
                               const int64_t *v, size_t count) {
  char name[40];
  snprintf(name, sizeof(name), "%s.%s", layer, what);
  return add_const(g, name, NULL, v, count);
}

/* The node "<layer>.<what>" of operator op on a (and b). */
static onnx_node *step_node(onnx_graph *g, const char *op, const char *layer, const char *what,
                            const char *a, const char *b) {
  char name[40];
  snprintf(name, sizeof(name), "%s.%s", layer, what);
  return add_op(g, op, name, a, b);
}

static const char *step(onnx_graph *g, const char *op, const char *layer, const char *what,
                        const char *a, const char *b) {
  return step_node(g, op, layer, what, a, b)->out;
}

static xf_err add_init(onnx_graph *g, const xf_export_tensor *t, xf_errctx *err) {
  int k = g->n_inits++;
  Onnx__TensorProto *p = &g->inits[k];
  onnx__tensor_proto__init(p);
  memcpy(g->init_dims[k], t->dims, sizeof(t->dims));
  p->dims = g->init_dims[k];
  p->n_dims = (size_t)t->rank;
  p->has_data_type = 1;
  p->data_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  p->name = (char *)t->name;
  g->init_bytes[k] = xf_mallocarray(t->count, sizeof(float));
  if (!g->init_bytes[k])
    return xf_fail(err, XF_ENOMEM, "cannot allocate the initializer %s", t->name);
  store_f32le(g->init_bytes[k], t->data, t->count);
  p->has_raw_data = 1;
  p->raw_data.data = g->init_bytes[k];
  p->raw_data.len = t->count * sizeof(float);
  g->init_ptr[k] = p;
  return XF_OK;
}

static void value_info(onnx_value *v, const char *name, const int64_t *dims, int rank) {
  onnx__value_info_proto__init(&v->info);
  onnx__type_proto__init(&v->type);
  onnx__type_proto__tensor__init(&v->tensor);
  onnx__tensor_shape_proto__init(&v->shape);
  v->info.name = (char *)name;
  v->info.type = &v->type;
  v->type.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  v->type.tensor_type = &v->tensor;
  v->tensor.has_elem_type = 1;
  v->tensor.elem_type = ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
  v->tensor.shape = &v->shape;
  for (int i = 0; i < rank; i++) {
    onnx__tensor_shape_proto__dimension__init(&v->dim[i]);
    if (i == 0) {
      v->dim[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      v->dim[i].dim_param = "N";
    } else {
      v->dim[i].value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      v->dim[i].dim_value = dims[i];
    }
    v->dim_ptr[i] = &v->dim[i];
  }
  v->shape.dim = v->dim_ptr;
  v->shape.n_dim = (size_t)rank;
}

/* (t - mean) / sqrt(var + eps) over axis of t, with the biased variance
 * (XF_NORM_EPS, as kernels/backend.h's xf_k_norm_fwd). */
static const char *standardize(onnx_graph *g, const char *layer, const char *t, int64_t axis) {
  const char *eps = add_const_f(g, layer, "eps", XF_NORM_EPS);
  onnx_node *mean = step_node(g, "ReduceMean", layer, "mean", t, NULL);
  add_ints(mean, "axes", &axis, 1);
  add_int(mean, "keepdims", 1);
  const char *d = step(g, "Sub", layer, "centered", t, mean->out);
  const char *sq = step(g, "Mul", layer, "squared", d, d);
  onnx_node *var = step_node(g, "ReduceMean", layer, "var", sq, NULL);
  add_ints(var, "axes", &axis, 1);
  add_int(var, "keepdims", 1);
  const char *ve = step(g, "Add", layer, "var_eps", var->out, eps);
  const char *sd = step(g, "Sqrt", layer, "std", ve, NULL);
  return step(g, "Div", layer, "normalized", d, sd);
}

/* y * gamma + beta per channel; on an image ([N, C, H, W]) gamma and beta
 * ([C]) are unsqueezed to [C, 1, 1] to broadcast over the positions. */
static const char *affine(onnx_graph *g, const xf_layer *l, const char *y, const char *gamma,
                          const char *beta, bool spatial) {
  if (spatial) {
    const int64_t axes[2] = {1, 2};
    const char *ax = add_const_i(g, l->name, "axes", axes, 2);
    gamma = step(g, "Unsqueeze", l->name, "gamma", gamma, ax);
    beta = step(g, "Unsqueeze", l->name, "beta", beta, ax);
  }
  const char *scaled = step(g, "Mul", l->name, "scaled", y, gamma);
  return add_op(g, "Add", l->name, scaled, beta)->out;
}

/* 0.5 * t * (1 + erf(t / sqrt 2)): GELU exact, as PyTorch's default. */
static const char *gelu(onnx_graph *g, const xf_layer *l, const char *t) {
  const char *rsqrt2 = add_const_f(g, l->name, "rsqrt2", (float)M_SQRT1_2);
  const char *one = add_const_f(g, l->name, "one", 1.0f);
  const char *half = add_const_f(g, l->name, "half", 0.5f);
  const char *scaled = step(g, "Mul", l->name, "scaled", t, rsqrt2);
  const char *e = step(g, "Erf", l->name, "erf", scaled, NULL);
  const char *cdf2 = step(g, "Add", l->name, "cdf2", e, one);
  const char *gate = step(g, "Mul", l->name, "gated", t, cdf2);
  return add_op(g, "Mul", l->name, gate, half)->out;
}

/* The ids of the NCHW input taken in xfed's NHWC order (Transpose,
 * Flatten), cast to int64 and looked up in the table: [N, ids, dim], then
 * laid out as the image [N, dim, 1, ids] that xfed's 1 x ids x dim
 * output is in NCHW. */
static const char *embedding(onnx_graph *g, const xf_layer *l, const char *table) {
  const int64_t h_axis[1] = {2};
  const char *axis = add_const_i(g, l->name, "h_axis", h_axis, 1);
  onnx_node *nhwc = step_node(g, "Transpose", l->name, "nhwc", "input", NULL);
  const int64_t to_nhwc[4] = {0, 2, 3, 1};
  add_ints(nhwc, "perm", to_nhwc, 4);
  onnx_node *flat = step_node(g, "Flatten", l->name, "ids", nhwc->out, NULL);
  add_int(flat, "axis", 1);
  onnx_node *cast = step_node(g, "Cast", l->name, "ids64", flat->out, NULL);
  add_int(cast, "to", ONNX__TENSOR_PROTO__DATA_TYPE__INT64);
  const char *rows = step(g, "Gather", l->name, "rows", table, cast->out);
  onnx_node *cw = step_node(g, "Transpose", l->name, "cw", rows, NULL);
  const int64_t to_cw[3] = {0, 2, 1};
  add_ints(cw, "perm", to_cw, 3);
  return add_op(g, "Unsqueeze", l->name, cw->out, axis)->out;
}

/* Walks the layer table into nodes. The value between nodes is NCHW until a
 * dense layer needs it flat: a Flatten goes before the first dense layer
 * (its weight's columns are in NCHW order, see dense_weight); after it the
 * value is [N, features], which is xfed's 1 x 1 x features. tensors are
 * xf_export_tensors' output, a weight and (where the layer has one) a bias
 * per parameter layer in table order. */
static xf_err build_nodes(onnx_graph *g, const xf_model *m, const xf_export_tensor *tensors,
                          xf_errctx *err) {
  bool spatial = true;
  int next_tensor = 0;
  const char *x = "input";
  /* Each table row's output and whether it is an image, for add's src. */
  const char *row_out[XF_MODEL_MAX_LAYERS];
  bool row_spatial[XF_MODEL_MAX_LAYERS];
  for (int i = 0; i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    const char *weight = l->weight_count ? tensors[next_tensor++].name : NULL;
    const char *bias = l->bias_count ? tensors[next_tensor++].name : NULL;
    onnx_node *n = NULL;
    switch (l->kind) {
    case XF_LAYER_DENSE: {
      if (spatial) {
        onnx_node *f = step_node(g, "Flatten", l->name, "flatten", x, NULL);
        add_int(f, "axis", 1);
        x = f->out;
        spatial = false;
      }
      n = add_op(g, "Gemm", l->name, x, weight);
      n->inputs[2] = (char *)bias;
      n->node.n_input = 3;
      add_int(n, "transB", 1); /* B is [out, in], xfed's and PyTorch's orientation */
      break;
    }
    case XF_LAYER_CONV: {
      XF_ENSURE(spatial, err, XF_EUNSUPPORTED,
                "layer %s: a conv layer after a dense one has no image to read", l->name);
      n = add_op(g, "Conv", l->name, x, weight);
      n->inputs[2] = (char *)bias;
      n->node.n_input = 3;
      const int64_t k[2] = {l->kernel, l->kernel}, s[2] = {l->stride, l->stride},
                    p[4] = {l->pad, l->pad, l->pad, l->pad};
      add_ints(n, "kernel_shape", k, 2);
      add_ints(n, "strides", s, 2);
      add_ints(n, "pads", p, 4);
      break;
    }
    case XF_LAYER_MAXPOOL:
    case XF_LAYER_AVGPOOL: {
      XF_ENSURE(spatial, err, XF_EUNSUPPORTED,
                "layer %s: a pooling layer after a dense one has no image to read", l->name);
      /* No padding, so AveragePool's count_include_pad does not matter. */
      n = add_op(g, l->kind == XF_LAYER_MAXPOOL ? "MaxPool" : "AveragePool", l->name, x, NULL);
      const int64_t k[2] = {l->kernel, l->kernel}, s[2] = {l->stride, l->stride};
      add_ints(n, "kernel_shape", k, 2);
      add_ints(n, "strides", s, 2);
      break;
    }
    case XF_LAYER_RELU: n = add_op(g, "Relu", l->name, x, NULL); break;
    case XF_LAYER_TANH: n = add_op(g, "Tanh", l->name, x, NULL); break;
    case XF_LAYER_SIGMOID: n = add_op(g, "Sigmoid", l->name, x, NULL); break;
    /* Dropout without a ratio input or training_mode is the identity that
     * inference is. */
    case XF_LAYER_DROPOUT: n = add_op(g, "Dropout", l->name, x, NULL); break;
    case XF_LAYER_SOFTMAX:
      /* Opset 13's Softmax normalizes one axis: the channels of [N, C, H, W]
       * at each position, or the features of [N, F]. */
      n = add_op(g, "Softmax", l->name, x, NULL);
      add_int(n, "axis", 1);
      break;
    case XF_LAYER_GELU: gelu(g, l, x); break;
    case XF_LAYER_LAYERNORM:
      affine(g, l, standardize(g, l->name, x, 1), weight, bias, spatial);
      break;
    case XF_LAYER_GROUPNORM: {
      /* [N, groups, C/groups x positions]: each group's contiguous channels
       * at every position, standardized together, then the shape back. */
      const int64_t grouped[3] = {0, l->groups, -1};
      const int64_t image[4] = {0, l->out_c, l->out_h, l->out_w};
      const char *gs = add_const_i(g, l->name, "grouped", grouped, 3);
      const char *bs = add_const_i(g, l->name, "shape", image, spatial ? 4 : 2);
      const char *y = standardize(g, l->name, step(g, "Reshape", l->name, "groups", x, gs), 2);
      affine(g, l, step(g, "Reshape", l->name, "ungrouped", y, bs), weight, bias, spatial);
      break;
    }
    case XF_LAYER_EMBEDDING:
      XF_ENSURE(i == 0, err, XF_EUNSUPPORTED,
                "layer %s: an embedding layer reads the model's input, so it must be first",
                l->name);
      embedding(g, l, weight);
      break;
    case XF_LAYER_ADD: {
      const char *other = l->src < 0 ? "input" : row_out[l->src];
      /* A 1 x 1 x C image added to [N, C] features reads as [N, C]. */
      if (!spatial && (l->src < 0 || row_spatial[l->src])) {
        onnx_node *f = step_node(g, "Flatten", l->name, "flatten", other, NULL);
        add_int(f, "axis", 1);
        other = f->out;
      }
      n = add_op(g, "Add", l->name, x, other);
      break;
    }
    default:
      return xf_fail(err, XF_EUNSUPPORTED, "layer %s: kind %d has no ONNX mapping", l->name,
                     (int)l->kind);
    }
    x = g->nodes[g->n_nodes - 1].out;
    row_out[i] = x;
    row_spatial[i] = spatial;
  }
  XF_ENSURE(!spatial, err, XF_EUNSUPPORTED,
            "the model ends in an image, not in class scores: it has no dense output layer");
  onnx_node *last = &g->nodes[g->n_nodes - 1];
  snprintf(last->out, sizeof(last->out), "logits");
  onnx_node *sm = add_node(g, "Softmax", "probabilities");
  add_int(sm, "axis", 1);
  return XF_OK;
}

static void graph_free(onnx_graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_inits; i++) xf_free(g->init_bytes[i]);
  xf_free(g->arch_text);
  xf_free(g);
}

xf_err xf_export_onnx(const xf_model *m, const float *params, const char *description,
                      uint8_t **out, size_t *len, xf_errctx *err) {
  xf_export_tensor *tensors = NULL;
  int n_tensors = 0;
  XF_GUARD(xf_export_tensors(m, params, &tensors, &n_tensors, err));
  onnx_graph *g = xf_calloc(1, sizeof(*g));
  xf_err rc = g ? XF_OK : xf_fail(err, XF_ENOMEM, "cannot allocate the ONNX graph");
  if (rc == XF_OK) rc = build_nodes(g, m, tensors, err);
  for (int i = 0; rc == XF_OK && i < n_tensors; i++) rc = add_init(g, &tensors[i], err);
  if (rc != XF_OK) goto out;

  const xf_model_spec *s = xf_model_spec_of(m);
  const int64_t in_dims[4] = {0, s->in_c, s->in_h, s->in_w}, out_dims[2] = {0, s->classes};
  value_info(&g->input, "input", in_dims, 4);
  value_info(&g->outputs[0], "logits", out_dims, 2);
  value_info(&g->outputs[1], "probabilities", out_dims, 2);
  g->input_ptr[0] = &g->input.info;
  g->output_ptr[0] = &g->outputs[0].info;
  g->output_ptr[1] = &g->outputs[1].info;

  onnx__graph_proto__init(&g->graph);
  g->graph.name = (char *)xf_model_describe(m);
  g->graph.node = g->node_ptr;
  g->graph.n_node = (size_t)g->n_nodes;
  g->graph.initializer = g->init_ptr;
  g->graph.n_initializer = (size_t)g->n_inits;
  g->graph.input = g->input_ptr;
  g->graph.n_input = 1;
  g->graph.output = g->output_ptr;
  g->graph.n_output = 2;

  onnx__operator_set_id_proto__init(&g->opset);
  g->opset.domain = ""; /* the default domain, ai.onnx */
  g->opset.has_version = 1;
  g->opset.version = XF_ONNX_OPSET;
  g->opset_ptr[0] = &g->opset;
  onnx__model_proto__init(&g->model);
  g->model.has_ir_version = 1;
  g->model.ir_version = XF_ONNX_IR_VERSION;
  g->model.opset_import = g->opset_ptr;
  g->model.n_opset_import = 1;
  g->model.producer_name = "xfed";
  g->model.producer_version = XF_VERSION;
  g->model.doc_string = (char *)(description ? description : xf_model_describe(m));
  g->model.graph = &g->graph;
  /* A declared model's architecture, in its model file's words, so that a
   * reader rebuilds it; a preset's graph names its preset by itself, and
   * its exports keep the bytes they always had. */
  if (s->arch == XF_ARCH_LAYERS) {
    rc = xf_checkpoint_arch_encode(m, &g->arch_text, err);
    if (rc != XF_OK) goto out;
    onnx__string_string_entry_proto__init(&g->meta);
    g->meta.key = XF_ONNX_ARCH_KEY;
    g->meta.value = g->arch_text;
    g->meta_ptr[0] = &g->meta;
    g->model.metadata_props = g->meta_ptr;
    g->model.n_metadata_props = 1;
  }

  size_t size = onnx__model_proto__get_packed_size(&g->model);
  /* Protocol buffers parsers (ONNX's and onnxruntime's included) refuse
   * messages of 2 GiB and more; larger models need ONNX's external data. */
  if (size >= (size_t)INT32_MAX) {
    rc = xf_fail(err, XF_ERANGE, "the ONNX model would take %zu bytes: protocol buffers end at "
                 "2 GiB and xfed does not write ONNX external data; export as npz or xfed", size);
    goto out;
  }
  uint8_t *buf = xf_malloc(size ? size : 1);
  if (!buf) {
    rc = xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes for the ONNX model", size);
    goto out;
  }
  *len = onnx__model_proto__pack(&g->model, buf);
  *out = buf;
out:
  graph_free(g);
  xf_export_tensors_free(tensors, n_tensors);
  return rc;
}

/* ---- reading an xfed-written ONNX model back ------------------------------ */

static bool same_str(const char *a, const char *b) {
  return a && b ? strcmp(a, b) == 0 : a == b;
}

static bool same_attr(const Onnx__AttributeProto *a, const Onnx__AttributeProto *b) {
  if (!same_str(a->name, b->name) || a->has_type != b->has_type || a->type != b->type)
    return false;
  if (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT)
    return a->has_i == b->has_i && a->i == b->i;
  if (a->type == ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR) {
    /* A Constant's value, which xfed writes as raw_data. */
    const Onnx__TensorProto *x = a->t, *y = b->t;
    if (!x || !y || x->data_type != y->data_type || x->n_dims != y->n_dims ||
        x->raw_data.len != y->raw_data.len || y->n_float_data || y->n_int64_data ||
        y->n_external_data)
      return false;
    for (size_t k = 0; k < x->n_dims; k++)
      if (x->dims[k] != y->dims[k]) return false;
    return x->raw_data.len == 0 || memcmp(x->raw_data.data, y->raw_data.data, x->raw_data.len) == 0;
  }
  return a->n_ints == b->n_ints &&
         (a->n_ints == 0 || memcmp(a->ints, b->ints, a->n_ints * sizeof(int64_t)) == 0);
}

/* The float32 tensor type of a graph input or output, or NULL. */
static const Onnx__TensorShapeProto *tensor_shape(const Onnx__ValueInfoProto *v) {
  if (!v || !v->type || v->type->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE ||
      !v->type->tensor_type || !v->type->tensor_type->has_elem_type ||
      v->type->tensor_type->elem_type != ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)
    return NULL;
  return v->type->tensor_type->shape;
}

static bool same_value(const Onnx__ValueInfoProto *a, const Onnx__ValueInfoProto *b) {
  const Onnx__TensorShapeProto *sa = tensor_shape(a), *sb = tensor_shape(b);
  if (!sa || !sb || !same_str(a->name, b->name) || sa->n_dim != sb->n_dim) return false;
  for (size_t i = 1; i < sa->n_dim; i++)
    if (sa->dim[i]->value_case != ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE ||
        sa->dim[i]->dim_value != sb->dim[i]->dim_value)
      return false;
  return true;
}

/* XF_OK when got is the graph want describes, node for node; XF_EFORMAT
 * naming the first difference. Initializer values are not compared. */
static xf_err same_graph(const Onnx__GraphProto *want, const Onnx__GraphProto *got,
                         xf_errctx *err) {
  XF_ENSURE(got->n_node == want->n_node, err, XF_EFORMAT,
            "the graph has %zu nodes, xfed's %s graph %zu", got->n_node, want->name,
            want->n_node);
  for (size_t i = 0; i < want->n_node; i++) {
    const Onnx__NodeProto *a = want->node[i], *b = got->node[i];
    bool same = same_str(a->op_type, b->op_type) && same_str(a->domain ? a->domain : "",
                                                             b->domain ? b->domain : "") &&
                a->n_input == b->n_input && a->n_output == b->n_output &&
                a->n_attribute == b->n_attribute;
    for (size_t k = 0; same && k < a->n_input; k++) same = same_str(a->input[k], b->input[k]);
    for (size_t k = 0; same && k < a->n_output; k++) same = same_str(a->output[k], b->output[k]);
    for (size_t k = 0; same && k < a->n_attribute; k++)
      same = same_attr(a->attribute[k], b->attribute[k]);
    XF_ENSURE(same, err, XF_EFORMAT, "node %zu (%s %s) is not the one xfed's %s graph has there "
              "(%s %s)", i, b->op_type ? b->op_type : "?", b->name ? b->name : "", want->name,
              a->op_type, a->name);
  }
  XF_ENSURE(got->n_initializer == want->n_initializer, err, XF_EFORMAT,
            "the graph has %zu initializers, xfed's %s graph %zu", got->n_initializer,
            want->name, want->n_initializer);
  for (size_t i = 0; i < want->n_initializer; i++) {
    const Onnx__TensorProto *a = want->initializer[i], *b = got->initializer[i];
    bool same = same_str(a->name, b->name) && a->n_dims == b->n_dims && b->has_data_type &&
                b->data_type == ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT && !b->segment &&
                b->n_external_data == 0;
    for (size_t k = 0; same && k < a->n_dims; k++) same = a->dims[k] == b->dims[k];
    XF_ENSURE(same, err, XF_EFORMAT, "initializer %zu (%s) is not xfed's %s (float32 of its "
              "shape, stored in the file)", i, b->name ? b->name : "?", a->name);
  }
  XF_ENSURE(got->n_input == 1 && same_value(want->input[0], got->input[0]), err, XF_EFORMAT,
            "the graph's input is not xfed's float32 'input' [N, C, H, W] of this model");
  XF_ENSURE(got->n_output == want->n_output, err, XF_EFORMAT,
            "the graph has %zu outputs, xfed's %zu", got->n_output, want->n_output);
  for (size_t i = 0; i < want->n_output; i++)
    XF_ENSURE(same_value(want->output[i], got->output[i]), err, XF_EFORMAT,
              "output %zu is not xfed's float32 '%s' [N, classes]", i, want->output[i]->name);
  return XF_OK;
}

/* The architecture the graph names, from its input and output shapes and
 * its Conv and Gemm nodes; it is then checked node by node. */
static xf_err named_spec(const Onnx__GraphProto *g, xf_model_spec *out, xf_errctx *err) {
  const Onnx__TensorShapeProto *in = g->n_input == 1 ? tensor_shape(g->input[0]) : NULL;
  const Onnx__TensorShapeProto *logits = g->n_output >= 1 ? tensor_shape(g->output[0]) : NULL;
  int64_t d[4] = {0};
  XF_ENSURE(in && in->n_dim == 4 && logits && logits->n_dim == 2, err, XF_EFORMAT,
            "the graph's input is not float32 [N, C, H, W] or its first output not float32 "
            "[N, classes]");
  for (int i = 1; i < 4; i++) {
    XF_ENSURE(in->dim[i]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                  in->dim[i]->dim_value >= 1 && in->dim[i]->dim_value <= (1 << 24),
              err, XF_EFORMAT, "input dimension %d is not a size from 1 to 2^24", i);
    d[i] = in->dim[i]->dim_value;
  }
  XF_ENSURE(logits->dim[1]->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE &&
                logits->dim[1]->dim_value >= 2 && logits->dim[1]->dim_value <= 65536,
            err, XF_EFORMAT, "the output's class count is not 2 to 65536");
  xf_model_spec base = {.in_c = (int)d[1], .in_h = (int)d[2], .in_w = (int)d[3],
                        .classes = (int)logits->dim[1]->dim_value};
  int convs = 0, gemms = 0;
  int outs[XF_MODEL_MAX_HIDDEN + 1] = {0}; /* of the Gemm nodes, in order */
  int64_t conv1_out = 0;                     /* output channels of the first Conv */
  for (size_t i = 0; i < g->n_node; i++) {
    const Onnx__NodeProto *node = g->node[i];
    bool conv = same_str(node->op_type, "Conv"), gemm = same_str(node->op_type, "Gemm");
    if (!conv && !gemm) continue;
    int64_t rows = 0; /* the weight's first dimension */
    for (size_t k = 0; node->n_input == 3 && k < g->n_initializer; k++)
      if (same_str(g->initializer[k]->name, node->input[1]) && g->initializer[k]->n_dims >= 1)
        rows = g->initializer[k]->dims[0];
    if (conv && convs++ == 0) conv1_out = rows;
    if (gemm && gemms < XF_MODEL_MAX_HIDDEN + 1 && rows >= 1 && rows <= 65536)
      outs[gemms] = (int)rows;
    if (gemm) gemms++;
  }
  *out = base;
  bool named = true;
  if (convs == 0 && gemms == 1) {
    out->arch = XF_ARCH_LOGREG;
  } else if (convs == 0 && gemms >= 2 && gemms <= XF_MODEL_MAX_HIDDEN + 1) {
    out->arch = XF_ARCH_MLP;
    out->n_hidden = gemms - 1;
    for (int i = 0; i < gemms - 1; i++) out->hidden[i] = outs[i];
  } else if (convs == 2 && (conv1_out == 6 || conv1_out == 32)) {
    /* The presets' first convolutions: lenet5's has 6 channels, fedavg-cnn's 32. */
    out->arch = XF_ARCH_CNN;
    out->preset = conv1_out == 6 ? XF_CNN_LENET5 : XF_CNN_FEDAVG;
  } else {
    named = false;
  }
  XF_ENSURE(named, err, XF_EUNSUPPORTED, "a graph of %d Conv and %d Gemm nodes is none of "
            "xfed's architectures", convs, gemms);
  return XF_OK;
}

/* The initializer's floats, from raw_data (little-endian) or float_data. */
static xf_err initializer_floats(const Onnx__TensorProto *t, size_t count, float *dst,
                                 xf_errctx *err) {
  if (t->has_raw_data && t->raw_data.len > 0) {
    XF_ENSURE(t->raw_data.len == count * sizeof(float) && t->n_float_data == 0, err,
              XF_EFORMAT, "initializer %s holds %zu bytes, not %zu floats", t->name,
              t->raw_data.len, count);
    for (size_t i = 0; i < count; i++) {
      const uint8_t *b = t->raw_data.data + 4 * i;
      uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                   (uint32_t)b[3] << 24;
      memcpy(&dst[i], &u, sizeof(float));
    }
    return XF_OK;
  }
  XF_ENSURE(t->n_float_data == count, err, XF_EFORMAT,
            "initializer %s holds %zu floats, its shape %zu", t->name, t->n_float_data, count);
  memcpy(dst, t->float_data, count * sizeof(float));
  return XF_OK;
}

/* Fills params from the graph's initializers, which same_graph has matched
 * name for name and shape for shape with m's tensors. */
static xf_err read_params(const xf_model *m, const Onnx__GraphProto *g, float *params,
                          xf_errctx *err) {
  size_t k = 0, largest = 0;
  for (int i = 0; i < xf_model_num_layers(m); i++)
    if (xf_model_layer(m, i)->weight_count > largest) largest = xf_model_layer(m, i)->weight_count;
  float *tmp = xf_mallocarray(largest ? largest : 1, sizeof(float));
  XF_ENSURE(tmp, err, XF_ENOMEM, "cannot allocate %zu floats", largest);
  xf_err rc = XF_OK;
  for (int i = 0; rc == XF_OK && i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    if (!l->weight_count) continue;
    rc = initializer_floats(g->initializer[k++], l->weight_count, tmp, err);
    float *w = params + l->weight_offset;
    if (rc == XF_OK && l->kind == XF_LAYER_CONV) conv_weight(l, tmp, w, true);
    else if (rc == XF_OK && l->kind == XF_LAYER_DENSE) dense_weight(l, tmp, w, true);
    else if (rc == XF_OK) memcpy(w, tmp, l->weight_count * sizeof(float)); /* same layout */
    if (rc == XF_OK && l->bias_count)
      rc = initializer_floats(g->initializer[k++], l->bias_count, params + l->bias_offset, err);
  }
  xf_free(tmp);
  return rc;
}

/* Whether the graph is the one xfed writes for spec; on a match, *model and
 * *params are the model read back. */
static xf_err match_spec(const xf_model_spec *spec, bool from_metadata,
                         const Onnx__GraphProto *got, xf_model **model, float **params,
                         xf_errctx *err) {
  xf_model *m = NULL;
  XF_GUARD(xf_model_create(spec, &m, err));
  size_t n = xf_model_num_params(m);
  float *p = xf_calloc(n ? n : 1, sizeof(float));
  uint8_t *bytes = NULL;
  size_t len = 0;
  Onnx__ModelProto *want = NULL;
  xf_err rc = p ? XF_OK : xf_fail(err, XF_ENOMEM, "cannot allocate %zu parameters", n);
  if (rc == XF_OK) rc = xf_export_onnx(m, p, NULL, &bytes, &len, err);
  if (rc == XF_OK && !(want = onnx__model_proto__unpack(NULL, len, bytes)))
    rc = xf_fail(err, XF_ENOMEM, "cannot decode xfed's own %s graph", xf_model_describe(m));
  if (rc == XF_OK) rc = same_graph(want->graph, got, err);
  if (rc != XF_OK && want && from_metadata && err) {
    char said[sizeof(err->msg)];
    snprintf(said, sizeof(said), "%s", err->msg);
    rc = xf_fail(err, rc, "the graph is not the one its metadata " XF_ONNX_ARCH_KEY " states "
                 "(%s): %s", xf_model_describe(m), said);
  }
  if (rc == XF_OK) rc = read_params(m, got, p, err);
  if (want) onnx__model_proto__free_unpacked(want, NULL);
  xf_free(bytes);
  if (rc != XF_OK) {
    xf_free(p);
    xf_model_free(m);
    return rc;
  }
  *model = m;
  *params = p;
  return XF_OK;
}

xf_err xf_export_onnx_read(const uint8_t *data, size_t len, xf_model **model, float **params,
                           xf_errctx *err) {
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, data);
  XF_ENSURE(mp, err, XF_EFORMAT, "not an ONNX model: its protocol buffers do not decode");
  xf_err rc = XF_OK;
  const Onnx__GraphProto *g = mp->graph;
  bool opset13 = mp->n_opset_import == 1 && mp->opset_import[0]->has_version &&
                 mp->opset_import[0]->version == XF_ONNX_OPSET &&
                 (same_str(mp->opset_import[0]->domain, "") ||
                  same_str(mp->opset_import[0]->domain, "ai.onnx") ||
                  !mp->opset_import[0]->domain);
  if (!opset13)
    rc = xf_fail(err, XF_EFORMAT, "the model does not import opset %d alone, as xfed's exports "
                 "do", XF_ONNX_OPSET);
  else if (!g)
    rc = xf_fail(err, XF_EFORMAT, "the model has no graph");
  else if (g->n_node > MAX_NODES || g->n_initializer > MAX_INITS)
    rc = xf_fail(err, XF_EFORMAT, "a graph of %zu nodes and %zu initializers is larger than "
                 "any xfed writes", g->n_node, g->n_initializer);
  xf_model_spec spec;
  const char *arch = NULL;
  for (size_t i = 0; rc == XF_OK && i < mp->n_metadata_props; i++) {
    const Onnx__StringStringEntryProto *e = mp->metadata_props[i];
    if (!e || !same_str(e->key, XF_ONNX_ARCH_KEY)) continue;
    if (arch || !e->value)
      rc = xf_fail(err, XF_EFORMAT, "metadata_props holds %s " XF_ONNX_ARCH_KEY
                   "; xfed writes it once, with the model's architecture",
                   arch ? "more than one" : "an empty");
    arch = e->value;
  }
  /* The metadata says which model the graph is; the graph must then be,
   * node for node, the one xfed writes for it. */
  if (rc == XF_OK && arch)
    rc = xf_checkpoint_arch_decode(arch, strlen(arch), "ONNX metadata " XF_ONNX_ARCH_KEY, &spec,
                                   err);
  else if (rc == XF_OK)
    rc = named_spec(g, &spec, err);
  if (rc == XF_OK) rc = match_spec(&spec, arch != NULL, g, model, params, err);
  onnx__model_proto__free_unpacked(mp, NULL);
  return rc;
}

/* ---- NumPy .npy and .npz ---------------------------------------------------- */

/* A format 1.0 .npy: magic, version, header length (u16 LE), the header
 * dict padded with spaces to the alignment and ended by a newline, then the
 * data as '<f4'. */
static xf_err npy_encode(const int64_t *dims, int rank, const float *values, size_t count,
                         uint8_t **out, size_t *len, xf_errctx *err) {
  char shape[96] = "";
  size_t used = 0;
  /* As NumPy writes a tuple: "(6,)", "(6, 1, 5, 5)". */
  for (int i = 0; i < rank; i++)
    used += (size_t)snprintf(shape + used, sizeof(shape) - used, "%s%lld%s", i ? ", " : "",
                             (long long)dims[i], rank == 1 ? "," : "");
  char dict[160];
  int dl = snprintf(dict, sizeof(dict), "{'descr': '<f4', 'fortran_order': False, 'shape': (%s), }",
                    shape);
  const size_t prefix = 10; /* magic 6, version 2, header length 2 */
  size_t total_header = (prefix + (size_t)dl + 1 + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
  size_t header_len = total_header - prefix;
  size_t data_len = count * sizeof(float);
  uint8_t *buf = xf_malloc(total_header + data_len);
  if (!buf) return xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes for a .npy",
                           total_header + data_len);
  memcpy(buf, NPY_MAGIC, 6);
  buf[6] = 1; /* format version 1.0 */
  buf[7] = 0;
  buf[8] = (uint8_t)(header_len & 0xff);
  buf[9] = (uint8_t)(header_len >> 8);
  memcpy(buf + prefix, dict, (size_t)dl);
  memset(buf + prefix + dl, ' ', header_len - (size_t)dl - 1);
  buf[total_header - 1] = '\n';
  store_f32le(buf + total_header, values, count);
  *out = buf;
  *len = total_header + data_len;
  return XF_OK;
}

xf_err xf_export_npy_vector(const float *values, size_t n, uint8_t **out, size_t *len,
                            xf_errctx *err) {
  const int64_t dims[1] = {(int64_t)n};
  return npy_encode(dims, 1, values, n, out, len, err);
}

static void put16(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
  put16(p, v);
  put16(p + 2, v >> 16);
}

/* The zip records written (PKWARE APPNOTE 4.3.7, 4.3.12, 4.3.16): stored
 * entries, no data descriptors, a fixed date (1980-01-01 00:00) so that the
 * same model gives the same bytes. */
#define ZIP_LOCAL 30
#define ZIP_CENTRAL 46
#define ZIP_END 22
#define ZIP_VERSION 20  /* 2.0: the version that reads stored entries */
#define ZIP_DOS_DATE 0x21 /* 1980-01-01 */

xf_err xf_export_npz(const xf_model *m, const float *params, uint8_t **out, size_t *len,
                     xf_errctx *err) {
  xf_export_tensor *t = NULL;
  int n = 0;
  XF_GUARD(xf_export_tensors(m, params, &t, &n, err));
  uint8_t **npy = xf_calloc((size_t)n + 1, sizeof(*npy));
  size_t *npy_len = xf_calloc((size_t)n + 1, sizeof(*npy_len));
  uint8_t *zip = NULL;
  xf_err rc = npy && npy_len ? XF_OK : xf_fail(err, XF_ENOMEM, "cannot allocate the archive");
  /* Sizes in 64 bits, so that an archive past 4 GiB is caught, not wrapped. */
  uint64_t total = ZIP_END;
  for (int i = 0; rc == XF_OK && i < n; i++) {
    rc = npy_encode(t[i].dims, t[i].rank, t[i].data, t[i].count, &npy[i], &npy_len[i], err);
    total += ZIP_LOCAL + ZIP_CENTRAL + 2 * (strlen(t[i].name) + 4) + npy_len[i];
  }
  if (rc == XF_OK && total >= UINT32_MAX)
    rc = xf_fail(err, XF_ERANGE, "the .npz would take %llu bytes: past 4 GiB a zip needs ZIP64, "
                 "which xfed does not write; export as onnx or xfed",
                 (unsigned long long)total);
  if (rc == XF_OK && !(zip = xf_malloc((size_t)total)))
    rc = xf_fail(err, XF_ENOMEM, "cannot allocate %llu bytes for the .npz",
                 (unsigned long long)total);
  if (rc != XF_OK) goto out;

  /* Local headers and data first, then the central directory; offsets[]
   * are where each local header starts. */
  size_t pos = 0;
  uint32_t crcs[MAX_INITS], sizes[MAX_INITS], offsets[MAX_INITS];
  for (int i = 0; i < n; i++) {
    char name[48];
    int nl = snprintf(name, sizeof(name), "%s.npy", t[i].name);
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    crc = (uint32_t)crc32_z(crc, npy[i], npy_len[i]);
    crcs[i] = crc;
    sizes[i] = (uint32_t)npy_len[i];
    uint8_t *h = zip + pos;
    put32(h, 0x04034b50);
    put16(h + 4, ZIP_VERSION);
    put16(h + 6, 0);  /* flags */
    put16(h + 8, 0);  /* method: stored */
    put16(h + 10, 0); /* time */
    put16(h + 12, ZIP_DOS_DATE);
    put32(h + 14, crc);
    put32(h + 18, sizes[i]);
    put32(h + 22, sizes[i]);
    put16(h + 26, (uint32_t)nl);
    put16(h + 28, 0); /* extra field length */
    memcpy(h + ZIP_LOCAL, name, (size_t)nl);
    memcpy(h + ZIP_LOCAL + nl, npy[i], npy_len[i]);
    offsets[i] = (uint32_t)pos;
    pos += ZIP_LOCAL + (size_t)nl + npy_len[i];
  }
  size_t central = pos;
  for (int i = 0; i < n; i++) {
    char name[48];
    int nl = snprintf(name, sizeof(name), "%s.npy", t[i].name);
    uint8_t *h = zip + pos;
    memset(h, 0, ZIP_CENTRAL);
    put32(h, 0x02014b50);
    put16(h + 4, ZIP_VERSION); /* made by: MS-DOS attributes, 2.0 */
    put16(h + 6, ZIP_VERSION);
    put16(h + 12, 0);
    put16(h + 14, ZIP_DOS_DATE);
    put32(h + 16, crcs[i]);
    put32(h + 20, sizes[i]);
    put32(h + 24, sizes[i]);
    put16(h + 28, (uint32_t)nl);
    put32(h + 42, offsets[i]);
    memcpy(h + ZIP_CENTRAL, name, (size_t)nl);
    pos += ZIP_CENTRAL + (size_t)nl;
  }
  uint8_t *e = zip + pos;
  memset(e, 0, ZIP_END);
  put32(e, 0x06054b50);
  put16(e + 8, (uint32_t)n);
  put16(e + 10, (uint32_t)n);
  put32(e + 12, (uint32_t)(pos - central));
  put32(e + 16, (uint32_t)central);
  pos += ZIP_END;
  *out = zip;
  *len = pos;
  zip = NULL;
out:
  xf_free(zip);
  for (int i = 0; npy && i < n; i++) xf_free(npy[i]);
  xf_free(npy);
  xf_free(npy_len);
  xf_export_tensors_free(t, n);
  return rc;
}
