# SPDX-License-Identifier: Apache-2.0
# Admission under load (tests/integration/admission.sh): the coordinator's
# caps read from --config and refused when wrong, and `xfed job list` served
# five times from the address of 500 dripping connections. About 30 s on 2
# cores.
add_test(NAME admission_under_load_serves_the_cli_beside_500_drips
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/admission.sh ${PROJECT_BINARY_DIR})
set_tests_properties(admission_under_load_serves_the_cli_beside_500_drips PROPERTIES LABELS integration
                     TIMEOUT 300 SKIP_RETURN_CODE 77)
