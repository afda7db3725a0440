# SPDX-License-Identifier: Apache-2.0
# The layering check (cmake/layers.cmake): the tree passes it; a tree whose
# codec/ includes a job/ header is refused, naming the file and both layers;
# and a tree where two modules of one layer include each other (site/ and
# cli/, or crypto/ including storage/, the reverse of an allowed pair) is
# refused, naming the file and the pair.
add_test(NAME layers_check
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set(_xf_bad_tree ${CMAKE_CURRENT_BINARY_DIR}/layers-bad-tree)
file(WRITE ${_xf_bad_tree}/codec/codec.c "#include \"job/jobspec.h\"\n")
file(WRITE ${_xf_bad_tree}/job/jobspec.h "#include \"codec/codec.h\"\n")
add_test(NAME layers_check_refuses_an_upward_include
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${_xf_bad_tree}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set(_xf_sideways_tree ${CMAKE_CURRENT_BINARY_DIR}/layers-sideways-tree)
file(WRITE ${_xf_sideways_tree}/site/main.c "#include \"cli/cli.h\"\n")
file(WRITE ${_xf_sideways_tree}/cli/cli.h "#include \"cmd/cmd.h\"\n")
file(WRITE ${_xf_sideways_tree}/cmd/cmd.h "#include \"base/result.h\"\n")
file(WRITE ${_xf_sideways_tree}/base/result.h "\n")
add_test(NAME layers_check_refuses_a_same_layer_include
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${_xf_sideways_tree}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set(_xf_reverse_tree ${CMAKE_CURRENT_BINARY_DIR}/layers-reverse-tree)
file(WRITE ${_xf_reverse_tree}/storage/blob.h "#include \"crypto/digest.h\"\n")
file(WRITE ${_xf_reverse_tree}/crypto/pki.c "#include \"storage/blob.h\"\n")
add_test(NAME layers_check_refuses_the_reverse_of_an_allowed_pair
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${_xf_reverse_tree}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers.cmake)
set_tests_properties(layers_check layers_check_refuses_an_upward_include
                     layers_check_refuses_a_same_layer_include
                     layers_check_refuses_the_reverse_of_an_allowed_pair PROPERTIES LABELS unit)
set_tests_properties(layers_check_refuses_an_upward_include PROPERTIES
  PASS_REGULAR_EXPRESSION "codec/codec.c: #include \"job/jobspec.h\": codec/ \\(layer 1\\) may not include job/ \\(layer 3\\)")
# Only the sideways include is named: the downward ones are allowed.
set_tests_properties(layers_check_refuses_a_same_layer_include PROPERTIES
  PASS_REGULAR_EXPRESSION "site/main.c: #include \"cli/cli.h\": site/ and cli/ are both layer [0-9]+, and XF_LAYER_ALLOW does not name site>cli"
  FAIL_REGULAR_EXPRESSION "cli/cli.h: |cmd/cmd.h: ")
set_tests_properties(layers_check_refuses_the_reverse_of_an_allowed_pair PROPERTIES
  PASS_REGULAR_EXPRESSION "crypto/pki.c: #include \"storage/blob.h\": crypto/ and storage/ are both layer [0-9]+, and XF_LAYER_ALLOW does not name crypto>storage"
  FAIL_REGULAR_EXPRESSION "storage/blob.h: ")
# docs/architecture.md draws the layers: the drawing names the modules of
# each layer that cmake/layers.cmake lists, and a drawing that leaves one out
# is refused.
add_test(NAME layers_drawing_matches_the_check
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${PROJECT_SOURCE_DIR}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers_doc.cmake)
set(_xf_bad_doc ${CMAKE_CURRENT_BINARY_DIR}/layers-bad-drawing.md)
file(WRITE ${_xf_bad_doc} "```\n layer 0   base/  results\n layer 1   crypto/  storage/\n```\n")
add_test(NAME layers_drawing_check_refuses_a_missing_module
         COMMAND ${CMAKE_COMMAND} -DXF_SOURCE_DIR=${PROJECT_SOURCE_DIR} -DXF_DOC=${_xf_bad_doc}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers_doc.cmake)
set_tests_properties(layers_drawing_matches_the_check
                     layers_drawing_check_refuses_a_missing_module PROPERTIES LABELS unit)
set_tests_properties(layers_drawing_check_refuses_a_missing_module PROPERTIES
  PASS_REGULAR_EXPRESSION "layer 1: cmake/layers.cmake lists codec, crypto, http, storage; the drawing shows crypto, storage")
# The link line (cmake/layers_link.cmake): the tree's links pass; a site
# program linking the CLI's library (the same layer) and a codec library
# linking job/'s (a higher one) are refused, each named.
add_test(NAME layers_link_check
         COMMAND ${CMAKE_COMMAND} -DXF_LINKS=${PROJECT_BINARY_DIR}/layers-links.txt
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers_link.cmake)
set(_xf_bad_links ${CMAKE_CURRENT_BINARY_DIR}/layers-bad-links.txt)
file(WRITE ${_xf_bad_links} "site xfed-site site xf_site_daemon\nsite xfed-site cli xf_cli\n"
                            "codec xf_codec job xf_job\ncodec xf_codec base xf_base\n")
add_test(NAME layers_link_check_refuses_a_same_layer_and_an_upward_link
         COMMAND ${CMAKE_COMMAND} -DXF_LINKS=${_xf_bad_links}
                 -P ${PROJECT_SOURCE_DIR}/cmake/layers_link.cmake)
set_tests_properties(layers_link_check layers_link_check_refuses_a_same_layer_and_an_upward_link
                     PROPERTIES LABELS unit)
set_tests_properties(layers_link_check_refuses_a_same_layer_and_an_upward_link PROPERTIES
  PASS_REGULAR_EXPRESSION "xfed-site \\(site/\\) links xf_cli \\(cli/\\): both layer [0-9]+, and XF_LAYER_ALLOW does not name site>cli.*xf_codec \\(codec/, layer 1\\) links xf_job \\(job/, layer 3\\): a higher layer"
  FAIL_REGULAR_EXPRESSION "links xf_site_daemon|links xf_base")
