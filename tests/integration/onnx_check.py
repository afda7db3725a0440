#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks one exported model against xfed's own evaluation of it.

  onnx_check.py checker MODEL.onnx
      onnx.checker.check_model(full_check=True), the input and output names
      and shapes, opset 13.
  onnx_check.py numpy MODEL.onnx DATA_DIR PREDICTIONS.csv EVAL.json
      runs the graph in numpy (float64) on the test split of DATA_DIR (IDX,
      or test.csv with a header and the label last)
      and compares predictions, accuracy and loss with `xfed model eval`'s.
  onnx_check.py onnxruntime MODEL.onnx DATA_DIR PREDICTIONS.csv EVAL.json
      the same through onnxruntime's InferenceSession.
  onnx_check.py npz MODEL.npz MODEL.xfm MODEL.onnx
      numpy.load reads the archive; its arrays equal the xfed model file's
      tensors (cut and re-laid out here from the file's own layer table) and
      the ONNX initializers.

Exits non-zero with a message on the first difference."""
import gzip
import json
import os
import sys

import numpy as np


def fail(msg):
    sys.exit(f"onnx_check: {msg}")


def read_idx(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw[4 + 4 * dims:], dtype=np.uint8).reshape(shape)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        p = os.path.join(data_dir, name)
        if os.path.exists(p):
            return p
    fail(f"{data_dir} has no {stem}[.gz]")


def test_split(data_dir):
    """The test split as xfed reads it, NCHW float32: IDX pixels / 255,
    test.csv's features (label last, a header line) as [N, features, 1, 1],
    or test-x.npy's records ([N, F], [N, H, W] or [N, H, W, C]) as they are."""
    npy = os.path.join(data_dir, "test-x.npy")
    if os.path.exists(npy):
        x = np.load(npy).astype(np.float32)
        y = np.load(os.path.join(data_dir, "test-y.npy")).astype(np.int64)
        x = x.reshape(len(x), 1, 1, -1) if x.ndim == 2 else x
        x = x[..., None] if x.ndim == 3 else x
        return np.ascontiguousarray(x.transpose(0, 3, 1, 2)), y
    csv = os.path.join(data_dir, "test.csv")
    if os.path.exists(csv):
        rows = np.loadtxt(csv, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
        x = rows[:, :-1].astype(np.float32)
        return np.ascontiguousarray(x.reshape(len(x), -1, 1, 1)), rows[:, -1].astype(np.int64)
    x = read_idx(find(data_dir, "t10k-images-idx3-ubyte")).astype(np.float32) / np.float32(255)
    y = read_idx(find(data_dir, "t10k-labels-idx1-ubyte")).astype(np.int64)
    if x.ndim == 3:
        x = x[:, None, :, :]
    else:  # n x h x w x c
        x = x.transpose(0, 3, 1, 2)
    return np.ascontiguousarray(x), y


def attrs(node):
    import onnx.helper
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def conv2d(x, w, b, stride, pads):
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (x.shape[2] - kh) // stride[0] + 1
    ow = (x.shape[3] - kw) // stride[1] + 1
    cols = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    cols = cols[:, :, ::stride[0], ::stride[1]][:, :, :oh, :ow]  # n c oh ow kh kw
    return np.einsum("ncyxij,ocij->noyx", cols, w, optimize=True) + b[None, :, None, None]


def maxpool(x, k, stride):
    win = np.lib.stride_tricks.sliding_window_view(x, tuple(k), axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1]]
    oh = (x.shape[2] - k[0]) // stride[0] + 1
    ow = (x.shape[3] - k[1]) // stride[1] + 1
    return win[:, :, :oh, :ow].max(axis=(4, 5))


def avgpool(x, k, stride):
    win = np.lib.stride_tricks.sliding_window_view(x, tuple(k), axis=(2, 3))
    win = win[:, :, ::stride[0], ::stride[1]]
    oh = (x.shape[2] - k[0]) // stride[0] + 1
    ow = (x.shape[3] - k[1]) // stride[1] + 1
    return win[:, :, :oh, :ow].mean(axis=(4, 5))


def erf(x):
    """erf to float64 rounding (numpy has none; math.erf per value)."""
    import math
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# Operators of one or two inputs that broadcast as numpy does.
ELEMENTWISE = {"Relu": lambda a: np.maximum(a, 0), "Tanh": np.tanh,
               "Sigmoid": lambda a: 1 / (1 + np.exp(-a)), "Sqrt": np.sqrt, "Erf": erf,
               "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def run_numpy(model, x):
    """Interprets the graph's nodes in float64 (int64 for the ids a Cast
    makes); returns the logits."""
    from onnx import numpy_helper
    vals = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in model.graph.initializer}
    vals["input"] = x.astype(np.float64)
    for node in model.graph.node:
        a = attrs(node)
        ins = [vals[i] for i in node.input]
        op = node.op_type
        if op in ELEMENTWISE:
            out = ELEMENTWISE[op](*ins)
        elif op == "Constant":
            out = numpy_helper.to_array(a["value"])
            out = out.astype(np.float64) if out.dtype.kind == "f" else out
        elif op == "Flatten":
            axis = a.get("axis", 1)
            out = ins[0].reshape(int(np.prod(ins[0].shape[:axis])), -1)
        elif op == "Gemm":
            b = ins[1].T if a.get("transB", 0) else ins[1]
            out = ins[0] @ b + ins[2]
        elif op == "Conv":
            out = conv2d(ins[0], ins[1], ins[2], a.get("strides", [1, 1]),
                         a.get("pads", [0, 0, 0, 0]))
        elif op == "MaxPool":
            if any(a.get("pads", [0, 0, 0, 0])):
                fail("MaxPool with padding is not interpreted here")
            out = maxpool(ins[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]))
        elif op == "AveragePool":
            if any(a.get("pads", [0, 0, 0, 0])):
                fail("AveragePool with padding is not interpreted here")
            out = avgpool(ins[0], a["kernel_shape"], a.get("strides", a["kernel_shape"]))
        elif op == "Softmax":
            axis = a.get("axis", -1)  # opset 13: one axis
            e = np.exp(ins[0] - ins[0].max(axis=axis, keepdims=True))
            out = e / e.sum(axis=axis, keepdims=True)
        elif op == "Dropout":
            if len(node.input) > 1 or len(node.output) > 1:
                fail(f"node {node.name}: only inference Dropout (one input, one output) here")
            out = ins[0]
        elif op == "ReduceMean":
            out = ins[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1)))
        elif op == "Reshape":
            shape = [ins[0].shape[i] if d == 0 else d for i, d in enumerate(ins[1].tolist())]
            out = ins[0].reshape(shape)
        elif op == "Unsqueeze":
            out = ins[0]
            for axis in sorted(int(v) for v in ins[1]):
                out = np.expand_dims(out, axis)
        elif op == "Transpose":
            out = ins[0].transpose(a["perm"])
        elif op == "Cast":
            if a["to"] != 7:  # TensorProto.INT64
                fail(f"node {node.name}: Cast to {a['to']} is not interpreted here")
            if not np.array_equal(ins[0], np.trunc(ins[0])):
                fail(f"node {node.name}: ids that are not whole numbers")
            out = ins[0].astype(np.int64)
        elif op == "Gather":
            if a.get("axis", 0) != 0:
                fail(f"node {node.name}: Gather on axis {a['axis']} is not interpreted here")
            out = ins[0][ins[1]]
        else:
            fail(f"node {node.name}: operator {op} is not interpreted here")
        vals[node.output[0]] = out
    return vals["logits"], vals["probabilities"]


