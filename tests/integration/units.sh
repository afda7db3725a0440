#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The installed systemd units pass `systemd-analyze verify` with no warning:
# the build is installed into a fresh root (DESTDIR), next to a copy of this
# machine's systemd units (the targets ours order against) and kill(1), and
# each unit is verified against that root, an aggregator as instance eu.
# The man pages are installed too and, where man(1) is here, render without
# a warning. usage: units.sh BUILD_DIR
set -euo pipefail
build=$(cd "${1:?usage: units.sh BUILD_DIR}" && pwd)
command -v systemd-analyze >/dev/null ||
  { echo "FAIL: systemd-analyze is missing (deploy/install-deps.sh test installs systemd)" >&2; exit 1; }
root=$(mktemp -d "${TMPDIR:-/tmp}/xfed-units-XXXXXX")
trap 'rm -rf "$root"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

for c in cli coordinator site; do
  DESTDIR=$root cmake --install "$build" --component "$c" >/dev/null
done
prefix=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
unitdir=$(sed -n 's/^XF_SYSTEMD_UNIT_DIR:STRING=//p' "$build/CMakeCache.txt")
units=$root$prefix/$unitdir
for u in xfed-coordinator.service xfed-aggregator@.service xfed-site.service; do
  [[ -f $units/$u ]] || fail "cmake --install put no $u in $prefix/$unitdir"
done
mkdir -p "$root/usr/lib/systemd/system" "$root/bin"
cp -a /lib/systemd/system/. "$root/usr/lib/systemd/system/"
[[ -x /bin/kill ]] || fail "/bin/kill (procps) is missing: the units reload with it"
cp -L /bin/kill "$root/bin/kill"
for u in xfed-coordinator.service xfed-aggregator@eu.service xfed-site.service; do
  unit=$units/$u
  [[ $u == *@eu.service ]] && { cp "$units/xfed-aggregator@.service" "$unit"; }
  out=$(systemd-analyze verify --root="$root" --man=no "$unit" 2>&1) ||
    fail "systemd-analyze verify $u: $out"
  [[ -z $out ]] || fail "systemd-analyze verify $u warns: $out"
  for key in Type=notify WatchdogSec= ExecReload= User=xfed StateDirectory= NoNewPrivileges=yes \
             ProtectSystem=strict SystemCallFilter=@system-service CapabilityBoundingSet=; do
    grep -q "^$key" "$unit" || fail "$u has no $key"
  done
  echo "ok $u"
done

# Installed as gzip -9n makes them: no file name or time in the header.
for page in man1/xfed.1 man8/xfed-coord.8 man8/xfed-site.8; do
  f=$root$prefix/share/man/$page.gz
  [[ -s $f ]] || fail "no man page $page.gz"
  [[ $(od -An -tx1 -j3 -N5 "$f" | tr -d ' ') == 0000000000 ]] ||
    fail "$page.gz holds a file name or a time (gzip -9n leaves them out)"
  zcat "$f" | grep -q '@XF_VERSION@' && fail "$page still holds @XF_VERSION@"
  if command -v man >/dev/null; then
    warn=$(MANWIDTH=80 man --warnings -l "$f" 2>&1 >/dev/null) || fail "man $page: $warn"
    [[ -z $warn ]] || fail "man $page warns: $warn"
  fi
  echo "ok $page"
done
for c in xfed xfed-coord xfed-site; do
  [[ -s $root$prefix/share/bash-completion/completions/$c ]] || fail "no bash completion for $c"
done
echo "units: verified"
