# SPDX-License-Identifier: Apache-2.0
# The update pipeline (update/update.h): known answers for each stage, the
# plans each job setup maps to, and the receiver's expectations (unit).
xf_add_test(test_update SOURCES test_update.c LIBS xf_update xf_kernels LABELS unit TIMEOUT 120)
