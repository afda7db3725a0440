# SPDX-License-Identifier: Apache-2.0
# What sites report, checked (coordinator/report.h): the range of every
# figure of a Metrics and the weight of an update, refused naming the field.
xf_add_test(test_report SOURCES test_report.c LIBS xf_report LABELS unit)
