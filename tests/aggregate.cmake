# SPDX-License-Identifier: Apache-2.0
# The round's aggregator and the server optimizers: unit tests, no sockets.
xf_add_test(test_aggregate SOURCES test_aggregate.c LIBS xf_aggregate LABELS unit)
