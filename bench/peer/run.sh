#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# xfed against Flower (PyPI flwr, its deployment engine with TLS: SuperLink,
# SuperNodes, `flwr run`) on the same job: the shards `xfed data split` makes
# of Fashion-MNIST (Dirichlet(0.5), seed 7), the model, local training and
# rounds of SPEC (default deploy/jobs/quickstart-mlp.json: mlp 200-200, 5
# local epochs of batch 64, SGD lr 0.01 momentum 0.9, FedAvg weighted by
# records), every site each round, each round's model evaluated by every
# site on its test part. xfed runs its real daemons (xfed-coord, xfed-site,
# `xfed job submit`), Flower the app bench/peer/flower_app in PyTorch. Each
# job runs in its own network namespace; xfed and Flower alternate, REPEATS
# times, so both see the same machine. Then the same with secure
# aggregation (xfed's masking against Flower's SecAggPlusWorkflow), and how
# many sites finish one round (xfed's real site daemons beside Flower's
# SuperNodes) at each count of --scale.
#
# usage: bench/peer/run.sh [--repeats N] [--rounds R] [--secagg-rounds R]
#                          [--sites N] [--scale N,N,...] [--scale-deadline S]
#                          [--spec FILE] [--data DIR] [--build DIR] [--venv DIR]
#                          [--out FILE] [--smoke] [--keep]
#   --repeats N        interleaved runs of each comparison (default 3)
#   --rounds R         rounds of the FedAvg comparison (default 4; the spec's
#                      own 20 make every job five times as long)
#   --secagg-rounds R  rounds of the secure-aggregation comparison (default 2)
#   --sites N          sites of both comparisons (default 6, as the quickstart)
#   --scale LIST       site counts of the scale test (default 6,12,24,100; ""
#                      skips it)
#   --scale-deadline S how long one scale round may take (default 240)
#   --venv DIR         Flower's virtualenv (default build/peer-venv; made by
#                      bench/peer/venv.sh)
#   --out FILE         the JSON lines (default build/bench-peer.jsonl)
#   --smoke            a tiny run: 2 sites on shards of 1000 records, 1 round of
#                      1 epoch, 1 repeat, scale 2 on the same shards; exits 77
#                      when Flower's virtualenv cannot be made (no PyPI)
#   --keep             keep the work directory
# Needs root for `unshare -n` (each job's own network namespace).
# Prints one JSON line per job and per scale step, then the Markdown tables.
set -euo pipefail
cd "$(dirname "$0")/../.."
repeats=3 rounds=4 secagg_rounds=2 sites=6 scale=6,12,24,100 scale_deadline=240
spec=deploy/jobs/quickstart-mlp.json data=/usr/share/datasets/fashion-mnist build=build
venv= out= smoke=0 keep=0
while (($#)); do
  case "$1" in
    --repeats) repeats=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --secagg-rounds) secagg_rounds=${2:?}; shift 2 ;;
    --sites) sites=${2:?}; shift 2 ;;
    --scale) scale=${2?}; shift 2 ;;
    --scale-deadline) scale_deadline=${2:?}; shift 2 ;;
    --spec) spec=${2:?}; shift 2 ;;
    --data) data=${2:?}; shift 2 ;;
    --build) build=${2:?}; shift 2 ;;
    --venv) venv=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --smoke) smoke=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '3,39p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'; see bench/peer/run.sh --help" >&2; exit 2 ;;
  esac
