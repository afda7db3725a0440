# SPDX-License-Identifier: Apache-2.0
# The dashboard's tokens and sessions (coordinator/dashtoken.h), and, with
# XF_HTTP, the dashboard itself in headless Chromium against a running
# federation (tests/integration/dashboard.sh; about a minute on 2 cores).
xf_add_test(test_dashtoken SOURCES test_dashtoken.c LIBS xf_dashtoken LABELS unit)
if(XF_HTTP)
  add_test(NAME dashboard_browser
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/dashboard.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(dashboard_browser PROPERTIES LABELS integration TIMEOUT 600)
endif()
