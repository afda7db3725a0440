/* SPDX-License-Identifier: Apache-2.0 */
/* Layer tables for the model architectures and their initialization. */
#include "kernels/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "kernels/backend.h"

_Static_assert(XF_DECL_GROUPS_MAX <= XF_NORM_GROUPS_MAX, "groupnorm's declared limit is the ops'");

/* Stream of xf_rng reserved for parameter initialization. */
#define XF__RNG_STREAM_INIT 1

struct xf_model {
  xf_model_spec spec;
  xf_layer layers[XF_MODEL_MAX_LAYERS];
  int n_layers;
  xf_layer_decl decls[XF_MODEL_MAX_LAYERS]; /* what the table was built from, filled in */
  int n_decls;
  size_t n_params;
  char description[96];
};

/* Per-record sizes past which a layer is refused: its output, and a conv
 * layer's im2col rows. */
#define XF__ACT_MAX ((size_t)1 << 24)
#define XF__COL_MAX ((size_t)1 << 26)
/* Past this the parameter count cannot be a model file (the job layer's own
 * cap is far lower); it keeps every size below in range. */
#define XF__PARAMS_MAX ((size_t)1 << 34)

/* ---- the presets, as layer lists -------------------------------------------
 * A dense layer of 0 units is the output layer: its width is the loss's. */
#define D_(u) {.kind = XF_DECL_DENSE, .units = (u)}
#define C_(f, k, p) {.kind = XF_DECL_CONV2D, .filters = (f), .kernel = (k), .stride = 1, .padding = (p)}
#define P_(k) {.kind = XF_DECL_MAXPOOL2D, .kernel = (k), .stride = (k)}
#define R_ {.kind = XF_DECL_RELU}
#define F_ {.kind = XF_DECL_FLATTEN}

static const struct {
  const char *name;
  int n;
  xf_layer_decl layers[12];
} cnn_presets[] = {
    [XF_CNN_LENET5] = {"lenet5", 12,
                       {C_(6, 5, 0), R_, P_(2), C_(16, 5, 0), R_, P_(2), F_, D_(120), R_, D_(84),
                        R_, D_(0)}},
    [XF_CNN_FEDAVG] = {"fedavg-cnn", 10,
                       {C_(32, 5, 2), R_, P_(2), C_(64, 5, 2), R_, P_(2), F_, D_(512), R_, D_(0)}},
};

static const char *const decl_names[XF_DECL_KINDS] = {
    [XF_DECL_DENSE] = "dense",         [XF_DECL_CONV2D] = "conv2d",
    [XF_DECL_MAXPOOL2D] = "maxpool2d", [XF_DECL_FLATTEN] = "flatten",
    [XF_DECL_RELU] = "relu",           [XF_DECL_AVGPOOL2D] = "avgpool2d",
    [XF_DECL_DROPOUT] = "dropout",     [XF_DECL_LAYERNORM] = "layernorm",
    [XF_DECL_GROUPNORM] = "groupnorm", [XF_DECL_EMBEDDING] = "embedding",
    [XF_DECL_GELU] = "gelu",           [XF_DECL_TANH] = "tanh",
    [XF_DECL_SIGMOID] = "sigmoid",     [XF_DECL_SOFTMAX] = "softmax",
    [XF_DECL_ADD] = "add"};

const char *xf_layer_decl_name(xf_layer_decl_kind k) {
  return (unsigned)k < sizeof(decl_names) / sizeof(decl_names[0]) ? decl_names[k] : NULL;
}

xf_err xf_layer_decl_from_name(const char *s, xf_layer_decl_kind *out) {
  for (unsigned i = 0; s && i < sizeof(decl_names) / sizeof(decl_names[0]); i++)
    if (strcmp(s, decl_names[i]) == 0) {
      *out = (xf_layer_decl_kind)i;
      return XF_OK;
    }
  return XF_EINVAL;
}

