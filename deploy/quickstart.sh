#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job, end to end on this machine: installs what is missing, builds
# xfed, and trains a job spec's model on Fashion-MNIST with the same kernels a
# site uses (the centralized baseline; the federation, privacy and residency
# layers are not built yet). Ends with one line:
#   final accuracy=A epochs=E epsilon=none train_seconds=S backend=B digest=D
#
# usage: deploy/quickstart.sh [--spec FILE] [--data DIR] [--threads N]
#   --spec FILE   job spec (default deploy/jobs/fmnist-mlp.json; copy and edit it)
#   --data DIR    dataset directory (default /usr/share/datasets/fashion-mnist)
#   --threads N   CPU threads (default: all cores)
# Environment: XF_BACKEND=auto|cpu|cuda.
set -euo pipefail
cd "$(dirname "$0")/.."

spec=deploy/jobs/fmnist-mlp.json
data=/usr/share/datasets/fashion-mnist
threads=()
while (($#)); do
  case "$1" in
    --spec) spec=${2:?--spec needs a file}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --threads) threads=(--threads "${2:?--threads needs a number}"); shift 2 ;;
    -h|--help) sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "quickstart.sh: unknown option '$1'; see deploy/quickstart.sh --help" >&2; exit 2 ;;
  esac
done
[[ -f "$spec" ]] || { echo "quickstart.sh: job spec '$spec' not found" >&2; exit 2; }

echo "==> dependencies"
bash deploy/install-deps.sh
echo "==> build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-configure.log 2>&1 ||
  { cat build-configure.log; exit 1; }
cmake --build build -j "$(nproc)" --target xfed
echo "==> train $(basename "$spec") on $data"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
build/cli/xfed train --spec "$spec" --data "$data" "${threads[@]}" | tee "$out"

acc=$(awk '$1 == "test" && $2 == "accuracy" { print $3 }' "$out")
epochs=$(awk '$1 == "epochs" { print $2 }' "$out")
secs=$(awk '$1 == "train" && $2 == "time" { print $3 }' "$out")
backend=$(awk '$1 == "backend" { sub(",", "", $2); print $2 }' "$out")
digest=$(awk '$1 == "model" && $2 == "digest" { print $3 }' "$out")
echo "final accuracy=${acc} epochs=${epochs} epsilon=none train_seconds=${secs} backend=${backend} digest=${digest}"
