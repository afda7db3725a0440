# SPDX-License-Identifier: Apache-2.0
# `xfed policy` and `xfed audit` on local databases, run as the compliance
# team runs them: the real binary building, checking, testing and diffing a
# policy, and verifying an audit trail the test appends through xf_audit.
xf_add_test(test_cli_policy SOURCES test_cli_policy.c LIBS xf_audit LABELS integration TIMEOUT 120)
add_dependencies(test_cli_policy xfed)

# The same commands without --db, against the real global coordinator
# (xfed-coord --region us) on loopback with certificates from `xfed pki`: a
# compliance identity pushes and edits, a researcher reads and is refused the
# rest, checks are decided in the coordinator's region, the audit trail holds
# every change, and a push drafted on an old version is refused.
xf_add_test(test_policy_remote SOURCES test_policy_remote.c LIBS xf_cli LABELS integration
            TIMEOUT 60)
add_dependencies(test_policy_remote xfed xfed-coord)
