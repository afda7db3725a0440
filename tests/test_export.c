/* SPDX-License-Identifier: Apache-2.0 */
/* Export for deployment (kernels/export.h): what the ONNX graph and the .npz
 * hold, read back independently of the code that wrote them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "kernels/checkpoint.h"
#include "kernels/export.h"
#include "kernels/model.h"
#include "kernels/onnx/onnx.pb-c.h"
#include "layer_kinds.h"

static xf_model *make(xf_arch arch, xf_cnn_preset preset, int h, int w, int c) {
  xf_model_spec s = {.arch = arch, .preset = preset, .in_h = h, .in_w = w, .in_c = c,
                     .classes = 10, .n_hidden = 1, .hidden = {7}};
  xf_model *m = NULL;
  assert_int_equal(xf_model_create(&s, &m, NULL), XF_OK);
  return m;
}

/* Parameters whose value is their index: every float says where it came from. */
static float *indexed(const xf_model *m) {
  size_t n = xf_model_num_params(m);
  float *p = xf_mallocarray(n, sizeof(float));
  assert_non_null(p);
  for (size_t i = 0; i < n; i++) p[i] = (float)i;
  return p;
}

static const Onnx__AttributeProto *attr(const Onnx__NodeProto *n, const char *name) {
  for (size_t i = 0; i < n->n_attribute; i++)
    if (strcmp(n->attribute[i]->name, name) == 0) return n->attribute[i];
  fail_msg("node %s has no attribute %s", n->name, name);
  return NULL;
}

static const Onnx__TensorProto *init(const Onnx__GraphProto *g, const char *name) {
  for (size_t i = 0; i < g->n_initializer; i++)
    if (strcmp(g->initializer[i]->name, name) == 0) return g->initializer[i];
  fail_msg("no initializer %s", name);
  return NULL;
}

