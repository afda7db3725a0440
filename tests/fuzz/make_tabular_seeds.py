#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpora of fuzz_schema, fuzz_schema_csv and fuzz_npy
(tests/fuzz/corpus/<target>/). Standard library only; the .npz seeds are
written the way numpy.savez writes them (zipfile, zip64 local headers).
Usage: tests/fuzz/make_tabular_seeds.py tests/fuzz/corpus"""
import io
import os
import struct
import sys
import zipfile

SCHEMA = (b'{"label": {"column": "default", "classes": ["no", "yes"]},'
          b' "missing": ["", "NA"], "columns": ['
          b'{"name": "age", "type": "numeric", "normalize": "train", "fill": 40},'
          b'{"name": "job", "type": "categorical", "vocabulary": ["clerk", "nurse"],'
          b' "unknown": "slot", "fill": "clerk"},'
          b'{"name": "id", "type": "ignore"},'
          b'{"name": "income", "type": "numeric", "normalize": {"mean": 1000, "std": 50}}]}')
INT_SCHEMA = (b'{"label": {"column": "y", "type": "integer"},'
              b' "columns": [{"name": "a", "type": "numeric"}, {"name": "b", "type": "numeric"}]}')

SCHEMAS = {
    "loans": SCHEMA,
    "integer_labels": INT_SCHEMA,
    "bad_json": b'{"label": ',
    "unknown_member": b'{"label": {"column": "y", "type": "integer"}, "colums": []}',
    "duplicate_vocab": (b'{"label": {"column": "y", "type": "integer"}, "columns": [{"name": "c",'
                        b' "type": "categorical", "vocabulary": ["x", "x"]}]}'),
    "zero_std": (b'{"label": {"column": "y", "type": "integer"}, "columns": [{"name": "a",'
                 b' "type": "numeric", "normalize": {"mean": 0, "std": 0}}]}'),
    "all_ignored": (b'{"label": {"column": "y", "type": "integer"}, "columns": [{"name": "a",'
                    b' "type": "ignore"}]}'),
}

CSVS = {
    "loans": (SCHEMA, b"id,default,income,age,job\r\n1,yes,1100,41,nurse\r\n2,no,NA,,pilot\n"
                      b"3,no,990,\"35\",clerk\n"),
    "unknown_word": (SCHEMA, b"age,job,id,income,default\n30,clerk,1,5,no\n"),
    "missing_no_fill": (SCHEMA, b"age,job,id,income,default\n30,clerk,1,,no\n"),
    "bad_label": (SCHEMA, b"age,job,id,income,default\n30,clerk,1,5,maybe\n"),
    "header_mismatch": (SCHEMA, b"age,jobs,id,income,default\n30,clerk,1,5,no\n"),
    "ragged": (SCHEMA, b"age,job,id,income,default\n30,clerk,1\n"),
    "integer_labels": (INT_SCHEMA, b"a,b,y\n1,2,0\n3,4,7\n-1e3,0.5,2\n"),
    "header_only": (INT_SCHEMA, b"\xef\xbb\xbfa,b,y\n"),
}


def npy(descr, shape, payload, major=1):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    pre = 10 if major == 1 else 12
    pad = (64 - (pre + len(d) + 1) % 64) % 64
    h = (d + " " * pad + "\n").encode()
    size = struct.pack("<H", len(h)) if major == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes([major, 0]) + size + h + payload


X = npy("<f4", "(3, 2)", struct.pack("<6f", 1, 2, 3, 4, 5, -6.5))
Y = npy("<i8", "(3,)", struct.pack("<3q", 2, 0, 1))


def npz(members, compression):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression) as z:
        for name, data in members:
            # A fixed timestamp, so that the seeds are the same bytes every time.
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = compression
            with z.open(info, "w", force_zip64=True) as f:
                f.write(data)
    return buf.getvalue()


def pair(x, y):
    return b"\x01" + struct.pack("<I", len(x)) + x + y


NPYS = {
    "pair_f4": pair(X, Y),
    "pair_f8_images_v2": pair(npy("<f8", "(3, 2, 2)", struct.pack("<12d", *range(12)), 2), Y),
    "pair_u1_nhwc": pair(npy("|u1", "(3, 1, 1, 2)", bytes(range(6))), npy("|u1", "(3,)", b"\1\0\1")),
    "fortran": pair(X.replace(b"False", b"True "), Y),
    "big_endian": pair(X.replace(b"<f4", b">f4"), Y),
    "truncated": pair(X[:-1], Y),
    "huge_shape": pair(npy("<f4", "(3, 999999999999)", b""), Y),
    "float_labels": pair(X, npy("<f4", "(3,)", struct.pack("<3f", 0, 1, 0))),
    "nan": pair(npy("<f4", "(3, 2)", struct.pack("<6f", 0, 0, float("nan"), 0, 0, 0)), Y),
    "npz_stored": b"\x00" + npz([("x.npy", X), ("y.npy", Y)], zipfile.ZIP_STORED),
    "npz_deflated": b"\x00" + npz([("x.npy", X), ("y.npy", Y)], zipfile.ZIP_DEFLATED),
    "npz_no_y": b"\x00" + npz([("x.npy", X)], zipfile.ZIP_DEFLATED),
    "npz_cut": b"\x00" + npz([("x.npy", X), ("y.npy", Y)], zipfile.ZIP_DEFLATED)[:-30],
}


def write(root, target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz/corpus"
    for name, text in SCHEMAS.items():
        write(root, "fuzz_schema", name, text)
    for name, (schema, csv) in CSVS.items():
        write(root, "fuzz_schema_csv", name, struct.pack("<H", len(schema)) + schema + csv)
    for name, data in NPYS.items():
        write(root, "fuzz_npy", name, data)


if __name__ == "__main__":
    main()