def compare(logits, y, pred_csv, eval_json, who):
    xf = np.loadtxt(pred_csv, delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    with open(eval_json) as f:
        ev = json.load(f)
    if xf.shape[0] != len(y) or not np.array_equal(xf[:, 0], y):
        fail(f"{pred_csv}: the labels are not the test split's ({xf.shape[0]} vs {len(y)} records)")
    ours = logits.argmax(axis=1)
    differ = np.nonzero(ours != xf[:, 1])[0]
    # A record may only differ where its two best scores tie within float32
    # rounding: xfed computes in float32, the reference differently.
    top2 = np.sort(logits, axis=1)[:, -2:]
    for i in differ:
        margin = top2[i, 1] - top2[i, 0]
        if margin > 1e-4 * max(1.0, abs(top2[i, 1])):
            fail(f"{who}: record {i}: predicts {ours[i]}, xfed {xf[i, 1]} "
                 f"(margin {margin:.3g} is not a tie)")
    z = logits - logits.max(axis=1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]))
    acc = float(np.mean(ours == y))
    if abs(acc - ev["accuracy"]) > len(differ) / len(y) + 1e-12:
        fail(f"{who}: accuracy {acc} vs xfed's {ev['accuracy']}")
    if abs(loss - ev["loss"]) > 1e-4 * max(1.0, abs(ev["loss"])):
        fail(f"{who}: loss {loss} vs xfed's {ev['loss']}")
    print(f"{who}: {len(y)} records, {len(differ)} near-ties differ, accuracy {acc:.4f}, "
          f"loss {loss:.5f} (xfed {ev['accuracy']:.4f}, {ev['loss']:.5f})")