static float raw_at(const Onnx__TensorProto *t, size_t i) {
  assert_true(t->has_raw_data && (i + 1) * 4 <= t->raw_data.len);
  const uint8_t *b = t->raw_data.data + 4 * i;
  uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static void lenet5_graph_reads_back_with_nchw_layouts(void **state) {
  (void)state;
  xf_model *m = make(XF_ARCH_CNN, XF_CNN_LENET5, 28, 28, 1);
  float *p = indexed(m);
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_int_equal(xf_export_onnx(m, p, "test model", &bytes, &len, NULL), XF_OK);
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, bytes);
  assert_non_null(mp);
  assert_int_equal(mp->ir_version, XF_ONNX_IR_VERSION);
  assert_int_equal(mp->n_opset_import, 1);
  assert_string_equal(mp->opset_import[0]->domain, "");
  assert_int_equal(mp->opset_import[0]->version, 13);
  assert_string_equal(mp->doc_string, "test model");
  const Onnx__GraphProto *g = mp->graph;

  static const char *const ops[] = {"Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool",
                                    "Flatten", "Gemm", "Relu", "Gemm", "Relu", "Gemm",
                                    "Softmax"};
  assert_int_equal(g->n_node, sizeof(ops) / sizeof(ops[0]));
  for (size_t i = 0; i < g->n_node; i++) {
    assert_string_equal(g->node[i]->op_type, ops[i]);
    /* A chain: each node reads what the one before wrote. */
    assert_string_equal(g->node[i]->input[0], i ? g->node[i - 1]->output[0] : "input");
  }
  assert_string_equal(g->node[11]->output[0], "logits");
  assert_string_equal(g->node[12]->output[0], "probabilities");
  assert_int_equal(attr(g->node[12], "axis")->i, 1);
  assert_int_equal(attr(g->node[7], "transB")->i, 1);
  assert_int_equal(attr(g->node[6], "axis")->i, 1);
  const Onnx__AttributeProto *k = attr(g->node[0], "kernel_shape");
  assert_int_equal(k->n_ints, 2);
  assert_int_equal(k->ints[0], 5);
  assert_int_equal(attr(g->node[0], "pads")->n_ints, 4);
  assert_int_equal(attr(g->node[0], "pads")->ints[0], 0);
  assert_int_equal(attr(g->node[2], "strides")->ints[1], 2);
  assert_int_equal(g->n_input, 1);
  assert_string_equal(g->input[0]->name, "input");
  const Onnx__TensorShapeProto *in = g->input[0]->type->tensor_type->shape;
  assert_int_equal(in->n_dim, 4);
  assert_string_equal(in->dim[0]->dim_param, "N");
  assert_int_equal(in->dim[1]->dim_value, 1);
  assert_int_equal(in->dim[2]->dim_value, 28);
  assert_int_equal(g->output[0]->type->tensor_type->shape->dim[1]->dim_value, 10);

  /* conv2: xfed [16 x (5*5*6)] with inner index (i*5 + j)*6 + ch; ONNX
   * OIHW. Element (o=3, ch=4, i=1, j=2). */
  const xf_layer *conv2 = xf_model_layer(m, 3);
  assert_string_equal(conv2->name, "conv2");
  const Onnx__TensorProto *w = init(g, "conv2.weight");
  assert_int_equal(w->n_dims, 4);
  assert_int_equal(w->dims[0], 16);
  assert_int_equal(w->dims[1], 6);
  assert_int_equal(w->data_type, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT);
  size_t onnx_at = ((3 * 6 + 4) * 5 + 1) * 5 + 2;
  size_t xfed_at = conv2->weight_offset + 3 * 150 + (1 * 5 + 2) * 6 + 4;
  assert_true(raw_at(w, onnx_at) == (float)xfed_at);

  /* fc1 reads pool2's 4x4x16 output: xfed's columns are (h*4 + w)*16 + c,
   * the graph's c*16 + h*4 + w. Element (o=5, c=9, h=2, w=3). */
  const xf_layer *fc1 = xf_model_layer(m, 6);
  assert_string_equal(fc1->name, "fc1");
  const Onnx__TensorProto *f = init(g, "fc1.weight");
  assert_int_equal(f->dims[0], 120);
  assert_int_equal(f->dims[1], 256);
  assert_true(raw_at(f, 5 * 256 + 9 * 16 + 2 * 4 + 3) ==
              (float)(fc1->weight_offset + 5 * 256 + (2 * 4 + 3) * 16 + 9));
  const Onnx__TensorProto *b = init(g, "fc1.bias");
  assert_int_equal(b->n_dims, 1);
  assert_true(raw_at(b, 7) == (float)(fc1->bias_offset + 7));
  assert_int_equal(g->n_initializer, 10);

  onnx__model_proto__free_unpacked(mp, NULL);
  xf_free(bytes);
  xf_free(p);
  xf_model_free(m);
}

static void dense_layout_permutes_channels_of_the_input(void **state) {
  (void)state;
  /* An mlp on 2x3 images of 4 channels: the first layer's columns go from
   * (h*3 + w)*4 + c to (c*2 + h)*3 + w; the second layer's stay. */
  xf_model *m = make(XF_ARCH_MLP, XF_CNN_LENET5, 2, 3, 4);
  float *p = indexed(m);
  xf_export_tensor *t = NULL;
  int n = 0;
  assert_int_equal(xf_export_tensors(m, p, &t, &n, NULL), XF_OK);
  assert_int_equal(n, 4);
  assert_string_equal(t[0].name, "fc1.weight");
  assert_int_equal(t[0].dims[0], 7);
  assert_int_equal(t[0].dims[1], 24);
  for (int o = 0; o < 7; o++)
    for (int c = 0; c < 4; c++)
      for (int h = 0; h < 2; h++)
        for (int w = 0; w < 3; w++)
          assert_true(t[0].data[o * 24 + (c * 2 + h) * 3 + w] ==
                      (float)(o * 24 + (h * 3 + w) * 4 + c));
  const xf_layer *fc2 = xf_model_layer(m, 2);
  assert_string_equal(t[2].name, "fc2.weight");
  for (size_t i = 0; i < t[2].count; i++) assert_true(t[2].data[i] == (float)(fc2->weight_offset + i));
  xf_export_tensors_free(t, n);
  xf_free(p);
  xf_model_free(m);
}

