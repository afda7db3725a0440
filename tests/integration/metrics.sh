#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prometheus against a running federation: the quickstart's shape made
# smaller (a global coordinator in us, regional aggregators for eu and us
# with two sites each, the quickstart's residency policy and job at 3
# rounds), every daemon with --metrics. Debian's real prometheus scrapes
# them every second into a TSDB under the run's directory; once the job is
# done and a scrape of every daemon after its end is stored, the series read back through
# Prometheus's HTTP API (/api/v1/query) must equal what `xfed job metrics`
# says: rounds completed, bytes up and down, epsilon. `promtool check
# metrics` passes on every daemon's /metrics; /healthz answers 200; and
# with XF_LOG_FORMAT=json a daemon's every log line parses as JSON.
# usage: metrics.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
label=metrics
fed_name=metr
metrics=1
command -v prometheus >/dev/null && command -v promtool >/dev/null ||
  { echo "FAIL: prometheus and promtool are missing (deploy/install-deps.sh test installs them)" >&2; exit 1; }
setup_work xf-metrics
federation eu-1:eu:eu eu-2:eu:eu us-1:us:us us-2:us:us
comp policy import "$src/deploy/policy/quickstart.json" --reason "the quickstart's policy" >/dev/null

daemons=(coord agg-eu agg-us eu-1 eu-2 us-1 us-2)
declare -A mport
for d in "${daemons[@]}"; do
  wait_file "$work/$d.mport"
  mport[$d]=$(cat "$work/$d.mport")
done
get() { curl -sS --max-time 10 "$@"; }

# Every daemon's exposition is valid, before and (below) after the job.
check_expositions() {
  local d
  for d in "${daemons[@]}"; do
    get "http://127.0.0.1:${mport[$d]}/metrics" >"$work/$d.prom" || fail "no /metrics from $d"
    promtool check metrics <"$work/$d.prom" >"$work/promtool.out" 2>&1 ||
      fail "promtool check metrics on $d's /metrics: $(cat "$work/promtool.out")"
    grep -q '^process_resident_memory_bytes [1-9]' "$work/$d.prom" || fail "$d reports no resident memory"
    grep -q '^xfed_build_info{' "$work/$d.prom" || fail "$d reports no build info"
  done
}
check_expositions
for d in "${daemons[@]}"; do
  code=$(curl -s -o "$work/health.out" -w '%{http_code}' "http://127.0.0.1:${mport[$d]}/healthz")
  [[ $code == 200 ]] || fail "$d's /healthz answers $code: $(cat "$work/health.out")"
  python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["status"] == "ok"' "$work/health.out" ||
    fail "$d's /healthz body: $(cat "$work/health.out")"
done
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${mport[coord]}/nothing")
[[ $code == 404 ]] || fail "an unknown path answers $code, not 404"

# Prometheus on a free port, scraping every daemon each second.
prom_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
{
  echo "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}"
  echo "scrape_configs:"
  echo "  - job_name: xfed"
  echo "    static_configs:"
  for d in "${daemons[@]}"; do
    echo "      - targets: ['127.0.0.1:${mport[$d]}']"
    echo "        labels: {daemon: '$d'}"
  done
} >"$work/prometheus.yml"
promtool check config "$work/prometheus.yml" >"$work/promtool.out" 2>&1 ||
  fail "promtool check config: $(cat "$work/promtool.out")"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" 2>>"$work/logs/prometheus.log" &
