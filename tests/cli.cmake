# SPDX-License-Identifier: Apache-2.0
# The `xfed` command line, run as a user runs it: the real binary on small
# CSV datasets and job specs that the test writes into a scratch directory.
xf_add_test(test_cli SOURCES test_cli.c LIBS xf_kernels xf_data xf_job LABELS integration)
add_dependencies(test_cli xfed)

# The accuracy targets on the real Fashion-MNIST: accuracy of the
# example specs and a repeated model digest. About a minute on 2 cores.
add_test(NAME test_cli_fmnist COMMAND test_cli --fmnist)
set_tests_properties(test_cli_fmnist PROPERTIES LABELS "integration;slow" TIMEOUT 1200
  ENVIRONMENT "XF_SOURCE_DIR=${PROJECT_SOURCE_DIR};XF_BUILD_DIR=${PROJECT_BINARY_DIR};XF_LOG_LEVEL=warn")
