/* SPDX-License-Identifier: Apache-2.0 */
/* Layer tables for the model architectures and their initialization. */
#include "kernels/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"

/* Stream of xf_rng reserved for parameter initialization. */
#define XF__RNG_STREAM_INIT 1

struct xf_model {
  xf_model_spec spec;
  xf_layer layers[XF_MODEL_MAX_LAYERS];
  int n_layers;
  size_t n_params;
  char description[96];
};

/* Builder state: the current activation shape and the next parameter offset. */
typedef struct builder {
  xf_model *m;
  int h, w, c;
  int counts[4]; /* per kind, for names */
} builder;

static xf_layer *push(builder *b, xf_layer_kind kind, const char *prefix) {
  xf_layer *l = &b->m->layers[b->m->n_layers++];
  memset(l, 0, sizeof(*l));
  l->kind = kind;
  snprintf(l->name, sizeof(l->name), "%s%d", prefix, ++b->counts[kind]);
  l->in_h = b->h;
  l->in_w = b->w;
  l->in_c = b->c;
  return l;
}

static void finish(builder *b, xf_layer *l) {
  b->h = l->out_h;
  b->w = l->out_w;
  b->c = l->out_c;
}

static void add_params(builder *b, xf_layer *l, size_t weights, size_t biases) {
  l->weight_offset = b->m->n_params;
  l->weight_count = weights;
  l->bias_offset = l->weight_offset + weights;
  l->bias_count = biases;
  b->m->n_params += weights + biases;
}

static void add_dense(builder *b, int out) {
  int in = b->h * b->w * b->c;
  xf_layer *l = push(b, XF_LAYER_DENSE, "fc");
  l->out_h = l->out_w = 1;
  l->out_c = out;
  add_params(b, l, (size_t)in * out, (size_t)out);
  finish(b, l);
}

static void add_relu(builder *b) {
  xf_layer *l = push(b, XF_LAYER_RELU, "relu");
  l->out_h = b->h;
  l->out_w = b->w;
  l->out_c = b->c;
  finish(b, l);
}

static void add_conv(builder *b, int out_c, int k, int pad) {
  xf_layer *l = push(b, XF_LAYER_CONV, "conv");
  l->kernel = k;
  l->pad = pad;
  l->stride = 1;
  l->out_h = b->h + 2 * pad - k + 1;
  l->out_w = b->w + 2 * pad - k + 1;
  l->out_c = out_c;
  add_params(b, l, (size_t)out_c * k * k * b->c, (size_t)out_c);
  finish(b, l);
}

static void add_pool(builder *b, int k) {
  xf_layer *l = push(b, XF_LAYER_MAXPOOL, "pool");
  l->kernel = k;
  l->stride = k;
  l->out_h = (b->h - k) / k + 1;
  l->out_w = (b->w - k) / k + 1;
  l->out_c = b->c;
  finish(b, l);
}

