#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The compliance officer's offline checks on a federation of the real daemons
# on loopback with real certificates (a global coordinator in us, site-1
# dialling it, site-2 behind the aggregator agg-eu):
#   - `xfed-coord backup` copies the running coordinator's journal and the
#     running aggregator's trail; `xfed audit verify --db` verifies both
#     backups offline, naming what each file is, and leaves them unchanged
#     (bytes and modification time, nothing created beside them);
#   - a plain copy of the running aggregator's trail without its -wal file is
#     refused, saying to use `xfed-coord backup`; the live trail (its -wal
#     beside it) verifies;
#   - a file that is not a trail (a policy database, a text file) is refused;
#   - datasets the sites register reach the policy as pending: the one each
#     site announced at start, and one registered at site-2 while it runs
#     (announced again on SIGHUP, through the aggregator); adopting by name
#     makes exactly one version that the export lists, --all the rest, and
#     nothing is pending after; a name that is not pending is refused.
# usage: compliance.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
label=compliance
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

setup_work compliance
federation "site-1:us:direct" "site-2:eu:eu"
comp policy region add --name us --reason "the coordinator's region" >/dev/null ||
  fail "a compliance edit was refused"
# A row in agg-eu's trail: a user certificate is refused there.
eu_port=$(cat "$work/agg-eu.port")
# shellcheck disable=SC2046
XF_LOG_LEVEL=warn "$xfed" job list --coordinator "127.0.0.1:$eu_port" $(tls cora) \
  >/dev/null 2>&1 && fail "agg-eu served a user"

off() { XF_LOG_LEVEL=warn "$xfed" "$@"; }
stamp() { stat -c '%s %Y %y' "$1"; sha256sum <"$1"; }

# Backups of both running daemons, verified offline.
"$coord_bin" backup --state "$work/coord" --out "$work/coord-backup.db" 2>/dev/null ||
  fail "xfed-coord backup of the coordinator"
"$coord_bin" backup --state "$work/agg-eu" --out "$work/agg-backup.db" 2>/dev/null ||
  fail "xfed-coord backup of the regional aggregator"
mkdir "$work/offline"
mv "$work/coord-backup.db" "$work/agg-backup.db" "$work/offline/"
before=$(stamp "$work/offline/coord-backup.db")
out=$(off audit verify --db "$work/offline/coord-backup.db" 2>&1) || fail "coordinator backup: $out"
[[ $out == "coordinator journal: "*" rows, chain intact"* ]] || fail "coordinator backup: $out"
[[ $out != *"0 rows"* ]] || fail "the coordinator's backup holds no rows: $out"
[[ $(stamp "$work/offline/coord-backup.db") == "$before" ]] || fail "verify changed the backup"
out=$(off audit verify --db "$work/offline/agg-backup.db" 2>&1) || fail "aggregator backup: $out"
[[ $out == "audit trail: "*" rows, chain intact"* ]] || fail "aggregator backup: $out"
[[ $out != *"0 rows"* ]] || fail "the aggregator's backup holds no rows: $out"
off audit list --db "$work/offline/agg-backup.db" | grep -q refused_connection ||
  fail "the aggregator's backup lacks the refused connection"
off audit export --db "$work/offline/coord-backup.db" | grep -q '"kind":"policy_change"' ||
  fail "the coordinator's backup lacks the policy change"
left=$(find "$work/offline" -name '*-wal' -o -name '*-shm')
[[ -z $left ]] || fail "reading the backups left files beside them: $left"

# A plain copy of the live trail, without its -wal, is refused.
cp "$work/agg-eu/audit.db" "$work/offline/agg-copy.db"
if out=$(off audit verify --db "$work/offline/agg-copy.db" 2>&1); then
  fail "a copy without its -wal verified: $out"
fi
[[ $out == *"without its -wal file"* && $out == *"xfed-coord backup"* ]] ||
  fail "the refusal of the plain copy does not say what to do: $out"
out=$(off audit verify --db "$work/agg-eu/audit.db" 2>&1) || fail "the live trail: $out"

