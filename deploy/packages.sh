#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds xfed's Debian packages into BUILD/packages/ (xfed, xfed-coordinator,
# xfed-site, each with its -dbgsym .ddeb of debug symbols), checks them with
# lintian (no error, no warning), and proves them on a fresh Debian: a bookworm
# root made with mmdebstrap (--variant=apt, from the package registry), the
# packages' dependencies installed there with apt-get and the packages with
# dpkg -i; the xfed user and state directories checked; a coordinator and two
# sites started as user xfed from the ExecStart lines the installed units
# hold; a small job run to its end through them; then dpkg --purge, and
# nothing of xfed may be left. Never touches this machine's /etc or /usr.
#
# systemd cannot run as PID 1 inside this root (a chroot has no init of its
# own), so the daemons run from the units' command lines, under the units'
# User=; the units themselves are checked by `systemd-analyze verify`
# (tests/integration/units.sh). The script says which path it took.
#
# usage: deploy/packages.sh [--build DIR] [--data DIR] [--keep]
#   --build DIR   build directory for the packages (default ./build-pkg),
#                 configured Release (with -g), prefix /usr; the packages
#                 are left in DIR/packages/ either way
#   --data DIR    Fashion-MNIST (default /usr/share/datasets/fashion-mnist)
#   --keep        also leave the Debian root the packages were proved in
#                 (about 500 MB under $TMPDIR, or /tmp) and its logs
# Needs root (chroot), mmdebstrap, lintian and the package registry
# (deploy/install-deps.sh test installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
build=build-pkg
data=/usr/share/datasets/fashion-mnist
keep=0
while (($#)); do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '3,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "packages.sh: unknown option '$1'; see deploy/packages.sh --help" >&2; exit 2 ;;
  esac
done
say() { echo "==> $*"; }
die() { echo "packages.sh: FAIL: $*" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || die "needs root for chroot; run it as root"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (deploy/install-deps.sh test installs it)"
command -v lintian >/dev/null || die "lintian is missing (deploy/install-deps.sh test installs it)"
[[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
  die "Fashion-MNIST is not at $data (deploy/install-deps.sh build installs dataset-fashion-mnist)"

say "build the packages in $build"
# Release with -g, as Debian builds: the symbols cpack strips out of the
# binaries go to the -dbgsym packages.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-g -DCMAKE_INSTALL_PREFIX=/usr -DXF_CUDA=OFF \
  -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; die "cmake configure"; }
rm -f "$build.configure.log"
cmake --build "$build" -j "${XF_JOBS:-2}" --target xfed xfed-coord xfed-site >/dev/null
build=$(cd "$build" && pwd)
rm -rf "$build/packages"
(cd "$build" && cpack -G DEB >/dev/null)
debs=("$build"/packages/*.deb)
((${#debs[@]} == 3)) || die "expected 3 packages, cpack made: ${debs[*]}"
for d in "${debs[@]}"; do echo "    $(basename "$d")"; done
ddebs=("$build"/packages/*-dbgsym_*.ddeb)
((${#ddebs[@]} == 3)) || die "expected 3 -dbgsym packages, cpack made: ${ddebs[*]}"

say "lintian"
report=$(lintian --no-cfg "${debs[@]}" 2>&1 | grep -E '^[EW]: ' || true)
[[ -z $report ]] || { echo "$report" >&2; die "lintian reports errors or warnings on the packages"; }
echo "    no error, no warning"

root=$(mktemp -d "${TMPDIR:-/tmp}/xfed-debroot-XXXXXX")
daemons=()
mounted=0
cleanup() {
  local pid
  for pid in "${daemons[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if ((mounted)); then umount "$root/proc" 2>/dev/null || true; fi
  if ((keep)); then
    echo "kept the Debian root $root ($(du -sh "$root" 2>/dev/null | cut -f1)); remove it with rm -rf" >&2
  else
    rm -rf "$root"
  fi
}
trap cleanup EXIT
in_root() { chroot "$root" "$@"; }

say "a fresh Debian bookworm in $root (mmdebstrap --variant=apt)"
mmdebstrap --quiet --variant=apt bookworm "$root" >"$root.mmdebstrap.log" 2>&1 ||
  { cat "$root.mmdebstrap.log"; rm -f "$root.mmdebstrap.log"; die "mmdebstrap could not make the root"; }
rm -f "$root.mmdebstrap.log"
mount -t proc proc "$root/proc" && mounted=1 ||
  echo "    (no /proc in the root: this machine does not allow the mount)"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mkdir -p "$root/tmp/debs" "$root/srv/fashion-mnist"
cp "${debs[@]}" "$root/tmp/debs/"
cp "$data"/*-ubyte* "$root/srv/fashion-mnist/"

say "install: the packages' dependencies with apt-get, the packages with dpkg -i"
deps=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Depends; done | tr ',' '\n' |
  sed 's/([^)]*)//; s/ //g' | grep -v -E '^(xfed|xfed-coordinator|xfed-site)$' | sort -u | tr '\n' ' ')
in_root env DEBIAN_FRONTEND=noninteractive apt-get -q update >/dev/null
# shellcheck disable=SC2086 # one word per package
in_root env DEBIAN_FRONTEND=noninteractive apt-get -q -y install --no-install-recommends $deps \
  >"$root/tmp/apt.log" 2>&1 || { cat "$root/tmp/apt.log"; die "apt-get install $deps"; }
before=$(in_root find / -xdev -path /proc -prune -o -print | sort)
in_root dpkg -i "${debs[@]/#*\//\/tmp\/debs\/}" \
  >"$root/tmp/dpkg.log" 2>&1 || { cat "$root/tmp/dpkg.log"; die "dpkg -i"; }
for p in xfed xfed-coordinator xfed-site; do
  in_root dpkg-query -W -f='${Status}' "$p" | grep -q "install ok installed" || die "$p is not installed"
done
in_root getent passwd xfed >/dev/null || die "no xfed user after installing"
[[ $(in_root stat -c '%U:%G %a' /var/lib/xfed/coordinator) == "xfed:xfed 700" ]] ||
  die "/var/lib/xfed/coordinator is $(in_root stat -c '%U:%G %a' /var/lib/xfed/coordinator)"
[[ $(in_root stat -c '%U:%G %a' /etc/xfed/pki) == "root:xfed 750" ]] || die "/etc/xfed/pki has the wrong owner or mode"
in_root xfed --help >/dev/null || die "xfed --help fails in the root"
echo "    installed; user xfed, /var/lib/xfed/{coordinator,site} (0700), /etc/xfed/pki (0750)"

if [[ $(cat /proc/1/comm 2>/dev/null) == systemd ]]; then
  why="this machine runs systemd as PID 1, but not inside the chroot"
else
  why="PID 1 here is '$(cat /proc/1/comm 2>/dev/null || echo unknown)', not systemd"
fi
say "start the daemons from the units' ExecStart lines ($why)"
exec_start() { # the unit's ExecStart line, %i replaced by $2
  sed -n 's/^ExecStart=//p' "$root/usr/lib/systemd/system/$1" | sed "s/%i/${2:-}/g"
}
coord_cmd=$(exec_start xfed-coordinator.service)
site_cmd=$(exec_start xfed-site.service)
unit_user=$(sed -n 's/^User=//p' "$root/usr/lib/systemd/system/xfed-coordinator.service")
echo "    $coord_cmd"
echo "    $site_cmd"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

# The federation's PKI, made with the installed CLI; the identities go
# where the packages' settings look for them.
fed=/root/federation
in_root xfed pki init --dir $fed --federation pkgtest >/dev/null
in_root xfed pki issue --dir $fed --kind coordinator --name coord >/dev/null
in_root xfed pki issue --dir $fed --kind user --name rita --role researcher >/dev/null
for s in s1 s2; do in_root xfed pki issue --dir $fed --kind site --name $s --region us >/dev/null; done
in_root install -o root -g xfed -m 0644 $fed/ca.crt $fed/crl.pem $fed/issued/coord.crt \
  $fed/issued/s1.crt $fed/issued/s2.crt /etc/xfed/pki/
in_root install -o xfed -g xfed -m 0600 $fed/issued/coord.key $fed/issued/s1.key \
  $fed/issued/s2.key /etc/xfed/pki/
in_root mv /etc/xfed/pki/coord.crt /etc/xfed/pki/coordinator.crt
in_root mv /etc/xfed/pki/coord.key /etc/xfed/pki/coordinator.key
# The operator's edit of the shipped settings: where to listen, and no
# residency policy for this small flat federation.
sed -i "s/\"listen\": \"[^\"]*\"/\"listen\": \"127.0.0.1:$port\"/" "$root/etc/xfed/coordinator.json"
sed -i 's/^{/{\n  "residency_policy": "off",/' "$root/etc/xfed/coordinator.json"

export XF_LOG_LEVEL=warn
in_root xfed data split --data /srv/fashion-mnist --sites 2 --scheme iid --seed 7 --out /srv/shards \
  --min-records 1000 >/dev/null
in_root chmod -R a+rX /srv/shards
# Two sites on one host: the second in its own directory, with the same
# command line otherwise.
site_dirs=(/var/lib/xfed/site /var/lib/xfed/site2)
in_root install -d -o xfed -g xfed -m 0700 /var/lib/xfed/site2
for n in 1 2; do
  d=${site_dirs[n - 1]}
  in_root runuser -u xfed -- xfed-site init --dir "$d" --name "s$n" --region us \
    --coordinator "127.0.0.1:$port" --cert "/etc/xfed/pki/s$n.crt" --key "/etc/xfed/pki/s$n.key" \
    --ca /etc/xfed/pki/ca.crt --crl /etc/xfed/pki/crl.pem --threads 1 --backend cpu >/dev/null
  in_root runuser -u xfed -- xfed-site dataset add --dir "$d" --name fmnist --path "/srv/shards/site-$n" \
    --tag fmnist >/dev/null
done

logs=$root/tmp/logs
mkdir -p "$logs"
# shellcheck disable=SC2086 # the unit's command line, split as systemd splits it
XF_LOG_LEVEL=info chroot "$root" runuser -u "$unit_user" -- $coord_cmd 2>"$logs/coord.log" &
daemons+=($!)
wait_log() { # wait_log FILE REGEX SECONDS
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    grep -q -E "$2" "$1" && return 0
    sleep 0.2
  done
  tail -n 20 "$1" >&2
  die "no '$2' in $(basename "$1") within $3 s"
}
wait_log "$logs/coord.log" "event=coordinator_started .*port=$port" 60
for n in 1 2; do
  cmd=${site_cmd//\/var\/lib\/xfed\/site/${site_dirs[n - 1]}}
  # shellcheck disable=SC2086
  XF_LOG_LEVEL=info chroot "$root" runuser -u "$unit_user" -- $cmd 2>"$logs/s$n.log" &
  daemons+=($!)
done
wait_log "$logs/coord.log" "event=site_announced site=s1 " 60
wait_log "$logs/coord.log" "event=site_announced site=s2 " 60

say "run a job: 2 rounds of an MLP on the two sites"
cat >"$root/tmp/job.json" <<'JSON'
{"name": "packages", "model": {"arch": "mlp", "hidden": [32]},
 "data": {"dataset": "fmnist"}, "rounds": 2, "min_sites": 2, "round_deadline_s": 300,
 "local": {"epochs": 1, "batch_size": 64, "lr": 0.05, "momentum": 0.9}, "seed": 11}
JSON
in_root env XF_LOG_LEVEL=warn xfed job submit /tmp/job.json --wait --coordinator "127.0.0.1:$port" \
  --cert $fed/issued/rita.crt --key $fed/issued/rita.key --ca $fed/ca.crt --crl $fed/crl.pem \
  >"$logs/job.out" 2>&1 || { cat "$logs/job.out"; die "the job did not finish"; }
final=$(grep '^final accuracy=' "$logs/job.out") || { cat "$logs/job.out"; die "no final line from the job"; }
echo "    $final"
for pid in "${daemons[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${daemons[@]}"; do wait "$pid" 2>/dev/null || true; done
daemons=()
grep -q "event=coordinator_stopped" "$logs/coord.log" || die "the coordinator did not stop cleanly"

say "purge"
# The second site's directory is this script's, not the package's.
in_root rm -rf /var/lib/xfed/site2
in_root dpkg --purge xfed-site xfed-coordinator xfed >"$root/tmp/purge.log" 2>&1 ||
  { cat "$root/tmp/purge.log"; die "dpkg --purge"; }
in_root getent passwd xfed >/dev/null && die "the xfed user is left after purging"
in_root getent group xfed >/dev/null && die "the xfed group is left after purging"
after=$(in_root find / -xdev -path /proc -prune -o -print | sort)
# What the test itself made (the PKI under /root, the data under /srv, its
# logs and packages under /tmp) is not the packages' to remove; nor are the
# backups useradd and userdel keep of the account files (/etc/shadow- ...).
left=$(comm -13 <(echo "$before") <(echo "$after") |
  grep -v -E '^/(root/federation|srv/|tmp/|var/lib/dpkg/|var/log/|var/cache/)' |
  grep -v -E '^/etc/(passwd|group|shadow|gshadow)-$' |
  grep -v -E '^/(srv|root)$' || true)
[[ -z $left ]] || die "left after dpkg --purge: $left"
for p in /etc/xfed /var/lib/xfed /usr/bin/xfed /usr/bin/xfed-coord /usr/bin/xfed-site; do
  [[ ! -e $root$p ]] || die "$p is left after dpkg --purge"
done
echo "    nothing of xfed is left"
echo "packages: ok (daemons run from the units' command lines: $why)"
echo "packages: $build/packages/ (install with apt-get install $build/packages/xfed-site_*.deb)"