xf_err xf_model_create(const xf_model_spec *spec, xf_model **out, xf_errctx *err) {
  if (spec->in_h <= 0 || spec->in_w <= 0 || spec->in_c <= 0)
    return xf_fail(err, XF_EINVAL, "input shape %dx%dx%d is empty", spec->in_h, spec->in_w,
                   spec->in_c);
  if ((size_t)spec->in_h * spec->in_w * spec->in_c > (1u << 24))
    return xf_fail(err, XF_EINVAL, "input of %dx%dx%d features is larger than 2^24",
                   spec->in_h, spec->in_w, spec->in_c);
  if (spec->classes < 2 || spec->classes > 65536)
    return xf_fail(err, XF_EINVAL, "%d classes: a classifier needs 2 to 65536", spec->classes);
  if (!xf_loss_name(spec->loss))
    return xf_fail(err, XF_EINVAL, "model.loss: unknown loss %d", (int)spec->loss);
  if (spec->loss == XF_LOSS_BCE && spec->classes != 2)
    return xf_fail(err, XF_EINVAL,
                   "model.loss: binary_cross_entropy needs labels 0 and 1, the data has %d "
                   "classes; use cross_entropy",
                   spec->classes);
  if (spec->arch == XF_ARCH_MLP && (spec->n_hidden < 1 || spec->n_hidden > XF_MODEL_MAX_HIDDEN))
    return xf_fail(err, XF_EINVAL, "model.hidden: an mlp needs 1 to %d hidden layers",
                   XF_MODEL_MAX_HIDDEN);
  if (spec->arch == XF_ARCH_CNN && (spec->in_h < 28 || spec->in_w < 28))
    return xf_fail(err, XF_EINVAL,
                   "model.preset: cnn presets need images of at least 28x28, the data has "
                   "%dx%dx%d records; use logreg or mlp for tabular data",
                   spec->in_h, spec->in_w, spec->in_c);

  xf_model *m = xf_calloc(1, sizeof(*m));
  if (!m) return xf_fail(err, XF_ENOMEM, "cannot allocate the model");
  m->spec = *spec;
  builder b = {.m = m, .h = spec->in_h, .w = spec->in_w, .c = spec->in_c};
  const int outputs = spec->loss == XF_LOSS_CROSS_ENTROPY ? spec->classes : 1;
  switch (spec->arch) {
  case XF_ARCH_LOGREG:
    add_dense(&b, outputs);
    snprintf(m->description, sizeof(m->description), "logreg");
    break;
  case XF_ARCH_MLP: {
    int used = snprintf(m->description, sizeof(m->description), "mlp(");
    for (int i = 0; i < spec->n_hidden; i++) {
      if (spec->hidden[i] < 1 || spec->hidden[i] > 65536) {
        xf_free(m);
        return xf_fail(err, XF_EINVAL, "model.hidden[%d]: %d units, must be 1 to 65536", i,
                       spec->hidden[i]);
      }
      add_dense(&b, spec->hidden[i]);
      add_relu(&b);
      if (used < (int)sizeof(m->description))
        used += snprintf(m->description + used, sizeof(m->description) - (size_t)used, "%s%d",
                         i ? "," : "", spec->hidden[i]);
    }
    if (used < (int)sizeof(m->description))
      snprintf(m->description + used, sizeof(m->description) - (size_t)used, ")");
    add_dense(&b, outputs);
    break;
  }
  case XF_ARCH_CNN:
    if (spec->preset == XF_CNN_LENET5) {
      add_conv(&b, 6, 5, 0);
      add_relu(&b);
      add_pool(&b, 2);
      add_conv(&b, 16, 5, 0);
      add_relu(&b);
      add_pool(&b, 2);
      add_dense(&b, 120);
      add_relu(&b);
      add_dense(&b, 84);
      add_relu(&b);
      add_dense(&b, outputs);
      snprintf(m->description, sizeof(m->description), "cnn(lenet5)");
    } else if (spec->preset == XF_CNN_FEDAVG) {
      add_conv(&b, 32, 5, 2);
      add_relu(&b);
      add_pool(&b, 2);
      add_conv(&b, 64, 5, 2);
      add_relu(&b);
      add_pool(&b, 2);
      add_dense(&b, 512);
      add_relu(&b);
      add_dense(&b, outputs);
      snprintf(m->description, sizeof(m->description), "cnn(fedavg-cnn)");
    } else {
      xf_free(m);
      return xf_fail(err, XF_EINVAL, "model.preset: unknown cnn preset %d", (int)spec->preset);
    }
    break;
  default:
    xf_free(m);
    return xf_fail(err, XF_EINVAL, "model.arch: unknown architecture %d", (int)spec->arch);
  }
  *out = m;
  return XF_OK;
}

void xf_model_free(xf_model *m) { xf_free(m); }

const xf_model_spec *xf_model_spec_of(const xf_model *m) { return &m->spec; }
size_t xf_model_num_params(const xf_model *m) { return m->n_params; }
int xf_model_num_layers(const xf_model *m) { return m->n_layers; }
const xf_layer *xf_model_layer(const xf_model *m, int i) { return &m->layers[i]; }
const char *xf_model_describe(const xf_model *m) { return m->description; }
int xf_model_outputs(const xf_model *m) {
  return m->spec.loss == XF_LOSS_CROSS_ENTROPY ? m->spec.classes : 1;
}

static const char *const loss_names[] = {"cross_entropy", "binary_cross_entropy", "mse"};

const char *xf_loss_name(xf_loss l) {
  return (unsigned)l < sizeof(loss_names) / sizeof(loss_names[0]) ? loss_names[l] : NULL;
}

xf_err xf_loss_from_name(const char *s, xf_loss *out) {
  for (unsigned i = 0; s && i < sizeof(loss_names) / sizeof(loss_names[0]); i++)
    if (strcmp(s, loss_names[i]) == 0) {
      *out = (xf_loss)i;
      return XF_OK;
    }
  return XF_EINVAL;
}

size_t xf_model_input_size(const xf_model *m) {
  return (size_t)m->spec.in_h * m->spec.in_w * m->spec.in_c;
}

size_t xf_model_max_activation(const xf_model *m) {
  size_t best = xf_model_input_size(m);
  for (int i = 0; i < m->n_layers; i++) {
    const xf_layer *l = &m->layers[i];
    size_t n = (size_t)l->out_h * l->out_w * l->out_c;
    if (n > best) best = n;
  }
  return best;
}

void xf_model_init_params(const xf_model *m, uint64_t seed, float *params) {
  xf_rng rng;
  xf_rng_seed(&rng, seed, XF__RNG_STREAM_INIT);
  for (int i = 0; i < m->n_layers; i++) {
    const xf_layer *l = &m->layers[i];
    if (l->weight_count == 0) continue;
    size_t fan_in = l->weight_count / l->bias_count;
    double bound = 1.0 / sqrt((double)fan_in);
    for (size_t j = 0; j < l->weight_count; j++)
      params[l->weight_offset + j] = (float)((2.0 * xf_rng_uniform(&rng) - 1.0) * bound);
    for (size_t j = 0; j < l->bias_count; j++)
      params[l->bias_offset + j] = (float)((2.0 * xf_rng_uniform(&rng) - 1.0) * bound);
  }
}
