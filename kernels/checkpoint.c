/* SPDX-License-Identifier: Apache-2.0 */
/* Encoding, decoding and storing xfed model files. */
#include "kernels/checkpoint.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/cursor.h"
#include "codec/codec.h"
#include "base/file.h"

#define MAGIC "XFMODEL1"
#define MAX_HEADER (1u << 20)

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the model format stores float32 little-endian; add byte swapping for this host");

static const char *const kind_names[XF_LAYER_KINDS] = {
    [XF_LAYER_DENSE] = "dense",         [XF_LAYER_CONV] = "conv",
    [XF_LAYER_RELU] = "relu",           [XF_LAYER_MAXPOOL] = "maxpool",
    [XF_LAYER_AVGPOOL] = "avgpool",     [XF_LAYER_DROPOUT] = "dropout",
    [XF_LAYER_LAYERNORM] = "layernorm", [XF_LAYER_GROUPNORM] = "groupnorm",
    [XF_LAYER_EMBEDDING] = "embedding", [XF_LAYER_GELU] = "gelu",
    [XF_LAYER_TANH] = "tanh",           [XF_LAYER_SIGMOID] = "sigmoid",
    [XF_LAYER_SOFTMAX] = "softmax",     [XF_LAYER_ADD] = "add"};

const char *xf_layer_kind_name(xf_layer_kind k) {
  return (unsigned)k < XF_LAYER_KINDS ? kind_names[k] : NULL;
}

int xf_layer_tensor_dims(const xf_layer *l, bool bias, int64_t dims[4]) {
  if (bias) {
    dims[0] = (int64_t)l->bias_count;
    return 1;
  }
  switch (l->kind) {
  case XF_LAYER_CONV:
    dims[0] = l->out_c, dims[1] = l->kernel, dims[2] = l->kernel, dims[3] = l->in_c;
    return 4;
  case XF_LAYER_DENSE:
    dims[0] = l->out_c, dims[1] = (int64_t)(l->weight_count / (size_t)l->out_c);
    return 2;
  case XF_LAYER_EMBEDDING:
    dims[0] = l->vocab, dims[1] = l->out_c;
    return 2;
  default: /* the norms' gamma, one per channel */
    dims[0] = (int64_t)l->weight_count;
    return 1;
  }
}

void xf_params_digest(const float *params, size_t n, xf_digest *out) {
  xf_digest_buf(params, n * sizeof(float), out);
}

static const char *dtype_name(xf_checkpoint_dtype t) {
  return t == XF_CHECKPOINT_F16 ? "float16-le" : t == XF_CHECKPOINT_BF16 ? "bfloat16-le"
                                                                         : "float32-le";
}

/* The declared layer list in the job spec's spelling, every field the kind
 * uses filled in (and no other, so the files of a list of the first kinds
 * keep their bytes). */
static json_t *declared_json(const xf_model *m) {
  int n = 0;
  const xf_layer_decl *d = xf_model_decls(m, &n);
  json_t *a = json_array();
  for (int i = 0; a && i < n; i++) {
    json_t *o = json_pack("{s:s}", "kind", xf_layer_decl_name(d[i].kind));
    if (!o || json_array_append_new(a, o)) goto oom;
    int bad = 0;
    switch (d[i].kind) {
    case XF_DECL_DENSE: bad |= json_object_set_new(o, "units", json_integer(d[i].units)); break;
    case XF_DECL_CONV2D:
      bad |= json_object_set_new(o, "filters", json_integer(d[i].filters));
      bad |= json_object_set_new(o, "padding", json_integer(d[i].padding));
      bad |= json_object_set_new(o, "kernel", json_integer(d[i].kernel));
      bad |= json_object_set_new(o, "stride", json_integer(d[i].stride));
      break;
    case XF_DECL_MAXPOOL2D:
    case XF_DECL_AVGPOOL2D:
      bad |= json_object_set_new(o, "kernel", json_integer(d[i].kernel));
      bad |= json_object_set_new(o, "stride", json_integer(d[i].stride));
      break;
    /* jansson writes a real with 17 digits, so the float reads back exactly. */
    case XF_DECL_DROPOUT: bad |= json_object_set_new(o, "rate", json_real(d[i].rate)); break;
    case XF_DECL_GROUPNORM: bad |= json_object_set_new(o, "groups", json_integer(d[i].groups)); break;
    case XF_DECL_EMBEDDING:
      bad |= json_object_set_new(o, "vocab", json_integer(d[i].vocab));
      bad |= json_object_set_new(o, "dim", json_integer(d[i].dim));
      break;
    case XF_DECL_ADD: bad |= json_object_set_new(o, "from", json_integer(d[i].from)); break;
    default: break;
    }
    if (bad) goto oom;
  }
  return a;
oom:
  json_decref(a);
  return NULL;
}

