# SPDX-License-Identifier: Apache-2.0
# The size check (tests/shape.sh): the tree is within the limits, save the
# exceptions docs/development.md lists, and generated trees past them are
# refused by file, line, function and length.
add_test(NAME shape_check
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shape.sh ${PROJECT_SOURCE_DIR})
add_test(NAME shape_check_refuses_a_long_function_a_long_file_and_a_stale_exception
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/shape_refuses.sh
                 ${CMAKE_CURRENT_SOURCE_DIR}/shape.sh)
set_tests_properties(shape_check shape_check_refuses_a_long_function_a_long_file_and_a_stale_exception
                     PROPERTIES LABELS unit)
