# SPDX-License-Identifier: Apache-2.0
# The drawing of `xfed job report` (cli/report_chart.h): PNG, SVG and PDF of
# a known series read back and checked panel by panel.
xf_add_test(test_chart SOURCES test_chart.c LIBS xf_chart PkgConfig::EXPAT LABELS unit)
