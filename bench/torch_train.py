#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch peer of bench/train_bench.c: the same models, batch, optimizer and
synthetic data, timed the same way (warm-up, then forward + loss + backward +
SGD step per batch). Prints one JSON object per line."""
import argparse
import json
import time

import torch


def build(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 200), nn.ReLU(),
                             nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, 10))
    if name == "lenet5":
        return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(256, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10))
    if name == "fedavg-cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(3136, 512), nn.ReLU(), nn.Linear(512, 10))
    raise SystemExit(f"unknown model {name}")


def run(model_name, batch, steps, dev):
    """Times `steps` training steps after a warm-up; returns the JSON row."""
    torch.manual_seed(1)
    model = build(model_name).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    # The batch lives in host memory and is copied to the device every step,
    # as xfed's xf_net_run copies it (a training loop's batches come from host
    # memory).
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x.to(dev)), y.to(dev))
        loss.backward()
        opt.step()
        return loss

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(steps // 10 + 1):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    secs = time.perf_counter() - t0
    return {"impl": "pytorch", "version": torch.__version__, "device": str(dev),
            "threads": torch.get_num_threads(), "model": model_name, "batch": batch,
            "steps": steps, "samples_per_s": round(steps * batch / secs, 1),
            "step_ms": round(secs / steps * 1e3, 4), "final_loss": round(float(loss), 4)}


def sgemm(n, dev):
    """float32 n^3 matrix product rate through PyTorch (best of three), GFLOP/s."""
    a = torch.rand(n, n, device=dev)
    b = torch.rand(n, n, device=dev)
    a @ b
    best = 0.0
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        a @ b
        torch.cuda.synchronize()
        best = max(best, 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--runs", default="",
                    help="several runs in one process: MODEL:BATCH:STEPS,... "
                         "(overrides --model, --batch and --steps)")
    ap.add_argument("--sgemm", type=int, default=0,
                    help="also print the float32 N^3 matrix product rate (cuda only)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        # Plain float32 arithmetic, as xfed's cuda backend: no TF32 matrix units.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    runs = [(a.model, a.batch, a.steps)]
    if a.runs:
        runs = []
        for r in a.runs.split(","):
            m, b, s = r.split(":")
            runs.append((m, int(b), int(s)))
    for m, b, s in runs:
        print(json.dumps(run(m, b, s, dev)), flush=True)
    if a.sgemm and dev.type == "cuda":
        print(json.dumps({"impl": "pytorch-sgemm", "device": torch.cuda.get_device_name(),
                          "sgemm_n": a.sgemm, "sgemm_gflops": round(sgemm(a.sgemm, dev), 1)}),
              flush=True)


if __name__ == "__main__":
    main()
