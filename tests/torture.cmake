# SPDX-License-Identifier: Apache-2.0
# Allocation-failure torture (tests/torture.sh, docs/development.md): each
# program below reruns failing its n-th allocation for every n, and every run
# must end cleanly, leak-free in the sanitized build. One line per program:
# xf_add_torture(PROGRAM) tortures all its tests; TESTS names cmocka
# test-name patterns, each tortured on its own, where the whole program makes
# too many allocations for a run per allocation to be affordable (the numbers
# are allocations of a run without failures, measured under ASan).

# The spec parser, admission, the round machine and the update pipeline: whole.
xf_add_torture(test_jobspec)
xf_add_torture(test_admission)
xf_add_torture(test_round)
xf_add_torture(test_update)
