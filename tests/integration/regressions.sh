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
#            by examples, and count sites: invited, accepted and reported
#            while it runs, the last round's once it is done.
#   aggregate_waits_for_the_restarted_coordinators_go: the coordinator is
#            killed (kill -9) while a site behind agg-ap trains, and restarted
#            while agg-us is stopped, so it waits for agg-us's sites before it
#            offers the interrupted round again; meanwhile agg-ap makes its
#            aggregate. It goes up only after the new offer and go (nothing
#            refused, nothing retried), and the job ends done.
#   secagg_behind_aggregator_after_a_retry: secure aggregation among three
#            sites behind agg-eu; one of them is stopped while attempt 1 is
#            confirmed, so that attempt is retried before anyone trains. The
#            secure aggregation of attempt 2 runs behind the aggregator and
#            the round commits the three sites.
# usage: regressions.sh BUILD_DIR NAME
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
name=${2:?scenario}
label=$name
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
fed_name=regress
coord_config='{"resume_grace_s": 30, "eval_timeout_s": 300}'
setup_work xf-reg
case $name in
  min_sites_counts_sites | refusal_behind_aggregator_reaches_coordinator | secagg_over_mixed_cohort | \
    median_weighs_regions_by_sites | held_back_aggregate_spends_no_privacy | \
    accuracy_is_of_complete_rounds | aggregate_waits_for_the_restarted_coordinators_go | \
    secagg_behind_aggregator_after_a_retry) ;;
  *) echo "unknown scenario '$name'" >&2; exit 2 ;;
esac

# ---- the federation ---------------------------------------------------------------------------------
# Each scenario starts its own with `federation` (lib.sh): the coordinator in
# us, an aggregator for each region that sites dial. Here its policy and jobs.
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
# site_pid SITE: the pid of a site's daemon (started after the coordinator
# and the aggregators, in the order `federation` names them).
site_pid() {
  local i
  for i in "${!sites[@]}"; do
    if [[ ${sites[$i]} == "$1" ]]; then echo "${pids[$((1 + ${#aggs[@]} + i))]}"; fi
  done
}
# pause PID / resume PID: SIGSTOP (returning once it is stopped) / SIGCONT.
pause() {
  kill -STOP "$1"
  while [[ $(cut -d' ' -f3 "/proc/$1/stat") != T ]]; do sleep 0.01; done
}
resume() { kill -CONT "$1"; }
# wait_log FILE FROM PATTERN WHAT: until a line after line FROM of FILE
# matches PATTERN (grep -E), within 120 s; else fails saying WHAT.
wait_log() {
  local i
  for ((i = 0; i < 1200; i++)); do
    tail -n +"$(($2 + 1))" "$1" | grep -qE "$3" && return 0
    sleep 0.1
  done
  fail "$4"
}
# committed_reports JOB: the reports= of each of the job's round_committed lines.
committed_reports() {
  { grep "event=round_committed job=$1 " "$work/logs/coord.log" || true; } |
    sed -n 's/.* reports=\([0-9]*\).*/\1/p' | paste -sd ' ' -
}

case $name in
min_sites_counts_sites)
  federation e1:eu:eu e2:eu:eu p1:ap:ap p2:ap:ap
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}},
          {"id": "ap-out", "effect": "allow", "kind": "update", "select": {"region": "ap"}, "destinations": ["us"]}'
  job "$work/job.json" min-sites 3 41
  id=$(submit "$work/job.json")
  grep -q '^verdict: runs: 4 sites eligible, 4 invited each round, min_sites 3$' "$work/job.json.check" ||
    fail "check does not count the 4 sites: $(cat "$work/job.json.check")"
  wait_done "$id"
  (($(grep -c "event=round_opened job=$id round=[12] attempt=1 sites=4$" "$work/logs/coord.log") == 2)) ||
    fail "the rounds did not invite the 4 sites: $(grep "round_opened job=$id" "$work/logs/coord.log")"
  cli job status "$id" >"$work/status.txt"
  grep -q 'over its 4 evaluating sites' "$work/status.txt" ||
    fail "job status does not count 4 sites: $(cat "$work/status.txt")"
  [[ $(job_field "$id" eval_sites) == 4 ]] || fail "eval_sites is $(job_field "$id" eval_sites), not 4"
  reports=$(committed_reports "$id")
  [[ $reports == "4 4" ]] || fail "the rounds committed reports '$reports', not 4 sites each"
  echo "$name: job $id done with min_sites 3 over 4 sites behind 2 aggregators; rounds of $reports sites each"
  ;;
