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
