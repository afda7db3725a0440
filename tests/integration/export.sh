#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Export for deployment, end to end: each preset (logreg, mlp, lenet5,
# fedavg-cnn) and a declared layer list (a strided, padded conv, a conv, a
# maxpool and a dense layer) trained for one epoch with `xfed train` on one shard of
# Fashion-MNIST, and an mlp on a tabular CSV set the test makes, exported with `xfed model export` to ONNX and .npz, and
# evaluated by `xfed model eval` on the shard's test split (accuracy, loss and
# each record's predicted class). Three declared models that use every
# layer kind between them (tests/layer_kinds.h, written by
# xfed-layer-models: norms, GELU, residual adds, avgpool, dropout, softmax,
# tanh, sigmoid, an embedding of ids) go through the same checks on small
# data sets the test makes (tests/integration/layer_data.py: NPY sets of
# 6x6x4 images, of features and of ids). Then, by MODE:
#   numpy        onnx.checker.check_model(full_check=True) with Debian's
#                python3-onnx; the graph run in numpy (tests/integration/
#                onnx_check.py interprets its nodes) predicts what xfed
#                predicts, with xfed's accuracy and loss; numpy.load reads
#                the .npz and its arrays are the model's tensors; each .onnx
#                reads back to the very model file; an --out whose
#                extension disagrees with --format is refused.
#   onnxruntime  the graphs run in onnxruntime (PyPI, the benchmark
#                virtualenv made by bench/venv.sh) predict what xfed
#                predicts; exit 77 (skipped) when the virtualenv cannot be
#                made.
# usage: export.sh BUILD_DIR numpy|onnxruntime
set -euo pipefail
build=$(cd "${1:?usage: export.sh BUILD_DIR MODE}" && pwd)
mode=${2:?usage: export.sh BUILD_DIR numpy|onnxruntime}
src=$(cd "$(dirname "$0")/../.." && pwd)
xfed=$build/cli/xfed
check=$src/tests/integration/onnx_check.py
data=${XF_FMNIST:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d "${TMPDIR:-/tmp}/xfed-export-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export XF_LOG_LEVEL=warn XF_BACKEND=cpu

[[ -x $xfed ]] || fail "$xfed is not built"
[[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
  fail "Fashion-MNIST is not at $data (deploy/install-deps.sh build installs dataset-fashion-mnist)"
case $mode in
  numpy)
    py=/usr/bin/python3
    "$py" -c 'import onnx, numpy' 2>/dev/null ||
      fail "$py cannot import onnx and numpy (deploy/install-deps.sh test installs python3-onnx)" ;;
  onnxruntime)
    if ! py=$(bash "$src/bench/venv.sh" "$build/bench-venv"); then
      echo "SKIP: the benchmark virtualenv with onnxruntime cannot be made (see above)" >&2
      exit 77
    fi ;;
  *) fail "unknown mode $mode: numpy or onnxruntime" ;;
esac

# 2000 training and 333 test records: enough for every preset to learn
# something in one epoch, little enough for a loaded 2-core machine.
"$xfed" data split --data "$data" --sites 30 --scheme iid --out "$work/shards" >/dev/null
shard=$work/shards/site-1
# A tabular set: 6 features (one of them far from [0, 1]), 3 classes that a
# linear boundary nearly separates; 600 training and 200 test records.
mkdir "$work/tabular"
/usr/bin/python3 - "$work/tabular" <<'PY'
import random, sys
rng = random.Random(7)
for name, n in (("train.csv", 600), ("test.csv", 200)):
    with open(f"{sys.argv[1]}/{name}", "w") as f:
        f.write("age,income,a,b,c,d,label\n")
        for _ in range(n):
            v = [rng.uniform(-1, 1) for _ in range(6)]
            v[1] *= 50
            score = v[0] + v[1] / 50 - v[2]
            label = 0 if score < -0.4 else 1 if score < 0.4 else 2
            f.write(",".join(f"{x:.6f}" for x in v) + f",{label}\n")
PY

declare -A arch=(
  [logreg]='"arch": "logreg"'
  [mlp]='"arch": "mlp", "hidden": [32, 16]'
  [lenet5]='"arch": "cnn", "preset": "lenet5"'
  [fedavg-cnn]='"arch": "cnn", "preset": "fedavg-cnn"'
  [declared]='"layers": [{"kind": "conv2d", "filters": 6, "kernel": 3, "stride": 2, "padding": 1}, {"kind": "relu"}, {"kind": "conv2d", "filters": 8, "kernel": 3}, {"kind": "relu"}, {"kind": "maxpool2d", "kernel": 2}, {"kind": "dense", "units": 10}]')
for p in logreg mlp lenet5 fedavg-cnn declared tabular-mlp; do
  m=$work/$p
  data_dir=$shard
  if [[ $p == tabular-mlp ]]; then
    data_dir=$work/tabular
    arch[$p]='"arch": "mlp", "hidden": [16]'
  fi
  sed "s/\"arch\": \"mlp\", \"hidden\": \[100\]/${arch[$p]}/" "$src/deploy/jobs/first-mlp.json" \
    >"$m.spec.json"
  grep -qF "${arch[$p]}" "$m.spec.json" || fail "could not make the $p job spec"
  "$xfed" train --spec "$m.spec.json" --data "$data_dir" --epochs 1 --threads 2 --save "$m.xfm" \
    >/dev/null 2>"$m.train.log" || fail "xfed train $p: $(cat "$m.train.log")"
  "$xfed" model export "$m.xfm" --out "$m.onnx" >/dev/null
  "$xfed" --json model eval "$m.xfm" --data "$data_dir" --predictions "$m.pred.csv" >"$m.eval.json"
  case $mode in
    numpy)
      "$xfed" model export "$m.xfm" --out "$m.weights" --format npz >/dev/null
      "$py" "$check" checker "$m.onnx"
      "$py" "$check" numpy "$m.onnx" "$data_dir" "$m.pred.csv" "$m.eval.json"
      "$py" "$check" npz "$m.weights" "$m.xfm" "$m.onnx" ;;
    onnxruntime)
      "$py" "$check" onnxruntime "$m.onnx" "$data_dir" "$m.pred.csv" "$m.eval.json" ;;
  esac
