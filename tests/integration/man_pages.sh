#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The man pages say what the programs' --help says: every option a command's
# --help lists is in the program's man page (as built: build/deploy/man),
# every option the page names is one a --help names, and the coordinator's
# limit on jobs at once is the number coordinator/daemon.h defines, in its
# --help, its man page and the docs alike.
# usage: man_pages.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: man_pages.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-man-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL [man_pages]: $*" >&2; exit 1; }
flags() { grep -oE -- '--[a-z][a-z0-9-]*[a-z0-9]' | sort -u; }

for entry in xfed.1:cli/xfed xfed-coord.8:coordinator/xfed-coord xfed-site.8:site/xfed-site; do
  page=$build/deploy/man/${entry%%:*} prog=$build/${entry#*:}
  [[ -s $page && -x $prog ]] || fail "build $page and $prog first"
  XF_LOG_LEVEL=warn "$prog" --help >"$work/help"
  # The commands: "  NAME  SUMMARY" lines of the overview's "commands:".
  sed -n '/^commands:$/,/^$/p' "$work/help" | sed -n 's/^  \(.*[^ ]\)  .*/\1/p' >"$work/commands"
  [[ -s $work/commands ]] || fail "$prog --help lists no commands"
  while read -r -a words; do
    XF_LOG_LEVEL=warn "$prog" "${words[@]}" --help >>"$work/help" || fail "$prog ${words[*]} --help"
  done <"$work/commands"
  # The options: the terms of the "  --flag ARG  what it does" lines.
  sed -n 's/^  \(-[^ ].*\)/\1/p' "$work/help" | sed 's/  .*//' | flags >"$work/options"
  flags <"$work/help" >"$work/help.flags"
  sed 's/\\-/-/g' "$page" | flags >"$work/page.flags"
  missing=$(comm -23 "$work/options" "$work/page.flags" | tr '\n' ' ')
  [[ -z $missing ]] || fail "${entry%%:*} does not mention $missing(options its --help lists)"
  stale=$(comm -13 "$work/help.flags" "$work/page.flags" | tr '\n' ' ')
  [[ -z $stale ]] || fail "${entry%%:*} names $stale(which no --help of ${prog##*/} names)"
done

n=$(sed -n 's/^#define XF_COORD_JOBS_MAX \([0-9][0-9]*\).*/\1/p' "$src"/coordinator/*.h)
[[ -n $n ]] || fail "no XF_COORD_JOBS_MAX in coordinator/*.h"
XF_LOG_LEVEL=warn "$build/coordinator/xfed-coord" run --help >"$work/run.help"
grep -q "runs up to $n jobs at once" "$work/run.help" ||
  fail "xfed-coord run --help does not say it runs up to $n jobs at once: $(cat "$work/run.help")"
! grep -q 'one at a time' "$work/run.help" || fail "xfed-coord run --help says 'one at a time'"
grep -q "runs up to $n jobs at once" "$build/deploy/man/xfed-coord.8" ||
  fail "xfed-coord.8 does not say it runs up to $n jobs at once"
# Every "up to N jobs" / "at most N jobs" of the docs is that number.
grep -noE '([Uu]p to|[Aa]t most) [0-9]+ jobs' "$src"/README.md "$src"/docs/*.md >"$work/docs" || true
[[ -s $work/docs ]] || fail "no document says how many jobs run at once"
wrong=$(grep -vE " $n jobs\$" "$work/docs" || true)
[[ -z $wrong ]] || fail "these say another number of jobs at once than $n: $wrong"
echo "ok: man pages"