pids+=($!)
query() { # query PROMQL: the result vector's JSON
  curl -sS --max-time 10 "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode "query=$1"
}
for ((i = 0; i < 300; i++)); do
  [[ $(query 'up{daemon="coord"}' 2>/dev/null | python3 -c 'import json,sys
r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")' 2>/dev/null) == 1 ]] && break
  sleep 0.2
done
((i < 300)) || fail "prometheus did not scrape the coordinator"

python3 - "$src/deploy/jobs/quickstart.json" "$work/job.json" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
spec["name"] = "metrics"
spec["rounds"] = 3
json.dump(spec, open(sys.argv[2], "w"))
PY
job=$(cli job submit "$work/job.json" --json | json_field job_id)
[[ -n $job ]] || fail "the job was not submitted"
wait_done "$job" 600
t_done=$(date +%s.%N)
cli job metrics "$job" --json >"$work/metrics.json" || fail "xfed job metrics $job"

# Poll until Prometheus holds samples of the coordinator's and every site's
# series taken after the job's end (a failed scrape leaves an older sample),
# then read the series back and compare.
for ((i = 0; i < 600; i++)); do
  ts=$(query "min(timestamp(xfed_dataset_epsilon{job_id=\"$job\"}) or timestamp(xfed_job_rounds_completed_total{job_id=\"$job\",daemon=\"coord\"}))" |
    python3 -c 'import json,sys
r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else 0)' 2>/dev/null || echo 0)
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' "$ts" "$t_done" && break
  sleep 0.2
done
((i < 600)) || fail "no scrape of every daemon after the job's end reached prometheus"
for q in "xfed_job_rounds_completed_total{job_id=\"$job\"}" "xfed_job_bytes_total{job_id=\"$job\"}" \
  "xfed_job_epsilon{job_id=\"$job\"}" "xfed_dataset_epsilon{job_id=\"$job\"}" \
  "xfed_round_duration_seconds_count{daemon=\"coord\"}" "xfed_network_bytes_total{daemon=\"coord\"}" \
  "xfed_peers_connected{daemon=\"coord\"}" "xfed_updates_received_total"; do
  query "$q" >"$work/q-$(echo "$q" | tr -c 'a-z' _).json"
done
python3 - "$work" "$job" <<'PY' || fail "the series in prometheus do not match xfed job metrics"
import glob, json, math, sys
work, job = sys.argv[1], sys.argv[2]
rows = json.load(open(f"{work}/metrics.json"))["rows"]
spec = json.load(open(f"{work}/job.json"))
def result(prefix):
    (path,) = glob.glob(f"{work}/q-{prefix}*.json")
    r = json.load(open(path))
    assert r["status"] == "success", r
    return r["data"]["result"]
def one(prefix, **labels):
    hits = [float(s["value"][1]) for s in result(prefix)
            if all(s["metric"].get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, (prefix, labels, result(prefix))
    return hits[0]
ok = True
def same(what, got, want):
    global ok
    good = math.isclose(got, want, rel_tol=1e-12, abs_tol=0)
    print(f"{what}: prometheus {got!r}, xfed job metrics {want!r}{'' if good else '  MISMATCH'}")
    ok = ok and good
# A round trained and committed is one whose rows carry an update's bytes.
trained = {r["round"] for r in rows if r["bytes_up"] > 0}
same("rounds completed", one("xfed_job_rounds_completed_total", daemon="coord"), len(trained))
same("rounds completed = spec rounds", len(trained), spec["rounds"])
same("bytes up", one("xfed_job_bytes_total", daemon="coord", direction="up"),
     sum(r["bytes_up"] for r in rows))
same("bytes down", one("xfed_job_bytes_total", daemon="coord", direction="down"),
     sum(r["bytes_down"] for r in rows))
last = max(r["round"] for r in rows)
eps = max(r["epsilon"] for r in rows if r["round"] == last and r.get("epsilon") is not None)
same("epsilon", one("xfed_job_epsilon", daemon="coord"), eps)
# Each site's ledger: its dataset's spend, as its own row of the job says.
for r in rows:
    if r["round"] != last or r.get("epsilon") is None:
        continue
    same(f"epsilon at {r['site']}", one("xfed_dataset_epsilon", daemon=r["site"], dataset="fmnist"),
         r["epsilon"])
assert one("xfed_round_duration_seconds_count", daemon="coord") >= spec["rounds"]
# The coordinator sends each region one model; its aggregator fans it out.
assert one("xfed_network_bytes_total", daemon="coord", direction="sent", kind="regional") > 0
assert one("xfed_network_bytes_total", daemon="coord", direction="received", kind="regional") > 0
assert one("xfed_peers_connected", daemon="coord", kind="regional") == 2
assert sum(float(s["value"][1]) for s in result("xfed_updates_received_total")) > 0
sys.exit(0 if ok else 1)
PY
check_expositions

# XF_LOG_FORMAT=json: a second coordinator's every line is one JSON object.
# shellcheck disable=SC2046
XF_LOG_FORMAT=json "$coord_bin" $(tls coord) --residency-policy off --state "$work/coord-json" \
  --listen 127.0.0.1:0 --port-file "$work/coord-json.port" --metrics 0 \
  --metrics-port-file "$work/coord-json.mport" 2>"$work/logs/coord-json.log" &
json_pid=$!
pids+=("$json_pid")
wait_file "$work/coord-json.mport"
get "http://127.0.0.1:$(cat "$work/coord-json.mport")/healthz" >/dev/null || fail "no /healthz on the json coordinator"
kill -TERM "$json_pid"
wait "$json_pid" || fail "the json coordinator did not stop cleanly"
python3 - "$work/logs/coord-json.log" <<'PY' || fail "a json log line does not parse: $(head -n 3 "$work/logs/coord-json.log")"
import json, sys
lines = open(sys.argv[1], encoding="utf-8").read().splitlines()
assert len(lines) >= 4, lines
for line in lines:
    o = json.loads(line)
    assert isinstance(o, dict) and {"ts", "level", "event"} <= o.keys(), line
events = {json.loads(l)["event"] for l in lines}
assert "coordinator_started" in events and "metrics_listening" in events, events
started = next(json.loads(l) for l in lines if json.loads(l)["event"] == "coordinator_started")
assert isinstance(started["port"], int), started
PY
set +e
XF_LOG_FORMAT=xml "$coord_bin" --help >/dev/null 2>"$work/bad-format.out"
st=$?
set -e
((st == 2)) && grep -q 'kv' "$work/bad-format.out" && grep -q 'json' "$work/bad-format.out" ||
  fail "XF_LOG_FORMAT=xml is not refused naming kv and json (exit $st): $(cat "$work/bad-format.out")"

finish
echo "metrics: prometheus read back the job's rounds, bytes and epsilon as xfed job metrics shows them"
