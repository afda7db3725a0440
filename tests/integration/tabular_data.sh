#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The tabular example end to end through the commands, without daemons:
#   - deploy/data/make-credit.py writes the same bytes twice for one seed;
#   - `xfed data split` cuts it with its schema (IID and Dirichlet label
#     skew), every record once, in 2 classes, shards of the encoded features
#     that load again (a second split of a shard);
#   - `xfed-site dataset add` registers it: csv layout, 1x1x25, 2 classes;
#   - a test file with a word outside a column's vocabulary is refused,
#     naming the file, line and column; a --label option is refused for a
#     dataset whose schema names its label;
#   - deploy/jobs/credit-mlp.json trains on it with `xfed train` to a test
#     accuracy above always answering "no".
# usage: tabular_data.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
label=tabular
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
setup_work tabular
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
gen=$src/deploy/data/make-credit.py

python3 "$gen" --out "$work/credit" --train 3000 --test 800 || fail "the generator failed"
python3 "$gen" --out "$work/again" --train 3000 --test 800 || fail "the generator failed"
cmp -s "$work/credit/train.csv" "$work/again/train.csv" || fail "the generator is not repeatable"
[[ $(wc -l <"$work/credit/train.csv") == 3001 ]] || fail "train.csv does not hold 3000 records"
cmp -s "$work/credit/schema.json" "$src/deploy/data/credit.schema.json" || fail "schema not copied"

for scheme in iid dirichlet:0.5; do
  out=$(XF_LOG_LEVEL=warn "$xfed" data split --data "$work/credit" --sites 3 --scheme "$scheme" \
    --seed 7 --out "$work/shards-${scheme%%:*}" --json) || fail "split $scheme: $out"
  python3 - "$out" <<'PY' || fail "split $scheme: manifest $out"
import json, sys
m = json.loads(sys.argv[1])
assert m["classes"] == 2, m["classes"]
assert len(m["sites"]) == 3
assert sum(s["train_records"] for s in m["sites"]) == 3000
assert sum(s["test_records"] for s in m["sites"]) == 800
PY
done
[[ -f $work/shards-iid/site-1/schema.json ]] && fail "a shard carries the source schema"
out=$(XF_LOG_LEVEL=warn "$xfed" data split --data "$work/shards-iid/site-1" --sites 2 \
  --scheme iid --out "$work/resplit") || fail "a shard does not split again: $out"

XF_LOG_LEVEL=warn "$site_bin" init --dir "$work/site" --name site-1 --region eu \
  --coordinator 127.0.0.1:9 >/dev/null || fail "site init"
out=$(XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/site" --name credit \
  --path "$work/credit" 2>&1) || fail "dataset add: $out"
[[ $out == *"csv layout, 3000 train and 800 test records of 1x1x25, 2 classes"* ]] ||
  fail "dataset add: $out"

# The tabular example's job trains on it centrally: one epoch of its declared
# AdamW MLP does better than answering "no" always (about 0.76 of the test
# records).
out=$(XF_LOG_LEVEL=warn "$xfed" train --spec "$src/deploy/jobs/credit-mlp.json" \
  --data "$work/credit" 2>/dev/null) || fail "xfed train with credit-mlp.json: $out"
acc=$(sed -n 's/^test accuracy *\([0-9.]*\).*/\1/p' <<<"$out")
awk -v a="${acc:-0}" 'BEGIN { exit !(a > 0.80) }' ||
  fail "credit-mlp.json trained to test accuracy '${acc}', not above 0.80: $out"

cp -r "$work/credit" "$work/bad"
sed -i '3s/,salaried,/,astronaut,/; 3s/,self_employed,/,astronaut,/; 3s/,contractor,/,astronaut,/; 3s/,unemployed,/,astronaut,/; 3s/,retired,/,astronaut,/' "$work/bad/test.csv"
if out=$(XF_LOG_LEVEL=warn "$site_bin" dataset add --dir "$work/site" --name bad \
  --path "$work/bad" 2>&1); then fail "a word outside the vocabulary was accepted"; fi
[[ $out == *"bad/test.csv: line 3, column 8: column 'employment': 'astronaut' is not in its vocabulary"* ]] ||
  fail "unknown word: $out"
if out=$(XF_LOG_LEVEL=warn "$xfed" data split --data "$work/credit" --sites 2 --scheme iid \
  --label default --out "$work/labelled" 2>&1); then fail "--label was accepted"; fi
[[ $out == *"drop the label option"* ]] || fail "--label: $out"
echo "tabular data: ok"
