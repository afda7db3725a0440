# SPDX-License-Identifier: Apache-2.0
# The `xfed` command line, run as a user runs it: the real binary on small
# CSV datasets and job specs that the test writes into a scratch directory.
xf_add_test(test_cli SOURCES test_cli.c LIBS xf_kernels xf_site xf_job LABELS integration)
add_dependencies(test_cli xfed)
