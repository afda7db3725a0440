# SPDX-License-Identifier: Apache-2.0
# The transport's wire format: framing, version negotiation and tensor
# streams; the fuzz target for the frame decoder.
xf_add_test(test_net SOURCES test_net.c LIBS xf_net LABELS unit)
xf_add_fuzzer(fuzz_frame LIBS xf_net)
