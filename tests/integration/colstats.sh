#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Pooled normalization statistics through the commands, without daemons:
#   - the tabular example's train.csv cut into 3 site-shaped datasets that
#     each keep schema.json, registered at 3 sites with `xfed-site dataset add`;
#   - `xfed-site dataset stats` at each (files of mode 0644), pooled with
#     `xfed data stats merge`: the pooled count, mean and standard deviation
#     of every numeric column equal one pass over the union of the records
#     (after the schema's fills, as 32-bit floats) to 1e-9 relative;
#   - the pooled schema gives the "train" columns those figures, keeps the
#     others, and registers at a site;
#   - every refusal: one file, a site twice, another dataset, another schema,
#     a column missing, a malformed file, a --schema the statistics were not
#     computed with, --schema without --out, a dataset without a schema and
#     one not registered.
# usage: colstats.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
label=colstats
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_work colstats
export XF_LOG_LEVEL=warn

python3 "$src/deploy/data/make-credit.py" --out "$work/credit" --train 3000 --test 300 ||
  fail "the generator failed"

# Three site-shaped datasets: unequal runs of the example's training records,
# each directory with the schema and a test split.
cut_rows() { # DIR FIRST LAST: records FIRST..LAST (from 1) of train.csv
  mkdir -p "$1"
  cp "$work/credit/schema.json" "$work/credit/test.csv" "$1/"
  sed -n "1p; $(($2 + 1)),$(($3 + 1))p" "$work/credit/train.csv" >"$1/train.csv"
}
cut_rows "$work/data-1" 1 700
cut_rows "$work/data-2" 701 2450
cut_rows "$work/data-3" 2451 3000

for i in 1 2 3; do
  "$site_bin" init --dir "$work/site-$i" --name "site-$i" --region eu \
    --coordinator 127.0.0.1:9 >/dev/null || fail "site-$i init"
  out=$("$site_bin" dataset add --dir "$work/site-$i" --name credit --path "$work/data-$i" 2>&1) ||
    fail "site-$i dataset add: $out"
  out=$("$site_bin" dataset stats --dir "$work/site-$i" --name credit --author ops \
    --reason "pooled normalization" --out "$work/stats-$i.json" 2>&1) ||
    fail "site-$i dataset stats: $out"
  [[ $out == *"6 numeric columns of dataset credit"* ]] || fail "site-$i stats: $out"
  [[ $(stat -c %a "$work/stats-$i.json") == 644 ]] || fail "stats-$i.json is not mode 0644"
done
# Without --out the file goes to stdout, the same bytes.
"$site_bin" dataset stats --dir "$work/site-1" --name credit --reason "a second copy" \
  >"$work/stdout.json" || fail "dataset stats to stdout"
cmp -s "$work/stdout.json" "$work/stats-1.json" || fail "stdout differs from --out"
# Each release is a row of the site's audit trail: who, why, where to, and
# the digest of the bytes that left; the chain stays intact.
rows=$("$site_bin" --json audit list --dir "$work/site-1") || fail "audit list"
python3 - "$rows" "$work/stats-1.json" <<'PY' || fail "the releases are not in the audit trail: $rows"
import hashlib, json, sys
rows = [r for r in json.loads(sys.argv[1])["rows"] if r["kind"] == "stats_release"]
assert len(rows) == 2, rows
digest = hashlib.blake2b(open(sys.argv[2], "rb").read(), digest_size=32).hexdigest()
first, second = (r["detail"] for r in rows)
assert rows[0]["subject"] == "credit" and rows[0]["actor"] == "ops", rows[0]
assert first["reason"] == "pooled normalization" and first["to"].endswith("stats-1.json"), first
assert second["reason"] == "a second copy" and second["to"] == "standard output", second
assert first["digest"] == second["digest"] == digest, (first, digest)
assert first["train_records"] > 0 and "income" in first["columns"], first
PY
"$site_bin" audit verify --dir "$work/site-1" | grep -q "chain intact" || fail "site-1's trail"
if ! grep -q '"income"' "$work/stats-1.json" || grep -q '"employment"' "$work/stats-1.json"; then
  fail "the statistics are not those of the numeric columns: $(cat "$work/stats-1.json")"
