#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The OCI image and the pod spec, started: deploy/image.sh builds xfed:VERSION
# from the Debian packages; `podman kube play deploy/pod.yaml` (its ports
# moved to free ones) makes the federation's identities and data shards and
# starts a coordinator, an eu aggregator and two sites; a two-round job
# submitted with the image's own `xfed` (the researcher's identity volume
# mounted) finishes; `podman pod stop` stops every daemon cleanly. Then the
# pod, its volumes, the image and podman's storage are removed, also on
# failure.
#
# Podman keeps everything under this test's directory: storage, run state
# and its temporary files through CONTAINERS_CONF/CONTAINERS_STORAGE_CONF,
# and the rest (its image-blob cache in /var/lib/containers) in a private
# mount namespace whose /var/lib is an overlay with the upper layer here.
# Exits 77 (skipped) where this host cannot run containers: not root, no
# podman, no private mount namespace, or podman cannot start the image.
#
# usage: container.sh [--build DIR] [--data DIR]
#   --build DIR   where deploy/image.sh builds the packages (default ./build-pkg)
#   --data DIR    Fashion-MNIST (default /usr/share/datasets/fashion-mnist)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
build=$src/build-pkg
data=/usr/share/datasets/fashion-mnist
while (($#)); do
  case "$1" in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --data) data=${2:?--data needs a directory}; shift 2 ;;
    *) fail "unknown option '$1'; usage: container.sh [--build DIR] [--data DIR]" ;;
  esac
done

if [[ -z ${XF_CONTAINER_NS:-} ]]; then
  [[ $(id -u) -eq 0 ]] || skip "needs root (mmdebstrap's root mode, podman's root storage)"
  command -v podman >/dev/null || skip "podman is not installed (deploy/install-deps.sh test installs it)"
  command -v mmdebstrap >/dev/null || fail "mmdebstrap is missing (deploy/install-deps.sh test installs it)"
  [[ -f $data/train-images-idx3-ubyte.gz || -f $data/train-images-idx3-ubyte ]] ||
    fail "Fashion-MNIST is not at $data (deploy/install-deps.sh build installs dataset-fashion-mnist)"
  work=$(mktemp -d "${TMPDIR:-/tmp}/xfed-container-XXXXXX")
  export XF_CONTAINER_NS=$work
  rc=0
  unshare --mount --propagation private -- bash "$0" --build "$build" --data "$data" || rc=$?
  # Whatever the run inside left (overlay mounts die with its namespace).
  rm -rf "$work"
  exit "$rc"
fi

work=$XF_CONTAINER_NS
mkdir -p "$work"/{varlib/upper,varlib/work,storage,run,tmp,conf}
mount -t overlay overlay \
  -o "lowerdir=/var/lib,upperdir=$work/varlib/upper,workdir=$work/varlib/work" /var/lib ||
  skip "cannot lay a private overlay over /var/lib in a new mount namespace"

# runc rather than crun where both are here: crun refuses hosts whose
# cgroup v2 hierarchy holds controllers beside v1 ones ("cgroups in hybrid
# mode not supported"). Limits no larger than a host without
# CAP_SYS_RESOURCE lets a container have (podman's defaults are above them).
runtime=
command -v runc >/dev/null && runtime="runtime = \"runc\""
cat >"$work/conf/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
$runtime
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$work/tmp/libpod"
image_copy_tmp_dir = "$work/tmp"
volume_path = "$work/storage/volumes"
EOF
cat >"$work/conf/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$work/storage"
runroot = "$work/run"
EOF
export CONTAINERS_CONF=$work/conf/containers.conf CONTAINERS_STORAGE_CONF=$work/conf/storage.conf
export CONTAINERS_REGISTRIES_CONF=$work/conf/registries.conf TMPDIR=$work/tmp
: >"$CONTAINERS_REGISTRIES_CONF"

tag=
pod=
cleanup() {
  local rc=$?
  set +e
  if [[ -n $pod ]]; then
    if ((rc != 0)); then
      for c in coordinator aggregator-eu s1 s2; do
        echo "--- xfed-$c" >&2
        podman logs xfed-$c 2>&1 | tail -n 15 >&2
      done
    fi
    podman kube down "$pod" >/dev/null 2>&1
  fi
  podman volume prune -f >/dev/null 2>&1
  [[ -n $tag ]] && podman rmi -f "$tag" >/dev/null 2>&1
  podman system reset -f >/dev/null 2>&1
  umount "$work/storage/overlay" 2>/dev/null
  exit "$rc"
}
trap cleanup EXIT

