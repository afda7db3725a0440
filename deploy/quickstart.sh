#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, end to end on this machine: installs what is missing, builds
# xfed, makes a federation in a local folder (CA and identities, a global
# coordinator in region us, three regional aggregators, two sites per region),
# pushes the federation's residency policy (deploy/policy/quickstart.json: the
# EU's updates may leave only as a securely aggregated, differentially private
# aggregate of at least 2 EU sites), splits Fashion-MNIST among the six sites
# with Dirichlet(0.5) label skew, starts every daemon on loopback, shows the
# policy's plan for the job, submits it, shows its progress, verifies every
# audit trail, draws the job's training curves ('xfed job report') and stops
# everything it started. Ends with one line:
#   final accuracy=A rounds=R epsilon=E uplink_bytes=B
#
# usage: deploy/quickstart.sh [--spec FILE] [--data DIR] [--split SCHEME]
#                             [--dir DIR] [--keep] [--report FILE] [--export FILE]
#   --spec FILE   job spec (default deploy/jobs/quickstart.json: DP-SGD at every
#                 site, epsilon <= 3 per dataset at delta 1e-5, secure aggregation;
#                 copy and edit it). Each site registers the data under the
#                 spec's data.dataset name and data.tags
#   --dp          the default job (kept for older instructions)
#   --data DIR    dataset directory (default /usr/share/datasets/fashion-mnist;
#                 any directory 'xfed data split' reads, e.g. the tabular example
#                 made by deploy/data/make-credit.py)
#   --split SCHEME how the data is cut among the six sites (default dirichlet:0.5;
#                 iid, dirichlet:ALPHA or classes:K as 'xfed data split --scheme')
#   --dir DIR     where the federation lives (default ./quickstart; made afresh)
#   --keep        leave the federation's folder (logs, journal, audit trails)
#   --build DIR   CMake build directory (default ./build)
#   --report FILE the job's curves as PNG, SVG or PDF by FILE's extension
#                 (default ./quickstart-report.png)
#   --export FILE also write the final model, as 'xfed job export --out FILE'
#                 (ONNX, .npz, .npy or an xfed model file by FILE's extension)
# Environment: XF_BACKEND=auto|cpu|cuda.
set -euo pipefail
cd "$(dirname "$0")/.."

spec=deploy/jobs/quickstart.json
policy=deploy/policy/quickstart.json
data=/usr/share/datasets/fashion-mnist
dir=quickstart
keep=0
build=build
report=quickstart-report.png
split=dirichlet:0.5
export_to=
while (($#)); do
  case "$1" in
    --spec) spec=${2:?--spec needs a file}; shift 2 ;;
    --dp) spec=deploy/jobs/quickstart.json; shift ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --report) report=${2:?--report needs a file}; shift 2 ;;
    --split) split=${2:?--split needs a scheme}; shift 2 ;;
    --export) export_to=${2:?--export needs a file}; shift 2 ;;
    -h|--help) sed -n '3,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart.sh: unknown option '$1'; see deploy/quickstart.sh --help" >&2; exit 2 ;;
  esac
done
[[ -f "$spec" ]] || { echo "quickstart.sh: job spec '$spec' not found" >&2; exit 2; }
spec=$(cd "$(dirname "$spec")" && pwd)/$(basename "$spec")
if [[ -n "$export_to" ]]; then
  mkdir -p "$(dirname "$export_to")"
  export_to=$(cd "$(dirname "$export_to")" && pwd)/$(basename "$export_to")
fi

