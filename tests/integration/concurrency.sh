#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Concurrent jobs on the quickstart federation, with the real daemons on
# loopback and real certificates: a global coordinator in us, regional
# aggregators for eu, us and ap with two sites each, and the quickstart's
# residency policy. Three jobs with fixed seeds (a plain mlp, a q8-compressed
# logreg, an mlp under secure aggregation) run
#   1. each alone, one after the other;
#   2. together, with a fourth job whose min_sites no federation here meets
#      submitted beside them: it is refused at once and delays nothing;
#   3. together again, with the coordinator killed (kill -9) mid-way through
#      all three and restarted on its journal.
# Each job's final model must be bit-identical in the three runs (and so its
# accuracy the same).
# usage: concurrency.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
fed_name=conc
coord_config='{"resume_grace_s": 30, "eval_timeout_s": 60}'
setup_work xf-conc
# The quickstart federation: two sites of each region behind its aggregator
# (shards site-1 to site-6 in this order), the coordinator in us.
federation eu-1:eu:eu eu-2:eu:eu us-1:us:us us-2:us:us ap-1:ap:ap ap-2:ap:ap
comp policy import "$src/deploy/policy/quickstart.json" --reason "the quickstart's policy" >/dev/null

wait_job() { # wait_job JOB SECONDS: the job ends done within about SECONDS
  local st
  st=$(wait_end "$1" "$2")
  [[ $st == failed || $st == cancelled ]] && fail "job $1 is $st: $(job_field "$1" message)"
  [[ $st == "done" ]] || fail "job $1 is not done after $2 s (it is $st)"
}

# Three jobs, deterministic (no noise drawn from the CSPRNG), on the sites
# the policy lets take part without privacy: us and ap (the EU's data leaves
# only as a private aggregate).
common='"data": {"dataset": "fmnist", "tags": ["fmnist"]}, "rounds": 10, "min_sites": 2,
  "round_deadline_s": 300, "local": {"epochs": 2, "batch_size": 32, "lr": 0.05}'
cat >"$work/a.json" <<JSON
{"name": "conc-a", "model": {"arch": "mlp", "hidden": [64]}, $common, "seed": 21}
JSON
cat >"$work/b.json" <<JSON
{"name": "conc-b", "model": {"arch": "logreg"}, $common, "compression": {"uplink": "q8"},
 "strategy": {"name": "fedavgm"}, "seed": 22}
JSON
cat >"$work/c.json" <<JSON
{"name": "conc-c", "model": {"arch": "mlp", "hidden": [64]}, $common,
 "privacy": {"mode": "none", "clip": 1.0},
 "secure_aggregation": {"enabled": true, "bits": 24}, "strategy": {"name": "fedadam"}, "seed": 23}
JSON
cat >"$work/d.json" <<JSON
{"name": "conc-d", "model": {"arch": "logreg"}, "data": {"dataset": "fmnist", "tags": ["fmnist"]},
 "rounds": 2, "min_sites": 99, "seed": 24}
JSON
for j in a b c; do
  cli policy check "$work/$j.json" >"$work/check-$j.out" || fail "check refuses job $j: $(cat "$work/check-$j.out")"
done

declare -A digest acc
submit() { cli job submit "$work/$1.json" --json | json_field job_id; }

# 1. Alone, one after the other.
for j in a b c; do
  id=$(submit "$j")
  wait_job "$id" 300
  digest[$j]=$(job_field "$id" model_digest)
  acc[$j]=$(job_field "$id" test_accuracy)
  echo "alone: job $j ($id) accuracy ${acc[$j]} model ${digest[$j]}"
done

# 2. Together, and the fourth job refused at once without delaying them.
t0=$(date +%s)
ids=()
for j in a b c; do ids+=("$(submit "$j")"); done
set +e
cli job submit "$work/d.json" >"$work/d.out" 2>&1
d_status=$?
set -e
((d_status == 3)) || fail "the job no federation here can run was not refused (exit $d_status): $(cat "$work/d.out")"
grep -q 'min_sites is 99' "$work/d.out" || fail "its refusal does not say why: $(cat "$work/d.out")"
cli policy check "$work/d.json" >"$work/check-d.out" && fail "check allows what submission refused"
grep -q 'min_sites is 99' "$work/check-d.out" || fail "check does not say what submission said"
k=0
for j in a b c; do
  id=${ids[$k]}
  k=$((k + 1))
  wait_job "$id" 300
  got=$(job_field "$id" model_digest)
  [[ $got == "${digest[$j]}" ]] || fail "job $j together ($id): model $got, alone ${digest[$j]}"
done
t1=$(date +%s)
# They ran at once: a round of the second job opened before the first was done.
first_done=$(grep -n "event=job_finished job=${ids[0]} " "$work/logs/coord.log" | cut -d: -f1)
second_open=$(grep -n "event=round_opened job=${ids[1]} " "$work/logs/coord.log" | head -n 1 | cut -d: -f1)
((second_open < first_done)) || fail "job ${ids[1]} did not start before job ${ids[0]} finished"
echo "together: the three models are bit-identical to their runs alone ($((t1 - t0)) s); the fourth job was refused at once"

# 3. Together, and the coordinator killed mid-way through all three.
ids=()
for j in a b c; do ids+=("$(submit "$j")"); done
# Mid-way through all three: each has committed a round and none is done.
ok=0
for ((i = 0; i < 1500 && !ok; i++)); do
  cli job list --json >"$work/list.json" 2>/dev/null || continue
  ok=1
  for id in "${ids[@]}"; do
    line=$(tr -d '\n' <"$work/list.json" | sed 's/},{/}\n{/g' | grep "\"job_id\": *\"$id\"" || true)
    r=$(echo "$line" | json_field rounds_committed)
    st=$(echo "$line" | json_field state)
    ((${r:-0} >= 1)) && [[ $st != "done" ]] || ok=0
  done
  ((ok)) || sleep 0.05
done
((ok)) || fail "the three jobs were never all under way at once"
kill -KILL "$coord_pid"
wait "$coord_pid" 2>/dev/null || true
start_coord "$port"
k=0
for j in a b c; do
  id=${ids[$k]}
  k=$((k + 1))
  wait_job "$id" 300
  got=$(job_field "$id" model_digest)
  [[ $got == "${digest[$j]}" ]] || fail "job $j after kill -9 ($id): model $got, alone ${digest[$j]}"
done
grep -q 'event=job_active job=.* resumed=1' "$work/logs/coord.log" || fail "no job resumed after the restart"
# Nothing made before the kill was lost: no attempt retried, no aggregate
# the restarted coordinator could not open.
if grep -h 'event=round_retried\|event=update_refused\|event=upstream_error' "$work"/logs/coord.log \
  "$work"/logs/agg-*.log >"$work/lost.txt"; then
  fail "work was lost to the restart: $(head -n 3 "$work/lost.txt")"
fi
echo "kill -9: the three jobs resumed and ended bit-identical to their runs alone"

stop_daemons
check_sanitizers
