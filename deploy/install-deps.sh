#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages of the profiles it is given, as deploy/deps.list
# lists them:
#   run    what the daemons and the CLI need at run time
#   build  building xfed from source and running the quickstart on that build
#   test   deploy/test.sh's suite: browser, Prometheus, ONNX, clang, podman ...
#   bench  the Python peers the benchmarks compare against
# The quickstart installs `build run`, deploy/test.sh `build run test`.
# Idempotent: checks each package first and runs apt-get only for what is
# missing.
#
# usage: deploy/install-deps.sh PROFILE...
#        deploy/install-deps.sh --list PROFILE...   (print the packages only)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=$here/deps.list
usage="usage: deploy/install-deps.sh [--list] PROFILE... (profiles: run build test bench)"

list_only=0
profiles=()
for arg in "$@"; do
  case "$arg" in
    --list) list_only=1 ;;
    run|build|test|bench) profiles+=("$arg") ;;
    -h|--help) sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install-deps: unknown profile '$arg'; $usage" >&2; exit 2 ;;
  esac
done
((${#profiles[@]})) || { echo "install-deps: no profile given; $usage" >&2; exit 2; }

# The packages of the profiles, in the list's order, each once.
packages=()
while read -r pkg profs _; do
  [[ -z $pkg || $pkg == \#* ]] && continue
  for p in "${profiles[@]}"; do
    if [[ ,$profs, == *,$p,* ]]; then packages+=("$pkg"); break; fi
  done
done <"$list"
if ((list_only)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

# bench/gpu/run.sh unpacks the same packages into a private prefix on a GPU
# machine that has no package registry, and says so with XF_DEPS_PREFIX.
if [[ -n "${XF_DEPS_PREFIX:-}" ]]; then
  echo "install-deps: using the packages unpacked in $XF_DEPS_PREFIX"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages of ${profiles[*]} present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then
    SUDO=sudo
  else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
