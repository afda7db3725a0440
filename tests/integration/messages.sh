#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the programs say when a user gets something wrong, with the real
# daemons: a federation of two sites holding fmnist, the coordinator without
# a residency policy, serving --metrics and --dashboard.
#   unknown_dataset_is_a_usage_error_with_a_suggestion: a spec naming
#            "fmnst" is refused by check and by submission with exit 1, naming
#            data.dataset, the datasets sites registered and "did you mean
#            'fmnist'?", not as a policy denial.
#   check_without_a_policy_says_so: `policy check` says the coordinator runs
#            without a policy (no "coordinator in ?") and heads the group's
#            own minimum GROUP_MIN, apart from the job's min_sites.
#   cli_at_a_web_port_names_it: the CLI pointed at the dashboard's or the
#            metrics' port says which port it looks like and which flag to fix.
#   researchers_spec_is_not_a_coordinator_error: a spec the coordinator
#            refuses (a model too large) is logged at warn, never error.
#   audit_list_summarizes_detail: `audit list` prints a refusal's scalar
#            details on one short line, the nested admission by name only;
#            --json has it whole.
#   bad_chartjs_says_its_cause_once: XF_CHARTJS naming a missing file stops
#            the dashboard's coordinator with one sentence and its cause.
#   bad_address_names_the_flag: xfed-coord's --listen and --upstream read
#            HOST:PORT in the grammar the site and the CLI read (base/name.h),
#            and a bad one is a usage error naming the flag and the fault.
# usage: messages.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: messages.sh BUILD_DIR}" && pwd)
label=messages
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"

setup_work xf-messages
coord_flags=(--residency-policy off --dashboard 127.0.0.1:0 --dashboard-port-file "$work/dash.port"
             --metrics 127.0.0.1:0 --metrics-port-file "$work/metrics.port")
federation s1:eu:direct s2:us:direct
wait_file "$work/dash.port"
wait_file "$work/metrics.port"

# job NAME MIN_SITES [MODEL]: a spec on DATASET (fmnist unless set).
job() {
  local model=${3:-'{"arch": "mlp", "hidden": [16]}'}
  cat >"$work/$1.json" <<JSON
{"name": "$1", "model": $model,
 "data": {"dataset": "${DATASET:-fmnist}", "tags": ["fmnist"]}, "rounds": 1, "min_sites": $2,
 "local": {"epochs": 1, "batch_size": 32, "lr": 0.1}, "seed": 3}
JSON
  echo "$work/$1.json"
}
# expect STATUS WHAT FILE -- COMMAND...: runs COMMAND (stdout and stderr to
# FILE) and fails naming WHAT unless it exits with STATUS.
expect() {
  local want=$1 what=$2 out=$3 st=0
  shift 4
  "$@" >"$out" 2>&1 || st=$?
  ((st == want)) || fail "$what: exit $st, not $want: $(cat "$out")"
}
has() { grep -qF -- "$2" "$1" || fail "$3: no \"$2\" in: $(cat "$1")"; }
lacks() { ! grep -qF -- "$2" "$1" || fail "$3: \"$2\" in: $(cat "$1")"; }

# ---- unknown_dataset_is_a_usage_error_with_a_suggestion -----------------------------------
label=unknown_dataset_is_a_usage_error_with_a_suggestion
typo=$(DATASET=fmnst job typo 2)
for verb in "policy check" "job submit"; do
  # shellcheck disable=SC2086 # two words
  expect 1 "$verb of dataset fmnst" "$work/typo.out" -- cli $verb "$typo"
  has "$work/typo.out" "data.dataset: no site holds a dataset 'fmnst'" "$verb"
  has "$work/typo.out" "the datasets sites have registered is fmnist; did you mean 'fmnist'?" "$verb"
  lacks "$work/typo.out" "denied by policy" "$verb"
done

# ---- check_without_a_policy_says_so ----------------------------------------------------------
label=check_without_a_policy_says_so
expect 0 "policy check" "$work/check.out" -- cli policy check "$(job plain 2)"
has "$work/check.out" "the coordinator runs without one (--residency-policy off)" "check"
lacks "$work/check.out" "coordinator in ?" "check"
has "$work/check.out" "GROUP_MIN" "check"
lacks "$work/check.out" "MIN_SITES" "check"
has "$work/check.out" "verdict: runs: 2 sites eligible, 2 invited each round, min_sites 2" "check"

