# SPDX-License-Identifier: Apache-2.0
# Admission (job/admission.h): eligibility, groups, release conditions and
# the verdict on federations built in memory, with and without a policy.
xf_add_test(test_admission SOURCES test_admission.c LIBS xf_job xf_policy LABELS unit)
