#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a benchmark program and checks that it exits 0 and prints one JSON
# object holding KEY (tests/bench_smoke.cmake).
# usage: tests/bench_smoke.sh KEY PROGRAM [ARGS...]
set -euo pipefail
key=$1
shift
out=$("$@")
echo "$out"
line=$(printf '%s\n' "$out" | grep '^{' | tail -n 1)
[ -n "$line" ] || { echo "no JSON line in the output" >&2; exit 1; }
printf '%s\n' "$line" | python3 -c 'import json, sys
row = json.loads(sys.stdin.read())
key = sys.argv[1]
if key not in row: sys.exit(f"{key} missing from {sorted(row)}")' "$key"
