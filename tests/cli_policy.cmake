# SPDX-License-Identifier: Apache-2.0
# `xfed policy` and `xfed audit` on local databases, run as the compliance
# team runs them: the real binary building, checking, testing and diffing a
# policy, and verifying an audit trail the test appends through xf_audit.
xf_add_test(test_cli_policy SOURCES test_cli_policy.c LIBS xf_audit LABELS integration TIMEOUT 120)
add_dependencies(test_cli_policy xfed)
