# SPDX-License-Identifier: Apache-2.0
# The policy model and the decision: every rule feature, deny beats allow,
# validity windows, versions, log and diff, import/export, refusals.
xf_add_test(test_policy SOURCES test_policy.c LIBS xf_policy LABELS unit TIMEOUT 60)
