# SPDX-License-Identifier: Apache-2.0
# The secure-aggregation phase machine: unit tests that play the sites with
# the guarded clients a site runs (crypto/secagg_guard.h, name-keyed
# signatures of tests/sa_identity.c) in-process, with an injected clock, no
# sockets.
xf_add_test(test_saphase SOURCES test_saphase.c sa_identity.c LIBS xf_saphase LABELS unit)
