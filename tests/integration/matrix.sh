#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One cell of the composition matrix with the real daemons on loopback and
# real certificates (tests/test_composition.c runs every cell against the job
# machine; this runs representative ones end to end, over TLS, through the
# real site trainers):
#   topology     flat: four eu sites dialling a coordinator with no region and
#                no residency policy;
#                regional: the quickstart federation (coordinator in us,
#                aggregators for eu, us and ap with two sites each) under the
#                quickstart policy (eu leaves only as a secure aggregate of >= 2
#                sites within epsilon 3);
#   privacy      none | central | local | distributed (unit site) | record
#                (unit record, DP-SGD at the sites);
#   secagg       on | off;
#   compression  none | q8 | topk (topk:0.05+q8);
#   strategy     fedavg | fedavgm | fedadam | median | trimmed_mean;
#   expect       runs | refused: what the cell must come to; with regional,
#                runs+eu or runs-eu says whether the eu sites take part.
# Checks: `xfed policy check` says what submission does (a refused job exits
# 3 with check's words); a job that runs reaches done with an accuracy above
# a floor, its epsilon within the target; where each site's own noise
# guarantees its epsilon (record, local) each taking part site's ledger is charged
# within the target and a site that did not take part is charged nothing,
# elsewhere no ledger is charged; every audit trail verifies.
# usage: matrix.sh BUILD_DIR TOPOLOGY PRIVACY SECAGG COMPRESSION STRATEGY EXPECT
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
topology=${2:?topology} privacy=${3:?privacy} secagg=${4:?secagg} compression=${5:?compression}
strategy=${6:?strategy} expect=${7:?expect}
src=$(cd "$(dirname "$0")/../.." && pwd)
data=${XF_FMNIST:-/usr/share/datasets/fashion-mnist}
xfed=$build/cli/xfed site_bin=$build/site/xfed-site coord_bin=$build/coordinator/xfed-coord
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-matrix-XXXXXX")
pids=()
cell="$topology/$privacy/secagg-$secagg/$compression/$strategy"
fail() {
  echo "FAIL [$cell]: $*" >&2
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
  if [[ -n ${XF_KEEP_WORK:-} ]]; then echo "kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
case $topology in flat | regional) ;; *) fail "topology is flat or regional, not '$topology'" ;; esac
case $privacy in none | central | local | distributed | record) ;;
  *) fail "privacy is none, central, local, distributed or record, not '$privacy'" ;; esac
case $secagg in on | off) ;; *) fail "secagg is on or off, not '$secagg'" ;; esac
case $compression in none | q8 | topk) ;; *) fail "compression is none, q8 or topk, not '$compression'" ;; esac
case $expect in runs | runs+eu | runs-eu | refused) ;;
  *) fail "expect is runs, runs+eu, runs-eu or refused, not '$expect'" ;; esac
[[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
  fail "Fashion-MNIST is not at $data (deploy/install-deps.sh installs dataset-fashion-mnist)"
export XF_LOG_LEVEL=info
mkdir -p "$work/logs"

# ---- the federation ---------------------------------------------------------------------------------
fed=$work/federation
tls() { echo --cert "$fed/issued/$1.crt" --key "$fed/issued/$1.key" --ca "$fed/ca.crt" --crl "$fed/crl.pem"; }
wait_file() {
  local i
  for ((i = 0; i < 300; i++)); do [[ -s $1 ]] && return 0; sleep 0.1; done
  fail "no $1"
}
XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation matrix >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name cora --role compliance >/dev/null
sites=() aggs=()
declare -A site_region dial
if [[ $topology == flat ]]; then
  for i in 1 2 3 4; do sites+=("s$i"); site_region[s$i]=eu; done
else
  for r in eu us ap; do
    aggs+=("$r")
    for i in 1 2; do sites+=("$r-$i"); site_region[$r-$i]=$r; done
  done
fi
for s in "${sites[@]}"; do
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind site --name "$s" --region "${site_region[$s]}" >/dev/null
done
for r in "${aggs[@]}"; do
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name "agg-$r" --region "$r" >/dev/null
done
XF_LOG_LEVEL=warn "$xfed" data split --data "$data" --sites "${#sites[@]}" --scheme dirichlet:0.5 --seed 7 \
  --out "$work/shards" --min-records 1000 >/dev/null

region_flag=(--residency-policy off)
[[ $topology == regional ]] && region_flag=(--region us)
# shellcheck disable=SC2046
"$coord_bin" $(tls coord) "${region_flag[@]}" --state "$work/coord" --listen 127.0.0.1:0 \
  --port-file "$work/coord.port" 2>>"$work/logs/coord.log" &
pids+=($!)
wait_file "$work/coord.port"
port=$(cat "$work/coord.port")
for s in "${sites[@]}"; do dial[$s]=$port; done
for r in "${aggs[@]}"; do
  # shellcheck disable=SC2046
  "$coord_bin" --role regional --region "$r" --upstream "127.0.0.1:$port" $(tls "agg-$r") \
    --state "$work/agg-$r" --listen 127.0.0.1:0 --port-file "$work/agg-$r.port" \
    2>>"$work/logs/agg-$r.log" &
  pids+=($!)
  wait_file "$work/agg-$r.port"
  for i in 1 2; do dial[$r-$i]=$(cat "$work/agg-$r.port"); done
done
n=0
for s in "${sites[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=warn "$site_bin" init --dir "$work/sites/$s" --name "$s" --region "${site_region[$s]}" \
    --coordinator "127.0.0.1:${dial[$s]}" $(tls "$s") --threads 1 --backend cpu >/dev/null
  XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/sites/$s" --name fmnist \
    --path "$work/shards/site-$n" --tag fmnist >/dev/null
  "$site_bin" run --dir "$work/sites/$s" 2>>"$work/logs/$s.log" &
  pids+=($!)
done
# shellcheck disable=SC2046
cli() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls rita); }
if [[ $topology == regional ]]; then
  # shellcheck disable=SC2046
  XF_LOG_LEVEL=warn "$xfed" policy import "$src/deploy/policy/quickstart.json" \
    --coordinator "127.0.0.1:$port" $(tls cora) --reason "the quickstart's policy" >/dev/null
