#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# DP-SGD step cost: for mlp (200,200) and lenet5 at batch 64 on 28x28x1
# random data, milliseconds per plain step, per clipped step without noise
# and per full DP-SGD step (clipped backward + noise + SGD), REPEATS runs
# each on the cpu backend (and cuda when a GPU is usable); prints the medians,
# the ratios DP/plain with and without noise, the noise sampler's share of
# the DP step, and the Poisson sampling's cost for a 60000-record dataset.
#
# usage: bench/dp.sh [REPEATS] [THREADS]   (defaults: 5, all cores)
# The raw JSON lines go to build/bench-dp.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
threads=${2:-$(nproc)}
build=${XF_BENCH_BUILD:-build}

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc)" --target xfed-bench-dp >/dev/null
bin=$build/bench/xfed-bench-dp
out=$build/bench-dp.jsonl
: >"$out"

backends=(cpu)
if XF_BACKEND=cuda "$bin" --model mlp --steps 5 >/dev/null 2>&1; then backends+=(cuda); fi
for ((r = 1; r <= repeats; r++)); do
  for backend in "${backends[@]}"; do
    for model in mlp lenet5; do
      steps=$([ "$backend" = cuda ] && echo 1000 || echo 200)
      XF_BACKEND=$backend "$bin" --model "$model" --batch 64 --steps "$steps" \
        --threads "$threads" --records 60000 >>"$out"
    done
  done
  echo "repeat $r/$repeats done" >&2
done

python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"machine: {rows[0]['device']}")
print("| backend | model | params | plain ms/step | clipped ms/step | DP-SGD ms/step "
      "| clipped/plain | DP-SGD/plain | noise share of DP step | sampling ms/step (n = 60000) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for backend in ("cpu", "cuda"):
    for model in ("mlp", "lenet5"):
        rs = [r for r in rows if r["backend"] == backend and r["model"] == model]
        if not rs:
            continue
        med = lambda k: statistics.median(r[k] for r in rs)
        p, c, d, nz, s = (med(k) for k in ("plain_ms", "clip_ms", "dp_ms", "noise_ms", "sampling_ms"))
        print(f"| {backend} | {model} | {rs[0]['params']:,} | {p:.3f} | {c:.3f} | {d:.3f} "
              f"| {c / p:.2f}x | {d / p:.2f}x | {nz / d:.0%} | {s:.2f} |")
print(f"\n(medians of {len(rows) // max(1, len({(r['backend'], r['model']) for r in rows}))} runs each)")
PY
