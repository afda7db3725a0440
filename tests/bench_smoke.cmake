# SPDX-License-Identifier: Apache-2.0
# Smoke runs of the benchmark programs at tiny sizes, so that none rots when
# the code under it changes: each runs the real program the way its
# bench/*.sh script does (every mode a script uses) and, through
# tests/bench_smoke.sh, checks that it exits 0 and prints the JSON line the
# script reads. What they measure is recorded in docs/BENCHMARKS.md, not
# checked here. xfed-bench-round's smoke run is in tests/bench.cmake.
set(_xf_bench_smoke ${CMAKE_CURRENT_SOURCE_DIR}/bench_smoke.sh)

# bench/noise.sh, bench/dp.sh, and xfed-bench-train's DP-SGD flags.
add_test(NAME bench_noise_smoke
         COMMAND bash ${_xf_bench_smoke} gaussian_vec_par_sps
                 $<TARGET_FILE:xfed-bench-noise> --n 10000 --passes 1)
add_test(NAME bench_dp_smoke
         COMMAND bash ${_xf_bench_smoke} noise_ms
                 $<TARGET_FILE:xfed-bench-dp> --model mlp --batch 8 --steps 3 --threads 2
                 --records 100)
add_test(NAME bench_train_dp_smoke
         COMMAND bash ${_xf_bench_smoke} samples_per_s
                 $<TARGET_FILE:xfed-bench-train> --model mlp --batch 8 --steps 3 --threads 2
                 --dp-clip 1 --dp-noise 1.1)

# bench/train.sh: plain steps, and the SGEMM reference it adds.
add_test(NAME bench_train_smoke
         COMMAND bash ${_xf_bench_smoke} samples_per_s
                 $<TARGET_FILE:xfed-bench-train> --model mlp --batch 8 --steps 3 --threads 2
                 --sgemm 64)

# bench/aggregate.sh: updates folded from a receive buffer and straight from
# memory. 10,000 parameters in chunks of 4,096 make three folds an update,
# the last one short, as a real update's last frame is.
add_test(NAME bench_aggregate_smoke
         COMMAND bash ${_xf_bench_smoke} work_ms
                 $<TARGET_FILE:xfed-bench-aggregate> --updates 3 --params 10000 --chunk 4096
                 --rounds 2 --stream-mib 1 --passes 1)
add_test(NAME bench_aggregate_from_memory_smoke
         COMMAND bash ${_xf_bench_smoke} update_vs_copy
                 $<TARGET_FILE:xfed-bench-aggregate> --updates 3 --params 10000 --chunk 4096
                 --rounds 2 --stream-mib 1 --passes 1 --source updates)

# bench/codec.sh. The program's sizes are fixed (the two models'); one
# timed pass of each takes under a second.
add_test(NAME bench_codec_smoke
         COMMAND bash ${_xf_bench_smoke} results $<TARGET_FILE:xfed-bench-codec> --passes 1)

# bench/secagg.sh's two parts. Masking: its cost is the fixed 100-site
# round it sets up; 5,000 values span three of the masking loop's 8 KiB
# keystream calls, the last one short. The program exits 1 unless the
# aggregator's sum is exact. Protocol: one round of 3 sites.
add_test(NAME bench_secagg_masking_smoke
         COMMAND bash ${_xf_bench_smoke} finish_ratio
                 $<TARGET_FILE:xfed-bench-secagg> -n 5000 -p 1)
add_test(NAME bench_secagg_protocol_smoke
         COMMAND bash ${_xf_bench_smoke} guarded_site_ms
                 $<TARGET_FILE:xfed-bench-secagg> -n 1000 -s 3)

# bench/policy.sh, and the policy database's side of a change (--store).
add_test(NAME bench_policy_smoke
         COMMAND bash ${_xf_bench_smoke} decisions_per_s
                 $<TARGET_FILE:xfed-bench-policy> --sites 50 --regions 2 --rules 10 --seconds 0.2)
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/bench_policy_store)
add_test(NAME bench_policy_store_smoke
         COMMAND bash ${_xf_bench_smoke} diff_s
                 $<TARGET_FILE:xfed-bench-policy> --sites 50 --regions 2 --rules 10 --seconds 0.2
                 --store ${CMAKE_CURRENT_BINARY_DIR}/bench_policy_store)

set_tests_properties(bench_noise_smoke bench_dp_smoke bench_train_dp_smoke bench_train_smoke
                     bench_aggregate_smoke bench_aggregate_from_memory_smoke bench_codec_smoke
                     bench_secagg_masking_smoke bench_secagg_protocol_smoke bench_policy_smoke
                     bench_policy_store_smoke PROPERTIES
                     LABELS unit TIMEOUT 120 ENVIRONMENT "XF_BACKEND=cpu;${XF_TEST_ENVIRONMENT}")

# bench/soak.sh at 3 sites x 6 rounds, one site killed and started again
# after round 3, checkpoint_retention 2, against the same job without
# restarts. The script exits 1 unless every committed round counted all
# three sites, the coordinator kept exactly the last 2 rounds' checkpoints
# and the two runs end at the same model digest.
add_test(NAME bench_soak_smoke
         COMMAND bash ${_xf_bench_smoke} digests_equal
                 bash ${PROJECT_SOURCE_DIR}/bench/soak.sh --sites 3 --rounds 6 --restart-every 3
                 --from 1 --retention 2)
set_tests_properties(bench_soak_smoke PROPERTIES LABELS integration TIMEOUT 300
                     ENVIRONMENT "XF_BENCH_BUILD=${PROJECT_BINARY_DIR};XF_BACKEND=cpu;${XF_TEST_ENVIRONMENT}")

# bench/peer/run.sh (xfed against Flower): both sides at 2 sites, 1 round, on
# 1000-record shards, through tests/integration/bench_peer.sh; skipped where
# Flower's virtualenv cannot be made (no PyPI) or without root.
add_test(NAME bench_peer_smoke
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/integration/bench_peer.sh ${PROJECT_SOURCE_DIR}
                 ${PROJECT_BINARY_DIR})
set_tests_properties(bench_peer_smoke PROPERTIES LABELS integration TIMEOUT 1800
                     SKIP_RETURN_CODE 77 ENVIRONMENT "XF_BACKEND=cpu;${XF_TEST_ENVIRONMENT}")
