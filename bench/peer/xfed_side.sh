#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One xfed job of bench/peer/run.sh, run inside its own network namespace
# (`unshare -n`, so the loopback counters see only this job): a federation CA,
# a global coordinator and SITES site daemons (xfed-site --threads 1) on
# loopback with mutual TLS, each site registering shard site-I of SHARDS; the
# job JOB submitted with `xfed job submit --wait`. Writes into WORK: the logs,
# metrics.csv, and side.json (the timestamps and loopback bytes that
# bench/peer/collect.py reads), while bench/peer/peak.py samples every
# process's peak memory.
#   usage: unshare -n bench/peer/xfed_side.sh BUILD SHARDS SITES JOB WORK [DEADLINE_S]
# DEADLINE_S (default 3600) bounds the sites' start and the job; a job past it
# is left unfinished and side.json says "done": false.
set -euo pipefail
build=$1 shards=$2 sites=$3 job=$4 work=$5 deadline=${6:-3600}
here=$(cd "$(dirname "$0")" && pwd)
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
ip link set lo up
mkdir -p "$work/logs"
fed=$work/federation
pids=()
peak_pid=
# Stops the daemons, then the memory sampler (which writes peak.json).
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  if [[ -n $peak_pid ]]; then kill -TERM "$peak_pid" 2>/dev/null || true; wait "$peak_pid" || true; fi
  peak_pid=
}
trap cleanup EXIT
trap 'exit 143' TERM INT
lo_bytes() { awk '$1 == "lo:" { print $2 }' /proc/net/dev; }

/usr/bin/python3 "$here/peak.py" $$ "$work/peak.json" &
peak_pid=$!
"$xfed" pki init --dir "$fed" --federation bench >/dev/null
"$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
"$xfed" pki issue --dir "$fed" --kind user --name researcher --role researcher >/dev/null
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
export XF_LOG_LEVEL=info XF_BACKEND=cpu
# shellcheck disable=SC2046
"$coord_bin" $(tls coord) --state "$work/coord" --listen 127.0.0.1:0 --port-file "$work/coord.port" \
  --residency-policy off 2>"$work/logs/coord.log" &
pids+=($!)
for ((i = 0; i < 200; i++)); do [[ -s "$work/coord.port" ]] && break; sleep 0.1; done
[[ -s "$work/coord.port" ]] || { echo "xfed_side.sh: the coordinator did not start" >&2; exit 1; }
port=$(cat "$work/coord.port")
for ((n = 1; n <= sites; n++)); do
  s=site-$n
  "$xfed" pki issue --dir "$fed" --kind site --name "$s" --region eu >/dev/null
  # shellcheck disable=SC2046
  "$site_bin" init --dir "$work/sites/$s" --name "$s" --region eu --coordinator "127.0.0.1:$port" \
    $(tls "$s") --threads 1 >/dev/null
  "$site_bin" dataset add --dir "$work/sites/$s" --name fmnist --path "$shards/site-$n" \
    --tag fmnist >/dev/null
  "$site_bin" run --dir "$work/sites/$s" 2>"$work/logs/$s.log" &
  pids+=($!)
done
export XFED_COORDINATOR=127.0.0.1:$port XFED_CERT=$fed/issued/researcher.crt \
  XFED_KEY=$fed/issued/researcher.key XFED_CA=$fed/ca.crt XFED_CRL=$fed/crl.pem
end=$(($(date +%s) + deadline))
while (($(date +%s) < end)); do
  k=$(grep -c 'event=site_announced' "$work/logs/coord.log" || true)
  ((k >= sites)) && break
  sleep 0.2
done
bytes0=$(lo_bytes)
t0=$(date +%s.%N)
done=false
if timeout $((end - $(date +%s) + 1)) env XF_LOG_LEVEL=warn "$xfed" job submit "$job" --wait \
    >"$work/job.out"; then
  done=true
else
  echo "xfed_side.sh: the job did not finish within ${deadline}s ($k of $sites sites announced)" >&2
fi
t1=$(date +%s.%N)
bytes1=$(lo_bytes)
XF_LOG_LEVEL=warn "$xfed" job metrics "$(head -n 1 "$work/job.out")" --csv >"$work/metrics.csv" || true
cleanup
printf '{"submitted": %s, "finished": %s, "lo_bytes": %s, "registered": %s, "done": %s}\n' \
  "$t0" "$t1" "$((bytes1 - bytes0))" "$k" "$done" >"$work/side.json"