/* Export, read back: the same architecture and bit-identical parameters. */
static void onnx_reads_back_to_the_same_model(void **state) {
  (void)state;
  const struct {
    xf_arch arch;
    xf_cnn_preset preset;
    int h, w, c;
  } cases[] = {{XF_ARCH_LOGREG, XF_CNN_LENET5, 28, 28, 1}, {XF_ARCH_MLP, XF_CNN_LENET5, 2, 3, 4},
               {XF_ARCH_MLP, XF_CNN_LENET5, 1, 1, 9},    {XF_ARCH_CNN, XF_CNN_LENET5, 28, 28, 1},
               {XF_ARCH_CNN, XF_CNN_FEDAVG, 32, 30, 3}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    xf_model *m = make(cases[i].arch, cases[i].preset, cases[i].h, cases[i].w, cases[i].c);
    float *p = indexed(m);
    uint8_t *bytes = NULL;
    size_t len = 0;
    assert_int_equal(xf_export_onnx(m, p, NULL, &bytes, &len, NULL), XF_OK);
    xf_model *back = NULL;
    float *q = NULL;
    xf_errctx err = {0};
    xf_err rc = xf_export_onnx_read(bytes, len, &back, &q, &err);
    if (rc != XF_OK) fail_msg("%s: %s", xf_model_describe(m), err.msg);
    assert_string_equal(xf_model_describe(back), xf_model_describe(m));
    assert_int_equal(xf_model_num_params(back), xf_model_num_params(m));
    const xf_model_spec *a = xf_model_spec_of(m), *b = xf_model_spec_of(back);
    assert_int_equal(a->in_h, b->in_h);
    assert_int_equal(a->in_w, b->in_w);
    assert_int_equal(a->in_c, b->in_c);
    assert_int_equal(a->classes, b->classes);
    assert_memory_equal(p, q, xf_model_num_params(m) * sizeof(float));
    xf_free(q);
    xf_model_free(back);
    xf_free(bytes);
    xf_free(p);
    xf_model_free(m);
  }
}

/* A graph that is not exactly xfed's is refused, naming what differs. */
static void onnx_read_refuses_an_edited_graph(void **state) {
  (void)state;
  xf_model *m = make(XF_ARCH_CNN, XF_CNN_LENET5, 28, 28, 1);
  float *p = indexed(m);
  uint8_t *bytes = NULL, *edited = NULL;
  size_t len = 0;
  assert_int_equal(xf_export_onnx(m, p, NULL, &bytes, &len, NULL), XF_OK);
  const char *want[] = {"node 0 (Conv conv1)", "initializer conv2.bias holds 60 bytes, not 16 floats",
                        "not an ONNX model", "opset 13"};
  for (int edit = 0; edit < 4; edit++) {
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, bytes);
    assert_non_null(mp);
    size_t elen = len;
    if (edit == 0) mp->graph->node[0]->attribute[2]->ints[0] = 1; /* pads */
    if (edit == 1) mp->graph->initializer[3]->raw_data.len -= 4;  /* a float short */
    if (edit == 3) mp->opset_import[0]->version = 11;
    edited = xf_malloc(len + 16);
    assert_non_null(edited);
    if (edit == 2) {
      memcpy(edited, bytes, len);
      elen = len / 2; /* cut in the middle */
    } else {
      elen = onnx__model_proto__pack(mp, edited);
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    xf_model *back = NULL;
    float *q = NULL;
    xf_errctx err = {0};
    assert_int_equal(xf_export_onnx_read(edited, elen, &back, &q, &err), XF_EFORMAT);
    if (!strstr(err.msg, want[edit])) fail_msg("edit %d: '%s' lacks '%s'", edit, err.msg, want[edit]);
    assert_null(back);
    xf_free(edited);
  }
  xf_free(bytes);
  xf_free(p);
  xf_model_free(m);
}

