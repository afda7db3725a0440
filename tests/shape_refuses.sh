#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The size check (tests/shape.sh) on generated trees: a function one line
# past the limit and a file one line past it are refused by file:line, name
# and length; a function exactly at the limit, long tables (one of function
# pointers), a long function in tests/, a build folder or a generated file
# are not; listing the two as exceptions passes;
# an exception that matches nothing or gives no reason is refused.
#   tests/shape_refuses.sh tests/shape.sh
set -euo pipefail
check=${1:?usage: shape_refuses.sh SHAPE.SH}
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-shape.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A definition of LINES lines in the tree's style, its signature on two lines.
function_of() {
  local name=$1 lines=$2 i
  printf '__attribute__((format(printf, 1, 2))) static int %s(const char *fmt,\n' "$name"
  printf '    ...) {\n'
  for ((i = 0; i < lines - 4; i++)); do printf '    (void)fmt;\n'; done
  printf '    return 0;\n}\n'
}
tree=$work/tree
mkdir -p "$tree"/data "$tree"/tests "$tree"/build "$tree"/docs
{
  echo '// SPDX-License-Identifier: Apache-2.0'
  echo
  function_of just_fits 120
  echo 'static int one_line(void) { return 0; }'
  echo 'static void (*const handlers[200])(int) = {'
  for ((i = 0; i < 200; i++)); do echo "    0,"; done
  echo '};'
  function_of too_long 121
  echo 'static const int table[] = {'
  for ((i = 0; i < 200; i++)); do echo "    $i,"; done
  echo '};'
} >"$tree"/data/reader.c
long_at=$(grep -n 'too_long(' "$tree"/data/reader.c | cut -d: -f1)
for ((i = 0; i < 1501; i++)); do echo '/* a line */'; done >"$tree"/data/big.h
function_of in_a_test 400 >"$tree"/tests/test_reader.c
function_of in_a_build 400 >"$tree"/build/generated.c
{ echo '/* DO NOT EDIT: written by the build */'; function_of generated 400; } >"$tree"/data/table.c

doc() { { echo '# Developing'; echo; echo '### Files and functions past the size limits'; echo; cat; echo; echo '## Tests'; } >"$work/doc.md"; }

doc </dev/null
if out=$(bash "$check" "$tree" "$work/doc.md" 2>&1); then fail "a tree past the limits passed: $out"; fi
grep -qF "data/reader.c:$long_at: function too_long is 121 lines (limit 120)" <<<"$out" || fail "no long function: $out"
grep -qF "data/big.h: 1501 lines (limit 1500)" <<<"$out" || fail "no long file: $out"
grep -qF 'split it' <<<"$out" || fail "no advice: $out"
if grep -qE 'just_fits|one_line|handlers|table|in_a_test|in_a_build|generated|function void' <<<"$out"; then fail "refused what is within the limits: $out"; fi

doc <<'LIST'
- `data/reader.c:too_long` — a fixture's long function.
- `data/big.h` — a fixture's long file.
LIST
out=$(bash "$check" "$tree" "$work/doc.md" 2>&1) || fail "listed exceptions still refused: $out"
grep -qF 'data' <<<"$out" || fail "the new module folder data/ was not discovered: $out"

doc <<'LIST'
- `data/reader.c:*` — every function of a fixture.
- `data/big.h` — a fixture's long file.
- `data/reader.c:just_fits` — within the limit.
- `data/gone.c`
LIST
if out=$(bash "$check" "$tree" "$work/doc.md" 2>&1); then fail "stale exceptions passed: $out"; fi
grep -qF '`data/reader.c:just_fits`: no longer past the limit' <<<"$out" || fail "stale exception not named: $out"
grep -qF '`data/gone.c`: no reason given' <<<"$out" || fail "exception without a reason not named: $out"
if grep -qE 'too_long|big.h' <<<"$out"; then fail "listed exceptions refused: $out"; fi

echo '# Developing' >"$work/doc.md"
if out=$(bash "$check" "$tree" "$work/doc.md" 2>&1); then fail "a doc without the list passed: $out"; fi
grep -qF 'no section' <<<"$out" || fail "missing section not named: $out"
echo "shape check refuses what it should"
