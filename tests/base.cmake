# SPDX-License-Identifier: Apache-2.0
xf_add_test(test_base SOURCES test_base.c LIBS xf_base xf_crypto LABELS unit)