/* conv(stride 2, pad 1)-relu-conv-relu-maxpool-dense on 12x12x1. */
static xf_model *make_declared(void) {
  xf_model_spec s = {.arch = XF_ARCH_LAYERS, .in_h = 12, .in_w = 12, .in_c = 1, .classes = 10,
                     .n_layers = 6};
  s.layers[0] = (xf_layer_decl){.kind = XF_DECL_CONV2D, .filters = 4, .kernel = 3, .stride = 2,
                                .padding = 1};
  s.layers[1] = (xf_layer_decl){.kind = XF_DECL_RELU};
  s.layers[2] = (xf_layer_decl){.kind = XF_DECL_CONV2D, .filters = 5, .kernel = 3};
  s.layers[3] = (xf_layer_decl){.kind = XF_DECL_RELU};
  s.layers[4] = (xf_layer_decl){.kind = XF_DECL_MAXPOOL2D, .kernel = 2};
  s.layers[5] = (xf_layer_decl){.kind = XF_DECL_DENSE, .units = 10};
  xf_model *m = NULL;
  xf_errctx err = {0};
  if (xf_model_create(&s, &m, &err) != XF_OK) fail_msg("%s", err.msg);
  return m;
}

/* The value of the export's metadata_props entry key, or NULL. */
static const char *metadata(const Onnx__ModelProto *mp, const char *key) {
  for (size_t i = 0; i < mp->n_metadata_props; i++)
    if (strcmp(mp->metadata_props[i]->key, key) == 0) return mp->metadata_props[i]->value;
  return NULL;
}

/* A declared model's export states its architecture in the model file's
 * words, and reading it back gives the model file it came from, byte for
 * byte. */
