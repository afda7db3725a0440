#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the OCI image xfed:VERSION from xfed's Debian packages with tools
# from Debian: mmdebstrap makes a bookworm root of the `essential` variant
# (no apt, no compiler inside) with the three packages installed by apt from
# the local .debs and their dependencies from the package registry;
# `podman import` turns it into an image whose entrypoint
# (deploy/container/xfed-entrypoint) runs one daemon by role as user xfed.
# deploy/pod.yaml runs a small federation of it (`podman kube play`).
#
# usage: deploy/image.sh [--debs DIR | --build DIR] [--tag NAME:VERSION]
#   --debs DIR    take xfed, xfed-coordinator and xfed-site .debs from DIR
#   --build DIR   build them first, as deploy/packages.sh does, in DIR
#                 (default ./build-pkg; Release with -g, prefix /usr)
#   --tag T       the image's name (default xfed:VERSION, VERSION the
#                 packages' upstream version)
# Needs root (mmdebstrap's root mode), mmdebstrap, podman and the package
# registry. Podman's storage is whatever the environment names
# (CONTAINERS_STORAGE_CONF, CONTAINERS_CONF), the system's by default.
set -euo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."
build=./build-pkg
debdir=
tag=
while (($#)); do
  case "$1" in
    --debs) debdir=${2:?--debs needs a directory}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --tag) tag=${2:?--tag needs NAME:VERSION}; shift 2 ;;
    -h|--help) sed -n '3,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown option '$1'; see deploy/image.sh --help" >&2; exit 2 ;;
  esac
done
# --debs and --build are relative to where the script was started from.
[[ -z $debdir || $debdir == /* ]] || debdir=$caller/$debdir
[[ $build == ./build-pkg || $build == /* ]] || build=$caller/$build
say() { echo "==> $*"; }
die() { echo "image.sh: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root for mmdebstrap's root mode; run it as root"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (deploy/install-deps.sh test installs it)"
command -v podman >/dev/null || die "podman is missing (deploy/install-deps.sh test installs it)"

if [[ -z $debdir ]]; then
  say "build the packages in $build"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g -DCMAKE_INSTALL_PREFIX=/usr -DXF_CUDA=OFF \
    -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; die "cmake configure"; }
  rm -f "$build.configure.log"
  cmake --build "$build" -j "${XF_JOBS:-2}" --target xfed xfed-coord xfed-site >/dev/null
  rm -rf "$build/packages"
  (cd "$build" && cpack -G DEB >/dev/null)
  debdir=$build/packages
fi
[[ -d $debdir ]] || die "--debs $debdir is not a directory"
debdir=$(cd "$debdir" && pwd)
debs=()
for p in xfed xfed-coordinator xfed-site; do
  f=("$debdir/${p}_"*.deb)
  if ((${#f[@]} != 1)) || [[ ! -f ${f[0]} ]]; then
    die "want one ${p}_*.deb in $debdir, found: ${f[*]}; leave out --debs to build them, or see docs/development.md"
  fi
  debs+=("${f[0]}")
done
version=$(dpkg-deb -f "${debs[0]}" Version)
version=${version%-*}
tag=${tag:-xfed:$version}

work=$(mktemp -d "${TMPDIR:-/tmp}/xfed-image-XXXXXX")
trap 'rm -rf "$work"' EXIT
includes=()
for d in "${debs[@]}"; do includes+=("--include=$d"); done
say "a bookworm root with the packages (mmdebstrap --variant=essential)"
# The file-mirror-automount hook makes the .debs visible inside the root at
# the paths apt gives dpkg. No documentation or translations in the image
# (but the copyright files); no apt lists or caches. The hooks' $1 is the
# root, for mmdebstrap's shell to expand.
# shellcheck disable=SC2016
mmdebstrap --quiet --mode=root --variant=essential "${includes[@]}" \
  --hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook='copy-in deploy/container/xfed-entrypoint /usr/local/bin' \
  --customize-hook='chmod 0755 "$1/usr/local/bin/xfed-entrypoint"' \
  --customize-hook='chroot "$1" xfed --help >/dev/null' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
  bookworm "$work/root.tar" >"$work/mmdebstrap.log" 2>&1 ||
  { cat "$work/mmdebstrap.log"; die "mmdebstrap could not make the root"; }

say "import it as $tag"
podman import --quiet \
  --change 'ENTRYPOINT ["/usr/local/bin/xfed-entrypoint"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'WORKDIR /' \
  --change "LABEL org.opencontainers.image.title=xfed org.opencontainers.image.version=$version" \
  --message "xfed $version from ${debs[*]##*/}" \
  "$work/root.tar" "$tag" >/dev/null || die "podman import of the root as $tag"
echo "    $tag ($(du -m "$work/root.tar" | cut -f1) MB root)"