/* The declaration with its defaults filled in and unused fields zeroed. */
static xf_layer_decl normalized(const xf_layer_decl *d) {
  xf_layer_decl n = {.kind = d->kind};
  switch (d->kind) {
  case XF_DECL_DENSE: n.units = d->units; break;
  case XF_DECL_CONV2D:
    n.filters = d->filters;
    n.kernel = d->kernel;
    n.stride = d->stride ? d->stride : 1;
    n.padding = d->padding;
    break;
  case XF_DECL_MAXPOOL2D:
  case XF_DECL_AVGPOOL2D:
    n.kernel = d->kernel;
    n.stride = d->stride ? d->stride : d->kernel;
    break;
  case XF_DECL_DROPOUT: n.rate = d->rate; break;
  case XF_DECL_GROUPNORM: n.groups = d->groups; break;
  case XF_DECL_EMBEDDING:
    n.vocab = d->vocab;
    n.dim = d->dim;
    break;
  case XF_DECL_ADD: n.from = d->from; break;
  default: break;
  }
  return n;
}

bool xf_layer_decl_equal(const xf_layer_decl *a, const xf_layer_decl *b) {
  xf_layer_decl x = normalized(a), y = normalized(b);
  return x.kind == y.kind && x.units == y.units && x.filters == y.filters &&
         x.kernel == y.kernel && x.stride == y.stride && x.padding == y.padding &&
         x.groups == y.groups && x.vocab == y.vocab && x.dim == y.dim && x.from == y.from &&
         x.rate == y.rate;
}

/* Builder state: the current activation shape and the next parameter offset. */
typedef struct builder {
  xf_model *m;
  int h, w, c;
  int counts[XF_LAYER_KINDS]; /* per kind, for names */
  int rows_after[XF_MODEL_MAX_LAYERS]; /* per declared layer: the last table row so far, -1 none */
  bool declared;  /* a researcher's list: the size limits below apply; a preset's
                     sizes are bounded by its own checks and the job's cap */
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

static const char *loss_needs(xf_loss loss) {
  return loss == XF_LOSS_CROSS_ENTROPY ? "cross_entropy over the data's classes"
         : loss == XF_LOSS_BCE         ? "binary_cross_entropy (one logit)"
                                       : "mse (one output)";
}

/* Checks one declared field against [lo, hi]. */
static xf_err field_in(int i, const char *field, int v, int lo, int hi, const char *kind,
                       xf_errctx *err) {
  if (v >= lo && v <= hi) return XF_OK;
  return xf_fail(err, XF_EINVAL, "model.layers[%d].%s: %d, a %s layer's %s must be %d to %d", i,
                 field, v, kind, field, lo, hi);
}

/* The layers that keep their input's shape: activations, dropout and the
 * normalizations. */
static xf_err add_shaped(builder *b, int i, const xf_layer_decl *d, bool flat, xf_errctx *err) {
  const char *kind = xf_layer_decl_name(d->kind);
  const bool per_channel = d->kind == XF_DECL_SOFTMAX || d->kind == XF_DECL_LAYERNORM ||
                           d->kind == XF_DECL_GROUPNORM;
  if (per_channel && flat && (b->h > 1 || b->w > 1))
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d]: %s works on an image's channels or a dense layer's "
                   "outputs, but here the records are a flattened %dx%dx%d image; put it before "
                   "the flatten, or after a dense layer",
                   i, kind, b->h, b->w, b->c);
  xf_layer_kind lk = XF_LAYER_RELU;
  const char *prefix = kind;
  switch (d->kind) {
  case XF_DECL_RELU: lk = XF_LAYER_RELU; break;
  case XF_DECL_GELU: lk = XF_LAYER_GELU; break;
  case XF_DECL_TANH: lk = XF_LAYER_TANH; break;
  case XF_DECL_SIGMOID: lk = XF_LAYER_SIGMOID; break;
  case XF_DECL_SOFTMAX: lk = XF_LAYER_SOFTMAX; break;
  case XF_DECL_DROPOUT:
    if (!(d->rate >= 0.0f && d->rate < 1.0f))
      return xf_fail(err, XF_EINVAL,
                     "model.layers[%d].rate: %g, a dropout layer's rate must be at least 0 and "
                     "below 1",
                     i, (double)d->rate);
    lk = XF_LAYER_DROPOUT;
    prefix = "drop";
    break;
  case XF_DECL_LAYERNORM: lk = XF_LAYER_LAYERNORM; prefix = "ln"; break;
  case XF_DECL_GROUPNORM:
    XF_GUARD(field_in(i, "groups", d->groups, 1, XF_DECL_GROUPS_MAX, kind, err));
    if (b->c % d->groups)
      return xf_fail(err, XF_EINVAL,
                     "model.layers[%d].groups: %d groups do not divide the %d channels of its "
                     "input; use a divisor of %d",
                     i, d->groups, b->c, b->c);
    lk = XF_LAYER_GROUPNORM;
    prefix = "gn";
    break;
  default: break;
  }
  xf_layer *l = push(b, lk, prefix);
  l->out_h = b->h;
  l->out_w = b->w;
  l->out_c = b->c;
  l->rate = d->rate;
  l->groups = d->kind == XF_DECL_GROUPNORM ? d->groups : 0;
  if (d->kind == XF_DECL_LAYERNORM || d->kind == XF_DECL_GROUPNORM)
    add_params(b, l, (size_t)b->c, (size_t)b->c);
  finish(b, l);
  return XF_OK;
}