static void declared_model_round_trips_through_onnx_byte_for_byte(void **state) {
  (void)state;
  xf_model *m = make_declared();
  float *p = indexed(m);
  uint8_t *xfm = NULL, *onnx = NULL, *again = NULL;
  size_t xfm_len = 0, onnx_len = 0, again_len = 0;
  assert_int_equal(xf_checkpoint_encode(m, p, &xfm, &xfm_len, NULL), XF_OK);
  xf_model *m1 = NULL;
  float *p1 = NULL;
  assert_int_equal(xf_checkpoint_decode(xfm, xfm_len, &m1, &p1, NULL), XF_OK);
  assert_int_equal(xf_export_onnx(m1, p1, NULL, &onnx, &onnx_len, NULL), XF_OK);

  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, onnx_len, onnx);
  assert_non_null(mp);
  char *arch = NULL;
  assert_int_equal(xf_checkpoint_arch_encode(m, &arch, NULL), XF_OK);
  const char *stated = metadata(mp, XF_ONNX_ARCH_KEY);
  assert_non_null(stated);
  assert_string_equal(stated, arch);
  assert_non_null(strstr(stated, "\"declared\":[{\"filters\":4,\"kernel\":3,\"kind\":\"conv2d\","
                                 "\"padding\":1,\"stride\":2}"));
  onnx__model_proto__free_unpacked(mp, NULL);

  xf_model *m2 = NULL;
  float *p2 = NULL;
  xf_errctx err = {0};
  if (xf_export_onnx_read(onnx, onnx_len, &m2, &p2, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_string_equal(xf_model_describe(m2), xf_model_describe(m));
  assert_int_equal(xf_checkpoint_encode(m2, p2, &again, &again_len, NULL), XF_OK);
  assert_int_equal(again_len, xfm_len);
  assert_memory_equal(again, xfm, xfm_len);

  xf_free(arch);
  xf_free(again);
  xf_free(p2);
  xf_model_free(m2);
  xf_free(onnx);
  xf_free(p1);
  xf_model_free(m1);
  xf_free(xfm);
  xf_free(p);
  xf_model_free(m);
}

/* Declared models that use every layer kind between them (layer_kinds.h). */
static xf_model *make_kinds(int which) {
  xf_model_spec s = xf_test_layer_model(which);
  xf_model *m = NULL;
  xf_errctx err = {0};
  if (xf_model_create(&s, &m, &err) != XF_OK) fail_msg("%s", err.msg);
  return m;
}

static bool has_node(const Onnx__GraphProto *g, const char *op, const char *name) {
  for (size_t i = 0; i < g->n_node; i++)
    if (strcmp(g->node[i]->op_type, op) == 0 && strcmp(g->node[i]->name, name) == 0) return true;
  return false;
}

/* Every new kind reaches the graph as the operators opset 13 has for it,
 * its tensors are named as PyTorch's state_dict names them, and the model
 * reads back (model file and ONNX) to the same bytes. */
static void every_layer_kind_exports_and_reads_back(void **state) {
  (void)state;
  static const struct {
    const char *op, *name;
  } want[] = {{"Reshape", "gn1.groups"},       {"ReduceMean", "gn1.var"},
              {"Reshape", "gn1.ungrouped"},    {"Unsqueeze", "gn1.gamma"},
              {"Add", "gn1"},                  {"Erf", "gelu1.erf"},
              {"Mul", "gelu1"},                {"Add", "add1"},
              {"AveragePool", "avgpool1"},     {"Dropout", "drop1"},
              {"Div", "ln1.normalized"},       {"Add", "ln1"},
              {"Sigmoid", "sigmoid1"},         {"Flatten", "add1.flatten"},
              {"Tanh", "tanh1"},               {"Softmax", "softmax1"},
              {"Gather", "embed1.rows"},       {"Cast", "embed1.ids64"},
              {"Unsqueeze", "embed1"}};
  bool found[sizeof(want) / sizeof(want[0])] = {0};
  for (int which = 0; which < 3; which++) {
    xf_model *m = make_kinds(which);
    float *p = indexed(m);
    uint8_t *xfm = NULL, *onnx = NULL, *again = NULL;
    size_t xfm_len = 0, onnx_len = 0, again_len = 0;
    xf_errctx err = {0};
    assert_int_equal(xf_checkpoint_encode(m, p, &xfm, &xfm_len, NULL), XF_OK);
    xf_model *m1 = NULL;
    float *p1 = NULL;
    if (xf_checkpoint_decode(xfm, xfm_len, &m1, &p1, &err) != XF_OK) fail_msg("%s", err.msg);
    if (xf_export_onnx(m1, p1, NULL, &onnx, &onnx_len, &err) != XF_OK) fail_msg("%s", err.msg);
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, onnx_len, onnx);
    assert_non_null(mp);
    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
      found[k] |= has_node(mp->graph, want[k].op, want[k].name);
    if (which == 0) {
      assert_int_equal(init(mp->graph, "gn1.weight")->dims[0], 4);
      assert_float_equal(raw_at(init(mp->graph, "gn2.bias"), 0),
                         (float)xf_model_layer(m, 8)->bias_offset, 0);
      assert_non_null(strstr(metadata(mp, XF_ONNX_ARCH_KEY), "{\"from\":-1,\"kind\":\"add\"}"));
      assert_non_null(strstr(metadata(mp, XF_ONNX_ARCH_KEY), "\"rate\":0.25"));
    }
    if (which == 2) {
      const Onnx__TensorProto *t = init(mp->graph, "embed1.weight");
      assert_int_equal(t->n_dims, 2);
      assert_int_equal(t->dims[0], 7);
      assert_int_equal(t->dims[1], 4);
      for (size_t i = 0; i < mp->graph->n_initializer; i++)
        assert_null(strstr(mp->graph->initializer[i]->name, "embed1.bias"));
    }
    onnx__model_proto__free_unpacked(mp, NULL);
    xf_model *m2 = NULL;
    float *p2 = NULL;
    if (xf_export_onnx_read(onnx, onnx_len, &m2, &p2, &err) != XF_OK) fail_msg("%s", err.msg);
    assert_int_equal(xf_checkpoint_encode(m2, p2, &again, &again_len, NULL), XF_OK);
    assert_int_equal(again_len, xfm_len);
    assert_memory_equal(again, xfm, xfm_len);

    /* A Constant's value is part of the graph: an edited epsilon or
     * reshape is refused. */
    Onnx__ModelProto *edit = onnx__model_proto__unpack(NULL, onnx_len, onnx);
    for (size_t i = 0; i < edit->graph->n_node; i++)
      if (strcmp(edit->graph->node[i]->op_type, "Constant") == 0) {
        edit->graph->node[i]->attribute[0]->t->raw_data.data[0] ^= 1;
        break;
      }
    size_t elen = onnx__model_proto__get_packed_size(edit);
    uint8_t *ebytes = xf_malloc(elen);
    onnx__model_proto__pack(edit, ebytes);
    xf_model *m3 = NULL;
    float *p3 = NULL;
    assert_int_equal(xf_export_onnx_read(ebytes, elen, &m3, &p3, &err), XF_EFORMAT);
    assert_non_null(strstr(err.msg, "Constant"));
    xf_free(ebytes);
    onnx__model_proto__free_unpacked(edit, NULL);

    uint8_t *npz = NULL;
    size_t npz_len = 0;
    assert_int_equal(xf_export_npz(m, p, &npz, &npz_len, NULL), XF_OK);
    xf_free(npz);
    xf_free(again);
    xf_free(p2);
    xf_model_free(m2);
    xf_free(onnx);
    xf_free(p1);
    xf_model_free(m1);
    xf_free(xfm);
    xf_free(p);
    xf_model_free(m);
  }
  for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++)
    if (!found[k]) fail_msg("no %s node %s in any graph", want[k].op, want[k].name);
}