echo "==> dependencies"
# What building xfed and this script take (deploy/deps.list): nothing of the
# test suite's browser, Prometheus, podman or PyTorch.
bash deploy/install-deps.sh build run
# The sites register the data under the name and tags the job selects.
# shellcheck disable=SC2207
selector=($(python3 -c '
import json, sys
try:
    d = json.load(open(sys.argv[1]))["data"]
    print(d["dataset"], *d.get("tags", []))
except (OSError, ValueError, KeyError, TypeError) as e:
    sys.exit("quickstart.sh: %s: no data.dataset to register the data under (%s)" % (sys.argv[1], e))
' "$spec"))
dataset=${selector[0]}
tag_args=()
for t in "${selector[@]:1}"; do tag_args+=(--tag "$t"); done
echo "==> build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-configure.log 2>&1 ||
  { cat build-configure.log; exit 1; }
cmake --build "$build" -j "$(nproc)" --target xfed xfed-site xfed-coord
build=$(cd "$build" && pwd)
xfed=$build/cli/xfed
site_bin=$build/site/xfed-site
coord_bin=$build/coordinator/xfed-coord

rm -rf "$dir"
mkdir -p "$dir/logs"
dir=$(cd "$dir" && pwd)
fed=$dir/federation
pids=()
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_all
  if ((keep == 0)) && [[ -n "${dir:-}" ]]; then rm -rf "$dir"; fi
}
trap cleanup EXIT
trap 'echo "quickstart.sh: interrupted" >&2; exit 130' INT TERM

# Waits for a daemon's port file; prints the port.
wait_port() {
  local file=$1 pid=$2 log=$3 i
  for ((i = 0; i < 200; i++)); do
    if [[ -s "$file" ]]; then cat "$file"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "quickstart.sh: a daemon exited early; its log:" >&2; tail -n 20 "$log" >&2; return 1
    fi
    sleep 0.1
  done
  echo "quickstart.sh: no port from $log" >&2; return 1
}

echo "==> federation in $dir"
regions=(eu us ap)
"$xfed" pki init --dir "$fed" --federation quickstart >/dev/null
"$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
"$xfed" pki issue --dir "$fed" --kind user --name researcher --role researcher >/dev/null
"$xfed" pki issue --dir "$fed" --kind user --name compliance --role compliance >/dev/null
for r in "${regions[@]}"; do
  "$xfed" pki issue --dir "$fed" --kind coordinator --name "agg-$r" --region "$r" >/dev/null
  for i in 1 2; do
    "$xfed" pki issue --dir "$fed" --kind site --name "$r-$i" --region "$r" >/dev/null
  done
done
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }

echo "==> split $data among 6 sites ($split)"
"$xfed" data split --data "$data" --sites 6 --scheme "$split" --seed 7 --out "$dir/shards" \
  >/dev/null

echo "==> start the coordinator and the regional aggregators"
# Daemons log at info into $dir/logs; the CLI in front of the user only warns.
daemon_log=${XF_LOG_LEVEL:-info}
export XF_LOG_LEVEL=warn
# shellcheck disable=SC2046
XF_LOG_LEVEL=$daemon_log "$coord_bin" $(tls coord) --region us --state "$dir/coord" --listen 127.0.0.1:0 \
  --port-file "$dir/coord.port" 2>"$dir/logs/coord.log" &
pids+=($!)
coord_port=$(wait_port "$dir/coord.port" "${pids[-1]}" "$dir/logs/coord.log")
declare -A agg_port
for r in "${regions[@]}"; do
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=$daemon_log "$coord_bin" --role regional --region "$r" --upstream "127.0.0.1:$coord_port" $(tls "agg-$r") \
    --state "$dir/agg-$r" --listen 127.0.0.1:0 --port-file "$dir/agg-$r.port" \
    2>"$dir/logs/agg-$r.log" &
  pids+=($!)
  agg_port[$r]=$(wait_port "$dir/agg-$r.port" "${pids[-1]}" "$dir/logs/agg-$r.log")
done
echo "    coordinator 127.0.0.1:$coord_port; aggregators eu:${agg_port[eu]} us:${agg_port[us]} ap:${agg_port[ap]}"

echo "==> start six sites"
mkdir -p "$dir/sites"
n=0
for r in "${regions[@]}"; do
  for i in 1 2; do
    n=$((n + 1))
    s=$r-$i
    # shellcheck disable=SC2046
    "$site_bin" init --dir "$dir/sites/$s" --name "$s" --region "$r" \
      --coordinator "127.0.0.1:${agg_port[$r]}" $(tls "$s") --threads 1 >/dev/null
    "$site_bin" dataset add --dir "$dir/sites/$s" --name "$dataset" --path "$dir/shards/site-$n" \
      "${tag_args[@]}" >/dev/null
    XF_LOG_LEVEL=$daemon_log "$site_bin" run --dir "$dir/sites/$s" 2>"$dir/logs/$s.log" &
    pids+=($!)
  done