# Files that are not trails.
off policy region add --db "$work/offline/policy.db" --name us --author cora --reason draft >/dev/null
if out=$(off audit verify --db "$work/offline/policy.db" 2>&1); then fail "a policy database verified"; fi
[[ $out == *"not an audit trail"* ]] || fail "policy database: $out"
echo "not a database" >"$work/offline/notes.txt"
if out=$(off audit verify --db "$work/offline/notes.txt" 2>&1); then fail "a text file verified"; fi
[[ $out == *"is not an SQLite database"* ]] || fail "text file: $out"

# Datasets registered at the sites: pending until adopted.
pending() { comp policy dataset pending --json; }
out=$(pending) || fail "dataset pending: $out"
for s in site-1 site-2; do
  grep -q "\"site\": \"$s\"" <<<"$out" || fail "site $s's fmnist is not pending: $out"
done
XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/sites/site-2" --name scans \
  --path "$work/shards/site-2" --classification confidential --tag ct >/dev/null
kill -HUP "${site_pid[site-2]}"
for ((i = 0; i < 300; i++)); do
  pending | grep -q '"name": "scans"' && break
  sleep 0.1
done
out=$(comp policy dataset pending) || fail "dataset pending: $out"
[[ $out == *site-2*eu*scans*confidential* ]] ||
  fail "scans, registered at site-2 behind agg-eu, is not listed as pending: $out"
[[ $out == *"(site not in the policy)"* ]] ||
  fail "the listing does not say the sites are missing: $out"
if out=$(comp policy dataset adopt scans --reason "CT scans" 2>&1); then
  fail "adopting at a site the policy does not hold: $out"
fi
[[ $out == *"site 'site-2'"*"xfed policy site add --name site-2 --region eu"* ]] ||
  fail "the refusal does not say to add the site: $out"
comp policy region add --name eu --reason "EU sites" >/dev/null || fail "region eu"
comp policy site add --name site-1 --region us --reason "site-1 joins" >/dev/null || fail "site-1"
comp policy site add --name site-2 --region eu --reason "site-2 joins" >/dev/null || fail "site-2"
if out=$(comp policy dataset adopt mri --reason "not there" 2>&1); then
  fail "adopting a dataset no site announced: $out"
fi
[[ $out == *"'mri' is not pending"* ]] || fail "the refusal does not name the dataset: $out"
before=$(comp policy log --json | grep -c '"version"')
out=$(comp policy dataset adopt scans fmnist --site site-2 --reason "site-2's datasets") ||
  fail "adopting scans and fmnist at site-2: $out"
[[ $out == "policy version "*": 2 datasets adopted"* ]] || fail "adopt said: $out"
[[ $out == *"+ dataset fmnist@site-2"* && $out == *"+ dataset scans@site-2"* ]] ||
  fail "adopt does not show what it added: $out"
after=$(comp policy log --json | grep -c '"version"')
((after == before + 1)) || fail "adopting two datasets made $((after - before)) versions, not one"
doc=$(comp policy export) || fail "export: $doc"
grep -A5 '"name": "scans"' <<<"$doc" | grep -q '"classification": "restricted"' ||
  fail "scans is not in the exported policy as restricted: $doc"
grep -A8 '"name": "scans"' <<<"$doc" | grep -q '"ct"' || fail "scans lost its tag: $doc"
out=$(pending) || fail "dataset pending: $out"
[[ $out != *site-2* ]] || fail "site-2's adopted datasets are still pending: $out"
out=$(comp policy dataset adopt --all --reason "the rest") || fail "adopt --all: $out"
[[ $out == *"1 dataset adopted"*"+ dataset fmnist@site-1"* ]] || fail "adopt --all said: $out"
out=$(comp policy dataset pending) || fail "dataset pending: $out"
[[ $out == "no dataset is pending" ]] || fail "datasets are pending after adopting all: $out"
comp audit export | grep -q '"edit":"dataset_adopt"' ||
  fail "the adoption is not in the audit trail"

finish
echo "compliance: ok"