/* Reads the "declared" list back; xf_model_create checks what it says. The
 * bounds here only keep each value an int the builder can judge. */
static xf_err declared_from_header(json_t *h, const char *where, xf_model_spec *s,
                                   xf_errctx *err) {
  json_t *a = json_object_get(h, "declared");
  size_t n = json_array_size(a);
  if (!json_is_array(a) || n < 1 || n > XF_MODEL_MAX_LAYERS)
    return xf_fail(err, XF_EFORMAT, "%s: \"declared\" must list 1 to %d layers", where,
                   XF_MODEL_MAX_LAYERS);
  for (size_t i = 0; i < n; i++) {
    json_t *o = json_array_get(a, i);
    xf_layer_decl *d = &s->layers[i];
    memset(d, 0, sizeof(*d));
    if (!json_is_object(o) ||
        xf_layer_decl_from_name(json_string_value(json_object_get(o, "kind")), &d->kind))
      return xf_fail(err, XF_EFORMAT, "%s: declared[%zu] has no known \"kind\"", where, i);
    const struct {
      const char *name;
      int *slot;
      int lo, hi;
    } fields[] = {
        {"units", &d->units, 0, 65536},       {"filters", &d->filters, 0, 65536},
        {"kernel", &d->kernel, 0, 65536},     {"stride", &d->stride, 0, 65536},
        {"padding", &d->padding, 0, 65536},   {"groups", &d->groups, 0, XF_DECL_GROUPS_MAX},
        {"vocab", &d->vocab, 0, XF_DECL_VOCAB_MAX}, {"dim", &d->dim, 0, XF_DECL_DIM_MAX},
        {"from", &d->from, -1, XF_MODEL_MAX_LAYERS - 1},
    };
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
      json_t *v = json_object_get(o, fields[f].name);
      if (!v) continue;
      if (!json_is_integer(v) || json_integer_value(v) < fields[f].lo ||
          json_integer_value(v) > fields[f].hi)
        return xf_fail(err, XF_EFORMAT, "%s: declared[%zu].%s is not an integer %d..%d", where,
                       i, fields[f].name, fields[f].lo, fields[f].hi);
      *fields[f].slot = (int)json_integer_value(v);
    }
    json_t *rate = json_object_get(o, "rate");
    if (rate) {
      double r = json_number_value(rate);
      if (!json_is_number(rate) || !(r >= 0 && r < 1))
        return xf_fail(err, XF_EFORMAT, "%s: declared[%zu].rate is not a number in [0, 1)",
                       where, i);
      d->rate = (float)r;
    }
  }
  s->n_layers = (int)n;
  return XF_OK;
}

/* The members of the header that say which model it is: arch, hidden,
 * preset, input, classes, loss (when not cross-entropy) and declared. */
static json_t *arch_json(const xf_model *m) {
  const xf_model_spec *s = xf_model_spec_of(m);
  json_t *h = json_object(), *hidden = json_array();
  if (!h || !hidden) goto oom;
  for (int i = 0; s->arch == XF_ARCH_MLP && i < s->n_hidden; i++)
    if (json_array_append_new(hidden, json_integer(s->hidden[i]))) goto oom;
  const char *arch = s->arch == XF_ARCH_LOGREG ? "logreg"
                     : s->arch == XF_ARCH_MLP  ? "mlp"
                     : s->arch == XF_ARCH_CNN  ? "cnn"
                                               : "layers";
  /* A declared model records its list as the job spec wrote it; a preset
   * records only its name, so its files keep the bytes they always had. */
  if (s->arch == XF_ARCH_LAYERS) {
    json_t *declared = declared_json(m);
    if (!declared || json_object_set_new(h, "declared", declared)) goto oom;
  }
  const char *preset = s->preset == XF_CNN_LENET5 ? "lenet5" : "fedavg-cnn";
  if (json_object_set_new(h, "arch", json_string(arch)) ||
      json_object_set_new(h, "hidden", hidden) ||
      json_object_set_new(h, "preset", s->arch == XF_ARCH_CNN ? json_string(preset) : json_null()) ||
      json_object_set_new(h, "input", json_pack("[i,i,i]", s->in_h, s->in_w, s->in_c)) ||
      json_object_set_new(h, "classes", json_integer(s->classes)) ||
      /* Written only for another loss than cross-entropy, so that the bytes of
       * every cross-entropy model file stay what they were. */
      (s->loss != XF_LOSS_CROSS_ENTROPY &&
       json_object_set_new(h, "loss", json_string(xf_loss_name(s->loss))))) {
    json_decref(h);
    return NULL;
  }
  return h;
oom:
  json_decref(h);
  json_decref(hidden);
  return NULL;
}

