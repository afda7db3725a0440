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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = build(a.model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.steps // 10 + 1):
        step()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    secs = time.perf_counter() - t0
    print(json.dumps({"impl": "pytorch", "version": torch.__version__,
                      "threads": torch.get_num_threads(), "model": a.model, "batch": a.batch,
                      "steps": a.steps, "samples_per_s": round(a.steps * a.batch / secs, 1),
                      "final_loss": round(float(loss), 4)}))


if __name__ == "__main__":
    main()
