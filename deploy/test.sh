#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what is missing, builds, and runs the whole test suite: once in the
# normal build, once more under AddressSanitizer + UndefinedBehaviorSanitizer
# followed there by the allocation-failure torture (tests labelled `torture`),
# then a short libFuzzer session per fuzz target (when clang can build them).
#
# Usage: deploy/test.sh [--all] [--no-sanitize] [--no-torture] [--no-fuzz]
#   --all          also run the tests labelled `slow` (in the normal build; the
#                  sanitized build, at -O0, runs every test but those)
#   --no-sanitize  skip the ASan+UBSan pass, torture included
#   --no-torture   skip the torture (tests/torture.cmake) in the ASan+UBSan pass
#   --no-fuzz      skip the short fuzzing sessions (the seed corpora are still
#                  replayed as ordinary tests)
# Environment: JOBS; XF_FUZZ_BUDGET (default 300), the seconds the fuzzing
# sessions take in all, split evenly over the fuzz targets, which run
# XF_FUZZ_JOBS (default: JOBS, at most 2) at a time; XF_FUZZ_SECONDS, when
# set, the seconds per target instead.
set -euo pipefail
cd "$(dirname "$0")/.."

all=0 sanitize=1 torture=1 fuzz=1
for arg in "$@"; do
  case "$arg" in
    --all) all=1 ;;
    --no-sanitize) sanitize=0 ;;
    --no-torture) torture=0 ;;
    --no-fuzz) fuzz=0 ;;
    -h|--help) sed -n '3,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown option '$arg'; see deploy/test.sh --help" >&2; exit 2 ;;
  esac
done

bash deploy/install-deps.sh build run test
jobs=${JOBS:-$(nproc)}
# The torture tests are `slow` too; they run once, in the sanitized build.
exclude=(-LE torture)
((all)) || exclude=(-LE slow)

section() { printf '\n==== %s ====\n' "$*"; }

section "build (RelWithDebInfo)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >build-configure.log 2>&1 ||
  { cat build-configure.log; exit 1; }
grep -E "CUDA|nvcc" build-configure.log || true
cmake --build build -j "$jobs"

if ((sanitize)); then
  section "build (ASan + UBSan)"
  # The CUDA runtime and ASan's shadow memory do not mix; the sanitized build
  # covers the host code, the gpu tests run in the normal build.
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DXF_SANITIZE=ON -DXF_CUDA=OFF \
    >build-asan-configure.log 2>&1 || { cat build-asan-configure.log; exit 1; }
  cmake --build build-asan -j "$jobs"
  section "tests (ASan + UBSan)"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -LE slow
  if ((torture)); then
    section "allocation-failure torture (ASan + UBSan)"
    started=$SECONDS
    ctest --test-dir build-asan --output-on-failure -j "$jobs" -L torture
    echo "torture: $((SECONDS - started)) s on $jobs jobs"
  fi
fi

if ((fuzz)) && command -v clang >/dev/null; then
  if ! cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DXF_FUZZ=ON -DXF_CUDA=OFF \
         -DCMAKE_BUILD_TYPE=Debug >build-fuzz-configure.log 2>&1 ||
     ! cmake --build build-fuzz -j "$jobs" >build-fuzz.log 2>&1; then
    echo "fuzz build failed; see build-fuzz.log" >&2
    tail -30 build-fuzz.log >&2 || cat build-fuzz-configure.log >&2
    exit 1
  fi
  targets=(build-fuzz/tests/*_fuzzer)
  par=${XF_FUZZ_JOBS:-$((jobs < 2 ? jobs : 2))}
  ((par >= 1)) || par=1
  # The budget is wall time: `par` targets fuzz at once, each for `per` s.
  per=${XF_FUZZ_SECONDS:-$(( ${XF_FUZZ_BUDGET:-300} * par / ${#targets[@]} ))}
  ((per >= 5)) || per=5
  section "fuzzing (${#targets[@]} targets, ${per} s each, ${par} at a time)"
  works=()
  trap 'rm -rf "${works[@]}"' EXIT
  for ((i = 0; i < ${#targets[@]}; i += par)); do
    pids=() names=()
    for f in "${targets[@]:i:par}"; do
      name=$(basename "$f" _fuzzer)
      work=$(mktemp -d)
      works+=("$work")
      cp -r "tests/fuzz/corpus/$name/." "$work/"
      dict=()
      [[ -f "tests/fuzz/$name.dict" ]] && dict=(-dict="tests/fuzz/$name.dict")
      "$f" -max_total_time="$per" -print_final_stats=0 -artifact_prefix="build-fuzz/$name-" \
        "${dict[@]}" "$work" >"build-fuzz/$name.log" 2>&1 &
      pids+=($!) names+=("$name")
    done
    for k in "${!pids[@]}"; do
      name=${names[k]}
      if ! wait "${pids[k]}"; then
        echo "fuzz $name failed (its input: build-fuzz/$name-*):" >&2
        tail -50 "build-fuzz/$name.log" >&2
        kill "${pids[@]}" 2>/dev/null || true
        exit 1
      fi
      echo "fuzz $name: $(grep -E "^#[0-9]+.*DONE" "build-fuzz/$name.log" | tail -1 || true)"
    done
  done
  rm -rf "${works[@]}"
  works=()
  trap - EXIT
fi

section "tests"
ctest --test-dir build --output-on-failure -j "$jobs" "${exclude[@]}"
