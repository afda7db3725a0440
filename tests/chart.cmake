# SPDX-License-Identifier: Apache-2.0
# The drawing of `xfed job report` (cli/report_chart.h), with XF_REPORT: PNG,
# SVG and PDF of a known series read back and checked panel by panel.
if(XF_REPORT)
  xf_add_test(test_chart SOURCES test_chart.c LIBS xf_chart PkgConfig::EXPAT LABELS unit)
endif()
