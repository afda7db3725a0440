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
# The ONNX read-back of `xfed model eval|export` (kernels/export.h), for the
# same reason: tests/export.cmake is read before this one.
xf_add_fuzzer(fuzz_onnx LIBS xf_export)
xf_add_fuzzer(fuzz_policy LIBS xf_policy)

# Every message a peer can send, by family (tests/fuzz/README.md has the
# table of message → target). The seeds are written by fuzz_seeds
# (tests/fuzz/fuzz_seeds.c), which is built with the tests and not run by
# them: `build/tests/fuzz_seeds tests/fuzz/corpus` writes them again.
# fuzz_hello defines the xf_conn_* functions net/session.c calls (a recording
# connection), so nothing it links may need the rest of net/conn.c.
xf_add_fuzzer(fuzz_hello LIBS xf_conn)
xf_add_fuzzer(fuzz_tensor LIBS xf_net xf_update xf_aggregate xf_report xf_codec xf_secagg xf_job)
xf_add_fuzzer(fuzz_document LIBS xf_conn)
xf_add_fuzzer(fuzz_secagg_server LIBS xf_sawire xf_saphase xf_net xf_job xf_codec)
xf_add_fuzzer(fuzz_site_task LIBS xf_site_machine xf_secagg xf_net)
xf_add_fuzzer(fuzz_round LIBS xf_jobm xf_report xf_job xf_net)
xf_add_fuzzer(fuzz_cli_request LIBS xf_round xf_cli xf_job xf_policy xf_audit xf_privacy xf_net)
add_executable(fuzz_seeds ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_seeds.c)
target_link_libraries(fuzz_seeds PRIVATE xf_sawire xf_saphase xf_secagg xf_update xf_job xf_kernels xf_codec
                      xf_conn xf_net)