echo "==> the image (deploy/image.sh)"
out=$(bash "$src/deploy/image.sh" --build "$build" 2>&1) || { echo "$out"; fail "deploy/image.sh"; }
echo "$out"
tag=$(sed -n 's/^    \(xfed:[^ ]*\) .*/\1/p' <<<"$out")
[[ -n $tag ]] || fail "deploy/image.sh named no image"
podman image exists "$tag" || fail "no image $tag after deploy/image.sh"

if ! why=$(podman run --rm --network host --entrypoint true "$tag" 2>&1); then
  skip "podman cannot start a container on this host: $why"
fi
echo "    podman starts containers here ($(podman info --format '{{.Host.OCIRuntime.Name}}, cgroups {{.Host.CgroupsVersion}}'))"

# What the image holds and what it does not.
podman run --rm --network host "$tag" sh -c \
  'id xfed >/dev/null && command -v xfed-coord >/dev/null && command -v xfed-site >/dev/null &&
   ! command -v apt-get && ! command -v cc && ! command -v gcc' >/dev/null ||
  fail "the image lacks the user xfed or a daemon, or holds apt or a compiler"

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cport=$(port)
aport=$(port)
while [[ $aport == "$cport" ]]; do aport=$(port); done
pod=$work/pod.yaml
sed -e "s/127\.0\.0\.1:7443/127.0.0.1:$cport/g" -e "s/127\.0\.0\.1:7444/127.0.0.1:$aport/g" \
  -e "s|localhost/xfed:[^ ]*|localhost/$tag|" -e "s|/usr/share/datasets/fashion-mnist|$data|" \
  "$src/deploy/pod.yaml" >"$pod"
if ! grep -q "127.0.0.1:$cport" "$pod" || ! grep -q "127.0.0.1:$aport" "$pod"; then
  fail "deploy/pod.yaml no longer names 127.0.0.1:7443 and 127.0.0.1:7444"
fi

echo "==> podman kube play (coordinator :$cport, aggregator eu :$aport, sites s1 and s2)"
podman kube play "$pod" >"$work/play.log" 2>&1 || { cat "$work/play.log"; fail "podman kube play"; }
coord_log() { podman logs xfed-coordinator 2>&1; }
up=0
for ((i = 0; i < 1500; i++)); do
  log=$(coord_log)
  if grep -q "event=site_announced site=s1 " <<<"$log" &&
     grep -q "event=site_announced site=agg-eu .*sites_behind=1" <<<"$log"; then
    up=1
    break
  fi
  sleep 0.2
done
((up)) || fail "s1, and s2 behind agg-eu, did not reach the coordinator within 300 s"
for c in coordinator aggregator-eu s1 s2; do
  [[ $(podman top "xfed-$c" user | tail -n 1 | tr -d ' ') == xfed ]] ||
    fail "xfed-$c does not run as user xfed: $(podman top "xfed-$c" user args)"
done
echo "    the federation is up; the daemons run as xfed"

echo "==> a job: deploy/jobs/pod.json, 2 rounds, through the image's xfed"
xfed_in() {
  podman run --rm --network host -e XF_LOG_LEVEL=warn -v xfed-pki-rita:/etc/xfed/pki:ro \
    -v "$src/deploy/jobs:/jobs:ro" "$tag" xfed "$@" --coordinator "127.0.0.1:$cport" \
    --cert /etc/xfed/pki/user.crt --key /etc/xfed/pki/user.key \
    --ca /etc/xfed/pki/ca.crt --crl /etc/xfed/pki/crl.pem
}
xfed_in job submit /jobs/pod.json --wait >"$work/job.out" 2>&1 ||
  { cat "$work/job.out"; fail "the job did not finish"; }
final=$(grep '^final accuracy=.* rounds=2 ' "$work/job.out") ||
  { cat "$work/job.out"; fail "no final line for 2 rounds"; }
echo "    $final"
xfed_in job list >"$work/list.out" 2>&1 || { cat "$work/list.out"; fail "xfed job list"; }
grep -q -E '^1 +pod +done +2/2' "$work/list.out" || { cat "$work/list.out"; fail "job 1 is not done"; }

echo "==> podman pod stop"
podman pod stop xfed >/dev/null || fail "podman pod stop"
coord_log | grep -q "event=coordinator_stopped" || fail "the coordinator did not stop cleanly"
podman logs xfed-aggregator-eu 2>&1 | grep -q "event=coordinator_stopped" ||
  fail "the aggregator did not stop cleanly"
for s in s1 s2; do
  podman logs "xfed-$s" 2>&1 | grep -q "event=site_stopped site=$s" || fail "site $s did not stop cleanly"
done
for c in coordinator aggregator-eu s1 s2; do
  st=$(podman inspect --format '{{.State.ExitCode}}' "xfed-$c")
  [[ $st == 0 ]] || fail "xfed-$c exited with $st"
done
echo "container: ok ($tag; pod of a coordinator, an aggregator and two sites ran a 2-round job)"
