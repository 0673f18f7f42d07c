#!/usr/bin/python3
# ===- compare_grads.py - Two safetensors files, tensor by tensor ---------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   compare_grads.py A B --within TOL     every tensor of B within TOL of A's,
#                                         normwise: |b - a| / |a| (A is the
#                                         reference run)
#   compare_grads.py A B --beyond TOL     some tensor differs by more (the
#                                         check above would catch a mistake)
#
# Both modes fail first when the files do not hold the same tensors (a
# missing or extra name), a shape differs, or a value is NaN or infinite in
# either file (torch_reference.check_same_tensors): --beyond cannot pass
# on a NaN. Prints the worst tensors. F32, BF16 and F16 files.
#
# ===-----------------------------------------------------------------------===#

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_reference import compare_tensors, read_safetensors  # noqa: E402


def main():
    if len(sys.argv) != 5 or sys.argv[3] not in ("--within", "--beyond"):
        sys.exit("usage: compare_grads.py A B --within|--beyond TOL")
    a, b, mode, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    worst = compare_tensors(os.path.basename(b), read_safetensors(b),
                            read_safetensors(a))
    print("largest normwise relative difference %.3g" % worst)
    if mode == "--within" and not worst <= tol:
        sys.exit("FAIL: above %g" % tol)
    if mode == "--beyond" and not worst > tol:
        sys.exit("FAIL: not above %g" % tol)


if __name__ == "__main__":
    main()
