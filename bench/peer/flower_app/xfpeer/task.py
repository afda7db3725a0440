# SPDX-License-Identifier: Apache-2.0
"""The model, data and local training both sides of bench/peer share in
meaning: xfed's `mlp` preset (flatten, then dense + relu per hidden width,
then dense; PyTorch's default Linear initialisation, as xfed initialises),
trained with SGD (lr, momentum, weight decay) on one shard of `xfed data
split` for the job's epochs in shuffled batches, cross-entropy loss, and
evaluated on the shard's test part."""
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    """An unsigned-byte IDX file (plain or .gz) as a numpy array."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                raw = f.read()
            _, dtype, ndim = struct.unpack(">HBB", raw[:4])
            if dtype != 0x08:
                raise ValueError(f"{p}: only unsigned-byte IDX files are read")
            dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError(f"{path} (or .gz) is missing")


def load_shard(shard):
    """(train_x, train_y, test_x, test_y, classes) of a shard directory that
    `xfed data split` wrote: pixels scaled to [0, 1] as xfed scales them,
    records flattened in xfed's height, width, channel order."""
    with open(os.path.join(shard, "dataset.json")) as f:
        classes = int(json.load(f)["classes"])
    out = []
    for part in ("train", "t10k"):
        x = read_idx(os.path.join(shard, f"{part}-images-idx3-ubyte")).astype(np.float32) / 255.0
        y = read_idx(os.path.join(shard, f"{part}-labels-idx1-ubyte")).astype(np.int64)
        out += [torch.from_numpy(x.reshape(len(x), -1)), torch.from_numpy(y)]
    return (*out, classes)


def build(features, hidden, classes):
    layers, width = [], features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def get_weights(model):
    return [v.detach().cpu().numpy() for v in model.state_dict().values()]


def set_weights(model, weights):
    keys = model.state_dict().keys()
    model.load_state_dict({k: torch.from_numpy(np.asarray(w)) for k, w in zip(keys, weights)},
                          strict=True)


def train(model, x, y, epochs, batch, lr, momentum, weight_decay, seed):
    """Local training; returns (mean loss of the last epoch, seconds)."""
    t0 = time.perf_counter()
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                          weight_decay=weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    last = 0.0
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=gen)
        total = 0.0
        for i in range(0, len(x), batch):
            idx = perm[i:i + batch]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x[idx]), y[idx])
            loss.backward()
            opt.step()
            total += float(loss) * len(idx)
        last = total / len(x)
    return last, time.perf_counter() - t0


@torch.no_grad()
def evaluate(model, x, y):
    """(loss, accuracy, seconds) on the test part."""
    t0 = time.perf_counter()
    model.eval()
    logits = model(x)
    loss = float(nn.functional.cross_entropy(logits, y))
    acc = float((logits.argmax(1) == y).float().mean())
    return loss, acc, time.perf_counter() - t0


def log_event(path, **row):
    """One JSON line of the node's timings, read by bench/peer/collect.py."""
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")
