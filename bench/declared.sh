#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A declared model against its preset twin: lenet5 as the preset and as
# lenet5's layer list given the way a job spec's model.layers gives it, run
# alternately PAIRS times on one thread (cpu backend), so both see the same
# machine. Prints each model's median samples/s (wall clock and the thread's
# CPU time, which leaves out what other tenants of a shared machine take),
# the median of the pairs' ratios (declared / preset), and the final losses,
# which must be equal: the two build the same layer table.
#
# usage: bench/declared.sh [PAIRS] [STEPS]   (defaults: 9, 1000)
# The raw JSON lines go to build/bench-declared.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-9}
steps=${2:-1000}
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" --target xfed-bench-train >/dev/null
bin=build/bench/xfed-bench-train
out=build/bench-declared.jsonl
: >"$out"
for ((i = 1; i <= pairs; i++)); do
  for model in lenet5 lenet5-declared; do
    XF_BACKEND=cpu "$bin" --model "$model" --batch 64 --steps "$steps" --threads 1 >>"$out"
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {m: [r for r in rows if r["model"] == m] for m in ("lenet5", "lenet5-declared")}
for key in ("samples_per_s", "samples_per_cpu_s"):
    p = [r[key] for r in by["lenet5"]]
    d = [r[key] for r in by["lenet5-declared"]]
    ratios = [b / a for a, b in zip(p, d)]
    print(f"{key:18} preset {statistics.median(p):9.1f} ({min(p):.0f}-{max(p):.0f})  "
          f"declared {statistics.median(d):9.1f} ({min(d):.0f}-{max(d):.0f})  "
          f"ratio of medians {statistics.median(d) / statistics.median(p):.3f}  "
          f"median of pair ratios {statistics.median(ratios):.3f}")
losses = {m: sorted({r["final_loss"] for r in by[m]}) for m in by}
print("final loss", losses)
if losses["lenet5"] != losses["lenet5-declared"]:
    sys.exit("bench/declared.sh: the declared model ended at another loss than its preset")
PY
