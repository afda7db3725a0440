# SPDX-License-Identifier: Apache-2.0
# A round attempt's commit (coordinator/commit.h) and the scheduler of
# concurrent jobs (coordinator/schedule.h): pure functions, no sockets.
xf_add_test(test_commit SOURCES test_commit.c LIBS xf_commit LABELS unit)
xf_add_test(test_schedule SOURCES test_schedule.c LIBS xf_schedule LABELS unit)
