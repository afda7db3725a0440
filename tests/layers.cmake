# SPDX-License-Identifier: Apache-2.0
# The layering check (cmake/layers.cmake): the tree passes it, and a tree
# whose codec/ includes a job/ header is refused, naming the file and both
# layers.
add_test(NAME layers_check
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set(_xf_bad_tree ${CMAKE_CURRENT_BINARY_DIR}/layers-bad-tree)
file(WRITE ${_xf_bad_tree}/codec/codec.c "#include \"job/jobspec.h\"\n")
file(WRITE ${_xf_bad_tree}/job/jobspec.h "#include \"codec/codec.h\"\n")
add_test(NAME layers_check_refuses_an_upward_include
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${_xf_bad_tree}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set_tests_properties(layers_check layers_check_refuses_an_upward_include PROPERTIES LABELS unit)
set_tests_properties(layers_check_refuses_an_upward_include PROPERTIES
  PASS_REGULAR_EXPRESSION "codec/codec.c: #include \"job/jobspec.h\": codec/ \\(layer 1\\) may not include job/ \\(layer 3\\)")