done
for v in repeats rounds secagg_rounds sites scale_deadline; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --${v//_/-} must be a positive integer, not '${!v}'" >&2; exit 2; }
done
[[ $scale =~ ^([1-9][0-9]*(,[1-9][0-9]*)*)?$ ]] ||
  { echo "run.sh: --scale must be a comma-separated list of site counts, not '$scale'" >&2; exit 2; }
((smoke)) && { repeats=1 rounds=1 secagg_rounds=1 sites=2 scale=2; }
[[ -f $spec ]] || { echo "run.sh: job spec '$spec' not found" >&2; exit 2; }
((EUID == 0)) || { echo "run.sh: needs root for 'unshare -n' (each job's own network namespace)" >&2; exit 2; }
[[ -n $venv ]] || venv=$build/peer-venv
[[ -n $out ]] || out=$build/bench-peer.jsonl
here=bench/peer

if ((smoke == 0)); then
  bash deploy/install-deps.sh build run bench >/dev/null
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build "$build" -j "$(nproc)" --target xfed xfed-site xfed-coord >/dev/null
fi
build=$(cd "$build" && pwd)
for b in cli/xfed site/xfed-site coordinator/xfed-coord; do
  [[ -x $build/$b ]] || { echo "run.sh: $build/$b is not built" >&2; exit 1; }
done
if ! py=$(bash "$here/venv.sh" "$venv"); then
  if ((smoke)); then echo "SKIP: Flower's virtualenv cannot be made (see above)" >&2; exit 77; fi
  exit 1
fi
venv=$(cd "$(dirname "$py")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-peer-XXXXXX")
cleanup() { if ((keep)); then echo "run.sh: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
export XF_LOG_LEVEL=warn
collect=$here/collect.py
: >"$out"

# The shards: SITES of Fashion-MNIST as the quickstart cuts six; the smoke
# run takes 2 of 60 IID shards (1000 training records each).
if ((smoke)); then
  "$build/cli/xfed" data split --data "$data" --sites 60 --scheme iid --seed 7 --out "$work/shards" >/dev/null
else
  "$build/cli/xfed" data split --data "$data" --sites "$sites" --scheme dirichlet:0.5 --seed 7 \
    --out "$work/shards" >/dev/null
fi
manifest=$work/shards/manifest.json

# One job of each side; appends its JSON line to $out.
side() {
  local impl=$1 mode=$2 run=$3 n=$4 job=$5 config=$6 shards=${7:-$work/shards} w
  w=$work/$impl-$mode-$run-$n
  if [[ $impl == xfed ]]; then
    unshare -n bash "$here/xfed_side.sh" "$build" "$shards" "$n" "$job" "$w" >&2
  else
    unshare -n bash "$here/flower_side.sh" "$venv" "$shards" "$n" "$config" "$w" >&2
  fi
  /usr/bin/python3 "$collect" "$impl" "$w" "$shards/manifest.json" "$mode" "$run" | tee -a "$out"
}

for mode in plain secagg; do
  r=$rounds
  [[ $mode == secagg ]] && r=$secagg_rounds
  config=$(/usr/bin/python3 "$collect" job "$spec" "$r" "$sites" "$mode" "$work/job-$mode.json")
  if ((smoke)); then
    /usr/bin/python3 - "$work/job-$mode.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["local"]["epochs"] = 1
json.dump(s, open(sys.argv[1], "w"))
PY
    config=$(sed 's/epochs=[0-9]*/epochs=1/' <<<"$config")
  fi
  for ((run = 1; run <= repeats; run++)); do
    side xfed "$mode" "$run" "$sites" "$work/job-$mode.json" ""
    side flower "$mode" "$run" "$sites" "" "$config"
    echo "run.sh: $mode run $run/$repeats done" >&2
  done
done

# Scale: one round of 1 epoch on N IID shards of the training set, each side
# with a deadline. Flower's SuperNodes are started only while N times the
# memory of one Flower site measured above fits in three quarters of what
# the machine has available, so that the test never drives it out of memory.
site_kib=$(/usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(max([r["site_peak_kib"] for r in rows if r.get("impl") == "flower"] or [0]))' "$out")
IFS=, read -ra counts <<<"$scale"
for n in "${counts[@]}"; do
  shards=$work/scale-$n
  if ((smoke)); then
    shards=$work/shards
  else
    "$build/cli/xfed" data split --data "$data" --sites "$n" --scheme iid --seed 7 --out "$shards" \
      >/dev/null
  fi
  config=$(/usr/bin/python3 "$collect" job "$spec" 1 "$n" plain "$work/job-scale-$n.json")
  config=$(sed 's/epochs=[0-9]*/epochs=1/' <<<"$config")
  /usr/bin/python3 - "$work/job-scale-$n.json" "$scale_deadline" <<'PY'
import json, sys
s = json.load(open(sys.argv[1])); s["local"]["epochs"] = 1; s["round_deadline_s"] = int(sys.argv[2])
json.dump(s, open(sys.argv[1], "w"))
PY
  for impl in xfed flower; do
    w=$work/scale-$impl-$n
    avail=$(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo)
    if [[ $impl == flower ]] && ((site_kib * n > avail * 3 / 4)); then
      printf '{"kind": "scale", "impl": "flower", "sites": %d, "finished": 0, "done": false, "round_s": null, "total_peak_kib": 0, "not_started": "%d SuperNodes at %d MiB each (measured above) need more than 3/4 of the %d MiB available"}\n' \
        "$n" "$n" "$((site_kib / 1024))" "$((avail / 1024))" | tee -a "$out"
      continue
    fi
    set +e
    if [[ $impl == xfed ]]; then
      unshare -n bash "$here/xfed_side.sh" "$build" "$shards" "$n" "$work/job-scale-$n.json" "$w" \
        "$scale_deadline" >&2
    else
      unshare -n bash "$here/flower_side.sh" "$venv" "$shards" "$n" "$config" "$w" \
        "$scale_deadline" >&2
    fi
    set -e
    /usr/bin/python3 "$collect" scale "$impl" "$w" "$n" | tee -a "$out"
  done
done

echo
echo "machine: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) CPUs), $(date -u +%Y-%m-%d)"
echo "flwr $("$venv/bin/python" -c 'import flwr; print(flwr.__version__)'), torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)'), spec $spec"
/usr/bin/python3 "$collect" table "$out"
