#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A trainer for the contract's tests (docs/trainers.md), in plain Python (no
# NumPy): it reads task.json and global.npy and writes trained.npy =
# global + 0.25 and result.json. What it does wrong, to be refused, is chosen
# by the name it is run under (a link to this file): good, sleep, exit3,
# shape, nan, many, noresult, dp, dp_low.
import json
import os
import struct
import sys
import time

mode = os.path.basename(sys.argv[0]).split(".")[0]
work = sys.argv[1]
with open(os.path.join(work, "task.json")) as f:
    task = json.load(f)
assert task["contract"] == "xfed-trainer/1"
assert os.getcwd() == work and os.environ.get("XFED_TRAINER_DIR") == work
assert sys.stdin.read() == ""
# The environment is the contract's and nothing else (no keys, no XF_*).
assert set(os.environ) <= {"PATH", "HOME", "LANG", "XFED_TRAINER_DIR", "LC_CTYPE"}, sorted(os.environ)
n = task["model"]["params"]
assert sum(t["count"] for layer in task["model"]["layers"] for t in layer["tensors"]) == n

with open(os.path.join(work, "global.npy"), "rb") as f:
    raw = f.read()
hlen = struct.unpack("<H", raw[8:10])[0]
values = list(struct.unpack("<%df" % n, raw[10 + hlen:]))
assert len(values) == n

if mode == "sleep":
    # A child of its own too: the time limit kills the whole process group.
    child = os.fork()
    if child == 0:
        time.sleep(600)
        os._exit(0)
    with open(os.path.join(work, "child.pid"), "w") as f:
        f.write(str(child))
    time.sleep(600)
if mode == "exit3":
    print("the trainer failed on purpose", file=sys.stderr)
    sys.exit(3)

trained = [v + 0.25 for v in values]
count = n
if mode == "shape":
    count = n + 1
    trained.append(0.0)
if mode == "nan":
    trained[1] = float("nan")


def save_npy(path, vals):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(vals)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1"))
        f.write(struct.pack("<%df" % len(vals), *vals))


save_npy(os.path.join(work, "trained.npy"), trained)
result = {"samples": task["dataset"]["train_records"], "train_loss": 0.5, "train_accuracy": 0.75}
if mode == "many":
    result["samples"] = task["dataset"]["train_records"] + 1
if mode in ("dp", "dp_low"):
    p = task["privacy"]
    result["dp"] = {"clip": p["clip"], "sampling_rate": p["sampling_rate"], "steps": p["steps"],
                    "noise_multiplier": p["noise_multiplier"] * (0.5 if mode == "dp_low" else 1)}
if mode != "noresult":
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump(result, f)
print("trained", n, "parameters")