/* digest: of the float32 parameters the file decodes to. */
static json_t *header_json(const xf_model *m, const xf_digest *d, xf_checkpoint_dtype dtype) {
  char hex[XF_DIGEST_HEX];
  xf_digest_hex(d, hex);
  json_t *h = arch_json(m), *layers = json_array();
  if (!h || !layers) goto oom;
  for (int i = 0; i < xf_model_num_layers(m); i++) {
    const xf_layer *l = xf_model_layer(m, i);
    json_t *o = json_pack("{s:s,s:s,s:[I,I],s:[I,I]}", "name", l->name, "kind",
                          kind_names[l->kind], "weight", (json_int_t)l->weight_offset,
                          (json_int_t)l->weight_count, "bias", (json_int_t)l->bias_offset,
                          (json_int_t)l->bias_count);
    if (!o || json_array_append_new(layers, o)) goto oom;
  }
  if (json_object_set_new(h, "format", json_integer(1)) ||
      json_object_set_new(h, "params", json_integer((json_int_t)xf_model_num_params(m))) ||
      json_object_set_new(h, "dtype", json_string(dtype_name(dtype))) ||
      json_object_set_new(h, "digest", json_string(hex)) ||
      json_object_set_new(h, "layers", layers)) {
    json_decref(h);
    return NULL;
  }
  return h;
oom:
  json_decref(h);
  json_decref(layers);
  return NULL;
}

xf_err xf_checkpoint_arch_encode(const xf_model *m, char **out, xf_errctx *err) {
  json_t *h = arch_json(m);
  char *text = h ? json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(h);
  *out = text ? xf_strdup(text) : NULL;
  free(text); /* allocated by jansson */
  XF_ENSURE(*out, err, XF_ENOMEM, "cannot encode the model's architecture");
  return XF_OK;
}

xf_err xf_checkpoint_encode_as(const xf_model *m, const float *params, xf_checkpoint_dtype dtype,
                               uint8_t **out, size_t *len, xf_digest *params_digest,
                               xf_errctx *err) {
  size_t n = xf_model_num_params(m);
  size_t width = dtype == XF_CHECKPOINT_F32 ? sizeof(float) : sizeof(uint16_t);
  uint16_t *half = NULL;
  xf_digest d;
  if (dtype == XF_CHECKPOINT_F32) {
    xf_params_digest(params, n, &d);
  } else {
    /* The digest is of what a reader decodes: the rounded values. */
    bool bf16 = dtype == XF_CHECKPOINT_BF16;
    half = xf_mallocarray(n, sizeof(uint16_t));
    float *back = xf_mallocarray(n, sizeof(float));
    xf_err rc = half && back ? xf_codec_to_half(params, n, bf16, half) : XF_ENOMEM;
    if (rc == XF_OK) {
      xf_codec_from_half(half, n, bf16, back);
      xf_params_digest(back, n, &d);
    }
    xf_free(back);
    if (rc != XF_OK) {
      xf_free(half);
      return rc == XF_ENOMEM ? xf_fail(err, rc, "cannot allocate the %s model", dtype_name(dtype))
                             : xf_fail(err, rc, "the model has a value %s cannot hold (NaN or "
                                                "infinite)", dtype_name(dtype));
    }
  }
  json_t *h = header_json(m, &d, dtype);
  char *text = h ? json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
  json_decref(h);
  if (!text) {
    xf_free(half);
    return xf_fail(err, XF_ENOMEM, "cannot encode the model header");
  }
  size_t hlen = strlen(text), plen = n * width;
  size_t total = 8 + 4 + hlen + plen;
  uint8_t *buf = xf_malloc(total);
  if (!buf) {
    free(text);
    xf_free(half);
    return xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes for the model file", total);
  }
  memcpy(buf, MAGIC, 8);
  uint32_t le = htole32((uint32_t)hlen);
  memcpy(buf + 8, &le, 4);
  memcpy(buf + 12, text, hlen);
  memcpy(buf + 12 + hlen, half ? (const void *)half : (const void *)params, plen);
  free(text); /* allocated by jansson */
  xf_free(half);
  if (params_digest) *params_digest = d;
  *out = buf;
  *len = total;
  return XF_OK;
}

