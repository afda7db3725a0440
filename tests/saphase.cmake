# SPDX-License-Identifier: Apache-2.0
# The secure-aggregation phase machine: unit tests that play the sites with
# real crypto/secagg.h clients in-process, with an injected clock, no sockets.
xf_add_test(test_saphase SOURCES test_saphase.c LIBS xf_saphase LABELS unit)
