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
cell="$topology/$privacy/secagg-$secagg/$compression/$strategy"
label=$cell
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
fed_name=matrix
setup_work xf-matrix
case $topology in flat | regional) ;; *) fail "topology is flat or regional, not '$topology'" ;; esac
case $privacy in none | central | local | distributed | record) ;;
  *) fail "privacy is none, central, local, distributed or record, not '$privacy'" ;; esac
case $secagg in on | off) ;; *) fail "secagg is on or off, not '$secagg'" ;; esac
case $compression in none | q8 | topk) ;; *) fail "compression is none, q8 or topk, not '$compression'" ;; esac
case $expect in runs | runs+eu | runs-eu | refused) ;;
  *) fail "expect is runs, runs+eu, runs-eu or refused, not '$expect'" ;; esac

# ---- the federation ---------------------------------------------------------------------------------
# flat: four eu sites dialling the coordinator directly; regional: two sites
# of each region behind its aggregator, the coordinator in us.
if [[ $topology == flat ]]; then
  coord_flags=(--residency-policy off)
  federation s1:eu:direct s2:eu:direct s3:eu:direct s4:eu:direct
else
  federation eu-1:eu:eu eu-2:eu:eu us-1:us:us us-2:us:us ap-1:ap:ap ap-2:ap:ap
  comp policy import "$src/deploy/policy/quickstart.json" --reason "the quickstart's policy" >/dev/null
fi

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
st=$(wait_end "$id")
[[ $st == "done" ]] || fail "job $id is '$st', not done: $(job_field "$id" message)"
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

# Every audit trail verifies; every daemon stops on SIGTERM; no sanitizer report.
finish "a daemon reported a sanitizer error (the files above)"
echo "[$cell] job $id done: accuracy $acc epsilon ${eps:-none}, $took sites took part"
