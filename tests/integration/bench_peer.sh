#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Smoke run of bench/peer/run.sh (xfed against Flower) at its tiny size: both
# sides really run — xfed's daemons and Flower's SuperLink, SuperNodes and
# `flwr run` — for FedAvg, for secure aggregation and for one scale step, and
# every JSON line the tables are made from must be there and complete.
# Skipped (77) where Flower's virtualenv cannot be made (no PyPI) or the test
# is not root (each job runs in its own network namespace).
#   usage: bench_peer.sh SRC BUILD
set -euo pipefail
src=$1 build=$2
if ((EUID != 0)); then
  echo "SKIP: bench/peer/run.sh needs root for 'unshare -n'" >&2
  exit 77
fi
out=$(mktemp "${TMPDIR:-/tmp}/xf-bench-peer-XXXXXX.jsonl")
trap 'rm -f "$out"' EXIT
set +e
bash "$src/bench/peer/run.sh" --smoke --build "$build" --venv "$build/peer-venv" --out "$out"
rc=$?
set -e
((rc == 77)) && exit 77
((rc == 0)) || { echo "FAIL: bench/peer/run.sh --smoke exited $rc" >&2; exit 1; }
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def fail(msg):
    sys.exit(f"FAIL: {msg}")
for impl in ("xfed", "flower"):
    for mode in ("plain", "secagg"):
        job = [r for r in rows if r.get("impl") == impl and r.get("mode") == mode]
        if len(job) != 1:
            fail(f"{len(job)} {impl} {mode} jobs in the output, not 1")
        r = job[0]
        if r["rounds"] != 1 or r["sites"] != 2:
            fail(f"{impl} {mode}: {r['rounds']} rounds of {r['sites']} sites, not 1 of 2")
        if not (0 < r["final_accuracy"] <= 1):
            fail(f"{impl} {mode}: final accuracy {r['final_accuracy']}")
        if not (0 < r["local_s"][0] < r["round_s"][0] <= r["job_wall_s"]):
            fail(f"{impl} {mode}: local {r['local_s']} round {r['round_s']} job {r['job_wall_s']}")
        if r["bytes_per_round"] < 2 * 4 * 199210:  # two models of mlp 200-200 at least
            fail(f"{impl} {mode}: {r['bytes_per_round']} bytes per round")
        if not (r["server_peak_kib"] > 0 and r["site_peak_kib"] > 0):
            fail(f"{impl} {mode}: peak memory {r['server_peak_kib']} {r['site_peak_kib']}")
    s = [r for r in rows if r.get("kind") == "scale" and r["impl"] == impl]
    if len(s) != 1 or not s[0]["done"] or s[0]["finished"] != 2:
        fail(f"{impl}: scale step {s}")
print("bench_peer smoke: xfed and Flower ran FedAvg, secure aggregation and scale")
PY