xf_err xf_checkpoint_encode(const xf_model *m, const float *params, uint8_t **out, size_t *len,
                            xf_errctx *err) {
  return xf_checkpoint_encode_as(m, params, XF_CHECKPOINT_F32, out, len, NULL, err);
}

/* Reads an integer member of the header within [min, max]. */
static xf_err header_int(json_t *h, const char *where, const char *key, long long min,
                         long long max, long long *out, xf_errctx *err) {
  json_t *v = json_object_get(h, key);
  if (!json_is_integer(v))
    return xf_fail(err, XF_EFORMAT, "%s: \"%s\" is missing or not an integer", where, key);
  long long x = json_integer_value(v);
  if (x < min || x > max)
    return xf_fail(err, XF_EFORMAT, "%s: \"%s\" is %lld, outside %lld..%lld", where, key, x,
                   min, max);
  *out = x;
  return XF_OK;
}

/* The spec arch_json wrote; where names the text in messages. */
static xf_err spec_from_arch(json_t *h, const char *where, xf_model_spec *s, xf_errctx *err) {
  long long v = 0;
  memset(s, 0, sizeof(*s));
  const char *arch = json_string_value(json_object_get(h, "arch"));
  if (!arch) return xf_fail(err, XF_EFORMAT, "%s: \"arch\" is missing", where);
  if (strcmp(arch, "logreg") == 0) {
    s->arch = XF_ARCH_LOGREG;
  } else if (strcmp(arch, "mlp") == 0) {
    s->arch = XF_ARCH_MLP;
    json_t *hidden = json_object_get(h, "hidden");
    size_t n = json_array_size(hidden);
    if (!json_is_array(hidden) || n < 1 || n > XF_MODEL_MAX_HIDDEN)
      return xf_fail(err, XF_EFORMAT, "%s: \"hidden\" must list 1 to %d sizes",
                     where, XF_MODEL_MAX_HIDDEN);
    for (size_t i = 0; i < n; i++) {
      json_t *e = json_array_get(hidden, i);
      if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 65536)
        return xf_fail(err, XF_EFORMAT, "%s: hidden[%zu] is not 1..65536", where, i);
      s->hidden[i] = (int)json_integer_value(e);
    }
    s->n_hidden = (int)n;
  } else if (strcmp(arch, "cnn") == 0) {
    s->arch = XF_ARCH_CNN;
    const char *preset = json_string_value(json_object_get(h, "preset"));
    if (preset && strcmp(preset, "lenet5") == 0) s->preset = XF_CNN_LENET5;
    else if (preset && strcmp(preset, "fedavg-cnn") == 0) s->preset = XF_CNN_FEDAVG;
    else return xf_fail(err, XF_EFORMAT, "%s: unknown cnn preset", where);
  } else if (strcmp(arch, "layers") == 0) {
    s->arch = XF_ARCH_LAYERS;
    XF_GUARD(declared_from_header(h, where, s, err));
  } else {
    return xf_fail(err, XF_EFORMAT, "%s: unknown arch \"%s\"", where, arch);
  }
  json_t *input = json_object_get(h, "input");
  if (!json_is_array(input) || json_array_size(input) != 3)
    return xf_fail(err, XF_EFORMAT, "%s: \"input\" must be [h, w, c]", where);
  int dims[3];
  for (int i = 0; i < 3; i++) {
    json_t *e = json_array_get(input, (size_t)i);
    if (!json_is_integer(e) || json_integer_value(e) < 1 || json_integer_value(e) > 65536)
      return xf_fail(err, XF_EFORMAT, "%s: input[%d] is not 1..65536", where, i);
    dims[i] = (int)json_integer_value(e);
  }
  s->in_h = dims[0], s->in_w = dims[1], s->in_c = dims[2];
  XF_GUARD(header_int(h, where, "classes", 2, 65536, &v, err));
  s->classes = (int)v;
  json_t *loss = json_object_get(h, "loss");
  s->loss = XF_LOSS_CROSS_ENTROPY;
  if (loss && (!json_is_string(loss) || xf_loss_from_name(json_string_value(loss), &s->loss)))
    return xf_fail(err, XF_EFORMAT,
                   "%s: \"loss\" must be \"cross_entropy\", \"binary_cross_entropy\" "
                   "or \"mse\"", where);
  return XF_OK;
}