/* Metadata that states another model than the graph is, or states it
 * badly, is refused naming what differs; a preset's export carries no
 * metadata, and reads back with or without it. */
static void onnx_read_refuses_metadata_the_graph_does_not_match(void **state) {
  (void)state;
  xf_model *m = make_declared();
  float *p = indexed(m);
  uint8_t *bytes = NULL;
  size_t len = 0;
  assert_int_equal(xf_export_onnx(m, p, NULL, &bytes, &len, NULL), XF_OK);
  char *arch = NULL;
  assert_int_equal(xf_checkpoint_arch_encode(m, &arch, NULL), XF_OK);
  char stride1[1024], fewer[1024], *at;
  assert_true(strlen(arch) < sizeof(stride1));
  strcpy(stride1, arch);
  assert_non_null(at = strstr(stride1, "\"stride\":2"));
  at[9] = '1';
  strcpy(fewer, arch);
  assert_non_null(at = strstr(fewer, "\"filters\":5"));
  at[10] = '3';
  const struct {
    const char *value;
    bool twice;
    const char *want;
  } cases[] = {
      {stride1, false, "the graph is not the one its metadata xfed.model states (layers(6)): "
                       "node 0 (Conv conv1)"},
      {fewer, false, "the graph is not the one its metadata xfed.model states (layers(6)): "
                     "initializer 2 (conv2.weight)"},
      {"{\"arch\":\"layers\",\"declared\":[{\"kind\":\"lstm\"}]}", false,
       "ONNX metadata xfed.model: declared[0] has no known \"kind\""},
      {"{\"arch\":\"layers\",\"arch\":\"mlp\"}", false, "ONNX metadata xfed.model is not a JSON"},
      {arch, true, "more than one xfed.model"},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, bytes);
    assert_non_null(mp);
    assert_int_equal(mp->n_metadata_props, 1);
    Onnx__StringStringEntryProto *e = mp->metadata_props[0], copy = *e;
    char *was = e->value;
    e->value = (char *)cases[c].value;
    Onnx__StringStringEntryProto *two[2] = {e, &copy};
    Onnx__StringStringEntryProto **had = mp->metadata_props;
    if (cases[c].twice) mp->metadata_props = two, mp->n_metadata_props = 2;
    uint8_t *edited = xf_malloc(onnx__model_proto__get_packed_size(mp));
    assert_non_null(edited);
    size_t elen = onnx__model_proto__pack(mp, edited);
    e->value = was;
    mp->metadata_props = had, mp->n_metadata_props = 1;
    onnx__model_proto__free_unpacked(mp, NULL);
    xf_model *back = NULL;
    float *q = NULL;
    xf_errctx err = {0};
    assert_int_equal(xf_export_onnx_read(edited, elen, &back, &q, &err), XF_EFORMAT);
    if (!strstr(err.msg, cases[c].want))
      fail_msg("case %zu: '%s' lacks '%s'", c, err.msg, cases[c].want);
    assert_null(back);
    xf_free(edited);
  }
  xf_free(arch);
  xf_free(bytes);
  xf_free(p);
  xf_model_free(m);

  /* A preset: no metadata written; the metadata it would have is taken. */
  m = make(XF_ARCH_MLP, XF_CNN_LENET5, 2, 3, 4);
  p = indexed(m);
  assert_int_equal(xf_export_onnx(m, p, NULL, &bytes, &len, NULL), XF_OK);
  Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, bytes);
  assert_non_null(mp);
  assert_int_equal(mp->n_metadata_props, 0);
  assert_int_equal(xf_checkpoint_arch_encode(m, &arch, NULL), XF_OK);
  Onnx__StringStringEntryProto e = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *one[1] = {&e};
  e.key = XF_ONNX_ARCH_KEY;
  e.value = arch;
  mp->metadata_props = one, mp->n_metadata_props = 1;
  uint8_t *edited = xf_malloc(onnx__model_proto__get_packed_size(mp));
  assert_non_null(edited);
  size_t elen = onnx__model_proto__pack(mp, edited);
  mp->metadata_props = NULL, mp->n_metadata_props = 0;
  onnx__model_proto__free_unpacked(mp, NULL);
  xf_model *back = NULL;
  float *q = NULL;
  xf_errctx err = {0};
  if (xf_export_onnx_read(edited, elen, &back, &q, &err) != XF_OK) fail_msg("%s", err.msg);
  assert_string_equal(xf_model_describe(back), "mlp(7)");
  assert_memory_equal(p, q, xf_model_num_params(m) * sizeof(float));
  xf_free(q);
  xf_model_free(back);
  xf_free(edited);
  xf_free(arch);
  xf_free(bytes);
  xf_free(p);
  xf_model_free(m);
}

