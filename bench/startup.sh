#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What a command that does not train costs to start: the median wall time and
# the median peak resident memory (max RSS) of `xfed --help`, `xfed version`,
# `xfed-coord --help` and `xfed-site --help` over REPEATS runs each, next to
# /bin/true (the cost of starting any process here) measured in the same run,
# interleaved so that a busy moment hits every command alike. The targets are
# 20 ms and 15 MB for `xfed --help`.
#
# usage: bench/startup.sh [REPEATS]   (default 21)
# Environment: XF_BENCH_BUILD (build directory, default build). Needs GNU
# time (/usr/bin/time, Debian's `time`) for the memory figure.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-21}
build=${XF_BENCH_BUILD:-build}
[[ -x /usr/bin/time ]] || { echo "startup.sh: needs GNU time at /usr/bin/time (apt install time)" >&2; exit 1; }
if [[ ! -f $build/CMakeCache.txt ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
cmake --build "$build" -j "${XF_JOBS:-2}" --target xfed xfed-coord xfed-site >/dev/null
python3 - "$build" "$repeats" <<'PY'
import os, statistics, subprocess, sys, tempfile, time
build, repeats = sys.argv[1], int(sys.argv[2])
cmds = [
    ("/bin/true", ["/bin/true"]),
    ("xfed --help", [f"{build}/cli/xfed", "--help"]),
    ("xfed version", [f"{build}/cli/xfed", "version"]),
    ("xfed-coord --help", [f"{build}/coordinator/xfed-coord", "--help"]),
    ("xfed-site --help", [f"{build}/site/xfed-site", "--help"]),
]
wall = {n: [] for n, _ in cmds}
rss = {n: [] for n, _ in cmds}
with tempfile.NamedTemporaryFile() as out:
    for _ in range(repeats):
        for name, argv in cmds:
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            wall[name].append(time.perf_counter() - t0)
            # GNU time's own footprint is below these programs', so its
            # maximum is the program's.
            subprocess.run(["/usr/bin/time", "-f", "%M", "-o", out.name] + argv,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            rss[name].append(int(open(out.name).read().split()[-1]))
print(f"{os.uname().nodename}: {os.cpu_count()} CPUs, {repeats} runs each, build {build}")
print(f"{'command':<20} {'wall ms (median, min-max)':>28} {'max RSS MB (median)':>22}")
for name, _ in cmds:
    w = [x * 1000 for x in wall[name]]
    r = statistics.median(rss[name]) / 1024
    print(f"{name:<20} {statistics.median(w):>10.1f} ({min(w):.1f}-{max(w):.1f}){'':>8} {r:>16.1f}")
PY
