# SPDX-License-Identifier: Apache-2.0
# Installing and supervising the daemons: the installed systemd units pass
# `systemd-analyze verify` (tests/integration/units.sh, a few seconds).
add_test(NAME deploy_units_verify
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/units.sh ${PROJECT_BINARY_DIR})
set_tests_properties(deploy_units_verify PROPERTIES LABELS integration TIMEOUT 300)

# Readiness, the watchdog and the CRL reload as systemd would see them
# (tests/integration/supervise.sh): only in builds that notify systemd.
if(XF_SYSTEMD)
  add_test(NAME deploy_supervise_notify_and_reload
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/supervise.sh ${PROJECT_BINARY_DIR})
  set_tests_properties(deploy_supervise_notify_and_reload PROPERTIES LABELS integration TIMEOUT 600)
endif()