fi

out=$("$xfed" --json data stats merge "$work"/stats-{1,2,3}.json \
  --schema "$work/credit/schema.json" --out "$work/pooled.schema.json" 2>&1) ||
  fail "merge: $out"
[[ $(stat -c %a "$work/pooled.schema.json") == 644 ]] || fail "the pooled schema is not 0644"
python3 - "$out" "$work/credit" "$work/pooled.schema.json" <<'PY' || fail "pooled figures: $out"
import csv, json, math, struct, sys
merged = json.loads(sys.argv[1])
schema = json.load(open(sys.argv[2] + "/schema.json"))
pooled_schema = json.load(open(sys.argv[3]))
f32 = lambda v: struct.unpack("<f", struct.pack("<f", v))[0]
missing = set(schema["missing"])
numeric = [c for c in schema["columns"] if c["type"] == "numeric"]
rows = list(csv.DictReader(open(sys.argv[2] + "/train.csv")))
assert merged["dataset"] == "credit" and merged["sites"] == ["site-1", "site-2", "site-3"]
assert merged["replaced"] == 5, merged["replaced"]
got = {c["name"]: c for c in merged["columns"]}
assert list(got) == [c["name"] for c in numeric], list(got)
by_name = {c["name"]: c for c in pooled_schema["columns"]}
for col in numeric:
    vals = [f32(col["fill"] if r[col["name"]] in missing else float(r[col["name"]])) for r in rows]
    mean = math.fsum(vals) / len(vals)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / len(vals))
    g = got[col["name"]]
    assert g["count"] == 3000, g
    assert abs(g["mean"] - mean) <= 1e-9 * abs(mean), (col["name"], g["mean"], mean)
    assert abs(g["std"] - std) <= 1e-9 * abs(std), (col["name"], g["std"], std)
    norm = by_name[col["name"]]["normalize"]
    if col.get("normalize") == "train":
        assert norm == {"mean": g["mean"], "std": g["std"]}, (norm, g)
    else:
        assert norm == col["normalize"], norm
assert [c["name"] for c in pooled_schema["columns"]] == [c["name"] for c in schema["columns"]]
PY
# The table names every column; the pooled schema is a schema a site takes.
out=$("$xfed" data stats merge "$work"/stats-{1,2,3}.json 2>&1) || fail "merge (table): $out"
for c in age income debt_ratio months_employed late_payments credit_lines; do
  [[ $out == *"$c "* ]] || fail "the table lacks $c: $out"
done
cp -r "$work/data-1" "$work/pooled-1"
cp "$work/pooled.schema.json" "$work/pooled-1/schema.json"
out=$("$site_bin" dataset add --dir "$work/site-1" --name credit-pooled \
  --path "$work/pooled-1" 2>&1) || fail "the pooled schema does not register: $out"

# refuse MESSAGE STATUS CMD...: the command fails with that exit status and
# its error output holds MESSAGE.
refuse() {
  local want=$1 status=$2 rc=0
  shift 2
  out=$("$@" 2>&1) || rc=$?
  [[ $rc == "$status" ]] || fail "$* exited $rc, not $status: $out"
  [[ $out == *"$want"* ]] || fail "$*: '$want' not in: $out"
}
refuse "2 or more sites (1 given)" 2 "$xfed" data stats merge "$work/stats-1.json"
refuse "expected 'merge FILE...'" 2 "$xfed" data stats pool "$work"/stats-{1,2}.json
refuse "--schema SCHEMA and --out NEW_SCHEMA go together" 2 \
  "$xfed" data stats merge "$work"/stats-{1,2}.json --schema "$work/credit/schema.json"
