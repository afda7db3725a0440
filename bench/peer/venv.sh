#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The virtualenv of the Flower comparison (bench/peer/run.sh): Debian's
# python3 with its packages visible (python3-torch, the model's framework on
# both Flower sides), plus Flower from PyPI at the pinned version, and numpy
# kept below 2 for Debian's torch 1.13. Idempotent: a venv that already has
# this Flower and imports torch is left as it is.
#   usage: bench/peer/venv.sh DIR      (prints DIR/bin/python on success)
# Exits 1 (with the reason) when the venv cannot be made, e.g. without PyPI.
set -euo pipefail
dir=${1:?usage: bench/peer/venv.sh DIR}
flwr_version=1.42.0
py=/usr/bin/python3
check="import flwr, torch, numpy; assert flwr.__version__ == '$flwr_version', flwr.__version__"
if [[ -x $dir/bin/python ]] && "$dir/bin/python" -c "$check" 2>/dev/null; then
  echo "$dir/bin/python"
  exit 0
fi
"$py" -c 'import torch' 2>/dev/null ||
  { echo "venv.sh: $py cannot import torch (deploy/install-deps.sh bench installs python3-torch)" >&2
    exit 1; }
"$py" -m venv --system-site-packages "$dir" >&2 ||
  { echo "venv.sh: cannot make a virtualenv at $dir (Debian's python3-venv installs the module)" >&2
    exit 1; }
"$dir/bin/pip" install --disable-pip-version-check --quiet "flwr==$flwr_version" 'numpy<2' >&2 ||
  { echo "venv.sh: pip could not install flwr==$flwr_version from PyPI into $dir (no network?)" >&2
    exit 1; }
"$dir/bin/python" -c "$check" >&2
echo "$dir/bin/python"