fi
want=${#sites[@]}
for ((i = 0; i < 300; i++)); do
  if [[ $topology == flat ]]; then
    k=$(grep -c 'event=site_connected\|event=site_announced' "$work/logs/coord.log" || true)
  else
    k=$(cat "$work"/logs/agg-*.log | grep -c 'event=site_announced' || true)
  fi
  ((k >= want)) && break
  sleep 0.2
done
((k >= want)) || fail "only $k of $want sites came up"

# ---- the job ----------------------------------------------------------------------------------------
# The regional cells meet the eu rule's max_epsilon 3; flat ones, with four
# sites, take more room so that the model is seen to learn.
target=3
[[ $topology == flat ]] && target=8
case $privacy in
  none) priv='{"mode": "none", "clip": 1.0}' ;;
  central | distributed) priv="{\"unit\": \"site\", \"mode\": \"$privacy\", \"clip\": 1.0, \"target_epsilon\": $target, \"delta\": 1e-5}" ;;
  local) target=50
    priv="{\"unit\": \"site\", \"mode\": \"local\", \"clip\": 1.0, \"target_epsilon\": $target, \"delta\": 1e-5}" ;;
  record) priv="{\"unit\": \"record\", \"mode\": \"local\", \"clip\": 1.0, \"target_epsilon\": $target, \"delta\": 1e-5}" ;;
esac
[[ $privacy == none && $secagg == off ]] && priv='{"mode": "none"}'
sa='{"enabled": false}'
[[ $secagg == on ]] && sa='{"enabled": true, "bits": 24}'
case $compression in
  none) comp='{"uplink": "none"}' ;;
  q8) comp='{"uplink": "q8"}' ;;
  topk) comp='{"uplink": "topk:0.05+q8"}' ;;
esac
cat >"$work/job.json" <<JSON
{"name": "matrix", "model": {"arch": "mlp", "hidden": [64]},
 "data": {"dataset": "fmnist", "tags": ["fmnist"]}, "rounds": 5, "min_sites": 2,
 "round_deadline_s": 600, "local": {"epochs": 1, "batch_size": 32, "lr": 0.05},
 "strategy": {"name": "$strategy"}, "privacy": $priv, "secure_aggregation": $sa,
 "compression": $comp, "seed": 31}
JSON

json_field() { sed -n "s/.*\"$1\": *\"\\{0,1\\}\\([^\",}]*\\).*/\\1/p" | head -n 1; }
job_field() { cli job status "$1" --json | json_field "$2"; }

set +e
cli policy check "$work/job.json" >"$work/check.out" 2>&1
check=$?
cli job submit "$work/job.json" --json >"$work/submit.out" 2>&1
submit=$?
set -e
if [[ $expect == refused ]]; then
  ((check != 0)) || fail "check allows the job: $(cat "$work/check.out")"
  ((submit != 0)) || fail "submission took the job that check refused: $(cat "$work/submit.out")"
  # One admission: submission refuses with what check said.
  why=$(grep -m1 -v '^\s*$' "$work/check.out" | sed 's/.*job\.json: //' | cut -c1-80)
  grep -qF -- "$why" "$work/submit.out" ||
    fail "submission's refusal is not check's: check '$(cat "$work/check.out")', submit '$(cat "$work/submit.out")'"
  echo "refused at submission as check said: $(head -n 1 "$work/submit.out")"
  exit 0
