#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A residency policy of 60,000 sites managed through the real coordinator
# (xfed-coord --region r01, no sites) with real certificates, over frames of
# 64 KiB (max_frame 65536) so that every document and every page of the
# trail is larger than one frame:
#   - `xfed policy import` of a valid document of 60,000 sites in 20 regions,
#     each site with a dataset, answered with the version and counts;
#   - `xfed policy export` gives byte for byte what the library exports from
#     a local database that imported the same document;
#   - a researcher's import is refused before the coordinator gathers it;
#   - single edits (region add, site add, dataset add, dataset tag, rule add,
#     rule rm) each make the next version and are answered with that version
#     and the one change, not the document; the coordinator's export after
#     them equals the local database's after the same edits;
#   - `xfed audit list`, `export` and `verify` read the whole trail page by
#     page (rows without a gap, more bytes than one frame).
# Prints how long the import, the export and each edit took; asserts none
# of it (timings depend on the machine's load).
# usage: policy_scale.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
label=policy_scale
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"
sites_n=60000
coord_flags=(--region r01)
coord_config='{"max_frame": 65536}'
setup_work xf-policy-scale
# Gathering and checking 60,000 sites takes the coordinator tens of seconds on
# a loaded machine, past the client's 30 s default: the requests here wait as
# long as the test's own limit instead, since only the answers are asserted.
cli() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls rita) --timeout 600; }
comp() { XF_LOG_LEVEL=warn "$xfed" "$@" --coordinator "127.0.0.1:$port" $(tls cora) --timeout 600; }

XF_LOG_LEVEL=warn "$xfed" pki init --dir "$fed" --federation "$fed_name" >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind coordinator --name coord >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name cora --role compliance >/dev/null
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind user --name rita --role researcher >/dev/null
start_coord

# The document: 20 regions, sites_n sites round-robin over them, one dataset
# per site (classification and tag by the site's number), and two rules.
awk -v sites="$sites_n" 'BEGIN {
  regions = 20
  split("public internal confidential restricted", cls, " ")
  printf "{\n  \"regions\": [\n"
  for (r = 0; r < regions; r++)
    printf "    {\"name\": \"r%02d\", \"jurisdiction\": \"J%d\"}%s\n", r, r % 4, r < regions - 1 ? "," : ""
  printf "  ],\n  \"sites\": [\n"
  for (s = 0; s < sites; s++)
    printf "    {\"name\": \"s%06d\", \"region\": \"r%02d\"}%s\n", s, s % regions, s < sites - 1 ? "," : ""
  printf "  ],\n  \"datasets\": [\n"
  for (s = 0; s < sites; s++)
    printf "    {\"name\": \"d\", \"site\": \"s%06d\", \"classification\": \"%s\", \"tags\": [\"t%d\"]}%s\n",
      s, cls[s % 4 + 1], s % 3, s < sites - 1 ? "," : ""
  printf "  ],\n  \"rules\": [\n"
  printf "    {\"id\": \"r00-out\", \"effect\": \"allow\", \"kind\": \"regional_aggregate\", \"select\": {\"region\": \"r00\"}, \"destinations\": [\"r01\"], \"conditions\": {\"max_epsilon\": 3, \"min_cohort\": 2, \"require_secagg\": true}},\n"
  printf "    {\"id\": \"deny-restricted\", \"effect\": \"deny\", \"kind\": \"update\", \"select\": {\"classification\": \"restricted\"}, \"destinations\": [\"*\"]}\n"
  printf "  ]\n}\n"
}' >"$work/policy.json"

now() { date +%s.%N; }
took() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
local_db() { XF_LOG_LEVEL=warn "$xfed" policy "$@" --db "$work/local.db" --author local >/dev/null; }
times=()

# The import, answered with the version and how much it added.
t=$(now)
comp policy import "$work/policy.json" --reason "60,000 sites" --json >"$work/import.out" 2>&1 ||
  fail "the import: $(head -c 2000 "$work/import.out")"
