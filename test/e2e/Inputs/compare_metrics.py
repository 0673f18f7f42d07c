#!/usr/bin/env python3
# ===- compare_metrics.py - Two runs' metrics, step by step ---------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   compare_metrics.py A.jsonl B.jsonl --within TOL
#
# Every step's loss and grad norm (loom-run --metrics-jsonl) must agree
# within TOL relative; the runs must have the same steps. Exit 1 otherwise.
#
# ===-----------------------------------------------------------------------===#

import json
import sys


def steps(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    a, b = steps(sys.argv[1]), steps(sys.argv[2])
    tol = float(sys.argv[sys.argv.index("--within") + 1])
    if len(a) != len(b) or not a:
        print(f"{sys.argv[1]} has {len(a)} steps, {sys.argv[2]} {len(b)}")
        return 1
    worst = 0.0
    for x, y in zip(a, b):
        for key in ("loss", "grad_norm"):
            d = abs(x[key] - y[key]) / max(abs(x[key]), 1e-30)
            worst = max(worst, d)
            if d > tol:
                print(f"step {x['step']}: {key} {x[key]} vs {y[key]} "
                      f"(relative {d:.3g} > {tol})")
                return 1
    print(f"{len(a)} steps: loss and grad norm within {worst:.3g} relative")
    return 0


if __name__ == "__main__":
    sys.exit(main())
