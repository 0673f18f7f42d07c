#!/usr/bin/python3
# ===- train_matrix.py - Every training plan against PyTorch --------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# The training matrix: for gpt-tiny and llama-tiny, every plan of
#   dp in {1, 2} x tp in {1, 2} x SP off/on (tp 2) x {1, 4} micro-batches
#   x distributed optimizer off/on (dp 2)
# trains 10 steps (warmup, linear decay (the default), weight decay, clipping that acts
# in most steps, which is checked) from the
# same initial weights on the same data. The global batch is 8 sequences in
# every plan (micro-batch size 8 / (dp * micro-batches)), so every plan
# computes the same function: each run's loss curve, learning rates, grad
# norms (1e-5 relative) and final parameters (1e-5 normwise per tensor) are
# checked against the PyTorch training loop of torch_reference.py (float64,
# torch.optim.AdamW), and so agree with each other to twice that. Every
# run also checks after each step that all replicas of a parameter box (dp
# replicas, tp-replicated norms and biases) hold the same bytes.
#
#   train_matrix.py --bin BUILD/bin --work DIR --examples DIR [--model M]
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import os
import subprocess
import sys

GLOBAL_BATCH, S, STEPS = 8, 16, 10
# Low enough that clipping acts in most steps of both models (grad norms
# are about 0.7 to 2.4 here): the matrix checks that it does.
CLIP = "0.6"
OPT = ["--lr", "3e-3", "--min-lr", "3e-4", "--lr-warmup-steps", "2",
       "--lr-decay-steps", "10", "--weight-decay", "0.1", "--clip-grad", CLIP]
REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                         "torch_reference.py")


def run(cmd):
    p = subprocess.run(cmd, text=True, capture_output=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def plans():
    """(dp, tp, sp, micro-batches, distributed optimizer), dp 1 tp 1 first."""
    for dp in (1, 2):
        for tp, sp in ((1, False), (2, False), (2, True)):
            for mb in (1, 4):
                for dist in ((False, True) if dp > 1 else (False,)):
                    yield dp, tp, sp, mb, dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--model", action="append",
                    help="gpt-tiny and/or llama-tiny (default: both)")
    args = ap.parse_args()
    tool = lambda name: os.path.join(args.bin, name)
    os.makedirs(args.work, exist_ok=True)
    tokens = os.path.join(args.work, "tokens.i32")
    run(["/usr/bin/python3", REFERENCE, "tokens", tokens, "--count", "8192",
         "--vocab", "512"])
    data = ["--data", tokens, "--data-format", "int32"]
    count = 0
    clipped = {}  # model -> [steps whose grad norm exceeded CLIP, steps]
    for model in args.model or ("gpt-tiny", "llama-tiny"):
        config = os.path.join(args.examples, model + ".json")
        init = os.path.join(args.work, model + "-init.safetensors")
        compiled = set()
        for dp, tp, sp, mb, dist in plans():
            mbs = GLOBAL_BATCH // (dp * mb)
            plan = "dp%d-tp%d%s-mb%d" % (dp, tp, "-sp" if sp else "", mb)
            out = os.path.join(args.work, "%s-%s" % (model, plan))
            if plan not in compiled:
                mlir = os.path.join(args.work, "%s-mbs%d.mlir" % (model, mbs))
                if not os.path.exists(mlir):
                    run([tool("loom-import"), config, "--micro-batch-size", str(mbs),
                         "--seq-length", str(S), "-o", mlir])
                run([tool("loom-compile"), mlir, "--train", "--dp", str(dp), "--tp", str(tp),
                     "--num-microbatches", str(mb), "-o", out, "--quiet"]
                    + (["--sp"] if sp else []))
                compiled.add(plan)
            if not os.path.exists(init):
                # Initial weights depend on the seed and global shapes only.
                run([tool("loom-run"), out, "--steps", "0", "--save", init])
            name = "%s %s%s" % (model, plan, " dist-opt" if dist else "")
            tag = out + ("-dist" if dist else "")
            run([tool("loom-run"), out, "--train", "--steps", str(STEPS)] + data + OPT
                + ["--save", tag + ".safetensors", "--metrics-jsonl", tag + ".jsonl",
                   "--check-weight-hash-interval", "1"]
                + (["--use-distributed-optimizer"] if dist else []))
            checked = run(["/usr/bin/python3", REFERENCE, "train", "--config", config,
                           "--manifest", os.path.join(out, "manifest.json"),
                           "--checkpoint", init, "--metrics", tag + ".jsonl",
                           "--final", tag + ".safetensors", "--steps", str(STEPS)]
                          + data + OPT)
            if "final parameters match PyTorch within 1e-05" not in checked:
                sys.exit("FAIL: %s\n%s" % (name, checked))
            last = [l for l in checked.splitlines() if l.startswith("step %d:" % STEPS)]
            print("%s: matches PyTorch (%s)" % (name, last[0].split("|")[0].strip()))
            with open(tag + ".jsonl") as f:
                norms = [json.loads(l)["grad_norm"] for l in f if l.strip()]
            clipped[model] = [a + b for a, b in
                              zip(clipped.get(model, [0, 0]),
                                  [sum(n > float(CLIP) for n in norms), len(norms)])]
            count += 1
    for model, (fired, steps) in sorted(clipped.items()):
        print("%s: clipping acted in %d of %d steps" % (model, fired, steps))
        if fired * 2 <= steps:
            sys.exit("FAIL: %s: clipping acted in %d of %d steps, not most: "
                     "the matrix would not test it" % (model, fired, steps))
    print("training matrix passes: %d runs" % count)


if __name__ == "__main__":
    main()
