#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the coordinator does with what it cannot trust, each scenario on a
# federation of its own with the real daemons on loopback and real
# certificates (two honest sites dialling the coordinator or an aggregator,
# no residency policy) and, where the scenario needs one, a scripted site
# (xfed-scripted-site, tests/scripted_site.c) with a certificate of the same
# federation that speaks the protocol and reports what its script says.
#   reports_are_checked: a scripted site reports accuracy 7.5, then NaN,
#            then more samples than its dataset holds, and accuracy 7.5 in
#            the final evaluation, in a job with the honest sites. Each
#            report is refused (Error to the site, a report_refused line, a
#            refused_report row naming the site, the field and the value),
#            its updates are not taken, and the job's accuracy, model and
#            metrics equal those of the same job run by the honest sites
#            alone.
#   reports_are_checked_at_the_aggregator: the same with the honest sites
#            and the scripted site behind a regional aggregator: the
#            aggregator refuses, tells, logs and audits each lie in its own
#            trail, and nothing of the liar reaches the coordinator.
#   update_weight_is_checked: a scripted site's first update claims the
#            weight of 20001 records of its 20000-record dataset: refused
#            (Error to the site, a report_refused line, a refused_report
#            row naming the site, the weight and the value) and not taken;
#            its honest updates of the later rounds are.
#   wrong_digest_is_an_integrity_error: a scripted site's update stream
#            whose TensorBegin announces another digest is answered
#            Error(XF_EINTEGRITY) naming the stream; the job completes.
#   resealed_update_restarts_from_zero: a scripted site sends the first
#            chunk of its sealed update, loses its link as if killed,
#            comes back and seals the update again to a new key under the
#            same stream id: the coordinator restarts the take (TensorAck
#            0) and takes the update in that attempt.
#   no_accepted_evaluation_is_none: a scripted site alone in a one-round
#            job trains honestly and reports NaN for the final evaluation:
#            refused, so the job ends with no accuracy, which watch's final
#            line gives as accuracy=none (never nan) and status as none with
#            why (the refused report, from the audit trail).
#   damaged_journal_is_refused_at_start: page bytes of the coordinator's
#            journal overwritten; xfed-coord refuses to start, exits 1
#            naming the file, the damage and the recovery, and logs it; the
#            recovery it names (the copy `xfed-coord backup` made) works.
# usage: integrity.sh BUILD_DIR NAME
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
name=${2:?scenario}
label=$name
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
fed_name=integ
coord_flags=(--residency-policy off)
# Deadlines no load reaches: nothing here waits for one to pass.
coord_config='{"eval_timeout_s": 600}'
scripted=$build/tests/xfed-scripted-site
setup_work xf-integ
case $name in
  reports_are_checked | reports_are_checked_at_the_aggregator | update_weight_is_checked | \
    wrong_digest_is_an_integrity_error | resealed_update_restarts_from_zero | \
    no_accepted_evaluation_is_none | damaged_journal_is_refused_at_start) ;;
  *) echo "unknown scenario '$name'" >&2; exit 2 ;;
esac
[[ -x $scripted ]] || fail "no $scripted: build the target xfed-scripted-site"

