#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Residency-policy decision speed: xfed-bench-policy (bench/policy_bench.c)
# REPEATS times on a federation of 1,000 sites in 10 regions with 10,000
# rules, printing the median decisions per second and milliseconds per
# decision. The decision runs at submission and at the start of every round,
# so what matters is that it stays far below a round's time.
#
# usage: bench/policy.sh [REPEATS]   (default 5)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
build=${XF_BENCH_BUILD:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "${XF_JOBS:-2}" --target xfed-bench-policy >/dev/null
out=$build/bench-policy.jsonl
: >"$out"
for ((r = 1; r <= repeats; r++)); do
  "$build/bench/xfed-bench-policy" --sites 1000 --regions 10 --rules 10000 --seconds 3 >>"$out"
done
python3 - "$out" <<'PY' 2>/dev/null || awk -F'"decisions_per_s": ' '{split($2, a, ","); print "decisions/s", a[1]}' "$out"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
dps = sorted(r["decisions_per_s"] for r in rows)
ms = sorted(r["ms_per_decision"] for r in rows)
print(f"1000 sites, 10 regions, 10000 rules, {len(rows)} runs: "
      f"median {statistics.median(dps):.1f} decisions/s ({min(dps):.1f}-{max(dps):.1f}), "
      f"{statistics.median(ms):.3f} ms per decision; policy parse {rows[0]['parse_s']:.3f} s; "
      f"eligible sites {rows[0]['eligible_sites']}")
PY
