/* SPDX-License-Identifier: Apache-2.0 */
/* The declared models of tests/layer_kinds.h. */
#include "layer_kinds.h"

#define D(...) ((xf_layer_decl){__VA_ARGS__})

xf_model_spec xf_test_layer_model(int which) {
  xf_model_spec s = {.arch = XF_ARCH_LAYERS, .classes = 3};
  xf_layer_decl *L = s.layers;
  int n = 0;
  if (which == 0) {
    s.in_h = 6, s.in_w = 6, s.in_c = 4;
    L[n++] = D(.kind = XF_DECL_CONV2D, .filters = 4, .kernel = 3, .padding = 1);
    L[n++] = D(.kind = XF_DECL_GROUPNORM, .groups = 2);
    L[n++] = D(.kind = XF_DECL_GELU);
    L[n++] = D(.kind = XF_DECL_ADD, .from = -1);
    L[n++] = D(.kind = XF_DECL_AVGPOOL2D, .kernel = 2);
    L[n++] = D(.kind = XF_DECL_DROPOUT, .rate = 0.25f);
    L[n++] = D(.kind = XF_DECL_LAYERNORM);
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 12);
    L[n++] = D(.kind = XF_DECL_GROUPNORM, .groups = 3);
    L[n++] = D(.kind = XF_DECL_SIGMOID);
    L[n++] = D(.kind = XF_DECL_ADD, .from = 7);
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 3);
  } else if (which == 1) {
    s.in_h = 1, s.in_w = 1, s.in_c = 6;
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 6);
    L[n++] = D(.kind = XF_DECL_ADD, .from = -1);
    L[n++] = D(.kind = XF_DECL_LAYERNORM);
    L[n++] = D(.kind = XF_DECL_TANH);
    L[n++] = D(.kind = XF_DECL_DROPOUT, .rate = 0.5f);
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 16);
    L[n++] = D(.kind = XF_DECL_SOFTMAX);
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 3);
  } else {
    s.in_h = 1, s.in_w = 1, s.in_c = 5;
    L[n++] = D(.kind = XF_DECL_EMBEDDING, .vocab = 7, .dim = 4);
    L[n++] = D(.kind = XF_DECL_LAYERNORM);
    L[n++] = D(.kind = XF_DECL_SOFTMAX);
    L[n++] = D(.kind = XF_DECL_DENSE, .units = 3);
  }
  s.n_layers = n;
  return s;
}

const char *xf_test_layer_model_name(int which) {
  static const char *const names[XF_TEST_LAYER_MODELS] = {"image", "flat", "embed"};
  return which >= 0 && which < XF_TEST_LAYER_MODELS ? names[which] : "?";
}