/* A dense layer: its units over the flattened input. */
static xf_err add_dense(builder *b, int i, const xf_layer_decl *d, bool *flat, xf_errctx *err) {
  const char *kind = xf_layer_decl_name(d->kind);
  const int units = d->units;
  XF_GUARD(field_in(i, "units", units, 1, XF_DECL_UNITS_MAX, kind, err));
  size_t in = (size_t)b->h * b->w * b->c;
  if (b->declared && b->m->n_params + in * (size_t)units + (size_t)units > XF__PARAMS_MAX)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].units: %d units on %zu inputs take the model past 2^34 "
                   "parameters; use fewer units or shrink the input first (pooling, stride)",
                   i, units, in);
  xf_layer *l = push(b, XF_LAYER_DENSE, "fc");
  l->out_h = l->out_w = 1;
  l->out_c = units;
  add_params(b, l, in * (size_t)units, (size_t)units);
  finish(b, l);
  *flat = true;
  return XF_OK;
}

/* A conv2d, max or average pooling layer: windows over an image. */
static xf_err add_windowed(builder *b, int i, const xf_layer_decl *d, bool flat, xf_errctx *err) {
  const char *kind = xf_layer_decl_name(d->kind);
  const bool conv = d->kind == XF_DECL_CONV2D;
  if (flat)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d]: a %s layer needs an image, but an earlier flatten or "
                   "dense layer made the records flat; move it before them",
                   i, kind);
  if (conv) XF_GUARD(field_in(i, "filters", d->filters, 1, XF_DECL_FILTERS_MAX, kind, err));
  XF_GUARD(field_in(i, "kernel", d->kernel, 1, XF_DECL_KERNEL_MAX, kind, err));
  XF_GUARD(field_in(i, "stride", d->stride, 1, XF_DECL_KERNEL_MAX, kind, err));
  if (conv) XF_GUARD(field_in(i, "padding", d->padding, 0, d->kernel - 1, kind, err));
  const int pad = conv ? d->padding : 0;
  if (d->kernel > b->h + 2 * pad || d->kernel > b->w + 2 * pad)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].kernel: %d is larger than its input %dx%d (padding %d); "
                   "use a kernel of at most %d, or pool less before it",
                   i, d->kernel, b->h, b->w, pad,
                   (b->h < b->w ? b->h : b->w) + 2 * pad);
  const int oh = (b->h + 2 * pad - d->kernel) / d->stride + 1;
  const int ow = (b->w + 2 * pad - d->kernel) / d->stride + 1;
  const int oc = conv ? d->filters : b->c;
  if (b->declared && (size_t)oh * ow * oc > XF__ACT_MAX)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d]: its output of %dx%dx%d is larger than 2^24 values per "
                   "record; use a larger stride or fewer filters",
                   i, oh, ow, oc);
  if (conv) {
    size_t k = (size_t)d->kernel * d->kernel * b->c;
    if (b->declared && (size_t)oh * ow * k > XF__COL_MAX)
      return xf_fail(err, XF_EINVAL,
                     "model.layers[%d]: its %dx%d windows over %d channels at %dx%d positions "
                     "take more than 2^26 values per record to unfold; use a larger stride, a "
                     "smaller kernel or fewer channels before it",
                     i, d->kernel, d->kernel, b->c, oh, ow);
    if (b->declared && b->m->n_params + k * (size_t)oc + (size_t)oc > XF__PARAMS_MAX)
      return xf_fail(err, XF_EINVAL,
                     "model.layers[%d].filters: the model passes 2^34 parameters", i);
  }
  xf_layer *l = conv                             ? push(b, XF_LAYER_CONV, "conv")
                : d->kind == XF_DECL_MAXPOOL2D ? push(b, XF_LAYER_MAXPOOL, "pool")
                                               : push(b, XF_LAYER_AVGPOOL, "avgpool");
  l->kernel = d->kernel;
  l->pad = pad;
  l->stride = d->stride;
  l->out_h = oh;
  l->out_w = ow;
  l->out_c = oc;
  if (conv) add_params(b, l, (size_t)oc * d->kernel * d->kernel * b->c, (size_t)oc);
  finish(b, l);
  return XF_OK;
}