times+=("import $(took "$t") s")
[[ $(json_field version <"$work/import.out") == 1 ]] || fail "the import is not version 1: $(head -c 2000 "$work/import.out")"
added=$(json_field added <"$work/import.out")
((added == 20 + 2 * sites_n + 2)) || fail "the import added $added things, not $((20 + 2 * sites_n + 2))"
((${#added} > 0 && $(wc -c <"$work/import.out") < 100000)) ||
  fail "the import's answer is $(wc -c <"$work/import.out") bytes: the document came back"

# The export, byte for byte the library's own export of the same document.
local_db import "$work/policy.json" --reason "the same 60,000 sites"
XF_LOG_LEVEL=warn "$xfed" policy export --db "$work/local.db" --out "$work/local.json" >/dev/null
t=$(now)
comp policy export --out "$work/remote.json" >"$work/export.out" 2>&1 || fail "the export: $(cat "$work/export.out")"
times+=("export $(took "$t") s")
cmp -s "$work/local.json" "$work/remote.json" ||
  fail "the coordinator's export differs from the library's: $(cmp "$work/local.json" "$work/remote.json" || true)"
n=$(grep -c '"site": "s[0-9]*"' "$work/remote.json" || true)
((n == sites_n)) || fail "the export holds $n datasets, not $sites_n"
echo "export: $(wc -c <"$work/remote.json") bytes, the same as the library's"

# A researcher's document is refused before it is gathered; the coordinator
# goes on serving.
if cli policy import "$work/policy.json" --reason "not mine to make" >"$work/rita.out" 2>&1; then
  fail "a researcher imported a policy"
fi
grep -q "only a compliance or admin identity" "$work/rita.out" || fail "the researcher's refusal: $(cat "$work/rita.out")"
grep -q "event=document_refused .*/user/rita/.*reason=role" "$work/logs/coord.log" ||
  fail "no document_refused line for the researcher"
cli policy log >/dev/null || fail "the coordinator stopped answering after the refusal"

# Single edits: each the next version, answered with that version and one
# change, made the same way on the local database.
version=1
edit() { # edit NAME ARGS...: the edit on the coordinator and on the local database
  local what=$1
  shift
  t=$(now)
  comp policy "$@" --reason "$what" --json >"$work/edit.out" 2>&1 || fail "$what: $(cat "$work/edit.out")"
  times+=("$what $(took "$t") s")
  version=$((version + 1))
  [[ $(json_field version <"$work/edit.out") == "$version" ]] ||
    fail "$what did not make version $version: $(cat "$work/edit.out")"
  local a r c
  a=$(json_field added <"$work/edit.out") r=$(json_field removed <"$work/edit.out")
  c=$(json_field changed <"$work/edit.out")
  ((a + r + c == 1)) || fail "$what changed $a + $r + $c things: $(cat "$work/edit.out")"
  (($(wc -c <"$work/edit.out") < 4096)) || fail "$what was answered with $(wc -c <"$work/edit.out") bytes"
  local_db "$@" --reason "$what"
}
edit "region add" region add --name zz --jurisdiction Z
edit "site add" site add --name s-new --region zz
edit "dataset add" dataset add --site s-new --name d --class internal
edit "dataset tag" dataset tag --site s-new --name d --tag t9
edit "rule add" rule add --json-rule \
  '{"id": "zz-out", "effect": "allow", "kind": "update", "select": {"region": "zz"}, "destinations": ["r01"]}'
edit "rule rm" rule rm --id r00-out
XF_LOG_LEVEL=warn "$xfed" policy export --db "$work/local.db" --out "$work/local.json" >/dev/null
comp policy export --out "$work/remote.json" >"$work/export.out" 2>&1 || fail "the export after the edits: $(cat "$work/export.out")"
cmp -s "$work/local.json" "$work/remote.json" ||
  fail "after the edits the coordinator's export differs from the library's: $(cmp "$work/local.json" "$work/remote.json" || true)"
comp policy log >"$work/log.out" 2>&1 || fail "policy log: $(cat "$work/log.out")"
for ((v = 1; v <= version; v++)); do
  grep -q "^ *$v " "$work/log.out" || fail "policy log lacks version $v: $(cat "$work/log.out")"
done

# The trail, page by page: every row once, in order, more bytes than one
# frame; each change has its row.
comp audit export --out "$work/audit.jsonl" >"$work/audit.out" 2>&1 || fail "audit export: $(cat "$work/audit.out")"
rows=$(wc -l <"$work/audit.jsonl")
seqs=$(sed -n 's/^{"seq": *\([0-9]*\),.*/\1/p' "$work/audit.jsonl" | tr '\n' ' ')
[[ $seqs == "$(seq -s ' ' 1 "$rows") " ]] || fail "the exported trail's rows are not 1 to $rows in order: $seqs"
(($(wc -c <"$work/audit.jsonl") > 65536)) || fail "the trail is $(wc -c <"$work/audit.jsonl") bytes: it fits one frame"
n=$(grep -c '"policy_change"' "$work/audit.jsonl" || true)
((n == version)) || fail "$n policy_change rows, not $version"
comp audit list >"$work/list.out" 2>&1 || fail "audit list: $(head -c 2000 "$work/list.out")"
n=$(grep -c 'policy_change' "$work/list.out" || true)
((n == version)) || fail "audit list shows $n policy_change rows, not $version"
verify_coord_trail

stop_daemons
check_sanitizers
printf '%s sites:' "$sites_n"
printf ' %s;' "${times[@]}"
echo
