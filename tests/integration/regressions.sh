#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Regressions of the mixed federation, each on a federation of its own with
# the real daemons on loopback and real certificates: a global coordinator in
# us, regional aggregators with sites behind them, sites dialling the
# coordinator directly, a residency policy imported by a compliance user.
#   min_sites_counts_sites: four sites behind two aggregators and a job with
#            min_sites 3: check allows it, it runs to done, and every count
#            the researcher sees is of sites (4), not of aggregators (2).
#   refusal_behind_aggregator_reaches_coordinator: a site behind an aggregator
#            refuses under its own local policy; the refusal, in its words and
#            naming it, is in the coordinator's audit trail and in what
#            `xfed job status` says; the job completes with the others.
#   secagg_over_mixed_cohort: secure aggregation over direct sites and a
#            region routed through its aggregator: check and submission agree
#            and the job runs to done.
#   median_weighs_regions_by_sites: the median with a region routed through
#            its aggregator: check says the regional input counts its sites,
#            and every round commits the reports of every site.
#   held_back_aggregate_spends_no_privacy: a region with min_cohort 2 where one
#            of its two sites refuses: the aggregator holds the 1-site
#            aggregate back before the other site trains, its ledger is not
#            charged, and nothing of the job leaves the region.
#   accuracy_is_of_complete_rounds: `xfed job list`, `status` and `watch`
#            show one accuracy, that of the last complete evaluation weighted
#            by examples, and count sites.
# usage: regressions.sh BUILD_DIR NAME
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
name=${2:?scenario}
data=${XF_FMNIST:-/usr/share/datasets/fashion-mnist}
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-reg-XXXXXX")
pids=()
fail() {
  echo "FAIL [$name]: $*" >&2
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
trap cleanup EXIT
case $name in
  min_sites_counts_sites | refusal_behind_aggregator_reaches_coordinator | secagg_over_mixed_cohort | \
    median_weighs_regions_by_sites | held_back_aggregate_spends_no_privacy | \
    accuracy_is_of_complete_rounds) ;;
  *) echo "unknown scenario '$name'" >&2; exit 2 ;;