refusal_behind_aggregator_reaches_coordinator)
  # e3, behind agg-eu, keeps its data home under its own local policy; the
  # other three sites are enough for min_sites 3.
  federation e1:eu:eu e2:eu:eu e3:eu:eu u1:us:direct
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}}'
  local_deny e3
  words="this site's local policy (version 1, rule 'e3-stays-home') forbids it"
  job "$work/job.json" refusal 3 42
  id=$(submit "$work/job.json")
  wait_done "$id"
  # The coordinator's trail holds e3's refusal of each round, in its words.
  comp audit export >"$work/audit.jsonl"
  rows=$(grep '"kind":"refused_task"' "$work/audit.jsonl" | grep "\"job\":\"$id\"" | grep '"site":"e3"' |
    grep '"via":"agg-eu"' | grep -cF "\"why\":\"$words" || true)
  ((rows >= 2)) || fail "the coordinator's trail has $rows refusals by e3 in its words, not one a round: $(grep refused_task "$work/audit.jsonl")"
  # The researcher sees who refused and why.
  cli job status "$id" >"$work/status.txt"
  grep -q "^message .*went on without e3: $words" "$work/status.txt" ||
    fail "job status does not say that e3 refused and why: $(cat "$work/status.txt")"
  grep -q 'over its 3 evaluating sites' "$work/status.txt" ||
    fail "the job did not complete with the 3 other sites: $(cat "$work/status.txt")"
  # Where the other sites are not enough (min_sites 4) the job fails, naming
  # e3 and saying why in its words.
  job "$work/job4.json" refusal-all 4 47
  id4=$(submit "$work/job4.json")
  st='' until=$((SECONDS + 600))
  while ((SECONDS < until)); do
    st=$(job_field "$id4" state)
    [[ $st == failed || $st == "done" ]] && break
    sleep 0.2
  done
  [[ $st == failed ]] || fail "job $id4 with min_sites 4 is '$st', not failed"
  cli job status "$id4" >"$work/status4.txt"
  grep -q "^message .*below min_sites 4; e3: $words" "$work/status4.txt" ||
    fail "the failed job does not name e3 and its words: $(cat "$work/status4.txt")"
  echo "$name: job $id done without e3, whose refusal is in the coordinator's trail ($rows rows) and the job's status; job $id4 failed naming e3"
  ;;