# scripted_site MODE NAME [REGION]: a scripted site NAME (region eu, 20000
# training records of fmnist) dialling the coordinator, or the aggregator of
# REGION; returns once the coordinator knows of it (through the aggregator:
# once the aggregator announced it among the sites behind it).
scripted_site() {
  local i to=$port log=$work/logs/coord.log
  if [[ -n ${3:-} ]]; then
    to=$(cat "$work/agg-$3.port")
    log=$work/logs/agg-$3.log
  fi
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind site --name "$2" --region eu >/dev/null
  # shellcheck disable=SC2046
  "$scripted" --mode "$1" --coordinator "127.0.0.1:$to" $(tls "$2") --site "$2" --region eu \
    --records 20000:3000 >"$work/logs/$2.log" 2>&1 &
  pids+=($!)
  scripted_pid=$!
  for ((i = 0; i < 1200; i++)); do
    if grep -q "event=site_announced site=$2 " "$log"; then
      [[ -z ${3:-} ]] && return 0
      grep "event=site_announced site=agg-$3 " "$work/logs/coord.log" | tail -n 1 |
        grep -q "sites_behind=$((behind[$3] + 1))\$" && return 0
    fi
    sleep 0.1
  done
  fail "the scripted site $2 did not announce itself: $(cat "$work/logs/$2.log")"
}
submit() { cli job submit "$1" --json | json_field job_id; }
# log_has LOG PATTERN...: one line of $work/logs/LOG.log matches every
# extended regular expression given; coord_has PATTERN...: of the
# coordinator's log.
log_has() {
  local line log=$work/logs/$1.log
  shift
  while IFS= read -r line; do
    local p ok=1
    for p in "$@"; do [[ $line =~ $p ]] || { ok=0; break; }; done
    ((ok)) && return 0
  done <"$log"
  return 1
}
coord_has() { log_has coord "$@"; }

# bare_federation: certificates for the coordinator and both users, and the
# coordinator alone, with no site.
bare_federation() {
  XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation "$fed_name" >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
  XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name cora --role compliance >/dev/null
  start_coord
}

# spec FILE NAME MODEL [MEMBERS]: a deterministic job on the fmnist shards,
# with MEMBERS (more of its JSON) when given.
spec() {
  cat >"$1" <<JSON
{"name": "$2", "model": $3, "data": {"dataset": "fmnist", "tags": ["fmnist"]},
 "rounds": 3, "min_sites": 2, "round_deadline_s": 600,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05}, "seed": 11${4:+, $4}}
JSON
}

