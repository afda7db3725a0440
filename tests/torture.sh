#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Allocation-failure torture (curl's `runtests.pl -t`): runs a cmocka test
# program once to count the allocations it makes through base/alloc.h, then
# once for every n from 1 to that count with the n-th allocation failing
# (XF_ALLOC_FAIL_AT=n), and checks that every run ends cleanly.
#
# Usage: tests/torture.sh PROGRAM [FILTER...]
#   FILTER  a cmocka test-name pattern (`*`, `?`): only the tests it matches
#           run, in the count and in every failing run (XF_TEST_FILTER,
#           tests/support.c). Each FILTER is tortured on its own, in turn;
#           without one, the whole program is.
# Environment: XF_TORTURE_TIMEOUT (default 60), the seconds one run may take.
#
# Clean means: every test passes (exit 0), or a test fails on its assertion
# (the failed allocation made the code under test return an error; the
# handler in tests/support.c then exits 85 after its leak check), or a test's
# setup could not build its fixture (cmocka skips that test and exits with
# the count of such tests; a sanitized build's leak check at exit still runs,
# exiting 86 on a leak). Anything
# else fails the torture: a crash, a hang, a sanitizer report (ASan, UBSan,
# LeakSanitizer: its leak check sees only memory the code under test dropped),
# or a glibc abort. Leaks are found only in a sanitized build (XF_SANITIZE=ON);
# the other checks hold in any build. cmocka's output of a run is kept only
# when the run is not clean.
set -uo pipefail

prog=${1:?usage: torture.sh PROGRAM [FILTER...]}
shift
filters=("$@")
((${#filters[@]})) || filters=("")
limit=${XF_TORTURE_TIMEOUT:-60}
name=$(basename "$prog")
work=$(mktemp -d "${TMPDIR:-/tmp}/xf-torture-$name-XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT

# Sanitizer reports must end the run with a status of their own, never by
# abort() (the handler would take that for a failed assertion); later options
# override what the caller set.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}abort_on_error=0:exitcode=86:detect_leaks=1"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:+$UBSAN_OPTIONS:}halt_on_error=1:exitcode=86:print_stacktrace=1"
# Text by which a run that exited 85 still shows it was not clean: cmocka
# caught a signal, glibc found a broken heap or an assert() failed.
bad_text='Test failed with exception|Assertion `|ERROR: (Address|Leak)Sanitizer|runtime error:|free\(\): |malloc\(\): |double free|corrupted|stack smashing'

# Tortures the tests `filter` matches (all for ""); returns 1 when a run was
# not clean.
torture() {
  local filter=$1 start=$SECONDS count n rc failed=0 bad=()
  export XF_TEST_FILTER="$filter"
  if ! XF_ALLOC_COUNT_FILE="$work/count" timeout "$limit" "$prog" >"$work/clean.log" 2>&1; then
    echo "torture $name${filter:+ ($filter)}: the run without a failing allocation fails:" >&2
    tail -n 60 "$work/clean.log" >&2
    return 1
  fi
  count=$(cat "$work/count" 2>/dev/null) || count=
  if ! [[ $count =~ ^[0-9]+$ ]] || ((count == 0)); then
    echo "torture $name${filter:+ ($filter)}: no allocation was counted (no test matches," \
         "or the program does not allocate through base/alloc.h)" >&2
    return 1
  fi
  for ((n = 1; n <= count; n++)); do
    XF_ALLOC_FAIL_AT=$n timeout "$limit" "$prog" >"$work/run.log" 2>&1
    rc=$?
    if ((rc == 0 || rc == 85)) && ! grep -Eq "$bad_text" "$work/run.log"; then
      ((rc == 85)) && ((failed++))
      continue
    fi
    if ((rc > 0 && rc < 85)) && grep -q 'Could not run test: Test setup failed' "$work/run.log" &&
       ! grep -Eq "$bad_text|Test teardown failed" "$work/run.log"; then
      ((failed++))
      continue
    fi
    bad+=("$n")
    if ((${#bad[@]} <= 3)); then
      echo "---- torture $name: allocation $n failing: exit $rc" \
           "(124: timed out after ${limit} s; 86: sanitizer report)" >&2
      echo "     rerun: XF_ALLOC_FAIL_AT=$n${filter:+ XF_TEST_FILTER='$filter'} $prog" >&2
      tail -n 80 "$work/run.log" >&2
      echo >&2
    fi
  done
  echo "torture $name${filter:+ ($filter)}: $count runs ($failed failed an assertion" \
       "cleanly, ${#bad[@]} not clean) in $((SECONDS - start)) s"
  if ((${#bad[@]})); then
    echo "torture $name${filter:+ ($filter)}: not clean with allocation n failing for n in:" \
         "${bad[*]}" >&2
    return 1
  fi
}

status=0
for f in "${filters[@]}"; do
  torture "$f" || status=1
done
exit "$status"