secagg_over_mixed_cohort)
  # u1 and u2 in us dial the coordinator; e1 and e2 leave eu only as a
  # securely aggregated regional aggregate of both.
  federation u1:us:direct u2:us:direct e1:eu:eu e2:eu:eu
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2, "require_secagg": true}}'
  job "$work/job.json" secagg 4 43 '"privacy": {"mode": "none", "clip": 1.0}, "secure_aggregation": {"enabled": true, "bits": 24}'
  set +e
  cli policy check "$work/job.json" >"$work/check.out" 2>&1
  check=$?
  cli job submit "$work/job.json" --json >"$work/submit.out" 2>&1
  submit=$?
  set -e
  # One admission: check and submission agree.
  if ((check != 0)); then
    ((submit != 0)) || fail "submission took the job that check refused: $(cat "$work/check.out")"
    why=$(grep -m1 '^verdict:' "$work/check.out" | sed 's/^verdict: NOT runnable as written: //' | cut -c1-80)
    grep -qF -- "$why" "$work/submit.out" ||
      fail "submission's refusal is not check's: check '$(cat "$work/check.out")', submit '$(cat "$work/submit.out")'"
    fail "secure aggregation over direct sites and a regional aggregate is refused (by check and submission alike): $why"
  fi
  ((submit == 0)) || fail "submission refused what check allowed (exit $submit): $(cat "$work/submit.out")"
  grep -q '^composition: .*secure aggregation among the direct sites and within each regional aggregator' \
    "$work/check.out" || fail "check's composition is not secure aggregation on both sides: $(cat "$work/check.out")"
  grep -q 'verdict: runs: 4 sites eligible' "$work/check.out" || fail "check: $(cat "$work/check.out")"
  id=$(json_field job_id <"$work/submit.out")
  [[ -n $id ]] || fail "no job id in $(cat "$work/submit.out")"
  wait_done "$id"
  # Each round: the two direct sites unmasked together, the region's sealed
  # aggregate beside them, the four sites committed.
  for r in 1 2; do
    grep -q "event=secagg_unmasked job=$id round=$r attempt=1 sites=2 " "$work/logs/coord.log" ||
      fail "round $r did not unmask the 2 direct sites' sum"
  done
  (($(grep -c "event=update_received job=$id from=agg-eu sites=2 " "$work/logs/coord.log") == 2)) ||
    fail "the coordinator did not take an aggregate of the 2 eu sites each round"
  reports=$(committed_reports "$id")
  [[ $reports == "4 4" ]] || fail "the rounds committed reports '$reports', not 4 sites each"
  # The sites checked the signed keys, shares and survivor sets that the
  # coordinator and agg-eu relayed, and refused none.
  ! grep -q 'event=secagg_round_refused' "$work"/logs/*.log ||
    fail "a site refused an honest aggregator's secure aggregation: $(grep -h 'event=secagg_round_refused' "$work"/logs/*.log | head -1)"
  XF_LOG_LEVEL=warn "$xfed" audit export --db "$work/agg-eu/audit.db" >"$work/agg.jsonl"
  (($(grep '"kind":"crossing"' "$work/agg.jsonl" | grep "\"job\":\"$id\"" | grep -c '"contributors":2') == 2)) ||
    fail "agg-eu did not let one aggregate of 2 sites out each round: $(cat "$work/agg.jsonl")"
  echo "$name: check and submission allow it; job $id done, each round the 2 direct sites' masked sum and eu's aggregate of 2 ($(job_field "$id" test_accuracy))"
  ;;
median_weighs_regions_by_sites)
  # e1..e3 reach the coordinator only as agg-eu's aggregate; u1 and u2 directly.
  federation u1:us:direct u2:us:direct e1:eu:eu e2:eu:eu e3:eu:eu
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}}'
  job "$work/job.json" median 5 44 '"strategy": {"name": "median"}'
  id=$(submit "$work/job.json")
  grep -q '^composition: median within each regional aggregator.s sites, then a median across 1 regional input (each counting its sites) and 2 direct sites' \
    "$work/job.json.check" || fail "check's composition does not weigh the region by its sites: $(grep composition "$work/job.json.check")"
  grep -q 'verdict: runs: 5 sites eligible' "$work/job.json.check" || fail "check: $(cat "$work/job.json.check")"
  wait_done "$id"
  # The region's input weighs its 3 sites; each direct site 1; every round
  # commits the 5 sites' reports at weight 5 (a region taken as one input
  # would make 3 and 3).
  (($(grep -c "event=update_received job=$id from=agg-eu sites=3 weight=3 " "$work/logs/coord.log") == 2)) ||
    fail "agg-eu's median did not come in at the weight of its 3 sites each round: $(grep "update_received job=$id" "$work/logs/coord.log")"
  (($(grep -c "event=round_committed job=$id round=[12] reports=5 weight=5 " "$work/logs/coord.log") == 2)) ||
    fail "the rounds did not commit 5 sites: $(grep "round_committed job=$id" "$work/logs/coord.log")"
  grep -q 'over its 5 evaluating sites' <(cli job status "$id") || fail "job status does not count 5 sites"
  echo "$name: job $id done; each round eu's median weighed 3 sites and the round committed 5 reports ($(job_field "$id" test_accuracy))"
  ;;
held_back_aggregate_spends_no_privacy)
  # eu leaves only as an aggregate of 2 sites; e2 refuses under its local
  # policy, so e1's aggregate could not leave: e1 must not train for it. u1
  # in us carries the job.
  federation u1:us:direct e1:eu:eu e2:eu:eu
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}}'
  local_deny e2
  job "$work/job.json" held 1 45 '"privacy": {"unit": "record", "mode": "local", "clip": 1.0, "target_epsilon": 8, "delta": 1e-5}'
  id=$(submit "$work/job.json")
  wait_done "$id"
  # agg-eu held the 1-site aggregate back before anyone trained, and said so.
  XF_LOG_LEVEL=warn "$xfed" audit export --db "$work/agg-eu/audit.db" >"$work/agg.jsonl"
  held=$(grep '"kind":"refused_task"' "$work/agg.jsonl" | grep "\"job\":\"$id\"" |
    grep -c 'held back before any site trained: it sums 1 site.*at least 2 sites' || true)
  ((held == 2)) || fail "agg-eu did not hold the 1-site aggregate back each round: $(cat "$work/agg.jsonl")"
  if grep '"kind":"crossing"' "$work/agg.jsonl" | grep -q "\"job\":\"$id\""; then
    fail "an aggregate of job $id left eu: $(grep '"kind":"crossing"' "$work/agg.jsonl")"
  fi
  comp audit export >"$work/coord.jsonl"
  if grep '"kind":"crossing"' "$work/coord.jsonl" | grep -q "\"job\":\"$id\""; then
    fail "the coordinator took in something of job $id from another region"
  fi
  # e1 accepted the held task each round and was cancelled before its go.
  (($(grep -c "event=task_accepted job=$id round=[12] attempt=1 .*hold=true" "$work/logs/e1.log") == 2)) ||
    fail "e1 was not offered the held task each round"
  if grep -q "event=task_training job=$id .*evaluate_only=false" "$work/logs/e1.log"; then
    fail "e1 trained for job $id, whose aggregate could not leave eu"
  fi
  if grep -q "event=privacy_charged job=$id " "$work/logs/e1.log"; then
    fail "e1 charged its ledger for job $id"
  fi
  # e1's ledger holds nothing of the job; u1's, which trained, does (the
  # same reading finds a charge where there is one).
  for s in e1 u1; do
    XF_LOG_LEVEL=warn "$site_bin" ledger --dir "$work/sites/$s" --json >"$work/ledger-$s.json" ||
      fail "$s's ledger cannot be read"
  done
  spent=$(tr -d '\n ' <"$work/ledger-e1.json" | grep -o "{\"job\":\"$id\"[^{}]*}" || true)
  [[ -z $spent ]] || fail "e1's ledger holds $spent for job $id"
  spent=$(tr -d '\n ' <"$work/ledger-u1.json" | grep -o "{\"job\":\"$id\"[^{}]*}" | json_field epsilon || true)
  awk -v e="$spent" 'BEGIN { exit !(e > 0 && e <= 8 + 1e-9) }' ||
    fail "u1, which trained, has '$spent' for job $id in its ledger: $(cat "$work/ledger-u1.json")"
  echo "$name: job $id done with u1 (epsilon $spent); agg-eu held e1's aggregate back $held times before it trained; e1's ledger is untouched"
  ;;
accuracy_is_of_complete_rounds)
  # Six sites: two direct, two behind agg-eu, two behind agg-ap.
  federation u1:us:direct u2:us:direct e1:eu:eu e2:eu:eu p1:ap:ap p2:ap:ap
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2}},
          {"id": "ap-out", "effect": "allow", "kind": "update", "select": {"region": "ap"}, "destinations": ["us"]}'
  job "$work/job.json" accuracy 6 46
  sed -i 's/"rounds": 2/"rounds": 3/' "$work/job.json"
  cli policy check "$work/job.json" >"$work/check.out" 2>&1 || fail "check refuses the job: $(cat "$work/check.out")"
  # Followed from submission to the end (the live lines go to stderr).
  cli job submit "$work/job.json" --wait --interval 0.05 >"$work/wait.out" 2>"$work/wait.err" ||
    fail "the job did not end done: $(cat "$work/wait.err")"
  id=$(head -n 1 "$work/wait.out")
  [[ $id =~ ^[0-9]+$ ]] || fail "no job id from submit: $(cat "$work/wait.out")"
  # The examples-weighted accuracy of each evaluation, from the metrics, and
  # the sites in it; the final model's is the last complete one.
  cli job metrics "$id" --csv >"$work/metrics.csv"
  awk -F, 'NR > 1 && $6 != "" { w = ($7 > 0 ? $7 : 1); a[$1] += w * $6; n[$1] += w; k[$1]++ }
    END { for (r in a) printf "%d %.6f %d\n", r, a[r] / n[r], k[r] }' "$work/metrics.csv" |
    sort -n >"$work/evals.txt"
  read -r last want sites_in < <(tail -n 1 "$work/evals.txt")
  ((last == 3 && sites_in == 6)) || fail "the final evaluation is not of round 3 by 6 sites: $(cat "$work/evals.txt")"
  near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a ~ /^[0-9.]+$/ && d <= 0.00005 + 1e-9) }'; }
  # watch, after the job is done, and the end of submit --wait.
  cli job watch "$id" >"$work/watch.out" 2>"$work/watch.err" || fail "watch: $(cat "$work/watch.err")"
  watch_acc=$(sed -n 's/^final accuracy=\([0-9.]*\) .*/\1/p' "$work/watch.out")
  wait_acc=$(sed -n 's/^final accuracy=\([0-9.]*\) .*/\1/p' "$work/wait.out")
  # status: the figure, of the final model, over its 6 evaluating sites.
  cli job status "$id" >"$work/status.txt"
  status_acc=$(sed -n 's/^accuracy    \([0-9.]*\) of the model of round 3, over its 6 evaluating sites .*/\1/p' "$work/status.txt")
  [[ -n $status_acc ]] || fail "job status does not give round 3's accuracy over 6 sites: $(cat "$work/status.txt")"
  if grep -q '^partial' "$work/status.txt"; then fail "a done job shows a partial evaluation: $(cat "$work/status.txt")"; fi
  [[ $(job_field "$id" eval_sites) == 6 ]] || fail "eval_sites is $(job_field "$id" eval_sites), not 6"
  # list: the job's ACCURACY column.
  cli job list >"$work/list.txt"
  list_acc=$(awk -v id="$id" '$1 == id { print $6 }' "$work/list.txt")
  for a in "$watch_acc" "$wait_acc" "$status_acc" "$list_acc"; do
    near "$a" "$want" ||
      fail "accuracy shown '$a' (watch $watch_acc, submit --wait $wait_acc, status $status_acc, list $list_acc) is not the final evaluation's $want over 6 sites"
  done
  [[ $watch_acc == "$status_acc" && $list_acc == "$status_acc" && $wait_acc == "$status_acc" ]] ||
    fail "list $list_acc, status $status_acc, watch $watch_acc and submit --wait $wait_acc differ"
  # While it ran: every accuracy shown was that of a complete evaluation (all
  # its sites in), never one of some sites; the sites were counted as sites.
  grep '^round ' "$work/wait.err" >"$work/live.txt" || fail "submit --wait printed no progress: $(cat "$work/wait.err")"
  while read -r shown; do
    ok=0
    while read -r _ acc _; do near "$shown" "$acc" && ok=1; done <"$work/evals.txt"
    ((ok)) || fail "the accuracy $shown was shown while the job ran, the figure of no complete evaluation: $(cat "$work/evals.txt")"
  done < <(sed -n 's/.*  accuracy \([0-9.]*\)  .*/\1/p' "$work/live.txt")
  # Sites invited, accepted and reported in the open attempt, or, between
  # attempts, those of the last committed round: never a bare "0/6".
  sed -n 's/.*  sites \([0-9]*\) invited, \([0-9]*\) accepted, \([0-9]*\) reported  .*/\1 \2 \3/p;
          s/.*  sites \([0-9]*\) invited, \([0-9]*\) reported in round [1-3]  .*/\1 \2 \2/p' \
    "$work/live.txt" >"$work/live-sites.txt"
  if [[ ! -s $work/live-sites.txt ]] ||
    (($(wc -l <"$work/live-sites.txt") != $(grep -c '  sites ' "$work/live.txt"))); then
    fail "progress does not say the sites invited, accepted and reported: $(cat "$work/live.txt")"
  fi
  while read -r invited accepted reported; do
    ((invited == 6 && accepted <= invited && reported <= accepted)) ||
      fail "progress counted $invited invited, $accepted accepted, $reported reported, not of 6 sites: $(cat "$work/live.txt")"
  done <"$work/live-sites.txt"
  # Done: the last round's sites, in status and in list's REPORTED.
  grep -q '^sites       6 invited, 6 reported in round 3 (counted in sites)$' "$work/status.txt" ||
    fail "job status does not give the last round's sites: $(cat "$work/status.txt")"
  [[ $(awk -v id="$id" '$1 == id { print $5 }' "$work/list.txt") == 6/6 ]] ||
    fail "job list does not give the last round's 6/6 sites: $(cat "$work/list.txt")"
  (($(grep -c "event=round_opened job=$id round=[123] attempt=1 sites=6$" "$work/logs/coord.log") == 3)) ||
    fail "the rounds did not invite the 6 sites: $(grep "round_opened job=$id" "$work/logs/coord.log")"
  echo "$name: job $id: list, status, watch and submit --wait all show $status_acc (round 3 over 6 sites, weighted $want); $(grep -c . "$work/live.txt") live lines in sites of 6"
  ;;
