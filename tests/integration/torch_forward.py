#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""torch_forward.py TRAINER TASK_DIR PREDICTIONS.csv EVAL.json

Builds the PyTorch model of deploy/trainers/torch_trainer.py (TRAINER) from
TASK_DIR/task.json's layer table, loads TASK_DIR/global.npy into it, and
checks that it is xfed's model: its flat vector reads back bit for bit, and
in evaluation its logits on the test split of the task's dataset give the
predictions, accuracy and loss of `xfed model eval` (PREDICTIONS.csv,
EVAL.json). Exits non-zero with a message on the first difference."""
import importlib.util
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_check  # noqa: E402  (compare: predictions, accuracy and loss)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    trainer, work, pred_csv, eval_json = sys.argv[1:]
    spec = importlib.util.spec_from_file_location("torch_trainer", trainer)
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    with open(os.path.join(work, "task.json")) as f:
        task = json.load(f)
    model = task["model"]
    g = np.load(os.path.join(work, task["inputs"]["global"]))
    net = tt.Net(model["layers"])
    net.load_flat(g)
    back = net.flat(model["params"])
    if not np.array_equal(back.view(np.uint32), g.astype("<f4").view(np.uint32)):
        sys.exit(f"torch_forward: {work}: the flat vector does not read back from the module "
                 f"(first difference at {int(np.argmax(back != g))})")
    x, y = tt.load_split(task["dataset"], "test")
    net.eval()
    with torch.no_grad():
        logits = net(x).double().numpy()
    onnx_check.compare(logits, y.numpy(), pred_csv, eval_json,
                       f"torch {torch.__version__} {model['describe']} ({os.path.basename(work)})")


if __name__ == "__main__":
    main()
