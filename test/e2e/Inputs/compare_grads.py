#!/usr/bin/env python3
# ===- compare_grads.py - Two F32 safetensors files, tensor by tensor ------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   compare_grads.py A B --within TOL     every tensor: max |a - b| <= TOL *
#                                         max |a| (exit 1 otherwise)
#   compare_grads.py A B --beyond TOL     some tensor differs by more (the
#                                         check above would catch a mistake)
#
# Prints the largest relative difference. Plain Python (F32 tensors only).
#
# ===-----------------------------------------------------------------------===#

import json
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = struct.unpack("<%df" % ((e - b) // 4), body[b:e])
    return out


def main():
    a, b, mode, tol = read(sys.argv[1]), read(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    if set(a) != set(b):
        sys.exit("different tensors: %s" % sorted(set(a) ^ set(b)))
    worst, where = 0.0, None
    for name in sorted(a):
        scale = max(abs(x) for x in a[name]) or 1.0
        diff = max(abs(x - y) for x, y in zip(a[name], b[name])) / scale
        if diff > worst:
            worst, where = diff, name
    print("largest relative difference %.3g (%s)" % (worst, where))
    if mode == "--within" and worst > tol:
        sys.exit("FAIL: above %g" % tol)
    if mode == "--beyond" and worst <= tol:
        sys.exit("FAIL: not above %g" % tol)


if __name__ == "__main__":
    main()