aggregate_waits_for_the_restarted_coordinators_go)
  # p1, p2 behind agg-ap and u1, u2 behind agg-us: four sites in each round.
  coord_config='{"resume_grace_s": 300, "eval_timeout_s": 300}'
  federation p1:ap:ap p2:ap:ap u1:us:us u2:us:us
  policy '{"id": "ap-out", "effect": "allow", "kind": "update", "select": {"region": "ap"}, "destinations": ["us"]}'
  job "$work/job.json" restart-wait 4 48
  sed -i 's/"rounds": 2/"rounds": 30/' "$work/job.json"
  p1=$(site_pid p1)
  agg_us=${pids[2]}
  [[ ${aggs[1]} == us ]] || fail "agg-us is not the second aggregator started"
  id=$(submit "$work/job.json")
  # Stop p1 once it has the go of a round (agg-ap's round is then open,
  # waiting for p1) and has not begun its update.
  round=''
  for ((i = 0; i < 6000 && ${#round} == 0; i++)); do
    r=$(sed -n "s/.*event=task_go job=$id round=\([0-9]*\) .*/\1/p" "$work/logs/p1.log" | tail -n 1)
    if [[ -n $r ]] && ! grep -q "event=update_begin job=$id round=$r " "$work/logs/p1.log"; then
      pause "$p1"
      if grep -q "event=update_begin job=$id round=$r " "$work/logs/p1.log"; then resume "$p1"; else round=$r; fi
    fi
    [[ -n $round ]] || sleep 0.02
  done
  [[ -n $round ]] || fail "p1 was never caught between its go and its update"
  # The coordinator dies; it comes back while agg-us is stopped, so it waits
  # for agg-us's sites before it offers round $round again.
  pause "$agg_us"
  kill -KILL "$coord_pid"
  wait "$coord_pid" 2>/dev/null || true
  coord_mark=$(grep -c . "$work/logs/coord.log")
  ap_mark=$(grep -c . "$work/logs/agg-ap.log")
  start_coord "$port"
  wait_log "$work/logs/coord.log" "$coord_mark" "event=site_announced site=agg-ap " \
    "agg-ap did not come back to the restarted coordinator"
  resume "$p1"
  wait_log "$work/logs/agg-ap.log" "$ap_mark" "event=aggregate_made job=$id round=$round " \
    "agg-ap did not make round $round's aggregate after p1 came back"
  resume "$agg_us"
  wait_done "$id"
  grep -q "event=job_active job=$id .*resumed=1" "$work/logs/coord.log" || fail "job $id did not resume"
  # The aggregate went up after the restarted coordinator's offer (and its
  # go), never before it; nothing was refused or retried.
  tail -n +"$((ap_mark + 1))" "$work/logs/agg-ap.log" >"$work/agg-ap.after"
  made=$(grep -n "event=aggregate_made job=$id round=$round " "$work/agg-ap.after" | head -n 1 | cut -d: -f1)
  asked=$(grep -n "event=task_accepted_up job=$id round=$round " "$work/agg-ap.after" | head -n 1 | cut -d: -f1)
  sent=$(grep -n "event=aggregate_sending job=$id round=$round " "$work/agg-ap.after" | head -n 1 | cut -d: -f1)
  if ! [[ -n $made && -n $asked && -n $sent ]] || ((made > asked || asked > sent)); then
    fail "agg-ap's aggregate of round $round was not kept for the new offer (made line ${made:-none}, answered ${asked:-none}, sent ${sent:-none})"
  fi
  if grep -h 'event=update_refused\|event=round_retried\|event=upstream_error' "$work/logs/coord.log" \
    "$work"/logs/agg-*.log >"$work/lost.txt"; then
    fail "work was lost to the restart: $(head -n 3 "$work/lost.txt")"
  fi
  reports=$(committed_reports "$id")
  [[ $reports =~ ^(4 )*4$ ]] || fail "the rounds committed reports '$reports', not 4 sites each"
  echo "$name: job $id done; agg-ap made round $round's aggregate before the restarted coordinator offered the round again, and sent it after its go"
  ;;
secagg_behind_aggregator_after_a_retry)
  federation e1:eu:eu e2:eu:eu e3:eu:eu
  policy '{"id": "eu-out", "effect": "allow", "kind": "regional_aggregate", "select": {"region": "eu"}, "destinations": ["us"], "conditions": {"min_cohort": 2, "require_secagg": true}}'
  job "$work/job.json" secagg-retry 3 49 '"privacy": {"mode": "none", "clip": 1.0}, "secure_aggregation": {"enabled": true, "bits": 24}'
  # A confirmation window of 10 s (a quarter of the deadline).
  sed -i 's/"round_deadline_s": 600/"round_deadline_s": 40/' "$work/job.json"
  e3=$(site_pid e3)
  pause "$e3"
  id=$(submit "$work/job.json")
  wait_log "$work/logs/coord.log" 0 "event=round_retried job=$id round=1 attempt=1 " \
    "round 1's first attempt, with e3 silent, was not retried"
  resume "$e3"
  wait_done "$id"
  grep -q "event=round_committed job=$id round=1 reports=3 " "$work/logs/coord.log" ||
    fail "round 1 did not commit the 3 sites: $(grep "job=$id round=1 " "$work/logs/coord.log" | grep -v metrics | tail -n 5)"
  grep -q "event=task_go job=$id round=1 attempt=[23] phase=held secagg=true" "$work/logs/e3.log" ||
    fail "e3 took no part in a retried attempt of round 1"
  if grep -q "event=task_go job=$id round=1 attempt=1 " "$work/logs/e1.log"; then
    fail "e1 was told to train in the attempt that was retried"
  fi
  echo "$name: job $id done; round 1 was retried without training and its secure aggregation behind agg-eu ran in the retry"
  ;;
*) fail "scenario $name is not written yet" ;;
esac

# Every trail verifies; every daemon stops on SIGTERM; no sanitizer report.
finish
