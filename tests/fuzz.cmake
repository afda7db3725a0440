# SPDX-License-Identifier: Apache-2.0
# Fuzz targets: tests/fuzz/<name>.c defines LLVMFuzzerTestOneInput, and
# tests/fuzz/corpus/<name>/ holds its seed corpus. Every build links each target
# with a replay driver and runs the corpus under the `fuzz` label; with
# -DXF_FUZZ=ON (clang) a libFuzzer binary <name>_fuzzer is built as well.
#
# xf_add_fuzzer(NAME LIBS lib ...)
function(xf_add_fuzzer name)
  cmake_parse_arguments(F "" "" "LIBS" ${ARGN})
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${name}.c)
  set(corpus ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus/${name})
  add_executable(${name}_replay ${src} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/replay_main.c)
  target_link_libraries(${name}_replay PRIVATE ${F_LIBS})
  add_test(NAME ${name}_corpus COMMAND ${name}_replay ${corpus})
  set_tests_properties(${name}_corpus PROPERTIES LABELS "fuzz" TIMEOUT 300
                       ENVIRONMENT "XF_LOG_LEVEL=off")
  if(XF_FUZZ)
    add_executable(${name}_fuzzer ${src})
    target_link_libraries(${name}_fuzzer PRIVATE ${F_LIBS})
    target_link_options(${name}_fuzzer PRIVATE -fsanitize=fuzzer)
  endif()
endfunction()

# The update codec's decoder (codec/codec.h); registered here because its own
# fragment, tests/codec.cmake, is read before this one.
xf_add_fuzzer(fuzz_codec LIBS xf_codec)
xf_add_fuzzer(fuzz_policy LIBS xf_policy)
