# SPDX-License-Identifier: Apache-2.0
# The federation PKI: SPIFFE IDs, the federation directory, verification and
# a TLS 1.3 handshake with issued certificates; the SPIFFE parser's fuzz
# target; and `xfed pki` run as an admin runs it.
xf_add_test(test_pki SOURCES test_pki.c LIBS xf_pki LABELS unit)
xf_add_fuzzer(fuzz_spiffe LIBS xf_pki)
xf_add_test(test_cli_pki SOURCES test_cli_pki.c LIBS xf_pki LABELS integration)
add_dependencies(test_cli_pki xfed)