static uint32_t rd32(const uint8_t *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static uint32_t rd16(const uint8_t *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8; }

static void npz_is_a_zip_of_npy_members_with_their_crcs(void **state) {
  (void)state;
  xf_model *m = make(XF_ARCH_LOGREG, XF_CNN_LENET5, 28, 28, 1);
  float *p = indexed(m);
  uint8_t *z = NULL, *z2 = NULL;
  size_t len = 0, len2 = 0;
  assert_int_equal(xf_export_npz(m, p, &z, &len, NULL), XF_OK);
  assert_int_equal(xf_export_npz(m, p, &z2, &len2, NULL), XF_OK);
  assert_int_equal(len, len2); /* the same model, the same bytes */
  assert_memory_equal(z, z2, len);
  const uint8_t *end = z + len - 22;
  assert_int_equal(rd32(end), 0x06054b50);
  assert_int_equal(rd16(end + 10), 2);
  size_t cd = rd32(end + 16), cd_size = rd32(end + 12);
  assert_int_equal(cd + cd_size, len - 22);
  static const char *const names[] = {"fc1.weight.npy", "fc1.bias.npy"};
  static const char *const shapes[] = {"(10, 784)", "(10,)"};
  const uint8_t *c = z + cd;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rd32(c), 0x02014b50);
    size_t nl = rd16(c + 28), off = rd32(c + 42), size = rd32(c + 24);
    assert_int_equal(nl, strlen(names[i]));
    assert_memory_equal(c + 46, names[i], nl);
    const uint8_t *l = z + off;
    assert_int_equal(rd32(l), 0x04034b50);
    assert_int_equal(rd16(l + 8), 0); /* stored */
    assert_int_equal(rd32(l + 18), size);
    const uint8_t *data = l + 30 + rd16(l + 26);
    assert_int_equal(rd32(l + 14), (uint32_t)crc32(crc32(0L, Z_NULL, 0), data, (uInt)size));
    assert_memory_equal(data, "\x93NUMPY\x01\x00", 8);
    size_t hl = rd16(data + 8);
    assert_int_equal((10 + hl) % 64, 0);
    char header[200] = "";
    memcpy(header, data + 10, hl < sizeof(header) - 1 ? hl : sizeof(header) - 1);
    assert_non_null(strstr(header, shapes[i]));
    assert_non_null(strstr(header, "'descr': '<f4'"));
    c += 46 + nl;
  }
  xf_free(z);
  xf_free(z2);
  xf_free(p);
  xf_model_free(m);
}

