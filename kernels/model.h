/* SPDX-License-Identifier: Apache-2.0 */
/* Model architectures as a layer table over one flat float32 parameter
 * vector, so aggregation, clipping, compression and masking all see a single
 * array while training sees layers. */
#ifndef XF_KERNELS_MODEL_H
#define XF_KERNELS_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_MODEL_MAX_HIDDEN 8
#define XF_MODEL_MAX_LAYERS 32

typedef enum xf_arch {
  XF_ARCH_LOGREG = 0, /* one dense layer: softmax regression */
  XF_ARCH_MLP,        /* dense + ReLU per hidden size, then a dense output */
  XF_ARCH_CNN,        /* a named preset, see xf_cnn_preset */
  XF_ARCH_LAYERS      /* a declared layer list: xf_model_spec.layers */
} xf_arch;

typedef enum xf_cnn_preset {
  XF_CNN_LENET5 = 0, /* conv6(5x5)-pool-conv16(5x5)-pool-120-84-out: NIID-Bench's model */
  XF_CNN_FEDAVG      /* conv32(5x5 same)-pool-conv64(5x5 same)-pool-512-out: McMahan et al. */
} xf_cnn_preset;

/* The loss the last layer's output is trained on; it fixes that output's
 * width. */
typedef enum xf_loss {
  XF_LOSS_CROSS_ENTROPY = 0, /* softmax + cross-entropy over `classes` logits */
  XF_LOSS_BCE,               /* sigmoid + binary cross-entropy on one logit; labels 0/1 */
  XF_LOSS_MSE                /* squared error of one output against the label's value */
} xf_loss;

/* "cross_entropy", "binary_cross_entropy", "mse"; NULL for another value. */
const char *xf_loss_name(xf_loss l);
/* XF_EINVAL for a name that is not a loss. */
xf_err xf_loss_from_name(const char *s, xf_loss *out) XF_WARN_UNUSED;

/* The kinds a declared model is written in (model.layers in a job spec).
 * Every architecture, preset or declared, is built from such a list, so a
 * preset and the same list declared give the same layer table. */
typedef enum xf_layer_decl_kind {
  XF_DECL_DENSE = 0, /* "dense": units; flattens its input as flatten would */
  XF_DECL_CONV2D,    /* "conv2d": filters, kernel, stride, padding */
  XF_DECL_MAXPOOL2D, /* "maxpool2d": kernel, stride */
  XF_DECL_FLATTEN,   /* "flatten": no parameters and no table row */
  XF_DECL_RELU,      /* "relu" */
  XF_DECL_AVGPOOL2D, /* "avgpool2d": kernel, stride (the mean of each window) */
  XF_DECL_DROPOUT,   /* "dropout": rate; inverted dropout while training, identity in eval */
  XF_DECL_LAYERNORM, /* "layernorm": each position's channels (a flat record's features)
                        normalized, then scaled and shifted per channel */
  XF_DECL_GROUPNORM, /* "groupnorm": groups; each record's channels in `groups` groups,
                        normalized over the group's positions and channels */
  XF_DECL_EMBEDDING, /* "embedding": vocab, dim; the first layer only: each input value is
                        an id in 0..vocab-1, replaced by its dim-wide row */
  XF_DECL_GELU,      /* "gelu" (exact, with erf: PyTorch's default) */
  XF_DECL_TANH,      /* "tanh" */
  XF_DECL_SIGMOID,   /* "sigmoid" */
  XF_DECL_SOFTMAX,   /* "softmax" over each position's channels (a flat record's features) */
  XF_DECL_ADD        /* "add": from; adds the output of the earlier layer model.layers[from]
                        (-1: the model's input), of the same shape (a residual connection) */
} xf_layer_decl_kind;

#define XF_DECL_KINDS 15
#define XF_DECL_UNITS_MAX 65536
#define XF_DECL_FILTERS_MAX 4096
#define XF_DECL_KERNEL_MAX 64  /* also the largest stride */
#define XF_DECL_VOCAB_MAX 1048576
#define XF_DECL_DIM_MAX 4096
#define XF_DECL_GROUPS_MAX 4096 /* XF_NORM_GROUPS_MAX, the ops' own limit */
/* Layernorm and groupnorm add this to the variance (PyTorch's default). */
#define XF_NORM_EPS 1e-5f

/* One declared layer. A field the kind does not use is 0; a stride of 0
 * takes its default. dense, conv2d, layernorm, groupnorm and embedding have
 * parameters, and per-example gradient norms for DP-SGD (docs/kernels.md). */
typedef struct xf_layer_decl {
  xf_layer_decl_kind kind;
  int units;   /* dense: 1..XF_DECL_UNITS_MAX (a preset's own list, in model.c, writes 0
                  for the output layer: the loss's outputs) */
  int filters; /* conv2d: 1..XF_DECL_FILTERS_MAX */
  int kernel;  /* conv2d, maxpool2d, avgpool2d: square, 1..XF_DECL_KERNEL_MAX */
  int stride;  /* conv2d (default 1), maxpool2d and avgpool2d (default kernel):
                  1..XF_DECL_KERNEL_MAX */
  int padding; /* conv2d: zeros on every side, 0..kernel-1; default 0 */
  int groups;  /* groupnorm: 1..XF_DECL_GROUPS_MAX, dividing the channels */
  int vocab;   /* embedding: 1..XF_DECL_VOCAB_MAX ids */
  int dim;     /* embedding: 1..XF_DECL_DIM_MAX floats per id */
  int from;    /* add: -1 (the input) or an earlier layer's index */
  float rate;  /* dropout: the probability of zeroing a value, [0, 1) */
} xf_layer_decl;

