/* SPDX-License-Identifier: Apache-2.0 */
/* Model architectures as a layer table over one flat float32 parameter
 * vector, so aggregation, clipping, compression and masking all see a single
 * array while training sees layers. */
#ifndef XF_KERNELS_MODEL_H
#define XF_KERNELS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "base/result.h"

#define XF_MODEL_MAX_HIDDEN 8
#define XF_MODEL_MAX_LAYERS 32

typedef enum xf_arch {
  XF_ARCH_LOGREG = 0, /* one dense layer: softmax regression */
  XF_ARCH_MLP,        /* dense + ReLU per hidden size, then a dense output */
  XF_ARCH_CNN         /* a named preset, see xf_cnn_preset */
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

/* What to build and for which data. */
typedef struct xf_model_spec {
  xf_arch arch;
  int hidden[XF_MODEL_MAX_HIDDEN]; /* mlp only */
  int n_hidden;                    /* mlp only: 1..XF_MODEL_MAX_HIDDEN */
  xf_cnn_preset preset;            /* cnn only */
  int in_h, in_w, in_c;            /* input shape; dense models use the product */
  int classes;                     /* >= 2: labels are 0..classes-1; exactly 2 for bce */
  xf_loss loss;                    /* default cross_entropy */
} xf_model_spec;

typedef enum xf_layer_kind {
  XF_LAYER_DENSE = 0,
  XF_LAYER_CONV,
  XF_LAYER_RELU,
  XF_LAYER_MAXPOOL
} xf_layer_kind;

/* One row of the layer table. Shapes are per sample, NHWC; dense layers
 * see h = w = 1 and c = features. A dense layer's weight is [out x in]
 * row-major (PyTorch's layout); a conv layer's is [c_out x (kh*kw*c_in)] with
 * the inner index (i*kw + j)*c_in + ch, matching xf_k_im2col. Bias follows its
 * weight in the parameter vector. */
typedef struct xf_layer {
  xf_layer_kind kind;
  char name[16];              /* "conv1", "fc2", "relu3", ... */
  int in_h, in_w, in_c;
  int out_h, out_w, out_c;
  int kernel, pad, stride;    /* conv and maxpool */
  size_t weight_offset, weight_count;
  size_t bias_offset, bias_count;
} xf_layer;

typedef struct xf_model xf_model;

/* Builds the layer table. XF_EINVAL with a message naming the field when the
 * spec is inconsistent (e.g. a cnn preset on non-image data). The caller owns
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
/* "mlp(200,200)", "cnn(lenet5)", "logreg". */
const char *xf_model_describe(const xf_model *m);

/* Seeded initialization matching PyTorch's defaults for Linear and Conv2d
 * (weights and biases uniform in +-1/sqrt(fan_in)), so accuracy comparisons
 * against PyTorch start from the same distribution. params holds
 * xf_model_num_params floats (host memory). Same seed, same values. */
void xf_model_init_params(const xf_model *m, uint64_t seed, float *params);

#endif
