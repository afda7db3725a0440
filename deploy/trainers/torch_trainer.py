#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""An external trainer for xfed-site, in PyTorch (docs/trainers.md).

xfed-site runs it as `torch_trainer.py WORKDIR` for each training task of a
dataset registered with `--trainer /path/to/torch_trainer.py`. It reads
WORKDIR/task.json and WORKDIR/global.npy, builds the model from the task's
layer table (every kind xfed has: dense, conv, relu, maxpool, avgpool,
dropout, layernorm, groupnorm, embedding, gelu, tanh, sigmoid, softmax, add,
with xfed's semantics and parameter layout), trains
it on the dataset's training split with the job's local settings, and writes
WORKDIR/trained.npy (the same flat float32 vector) and WORKDIR/result.json.

When the job asks for record-level privacy, it does DP-SGD itself: Poisson
sampling at the task's sampling_rate, each example's gradient clipped to
`clip`, Gaussian noise of noise_multiplier * clip on the sum, divided by the
expected batch, for the task's steps; and it reports what it did in
result.json's "dp" object. Register it with --trainer-dp declared for that.

Reads IDX (plain or gzip), .npy and .npz dataset directories (docs/data.md);
a CSV dataset needs its column schema applied and is refused here.
"""
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
from torch import nn


def fail(msg):
    print(f"torch_trainer: {msg}", file=sys.stderr)
    sys.exit(1)


def read_idx(path):
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                raw = f.read()
            _, dtype, ndim = struct.unpack(">HBB", raw[:4])
            if dtype != 0x08:
                fail(f"{p}: only unsigned-byte IDX files are read")
            dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    fail(f"{path} (or .gz) is missing")


def load_split(ds, split):
    """The train or test split of the dataset directory, records NHWC."""
    d, layout = ds["dir"], ds["layout"]
    idx = {"train": "train", "test": "t10k"}[split]
    if layout == "idx":
        x = read_idx(os.path.join(d, f"{idx}-images-idx3-ubyte")).astype(np.float32) / 255.0
        y = read_idx(os.path.join(d, f"{idx}-labels-idx1-ubyte")).astype(np.int64)
    elif layout == "npy":
        x = np.load(os.path.join(d, f"{split}-x.npy")).astype(np.float32)
        y = np.load(os.path.join(d, f"{split}-y.npy")).astype(np.int64)
    elif layout == "npz":
        z = np.load(os.path.join(d, f"{split}.npz"))
        x, y = z["x"].astype(np.float32), z["y"].astype(np.int64)
    else:
        fail(f"dataset layout {layout} is not read by this example (idx, npy and npz are)")
    h, w, c = ds["shape"]
    x = x.reshape(len(x), h, w, c)  # xfed's records are NHWC
    if len(x) != ds[f"{split}_records"]:
        fail(f"the dataset has {len(x)} {split} records, task.json says {ds[f'{split}_records']}")
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


class Add(nn.Module):
    """A residual connection: the table row's output plus row src's (-1: the
    model's input); forward() supplies the second operand."""

    def __init__(self, src):
        super().__init__()
        self.src = src


class ChannelsLast(nn.Module):
    """A module over each position's channels (LayerNorm): applied
    channels-last to an NCHW image, directly to [N, features]."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        if x.dim() == 2:
            return self.inner(x)
        return self.inner(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def build(l):
    """The torch module for one row of the layer table (docs/trainers.md)."""
    k = l["kind"]
    if k == "conv":
        return nn.Conv2d(l["in_c"], l["out_c"], l["kernel"], l["stride"], l["pad"])
    if k == "dense":
        return nn.Linear(l["in_h"] * l["in_w"] * l["in_c"], l["out_c"])
    if k == "maxpool":
        return nn.MaxPool2d(l["kernel"], l["stride"])
    if k == "avgpool":
        return nn.AvgPool2d(l["kernel"], l["stride"])
    if k == "dropout":
        return nn.Dropout(l["rate"])
    if k == "layernorm":  # each position's channels, eps and biased variance as xfed's
        return ChannelsLast(nn.LayerNorm(l["out_c"], eps=1e-5))
    if k == "groupnorm":  # each record's groups of contiguous channels over all positions
        return nn.GroupNorm(l["groups"], l["out_c"], eps=1e-5)
    if k == "embedding":
        return nn.Embedding(l["vocab"], l["out_c"])
    if k == "add":
        return Add(l["src"])
    simple = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
              "softmax": lambda: nn.Softmax(dim=1)}  # GELU: exact (erf), xfed's
    if k in simple:
        return simple[k]()
    fail(f"layer {l['name']}: kind {k} is not built by this example")


class Net(nn.Module):
    """The layer table as a sequence; activations NCHW inside (an embedding's
    1 x ids x dim output is the image [N, dim, 1, ids]), flattened in xfed's
    NHWC order before the first dense layer, [N, features] after it."""

    def __init__(self, layers):
        super().__init__()
        self.table = layers
        self.mods = nn.ModuleList(build(l) for l in layers)

    def forward(self, x):  # x: N, H, W, C
        inp = x.permute(0, 3, 1, 2)
        outs = []
        flat = False
        x = inp
        for l, m in zip(self.table, self.mods):
            if l["kind"] == "dense" and not flat:
                x = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1)
                flat = True
            if l["kind"] == "embedding":  # the ids in xfed's NHWC order
                ids = inp.permute(0, 2, 3, 1).reshape(inp.shape[0], -1)
                if not (torch.equal(ids, ids.floor()) and ids.min() >= 0 and
                        ids.max() < l["vocab"]):
                    fail(f"layer {l['name']}: the records hold values that are not ids "
                         f"0..{l['vocab'] - 1}")
                x = m(ids.long()).permute(0, 2, 1).unsqueeze(2)
            elif l["kind"] == "add":
                other = inp if m.src < 0 else outs[m.src]
                x = x + other.reshape(x.shape)  # a 1 x 1 x C image reads as [N, C]
            else:
                x = m(x)
            outs.append(x)
        return x

    def tensor_of(self, m, name):
        inner = m.inner if isinstance(m, ChannelsLast) else m
        return inner.bias if name.endswith(".bias") else inner.weight

    def load_flat(self, vec):
        for l, m in zip(self.table, self.mods):
            for t in l.get("tensors", []):
                v = torch.from_numpy(vec[t["offset"]:t["offset"] + t["count"]].copy())
                p = self.tensor_of(m, t["name"])
                if l["kind"] == "conv" and p is m.weight:  # xfed: out, kh, kw, in
                    v = v.reshape(t["shape"]).permute(0, 3, 1, 2)
                p.data.copy_(v.reshape(p.shape))

    def flat(self, n):
        out = np.zeros(n, dtype="<f4")
        for l, m in zip(self.table, self.mods):
            for t in l.get("tensors", []):
                p = self.tensor_of(m, t["name"])
                v = p.detach()
                if l["kind"] == "conv" and p is m.weight:
                    v = v.permute(0, 2, 3, 1)
                out[t["offset"]:t["offset"] + t["count"]] = v.reshape(-1).numpy()
        return out


def loss_fn(name):
    if name == "cross_entropy":
        return nn.CrossEntropyLoss()
    if name == "bce":
        return lambda out, y: nn.functional.binary_cross_entropy_with_logits(out[:, 0], y.float())
    if name == "mse":
        return lambda out, y: nn.functional.mse_loss(out[:, 0], y.float())
    fail(f"loss {name} is not known to this example")


def optimizer(params, lc):
    wd = lc["weight_decay"]
    if lc["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=lc["lr"], momentum=lc["momentum"],
                               nesterov=lc["nesterov"], weight_decay=wd)
    betas = (lc["beta1"], lc["beta2"])
    if lc["optimizer"] == "adam":
        return torch.optim.Adam(params, lr=lc["lr"], betas=betas, eps=lc["eps"], weight_decay=wd)
    if lc["optimizer"] == "adamw":
        return torch.optim.AdamW(params, lr=lc["lr"], betas=betas, eps=lc["eps"], weight_decay=wd)
    fail(f"optimizer {lc['optimizer']} is not known to this example")


def load_train_and_check(net, task):
    """The training split; first, the received model's accuracy on the test
    split, in the log: xfed-site logs its own evaluation of the same model
    (event=task_trained test_accuracy=...), so the two agreeing shows the
    layer table was read the way xfed lays the weights out."""
    if task["model"]["loss"] == "cross_entropy" and task["dataset"]["test_records"] > 0:
        tx, ty = load_split(task["dataset"], "test")
        net.eval()  # dropout is the identity in evaluation, as in xfed's
        with torch.no_grad():
            pred = torch.cat([net(tx[i:i + 1024]).argmax(1) for i in range(0, len(tx), 1024)])
        net.train()
        print(f"torch_trainer: received model test accuracy {float((pred == ty).float().mean()):.4f}")
    return load_split(task["dataset"], "train")


def main():
    if len(sys.argv) != 2:
        fail("usage: torch_trainer.py WORKDIR (xfed-site runs it; docs/trainers.md)")
    work = sys.argv[1]
    with open(os.path.join(work, "task.json")) as f:
        task = json.load(f)
    if task.get("contract") != "xfed-trainer/1":
        fail(f"task.json's contract is {task.get('contract')!r}; this trainer speaks xfed-trainer/1")
    torch.manual_seed(task["seed"])
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    model_t, lc, pv = task["model"], task["local"], task["privacy"]
    n = model_t["params"]
    g = np.load(os.path.join(work, task["inputs"]["global"]))
    if g.shape != (n,):
        fail(f"global.npy has shape {g.shape}, task.json says ({n},)")
    net = Net(model_t["layers"])
    net.load_flat(g)
    anchor = [p.detach().clone() for p in net.parameters()]
    x, y = load_train_and_check(net, task)
    crit = loss_fn(model_t["loss"])
    opt = optimizer(net.parameters(), lc)
    gen = torch.Generator().manual_seed(task["seed"])
    losses, correct, seen = [], 0, 0
    result = {"samples": int(len(x))}

    def prox(loss):
        if lc["prox_mu"] > 0:
            loss = loss + lc["prox_mu"] / 2 * sum(((p - a) ** 2).sum() for p, a in zip(net.parameters(), anchor))
        return loss

    if pv["record_level"]:
        q, steps, clip, sigma = pv["sampling_rate"], pv["steps"], pv["clip"], pv["noise_multiplier"]
        expected = q * len(x)
        params = list(net.parameters())
        for _ in range(steps):
            pick = (torch.rand(len(x), generator=gen) < q).nonzero().flatten()
            total = [torch.zeros_like(p) for p in params]
            for i in pick.tolist():  # per-example gradients, clipped
                opt.zero_grad()
                out = net(x[i:i + 1])
                crit(out, y[i:i + 1]).backward()
                norm = math.sqrt(sum(float((p.grad ** 2).sum()) for p in params))
                scale = min(1.0, clip / (norm + 1e-12))
                for t, p in zip(total, params):
                    t.add_(p.grad, alpha=scale)
            for t, p in zip(total, params):
                noise = torch.normal(0.0, sigma * clip, size=t.shape, generator=gen)
                p.grad = (t + noise) / expected
            opt.step()
        result["dp"] = {"clip": clip, "noise_multiplier": sigma, "sampling_rate": q, "steps": steps}
    else:
        for _ in range(lc["epochs"]):
            order = torch.randperm(len(x), generator=gen)
            for s in range(0, len(x), lc["batch_size"]):
                idx = order[s:s + lc["batch_size"]]
                opt.zero_grad()
                out = net(x[idx])
                loss = crit(out, y[idx])
                prox(loss).backward()
                if lc["clip_norm"] > 0:
                    nn.utils.clip_grad_norm_(net.parameters(), lc["clip_norm"])
                opt.step()
                losses.append(float(loss) * len(idx))
                if model_t["loss"] == "cross_entropy":
                    correct += int((out.argmax(1) == y[idx]).sum())
                seen += len(idx)
        if seen:
            result["train_loss"] = sum(losses) / seen
            if model_t["loss"] == "cross_entropy":
                result["train_accuracy"] = correct / seen
    trained = net.flat(n)
    if not np.isfinite(trained).all():
        fail("training diverged: the weights are not finite (lower the learning rate)")
    np.save(os.path.join(work, task["outputs"]["trained"]), trained)
    with open(os.path.join(work, task["outputs"]["result"]), "w") as f:
        json.dump(result, f)
    print(f"torch_trainer: {len(x)} records, {n} parameters, "
          f"train loss {result.get('train_loss', float('nan')):.4f}")


if __name__ == "__main__":
    main()
