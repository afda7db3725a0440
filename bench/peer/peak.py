#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Peak memory of every process under a root process (bench/peer/run.sh):
polls /proc every 0.1 s for the descendants of ROOT and keeps each one's
VmHWM (the kernel's own high-water mark of its resident set, so a sample
taken any time before the process ends sees its peak). On SIGTERM writes
OUT: [{"pid", "ppid", "label", "peak_kib"}] for the processes of xfed and Flower."""
import json
import os
import signal
import sys
import time

# The programs whose memory is reported, by a word of their command line.
LABELS = ("xfed-coord", "xfed-site", "flower-superlink", "flower-supernode", "flower-superexec",
          "flwr-serverapp", "flwr-clientapp", "flwr-simulation")


def label(cmd):
    """The program's name, or None for a process not reported (a shell, the
    short-lived `xfed-site init` and `dataset add` commands, the CLIs)."""
    for i, word in enumerate(cmd):
        base = os.path.basename(word)
        if base in LABELS:
            if base == "xfed-site" and cmd[i + 1:i + 2] != ["run"]:
                return None
            return base
    return None


def main():
    root, out = int(sys.argv[1]), sys.argv[2]
    peaks, parents = {}, {}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    me = os.getpid()
    while not stop:
        parent = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
        for pid in parent:
            p, seen = pid, 0
            while p not in (0, 1, root) and seen < 64:
                p, seen = parent.get(p, 0), seen + 1
            if p != root or pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = [w.decode(errors="replace") for w in f.read().split(b"\0") if w]
                with open(f"/proc/{pid}/status") as f:
                    hwm = next((int(l.split()[1]) for l in f if l.startswith("VmHWM:")), 0)
            except (OSError, ValueError):
                continue
            name = label(cmd)
            if name:
                key = (pid, name)
                peaks[key] = max(peaks.get(key, 0), hwm)
                parents.setdefault(pid, parent[pid])
        time.sleep(0.1)
    with open(out, "w") as f:
        json.dump([{"pid": p, "ppid": parents[p], "label": n, "peak_kib": k}
                   for (p, n), k in sorted(peaks.items())],
                  f)


if __name__ == "__main__":
    main()