# ---- cli_at_a_web_port_names_it --------------------------------------------------------------
label=cli_at_a_web_port_names_it
for web in dash:"HTTPS --dashboard port" metrics:"HTTP --metrics port"; do
  # shellcheck disable=SC2046
  expect 2 "job list at the ${web%%:*} port" "$work/web.out" -- \
    env XF_LOG_LEVEL=warn "$xfed" job list --coordinator "127.0.0.1:$(cat "$work/${web%%:*}.port")" \
    $(tls rita) --timeout 10
  has "$work/web.out" "it looks like the coordinator's ${web#*:}" "${web%%:*}"
  has "$work/web.out" "Give --coordinator (or XFED_COORDINATOR) the address of its --listen flag" "${web%%:*}"
done
# A web server that resets the connection on the ClientHello, before any
# answer of its own reaches the CLI (as one that closes with the hello
# unread does on a loaded machine), is still named: the CLI asks it a plain
# HTTP request, which it answers.
python3 - "$work/rst.port" <<'PY' &
import socket, struct, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1])
while True:
    c, _ = s.accept()
    first = c.recv(1)
    if first == b"\x16":  # a TLS record: reset, unread
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    else:
        c.recv(4096)
        c.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
    c.close()
PY
pids+=($!)
wait_file "$work/rst.port"
# shellcheck disable=SC2046
expect 2 "job list at a web server that resets the hello" "$work/web.out" -- \
  env XF_LOG_LEVEL=warn "$xfed" job list --coordinator "127.0.0.1:$(cat "$work/rst.port")" \
  $(tls rita) --timeout 10
has "$work/web.out" "it looks like the coordinator's HTTP --metrics port" reset

# ---- researchers_spec_is_not_a_coordinator_error ---------------------------------------------
label=researchers_spec_is_not_a_coordinator_error
# Within the bound on hidden layers alone (checked locally), past it once
# the sites' 784 input features are counted (at the coordinator).
huge=$(job huge 2 '{"arch": "mlp", "hidden": [8192, 30000]}')
expect 1 "submit of a model too large" "$work/huge.out" -- cli job submit "$huge"
has "$work/huge.out" "model.hidden" "submit"
grep -q 'level=warn event=job_refused .*name=huge' "$work/logs/coord.log" ||
  fail "no warn job_refused for the refused spec in the coordinator's log"
! grep 'level=error' "$work/logs/coord.log" | grep -q 'submit_failed\|parameters' ||
  fail "the coordinator logged the spec as an error: $(grep 'level=error' "$work/logs/coord.log")"

# ---- audit_list_summarizes_detail ------------------------------------------------------------
label=audit_list_summarizes_detail
expect 3 "submit of a job on more sites than there are" "$work/short.out" -- cli job submit "$(job short 5)"
expect 0 "audit list" "$work/list.out" -- comp audit list
grep refused_task "$work/list.out" >"$work/refused.out" || fail "no refused_task row: $(cat "$work/list.out")"
has "$work/refused.out" "verdict=short" "the refusal's row"
has "$work/refused.out" "+admission" "the refusal's row"
lacks "$work/refused.out" '{"' "the refusal's row"
awk 'length($0) > 260 { exit 1 }' "$work/list.out" || fail "a row is longer than 260 characters: $(cat "$work/list.out")"
expect 0 "audit list --json" "$work/list.json" -- comp audit list --json
has "$work/list.json" '"admission":' "--json"

# ---- bad_chartjs_says_its_cause_once ---------------------------------------------------------
label=bad_chartjs_says_its_cause_once
# shellcheck disable=SC2046
expect 1 "xfed-coord with XF_CHARTJS=/nonexistent/chart.js" "$work/chartjs.out" -- \
  env XF_CHARTJS=/nonexistent/chart.js XF_LOG_LEVEL=warn "$coord_bin" $(tls coord) \
  --residency-policy off --state "$work/coord-2" --listen 127.0.0.1:0 --dashboard 127.0.0.1:0
has "$work/chartjs.out" "XF_CHARTJS names '/nonexistent/chart.js', which cannot be read as Chart.js: cannot open: No such file or directory" "start"
(($(grep -o 'XF_CHARTJS names' "$work/chartjs.out" | wc -l) == 1)) || fail "said twice: $(cat "$work/chartjs.out")"
lacks "$work/chartjs.out" ":  (" "start"

# ---- bad_address_names_the_flag ----------------------------------------------------------------
label=bad_address_names_the_flag
expect 2 "xfed-coord --listen 127.0.0.1" "$work/listen.out" -- "$coord_bin" --listen 127.0.0.1
has "$work/listen.out" "--listen '127.0.0.1' is not HOST:PORT" "--listen"
expect 2 "xfed-coord --upstream with port 0" "$work/upstream.out" -- \
  "$coord_bin" --role regional --region eu --upstream 127.0.0.1:0
has "$work/upstream.out" "--upstream '127.0.0.1:0': the port must be a number from 1 to 65535" "--upstream"

label=messages
finish
echo "ok: messages"
