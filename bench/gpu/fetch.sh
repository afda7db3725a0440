#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares a GPU run on a machine that can reach Debian's registry: downloads
# the Debian packages xfed builds and runs against (the -dev packages, their
# runtime libraries, pkgconf, protobuf-c's compiler and the Fashion-MNIST
# dataset) into .gpu/debs, which git ignores. bench/gpu/run.sh, on the GPU
# machine, unpacks them into a private prefix; nothing there is installed
# over /. Idempotent: packages already downloaded are kept.
# The list is what a build with -DXF_HTTP=OFF -DXF_REPORT=OFF
# -DXF_SYSTEMD=OFF (run.sh's) finds with pkg-config: libmicrohttpd, cairo
# (with the X11, font and GLib -dev packages it requires), expat (only the
# report's test reads SVG) and libsystemd are left out on purpose.
#
# usage: bench/gpu/fetch.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
packages=(
  libssl-dev libssl3 libuv1-dev libuv1 libsodium-dev libsodium23
  libsqlite3-dev libsqlite3-0 libprotobuf-c-dev libprotobuf-c1
  protobuf-c-compiler libprotoc32 libprotobuf32 libjansson-dev libjansson4
  libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread
  libgfortran5 libquadmath0 zlib1g-dev zlib1g libcmocka-dev libcmocka0
  pkgconf pkgconf-bin libpkgconf3 dataset-fashion-mnist
  libonnx-dev
)
mkdir -p .gpu/debs
cd .gpu/debs
missing=()
for p in "${packages[@]}"; do
  compgen -G "${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get download "${missing[@]}" >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get download "${missing[@]}"
  }
fi
n=$(ls -1 ./*.deb | wc -l)
echo "fetch.sh: $n packages in .gpu/debs ($(du -sh . | cut -f1))"