/* The kind's name as a job spec spells it; NULL for another value. */
const char *xf_layer_decl_name(xf_layer_decl_kind k);
/* XF_EINVAL for a name that is not a layer kind. */
xf_err xf_layer_decl_from_name(const char *s, xf_layer_decl_kind *out) XF_WARN_UNUSED;
bool xf_layer_decl_equal(const xf_layer_decl *a, const xf_layer_decl *b);

/* What to build and for which data. */
typedef struct xf_model_spec {
  xf_arch arch;
  int hidden[XF_MODEL_MAX_HIDDEN]; /* mlp only */
  int n_hidden;                    /* mlp only: 1..XF_MODEL_MAX_HIDDEN */
  xf_cnn_preset preset;            /* cnn only */
  int in_h, in_w, in_c;            /* input shape; dense models use the product */
  int classes;                     /* >= 2: labels are 0..classes-1; exactly 2 for bce */
  xf_loss loss;                    /* default cross_entropy */
  xf_layer_decl layers[XF_MODEL_MAX_LAYERS]; /* layers only, in order */
  int n_layers;                              /* layers only: 1..XF_MODEL_MAX_LAYERS */
} xf_model_spec;

typedef enum xf_layer_kind {
  XF_LAYER_DENSE = 0,
  XF_LAYER_CONV,
  XF_LAYER_RELU,
  XF_LAYER_MAXPOOL,
  XF_LAYER_AVGPOOL,
  XF_LAYER_DROPOUT,   /* rate */
  XF_LAYER_LAYERNORM, /* weight = gamma[c], bias = beta[c]; over each position's channels */
  XF_LAYER_GROUPNORM, /* weight = gamma[c], bias = beta[c]; groups */
  XF_LAYER_EMBEDDING, /* weight = table[vocab x out_c] row-major, no bias; in = ids */
  XF_LAYER_GELU,
  XF_LAYER_TANH,
  XF_LAYER_SIGMOID,
  XF_LAYER_SOFTMAX,   /* over each position's out_c channels */
  XF_LAYER_ADD        /* output = input + the output of row src (-1: the model's input) */
} xf_layer_kind;
#define XF_LAYER_KINDS 14

/* One row of the layer table. Shapes are per sample, NHWC; dense layers
 * see h = w = 1 and c = features. A dense layer's weight is [out x in]
 * row-major (PyTorch's layout); a conv layer's is [c_out x (kh*kw*c_in)] with
 * the inner index (i*kw + j)*c_in + ch, matching xf_k_im2col. Bias follows its
 * weight in the parameter vector. */
typedef struct xf_layer {
  xf_layer_kind kind;
  char name[24];              /* "conv1", "fc2", "relu3", ... */
  int in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel, pad, stride;    /* conv, maxpool, avgpool */
  int groups;                 /* groupnorm */
  int vocab;                  /* embedding */
  int src;                    /* add: the table row whose output is added; -1: the input */
  float rate;                 /* dropout */
  size_t weight_offset, weight_count;
  size_t bias_offset, bias_count;
} xf_layer;

typedef struct xf_model xf_model;

/* Builds the layer table from the spec's layer list (a preset's named list,
 * or the declared one). XF_EINVAL with a message naming the field when the
 * spec is inconsistent (a cnn preset on non-image data; for a declared list,
 * "model.layers[3].kernel: ..." for a layer that does not fit its input, a
 * last layer that does not give the loss's outputs). The caller owns
 * *out and frees it with xf_model_free. */
xf_err xf_model_create(const xf_model_spec *spec, xf_model **out, xf_errctx *err) XF_WARN_UNUSED;
void xf_model_free(xf_model *m);

const xf_model_spec *xf_model_spec_of(const xf_model *m);
size_t xf_model_num_params(const xf_model *m);
int xf_model_num_layers(const xf_model *m);
const xf_layer *xf_model_layer(const xf_model *m, int i);
/* Floats in one sample's input and in the largest activation of one sample. */
size_t xf_model_input_size(const xf_model *m);
size_t xf_model_max_activation(const xf_model *m);
/* Width of the last layer's output: classes for cross_entropy, 1 for bce
 * and mse. */
int xf_model_outputs(const xf_model *m);
/* The layer list the model was built from (the declared one, or its
 * preset's), every field filled in: default strides, and the output layer's
 * units. n gets its length. Valid while m lives. */
const xf_layer_decl *xf_model_decls(const xf_model *m, int *n);
/* For a model whose first layer is an embedding: checks that each of the n
 * records of x (host memory, xf_model_input_size floats each) holds only
 * ids, whole numbers in 0..vocab-1. XF_ERANGE at the first value that is
 * not; *bad_record and *bad_feature (when not NULL) say where. XF_OK for
 * any other model. */
xf_err xf_model_check_ids(const xf_model *m, const float *x, size_t n, size_t *bad_record,
                          size_t *bad_feature) XF_WARN_UNUSED;
/* "mlp(200,200)", "cnn(lenet5)", "logreg", "layers(9)". */
const char *xf_model_describe(const xf_model *m);

/* Seeded initialization matching PyTorch's defaults for Linear and Conv2d
 * (weights and biases uniform in +-1/sqrt(fan_in)), LayerNorm and GroupNorm
 * (gamma 1, beta 0) and Embedding (standard normal), so accuracy comparisons
 * against PyTorch start from the same distribution. params holds
 * xf_model_num_params floats (host memory). Same seed, same values. */
void xf_model_init_params(const xf_model *m, uint64_t seed, float *params);

#endif
