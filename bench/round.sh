#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Round-overhead and coordinator-memory benchmark: runs xfed-bench-round
# (bench/round_*.c) against the real xfed-coord on loopback.
#  - REPEATS runs of 8 fake sites, fedavg-cnn, 5 rounds: the median round
#    against TLS alone carrying the same bytes in the same run (target <= 1.5);
#  - one run each with 5 and 50 sites: the coordinator's peak memory (VmHWM)
#    and the ratio of the two (target <= 1.2).
# Prints the medians and ranges; the raw JSON lines go to BUILD/bench-round.jsonl.
#
# usage: bench/round.sh [REPEATS]   (default 3)
# environment: XF_BUILD_DIR (default build), XF_JOBS (make jobs, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
build=${XF_BUILD_DIR:-build}
py=/usr/bin/python3

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "${XF_JOBS:-2}" --target xfed-bench-round xfed-coord >/dev/null
bin=$build/bench/xfed-bench-round
out=$build/bench-round.jsonl
: >"$out"

# One run: its table to stderr, its JSON line (tagged with the experiment)
# to the results file.
run() {
  local tag=$1
  shift
  local text
  text=$("$bin" --coord "$build/coordinator/xfed-coord" "$@")
  grep -v '^{' <<<"$text" >&2
  grep '^{' <<<"$text" | sed "s/^{/{\"experiment\": \"$tag\", /" >>"$out"
}

for ((r = 1; r <= repeats; r++)); do
  run overhead --sites 8 --model fedavg-cnn --rounds 5
  echo "overhead run $r/$repeats done" >&2
done
for n in 5 50; do
  run memory --sites "$n" --model fedavg-cnn --rounds 5
  echo "memory run with $n sites done" >&2
done

"$py" - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
ov = [r for r in rows if r["experiment"] == "overhead"]
mem = {r["sites"]: r for r in rows if r["experiment"] == "memory"}
def stat(key, rs, scale=1.0, fmt="{:.3f}"):
    v = [r[key] * scale for r in rs]
    return fmt.format(statistics.median(v)) + " (" + fmt.format(min(v)) + "-" + fmt.format(max(v)) + ")"
r0 = ov[0]
print(f"machine: {r0['cpu']}, {r0['ncpu']} CPUs")
print(f"model {r0['model']}: {r0['params']:,} parameters, model file {r0['model_bytes']:,} B, "
      f"update {r0['update_bytes']:,} B; {r0['sites']} sites, {r0['rounds']} rounds")
print("| measure | median of runs (range) |")
print("|---|---|")
print(f"| round: first TaskOffer to last update acknowledged, s | {stat('round_median_s', ov)} |")
print(f"| of which TaskOffer to last model received, s | {stat('download_median_s', ov)} |")
print(f"| cycle: TaskOffer to next TaskOffer (adds the commit), s | {stat('cycle_median_s', ov)} |")
print(f"| TLS alone, same bytes, s | {stat('tls_median_s', ov)} |")
print(f"| ratio round / TLS alone (target <= 1.5) | {stat('ratio', ov, fmt='{:.2f}')} |")
print(f"| ratio cycle / TLS alone | "
      + "{:.2f}".format(statistics.median([r['cycle_median_s'] / r['tls_median_s'] for r in ov])) + " |")
per_round = [dict(r, c=r['coord_cpu_s'] / r['rounds'], s=r['sites_cpu_s'] / r['rounds']) for r in ov]
print(f"| coordinator CPU per round (one thread), s | {stat('c', per_round)} |")
print(f"| fake sites' CPU per round (this process), s | {stat('s', per_round)} |")
print(f"| TLS alone: CPU per repetition, server and clients, s | {stat('tls_cpu_per_rep_s', ov)} |")
print(f"| BLAKE2b on one core, GB/s | {stat('blake2b_gbps', ov, fmt='{:.2f}')} |")
loads = [r[k] for r in rows for k in ('load_start', 'load_end')]
print(f"\n({len(ov)} runs; each run's figure is the median of its {r0['rounds']} rounds, "
      f"and of {len(r0['tls_s'])} TLS repetitions; 1-minute load average "
      f"{min(loads):.2f}-{max(loads):.2f} on {r0['ncpu']} CPUs during the runs)")
if 5 in mem and 50 in mem:
    a, b = mem[5], mem[50]
    print("\n| sites | coordinator VmHWM, MiB | median round, s | TLS alone, s | ratio |")
    print("|---|---|---|---|---|")
    for r in (a, b):
        print(f"| {r['sites']} | {r['coord_vmhwm_kib'] / 1024:.1f} | {r['round_median_s']:.3f} | "
              f"{r['tls_median_s']:.3f} | {r['ratio']:.2f} |")
    print(f"\nVmHWM 50 sites / 5 sites: {b['coord_vmhwm_kib'] / a['coord_vmhwm_kib']:.2f} (target <= 1.2)")
PY