refuse "stats-1.json: site: 'site-1' is also the site of $work/stats-1.json" 1 \
  "$xfed" data stats merge "$work"/stats-{1,2,1}.json

# Another dataset name at site 1.
"$site_bin" dataset add --dir "$work/site-1" --name loans --path "$work/data-1" >/dev/null ||
  fail "dataset add loans"
"$site_bin" dataset stats --dir "$work/site-1" --name loans --reason r --out "$work/loans.json" >/dev/null ||
  fail "dataset stats loans"
refuse "loans.json: dataset: is 'loans' but" 1 \
  "$xfed" data stats merge "$work/stats-1.json" "$work/loans.json"

# Another schema (a different fill) at a fourth site.
cut_rows "$work/data-4" 1 500
sed -i 's/"fill": 42000/"fill": 40000/' "$work/data-4/schema.json"
"$site_bin" init --dir "$work/site-4" --name site-4 --region eu --coordinator 127.0.0.1:9 \
  >/dev/null || fail "site-4 init"
"$site_bin" dataset add --dir "$work/site-4" --name credit --path "$work/data-4" >/dev/null ||
  fail "site-4 dataset add"
"$site_bin" dataset stats --dir "$work/site-4" --name credit --reason r --out "$work/stats-4.json" \
  >/dev/null || fail "site-4 dataset stats"
refuse "stats-4.json: schema_digest: differs from" 1 \
  "$xfed" data stats merge "$work"/stats-{1,4}.json

# A column missing, a malformed file, a number out of range.
python3 - "$work/stats-3.json" "$work/missing.json" "$work/negative.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["columns"] = [c for c in d["columns"] if c["name"] != "debt_ratio"]
json.dump(d, open(sys.argv[2], "w"))
d = json.load(open(sys.argv[1]))
d["columns"][2]["m2"] = -1
json.dump(d, open(sys.argv[3], "w"))
PY
refuse "missing.json: columns: has no column 'debt_ratio'" 1 \
  "$xfed" data stats merge "$work"/stats-{1,2}.json "$work/missing.json"
refuse "negative.json: columns[2].m2: must be a finite number of at least 0" 1 \
  "$xfed" data stats merge "$work"/stats-1.json "$work/negative.json"
head -c 200 "$work/stats-2.json" >"$work/cut.json"
refuse "cut.json: line" 1 "$xfed" data stats merge "$work"/stats-1.json "$work/cut.json"

# The pooled schema is not the one the statistics were computed with.
refuse "is not the schema the statistics were computed with" 1 \
  "$xfed" data stats merge "$work"/stats-{1,2}.json --schema "$work/pooled.schema.json" \
  --out "$work/again.json"
[[ -e $work/again.json ]] && fail "a refused merge wrote its --out"

# A dataset without a schema, and one not registered.
mkdir -p "$work/plain"
printf 'a,b,label\n1,2,0\n3,4,1\n' >"$work/plain/train.csv"
printf 'a,b,label\n5,6,0\n' >"$work/plain/test.csv"
"$site_bin" dataset add --dir "$work/site-1" --name plain --path "$work/plain" >/dev/null ||
  fail "dataset add plain"
refuse "--reason TEXT is required" 2 "$site_bin" dataset stats --dir "$work/site-1" --name credit
refuse "has no schema.json" 1 "$site_bin" dataset stats --dir "$work/site-1" --name plain --reason r
refuse "no dataset 'nope' is registered" 1 "$site_bin" dataset stats --dir "$work/site-1" --name nope \
  --reason r
# Data changed since registration.
echo "0,1,2,3,4,5,6,salaried,own,north,car,no" >>"$work/data-2/train.csv"
refuse "is changed since it was registered" 1 \
  "$site_bin" dataset stats --dir "$work/site-2" --name credit --reason r
echo "column statistics: ok"
