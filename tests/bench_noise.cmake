# SPDX-License-Identifier: Apache-2.0
# Smoke runs of the noise and DP-SGD benchmarks (bench/noise.sh, bench/dp.sh,
# and xfed-bench-train's DP-SGD flags) at tiny sizes: each program exits 0
# and prints its one JSON line, so the scripts that read them keep working.
# What they measure is recorded in docs/BENCHMARKS.md, not checked here.
set(_xf_bench_smoke ${CMAKE_CURRENT_SOURCE_DIR}/bench_smoke.sh)
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
set_tests_properties(bench_noise_smoke bench_dp_smoke bench_train_dp_smoke PROPERTIES
                     LABELS unit TIMEOUT 120 ENVIRONMENT "XF_BACKEND=cpu;${XF_TEST_ENVIRONMENT}")

# The same for the other benchmark programs (bench/aggregate.sh, codec.sh,
# secagg.sh, policy.sh and train.sh read these lines), at tiny sizes.
add_test(NAME bench_aggregate_smoke
         COMMAND bash ${_xf_bench_smoke} work_ms
                 $<TARGET_FILE:xfed-bench-aggregate> --updates 3 --params 10000 --rounds 2
                 --stream-mib 1 --passes 1)
add_test(NAME bench_codec_smoke
         COMMAND bash ${_xf_bench_smoke} results $<TARGET_FILE:xfed-bench-codec> --passes 1)
add_test(NAME bench_secagg_smoke
         COMMAND bash ${_xf_bench_smoke} guarded_site_ms
                 $<TARGET_FILE:xfed-bench-secagg> -n 1000 -p 1 -s 3)
add_test(NAME bench_policy_smoke
         COMMAND bash ${_xf_bench_smoke} decisions_per_s
                 $<TARGET_FILE:xfed-bench-policy> --sites 50 --regions 2 --rules 10 --seconds 0.2)
add_test(NAME bench_train_smoke
         COMMAND bash ${_xf_bench_smoke} samples_per_s
                 $<TARGET_FILE:xfed-bench-train> --model mlp --batch 8 --steps 3 --threads 2)
set_tests_properties(bench_aggregate_smoke bench_codec_smoke bench_secagg_smoke
                     bench_policy_smoke bench_train_smoke PROPERTIES
                     LABELS unit TIMEOUT 120 ENVIRONMENT "XF_BACKEND=cpu;${XF_TEST_ENVIRONMENT}")
