#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""xfed's local training of the NIID-Bench job against PyTorch's, step for step.

NIID-Bench trains each party with torch.optim.SGD(lr, momentum=rho,
weight_decay=reg) and CrossEntropyLoss on SimpleCNNMNIST (experiments.py,
train_net; model.py). This script trains lenet5 with the job's `local` settings
(deploy/jobs/niid-lenet5.json: lr 0.01, momentum 0.9, weight decay 1e-5) both
ways from the same initial weights and compares the weights after STEPS steps.
Each step is one whole batch of the first RECORDS Fashion-MNIST training
records (batch size = RECORDS), so xfed's shuffle cannot change what a step
computes and the two runs differ by float rounding only.

xfed's side is `xfed train` (its initial weights: the same spec and seed at
lr 1e-30 for one step, which leaves every float32 weight as it was) and
`xfed model export` to .npz; PyTorch's side loads those weights into
nn.Conv2d/nn.Linear modules of the same shapes. Prints each tensor's largest
difference against how far training moved it, and exits 1 when a difference
passes --tolerance of the move.

usage: niid_sgd_check.py [--xfed PATH] [--data DIR] [--spec JOB.json]
                         [--records N] [--steps N] [--tolerance T]
Needs Debian's python3-torch and python3-numpy (run it with /usr/bin/python3).
"""
import argparse
import gzip
import json
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

LAYERS = ["conv1", None, None, "conv2", None, None, None, "fc1", None, "fc2", None, "fc3"]


def read_idx(path):
    with gzip.open(path) as f:
        raw = f.read()
    nd = raw[3]
    dims = struct.unpack(">" + "I" * nd, raw[4:4 + 4 * nd])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * nd).reshape(dims)


def write_idx(path, a):
    header = struct.pack(">BBBB", 0, 0, 8, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(a).tobytes())


def lenet5():
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(256, 120),
                         nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--xfed", default=os.path.join(here, "..", "build", "cli", "xfed"))
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--spec", default=os.path.join(here, "..", "deploy", "jobs",
                                                   "niid-lenet5.json"))
    ap.add_argument("--records", type=int, default=64)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--tolerance", type=float, default=1e-2)
    a = ap.parse_args()
    with open(a.spec) as f:
        spec = json.load(f)
    local = spec["local"]
    x = read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz"))[:a.records]
    y = read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz"))[:a.records]
    with tempfile.TemporaryDirectory(prefix="xf-sgd-check-") as work:
        data = os.path.join(work, "data")
        os.mkdir(data)
        write_idx(os.path.join(data, "train-images-idx3-ubyte.gz"), x)
        write_idx(os.path.join(data, "train-labels-idx1-ubyte.gz"), y)
        write_idx(os.path.join(data, "t10k-images-idx3-ubyte.gz"), x)
        write_idx(os.path.join(data, "t10k-labels-idx1-ubyte.gz"), y)

        def xfed_train(lr, steps, name):
            s = dict(spec, local=dict(local, lr=lr, epochs=steps, batch_size=a.records))
            path = os.path.join(work, name)
            with open(path + ".json", "w") as f:
                json.dump(s, f)
            subprocess.run([a.xfed, "train", "--spec", path + ".json", "--data", data,
                            "--threads", "1", "--save", path + ".xfm"],
                           check=True, stdout=subprocess.DEVNULL)
            subprocess.run([a.xfed, "model", "export", path + ".xfm", "--out", path + ".npz"],
                           check=True, stdout=subprocess.DEVNULL)
            with np.load(path + ".npz") as z:
                return dict(z)

        w0 = xfed_train(1e-30, 1, "initial")
        wx = xfed_train(local["lr"], a.steps, "trained")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    m = lenet5()
    with torch.no_grad():
        for mod, name in zip(m, LAYERS):
            if name:
                mod.weight.copy_(torch.from_numpy(w0[name + ".weight"]))
                mod.bias.copy_(torch.from_numpy(w0[name + ".bias"]))
    opt = torch.optim.SGD(m.parameters(), lr=local["lr"], momentum=local["momentum"],
                          weight_decay=local["weight_decay"])
    xt = torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1)
    yt = torch.from_numpy(y.astype(np.int64))
    for _ in range(a.steps):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(xt), yt)
        loss.backward()
        opt.step()
    worst = 0.0
    for mod, name in zip(m, LAYERS):
        if not name:
            continue
        for part in ("weight", "bias"):
            t = getattr(mod, part).detach().numpy()
            key = f"{name}.{part}"
            moved = float(np.abs(t - w0[key]).max())
            diff = float(np.abs(t - wx[key]).max())
            rel = diff / moved if moved > 0 else float("inf")
            worst = max(worst, rel)
            print(f"{key}: moved {moved:.3e}, largest |torch - xfed| {diff:.3e} "
                  f"({rel:.1e} of the move)")
    print(f"records={a.records} steps={a.steps} lr={local['lr']} momentum={local['momentum']} "
          f"weight_decay={local['weight_decay']} torch_loss_before_last_step={loss.item():.6f} "
          f"worst={worst:.1e}")
    sys.exit(0 if worst <= a.tolerance else 1)


if __name__ == "__main__":
    main()
