#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The PyTorch trainer (deploy/trainers/torch_trainer.py) builds every layer
# kind as xfed computes it: for the three declared models of
# tests/layer_kinds.h (written with their trainer tasks by
# xfed-layer-models; data by layer_data.py), the module built from
# task.json's layer table holds global.npy bit for bit, and its logits on
# the test split give `xfed model eval`'s predictions, accuracy and loss
# (tests/integration/torch_forward.py); then the trainer runs the task (one
# epoch of training through every kind, dropout active) and writes a
# trained vector of the model's size, finite and moved. Exit 77 (skipped) when python3
# cannot import torch.
# usage: torch_layers.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: torch_layers.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
py=/usr/bin/python3
fail() { echo "FAIL: $*" >&2; exit 1; }
export XF_LOG_LEVEL=warn XF_BACKEND=cpu
if ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "SKIP: $py cannot import torch (deploy/install-deps.sh test installs python3-torch)" >&2
  exit 77
fi
[[ -x $build/cli/xfed && -x $build/tests/xfed-layer-models ]] || fail "build $build first"
work=$(mktemp -d "${TMPDIR:-/tmp}/xfed-torch-layers-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$build/tests/xfed-layer-models" "$work" || fail "xfed-layer-models could not write the models"
"$py" "$src/tests/integration/layer_data.py" "$work"
for p in image flat embed; do
  m=$work/$p
  "$build/cli/xfed" --json model eval "$m.xfm" --data "$m.data" --predictions "$m.pred.csv" \
    >"$m.eval.json"
  "$py" "$src/tests/integration/torch_forward.py" "$src/deploy/trainers/torch_trainer.py" \
    "$m.task" "$m.pred.csv" "$m.eval.json"
  "$py" "$src/deploy/trainers/torch_trainer.py" "$m.task" >"$m.train.log" 2>&1 ||
    fail "torch_trainer.py on $p: $(cat "$m.train.log")"
  "$py" - "$m.task" <<'PY' || fail "the trained vector of $p is not a trained $p model"
import sys
import numpy as np
g, t = (np.load(f"{sys.argv[1]}/{n}.npy") for n in ("global", "trained"))
assert t.dtype == np.float32 and t.shape == g.shape, (t.dtype, t.shape, g.shape)
assert np.isfinite(t).all() and not np.array_equal(t, g)
PY
done
echo "torch_layers: the PyTorch trainer's modules compute xfed's logits for every layer kind"
