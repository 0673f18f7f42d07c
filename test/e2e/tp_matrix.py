#!/usr/bin/python3
# ===- tp_matrix.py - Tensor/sequence-parallel plans vs tp 1 --------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# For each model (and llama-tiny with hidden dropout) and each plan of the
# matrix tp in {1, 2, 4} x SP off/on:
# compiles the training step, trains a few steps with the same seed and data,
# and checks against tp 1:
#   - the loss and the gradient norm of every step (1e-5 relative),
#   - every gradient of the first step (--dump-grads, 1e-5 relative),
#   - every parameter after the last step (1e-5 normwise per tensor; each
#     part of AdamW moves them by 10x that, which tp 1's run against the
#     PyTorch reference checks),
#   - the report's communication volume, forward and backward, against
#     Megatron's analytic one (analytic() below).
#
# A negative control (--control NAME:KIND, torch_reference.CONTROLS) runs
# one plan once more with one part of the run changed; its parameters must
# fail the comparison with tp 1.
#
#   tp_matrix.py --bin BUILD/bin --work DIR --examples DIR [--control NAME:KIND]
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402

# A small learning rate keeps Adam from turning f32 rounding differences in
# tiny gradient components (the reduction order differs between plans) into
# parameter differences of order lr: the parameters are compared at 1e-5.
# Weight decay 1.0 and epsilon 1e-5 make each part of AdamW move the final
# parameters by 10x that (the reference run of tp 1 checks it; defaults,
# weight decay 0.01 and epsilon 1e-8, moved them by 2e-6 and less: see
# cp_matrix.py), and keep GPT-2's key bias (a zero gradient, rounding noise
# in floats) from moving by lr steps, so it is compared like every tensor.
B, S, STEPS, LR = 2, 16, 3, 1e-4
OPT = ["--lr", str(LR), "--weight-decay", "1.0", "--adam-eps", "1e-5"]


def run(cmd):
    p = subprocess.run(cmd, text=True, capture_output=True)
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def config_of(path):
    """(layers, hidden, heads, kv heads, GPT-2?) of a config.json."""
    with open(path) as f:
        c = json.load(f)
    if "n_embd" in c:
        return c["n_layer"], c["n_embd"], c["n_head"], c["n_head"], True
    heads = c["num_attention_heads"]
    return (c["num_hidden_layers"], c["hidden_size"], heads,
            c.get("num_key_value_heads", heads), False)


def analytic(config, tp, sp):
    """Megatron's volumes per micro-batch in bytes, f32, as
    {"forward"|"backward": ((all-reduces, bytes), (all-gathers, bytes),
    (reduce-scatters, bytes))}.

    Forward: per layer the activations of the attention and MLP outputs
    (b*s*h each) are all-reduced, or with SP reduce-scattered, and with SP
    the inputs of the column-parallel linears all-gathered; one more of each
    for the vocab-parallel embedding and the head; three all-reduces of b*s
    statistics for the vocab-parallel cross-entropy. Backward: the
    conjugates (the input gradients of column-parallel linears all-reduced,
    or reduce-scattered, and with SP the output gradients of row-parallel
    linears and, again, the inputs of column-parallel linears all-gathered),
    nothing for the cross-entropy, and with SP an all-reduce of every norm
    parameter's gradient (h each). With fewer kv heads than tp ranks, k and
    v (b*s*kv*d) are all-gathered before the heads are repeated, and their
    repeated gradients (b*s*tp*d) after; the backward gathers v again (it is
    saved split, while k is gathered before RoPE and saved whole)."""
    layers, hidden, heads, kv, gpt2 = config
    none = ((0, 0), (0, 0), (0, 0))
    if tp == 1:
        return {"forward": none, "backward": none}
    bsh = B * S * hidden * 4
    n = 2 * layers + 1
    head_dim = hidden // heads
    kv_fwd = (2 * layers, 2 * layers * B * S * kv * head_dim * 4) if tp > kv else (0, 0)
    kv_bwd = ((3 * layers, layers * B * S * (2 * tp + kv) * head_dim * 4)
              if tp > kv else (0, 0))
    ce = (3, 3 * B * S * 4)

    def add(a, b):
        return (a[0] + b[0], a[1] + b[1])

    if not sp:
        return {"forward": ((n + ce[0], n * bsh + ce[1]), kv_fwd, (0, 0)),
                "backward": ((n, n * bsh), kv_bwd, (0, 0))}
    norm_params = 4 * layers + 2 if gpt2 else 2 * layers + 1
    return {"forward": (ce, add((n, n * bsh), kv_fwd), (n, n * bsh)),
            "backward": ((norm_params, norm_params * hidden * 4),
                         add((2 * n, 2 * n * bsh), kv_bwd), (n, n * bsh))}


VOLUME = (r"(\d+) all-reduce\(s\) of (\d+) bytes in all"
          r"(?:, (\d+) all-gather\(s\) of (\d+) bytes, (\d+) reduce-scatter\(s\) of (\d+) bytes)?")


def reported(text):
    """The report's forward and backward volumes of @train_step."""
    out = {}
    for part in ("forward", "backward"):
        m = re.search(r"\n    %s: %s" % (part, VOLUME), text)
        if not m:
            sys.exit("no %s volume in the report:\n%s" % (part, text))
        g = [int(x) if x else 0 for x in m.groups()]
        out[part] = ((g[0], g[1]), (g[2], g[3]), (g[4], g[5]))
    return out


