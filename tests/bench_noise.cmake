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
