#!/usr/bin/python3
# ===- compare_metrics.py - Two runs' metrics, step by step ---------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   compare_metrics.py A.jsonl B.jsonl --within TOL
#
# Every step's loss and grad norm (loom-run --metrics-jsonl) must agree
# within TOL relative to A's; the runs must log the same steps, and a null,
# NaN or missing value fails (torch_reference.compare_metric_files).
# Exit 1 otherwise.
#
# ===-----------------------------------------------------------------------===#

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_reference import compare_metric_files  # noqa: E402


def main():
    if len(sys.argv) != 5 or sys.argv[3] != "--within":
        sys.exit("usage: compare_metrics.py A.jsonl B.jsonl --within TOL")
    tol = float(sys.argv[4])
    worst, (step, key, b, a) = compare_metric_files(sys.argv[2], sys.argv[1])
    if not worst <= tol:
        print(f"step {step}: {key} {a} vs {b} (relative {worst:.3g} > {tol})")
        return 1
    print(f"loss and grad norm within {worst:.3g} relative (worst: step {step}, {key})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
