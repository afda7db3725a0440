# SPDX-License-Identifier: Apache-2.0
# The Prometheus text exposition writer (every build), and with XF_HTTP the
# HTTP server for operators' endpoints on loopback (plain and HTTPS).
xf_add_test(test_prom SOURCES test_prom.c LIBS xf_prom LABELS unit)
if(XF_HTTP)
  xf_add_test(test_http SOURCES test_http.c LIBS xf_http xf_pki Threads::Threads LABELS unit)

  # Debian's prometheus scraping a small quickstart federation whose daemons
  # serve /metrics (tests/integration/metrics.sh): the series read back
  # through its HTTP API equal `xfed job metrics`; promtool checks every
  # exposition; json logs parse.
  add_test(NAME metrics_prometheus
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/metrics.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(metrics_prometheus PROPERTIES LABELS integration TIMEOUT 900)
endif()
