# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# What the integration scripts share: a federation of the real daemons on
# loopback with real certificates, the researcher's and the compliance user's
# CLI, waiting for jobs, and the end of a run (trails verified, daemons
# stopped on SIGTERM, no sanitizer report). Sourced, not run.
#
# Expects, before it is sourced:
#   build         the build directory, absolute;
#   label         (optional) what a FAIL line names, e.g. the scenario.
# Sets when sourced, for the script to use or change before `federation`:
#   src           the source tree;
#   data          Fashion-MNIST ($XF_FMNIST, or where the package puts it);
#   xfed site_bin coord_bin   the binaries;
#   fed_name      the federation's name in its certificates (xfed);
#   coord_flags   the global coordinator's placement (--region us; a flat
#                 federation gives --residency-policy off);
#   coord_config  JSON for the coordinator's --config (none if empty);
#   metrics       1: every daemon serves /metrics on a port of its choosing,
#                 written to $work/NAME.mport (docs/metrics.md);
#   dataset_flags (associative, by site) more flags for that site's
#                 `xfed-site dataset add` (an external trainer: --trainer P).
# Sets as it goes:
#   work fed      (setup_work) the run's directory and its PKI;
#   pids          every daemon started, killed when the script exits;
#   sites aggs site_region site_via behind site_pid   (federation) who is
#                 where, and each site daemon's process id;
#   port coord_pid   (start_coord) the global coordinator.
# Functions: setup_work, fail, tls, wait_file, start_coord, federation, cli,
# comp, json_field, job_field, wait_end, wait_done, verify_coord_trail,
# stop_daemons, verify_local_trails, check_sanitizers, finish.

# shellcheck disable=SC2034 # src is the sourcing script's
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
data=${XF_FMNIST:-/usr/share/datasets/fashion-mnist}
# shellcheck disable=SC2154 # build is the sourcing script's
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
fed_name=xfed
coord_flags=(--region us)
coord_config=
metrics=0
work='' fed='' port='' coord_pid=''
pids=() sites=() aggs=()
declare -A site_region site_via behind site_pid dataset_flags