done

# The CLI finds the coordinator and the researcher's identity here.
export XFED_COORDINATOR=127.0.0.1:$coord_port XFED_CERT=$fed/issued/researcher.crt \
  XFED_KEY=$fed/issued/researcher.key XFED_CA=$fed/ca.crt XFED_CRL=$fed/crl.pem
# The compliance team's identity, for the policy and the audit trail.
as_compliance() {
  XF_LOG_LEVEL=warn XFED_CERT=$fed/issued/compliance.crt XFED_KEY=$fed/issued/compliance.key \
    "$xfed" "$@"
}

echo "==> the compliance team pushes the residency policy ($(basename "$policy"))"
as_compliance policy import "$policy" --reason "quickstart federation: EU data leaves only as a \
secure, private aggregate of >= 2 EU sites"

echo "==> wait for the sites to announce themselves"
for ((i = 0; i < 100; i++)); do
  k=$(cat "$dir"/logs/agg-*.log | grep -c 'event=site_announced' || true)
  ((k >= 6)) && break
  sleep 0.2
done

echo "==> the policy's plan for $(basename "$spec")"
set +e
XF_LOG_LEVEL=warn "$xfed" policy check "$spec"
check=$?
set -e
if ((check != 0)); then
  echo "quickstart.sh: the residency policy does not allow $(basename "$spec") as written" \
    "(exit $check); see the suggestions above" >&2
  exit "$check"
fi

echo "==> submit $(basename "$spec") and follow it"
out=$dir/job.out
set +e
XF_LOG_LEVEL=warn "$xfed" job submit "$spec" --wait | tee "$out"
status=${PIPESTATUS[0]}
set -e
if ((status != 0)); then
  stop_all
  echo "quickstart.sh: the job did not finish; logs are in $dir/logs" >&2
  keep=1
  exit "$status"
fi
tail -n 1 "$out" | grep '^final accuracy=' >/dev/null ||
  { stop_all; echo "quickstart.sh: no final line from the job" >&2; exit 1; }
job_id=$(head -n 1 "$out")

echo "==> training curves"
# A build configured with -DXF_REPORT=OFF (the GPU kit's) has no `job report`.
drawn=0
features=$("$xfed" version | sed -n 's/^features:\([^;]*\).*/\1/p')
if [[ " $features " == *" report "* ]]; then
  XF_LOG_LEVEL=warn "$xfed" job report "$job_id" --out "$report" | sed 's/^/    /'
  drawn=1
else
  echo "    not drawn: this xfed was built with XF_REPORT=OFF ('xfed job metrics $job_id' has the figures)"
fi

if [[ -n "$export_to" ]]; then
  echo "==> the final model"
  XF_LOG_LEVEL=warn "$xfed" job export "$job_id" --out "$export_to" | sed 's/^/    /'
fi

echo "==> audit trails"
crossings=$(as_compliance audit export | grep -c '"kind": *"crossing"' || true)
printf '    %-14s ' coordinator
as_compliance audit verify | head -n 1
echo "    (of which $crossings artifacts crossed into us)"
stop_all
for r in "${regions[@]}"; do
  printf '    %-14s ' "agg-$r"
  "$xfed" audit verify --db "$dir/agg-$r/audit.db" | head -n 1
done
for r in "${regions[@]}"; do
  for i in 1 2; do
    printf '    %-14s ' "$r-$i"
    "$site_bin" audit verify --dir "$dir/sites/$r-$i" | head -n 1
  done
done
if ((drawn)); then
  echo "    curves: $(cd "$(dirname "$report")" && pwd)/$(basename "$report")"
fi
# The job's own last line is the final line of the run.
tail -n 1 "$out"
