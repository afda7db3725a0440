# SPDX-License-Identifier: Apache-2.0
# Smoke runs of the benchmarks at tiny sizes, so that none rots when the
# protocol changes: each runs the real program as bench/*.sh does and holds
# it to the JSON line the scripts read.
#   bench_round_smoke: xfed-bench-round, 8 fake sites x 2 rounds of mlp
#     against the real xfed-coord it configures itself (held offers, TaskGo,
#     the offered update stream ids), with the TLS baseline; it exits 0 and
#     prints its ratio and the coordinator's VmHWM.
add_test(NAME bench_round_smoke
         COMMAND $<TARGET_FILE:xfed-bench-round> --coord $<TARGET_FILE:xfed-coord> --sites 8
                 --rounds 2 --model mlp --tls-reps 2 --timeout 300)
set_tests_properties(bench_round_smoke PROPERTIES LABELS integration TIMEOUT 400
  PASS_REGULAR_EXPRESSION "\"ratio\": [0-9.]+, \"coord_vmhwm_kib\": [0-9]+.*\"coord_exit\": 0")
#   bench_round_large_model: 3 fake sites x 2 rounds of an mlp of two
#     1,500-unit layers (3,444,010 parameters, a 13.8 MB model file): each
#     model stream fills its connection past the high-water mark, and the
#     TaskGo sent meanwhile must still go out (it was refused as busy, and
#     the round waited for its 600 s deadline). --timeout 120 holds it to
#     that: far above the run's few seconds, far below the deadline.
add_test(NAME bench_round_large_model
         COMMAND $<TARGET_FILE:xfed-bench-round> --coord $<TARGET_FILE:xfed-coord> --sites 3
                 --rounds 2 --model mlp --mlp-width 1500 --tls-reps 1 --timeout 120)
set_tests_properties(bench_round_large_model PROPERTIES LABELS integration TIMEOUT 200
  PASS_REGULAR_EXPRESSION "\"params\": 3444010,.*\"coord_exit\": 0")
#   bench_round_tiered_smoke: the same with --regions 2 --sites 3: a top
#     coordinator, two regional aggregators (xfed-coord --role regional) and
#     two driver processes of three sites each, a job of the regional
#     topology, with the tiered baseline; every process exits 0.
add_test(NAME bench_round_tiered_smoke
         COMMAND $<TARGET_FILE:xfed-bench-round> --coord $<TARGET_FILE:xfed-coord> --regions 2
                 --sites 3 --rounds 2 --model mlp --tls-reps 2 --timeout 300)
set_tests_properties(bench_round_tiered_smoke PROPERTIES LABELS integration TIMEOUT 400
  PASS_REGULAR_EXPRESSION "\"mode\": \"tiered\".*\"ratio\": [0-9.]+.*\"top_vmhwm_kib\": [0-9]+.*\"top_exit\": 0")
#   bench_round_tiered_relay (slow): 2 regions x 200 sites x 3 rounds of
#     lenet5, where each round's models to the sites outlast the send budget
#     for longer than a tick: a regional aggregator freeing the relay of
#     round r must not drop the model streams of round r + 1 (all 400 sites
#     in every round, or the run fails).
add_test(NAME bench_round_tiered_relay
         COMMAND $<TARGET_FILE:xfed-bench-round> --coord $<TARGET_FILE:xfed-coord> --regions 2
                 --sites 200 --rounds 3 --model lenet5 --tls-reps 2 --timeout 900)
set_tests_properties(bench_round_tiered_relay PROPERTIES LABELS "integration;slow" TIMEOUT 1000
  PASS_REGULAR_EXPRESSION "\"mode\": \"tiered\".*\"sites\": 400.*\"top_exit\": 0")
