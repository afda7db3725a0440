# SPDX-License-Identifier: Apache-2.0
# Secure aggregation: Shamir sharing (known answers from tests/data/shamir.exp,
# properties, refusals), whole SecAgg+ rounds simulated in process with
# dropouts (and the daemons' quantized aggregate against the plain sum), and
# sealed update streams.
xf_add_test(test_shamir SOURCES test_shamir.c LIBS xf_secagg LABELS unit TIMEOUT 60)
xf_add_test(test_secagg SOURCES test_secagg.c LIBS xf_secagg xf_codec LABELS unit TIMEOUT 60)
xf_add_test(test_seal SOURCES test_seal.c LIBS xf_secagg LABELS unit TIMEOUT 60)