static xf_err spec_from_header(json_t *h, xf_model_spec *s, size_t *n_params,
                               xf_checkpoint_dtype *dt, xf_errctx *err) {
  long long v = 0;
  XF_GUARD(header_int(h, "model header", "format", 1, 1, &v, err));
  const char *dtype = json_string_value(json_object_get(h, "dtype"));
  if (dtype && strcmp(dtype, "float32-le") == 0) *dt = XF_CHECKPOINT_F32;
  else if (dtype && strcmp(dtype, "float16-le") == 0) *dt = XF_CHECKPOINT_F16;
  else if (dtype && strcmp(dtype, "bfloat16-le") == 0) *dt = XF_CHECKPOINT_BF16;
  else
    return xf_fail(err, XF_EFORMAT, "model header: dtype must be \"float32-le\", "
                   "\"float16-le\" or \"bfloat16-le\"");
  XF_GUARD(spec_from_arch(h, "model header", s, err));
  XF_GUARD(header_int(h, "model header", "params", 1, (1LL << 34), &v, err));
  *n_params = (size_t)v;
  return XF_OK;
}

xf_err xf_checkpoint_arch_decode(const char *text, size_t len, const char *where,
                                 xf_model_spec *spec, xf_errctx *err) {
  XF_ENSURE(len <= MAX_HEADER, err, XF_EFORMAT, "%s: %zu bytes is larger than 1 MiB", where, len);
  json_error_t jerr;
  json_t *h = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!h || !json_is_object(h)) {
    json_decref(h);
    return xf_fail(err, XF_EFORMAT, "%s is not a JSON object: %s", where,
                   h ? "another JSON value" : jerr.text);
  }
  xf_err rc = spec_from_arch(h, where, spec, err);
  json_decref(h);
  return rc;
}

xf_err xf_checkpoint_decode(const uint8_t *data, size_t len, xf_model **model, float **params,
                            xf_errctx *err) {
  xf_digest d;
  return xf_checkpoint_decode_digest(data, len, model, params, &d, err);
}

