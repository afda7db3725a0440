#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Update-codec benchmark: builds xfed-bench-codec (bench/codec_bench.c, -O2 as
# RelWithDebInfo) and runs it REPEATS times. Each run measures, in the same
# process, memcpy of the float buffer and the encode (with error feedback)
# and decode throughput of q8, q4 and topk:0.01+q8 on 199,210 and 1,663,370
# values, each the best of 5 passes. Prints medians and ranges as Markdown.
#
# usage: bench/codec.sh [REPEATS]   (default 5)
# BUILD_DIR (default build) is the CMake build directory; the raw JSON lines
# go to $BUILD_DIR/bench-codec.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
build=${BUILD_DIR:-build}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target xfed-bench-codec >/dev/null
bin=$build/bench/xfed-bench-codec
out=$build/bench-codec.jsonl
: >"$out"

for ((r = 1; r <= repeats; r++)); do
  "$bin" >>"$out"
  echo "repeat $r/$repeats done" >&2
done

"$py" - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print(f"machine: {runs[0]['device']}; best of {runs[0]['passes']} passes per run; "
      f"medians of {len(runs)} runs (min–max)")
print("| n | codec | bytes (% of float32) | encode M values/s | encode MB/s | "
      "decode M values/s | decode MB/s | memcpy MB/s | encode ÷ memcpy | decode ÷ memcpy |")
print("|---|---|---|---|---|---|---|---|---|---|")
def fmt(v, d):
    return f"{statistics.median(v):.{d}f} ({min(v):.{d}f}–{max(v):.{d}f})"
for si, size in enumerate(runs[0]["results"]):
    n = size["n"]
    mc = [r["results"][si]["memcpy_vps"] for r in runs]
    for ci, c in enumerate(size["codecs"]):
        enc = [r["results"][si]["codecs"][ci]["encode_vps"] for r in runs]
        dec = [r["results"][si]["codecs"][ci]["decode_vps"] for r in runs]
        b = c["bytes"]
        print(f"| {n:,} | `{c['codec']}` | {b:,} ({100 * b / (4 * n):.2f}%) "
              f"| {fmt([v / 1e6 for v in enc], 1)} | {fmt([4 * v / 1e6 for v in enc], 0)} "
              f"| {fmt([v / 1e6 for v in dec], 1)} | {fmt([4 * v / 1e6 for v in dec], 0)} "
              f"| {statistics.median(mc) * 4 / 1e6:.0f} "
              f"| {fmt([e / m for e, m in zip(enc, mc)], 3)} "
              f"| {fmt([d / m for d, m in zip(dec, mc)], 3)} |")
PY
