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

# The compliance officer's offline checks on a federation of the real daemons
# (tests/integration/compliance.sh): backups of the running coordinator's
# journal and aggregator's trail made with `xfed-coord backup` verify offline,
# unchanged by the check; a plain copy without its -wal file and files that
# are not trails are refused. About 10 s on 2 cores.
add_test(NAME compliance_offline_trails
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/compliance.sh ${PROJECT_BINARY_DIR})
set_tests_properties(compliance_offline_trails PROPERTIES LABELS integration TIMEOUT 600)
