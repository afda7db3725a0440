#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""layer_data.py DIR: the data sets of the models xfed-layer-models writes
(tests/layer_kinds.h), in the NPY layout (docs/data.md) at DIR/image.data
(6x6x4 images), DIR/flat.data (6 features) and DIR/embed.data (5 ids in
0..6): 60 training and 40 test records each, 3 classes, seeded."""
import os
import sys

import numpy as np

rng = np.random.default_rng(3)
shapes = {"image": (6, 6, 4), "flat": (6,), "embed": (5,)}
for name, shape in shapes.items():
    d = os.path.join(sys.argv[1], name + ".data")
    os.makedirs(d, exist_ok=True)
    for split, n in (("train", 60), ("test", 40)):
        if name == "embed":
            x = rng.integers(0, 7, size=(n,) + shape).astype("<f4")
        else:
            x = rng.normal(size=(n,) + shape).astype("<f4")
        np.save(os.path.join(d, f"{split}-x.npy"), x)
        np.save(os.path.join(d, f"{split}-y.npy"), rng.integers(0, 3, size=n).astype("<i4"))
