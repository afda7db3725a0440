#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""PyTorch peer of bench/tabular.sh: trains deploy/jobs/credit-mlp.json's model
(dense 64, relu, dense 32, relu, dense 2; cross-entropy; AdamW) centrally on
the encoded features that `xfed data split` writes, and scores a model that
xfed exported as .npz on the same test split. Prints one JSON object.

  torch_tabular.py train --data DIR --epochs E --lr LR --weight-decay WD
                         [--batch B] [--seed S]
  torch_tabular.py score --data DIR --npz MODEL.npz

DIR holds train.csv and test.csv as `xfed data split` writes them (a header
f1,...,fN,label, then numbers). AUC is the area under the ROC curve of the
softmax probability of class 1 ("yes"), ties counted half."""
import argparse
import csv
import json

import numpy as np


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    a = np.array(rows[1:], dtype=np.float64)
    return a[:, :-1].astype(np.float32), a[:, -1].astype(np.int64)


def auc(score, y):
    """Mann-Whitney U over the ranks of the scores (average ranks for ties)."""
    order = np.argsort(score, kind="mergesort")
    s = score[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i:j + 1] = (i + j) / 2 + 1
        i = j + 1
    r = np.empty(len(s))
    r[order] = ranks
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def report(logits, y):
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return {"accuracy": float((logits.argmax(axis=1) == y).mean()), "auc": auc(p[:, 1], y),
            "test_records": int(len(y))}


def train(a):
    import torch
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    xtr, ytr = load(f"{a.data}/train.csv")
    xte, yte = load(f"{a.data}/test.csv")
    nn = torch.nn
    model = nn.Sequential(nn.Linear(xtr.shape[1], 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                          nn.Linear(32, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    loss_fn = nn.CrossEntropyLoss()
    x, y = torch.from_numpy(xtr), torch.from_numpy(ytr)
    g = torch.Generator().manual_seed(a.seed)
    for _ in range(a.epochs):
        perm = torch.randperm(len(y), generator=g)
        for i in range(0, len(y), a.batch):
            idx = perm[i:i + a.batch]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
    with torch.no_grad():
        logits = model(torch.from_numpy(xte)).numpy().astype(np.float64)
    out = report(logits, yte)
    out.update({"trainer": "pytorch", "torch": torch.__version__, "epochs": a.epochs})
    return out


def score(a):
    xte, yte = load(f"{a.data}/test.csv")
    w = np.load(a.npz)
    names = list(w.files)
    h = xte.astype(np.float64)
    # Dense layers in the table's order: weight [units x inputs], then bias;
    # relu between them, none after the last.
    pairs = [(names[i], names[i + 1]) for i in range(0, len(names), 2)]
    for k, (wn, bn) in enumerate(pairs):
        h = h @ w[wn].astype(np.float64).T + w[bn].astype(np.float64)
        if k + 1 < len(pairs):
            h = np.maximum(h, 0)
    out = report(h, yte)
    out["trainer"] = "xfed"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["train", "score"])
    ap.add_argument("--data", required=True)
    ap.add_argument("--npz")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.what == "score" and not a.npz:
        ap.error("score needs --npz")
    print(json.dumps(train(a) if a.what == "train" else score(a)))


if __name__ == "__main__":
    main()
