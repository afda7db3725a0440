# SPDX-License-Identifier: Apache-2.0
# Secure aggregation: Shamir sharing (known answers from tests/data/shamir.exp,
# properties, refusals), whole SecAgg+ rounds simulated in process with
# dropouts (and the daemons' quantized aggregate against the plain sum), and
# sealed update streams.
xf_add_test(test_shamir SOURCES test_shamir.c LIBS xf_secagg LABELS unit TIMEOUT 60)
xf_add_test(test_secagg SOURCES test_secagg.c LIBS xf_secagg xf_codec LABELS unit TIMEOUT 60)
xf_add_test(test_seal SOURCES test_seal.c LIBS xf_secagg LABELS unit TIMEOUT 60)
# Against a malicious aggregator: signed adverts and shares checked with real
# certificates of a scratch federation, the consistency round, and an
# aggregator that lies about a dropout to unmask one site.
xf_add_test(test_secagg_guard SOURCES test_secagg_guard.c LIBS xf_secagg_x509 LABELS unit
            TIMEOUT 60)
# A malicious aggregator end to end: the sites' guarded clients with real
# certificates against the aggregator's phase machine, an aggregator that
# lies about dropouts, and the attack that lie makes on semi-honest clients.
xf_add_test(test_secagg_malicious SOURCES test_secagg_malicious.c
            LIBS xf_saphase xf_secagg_x509 xf_codec LABELS unit TIMEOUT 120)
