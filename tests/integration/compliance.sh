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
#   - a file that is not a trail (a policy database, a text file) is refused.
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

finish
echo "compliance: ok"