/* An embedding: the first layer, reading ids from the data. */
static xf_err add_embedding(builder *b, int i, const xf_layer_decl *d, xf_errctx *err) {
  const char *kind = xf_layer_decl_name(d->kind);
  XF_GUARD(field_in(i, "vocab", d->vocab, 1, XF_DECL_VOCAB_MAX, kind, err));
  XF_GUARD(field_in(i, "dim", d->dim, 1, XF_DECL_DIM_MAX, kind, err));
  if (i != 0)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d]: an embedding layer reads ids from the data, so it must "
                   "be the first layer (model.layers[0])",
                   i);
  size_t ids = (size_t)b->h * b->w * b->c;
  if (ids * (size_t)d->dim > XF__ACT_MAX)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].dim: %zu ids of %d floats each are more than 2^24 values "
                   "per record; use a smaller dim",
                   i, ids, d->dim);
  xf_layer *l = push(b, XF_LAYER_EMBEDDING, "embed");
  l->vocab = d->vocab;
  l->out_h = 1;
  l->out_w = (int)ids;
  l->out_c = d->dim;
  add_params(b, l, (size_t)d->vocab * d->dim, 0);
  finish(b, l);
  return XF_OK;
}

/* An add layer: its input plus the output of an earlier layer (or the input). */
static xf_err add_residual(builder *b, int i, const xf_layer_decl *d, xf_errctx *err) {
  if (d->from < -1 || d->from >= i)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].from: %d, an add layer adds the output of an earlier "
                   "layer (0 to %d) or the model's input (-1)",
                   i, d->from, i - 1);
  const int src = d->from < 0 ? -1 : b->rows_after[d->from];
  int sh, sw, sc;
  if (src < 0) {
    sh = b->m->spec.in_h;
    sw = b->m->spec.in_w;
    sc = b->m->spec.in_c;
  } else {
    const xf_layer *s = &b->m->layers[src];
    sh = s->out_h;
    sw = s->out_w;
    sc = s->out_c;
  }
  if (sh != b->h || sw != b->w || sc != b->c)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].from: the output of %s is %dx%dx%d but this layer's "
                   "input is %dx%dx%d; add needs the same shape (give the branch's last conv2d "
                   "as many filters and the same stride and padding)",
                   i, d->from < 0 ? "the input" : "that layer", sh, sw, sc, b->h, b->w, b->c);
  xf_layer *l = push(b, XF_LAYER_ADD, "add");
  l->src = src;
  l->out_h = b->h;
  l->out_w = b->w;
  l->out_c = b->c;
  finish(b, l);
  return XF_OK;
}