xf_err xf_checkpoint_decode_digest(const uint8_t *data, size_t len, xf_model **model,
                                   float **params, xf_digest *params_digest, xf_errctx *err) {
  *model = NULL;
  *params = NULL;
  xf_cursor c = xf_cursor_make(data, len);
  const uint8_t *magic, *htext, *body;
  uint32_t hlen_le;
  if (xf_cursor_view(&c, &magic, 8) != XF_OK || memcmp(magic, MAGIC, 8) != 0)
    return xf_fail(err, XF_EFORMAT, "not an xfed model file (magic \"XFMODEL1\" missing)");
  if (xf_cursor_bytes(&c, &hlen_le, 4) != XF_OK)
    return xf_fail(err, XF_ETRUNCATED, "model file ends inside its header length");
  uint32_t hlen = le32toh(hlen_le);
  if (hlen > MAX_HEADER)
    return xf_fail(err, XF_EFORMAT, "model header of %u bytes is larger than 1 MiB", hlen);
  if (xf_cursor_view(&c, &htext, hlen) != XF_OK)
    return xf_fail(err, XF_ETRUNCATED, "model file ends inside its %u-byte header", hlen);
  json_error_t jerr;
  json_t *h = json_loadb((const char *)htext, hlen, JSON_REJECT_DUPLICATES, &jerr);
  if (!h || !json_is_object(h)) {
    json_decref(h);
    return xf_fail(err, XF_EFORMAT, "model header is not a JSON object: %s", jerr.text);
  }
  xf_model_spec spec;
  size_t n_params = 0;
  xf_checkpoint_dtype dtype = XF_CHECKPOINT_F32;
  xf_err rc = spec_from_header(h, &spec, &n_params, &dtype, err);
  const char *hex = json_string_value(json_object_get(h, "digest"));
  xf_digest stated;
  if (rc == XF_OK && (!hex || xf_digest_parse(hex, &stated) != XF_OK))
    rc = xf_fail(err, XF_EFORMAT, "model header: \"digest\" is not a BLAKE2b-256 hex string");
  json_decref(h);
  XF_GUARD(rc);
  xf_model *m = NULL;
  XF_GUARD(xf_model_create(&spec, &m, err));
  if (xf_model_num_params(m) != n_params) {
    rc = xf_fail(err, XF_EFORMAT, "model header says %zu parameters but %s has %zu", n_params,
                 xf_model_describe(m), xf_model_num_params(m));
    xf_model_free(m);
    return rc;
  }
  size_t width = dtype == XF_CHECKPOINT_F32 ? sizeof(float) : sizeof(uint16_t);
  size_t bytes = n_params * width;
  if (xf_cursor_view(&c, &body, bytes) != XF_OK) {
    xf_model_free(m);
    return xf_fail(err, XF_ETRUNCATED, "model file holds %zu of %zu parameter bytes: truncated",
                   xf_cursor_remaining(&c), bytes);
  }
  if (xf_cursor_remaining(&c) != 0) {
    xf_model_free(m);
    return xf_fail(err, XF_EFORMAT, "%zu unexpected bytes after the parameters",
                   xf_cursor_remaining(&c));
  }
  float *p = xf_mallocarray(n_params, sizeof(float));
  uint16_t *half = dtype == XF_CHECKPOINT_F32 ? NULL : xf_mallocarray(n_params, sizeof(uint16_t));
  if (!p || (dtype != XF_CHECKPOINT_F32 && !half)) {
    xf_free(p);
    xf_free(half);
    xf_model_free(m);
    return xf_fail(err, XF_ENOMEM, "cannot allocate %zu parameters", n_params);
  }
  if (half) {
    memcpy(half, body, bytes);
    xf_codec_from_half(half, n_params, dtype == XF_CHECKPOINT_BF16, p);
    xf_free(half);
  } else {
    memcpy(p, body, bytes);
  }
  /* The digest is of the float32 parameters, whatever the file stores. */
  xf_digest actual;
  xf_params_digest(p, n_params, &actual);
  if (memcmp(actual.bytes, stated.bytes, XF_DIGEST_BYTES) != 0) {
    xf_free(p);
    xf_model_free(m);
    return xf_fail(err, XF_EINTEGRITY,
                   "parameters do not match the header's digest: the file is damaged");
  }
  *model = m;
  *params = p;
  *params_digest = actual;
  return XF_OK;
}

xf_err xf_checkpoint_save_file(const char *path, const xf_model *m, const float *params,
                               xf_errctx *err) {
  uint8_t *buf;
  size_t len;
  xf_errctx_file(err, path);
  XF_GUARD(xf_checkpoint_encode(m, params, &buf, &len, err));
  xf_err rc = xf_file_write_atomic(path, buf, len, 0644, err);
  xf_free(buf);
  return rc;
}

xf_err xf_checkpoint_load_file(const char *path, xf_model **model, float **params,
                               xf_errctx *err) {
  xf_errctx_file(err, path);
  FILE *f = fopen(path, "rb");
  if (!f) return xf_fail(err, errno == ENOENT ? XF_ENOENT : XF_EIO, "cannot open: %s", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return xf_fail(err, XF_EIO, "not a regular file");
  }
  size_t len = (size_t)st.st_size;
  uint8_t *buf = xf_malloc(len);
  if (!buf) {
    fclose(f);
    return xf_fail(err, XF_ENOMEM, "cannot allocate %zu bytes", len);
  }
  size_t got = fread(buf, 1, len, f);
  fclose(f);
  xf_err rc = got == len ? xf_checkpoint_decode(buf, len, model, params, err)
                         : xf_fail(err, XF_EIO, "short read");
  xf_free(buf);
  return rc;
}

xf_err xf_checkpoint_save_blob(xf_blob_store *store, const xf_model *m, const float *params,
                               xf_digest *blob, xf_errctx *err) {
  uint8_t *buf;
  size_t len;
  XF_GUARD(xf_checkpoint_encode(m, params, &buf, &len, err));
  xf_err rc = xf_blob_put(store, buf, len, blob, err);
  xf_free(buf);
  return rc;
}

xf_err xf_checkpoint_load_blob(xf_blob_store *store, const xf_digest *blob, xf_model **model,
                               float **params, xf_errctx *err) {
  void *buf;
  size_t len;
  XF_GUARD(xf_blob_get(store, blob, &buf, &len, err));
  xf_err rc = xf_checkpoint_decode(buf, len, model, params, err);
  xf_free(buf);
  return rc;
}
