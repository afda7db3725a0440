#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Admission under load, with the real xfed-coord and the real CLI on
# loopback (docs/coordinator.md, "Connections"):
#   caps_from_config_are_checked: the per-federation caps are read from
#            --config, and a wrong one stops the start with an error naming
#            its key (out of range, above the cap that bounds it, misspelt).
#   cli_is_served_beside_500_drips_from_its_address: 500 TCP connections
#            from 127.0.0.1 drip a ClientHello a byte a second, each opened
#            again a second after the coordinator ends it; meanwhile
#            `xfed job list` as rita, from the same address, runs 5 times and
#            each must answer (exit 0, not refused, not reset) within a
#            generous 20 s. The latencies are printed, never asserted
#            (docs/BENCHMARKS.md, "Admission under load"). /metrics shows the
#            unauthenticated connections and the drops.
# The test's shell raises its soft descriptor limit (ulimit -n) to 2048 for
# the dripper and the coordinator, and skips (77) where the hard limit is
# lower. About 30 s on 2 cores.
# usage: admission.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: admission.sh BUILD_DIR}" && pwd)
label=admission
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

drips=500 calls=5 deadline_s=20
hard=$(ulimit -Hn)
if [[ $hard != unlimited ]] && ((hard < 2048)); then
  echo "SKIP: the hard descriptor limit is $hard; 500 drips and the coordinator need 2048" >&2
  exit 77
fi
ulimit -n 2048

setup_work xf-admission
XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation "$fed_name" >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name cora --role compliance >/dev/null
coord_flags=(--residency-policy off)
metrics=1

# ---- caps_from_config_are_checked -------------------------------------------------------
label=caps_from_config_are_checked
# refused CONFIG TEXT: xfed-coord with CONFIG stops at once with exit 2 and
# an error holding TEXT.
refused() {
  echo "$1" >"$work/bad.json"
  local st=0
  # shellcheck disable=SC2046
  "$coord_bin" $(tls coord) "${coord_flags[@]}" --state "$work/bad" --listen 127.0.0.1:0 \
    --config "$work/bad.json" >"$work/bad.out" 2>&1 || st=$?
  ((st != 0)) || fail "xfed-coord started with $1"
  grep -qF -- "$2" "$work/bad.out" || fail "for $1, no \"$2\" in: $(cat "$work/bad.out")"
}
refused '{"max_authenticated_connections": 0}' \
  "max_authenticated_connections: must be from 1 to 1000000 connections"
refused '{"max_unauthenticated_connections": 10, "max_unauthenticated_connections_per_address": 20}' \
  "max_unauthenticated_connections_per_address: is 20, above max_unauthenticated_connections (10)"
refused '{"max_authenticated_connection_per_address": 5}' \
  "max_authenticated_connection_per_address: unknown field; the fields are"
refused '{"max_authenticated_connection_per_address": 5}' \
  "max_unauthenticated_connections[_per_address], max_authenticated_connections[_per_address]"

coord_config='{"max_authenticated_connections_per_address": 1500}'
start_coord
wait_file "$work/coord.mport"
mport=$(cat "$work/coord.mport")
grep -q "event=connection_limits .*max_authenticated_connections_per_address=1500 " \
  "$work/logs/coord.log" || fail "the configured cap is not in the coordinator's limits: $(grep connection_limits "$work/logs/coord.log")"
cli job list >"$work/list.out" 2>&1 || fail "xfed job list before the drips: $(cat "$work/list.out")"

# ---- cli_is_served_beside_500_drips_from_its_address ------------------------------------
label=cli_is_served_beside_500_drips_from_its_address
python3 "$src/tests/integration/dripper.py" "$port" "$drips" 1 "$work/drips.ready" \
  "$work/drips.stats" 2>>"$work/logs/dripper.log" &
dripper=$!
pids+=("$dripper")
wait_file "$work/drips.ready"
# Until the coordinator holds its cap of handshakes from 127.0.0.1 and has
# begun to drop older ones for newer ones.
for ((i = 0; i < 300; i++)); do
  grep -q "event=connection_dropped" "$work/logs/coord.log" && break
  sleep 0.1
done
grep -q "event=connection_dropped" "$work/logs/coord.log" || fail "no connection was dropped under $drips drips"
latencies=()
for ((k = 1; k <= calls; k++)); do
  t0=$(date +%s%N)
  st=0
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=warn timeout "$deadline_s" "$xfed" job list --coordinator "127.0.0.1:$port" $(tls rita) \
    >"$work/list.out" 2>&1 || st=$?
  t1=$(date +%s%N)
  ms=$(((t1 - t0) / 1000000))
  ((st == 0)) || fail "xfed job list $k of $calls beside $drips drips: exit $st after $ms ms: $(cat "$work/list.out")"
  latencies+=("$ms")
  sleep 0.5
done
curl -sS --max-time 10 "http://127.0.0.1:$mport/metrics" >"$work/metrics.prom" || fail "no /metrics"
kill -TERM "$dripper"
wait "$dripper" || true
grep -q '^xfed_connections_open{state="unauthenticated"} [1-9]' "$work/metrics.prom" ||
  fail "no unauthenticated connections in /metrics: $(grep xfed_connections_open "$work/metrics.prom")"
grep -q '^xfed_connections_dropped_total{cap="max_unauthenticated_connections_per_address"} [1-9]' "$work/metrics.prom" ||
  fail "no drops in /metrics: $(grep xfed_connections_dropped "$work/metrics.prom")"
refusals=$(grep -c "event=connection_refused" "$work/logs/coord.log" || true)
((refusals == 0)) || fail "$refusals connections were refused: $(grep -m 3 connection_refused "$work/logs/coord.log")"
dropped=$(grep -c "event=connection_dropped" "$work/logs/coord.log" || true)
sorted=$(printf '%s\n' "${latencies[@]}" | sort -n | tr '\n' ' ')
median=$(printf '%s\n' "${latencies[@]}" | sort -n | sed -n "$(((calls + 1) / 2))p")
echo "admission: $calls xfed job list calls beside $drips drips from 127.0.0.1: all answered;" \
  "latencies ${sorted}ms (median $median ms); $dropped handshakes dropped;" \
  "dripper $(cat "$work/drips.stats" 2>/dev/null || echo 'gave no counts')"
label=admission
finish
