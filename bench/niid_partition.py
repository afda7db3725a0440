#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""NIID-Bench's own Fashion-MNIST partition, written as xfed shards.

NIID-Bench (Li, Diao, Chen, He, ICDE 2022; github.com/Xtra-Computing/NIID-Bench)
seeds NumPy's legacy generator with its --init_seed (experiments.py, main:
np.random.seed(seed)) and then cuts the training set with
partition_data(..., 'noniid-labeldir', n_parties, beta) in utils.py: per class,
the class's indices are shuffled, proportions over the parties are drawn from
Dirichlet(beta), zeroed for parties that already hold N / n_parties records,
renormalized and cut by their cumulative sums; the whole draw is repeated until
every party holds at least 10 records; finally each party's list is shuffled.
Their trials 1-3 are --init_seed 0, 1 and 2. This script makes the same NumPy
calls in the same order, so for the same seed it gives the same parties as
their code (NumPy keeps the legacy generator's streams fixed across versions).

NIID-Bench evaluates the global model on the whole test set. xfed evaluates at
the sites, so the test set is dealt out too: every class's test records (in
file order, shuffled by a generator of their own that does not touch the
partition's) go to the parties in proportion to their train records of the
class, largest remainders first, as `xfed data split` deals them; the shards'
test parts together are the whole test set, each record once.

usage: niid_partition.py --data DIR --seed S --out OUTDIR [--parties N] [--beta B]
       niid_partition.py --skew MANIFEST
Writes OUTDIR/site-1 .. site-N (the four IDX .gz files each) and prints one line
per party: its train and test records and its records per class, then one line
on how skewed the partition is. --skew prints that line for a split that
`xfed data split` made (its OUTDIR/manifest.json):
  skew tv=T eff_classes=E smallest=S empty=Z
T: the parties' total variation distance from the uniform label distribution,
weighted by their records (0 is IID); E: the mean over parties of exp(entropy
of their label distribution), the classes a party effectively holds (10 is
IID); S: the smallest party's train records; Z: party-class cells with no
record.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[:2] != b"\0\0" or raw[2] != 8:
        raise SystemExit(f"{path}: not an IDX file of unsigned bytes")
    dims = struct.unpack(">" + "I" * raw[3], raw[4:4 + 4 * raw[3]])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * raw[3]).reshape(dims)


def find(data, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(data, name)
        if os.path.exists(path):
            return path
    raise SystemExit(f"{data}: no {stem}[.gz] (Debian's dataset-fashion-mnist installs them "
                     "in /usr/share/datasets/fashion-mnist)")


def write_idx(path, a):
    header = struct.pack(">BBBB", 0, 0, 8, a.ndim) + struct.pack(">" + "I" * a.ndim, *a.shape)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(header + np.ascontiguousarray(a, dtype=np.uint8).tobytes())


def niid_bench_labeldir(y, parties, beta, min_records=10):
    """The parties' train indices, drawing from np.random as NIID-Bench does."""
    n = y.shape[0]
    classes = 10
    fewest = 0
    while fewest < min_records:
        held = [[] for _ in range(parties)]
        for k in range(classes):
            members = np.where(y == k)[0]
            np.random.shuffle(members)
            p = np.random.dirichlet(np.repeat(beta, parties))
            # A party at or past its fair share takes nothing more.
            p = np.array([pj * (len(h) < n / parties) for pj, h in zip(p, held)])
            p = p / p.sum()
            cuts = (np.cumsum(p) * len(members)).astype(int)[:-1]
            held = [h + part.tolist() for h, part in zip(held, np.split(members, cuts))]
            fewest = min(len(h) for h in held)
    for h in held:
        np.random.shuffle(h)
    return held


def deal_test(y_test, train_counts, rng):
    """Each party's test indices: per class, in proportion to its train records of it."""
    parties, classes = train_counts.shape
    out = [[] for _ in range(parties)]
    for k in range(classes):
        members = np.where(y_test == k)[0]
        rng.shuffle(members)
        w = train_counts[:, k].astype(np.int64)
        total = int(w.sum())
        num = len(members) * w
        q = num // total
        left = len(members) - int(q.sum())
        # Largest remainders first; ties to the lower party number.
        order = sorted(range(parties), key=lambda s: (-(int(num[s]) % total), s))
        for s in order[:left]:
            q[s] += 1
        at = 0
        for s in range(parties):
            out[s] += members[at:at + q[s]].tolist()
            at += int(q[s])
    return [np.array(sorted(o), dtype=np.int64) for o in out]


def skew(counts):
    c = np.asarray(counts, dtype=np.float64)
    n = c.sum(axis=1)
    p = c / n[:, None]
    tv = float((0.5 * np.abs(p - 1.0 / c.shape[1]).sum(axis=1) * n).sum() / n.sum())
    logs = np.log(np.where(p > 0, p, 1.0))
    eff = float(np.exp(-(p * logs).sum(axis=1)).mean())
    return (f"skew tv={tv:.3f} eff_classes={eff:.2f} smallest={int(n.min())} "
            f"empty={int((c == 0).sum())}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data")
    ap.add_argument("--seed", type=int, help="NIID-Bench's --init_seed")
    ap.add_argument("--out")
    ap.add_argument("--parties", type=int, default=10)
    ap.add_argument("--beta", type=float, default=0.5)
    ap.add_argument("--skew", metavar="MANIFEST", help="only describe an xfed split")
    a = ap.parse_args()
    if a.skew:
        import json
        with open(a.skew) as f:
            sites = json.load(f)["sites"]
        print(skew([s["train_label_counts"] for s in sites]))
        return
    if a.data is None or a.seed is None or a.out is None:
        ap.error("--data, --seed and --out are required (or --skew MANIFEST alone)")
    x_tr = read_idx(find(a.data, "train-images-idx3-ubyte"))
    y_tr = read_idx(find(a.data, "train-labels-idx1-ubyte")).astype(np.int64)
    x_te = read_idx(find(a.data, "t10k-images-idx3-ubyte"))
    y_te = read_idx(find(a.data, "t10k-labels-idx1-ubyte")).astype(np.int64)
    np.random.seed(a.seed)
    parts = niid_bench_labeldir(y_tr, a.parties, a.beta)
    counts = np.array([np.bincount(y_tr[p], minlength=10) for p in parts])
    tests = deal_test(y_te, counts, np.random.RandomState([0x74657374, a.seed]))
    if sum(len(t) for t in tests) != len(y_te) or any(len(t) == 0 for t in tests):
        sys.exit("niid_partition.py: a party got no test record")
    os.makedirs(a.out, exist_ok=True)
    for s, (tr, te) in enumerate(zip(parts, tests), start=1):
        d = os.path.join(a.out, f"site-{s}")
        os.makedirs(d, exist_ok=True)
        tr = np.array(tr, dtype=np.int64)
        write_idx(os.path.join(d, "train-images-idx3-ubyte.gz"), x_tr[tr])
        write_idx(os.path.join(d, "train-labels-idx1-ubyte.gz"), y_tr[tr])
        write_idx(os.path.join(d, "t10k-images-idx3-ubyte.gz"), x_te[te])
        write_idx(os.path.join(d, "t10k-labels-idx1-ubyte.gz"), y_te[te])
        print(f"site-{s} train={len(tr)} test={len(te)} per_class={counts[s - 1].tolist()}")
    print(skew(counts))


if __name__ == "__main__":
    main()
