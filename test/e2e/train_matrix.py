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
# A negative control (--control NAME:KIND, NAME as the run's tag, e.g.
# llama-tiny-dp2-tp2-sp-mb4-dist) trains that plan once more with one part
# of the optimizer run changed (torch_reference.CONTROLS); the reference,
# given the unchanged flags, must reject its final parameters.
#
#   train_matrix.py --bin BUILD/bin --work DIR --examples DIR [--model M]
#       [--control NAME:KIND]
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
# Epsilon 1e-6: with 1e-8 it moved llama-tiny's final parameters by only
# 4.6x the 1e-5 tolerance (llama-tiny-train.test), so a plan that dropped it
# could pass; the reference checks that every part of AdamW moves them by
# 10x (torch_reference.py SENSITIVITY_DOC).
OPT = ["--lr", "3e-3", "--min-lr", "3e-4", "--lr-warmup-steps", "2",
       "--lr-decay-steps", "10", "--weight-decay", "0.1", "--adam-eps", "1e-6",
       "--clip-grad", CLIP]
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
    ap.add_argument("--control", metavar="NAME:KIND", action="append", default=[])
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(REFERENCE))
    from torch_reference import perturbed
    negative = [c.rpartition(":")[::2] for c in args.control]
    for _, kind in negative:
        perturbed(kind, OPT, STEPS)
    controls_run = 0
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
            for cname, kind in negative:
                if cname != os.path.basename(tag):
                    continue
                # The control: the same plan with one thing changed; the
                # reference, told the real flags, must reject it.
                opt, steps, shifted = perturbed(kind, OPT, STEPS)
                if shifted or steps != STEPS:
                    sys.exit("--control %s: train_matrix.py compares %d logged "
                             "steps on the same data" % (kind, STEPS))
                ctag = tag + "-" + kind
                run([tool("loom-run"), out, "--train", "--steps", str(steps)] + data
                    + opt + ["--save", ctag + ".safetensors", "--metrics-jsonl",
                             ctag + ".jsonl"]
                    + (["--use-distributed-optimizer"] if dist else []))
                # Losses and grad norms are let through (--rtol 1): the
                # final parameters alone must reject the run.
                p = subprocess.run(
                    ["/usr/bin/python3", REFERENCE, "train", "--config", config,
                     "--manifest", os.path.join(out, "manifest.json"),
                     "--checkpoint", init, "--metrics", ctag + ".jsonl",
                     "--final", ctag + ".safetensors", "--steps", str(STEPS),
                     "--rtol", "1", "--grad-norm-rtol", "1"]
                    + data + OPT, text=True, capture_output=True)
                why = [l for l in (p.stdout + p.stderr).splitlines()
                       if l.startswith("FAIL")]
                print("control %s with %s: %s" % (cname, kind,
                                                  why[0] if why else "passed"))
                if p.returncode == 0 or "final parameters differ" not in p.stderr:
                    sys.exit("FAIL: control %s with %s: the reference did not "
                             "reject its final parameters" % (cname, kind))
                controls_run += 1
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
    if controls_run != len(negative):
        sys.exit("FAIL: %d of %d controls ran (a NAME matches no run)"
                 % (controls_run, len(negative)))
    print("training matrix passes: %d runs, %d negative controls failed as they "
          "must" % (count, controls_run))


if __name__ == "__main__":
    main()
