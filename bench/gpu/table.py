#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reads the JSON lines bench/gpu/run.sh collects (xfed-bench-train on the
cuda backend, bench/torch_train.py on the same card, both SGEMM rates) and
prints the tables docs/BENCHMARKS.md quotes: medians of the repeats, the
ratio to PyTorch, the share of the SGEMM peak the training step reaches, and
DP-SGD's step against the plain one.

usage: bench/gpu/table.py bench.jsonl"""
import json
import statistics
import sys

# Multiply-adds of one sample's forward pass (28x28x1 input, 10 classes);
# a training step costs about three forward passes (forward, and the two
# products of the backward pass), two FLOPs per multiply-add.
FORWARD_MACS = {
    "mlp": 784 * 200 + 200 * 200 + 200 * 10,
    "lenet5": 24 * 24 * 25 * 6 + 8 * 8 * 150 * 16 + 256 * 120 + 120 * 84 + 84 * 10,
    "fedavg-cnn": 28 * 28 * 25 * 32 + 14 * 14 * 800 * 64 + 3136 * 512 + 512 * 10,
}


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip().startswith("{")]

    def med(pred, key):
        v = [r[key] for r in rows if pred(r)]
        return (statistics.median(v), len(v)) if v else (None, 0)

    peak = next((r["sgemm_gflops"] for r in rows if r.get("impl") == "sgemm"), None)
    torch_peak = next((r["sgemm_gflops"] for r in rows if r.get("impl") == "pytorch-sgemm"), None)
    xf = [r for r in rows if r.get("impl") == "xfed"]
    if xf:
        print(f"GPU: {xf[0]['device']}")
    if peak:
        print(f"SGEMM 8192^3 float32: cuBLAS through xfed {peak:,.0f} GFLOP/s"
              + (f", PyTorch {torch_peak:,.0f} GFLOP/s" if torch_peak else ""))
    print()
    print("| model | batch | xfed cuda samples/s | PyTorch cuda samples/s | xfed / PyTorch "
          "| xfed GFLOP/s (share of SGEMM peak) | GEMM share of xfed step |")
    print("|---|---|---|---|---|---|---|")
    seen = []
    for r in xf:
        if r.get("dp_clip", 0) == 0 and (r["model"], r["batch"]) not in seen:
            seen.append((r["model"], r["batch"]))
    for model, batch in seen:
        x, n = med(lambda r: r.get("impl") == "xfed" and r["model"] == model
                   and r["batch"] == batch and r.get("dp_clip", 0) == 0, "samples_per_s")
        g, _ = med(lambda r: r.get("impl") == "xfed" and r["model"] == model
                   and r["batch"] == batch and r.get("dp_clip", 0) == 0, "gemm_share")
        t, _ = med(lambda r: r.get("impl") == "pytorch" and r["model"] == model
                   and r["batch"] == batch, "samples_per_s")
        flops = 3 * 2 * FORWARD_MACS[model] * x / 1e9
        share = f"{flops:,.0f} ({flops / peak:.1%})" if peak else f"{flops:,.0f}"
        ratio = f"{x / t:.2f}x" if t else "-"
        tt = f"{t:,.0f}" if t else "-"
        print(f"| {model} | {batch} | {x:,.0f} | {tt} | {ratio} | {share} | {g:.0%} |")
    print(f"\n(medians of {n} runs each)")
    dp = [r for r in xf if r.get("dp_clip", 0) > 0]
    if dp:
        print()
        print("| model | batch | plain step ms | DP-SGD step ms (clip, no noise) | ratio "
              "| DP-SGD step ms (clip + noise on host) | ratio |")
        print("|---|---|---|---|---|---|---|")
        for model in sorted({r["model"] for r in dp}):
            batch = next(r["batch"] for r in dp if r["model"] == model)
            plain, _ = med(lambda r: r.get("impl") == "xfed" and r["model"] == model
                           and r["batch"] == batch and r.get("dp_clip", 0) == 0, "step_ms")
            clip, _ = med(lambda r: r.get("impl") == "xfed" and r["model"] == model
                          and r["batch"] == batch and r.get("dp_clip", 0) > 0
                          and r.get("dp_noise", 0) == 0, "step_ms")
            noisy, _ = med(lambda r: r.get("impl") == "xfed" and r["model"] == model
                           and r["batch"] == batch and r.get("dp_noise", 0) > 0, "step_ms")
            if plain and clip and noisy:
                print(f"| {model} | {batch} | {plain:.3f} | {clip:.3f} | {clip / plain:.2f}x "
                      f"| {noisy:.3f} | {noisy / plain:.2f}x |")


if __name__ == "__main__":
    main()
