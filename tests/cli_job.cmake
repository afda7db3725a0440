# SPDX-License-Identifier: Apache-2.0
# `xfed job`, run as a researcher runs it: the real binary against a fake
# coordinator in a thread of the test, over mutual TLS with certificates made
# by the test (submit, list, status, watch, cancel, metrics, export, refusals,
# and where the CLI finds its coordinator and identity).
xf_add_test(test_cli_job SOURCES test_cli_job.c
            LIBS xf_conn xf_kernels xf_export xf_pki Threads::Threads LABELS integration TIMEOUT 300)
add_dependencies(test_cli_job xfed)
