# SPDX-License-Identifier: Apache-2.0
# The Rényi-DP accountant: known answers from tests/data/accountant.exp,
# properties of the formulas, calibration, and `xfed dp` run for real.
xf_add_test(test_accountant SOURCES test_accountant.c LIBS xf_privacy PkgConfig::JANSSON LABELS unit)
add_dependencies(test_accountant xfed)
