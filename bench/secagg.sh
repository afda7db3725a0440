#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Secure-aggregation benchmark: builds xfed-bench-secagg (bench/secagg_bench.c,
# -O2 as RelWithDebInfo) and runs it REPEATS times on N values. Each run
# measures, in the same process, the ChaCha20-IETF keystream in bytes/s, the
# site pipeline (clip, quantize, mask) for the complete graph of 10 sites and
# for 100 sites at the default degree, and the aggregator's finish() for 100
# sites with 10 dropping after sharing. Prints medians and ranges as Markdown.
#
# usage: bench/secagg.sh [REPEATS] [N]   (defaults 3 and 1000000)
# BUILD_DIR (default build) is the CMake build directory; the raw JSON lines
# go to $BUILD_DIR/bench-secagg.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
n=${2:-1000000}
build=${BUILD_DIR:-build}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target xfed-bench-secagg >/dev/null
bin=$build/bench/xfed-bench-secagg
out=$build/bench-secagg.jsonl
: >"$out"

for ((r = 1; r <= repeats; r++)); do
  "$bin" -n "$n" >>"$out"
  echo "repeat $r/$repeats done" >&2
done

"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = rows[0]
assert all(r["exact"] for r in rows), "a finish() sum was not exact"
print(f"machine: {f['device']}, {f['cpus']} CPUs; n = {f['n']} values, bits = {f['bits']}, "
      f"best of {f['passes']} passes per run; medians of {len(rows)} runs (min–max)")
cols = [("keystream_bps", "ChaCha20-IETF keystream MB/s", 1e-6, 0),
        ("pipeline10_vps", f"site pipeline, 10 sites complete ({f['streams10']:.0f} streams), M values/s", 1e-6, 2),
        ("ratio10", "… ÷ keystream needed (4 B × streams per value)", 1, 3),
        ("mask10_vps", "mask alone, 10 sites, M values/s", 1e-6, 2),
        ("pipeline100_vps", f"site pipeline, 100 sites degree {f['streams100'] - 1:.0f} ({f['streams100']:.0f} streams), M values/s", 1e-6, 2),
        ("ratio100", "… ÷ keystream needed", 1, 3),
        ("mask100_vps", "mask alone, 100 sites, M values/s", 1e-6, 2),
        ("finish_s", f"finish(), {f['agg_sites']} sites, {f['agg_dropped']} dropped, s", 1, 3),
        ("expansions", "PRG expansions in finish()", 1, 0),
        ("finish_ratio", "finish() keystream bytes/s ÷ raw keystream", 1, 3),
        ("fold_s", "folding 90 masked vectors (add_masked), s", 1, 3)]
print("| measure | median (min–max) |")
print("|---|---|")
for key, name, scale, digits in cols:
    v = [r[key] * scale for r in rows]
    print(f"| {name} | {statistics.median(v):.{digits}f} ({min(v):.{digits}f}–{max(v):.{digits}f}) |")
PY