# setup_work PREFIX: a fresh directory for the run ($TMPDIR/PREFIX-XXXXXX),
# removed with every daemon killed when the script exits.
setup_work() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1-XXXXXX")
  fed=$work/federation
  trap cleanup EXIT
  export XF_LOG_LEVEL=info
  mkdir -p "$work/logs"
}
fail() {
  echo "FAIL${label:+ [$label]}: $*" >&2
  for f in "$work"/logs/*.log; do
    [[ -f $f ]] || continue
    echo "--- $f" >&2
    grep -v 'level=info' "$f" | tail -n 8 >&2 || true
  done
  exit 1
}
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # XF_KEEP_WORK=1 keeps the federation's directory (logs, trails) to look at.
  if [[ -n ${XF_KEEP_WORK:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
# metrics_flags NAME: the --metrics flags of daemon NAME when metrics=1.
metrics_flags() { ((metrics)) && echo --metrics 127.0.0.1:0 --metrics-port-file "$work/$1.mport"; true; }
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
wait_file() { # wait_file FILE: until it is there and not empty, within 30 s
  local i
  for ((i = 0; i < 300; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  fail "no $1"
}

# start_coord [PORT]: the global coordinator (coord_flags, coord_config) on
# PORT, or on a port of its choosing; sets port and coord_pid. Its state and
# journal stay in $work/coord, so a restart on the same port resumes.
# shellcheck disable=SC2120 # a restart names the port
start_coord() {
  local conf=()
  if [[ -n $coord_config ]]; then
    echo "$coord_config" >"$work/coord.json"
    conf=(--config "$work/coord.json")
  fi
  rm -f "$work/coord.port"
  # shellcheck disable=SC2046
  "$coord_bin" $(tls coord) "${coord_flags[@]}" --state "$work/coord" --listen "127.0.0.1:${1:-0}" \
    --port-file "$work/coord.port" $(metrics_flags coord) "${conf[@]}" 2>>"$work/logs/coord.log" &
  coord_pid=$!
  pids+=("$coord_pid")
  wait_file "$work/coord.port"
  port=$(cat "$work/coord.port")
}

# federation "SITE:REGION:VIA ...": VIA is "direct" (the site dials the
# coordinator) or a region whose aggregator it dials; each region named as a
# VIA gets an aggregator agg-REGION. Certificates for the coordinator, the
# aggregators, the sites, rita (researcher) and cora (compliance); Fashion-MNIST
# split over the sites in the order given (site-1 for the first); every daemon
# started. Returns once every direct site has announced itself to the
# coordinator and every aggregator with all of its sites behind it.
federation() {
  local entry s r v n i up
  local -A agg_port
  [[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
    fail "Fashion-MNIST is not at $data (deploy/install-deps.sh build installs dataset-fashion-mnist)"
  for entry in "$@"; do
    IFS=: read -r s r v <<<"$entry"
    sites+=("$s")
    site_region[$s]=$r
    site_via[$s]=$v
    if [[ $v != direct ]]; then
      [[ -n ${behind[$v]:-} ]] || aggs+=("$v")
      behind[$v]=$((${behind[$v]:-0} + 1))
    fi
  done
  XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation "$fed_name" >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name cora --role compliance >/dev/null
  for s in "${sites[@]}"; do
    XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind site --name "$s" --region "${site_region[$s]}" >/dev/null
  done
  for r in "${aggs[@]}"; do
    XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name "agg-$r" --region "$r" >/dev/null
  done
  XF_LOG_LEVEL=warn "$xfed" data split --data "$data" --sites "${#sites[@]}" --scheme dirichlet:0.5 --seed 7 \
    --out "$work/shards" --min-records 1000 >/dev/null
  start_coord
  for r in "${aggs[@]}"; do
    # shellcheck disable=SC2046
    "$coord_bin" --role regional --region "$r" --upstream "127.0.0.1:$port" $(tls "agg-$r") \
      --state "$work/agg-$r" --listen 127.0.0.1:0 --port-file "$work/agg-$r.port" \
      $(metrics_flags "agg-$r") 2>>"$work/logs/agg-$r.log" &
    pids+=($!)
    wait_file "$work/agg-$r.port"
    agg_port[$r]=$(cat "$work/agg-$r.port")
  done
  n=0
  for s in "${sites[@]}"; do
    n=$((n + 1))
    v=${site_via[$s]}
    local to=$port
    [[ $v != direct ]] && to=${agg_port[$v]}
    # shellcheck disable=SC2046
    XF_LOG_LEVEL=warn "$site_bin" init --dir "$work/sites/$s" --name "$s" --region "${site_region[$s]}" \
      --coordinator "127.0.0.1:$to" $(tls "$s") --threads 1 --backend cpu >/dev/null
    # shellcheck disable=SC2086 # dataset_flags holds several words
    XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/sites/$s" --name fmnist \
      --path "$work/shards/site-$n" --tag fmnist ${dataset_flags[$s]:-} >/dev/null
    # shellcheck disable=SC2046
    "$site_bin" run --dir "$work/sites/$s" $(metrics_flags "$s") 2>>"$work/logs/$s.log" &
    pids+=($!)
    site_pid[$s]=$!
  done
  for ((i = 0; i < 600; i++)); do
    up=1
    for s in "${sites[@]}"; do
      [[ ${site_via[$s]} == direct ]] || continue
      grep -q "event=site_announced site=$s " "$work/logs/coord.log" || up=0
    done
    for r in "${aggs[@]}"; do
      grep -q "event=site_announced site=agg-$r .*sites_behind=${behind[$r]}" "$work/logs/coord.log" || up=0
    done
    ((up)) && return 0
    sleep 0.2
  done
  fail "the federation did not come up"
}

# cli ARGS: xfed as rita, the researcher; comp ARGS: as cora, compliance.
# shellcheck disable=SC2046
cli() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls rita); }
# shellcheck disable=SC2046
comp() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls cora); }
json_field() { sed -n "s/.*\"$1\": *\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" | head -n 1; }
job_field() { cli job status "$1" --json | json_field "$2"; }
# wait_end JOB [SECONDS]: polls the job's state for about SECONDS (600 unless
# told) or until it is done, failed or cancelled; prints the last state seen.
wait_end() {
  local i st=''
  for ((i = 0; i < ${2:-600} * 5; i++)); do
    st=$(job_field "$1" state 2>/dev/null || true)
    [[ $st == "done" || $st == failed || $st == cancelled ]] && break
    sleep 0.2
  done
  echo "$st"
}
wait_done() { # wait_done JOB [SECONDS]: the job ends done (a job that waits forever fails here)
  local st
  st=$(wait_end "$@")
  [[ $st == "done" ]] || fail "job $1 is '$st', not done: $(cli job status "$1" 2>&1)"
}

# The end of a run. verify_coord_trail: the coordinator's audit trail
# verifies (asked of the running coordinator). stop_daemons: every daemon
# stops on SIGTERM. verify_local_trails: then each aggregator's and each
# site's trail verifies. check_sanitizers [MESSAGE]: no log holds a sanitizer
# report. finish [MESSAGE]: all four, in that order.
verify_coord_trail() {
  comp audit verify >"$work/audit.out" || fail "the coordinator's audit trail: $(cat "$work/audit.out")"
}
stop_daemons() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
verify_local_trails() {
  local r s
  for r in "${aggs[@]}"; do
    XF_LOG_LEVEL=warn "$xfed" audit verify --db "$work/agg-$r/audit.db" >"$work/audit.out" ||
      fail "agg-$r's audit trail: $(cat "$work/audit.out")"
  done
  for s in "${sites[@]}"; do
    XF_LOG_LEVEL=warn "$site_bin" audit verify --dir "$work/sites/$s" >"$work/audit.out" ||
      fail "site $s's audit trail: $(cat "$work/audit.out")"
  done
}
check_sanitizers() {
  if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work"/logs/*.log; then
    fail "${1:-a daemon printed a sanitizer report}"
  fi
}
# shellcheck disable=SC2120 # the message is optional
finish() {
  verify_coord_trail
  stop_daemons
  verify_local_trails
  check_sanitizers "$@"
}