/* Appends the table rows of one declared layer at the builder's shape. */
static xf_err add_decl(builder *b, int i, const xf_layer_decl *d, bool *flat, xf_errctx *err) {
  switch (d->kind) {
  case XF_DECL_DENSE: return add_dense(b, i, d, flat, err);
  case XF_DECL_CONV2D:
  case XF_DECL_MAXPOOL2D:
  case XF_DECL_AVGPOOL2D: return add_windowed(b, i, d, *flat, err);
  case XF_DECL_FLATTEN:
    /* Layers keep NHWC records contiguous, so flattening moves nothing. */
    *flat = true;
    return XF_OK;
  case XF_DECL_RELU:
  case XF_DECL_GELU:
  case XF_DECL_TANH:
  case XF_DECL_SIGMOID:
  case XF_DECL_DROPOUT:
  case XF_DECL_SOFTMAX:
  case XF_DECL_LAYERNORM:
  case XF_DECL_GROUPNORM:
    return add_shaped(b, i, d, *flat, err);
  case XF_DECL_EMBEDDING: return add_embedding(b, i, d, err);
  case XF_DECL_ADD: return add_residual(b, i, d, err);
  }
  return xf_fail(err, XF_EINVAL, "model.layers[%d].kind: unknown layer kind %d", i, (int)d->kind);
}

