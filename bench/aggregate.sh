#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Streaming-aggregation benchmark: builds xfed-bench-aggregate
# (bench/agg_bench.c, -O2 as RelWithDebInfo) and runs it REPEATS times for
# each of three cases, interleaved run by run so all see the same machine:
#   fedavg-cnn   8 updates of 1,663,370 parameters in 1 MiB chunks handed
#                over from a receive buffer, as the coordinator does;
#   from-memory  the same, with each chunk read straight from the updates
#                held in memory (every counted byte comes from DRAM);
#   10x-model    16,633,700 parameters: the exact sum (266 MB) is far beyond
#                the last-level cache.
# Each run measures the machine's memory bandwidth in the same process.
# Prints medians and ranges as a Markdown table.
#
# usage: bench/aggregate.sh [REPEATS]   (default 5)
# BUILD_DIR (default build) is the CMake build directory; the raw JSON lines
# go to $BUILD_DIR/bench-aggregate.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
build=${BUILD_DIR:-build}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target xfed-bench-aggregate >/dev/null
bin=$build/bench/xfed-bench-aggregate
out=$build/bench-aggregate.jsonl
: >"$out"

for ((r = 1; r <= repeats; r++)); do
  "$bin" | sed 's/^{/{"case": "fedavg-cnn", /' >>"$out"
  "$bin" --source updates | sed 's/^{/{"case": "from-memory", /' >>"$out"
  "$bin" --params 16633700 --rounds 3 | sed 's/^{/{"case": "10x-model", /' >>"$out"
  echo "repeat $r/$repeats done" >&2
done

"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
first = rows[0]
print(f"machine: {first['device']}, {first['cpus']} CPUs, last-level cache "
      f"{first['llc_bytes'] / 2**20:.0f} MiB; bandwidth arrays {first['stream_mib']} MiB each")
cols = [("memcpy_gbs", "memcpy GB/s", 1), ("copy_gbs", "copy loop GB/s", 1),
        ("add_gbs", "add (RMW) GB/s", 1), ("work_ms", "begin+fold+end ms", 1),
        ("update_gbs", "update GB/s", 2), ("traffic_gbs", "traffic GB/s", 1),
        ("update_vs_copy", "update ÷ copy", 3), ("traffic_vs_add", "traffic ÷ add", 2),
        ("create_ms", "create ms", 1), ("finish_ms", "finish ms", 1)]
print("| case | " + " | ".join(c[1] for c in cols) + " |")
print("|---|" + "---|" * len(cols))
for case in ("fedavg-cnn", "from-memory", "10x-model"):
    rs = [r for r in rows if r["case"] == case]
    if not rs:
        continue
    cells = []
    for key, _, digits in cols:
        v = [r[key] for r in rs]
        cells.append(f"{statistics.median(v):.{digits}f} ({min(v):.{digits}f}–{max(v):.{digits}f})")
    print(f"| {case} | " + " | ".join(cells) + " |")
r = rows[0]
print(f"\n{r['updates']} updates per round, chunks of {r['chunk']} floats; traffic counted as "
      f"{r['traffic_per_update_byte']:.0f} bytes per update byte; medians of "
      f"{len([x for x in rows if x['case'] == 'fedavg-cnn'])} runs (min–max)")
PY