esac
[[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
  fail "Fashion-MNIST is not at $data (deploy/install-deps.sh installs dataset-fashion-mnist)"
export XF_LOG_LEVEL=info
mkdir -p "$work/logs"

# ---- the federation ---------------------------------------------------------------------------------
# federation "SITE:REGION:VIA ...": VIA is "direct" (the site dials the
# coordinator) or a region whose aggregator it dials. The coordinator is in
# us; each region named as a VIA gets an aggregator agg-REGION.
fed=$work/federation
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
wait_file() {
  local i
  for ((i = 0; i < 300; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  fail "no $1"
}
sites=() aggs=()
declare -A site_region site_via behind
federation() {
  local entry s r v n i
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
  XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation regress >/dev/null
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
  echo '{"resume_grace_s": 30, "eval_timeout_s": 300}' >"$work/coord.json"
  # shellcheck disable=SC2046
  "$coord_bin" $(tls coord) --region us --state "$work/coord" --listen 127.0.0.1:0 \
    --port-file "$work/coord.port" --config "$work/coord.json" 2>>"$work/logs/coord.log" &
  pids+=($!)
  wait_file "$work/coord.port"
  port=$(cat "$work/coord.port")
  declare -A dial
  for r in "${aggs[@]}"; do
    # shellcheck disable=SC2046
    "$coord_bin" --role regional --region "$r" --upstream "127.0.0.1:$port" $(tls "agg-$r") \
      --state "$work/agg-$r" --listen 127.0.0.1:0 --port-file "$work/agg-$r.port" \
      2>>"$work/logs/agg-$r.log" &
    pids+=($!)
    wait_file "$work/agg-$r.port"
    dial[$r]=$(cat "$work/agg-$r.port")
  done
  n=0
  for s in "${sites[@]}"; do
    n=$((n + 1))
    v=${site_via[$s]}
    local to=$port
    [[ $v != direct ]] && to=${dial[$v]}
    # shellcheck disable=SC2046
    XF_LOG_LEVEL=warn "$site_bin" init --dir "$work/sites/$s" --name "$s" --region "${site_region[$s]}" \
      --coordinator "127.0.0.1:$to" $(tls "$s") --threads 1 --backend cpu >/dev/null
    XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/sites/$s" --name fmnist \
      --path "$work/shards/site-$n" --tag fmnist >/dev/null
    "$site_bin" run --dir "$work/sites/$s" 2>>"$work/logs/$s.log" &
    pids+=($!)
  done
  # Up: every direct site announced to the coordinator, every aggregator
  # announced with all of its sites behind it.
  local up
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
# shellcheck disable=SC2046
cli() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls rita); }
# shellcheck disable=SC2046
comp() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls cora); }
json_field() { sed -n "s/.*\"$1\": *\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" | head -n 1; }
job_field() { cli job status "$1" --json | json_field "$2"; }

# policy RULES_JSON: the federation's policy (every site, its fmnist dataset)
# with these rules, imported by the compliance user.
policy() {
  local s sl="" dl="" sep=""
  for s in "${sites[@]}"; do
    sl+="$sep{\"name\": \"$s\", \"region\": \"${site_region[$s]}\"}"
    dl+="$sep{\"name\": \"fmnist\", \"site\": \"$s\", \"classification\": \"internal\", \"tags\": [\"fmnist\"]}"
    sep=", "
  done
  cat >"$work/policy.json" <<JSON
{"regions": [{"name": "ap", "jurisdiction": "APAC"}, {"name": "eu", "jurisdiction": "EU GDPR"},
             {"name": "us", "jurisdiction": "US"}],
 "sites": [$sl], "datasets": [$dl], "rules": [$1]}
JSON
  comp policy import "$work/policy.json" --reason "the regression's policy" >/dev/null ||
    fail "the policy was not imported"
}
# local_deny SITE: the site's operator keeps its data at home (a local policy
# with a named deny for each kind of artifact).
local_deny() {
  local s=$1 r=${site_region[$1]}
  cat >"$work/local-$s.json" <<JSON
{"regions": [{"name": "ap"}, {"name": "eu"}, {"name": "us"}], "sites": [{"name": "$s", "region": "$r"}],
 "datasets": [{"name": "fmnist", "site": "$s", "classification": "internal", "tags": ["fmnist"]}],
 "rules": [{"id": "$s-no-updates", "effect": "deny", "kind": "update", "destinations": ["*"]},
           {"id": "$s-stays-home", "effect": "deny", "kind": "regional_aggregate", "destinations": ["*"]}]}
JSON
  XF_LOG_LEVEL=warn "$site_bin" policy import --dir "$work/sites/$s" "$work/local-$s.json" \
    --reason "$s keeps its data home" >/dev/null || fail "$s could not import its local policy"
}
# job FILE NAME MIN_SITES SEED [MEMBERS]: a short deterministic job.
job() {
  cat >"$1" <<JSON
{"name": "$2", "model": {"arch": "mlp", "hidden": [64]},
 "data": {"dataset": "fmnist", "tags": ["fmnist"]}, "rounds": 2, "min_sites": $3,
 "round_deadline_s": 600, "local": {"epochs": 1, "batch_size": 32, "lr": 0.05},
 "seed": $4${5:+, $5}}
JSON
}
# submit FILE: check, then submission; both must allow it. Prints the job id.
submit() {
  cli policy check "$1" >"$1.check" 2>&1 || fail "check refuses $1: $(cat "$1.check")"
  cli job submit "$1" --json >"$1.submit" 2>&1 ||
    fail "submission refused what check allowed: $(cat "$1.submit")"
  local id
  id=$(json_field job_id <"$1.submit")
  [[ -n $id ]] || fail "no job id in $(cat "$1.submit")"
  echo "$id"
}
wait_done() { # wait_done JOB
  local i st=
  for ((i = 0; i < 3000; i++)); do
    st=$(job_field "$1" state 2>/dev/null || true)
    [[ $st == done ]] && return 0
    [[ $st == failed || $st == cancelled ]] && break
    sleep 0.2
  done
  fail "job $1 is '$st', not done: $(cli job status "$1" 2>&1)"
}
# committed_reports JOB: the reports= of each of the job's round_committed lines.
committed_reports() {
  grep "event=round_committed job=$1 " "$work/logs/coord.log" | sed -n 's/.* reports=\([0-9]*\).*/\1/p'
}

case $name in
min_sites_counts_sites)
  federation e1:eu:eu e2:eu:eu p1:ap:ap p2:ap:ap
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}},
          {"id": "ap-out", "effect": "allow", "kind": "update", "select": {"region": "ap"}, "destinations": ["us"]}'
  job "$work/job.json" min-sites 3 41
  id=$(submit "$work/job.json")
  grep -q 'verdict: runs: 4 sites eligible' "$work/job.json.check" ||
    fail "check does not count the 4 sites: $(cat "$work/job.json.check")"
  wait_done "$id"
  cli job status "$id" >"$work/status.txt"
  grep -q 'over its 4 evaluating sites' "$work/status.txt" ||
    fail "job status does not count 4 sites: $(cat "$work/status.txt")"
  [[ $(job_field "$id" eval_sites) == 4 ]] || fail "eval_sites is $(job_field "$id" eval_sites), not 4"
  reports=$(committed_reports "$id" | tr '\n' ' ')
  [[ $reports == "4 4 " ]] || fail "the rounds committed reports '$reports', not 4 sites each"
  echo "$name: job $id done with min_sites 3 over 4 sites behind 2 aggregators; rounds of $reports sites"
  ;;
*) fail "scenario $name is not written yet" ;;
esac

# Every trail verifies; every daemon stops on SIGTERM; no sanitizer report.
comp audit verify >"$work/audit.out" || fail "the coordinator's audit trail: $(cat "$work/audit.out")"
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
pids=()
for r in "${aggs[@]}"; do
  XF_LOG_LEVEL=warn "$xfed" audit verify --db "$work/agg-$r/audit.db" >"$work/audit.out" ||
    fail "agg-$r's audit trail: $(cat "$work/audit.out")"
done
for s in "${sites[@]}"; do
  XF_LOG_LEVEL=warn "$site_bin" audit verify --dir "$work/sites/$s" >"$work/audit.out" ||
    fail "site $s's audit trail: $(cat "$work/audit.out")"
done
if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$work"/logs/*.log; then
  fail "a daemon printed a sanitizer report"
fi
