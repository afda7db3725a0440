#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Secure-aggregation benchmark: builds xfed-bench-secagg (bench/secagg_bench.c,
# -O2 as RelWithDebInfo) and runs it REPEATS times. Two parts:
#  - masking: on N values, the ChaCha20-IETF keystream in bytes/s, the site
#    pipeline (clip, quantize, mask) for the complete graph of 10 sites and
#    for 100 sites at the default degree, and the aggregator's finish() for
#    100 sites with 10 dropping after sharing;
#  - protocol: for each cohort size in SITES, one round against a malicious
#    aggregator (signed keys and shares, certificates checked, the
#    consistency round; bench/secagg_protocol.c) beside the semi-honest
#    round: CPU time per site and at the aggregator, bytes per site, on
#    vectors of PROTOCOL_N values.
# Prints medians and ranges as Markdown.
#
# usage: bench/secagg.sh [REPEATS] [N]   (defaults 3 and 1000000)
# Environment: BUILD_DIR (default build), the CMake build directory, where
# the raw JSON lines go ($BUILD_DIR/bench-secagg.jsonl and
# bench-secagg-protocol.jsonl); PARTS (default "masking protocol");
# SITES (default "10 50 100"); PROTOCOL_N (default 1000).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
n=${2:-1000000}
build=${BUILD_DIR:-build}
parts=${PARTS:-masking protocol}
sites=${SITES:-10 50 100}
protocol_n=${PROTOCOL_N:-1000}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j 2 --target xfed-bench-secagg >/dev/null
bin=$build/bench/xfed-bench-secagg

if [[ " $parts " == *" masking "* ]]; then
  out=$build/bench-secagg.jsonl
  : >"$out"
  for ((r = 1; r <= repeats; r++)); do
    "$bin" -n "$n" >>"$out"
    echo "masking: repeat $r/$repeats done" >&2
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
fi

if [[ " $parts " == *" protocol "* ]]; then
  out=$build/bench-secagg-protocol.jsonl
  : >"$out"
  for s in $sites; do
    for ((r = 1; r <= repeats; r++)); do
      "$bin" -s "$s" -n "$protocol_n" >>"$out"
      echo "protocol, $s sites: repeat $r/$repeats done" >&2
    done
  done
  "$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
f = rows[0]
by = {}
for r in rows:
    by.setdefault(r["sites"], []).append(r)
print(f"machine: {f['device']}, {f['cpus']} CPUs; one thread; threshold 0.66, default degree, "
      f"bits = {f['bits']}, vectors of {f['length']} values; medians of "
      f"{len(by[f['sites']])} runs (min–max)")
def cell(rs, key, digits, scale=1):
    v = [r[key] * scale for r in rs]
    return f"{statistics.median(v):.{digits}f} ({min(v):.{digits}f}–{max(v):.{digits}f})"
sizes = sorted(by)
print("| per round | " + " | ".join(f"{s} sites (t = {by[s][0]['threshold']}, degree {by[s][0]['degree']})" for s in sizes) + " |")
print("|---|" + "---|" * len(sizes))
lines = [("site CPU, semi-honest, ms (median site)", "plain_site_ms", 2),
         ("site CPU, malicious-server, ms (median site)", "guarded_site_ms", 2),
         ("site CPU, malicious-server, ms (busiest site)", "guarded_site_max_ms", 2),
         ("aggregator CPU, semi-honest, ms", "plain_server_ms", 2),
         ("aggregator CPU, malicious-server, ms", "guarded_server_ms", 2),
         ("bytes a site sends, semi-honest", "plain_up", 0),
         ("bytes a site sends, malicious-server", "guarded_up", 0),
         ("bytes a site receives, semi-honest", "plain_down", 0),
         ("bytes a site receives, malicious-server", "guarded_down", 0),
         ("signatures made per site", "signs_per_site", 1),
         ("signatures checked per site", "verifies_per_site", 1),
         ("certificates checked per site", "cert_checks_per_site", 1)]
for name, key, digits in lines:
    print(f"| {name} | " + " | ".join(cell(by[s], key, digits) for s in sizes) + " |")
allr = rows
print()
print("| one operation (site's key, P-256) | µs, median (min–max) over all runs |")
print("|---|---|")
for name, key in [("sign (ECDSA P-256, SHA-256)", "sign_us"), ("check a signature", "verify_us"),
                  ("check a certificate (chain, dates, CRL, name)", "cert_check_us")]:
    print(f"| {name} | {cell(allr, key, 1)} |")
PY
fi
