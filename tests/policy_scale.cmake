# SPDX-License-Identifier: Apache-2.0
# A policy of 60,000 sites through the real coordinator (tests/integration/
# policy_scale.sh): imported, exported byte for byte as the library exports
# it, six single edits each answered with the version and the change, and
# the audit trail read page by page, over 64 KiB frames so that every
# document and page is larger than one. About 30 s on 2 cores.
add_test(NAME policy_scale_60000_sites
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/policy_scale.sh ${PROJECT_BINARY_DIR})
set_tests_properties(policy_scale_60000_sites PROPERTIES LABELS integration TIMEOUT 600)