done

# Every layer kind: the models of tests/layer_kinds.h on data of their
# shapes, 3 classes, 40 test records each.
kinds=$work/kinds
mkdir "$kinds"
"$build/tests/xfed-layer-models" "$kinds" || fail "xfed-layer-models could not write the models"
"$py" "$src/tests/integration/layer_data.py" "$kinds"
for p in image flat embed; do
  m=$kinds/$p
  "$xfed" model export "$m.xfm" --out "$m.onnx" >/dev/null
  "$xfed" --json model eval "$m.xfm" --data "$m.data" --predictions "$m.pred.csv" >"$m.eval.json"
  case $mode in
    numpy)
      "$xfed" model export "$m.xfm" --out "$m.npz" >/dev/null
      "$py" "$check" checker "$m.onnx"
      "$py" "$check" numpy "$m.onnx" "$m.data" "$m.pred.csv" "$m.eval.json"
      "$py" "$check" npz "$m.npz" "$m.xfm" "$m.onnx"
      "$xfed" model export "$m.onnx" --out "$m.back.xfm" >/dev/null
      cmp -s "$m.xfm" "$m.back.xfm" || fail "kinds/$p.onnx does not read back to $p.xfm" ;;
    onnxruntime)
      "$py" "$check" onnxruntime "$m.onnx" "$m.data" "$m.pred.csv" "$m.eval.json" ;;
  esac
done

if [[ $mode == numpy ]]; then
  m=$work/logreg
  # The extension and --format must agree; the refusal writes nothing.
  rc=0
  out=$("$xfed" model export "$m.xfm" --out "$work/x.onnx" --format npz 2>&1) || rc=$?
  [[ $rc == 2 ]] || fail "--format npz with x.onnx: exit $rc, not 2"
  [[ $out == *"--format npz disagrees with the extension"*"name the file .npz"* ]] ||
    fail "the refusal does not say how to fix it: $out"
  [[ ! -e $work/x.onnx ]] || fail "a refused export wrote x.onnx"
  # The format follows the extension: .npz is a zip, .xfm the model file.
  "$xfed" model export "$m.xfm" --out "$work/same.xfm" >/dev/null
  cmp -s "$m.xfm" "$work/same.xfm" || fail "an .xfm export is not the model file"
  "$xfed" model export "$m.xfm" --out "$work/by-ext.npz" >/dev/null
  [[ $(head -c 4 "$work/by-ext.npz" | od -An -tx1 | tr -d ' ') == 504b0304 ]] ||
    fail "by-ext.npz is not a zip archive"
  # An ONNX export reads back to the very model file, for every preset: its
  # evaluation is xfed's of the model file.
  for p in logreg mlp lenet5 fedavg-cnn declared tabular-mlp; do
    "$xfed" model export "$work/$p.onnx" --out "$work/$p.back.xfm" >/dev/null
    cmp -s "$work/$p.xfm" "$work/$p.back.xfm" || fail "$p.onnx does not read back to $p.xfm"
  done
  # A declared model's .onnx states its layer list in its metadata.
  "$py" -c 'import onnx, sys
m = onnx.load(sys.argv[1])
props = {p.key: p.value for p in m.metadata_props}
assert "\"declared\":[{\"filters\":6" in props["xfed.model"], props' "$work/declared.onnx" ||
    fail "declared.onnx does not state its layer list under metadata_props xfed.model"
  for p in logreg declared; do
    "$xfed" --json model eval "$work/$p.onnx" --data "$shard" --predictions "$work/back.csv" \
      >"$work/back.json"
    cmp -s "$work/$p.pred.csv" "$work/back.csv" ||
      fail "$p.onnx predicts otherwise than $p.xfm"
  done
  # A .npz holds no architecture, and the refusal says what to give instead.
  rc=0
  out=$("$xfed" model eval "$work/by-ext.npz" --data "$shard" 2>&1) || rc=$?
  [[ $rc == 1 && $out == *"holds tensors without the architecture"* ]] ||
    fail "model eval of an .npz: exit $rc: $out"
  # Records of another shape are refused, naming both shapes.
  printf 'label,a,b\n0,1,2\n1,3,4\n' >"$work/t.csv"
  mkdir "$work/tab" && cp "$work/t.csv" "$work/tab/train.csv" && cp "$work/t.csv" "$work/tab/test.csv"
  rc=0
  out=$("$xfed" model eval "$m.xfm" --data "$work/tab" 2>&1) || rc=$?
  [[ $rc == 1 && $out == *"holds records of 1x1x2, the model logreg takes 28x28x1"* ]] ||
    fail "model eval on other data: exit $rc: $out"
fi
echo "export ($mode): every preset, the declared model and every layer kind checked"
