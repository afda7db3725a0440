# SPDX-License-Identifier: Apache-2.0
# Export for deployment (tests/integration/export.sh): every preset trained
# briefly with `xfed train` (and an mlp on a tabular CSV set the test makes),
# and three declared models that use every layer kind between them
# (layer_kinds.h), exported with `xfed model export` to ONNX and .npz. The default suite checks
# the graphs with Debian's python3-onnx (onnx.checker, full check), runs them in numpy against `xfed model eval`'s
# predictions, reads the .npz back and refuses a --format that disagrees with
# the extension; the slow one runs them in onnxruntime from PyPI (the
# benchmark virtualenv, bench/venv.sh), skipped when it cannot be made.
add_test(NAME export_onnx_checked_and_evaluated
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/export.sh ${PROJECT_BINARY_DIR} numpy)
set_tests_properties(export_onnx_checked_and_evaluated PROPERTIES LABELS integration TIMEOUT 600)
add_test(NAME export_onnxruntime_predicts_as_xfed
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/export.sh ${PROJECT_BINARY_DIR}
                 onnxruntime)
set_tests_properties(export_onnxruntime_predicts_as_xfed PROPERTIES LABELS slow TIMEOUT 1200
                     SKIP_RETURN_CODE 77)

# The exporters in-process: the ONNX graph read back with the same generated
# protobuf-c code (nodes, attributes, initializers, shapes), each layout
# conversion against hand-placed values, the .npz's zip records and CRCs, and
# the format words and extensions.
xf_add_test(test_export SOURCES test_export.c layer_kinds.c LIBS xf_export PkgConfig::ZLIB LABELS unit TIMEOUT 120)

# The declared models of layer_kinds.h as model files and trainer tasks, for
# the checks of every layer kind against xfed's own evaluation (export.sh,
# and torch_layers.sh in trainer.cmake).
add_executable(xfed-layer-models layer_models.c layer_kinds.c)
target_include_directories(xfed-layer-models PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(xfed-layer-models PRIVATE xf_site_trainer xf_kernels m)