/* Builds the table from a layer list and records the list, filled in. */
static xf_err build(builder *b, const xf_layer_decl *decls, int n, int outputs, xf_errctx *err) {
  const xf_model_spec *spec = &b->m->spec;
  if (n < 1 || n > XF_MODEL_MAX_LAYERS)
    return xf_fail(err, XF_EINVAL, "model.layers: %d layers, a model has 1 to %d", n,
                   XF_MODEL_MAX_LAYERS);
  bool flat = false;
  for (int i = 0; i < n; i++) {
    xf_layer_decl d = normalized(&decls[i]);
    if (d.kind == XF_DECL_DENSE && d.units == 0 && spec->arch != XF_ARCH_LAYERS)
      d.units = outputs;
    XF_GUARD(add_decl(b, i, &d, &flat, err));
    b->m->decls[i] = d;
    b->rows_after[i] = b->m->n_layers - 1;
  }
  b->m->n_decls = n;
  const xf_layer_decl *last = &b->m->decls[n - 1];
  if (last->kind != XF_DECL_DENSE)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d]: the last layer is %s; a model ends in a dense layer giving "
                   "%d outputs, what %s needs",
                   n - 1, xf_layer_decl_name(last->kind), outputs, loss_needs(spec->loss));
  if (last->units != outputs)
    return xf_fail(err, XF_EINVAL,
                   "model.layers[%d].units: the last layer gives %d outputs, but %s needs %d",
                   n - 1, last->units, loss_needs(spec->loss), outputs);
  return XF_OK;
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
  if (spec->arch == XF_ARCH_CNN && (unsigned)spec->preset >= 2)
    return xf_fail(err, XF_EINVAL, "model.preset: unknown cnn preset %d", (int)spec->preset);
  for (int i = 0; spec->arch == XF_ARCH_MLP && i < spec->n_hidden; i++)
    if (spec->hidden[i] < 1 || spec->hidden[i] > 65536)
      return xf_fail(err, XF_EINVAL, "model.hidden[%d]: %d units, must be 1 to 65536", i,
                     spec->hidden[i]);

  /* Every architecture as a layer list. */
  xf_layer_decl list[XF_MODEL_MAX_LAYERS];
  const xf_layer_decl *decls = list;
  int n = 0;
  char description[96];
  switch (spec->arch) {
  case XF_ARCH_LOGREG:
    list[n++] = (xf_layer_decl)F_;
    list[n++] = (xf_layer_decl)D_(0);
    snprintf(description, sizeof(description), "logreg");
    break;
  case XF_ARCH_MLP: {
    int used = snprintf(description, sizeof(description), "mlp(");
    list[n++] = (xf_layer_decl)F_;
    for (int i = 0; i < spec->n_hidden; i++) {
      list[n++] = (xf_layer_decl)D_(spec->hidden[i]);
      list[n++] = (xf_layer_decl)R_;
      if (used < (int)sizeof(description))
        used += snprintf(description + used, sizeof(description) - (size_t)used, "%s%d",
                         i ? "," : "", spec->hidden[i]);
    }
    if (used < (int)sizeof(description))
      snprintf(description + used, sizeof(description) - (size_t)used, ")");
    list[n++] = (xf_layer_decl)D_(0);
    break;
  }
  case XF_ARCH_CNN:
    decls = cnn_presets[spec->preset].layers;
    n = cnn_presets[spec->preset].n;
    snprintf(description, sizeof(description), "cnn(%s)", cnn_presets[spec->preset].name);
    break;
  case XF_ARCH_LAYERS:
    decls = spec->layers;
    n = spec->n_layers;
    snprintf(description, sizeof(description), "layers(%d)", n);
    break;
  default:
    return xf_fail(err, XF_EINVAL, "model.arch: unknown architecture %d", (int)spec->arch);
  }

  xf_model *m = xf_calloc(1, sizeof(*m));
  if (!m) return xf_fail(err, XF_ENOMEM, "cannot allocate the model");
  m->spec = *spec;
  memcpy(m->description, description, sizeof(description));
  builder b = {.m = m, .h = spec->in_h, .w = spec->in_w, .c = spec->in_c,
               .declared = spec->arch == XF_ARCH_LAYERS};
  const int outputs = spec->loss == XF_LOSS_CROSS_ENTROPY ? spec->classes : 1;
  xf_err rc = build(&b, decls, n, outputs, err);
  if (rc != XF_OK) {
    xf_free(m);
    return rc;
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
const xf_layer_decl *xf_model_decls(const xf_model *m, int *n) {
  *n = m->n_decls;
  return m->decls;
}
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
    if (l->kind == XF_LAYER_EMBEDDING) {
      for (size_t j = 0; j < l->weight_count; j++)
        params[l->weight_offset + j] = (float)xf_rng_normal(&rng);
      continue;
    }
    if (l->kind == XF_LAYER_LAYERNORM || l->kind == XF_LAYER_GROUPNORM) {
      for (size_t j = 0; j < l->weight_count; j++) params[l->weight_offset + j] = 1.0f;
      for (size_t j = 0; j < l->bias_count; j++) params[l->bias_offset + j] = 0.0f;
      continue;
    }
    size_t fan_in = l->weight_count / l->bias_count;
    double bound = 1.0 / sqrt((double)fan_in);
    for (size_t j = 0; j < l->weight_count; j++)
      params[l->weight_offset + j] = (float)((2.0 * xf_rng_uniform(&rng) - 1.0) * bound);
    for (size_t j = 0; j < l->bias_count; j++)
      params[l->bias_offset + j] = (float)((2.0 * xf_rng_uniform(&rng) - 1.0) * bound);
  }
}

xf_err xf_model_check_ids(const xf_model *m, const float *x, size_t n, size_t *bad_record,
                          size_t *bad_feature) {
  if (m->n_layers < 1 || m->layers[0].kind != XF_LAYER_EMBEDDING) return XF_OK;
  const size_t f = xf_model_input_size(m);
  const float vocab = (float)m->layers[0].vocab;
  for (size_t r = 0; r < n; r++)
    for (size_t j = 0; j < f; j++) {
      const float v = x[r * f + j];
      if (v >= 0.0f && v < vocab && v == floorf(v)) continue;
      if (bad_record) *bad_record = r;
      if (bad_feature) *bad_feature = j;
      return XF_ERANGE;
    }
  return XF_OK;
}