# lies_are_refused WHO: a scripted liar dials WHO (coord, or agg-eu) in a
# job with the honest sites; WHO refuses each lie, tells the liar, logs it
# and audits it in its own trail, and the job's figures (status, list,
# metrics, model) equal those of the same job run by the honest sites alone.
lies_are_refused() {
  local who=$1 region='' trail i n v f a b
  [[ $who == agg-* ]] && region=${who#agg-}
  scripted_site liar liar "$region"
  # Behind an aggregator, with no residency policy, a job runs regionally.
  spec "$work/job.json" checked '{"arch": "logreg"}' ${region:+'"topology": "regional"'}
  j1=$(submit "$work/job.json")
  wait_done "$j1"
  # Each lie refused, naming the site, the field and the value; the
  # evaluation's too.
  log_has "$who" "event=report_refused job=$j1 round=1 " "site=liar " "report=training report" \
    "field=test_accuracy value=7.5 " || fail "$who did not refuse accuracy 7.5"
  log_has "$who" "event=report_refused job=$j1 round=2 " "site=liar " "field=test_accuracy value=nan " ||
    fail "$who did not refuse accuracy NaN"
  log_has "$who" "event=report_refused job=$j1 round=3 " "site=liar " "field=samples value=20001 " \
    "1 to 20000" || fail "$who did not refuse 20001 samples of a 20000-record dataset"
  log_has "$who" "event=report_refused job=$j1 " "site=liar " "report=evaluation report" \
    "field=test_accuracy value=7.5 " || fail "$who did not refuse the evaluation's accuracy 7.5"
  # In its audit trail, with the same words.
  trail=$work/audit.jsonl
  if [[ $who == coord ]]; then
    comp audit export >"$trail" || fail "audit export: $(cat "$trail")"
  else
    XF_LOG_LEVEL=warn "$xfed" audit export --db "$work/$who/audit.db" >"$trail" ||
      fail "audit export of $who's trail: $(cat "$trail")"
  fi
  n=$(grep '"refused_report"' "$trail" | grep -c '\\"site\\": *\\"liar\\"\|"site": *"liar"' || true)
  ((n == 4)) || fail "$n refused_report rows in $who's trail name the scripted site, not 4: $(grep refused_report "$trail")"
  for v in 'test_accuracy.*7\.5' 'test_accuracy.*nan' 'samples.*20001'; do
    grep '"refused_report"' "$trail" | grep -q "$v" ||
      fail "no refused_report row in $who's trail names $v"
  done
  # The site was told each time, and none of its updates was taken.
  n=$(grep -c 'event=error site=liar code=XF_ERANGE .*is refused' "$work/logs/liar.log" || true)
  ((n == 4)) || fail "the scripted site heard of $n refusals, not 4: $(cat "$work/logs/liar.log")"
  grep -q 'event=update_taken site=liar ' "$work/logs/liar.log" && fail "an update of the lying site was taken"
  log_has "$who" "event=update_received job=$j1 from=s1 " || fail "$who took no update of s1"
  log_has "$who" "event=update_received job=$j1 from=liar " && fail "$who took the liar's update"
  cli job metrics "$j1" --json >"$work/m1.json"
  grep -q '"liar"' "$work/m1.json" && fail "the lying site's figures are in the job's metrics"
  # The honest sites alone, the same job: the same model and figures. WHO
  # has let the liar go (and an aggregator told the coordinator) before the
  # second job draws its sites.
  kill -TERM "$scripted_pid"
  wait "$scripted_pid" 2>/dev/null || true
  for ((i = 0; i < 1200; i++)); do
    if log_has "$who" "event=peer_closed " "/site/liar end="; then
      [[ -z $region ]] && break
      grep "event=site_announced site=$who " "$work/logs/coord.log" | tail -n 1 |
        grep -q "sites_behind=${behind[$region]}\$" && break
    fi
    sleep 0.1
  done
  ((i < 1200)) || fail "$who did not let the scripted site go"
  j2=$(submit "$work/job.json")
  wait_done "$j2"
  for f in model_digest test_accuracy test_loss eval_sites; do
    a=$(job_field "$j1" $f) b=$(job_field "$j2" $f)
    [[ -n $a && $a == "$b" ]] || fail "$f: '$a' with the lying site, '$b' with the honest sites alone"
  done
  # `xfed job list`: state, round and accuracy.
  a=$(cli job list | awk -v j="$j1" '$1 == j {print $3, $4, $6}')
  b=$(cli job list | awk -v j="$j2" '$1 == j {print $3, $4, $6}')
  [[ -n $a && $a == "$b" ]] || fail "job list: '$a' with the lying site, '$b' with the honest sites alone"
  cli job metrics "$j2" --json >"$work/m2.json"
  sed 's/"job_id": *"[0-9]*"//' "$work/m1.json" >"$work/m1.rows"
  sed 's/"job_id": *"[0-9]*"//' "$work/m2.json" >"$work/m2.rows"
  cmp -s "$work/m1.rows" "$work/m2.rows" ||
    fail "the metrics differ from the honest sites' alone: $(diff "$work/m1.rows" "$work/m2.rows" | head -n 20)"
  echo "$who refused and audited four lies; job $j1 equals job $j2 of the honest sites alone:" \
    "accuracy $(job_field "$j1" test_accuracy), model $(job_field "$j1" model_digest)"
}

case $name in
reports_are_checked)
  federation s1:eu:direct s2:eu:direct
  lies_are_refused coord
  ;;

reports_are_checked_at_the_aggregator)
  federation s1:eu:eu s2:eu:eu
  lies_are_refused agg-eu
  # The coordinator heard none of it: the aggregator refused first.
  coord_has "event=report_refused " && fail "the lies reached the coordinator"
  coord_has "from=liar " && fail "the coordinator took something of the lying site"
  ;;