fi
((check == 0)) || fail "check refuses the job (exit $check): $(cat "$work/check.out")"
((submit == 0)) || fail "submission refused what check allowed (exit $submit): $(cat "$work/submit.out")"
id=$(json_field job_id <"$work/submit.out")
[[ -n $id ]] || fail "no job id in $(cat "$work/submit.out")"
st=
for ((i = 0; i < 3000; i++)); do
  st=$(job_field "$id" state 2>/dev/null || true)
  [[ $st == done || $st == failed || $st == cancelled ]] && break
  sleep 0.2
done
[[ $st == done ]] || fail "job $id is '$st', not done: $(job_field "$id" message)"
acc=$(job_field "$id" test_accuracy)
eps=$(job_field "$id" epsilon)
# Without noise the model must learn; with record-level DP-SGD too. Noise for
# whole sites over four to six of them (sigma near 1.4 times the clip on a
# sum of a few clipped updates) leaves the accuracy of a few rounds near
# chance: there the checks are the epsilon and the ledgers.
floor=0.5
[[ $compression == topk ]] && floor=0.25 # 5% of the values a round, in five rounds
[[ $privacy == record ]] && floor=0.2
[[ $privacy == central || $privacy == distributed || $privacy == local ]] && floor=0
awk -v a="$acc" -v f="$floor" 'BEGIN { exit !(a ~ /^[0-9.eE+-]+$/ && a + 0 >= f && a + 0 <= 1) }' ||
  fail "accuracy '$acc' is not a number between $floor and 1"
if [[ $privacy != none ]]; then
  awk -v e="$eps" -v t="$target" 'BEGIN { exit !(e > 0 && e <= t + 1e-9) }' ||
    fail "the job's epsilon $eps is not within its target $target"
fi

# Who took part, by the sites' own trails, and what each ledger holds.
took=0
for s in "${sites[@]}"; do
  part=0
  grep -q "event=task_go job=$id \|event=training_done job=$id \|event=update_sent job=$id " \
    "$work/logs/$s.log" && part=1
  grep -q "event=task_accepted job=$id " "$work/logs/$s.log" && part=1
  XF_LOG_LEVEL=warn "$site_bin" ledger --dir "$work/sites/$s" --json >"$work/ledger-$s.json" ||
    fail "site $s's ledger cannot be read"
  spent=$(tr -d '\n ' <"$work/ledger-$s.json" | grep -o "{\"job\":\"$id\"[^{}]*}" | json_field epsilon || true)
  if [[ $privacy == none || $privacy == central || $privacy == distributed ]]; then
    # The site's ledger charges what the site's own noise guarantees
    # (record, local); central noise, and the distributed noise that only
    # protects the securely aggregated sum, are the coordinator's to account.
    [[ -z $spent || $spent == 0 || $spent == 0.0 ]] || fail "site $s charged $spent for a job whose noise it does not add"
  elif ((part)); then
    [[ -n $spent ]] || fail "site $s took part but its ledger has nothing for job $id: $(cat "$work/ledger-$s.json")"
    awk -v e="$spent" -v t="$target" 'BEGIN { exit !(e > 0 && e <= t + 1e-9) }' ||
      fail "site $s's ledger holds $spent for job $id, target $target"
  else
    [[ -z $spent ]] || fail "site $s did not take part but its ledger holds $spent"
  fi
  took=$((took + part))
done
((took >= 2)) || fail "only $took sites took part"
if [[ $expect == runs+eu || $expect == runs-eu ]]; then
  eu=0
  grep -q "event=task_accepted job=$id " "$work/logs/eu-1.log" "$work/logs/eu-2.log" && eu=1
  [[ $expect == runs+eu ]] && ((eu == 0)) && fail "the eu sites did not take part"
  [[ $expect == runs-eu ]] && ((eu == 1)) && fail "the eu sites took part against the policy"
fi

# Every audit trail verifies.
# shellcheck disable=SC2046
XF_LOG_LEVEL=warn "$xfed" audit verify --coordinator "127.0.0.1:$port" $(tls cora) >"$work/audit.out" ||
  fail "the coordinator's audit trail: $(cat "$work/audit.out")"
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
  fail "a daemon reported a sanitizer error (the files above)"
fi
echo "[$cell] job $id done: accuracy $acc epsilon ${eps:-none}, $took sites took part"
