# SPDX-License-Identifier: Apache-2.0
# Allocation-failure torture (tests/torture.sh, docs/development.md): each
# program below reruns failing its n-th allocation for every n, and every run
# must end cleanly, leak-free in the sanitized build. One line per program:
# xf_add_torture(PROGRAM) tortures all its tests; TESTS lists cmocka
# test-name patterns, each tortured on its own, where the whole program makes
# too many allocations for a run per allocation to be affordable. The counts
# below are allocations of a run without failures. A run takes 0.1-0.3 s
# under ASan; all of this file, about 4,000 runs, takes 140-160 s of CPU
# (6-7 minutes of wall time on two cores shared at a load of 20-28).

# The spec parser, admission, the round machine and the update pipeline are
# tortured whole (86, 425, 197 and 95 allocations).
xf_add_torture(test_jobspec)
xf_add_torture(test_admission)
xf_add_torture(test_round)
# Checkpoint retention, whole.
xf_add_torture(test_retention)
xf_add_torture(test_update)

# The job machine (5,565 in all, 4 s a run under ASan): the cases of its
# lifecycle one by one, 11-34 allocations each (waiting, acceptances, go,
# retries, policy pauses, budget, lost links, relays, the noise target), a
# silent site, and a refusal behind a regional aggregator (455), the tier
# whose forwarded aggregates the simulation copies. The larger cases (secure
# aggregation over a mixed cohort, 935; median across regions, 552; an
# attempt the region cannot release, 4 s a run) would take minutes each.
xf_add_torture(test_jobmachine TESTS
  a_job_waits_for_sites_and_opens_when_they_come
  nobody_trains_until_every_site_answered_then_all_go
  too_few_acceptances_retry_without_a_go
  an_aggregator_answering_for_too_few_sites_retries_without_a_go
  a_policy_that_no_longer_allows_pauses_and_one_that_does_resumes
  a_spent_budget_fails_the_job_without_retrying
  a_lost_link_is_waited_for_then_dropped_and_a_return_is_offered_again
  a_relay_*
  noise_in_the_sum_stops_before_the_round_that_would_pass_the_target
  a_silent_site_is_dropped_at_the_confirmation_window
  a_refusal_behind_an_aggregator_reaches_the_coordinator_in_the_sites_words)

# Secure aggregation's phase machine (20,765 in all; the Harary-graph test
# alone makes 16,232): a whole round, a dropout recovered from shares, a site
# silent in the advert phase, too few survivors, unrevealed secrets, refused
# messages, and the shared subset (136-328 each).
# create_fails_cleanly_at_every_allocation walks its own allocations.
xf_add_torture(test_saphase TESTS
  three_sites_unmask_the_weighted_mean
  a_site_gone_after_its_masked_input_is_recovered_from_the_others_shares
  a_site_silent_in_the_advert_phase_is_dropped_at_the_deadline_and_the_rest_go_on
  fewer_survivors_than_the_threshold_fails_naming_both_counts
  unrevealed_secrets_fail_the_unmasking_naming_the_site
  refusals_leave_the_unmasking_and_the_failure_counts_them
  shared_subset_places_values_and_zeroes_the_rest)

# Secure aggregation's protocol (27,575 in all; the graph-property test makes
# 22,774, a round of 100 sites 1,465): rounds of 5 sites with dropouts before
# and after masking, too few reveals, a client refusing to reveal both
# secrets, a server refusing bad input, the quantized sum, the masks (65-141
# each).
xf_add_torture(test_secagg TESTS
  round_sums_exactly_with_5_sites
  site_dropping_before_masking_is_left_out
  site_dropping_after_masking_is_counted
  too_few_reveals_fail_finish_by_name
  client_refuses_to_reveal_both_secrets_of_a_site
  server_refuses_bad_masked_input_and_reveals
  secure_sum_of_quantized_updates_is_the_plain_sum_within_one_step_per_site
  masked_vector_is_uniform_whatever_the_input)

# The torture refuses what it is for: a planted crash on an error path in any
# build, a planted leak in the sanitized one; the same program without them
# is clean.
xf_add_test(test_torture_probe SOURCES torture_probe.c LIBS xf_base LABELS unit)
# The site's offer checks, its task set and its rounds of secure aggregation
# (200, 134 and 224), and the coordinator's commit (162), whole. The site's
# task table and the job scheduler allocate nothing through the wrapper, so
# have nothing to fail.
xf_add_torture(test_site_offer)
xf_add_torture(test_site_tasks)
xf_add_torture(test_site_agg)
xf_add_torture(test_commit)

xf_add_torture(test_torture_probe)
function(xf_torture_refuses planted)
  add_test(NAME torture_refuses_a_planted_${planted}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torture.sh $<TARGET_FILE:test_torture_probe>)
  set_tests_properties(torture_refuses_a_planted_${planted} PROPERTIES
    LABELS unit
    TIMEOUT 120
    ENVIRONMENT "XF_TORTURE_PROBE=${planted}"
    PASS_REGULAR_EXPRESSION "not clean with allocation n failing for n in: 2\n")
endfunction()
xf_torture_refuses(crash)
if(XF_SANITIZE)
  xf_torture_refuses(leak)
endif()
