#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds xfed the two ways a packager does and fails on any compiler warning:
#   1. CMAKE_BUILD_TYPE=Release (-O3), what a packager configures first;
#   2. CMAKE_BUILD_TYPE=None with the flags of `dpkg-buildflags` (what
#      debhelper passes: -O2, _FORTIFY_SOURCE, -fstack-protector-strong,
#      -Werror=format-security, -z relro), then runs its unit tests.
# Both build with -DXF_WERROR=ON: XF_WERROR is off by default in Release so
# that a newer compiler's new warning cannot break a package build, but this
# tree's compiler must find nothing to warn about. The `slow` test
# packager_builds runs this script.
#
# usage: deploy/packager-builds.sh [DIR]   (default: a temporary directory,
#        removed afterwards; DIR is kept)
# Environment: JOBS (default 2), XF_CUDA (ON/OFF; default: CMake's choice).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
jobs=${JOBS:-2}
if [[ -n ${1:-} ]]; then
  work=$1
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/xf-packager-XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
command -v dpkg-buildflags >/dev/null ||
  { echo "packager-builds.sh: needs dpkg-buildflags (Debian's dpkg-dev)" >&2; exit 1; }
cuda=()
[[ -n ${XF_CUDA:-} ]] && cuda=(-DXF_CUDA="$XF_CUDA")
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache)

build() { # name, cmake arguments...
  local name=$1
  shift
  echo "== $name: configure"
  if ! cmake -S "$src" -B "$work/$name" -DXF_WERROR=ON "${cuda[@]}" "${launcher[@]}" "$@" \
    >"$work/$name.configure.log" 2>&1; then
    cat "$work/$name.configure.log"
    echo "packager-builds.sh: $name: configure failed" >&2
    return 1
  fi
  echo "== $name: build"
  if ! cmake --build "$work/$name" -j "$jobs" >"$work/$name.build.log" 2>&1; then
    grep -E -B2 -A6 "warning:|error:" "$work/$name.build.log" | head -80
    echo "packager-builds.sh: $name: build failed (log: $work/$name.build.log)" >&2
    return 1
  fi
}

build release -DCMAKE_BUILD_TYPE=Release

# debhelper's cmake step: build type None, the flags from the environment
# (CMake reads CFLAGS, CXXFLAGS and LDFLAGS when it first configures; CPPFLAGS
# go with CFLAGS, as debhelper does).
export DEB_BUILD_MAINT_OPTIONS=${DEB_BUILD_MAINT_OPTIONS:-hardening=+all}
CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  CXXFLAGS="$(dpkg-buildflags --get CXXFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
  build dpkg-buildflags -DCMAKE_BUILD_TYPE=None
echo "== dpkg-buildflags: flags used"
grep -E '^CMAKE_C_FLAGS:|^CMAKE_EXE_LINKER_FLAGS:' "$work/dpkg-buildflags/CMakeCache.txt"
echo "== dpkg-buildflags: unit tests"
ctest --test-dir "$work/dpkg-buildflags" -L unit -LE slow -j "$jobs" --output-on-failure
# The hardening reached the programs: full RELRO, and a fortified libc call.
xfed=$work/dpkg-buildflags/cli/xfed
readelf -d "$xfed" | grep -q BIND_NOW ||
  { echo "packager-builds.sh: $xfed is not linked with -z now" >&2; exit 1; }
readelf -lW "$xfed" | grep -q GNU_RELRO ||
  { echo "packager-builds.sh: $xfed has no RELRO segment" >&2; exit 1; }
nm -D "$xfed" | grep -q '_chk@' ||
  { echo "packager-builds.sh: $xfed calls no fortified libc function" >&2; exit 1; }
echo "packager-builds.sh: Release and dpkg-buildflags builds passed"
