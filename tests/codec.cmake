# SPDX-License-Identifier: Apache-2.0
# The update codecs: round trips within the reported bound, unbiased rounding,
# error feedback, sizes, malformed encodings, fp16/bf16 and the fixed-scale
# quantizer. Its fuzz target is registered in fuzz.cmake, which defines
# xf_add_fuzzer after this fragment is read.
xf_add_test(test_codec SOURCES test_codec.c LIBS xf_codec LABELS unit TIMEOUT 120)