wrong_digest_is_an_integrity_error)
  federation s1:eu:direct s2:eu:direct
  scripted_site bad-digest forger
  spec "$work/job.json" digest '{"arch": "logreg"}'
  j=$(submit "$work/job.json")
  wait_done "$j"
  grep -E -q 'event=error site=forger code=XF_EINTEGRITY message=".*update stream [0-9]+ is refused: tensor stream [0-9]+ has digest' \
    "$work/logs/forger.log" ||
    fail "no Error(XF_EINTEGRITY) naming the stream reached the site: $(cat "$work/logs/forger.log")"
  coord_has "event=update_dropped job=$j from=forger " "digest" ||
    fail "the coordinator did not drop the stream"
  echo "a wrong digest is answered Error(XF_EINTEGRITY) naming the stream; job $j done"
  ;;

update_weight_is_checked)
  federation s1:eu:direct s2:eu:direct
  scripted_site heavy heavy
  spec "$work/job.json" weight '{"arch": "logreg"}'
  j=$(submit "$work/job.json")
  wait_done "$j"
  coord_has "event=report_refused job=$j round=1 " "site=heavy " "report=update " \
    "field=weight value=20001 " "1 to 20000" || fail "the weight of 20001 records was not refused"
  comp audit export >"$work/audit.jsonl" || fail "audit export: $(cat "$work/audit.jsonl")"
  grep '"refused_report"' "$work/audit.jsonl" | grep 'heavy' | grep -q 'weight.*20001' ||
    fail "no refused_report row names the site, the weight and 20001: $(grep refused_report "$work/audit.jsonl")"
  grep -q 'event=error site=heavy code=XF_ERANGE .*weight is 20001 but must be 1 to 20000' \
    "$work/logs/heavy.log" || fail "the site was not told: $(cat "$work/logs/heavy.log")"
  coord_has "event=update_dropped job=$j from=heavy " || fail "the coordinator did not drop the stream"
  # Its honest updates of rounds 2 and 3 are taken, at their weight.
  n=$(grep -c "event=update_received job=$j from=heavy sites=1 weight=20000 " "$work/logs/coord.log" || true)
  ((n == 2)) || fail "$n honest updates of the site were taken, not 2 (rounds 2 and 3)"
  coord_has "event=update_received job=$j from=heavy .*weight=20001 " && fail "the heavy update was taken"
  echo "an update claiming 20001 records of a 20000-record dataset is refused and audited; job $j done"
  ;;

resealed_update_restarts_from_zero)
  federation s1:eu:direct s2:eu:direct
  scripted_site reseal phoenix
  # mlp [512] on 784 inputs: 407,050 parameters, two sealed chunks.
  spec "$work/job.json" reseal '{"arch": "mlp", "hidden": [512]}'
  j=$(submit "$work/job.json")
  wait_done "$j"
  log=$work/logs/phoenix.log
  grep -q "event=update_partial site=phoenix job=$j round=1 .*chunks=2" "$log" || fail "no partial upload: $(cat "$log")"
  grep -q "event=restarting site=phoenix job=$j round=1" "$log" || fail "the scripted site did not restart"
  # Sealed again to a new key under the same stream id: taken from 0.
  stream=$(sed -n "s/.*event=update_partial site=phoenix job=$j round=1 stream=\\([0-9]*\\).*/\\1/p" "$log")
  awk "/event=update_resealed site=phoenix job=$j round=1 /{p=1} p" "$log" | grep -q "event=update_ack site=phoenix .*stream=$stream offset=0" ||
    fail "the resealed update was not taken from offset 0: $(cat "$log")"
  grep -q "event=update_taken site=phoenix job=$j round=1 stream=$stream" "$log" ||
    fail "the resealed update was not taken: $(cat "$log")"
  coord_has "event=update_restarted job=$j from=phoenix stream=$stream" ||
    fail "the coordinator did not log the restart of the take"
  coord_has "event=update_received job=$j from=phoenix " || fail "the coordinator did not take the update"
  coord_has "event=update_dropped job=$j from=phoenix" && fail "the resealed update was dropped"
  coord_has "event=round_committed job=$j round=1 " || fail "round 1 did not commit"
  echo "a site restarted mid-upload resealed its update; the take restarted from 0; job $j done"
  ;;

