#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One Flower run of bench/peer/run.sh, inside its own network namespace
# (`unshare -n`): Flower's deployment engine with TLS — a CA and a server
# certificate for 127.0.0.1 made with openssl, `flower-superlink` with that
# certificate, SITES `flower-supernode`s trusting the CA, each with node
# config shard=SHARDS/site-I — and the app bench/peer/flower_app submitted
# with `flwr run` and the run config RUNCONFIG. Writes into WORK: the logs,
# server.json (the ServerApp's rounds), node-I.jsonl (the sites' timings) and
# side.json, while bench/peer/peak.py samples every process's peak memory.
#   usage: unshare -n bench/peer/flower_side.sh VENV SHARDS SITES RUNCONFIG WORK [DEADLINE_S]
set -euo pipefail
venv=$1 shards=$2 sites=$3 runconfig=$4 work=$5 deadline=${6:-3600}
here=$(cd "$(dirname "$0")" && pwd)
export PATH=$venv/bin:$PATH
ip link set lo up
mkdir -p "$work/logs"
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
pki=$work/pki
mkdir -p "$pki"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=superlink \
  -keyout "$pki/server.key" -out "$pki/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$pki/san.ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
  -days 2 -extfile "$pki/san.ext" -out "$pki/server.pem" 2>/dev/null
# The CLI's connection to the SuperLink (the network namespace is this
# run's own, so the fixed ports are free).
export FLWR_HOME=$work/flwr-home
mkdir -p "$FLWR_HOME"
cat >"$FLWR_HOME/config.toml" <<TOML
[superlink]
default = "bench"

[superlink.bench]
address = "127.0.0.1:9091"
root-certificates = "$pki/ca.crt"
TOML
flower-superlink --ssl-ca-certfile "$pki/ca.crt" --ssl-certfile "$pki/server.pem" \
  --ssl-keyfile "$pki/server.key" --port 9091 --disable-runtime-dependency-installation \
  >"$work/logs/superlink.log" 2>&1 &
pids+=($!)
for ((i = 0; i < 600; i++)); do
  grep -q 'Application startup complete' "$work/logs/superlink.log" && break
  kill -0 "${pids[0]}" 2>/dev/null || { echo "flower_side.sh: the SuperLink exited" >&2; tail "$work/logs/superlink.log" >&2; exit 1; }
  sleep 0.1
done
for ((n = 1; n <= sites; n++)); do
  flower-supernode --root-certificates "$pki/ca.crt" --superlink 127.0.0.1:9091 \
    --port $((20000 + n)) \
    --node-config "shard=\"$shards/site-$n\" log=\"$work/node-$n.jsonl\"" \
    >"$work/logs/supernode-$n.log" 2>&1 &
  pids+=($!)
done
# Flower's run waits until the strategy's min_available_clients (all SITES)
# have registered; the job's clock starts at the submission, as xfed's.
end=$(($(date +%s) + deadline))
while (($(date +%s) < end)); do
  k=$(cat "$work"/logs/supernode-*.log | grep -c 'SuperNode ID' || true)
  ((k >= sites)) && break
  sleep 0.2
done
bytes0=$(lo_bytes)
t0=$(date +%s.%N)
flwr run "$here/flower_app" bench --run-config "$runconfig out=\"$work/server.json\"" --format json \
  >"$work/run.json" 2>"$work/logs/flwr-run.log" ||
  { echo "flower_side.sh: flwr run failed:" >&2; cat "$work/run.json" >&2; exit 1; }
while [[ ! -s $work/server.json ]] && (($(date +%s) < end)); do sleep 0.1; done
t1=$(date +%s.%N)
bytes1=$(lo_bytes)
[[ -s $work/server.json ]] || echo "flower_side.sh: the run did not finish within ${deadline}s" >&2
cleanup
printf '{"submitted": %s, "finished": %s, "lo_bytes": %s, "registered": %s, "done": %s}\n' \
  "$t0" "$t1" "$((bytes1 - bytes0))" "$k" "$([[ -s $work/server.json ]] && echo true || echo false)" \
  >"$work/side.json"