static void formats_come_from_words_and_extensions(void **state) {
  (void)state;
  xf_export_format f;
  assert_true(xf_export_format_parse("onnx", &f) && f == XF_EXPORT_ONNX);
  assert_true(xf_export_format_parse("npz", &f) && f == XF_EXPORT_NPZ);
  assert_true(xf_export_format_parse("xfed", &f) && f == XF_EXPORT_XFED);
  assert_false(xf_export_format_parse("ONNX", &f));
  assert_false(xf_export_format_parse("pt", &f));
  assert_true(xf_export_format_of_path("dir/model.onnx", &f) && f == XF_EXPORT_ONNX);
  assert_true(xf_export_format_of_path("m.npz", &f) && f == XF_EXPORT_NPZ);
  assert_true(xf_export_format_of_path("m.npy", &f) && f == XF_EXPORT_NPY);
  assert_true(xf_export_format_of_path("m.xfm", &f) && f == XF_EXPORT_XFED);
  assert_false(xf_export_format_of_path(".onnx", &f));
  assert_false(xf_export_format_of_path("model.bin", &f));
  assert_false(xf_export_format_of_path("onnx", &f));
  assert_string_equal(xf_export_format_name(XF_EXPORT_NPZ), "npz");
}

static void fail_allocations_of(xf_model *m) {
  float *p = indexed(m);
  for (long n = 0; n < 64; n++) {
    uint8_t *out = NULL;
    size_t len = 0;
    xf_alloc_fail_after(n);
    xf_err a = xf_export_onnx(m, p, NULL, &out, &len, NULL);
    xf_alloc_fail_reset();
    if (a == XF_OK) xf_free(out);
    else assert_int_equal(a, XF_ENOMEM);
    out = NULL;
    xf_alloc_fail_after(n);
    xf_err b = xf_export_npz(m, p, &out, &len, NULL);
    xf_alloc_fail_reset();
    if (b == XF_OK) xf_free(out);
    else assert_int_equal(b, XF_ENOMEM);
  }
  xf_free(p);
  xf_model_free(m);
}

static void allocation_failures_are_reported_and_leak_nothing(void **state) {
  (void)state;
  fail_allocations_of(make(XF_ARCH_CNN, XF_CNN_LENET5, 28, 28, 1));
  fail_allocations_of(make_declared()); /* its metadata too */
  for (int which = 0; which < 3; which++) fail_allocations_of(make_kinds(which));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(lenet5_graph_reads_back_with_nchw_layouts),
      cmocka_unit_test(dense_layout_permutes_channels_of_the_input),
      cmocka_unit_test(onnx_reads_back_to_the_same_model),
      cmocka_unit_test(onnx_read_refuses_an_edited_graph),
      cmocka_unit_test(declared_model_round_trips_through_onnx_byte_for_byte),
      cmocka_unit_test(onnx_read_refuses_metadata_the_graph_does_not_match),
      cmocka_unit_test(every_layer_kind_exports_and_reads_back),
      cmocka_unit_test(npz_is_a_zip_of_npy_members_with_their_crcs),
      cmocka_unit_test(formats_come_from_words_and_extensions),
      cmocka_unit_test(allocation_failures_are_reported_and_leak_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