def metrics(path):
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r["loss"] for r in rows], [r["grad_norm"] for r in rows]


def close(a, b, tol=1e-5):
    return len(a) == len(b) and all(abs(x - y) <= tol * abs(y) for x, y in zip(a, b))


def compare(a, b, key_bias_bound=None):
    """Worst normwise relative difference over the tensors of two files (b
    the reference), after torch_reference.check_same_tensors (the same
    tensors and shapes, every value finite). GPT-2's key bias is exactly
    zero in gradient (hence moved by noise only under Adam): with
    key_bias_bound, held to it (absolute) instead."""
    return ref.compare_files(os.path.basename(a), a, b, key_bias_bound, show=0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--control", metavar="NAME:KIND", action="append", default=[],
                    help="negative control, e.g. llama-tiny-tp4-sp:no-weight-decay")
    args = ap.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    negative = [c.rpartition(":")[::2] for c in args.control]
    for _, kind in negative:
        ref.perturbed(kind, OPT, STEPS)
    tool = lambda name: os.path.join(args.bin, name)
    os.makedirs(args.work, exist_ok=True)
    tokens = os.path.join(args.work, "tokens.i32")
    reference = os.path.join(os.path.dirname(__file__), "torch_reference.py")
    run(["/usr/bin/python3", reference, "tokens", tokens, "--count", "8192",
         "--vocab", "512"])
    data = ["--data", tokens, "--data-format", "int32"]
    # llama-tiny once more with hidden dropout: the masks of split (with SP,
    # sequence-sharded) dropout must be the unsharded program's.
    for model, dropout in (("gpt-tiny", 0), ("llama-tiny", 0), ("llama-tiny", 0.2)):
        config = os.path.join(args.examples, model + ".json")
        shape = config_of(config)
        if dropout:
            model += "-dropout"
        mlir = os.path.join(args.work, model + ".mlir")
        run([tool("loom-import"), config, "--micro-batch-size", str(B),
             "--seq-length", str(S), "--hidden-dropout", str(dropout), "-o", mlir])
        base = None
        for tp, sp in ((1, False), (2, False), (2, True), (4, False), (4, True)):
            name = "%s-tp%d%s" % (model, tp, "-sp" if sp else "")
            out = os.path.join(args.work, name)
            cmd = [tool("loom-compile"), mlir, "--tp", str(tp), "--train", "-o", out,
                   "--quiet", "--report"] + (["--sp"] if sp else [])
            got = reported(run(cmd))
            want = analytic(shape, tp, sp)
            if got != want:
                sys.exit("%s: volume %s, Megatron's analytic %s" % (name, got, want))

            def train(kind=None):
                opt, steps, shifted = (ref.perturbed(kind, OPT, STEPS) if kind
                                       else (OPT, STEPS, False))
                if shifted:
                    sys.exit("--control %s: tp_matrix.py has no shifted data" % kind)
                tag = out + ("-" + kind if kind else "")
                jsonl, ckpt, grads = tag + ".jsonl", tag + ".safetensors", tag + ".grads"
                run([tool("loom-run"), out, "--train", "--steps", str(steps),
                     "--seed", "5"] + data + opt
                    + ["--metrics-jsonl", jsonl, "--save", ckpt, "--dump-grads", grads])
                return jsonl, ckpt, grads

            jsonl, ckpt, grads = train()
            loss, norm = metrics(jsonl)
            if base is None:
                print("%s: losses %s" % (name, ["%.6f" % x for x in loss]))
                if not dropout:
                    # What the parameters can see: tp 1 against PyTorch from
                    # the same initial weights (the dropout variant runs the
                    # same optimizer; the reference has no dropout).
                    init = os.path.join(args.work, model + "-init.safetensors")
                    run([tool("loom-run"), out, "--steps", "0", "--seed", "5",
                         "--save", init])
                    t = run(["/usr/bin/python3", reference, "train", "--config",
                             config, "--manifest", os.path.join(out, "manifest.json"),
                             "--checkpoint", init, "--metrics", jsonl, "--final", ckpt,
                             "--steps", str(STEPS)] + data + OPT)
                    for line in t.splitlines():
                        if line.startswith(("sensitivity:", "final parameters match")):
                            print("  " + line)
                base = (loss, norm, ckpt, grads)
                continue
            if not close(loss, base[0]) or not close(norm, base[1]):
                sys.exit("%s: loss %s grad norm %s, tp 1: %s %s" % (name, loss, norm, base[0], base[1]))
            gworst = compare(grads, base[3])
            pworst = compare(ckpt, base[2])
            if not (gworst <= 1e-5 and pworst <= 1e-5):
                sys.exit("%s: gradients differ from tp 1 by %g, parameters by %g"
                         % (name, gworst, pworst))
            print("%s: matches tp 1 (gradients within %.1e, parameters within %.1e), "
                  "volume %s" % (name, gworst, pworst, got))
            for cname, kind in negative:
                if cname != name:
                    continue
                pworst = compare(train(kind)[1], base[2])
                print("control %s with %s: parameters differ from tp 1 by %.2e "
                      "(%.1fx the tolerance)" % (name, kind, pworst, pworst / 1e-5))
                if not pworst > 1e-5:
                    sys.exit("FAIL: control %s with %s passes the comparison with "
                             "tp 1: it cannot see that change" % (name, kind))
    print("tensor-parallel matrix passes")


if __name__ == "__main__":
    main()
