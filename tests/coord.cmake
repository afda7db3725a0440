# SPDX-License-Identifier: Apache-2.0
# The coordinator daemon as peers meet it: the real xfed-coord (found under
# XF_BUILD_DIR) on loopback with a federation's real certificates, probed by
# `openssl s_client` and by in-test clients; every refusal is logged and the
# daemon goes on serving.
xf_add_test(test_coord_refusals SOURCES test_coord_refusals.c LIBS xf_conn xf_job xf_round xf_audit
            LABELS integration TIMEOUT 120)
add_dependencies(test_coord_refusals xfed-coord)
