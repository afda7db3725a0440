# SPDX-License-Identifier: Apache-2.0
# The cuda backend checked op by op against cpu; skips itself without a GPU.
xf_add_test(test_kernels_gpu SOURCES test_kernels_gpu.c LIBS xf_kernels LABELS gpu)