no_accepted_evaluation_is_none)
  bare_federation
  scripted_site nan-evaluation nanny
  spec "$work/job.json" noeval '{"arch": "logreg"}'
  sed -i 's/"rounds": 3, "min_sites": 2/"rounds": 1, "min_sites": 1/' "$work/job.json"
  j=$(submit "$work/job.json")
  wait_done "$j"
  coord_has "event=report_refused job=$j " "site=nanny " "report=evaluation report" \
    "field=test_accuracy value=nan " || fail "the evaluation's NaN was not refused"
  cli job watch "$j" >"$work/watch.out" 2>/dev/null || fail "xfed job watch $j"
  grep -qx "final accuracy=none rounds=1 epsilon=none uplink_bytes=[0-9]*" "$work/watch.out" ||
    fail "watch's final line: $(cat "$work/watch.out")"
  cli job status "$j" >"$work/status.out" || fail "xfed job status $j"
  grep -q "^accuracy    none: no site's evaluation was accepted: 1 report refused (the newest: site nanny's evaluation report, test_accuracy nan " \
    "$work/status.out" || fail "status does not say none and why: $(cat "$work/status.out")"
  grep -qi "nan\$" "$work/status.out" && fail "status shows a bare nan: $(cat "$work/status.out")"
  [[ $(job_field "$j" test_accuracy) == null ]] || fail "status --json's test_accuracy is not null"
  echo "a job whose only evaluation was refused ends accuracy=none, and status says why; job $j done"
  ;;

damaged_journal_is_refused_at_start)
  bare_federation
  cli job list >/dev/null || fail "the coordinator does not answer"
  XF_LOG_LEVEL=warn "$coord_bin" backup --state "$work/coord" --out "$work/coord-backup.db" ||
    fail "xfed-coord backup failed"
  stop_daemons
  db=$work/coord/coord.db
  [[ ! -s $db-wal ]] || fail "the journal's WAL was not checkpointed at a clean stop"
  pages=$(($(stat -c %s "$db") / 4096))
  ((pages >= 4)) || fail "the journal has $pages pages"
  # Page 3 is a table's root: its header and first cells overwritten.
  head -c 512 /dev/urandom | tr '\000' '\377' |
    dd of="$db" bs=1 seek=$((2 * 4096)) conv=notrunc status=none
  set +e
  # shellcheck disable=SC2046
  "$coord_bin" $(tls coord) "${coord_flags[@]}" --state "$work/coord" --listen 127.0.0.1:0 \
    --port-file "$work/coord2.port" >"$work/start.out" 2>"$work/start.err"
  status=$?
  set -e
  ((status == 1)) || fail "xfed-coord exited $status on a damaged journal, not 1"
  [[ ! -s $work/coord2.port ]] || fail "xfed-coord listened on a damaged journal"
  for want in "$db: " "the journal is damaged" "quick_check" "Page 3" "coord.db-wal" \
    "xfed-coord backup --state $work/coord --out FILE" "start again"; do
    grep -qF -- "$want" "$work/start.err" || fail "its error does not say '$want': $(cat "$work/start.err")"
  done
  grep -q "event=journal_damaged file=$db " "$work/start.err" || fail "no journal_damaged log line"
  # The recovery it names: move the damaged files aside, copy the backup in.
  mv "$db" "$work/coord.db.damaged"
  rm -f "$db-wal" "$db-shm"
  cp "$work/coord-backup.db" "$db"
  start_coord
  cli job list >/dev/null || fail "the coordinator restored from its backup does not answer"
  echo "a damaged journal is refused at start with the way back; the backup it names restores it"
  ;;
esac
finish
