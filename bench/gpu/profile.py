#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a cuda training step's time goes: reads the per-launch CSV that
bench/gpu/run.sh's profile phase has Nsight Compute write (one row per
kernel, its gpu__time_duration.sum in ns) for one xfed-bench-train run, and
the same run's wall-clock step time from bench.jsonl, and prints the
kernels grouped by name with their share of the step, then the share of the
step the card spent in any kernel at all (the rest is launch and host time).

usage: bench/gpu/profile.py PROFILE.csv STEPS STEP_MS [TOP]"""
import csv
import sys
from collections import defaultdict


def group(name):
    # cuBLAS's GEMM kernels carry their tile shapes in long names; one group.
    n = name.split("(")[0].strip()
    if "gemm" in n.lower() or "xmma" in n.lower() or n.startswith("sm90_") or "cutlass" in n:
        return "cuBLAS GEMM"
    return n.replace("void ", "")


def main():
    path, steps, step_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 12
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    rows = list(csv.reader(lines))
    head = rows[0]
    ki, ti = head.index("Kernel Name"), head.index("gpu__time_duration.sum")
    total = defaultdict(float)
    count = defaultdict(int)
    for r in rows[1:]:
        if len(r) <= max(ki, ti):
            continue
        try:
            t = float(r[ti].replace(",", ""))
        except ValueError:
            continue  # the units row
        g = group(r[ki])
        total[g] += t
        count[g] += 1
    busy = sum(total.values()) / steps / 1e6  # ms of kernels per step
    if step_ms <= 0:
        step_ms = float("nan")  # no bench row for this case: shares unknown
    print(f"{sum(count.values())} launches over {steps} steps: {sum(count.values()) / steps:.0f} "
          f"kernels a step, {busy:.4f} ms of kernel time against a {step_ms:.4f} ms step "
          f"({100 * busy / step_ms:.0f}% busy)")
    print("| kernel | launches a step | ms a step | share of the step |")
    print("|---|---|---|---|")
    for g, t in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        ms = t / steps / 1e6
        print(f"| `{g[:60]}` | {count[g] / steps:.1f} | {ms:.4f} | {100 * ms / step_ms:.1f}% |")


if __name__ == "__main__":
    main()
