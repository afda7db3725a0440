# SPDX-License-Identifier: Apache-2.0
# The job machine's transition table against itself and against
# docs/job-machine.md (no sockets, no simulation).
xf_add_test(test_jobm_table SOURCES test_jobm_table.c LIBS xf_jobm LABELS unit)
