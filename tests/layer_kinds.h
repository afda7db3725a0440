/* SPDX-License-Identifier: Apache-2.0 */
/* Declared models that use every layer kind between them, shared by the
 * export unit test and the maker of model files for the integration checks
 * (ONNX, .npz and the PyTorch trainer against xfed's own evaluation). */
#ifndef XF_TESTS_LAYER_KINDS_H
#define XF_TESTS_LAYER_KINDS_H

#include "kernels/model.h"

#define XF_TEST_LAYER_MODELS 3

/* Model which (0..XF_TEST_LAYER_MODELS-1), 3 classes:
 *   0 "image": 6x6x4 records; conv2d, groupnorm, gelu, add from the input,
 *     avgpool2d, dropout, layernorm over channels, dense, groupnorm of
 *     features, sigmoid, add from the dense layer, dense.
 *   1 "flat": 1x1x6 records (a CSV's features); dense, add from the input,
 *     layernorm, tanh, dropout, dense, softmax, dense.
 *   2 "embed": 1x1x5 ids in 0..6 (a CSV's features); embedding (dim 4),
 *     layernorm, softmax over each id's row, dense. */
xf_model_spec xf_test_layer_model(int which);
/* "image", "flat", "embed". */
const char *xf_test_layer_model_name(int which);

#endif
