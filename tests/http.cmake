# SPDX-License-Identifier: Apache-2.0
# The HTTP server for operators' endpoints, on loopback (plain and HTTPS),
# and the Prometheus text exposition writer.
xf_add_test(test_http SOURCES test_http.c LIBS xf_http xf_pki Threads::Threads LABELS unit)
xf_add_test(test_prom SOURCES test_prom.c LIBS xf_http LABELS unit)
