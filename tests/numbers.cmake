# SPDX-License-Identifier: Apache-2.0
# One job's numbers in every view (tests/integration/numbers.sh): status
# (text and JSON), watch, metrics, the coordinator's /metrics, the
# dashboard's JSON, the report and the export agree on rounds, bytes up and
# down, epsilon, accuracy and the model digest. About 30 s on 2 cores.
if(XF_HTTP)
  if(XF_REPORT)
    set(_xf_numbers_report 1)
  else()
    set(_xf_numbers_report 0)
  endif()
  add_test(NAME numbers_agree
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/numbers.sh ${PROJECT_BINARY_DIR}
                   ${_xf_numbers_report})
  set_tests_properties(numbers_agree PROPERTIES LABELS integration TIMEOUT 600)
endif()
