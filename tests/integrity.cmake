# SPDX-License-Identifier: Apache-2.0
# What the coordinator does with what it cannot trust (tests/integration/
# integrity.sh), each scenario on its own federation of the real daemons:
# sites' reports range-checked, at the coordinator and at a regional
# aggregator, and refused with an audited reason while the job's figures
# stay those of the honest sites; an update's weight beyond the records its
# site announced refused the same way; an update stream whose
# digest does not match answered Error(XF_EINTEGRITY); a site restarted
# mid-upload that seals its update to a new key taken from offset 0; a job
# whose only evaluation was refused ending with accuracy none, and why; a
# damaged journal refused at start. The scripted sites are
# xfed-scripted-site (tests/scripted_site.c), a site that speaks the
# protocol with a real certificate and reports what its script says.
add_executable(xfed-scripted-site scripted_site.c)
target_link_libraries(xfed-scripted-site PRIVATE xf_conn xf_job xf_crypto m)
foreach(_scenario reports_are_checked reports_are_checked_at_the_aggregator update_weight_is_checked
                  wrong_digest_is_an_integrity_error
                  resealed_update_restarts_from_zero no_accepted_evaluation_is_none
                  damaged_journal_is_refused_at_start)
  add_test(NAME integrity_${_scenario}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/integrity.sh
                   ${PROJECT_BINARY_DIR} ${_scenario})
  set_tests_properties(integrity_${_scenario} PROPERTIES LABELS integration TIMEOUT 1500)
endforeach()