def cmd_checker(path):
    import onnx
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    if [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] != [13]:
        fail(f"{path}: opset {list(m.opset_import)} is not 13")
    if [i.name for i in m.graph.input] != ["input"]:
        fail(f"{path}: inputs {[i.name for i in m.graph.input]}")
    if [o.name for o in m.graph.output] != ["logits", "probabilities"]:
        fail(f"{path}: outputs {[o.name for o in m.graph.output]}")
    dims = m.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != 4 or dims[0].dim_param != "N":
        fail(f"{path}: the input is not [N, C, H, W]")
    print(f"{path}: checker passes, {len(m.graph.node)} nodes, "
          f"{[n.op_type for n in m.graph.node]}")


def cmd_numpy(path, data_dir, pred_csv, eval_json):
    import onnx
    x, y = test_split(data_dir)
    logits, probs = run_numpy(onnx.load(path), x)
    if not np.allclose(probs.sum(axis=1), 1.0):
        fail("probabilities do not sum to 1")
    compare(logits, y, pred_csv, eval_json, f"numpy {os.path.basename(path)}")


def cmd_onnxruntime(path, data_dir, pred_csv, eval_json):
    import onnxruntime as ort
    x, y = test_split(data_dir)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    logits, probs = sess.run(["logits", "probabilities"], {"input": x})
    if not np.allclose(probs.sum(axis=1), 1.0, atol=1e-5):
        fail("probabilities do not sum to 1")
    compare(logits.astype(np.float64), y, pred_csv, eval_json,
            f"onnxruntime {ort.__version__} {os.path.basename(path)}")


def xfed_tensors(xfm):
    """The xfed model file's tensors, cut by its header's layer table and
    laid out as docs/model-format.md says the exports are."""
    raw = open(xfm, "rb").read()
    if raw[:8] != b"XFMODEL1":
        fail(f"{xfm}: not an xfed model file")
    h = int.from_bytes(raw[8:12], "little")
    head = json.loads(raw[12:12 + h])
    p = np.frombuffer(raw[12 + h:], dtype="<f4")
    hh, ww, cc = head["input"]
    declared = head.get("declared", [])
    embed_dim = next((d["dim"] for d in declared if d["kind"] == "embedding"), None)
    positions = None  # (h, w) once known; before, an image is taken to be square
    out = {}
    for layer in head["layers"]:
        wo, wn = layer["weight"]
        bo, bn = layer["bias"]
        kind = layer["kind"]
        if kind == "conv":
            k = int(round((wn / bn / cc) ** 0.5))
            w = p[wo:wo + wn].reshape(bn, k, k, cc).transpose(0, 3, 1, 2)  # OHWI -> OIHW
            cc = bn  # the channels after it; its spatial size is not needed here
        elif kind == "dense":
            fan_in = wn // bn
            hw = fan_in // cc
            h, w_ = positions or (int(round(hw ** 0.5)),) * 2
            w = p[wo:wo + wn].reshape(bn, h, w_, cc).transpose(0, 3, 1, 2).reshape(bn, -1)
            cc, positions = bn, (1, 1)  # a dense output is 1 x 1 x out
        elif kind in ("layernorm", "groupnorm"):
            w = p[wo:wo + wn]  # gamma[c], as PyTorch's
        elif kind == "embedding":
            w = p[wo:wo + wn].reshape(-1, embed_dim)  # [vocab, dim], as PyTorch's
            cc, positions = embed_dim, (1, hh * ww * head["input"][2])
        else:
            continue
        out[layer["name"] + ".weight"] = w
        if bn:
            out[layer["name"] + ".bias"] = p[bo:bo + bn]
    return out


def cmd_npz(npz, xfm, onnx_path):
    import onnx
    from onnx import numpy_helper
    z = np.load(npz)
    want = xfed_tensors(xfm)
    if sorted(z.files) != sorted(want):
        fail(f"{npz}: arrays {sorted(z.files)}, the model has {sorted(want)}")
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(onnx_path).graph.initializer}
    for name in z.files:
        a = z[name]
        if a.dtype != np.float32 or a.shape != want[name].shape:
            fail(f"{npz}: {name} is {a.dtype} {a.shape}, the model's {want[name].shape}")
        if not np.array_equal(a, want[name]):
            fail(f"{npz}: {name} differs from the model's tensor")
        if not np.array_equal(a, inits[name]):
            fail(f"{npz}: {name} differs from the ONNX initializer")
    print(f"{npz}: {len(z.files)} arrays equal the model's tensors and the ONNX initializers")


def main():
    if len(sys.argv) < 3:
        fail(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    table = {"checker": (cmd_checker, 1), "numpy": (cmd_numpy, 4),
             "onnxruntime": (cmd_onnxruntime, 4), "npz": (cmd_npz, 3)}
    if cmd not in table or len(args) != table[cmd][1]:
        fail(__doc__)
    table[cmd][0](*args)


if __name__ == "__main__":
    main()
