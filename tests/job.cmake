# SPDX-License-Identifier: Apache-2.0
# The job spec: unit tests and its fuzz target.
xf_add_test(test_jobspec SOURCES test_jobspec.c LIBS xf_job LABELS unit)
xf_add_fuzzer(fuzz_jobspec LIBS xf_job)
