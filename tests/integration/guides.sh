#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The user guides' commands run as written: every runnable block of each
# guide given, in order, in one shell per guide, in a fresh directory, against
# a real loopback federation (tests/integration/lib.sh: the quickstart's
# regions, eu and ap behind regional aggregators, us direct).
#
# Which blocks run (docs/development.md, "Guides"): a fence opened with
# ```sh is a runnable block; a ```sh block on the line after
#   <!-- guide-test: skip REASON -->
# (REASON such as "needs installed packages" or "needs a GPU") is shown but
# not run. Output, transcripts and illustrations are fenced ```text,
# ```console or with their format (```json), and are not run.
#
# Each guide's shell finds xfed, xfed-site and xfed-coord on PATH, build/
# and deploy/ beside it (as in a checkout), Fashion-MNIST where Debian's
# package puts it, and the coordinator and the reader's identity in the
# XFED_* variables: cora (compliance) for the compliance guide, rita
# (researcher) for the others. What a guide's reader sets for their own
# federation in a block marked skip, the test sets for this one:
#   compliance guide: coord_state, agg_state: the state directories of the
#                     coordinator and of region eu's aggregator; site_dir,
#                     site_pid: site eu-1's directory and process;
#   operator guide:   coordinator: region eu's aggregator; and in its
#                     directory the files the federation admin hands a site
#                     operator: eu-berlin.crt, eu-berlin.key, ca.crt, crl.pem.
# A guide may start daemons in the background (the operator guide runs a
# site); whatever it leaves running is killed when it ends, and their logs
# (*.log in its directory) must hold no sanitizer report. Each guide has
# 300 s.
# usage: guides.sh BUILD_DIR GUIDE.md...
set -euo pipefail
build=$(cd "${1:?build dir}" && pwd)
shift
label=guides
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh"
setup_work xf-guides
guide_data=/usr/share/datasets/fashion-mnist
[[ -f $guide_data/train-images-idx3-ubyte.gz || -f $guide_data/train-images-idx3-ubyte ]] ||
  fail "the guides use Fashion-MNIST at $guide_data (deploy/install-deps.sh build installs dataset-fashion-mnist)"
federation eu-1:eu:eu eu-2:eu:eu us-1:us:direct us-2:us:direct ap-1:ap:ap ap-2:ap:ap
XF_LOG_LEVEL=warn "$xfed" pki issue --dir "$fed" --kind site --name eu-berlin --region eu >/dev/null

# extract GUIDE: the runnable blocks as one script; each block sets
# guide_block to its line first, so a failure names it.
extract() {
  awk -v guide="$1" '
    /^<!-- guide-test: skip/ { skip = 1; next }
    /^```/ {
      if (inside) { inside = 0; print ""; next }
      inside = 1
      run = ($0 ~ /^```sh[ \t]*$/) && !skip
      skip = 0
      if (run) printf "guide_block=%s:%d\n", guide, NR + 1
      next
    }
    { if (!/^[ \t]*$/) skip = 0 }
    inside && run { print }
  ' "$1"
}

for guide in "$@"; do
  [[ -f $guide ]] || guide=$src/$guide
  name=$(basename "$guide" .md)
  dir=$work/$name
  mkdir -p "$dir"
  ln -s "$build" "$dir/build"
  ln -s "$src/deploy" "$dir/deploy"
  user=rita
  vars=()
  case $name in
  compliance-guide)
    user=cora
    vars=(coord_state="$work/coord" agg_state="$work/agg-eu" site_dir="$work/sites/eu-1"
          site_pid="${site_pid[eu-1]}")
    ;;
  operator-guide)
    cp "$fed/ca.crt" "$fed/crl.pem" "$fed/issued/eu-berlin.crt" "$dir/"
    install -m 0600 "$fed/issued/eu-berlin.key" "$dir/"
    vars=(coordinator="127.0.0.1:$(cat "$work/agg-eu.port")" XF_LOG_LEVEL=info)
    ;;
  esac
  {
    echo 'set -eEuo pipefail'
    echo "trap 'echo \"FAILED: the block at \$guide_block\" >&2' ERR"
    extract "$guide"
  } >"$dir.sh"
  grep -q '^guide_block=' "$dir.sh" || fail "$guide has no runnable block"
  # timeout leads a process group of its own: the guide's shell and what it
  # starts in the background, all killed once the guide is over.
  (cd "$dir" &&
    exec env -u XFED_PROFILE HOME="$dir" PATH="$build/cli:$build/site:$build/coordinator:$PATH" \
      USER="${USER:-$user}" \
      XF_LOG_LEVEL=warn \
      XFED_COORDINATOR="127.0.0.1:$port" XFED_CERT="$fed/issued/$user.crt" \
      XFED_KEY="$fed/issued/$user.key" XFED_CA="$fed/ca.crt" XFED_CRL="$fed/crl.pem" \
      "${vars[@]}" timeout 300 bash "$dir.sh") >"$dir.out" 2>&1 &
  group=$!
  rc=0
  wait "$group" || rc=$?
  kill -KILL -- "-$group" 2>/dev/null || true
  ((rc != 124)) || fail "$name: not done within 300 s; its output ends: $(tail -n 12 "$dir.out")"
  ((rc == 0)) ||
    fail "$name: $(grep 'FAILED: the block' "$dir.out" | tail -n 1); its output ends: $(tail -n 12 "$dir.out")"
  if grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$dir.out" "$dir"/*.log 2>/dev/null; then
    fail "$name: a program it ran printed a sanitizer report"
  fi
  echo "$name: $(grep -c '^guide_block=' "$dir.sh") blocks ran as written"
done
finish
