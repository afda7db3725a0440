# SPDX-License-Identifier: Apache-2.0
xf_add_test(test_kernels SOURCES test_kernels.c LIBS xf_kernels LABELS unit)
xf_add_fuzzer(fuzz_checkpoint LIBS xf_kernels)
