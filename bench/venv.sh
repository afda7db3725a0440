#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The benchmark virtualenv: Debian's python3 with its packages (numpy, onnx,
# torch where installed) visible, plus what Debian does not ship, from PyPI:
# onnxruntime (the export test's reference runtime). Idempotent: a venv that
# already imports everything is left as it is.
#   usage: bench/venv.sh DIR      (prints DIR/bin/python on success)
set -euo pipefail
dir=${1:?usage: venv.sh DIR}
py=/usr/bin/python3
if [[ -x $dir/bin/python ]] && "$dir/bin/python" -c 'import onnxruntime, numpy' 2>/dev/null; then
  echo "$dir/bin/python"
  exit 0
fi
"$py" -m venv --system-site-packages "$dir" >&2 ||
  { echo "venv.sh: cannot make a virtualenv at $dir (Debian's python3-venv installs the module)" >&2
    exit 1; }
"$dir/bin/pip" install --disable-pip-version-check --quiet onnxruntime >&2 ||
  { echo "venv.sh: pip could not install onnxruntime from PyPI into $dir (no network, or no" \
         "wheel for this platform)" >&2
    exit 1; }
"$dir/bin/python" -c 'import onnxruntime, numpy' >&2
echo "$dir/bin/python"
