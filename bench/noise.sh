#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Noise-sampling benchmark: builds xfed-bench-noise (bench/noise_bench.c,
# -O2 as RelWithDebInfo) and runs it REPEATS times. Each run measures, in the
# same process, randombytes_buf and ChaCha20 bytes/s and the samples/s of
# xf_noise_gaussian_vec (one thread, and _par on all CPUs) and of
# xf_noise_discrete_gaussian_vec. Prints medians and ranges as Markdown.
#
# usage: bench/noise.sh [REPEATS]   (default 5)
# BUILD_DIR (default build) is the CMake build directory; the raw JSON lines
# go to $BUILD_DIR/bench-noise.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
build=${BUILD_DIR:-build}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target xfed-bench-noise >/dev/null
bin=$build/bench/xfed-bench-noise
out=$build/bench-noise.jsonl
: >"$out"

for ((r = 1; r <= repeats; r++)); do
  "$bin" >>"$out"
  echo "repeat $r/$repeats done" >&2
done

"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = rows[0]
print(f"machine: {first['device']}, {first['cpus']} CPUs; n = {first['n']}, "
      f"best of {first['passes']} passes per run; medians of {len(rows)} runs (min–max)")
cols = [("randombytes_bps", "randombytes_buf MB/s", 1e-6, 0),
        ("chacha20_bps", "ChaCha20 (OpenSSL, the generator's) MB/s", 1e-6, 0),
        ("chacha20_libsodium_bps", "ChaCha20 (libsodium) MB/s", 1e-6, 0),
        ("gaussian_vec_sps", "gaussian_vec M/s (1 thread)", 1e-6, 2),
        ("gaussian_vec_par_sps", f"gaussian_vec_par M/s ({first['cpus']} threads)", 1e-6, 2),
        ("discrete_gaussian_vec_sps", "discrete_gaussian_vec M/s", 1e-6, 2),
        ("vec_per_csprng_word", "1 thread ÷ CSPRNG words/s", 1, 3),
        ("vec_per_chacha_word", "1 thread ÷ ChaCha20 words/s", 1, 4),
        ("par_per_csprng_word", "all cores ÷ CSPRNG words/s", 1, 3),
        ("par_per_chacha_word", "all cores ÷ ChaCha20 words/s", 1, 4)]
print("| measure | median (min–max) |")
print("|---|---|")
for key, name, scale, digits in cols:
    v = [r[key] * scale for r in rows]
    print(f"| {name} | {statistics.median(v):.{digits}f} "
          f"({min(v):.{digits}f}–{max(v):.{digits}f}) |")
PY
