#!/usr/bin/python3
# ===- make_compare_cases.py - Files the comparison helpers must reject ----===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   make_compare_cases.py DIR
#
# Writes a reference safetensors file (ref) and variants of it that
# compare_grads.py must accept (close: 1e-7 normwise away) or reject (nan,
# inf, missing, extra, shape: same elements another shape, short: one
# element fewer, far: 1e-3 away, bf16-nan: a NaN in a BF16 file), and
# metrics files for compare_metrics.py (ref, close, nan, null, fewer,
# renumbered, far). Plain Python, as the files are simple.
#
# ===-----------------------------------------------------------------------===#

import json
import math
import os
import struct
import sys

SIZES = {"F32": 4, "BF16": 2}


def pack(dtype, values):
    if dtype == "F32":
        return struct.pack("<%df" % len(values), *values)
    # BF16: the high half of the f32 bit pattern.
    return b"".join(struct.pack("<f", v)[2:] for v in values)


def write(path, tensors):
    """tensors: name -> (dtype, shape, values)."""
    header, body = {}, b""
    for name, (dtype, shape, values) in tensors.items():
        assert math.prod(shape) == len(values), name
        data = pack(dtype, values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(body), len(body) + len(data)]}
        body += data
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    w = [0.5 + 0.01 * i for i in range(12)]
    b = [1.0, -2.0, 3.0, -4.0]
    ref = {"w": ("F32", [3, 4], w), "b": ("F32", [4], b)}

    def variant(name, **change):
        t = dict(ref)
        for k, v in change.items():
            if v is None:
                del t[k]
            else:
                t[k] = v
        write(os.path.join(out, name + ".safetensors"), t)

    variant("ref")
    variant("close", w=("F32", [3, 4], [x * (1 + 1e-7) for x in w]))
    variant("far", w=("F32", [3, 4], [x * (1 + 1e-3) for x in w]))
    variant("nan", b=("F32", [4], b[:3] + [float("nan")]))
    variant("inf", w=("F32", [3, 4], w[:5] + [float("inf")] + w[6:]))
    variant("missing", b=None)
    variant("extra", c=("F32", [1], [0.0]))
    variant("shape", w=("F32", [4, 3], w))
    variant("short", w=("F32", [11], w[:11]))
    write(os.path.join(out, "bf16.safetensors"),
          {"w": ("BF16", [3, 4], w), "b": ("BF16", [4], b)})
    write(os.path.join(out, "bf16-nan.safetensors"),
          {"w": ("BF16", [3, 4], w[:11] + [float("nan")]), "b": ("BF16", [4], b)})

    steps = [{"step": i + 1, "loss": 5.0 - 0.1 * i, "grad_norm": 1.0 + 0.01 * i}
             for i in range(4)]

    def metrics(name, rows):
        with open(os.path.join(out, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")

    def changed(i, **kv):
        rows = [dict(s) for s in steps]
        rows[i].update(kv)
        return rows

    metrics("ref", steps)
    metrics("close", [dict(s, loss=s["loss"] * (1 + 1e-7)) for s in steps])
    metrics("far", changed(2, grad_norm=steps[2]["grad_norm"] * (1 + 1e-3)))
    # json.dumps writes NaN, as Python's json (and loom-run's) reads it.
    metrics("nan", changed(3, loss=float("nan")))
    metrics("null", changed(1, grad_norm=None))
    metrics("fewer", steps[:3])
    metrics("renumbered", [dict(s, step=s["step"] + 1) for s in steps])


if __name__ == "__main__":
    main()
