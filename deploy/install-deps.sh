#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages xfed builds, tests and demonstrates with.
# Idempotent: checks each package first and runs apt-get only for what is
# missing. Usage: deploy/install-deps.sh [--bench]  (--bench adds the Python
# peers the benchmarks compare against).
set -euo pipefail

# bench/gpu/run.sh unpacks the same packages into a private prefix on a GPU
# machine that has no package registry, and says so with XF_DEPS_PREFIX.
if [[ -n "${XF_DEPS_PREFIX:-}" ]]; then
  echo "install-deps: using the packages unpacked in $XF_DEPS_PREFIX"
  exit 0
fi

packages=(
  build-essential cmake pkg-config git
  libssl-dev openssl libuv1-dev libsodium-dev libsqlite3-dev
  libprotobuf-c-dev protobuf-c-compiler libjansson-dev
  libopenblas-dev zlib1g-dev libcmocka-dev
  libcairo2-dev libexpat1-dev
  chromium chromium-driver python3-selenium libjs-chart.js curl
  clang libclang-rt-dev
  dataset-fashion-mnist
  libmicrohttpd-dev libgnutls28-dev prometheus
  libsystemd-dev systemd procps python3 dpkg-dev mmdebstrap
  podman runc catatonit
  libonnx-dev python3-onnx python3-numpy python3-venv
  python3-torch
)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(python3 python3-torch python3-numpy)
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
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
