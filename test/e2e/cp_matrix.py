#!/usr/bin/python3
# ===- cp_matrix.py - Context-parallel plans vs cp 1 ----------------------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# Context parallelism splits every sequence over cp ranks (Megatron's
# load-balanced chunks), so attention has to see the other ranks' keys and
# values with the right causal mask and global positions, and the loss has
# to be reduced over the split. Near initialization the loss sits at
# ln(vocab) whatever the mask or the positions are, so a wrong one hides;
# hence, for gpt-tiny and llama-tiny:
#   1. a STRUCTURED token file (tokens() below: each sample is one of a few
#      templates, named by its first token; every later token depends on
#      the template, its position and the previous token, so predicting it
#      needs attention back to position 0, for most tokens in another cp
#      rank's chunk, and the right positions), on which the model is
#      pretrained at cp 1 (PRETRAIN_STEPS steps at a high lr) far below
#      ln(512) = 6.24;
#      every run below starts from that checkpoint (--load, without its
#      optimizer file: AdamW starts from zero at iteration 0). The samples
#      also hold an end-of-document token at a position that depends on the
#      template, which the loss mask leaves out (docs/MANIFEST.md, Data): the
#      cp ranks of a micro-batch hold unequal numbers of loss tokens, which
#      the [sum, count] reduction of the loss has to get right (imported with
#      --eod-token-id, compiled with Megatron's --eod-mask-loss);
#   2. cp 1 (dp 1 and dp 2) is checked against the independent PyTorch
#      implementation (torch_reference.py grads and train, float64) from the
#      same checkpoint: first-step gradients, loss curve, grad norms and the
#      parameters after STEPS AdamW steps;
#   3. every plan of
#        cp in {2, 4} x comm types x {tp 1, tp 2 with SP} x dp in {1, 2}
#      (plus, with more than one comm type, a per-layer mix) trains STEPS
#      steps from the same checkpoint on the same data and is checked
#      against cp 1 with the same dp (dp changes the global batch): the loss
#      and the gradient norm of every step (1e-5 relative), every gradient
#      of the first step (--dump-grads, 1e-5 normwise) and every parameter
#      after the last step (1e-5 normwise; GPT-2's key bias, whose exact
#      gradient is zero, within what Adam can move it), and the replicas of
#      every parameter (cp ranks hold whole copies) hold the same bytes
#      after every step (--check-weight-hash-interval 1);
#   4. the report's ring sends and all-to-alls of @train_step (count and
#      bytes, forward and backward) equal TransformerEngine's analytic
#      volumes of each comm type (ring_analytic, a2a_analytic); the other
#      volumes are printed.
# Without --full, a slice that covers each comm type at least once and both
# models, cp 2 and 4, tp 2 with SP and dp 2 (slice_matrix() below) keeps CI
# short.
#
#   cp_matrix.py --bin BUILD/bin --work DIR --examples DIR
#       [--comm-types allgather,p2p,...] [--full] [--perturb PLAN]
#
# --perturb PLAN is a negative control: that plan reads its tokens shifted
# by one, so the run must fail with a mismatch.
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_reference import (CONTROLS, compare_files,  # noqa: E402
                             compare_metric_files)
from torch_reference import perturbed as ref_perturbed  # noqa: E402
from tp_matrix import metrics, reported  # noqa: E402

REFERENCE = os.path.join(HERE, "torch_reference.py")

# The plans' geometry: seq 32 divides into 2 * cp * tp chunks for cp 4 with
# tp 2 and SP.
B, S, VOCAB = 2, 32, 512
# The compared runs: a small learning rate keeps Adam from turning f32
# rounding differences in tiny gradient components (the reduction order
# differs between plans) into parameter differences of order lr (see
# tp_matrix.py); parameters are compared at 1e-5 (normwise, per tensor).
# At that tolerance every part of AdamW must show (torch_reference.py,
# SENSITIVITY_DOC; `train` checks it on the cp 1 run): with lr 1e-4 over 5
# cosine steps (an lr sum of 3.2e-4), weight decay 0.01 moved the final
# parameters by 3.2e-6 and epsilon 1e-8 by 1.4e-5 (llama-tiny), below or
# at the tolerance, so a plan could drop either and pass. Weight decay 1.0
# moves them by 3.2e-4 (32x the tolerance) and epsilon 1e-5 by 7.0e-4
# (llama-tiny; gpt-tiny 9.8e-4); bias correction moves them by 2e-2 and
# the last step by 3.6e-4. Epsilon 1e-5 also keeps gradients that are
# rounding noise (GPT-2's key bias: zero in exact arithmetic) from
# becoming full lr steps, so every tensor is compared normwise; the
# elements below f32 resolution moved by 1e-4 of the lr sum (0.06 with
# epsilon 1e-8).
STEPS, LR, ADAM_EPS = 5, 1e-4, 1e-5
ELEM = 4  # bytes an activation element: 2 with --dtype bf16
# Cosine decay: the matrices and families.py were calibrated with it (the
# default became Megatron's linear later; lr-schedules.test covers styles).
OPT = ["--lr", str(LR), "--min-lr", "1e-5", "--lr-decay-style", "cosine",
       "--lr-warmup-steps", "0",
       "--lr-decay-steps", str(STEPS), "--weight-decay", "1.0",
       "--adam-eps", str(ADAM_EPS), "--clip-grad", "1.0"]
# What a plan must match cp 1 within: losses and grad norms of every step
# (relative), first-step gradients and final parameters (normwise per
# tensor); and what cp 1 must match PyTorch within (torch_reference.py
# grads --rtol, train flags). bf16: see TOLERANCES_BF16_NOTE.
TOLERANCES_BF16_NOTE = """
bf16 (llama-tiny pretrained in bf16, documents, every comm type at cp 2
and 4 against cp 1 in bf16; measured on the CPU backend): a plan's losses
differ from cp 1's by up to 5.4e-3, its first-step gradients by 2.6e-2
and its final parameters by 8e-4 (normwise per tensor): bf16 rounds every
activation to 8 bits of mantissa (4e-3), and a plan sums in another
order. The tolerances are about twice that (3e-3 for the parameters). cp
1 against the float64 reference: losses 4e-3, grad norms 1.2e-2,
gradients 3e-2, the f32 main parameters' movement within 0.1 of
PyTorch's (--delta-rtol 0.2). At these tolerances no part of AdamW shows
(weight decay moves the parameters by 3.2e-4): the f32 matrix checks the
optimizer, and bf16's negative control reads the data shifted by one
token, which its comparison with cp 1 must reject.
"""
TOLERANCES = {
    "f32": {"curve": 1e-5, "grads": 1e-5, "params": 1e-5,
            "reference_grads": 1e-5, "reference_train": []},
    "bf16": {"curve": 1e-2, "grads": 5e-2, "params": 3e-3,
             "reference_grads": 5e-2,
             "reference_train": ["--rtol", "1e-2", "--grad-norm-rtol", "3e-2",
                                 "--param-rtol", "2e-2", "--unresolved-bound", "1.5",
                                 "--delta-rtol", "0.2", "--min-sensitivity", "0"]},
}
# Pretraining: bigger micro-batches (the parameters do not depend on them)
# and a high learning rate.
PRETRAIN_B, PRETRAIN_STEPS = 16, 50
PRETRAIN_OPT = ["--lr", "5e-3", "--lr-warmup-steps", "5", "--min-lr", "1e-3",
                "--lr-decay-style", "cosine"]
PRETRAINED_BELOW = 3.0  # nats; ln(512) = 6.24 at initialization

# The token file: TEMPLATES templates over an alphabet of ALPHABET tokens;
# template k's samples start with the marker VOCAB - TEMPLATES + k.
TEMPLATES, ALPHABET, SAMPLES = 16, 64, 1024
EOD = ALPHABET  # only ever at template k's position eod_position(k)


def eod_position(k):
    return 1 + (11 * k) % (S - 1)


def tokens(path):
    """SAMPLES samples of S tokens (+1, the last label). Sample j uses
    template k (a fixed pseudo-random choice); token p of it is
    (T[k][p] + token[p-1]) mod ALPHABET, except the EOD at eod_position(k)."""
    state = [2024]

    def rnd():
        state[0] = (state[0] * 1103515245 + 12345) % (1 << 31)
        return state[0] >> 8

    table = [[rnd() % ALPHABET for _ in range(S)] for _ in range(TEMPLATES)]
    out = []
    for _ in range(SAMPLES):
        k = rnd() % TEMPLATES
        row = [VOCAB - TEMPLATES + k]
        for p in range(1, S):
            prev = row[p - 1] if p > 1 else 0
            row.append(EOD if p == eod_position(k) else (table[k][p] + prev) % ALPHABET)
        out += row
    out.append(0)
    with open(path, "wb") as f:
        f.write(struct.pack("<%di" % len(out), *out))


def run(cmd):
    try:
        p = subprocess.run(cmd, text=True, capture_output=True)
    except OSError as e:
        sys.exit("FAIL: %s: %s" % (" ".join(cmd), e))
    if p.returncode != 0:
        sys.exit("FAIL: %s\n%s%s" % (" ".join(cmd), p.stdout, p.stderr))
    return p.stdout


def compile_plan(cmd, out):
    """loom-compile with Megatron's --eod-mask-loss (the models are imported
    with --eod-token-id EOD), so the cp ranks of a micro-batch hold unequal
    numbers of loss tokens."""
    text = run(cmd + ["--eod-mask-loss"])
    with open(os.path.join(out, "manifest.json")) as f:
        if json.load(f)["eod_token_id"] != EOD:
            sys.exit("FAIL: %s: the manifest's eod_token_id is not %d" % (out, EOD))
    return text


class Plan:
    def __init__(self, model, cp, tp, sp, dp, comm):
        self.model, self.cp, self.tp, self.sp, self.dp = model, cp, tp, sp, dp
        self.comm = comm  # one type for every layer, or a list, one per layer

    @property
    def name(self):
        comm = self.comm if isinstance(self.comm, str) else "[%s]" % ",".join(self.comm or [])
        return "%s-cp%d-tp%d%s-dp%d%s" % (self.model, self.cp, self.tp,
                                          "-sp" if self.sp else "", self.dp,
                                          "-" + comm if self.cp > 1 else "")

    def flags(self):
        f = ["--cp", str(self.cp), "--tp", str(self.tp), "--dp", str(self.dp)]
        if self.sp:
            f.append("--sp")
        if self.cp > 1:
            comms = [self.comm] if isinstance(self.comm, str) else list(self.comm)
            f += ["--cp-comm-type"] + comms  # Megatron's space-separated list
            if "a2a+p2p" in comms:
                # Hierarchical: an a2a group of 2 inside, p2p across.
                f += ["--hierarchical-context-parallel-sizes", "2", str(self.cp // 2)]
        return f


def full_matrix(models, comms, layers):
    for model in models:
        for cp in (2, 4):
            for tp, sp in ((1, False), (2, True)):
                for dp in (1, 2):
                    for comm in comms:
                        yield Plan(model, cp, tp, sp, dp, comm)
                    if len(comms) > 1:
                        yield Plan(model, cp, tp, sp, dp,
                                   [comms[l % len(comms)] for l in range(layers[model])])


def slice_matrix(comms, layers):
    """gpt-tiny cp 2; llama-tiny cp 4 with tp 2 and SP; llama-tiny cp 2 with
    dp 2; as many more of these shapes as it takes for every comm type to
    appear; with several comm types, llama-tiny cp 2 with a per-layer mix;
    with a2a+p2p, gpt-tiny cp 4 with tp 2 and SP and llama-tiny cp 4 with
    dp 2."""
    shapes = [("gpt-tiny", 2, 1, False, 1), ("llama-tiny", 4, 2, True, 1),
              ("llama-tiny", 2, 1, False, 2)]
    for i in range(max(len(shapes), len(comms))):
        yield Plan(*shapes[i % len(shapes)], comms[i % len(comms)])
    if len(comms) > 1:
        yield Plan("llama-tiny", 2, 1, False, 1,
                   [comms[(l + 1) % len(comms)] for l in range(layers["llama-tiny"])])
    if "a2a+p2p" in comms:
        # The hierarchical ring proper needs cp 4 (a2a groups of 2, a ring
        # of 2; at cp 2 it is Ulysses) and heads that divide over the groups.
        yield Plan("gpt-tiny", 4, 2, True, 1, "a2a+p2p")
        yield Plan("llama-tiny", 4, 1, False, 2, "a2a+p2p")


def volumes(v):
    """The report's volumes, in words."""
    def one(part):
        (ar, arb), (ag, agb), (rs, rsb) = v[part]
        return "%d all-reduce(s) %d B, %d all-gather(s) %d B, %d reduce-scatter(s) %d B" % (
            ar, arb, ag, agb, rs, rsb)
    return "forward %s; backward %s" % (one("forward"), one("backward"))


def per_pass(report, what):
    """The report's (count, bytes) of `what` ("p2p send", "all-to-all") per
    micro-batch, forward and backward."""
    pattern = r"\n    %%s: [^\n]*?(\d+) %s\(s\) of (\d+) bytes" % re.escape(what)
    out = {}
    for part in ("forward", "backward"):
        m = re.search(pattern % part, report)
        out[part] = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    return out


def ring_analytic(config, plan):
    """TransformerEngine's ring per micro-batch: each p2p layer passes its
    rank's k and v (b * s/cp tokens of kv/tp heads) cp - 1 times forward, and
    k, v, dk and dv cp - 1 times backward."""
    with open(config) as f:
        c = json.load(f)
    heads = c.get("n_head") or c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    hidden = c.get("n_embd") or c["hidden_size"]
    comms = [plan.comm] * layers_of(config) if isinstance(plan.comm, str) else plan.comm
    rings = sum(1 for t in comms if t == "p2p") if plan.cp > 1 else 0
    # a2a+p2p: the ring runs over cp / 2 groups of 2 (Plan.flags), its
    # blocks of the same bytes (twice the tokens, half the heads).
    hierarchical = sum(1 for t in comms if t == "a2a+p2p") if plan.cp > 1 else 0
    local_kv = max(kv // plan.tp, 1)  # kv heads repeated when tp exceeds them
    tensor = B * (padded_length(plan) // plan.cp) * local_kv * (hidden // heads) * ELEM
    hops = rings * (plan.cp - 1) + hierarchical * (plan.cp // 2 - 1)
    return {"forward": (2 * hops, 2 * hops * tensor),
            "backward": (4 * hops, 4 * hops * tensor)}


def padded_length(plan):
    """S padded as Megatron's get_padding pads it (tfm-pad-sequence)."""
    f = 2 * plan.cp * plan.tp if plan.sp and plan.cp > 1 else (
        2 * plan.cp if plan.cp > 1 else (plan.tp if plan.sp else 1))
    return -(-S // f) * f


def a2a_analytic(config, plan):
    """The all-to-alls per micro-batch, each counted by its input: a2a
    (Ulysses) layers exchange q, k, v and the output forward, and q, k, v,
    the output and its gradient, then dq, dk, dv backward, on each tp
    rank's heads (kv heads repeated up to cp when cp does not divide them);
    a2a+p2p layers (groups of 2, Plan.flags) q, k, v, the output and the
    log-sum-exp forward, and q, the output, its gradient and the lse, then
    dq, dk, dv backward (at cp 2 they are Ulysses)."""
    with open(config) as f:
        c = json.load(f)
    heads = c.get("n_head") or c["num_attention_heads"]
    kv = c.get("num_key_value_heads", heads)
    d = (c.get("n_embd") or c["hidden_size"]) // heads
    comms = [plan.comm] * layers_of(config) if isinstance(plan.comm, str) else plan.comm
    if plan.cp == 1:
        return {"forward": (0, 0), "backward": (0, 0)}
    L = padded_length(plan) // plan.cp
    nq, nkv = heads // plan.tp, max(kv // plan.tp, 1)
    row = B * L * d * ELEM  # one head's [B, L, D] in the model's dtype
    fwd, bwd = [0, 0], [0, 0]
    for t in comms:
        if t == "a2a" or (t == "a2a+p2p" and plan.cp == 2):
            nkv_r = nkv if nkv % plan.cp == 0 else plan.cp
            fwd[0] += 4
            fwd[1] += row * (2 * nq + 2 * nkv_r)
            bwd[0] += 8
            bwd[1] += row * (4 * nq + 4 * nkv_r)
        elif t == "a2a+p2p":
            lse = B * nq * L * 4
            fwd[0] += 5
            fwd[1] += row * (2 * nq + 2 * nkv) + lse
            bwd[0] += 7
            bwd[1] += row * (4 * nq + 2 * nkv) + lse
    return {"forward": tuple(fwd), "backward": tuple(bwd)}


def distributed(plan):
    """cp plans with dp > 1 run Megatron's distributed optimizer, sharded over
    dp x cp (cp 1 runs the plain one: the same numbers)."""
    return ["--use-distributed-optimizer"] if plan.cp > 1 and plan.dp > 1 else []


def a2a_fits(config, plan):
    """Whether a2a layers of `plan` can split each tp rank's query heads over
    cp, and a2a+p2p layers its query and kv heads over the a2a groups of 2."""
    comms = [plan.comm] if isinstance(plan.comm, str) else list(plan.comm or [])
    if plan.cp == 1:
        return True
    with open(config) as f:
        c = json.load(f)
    heads = c.get("n_head") or c["num_attention_heads"]
    kv = max(c.get("num_key_value_heads", heads) // plan.tp, 1)
    if "a2a" in comms and (heads // plan.tp) % plan.cp != 0:
        return False
    # a2a+p2p at cp 2 is [2, 1]: Ulysses over 2 ranks (its kv heads are
    # repeated when they do not divide).
    if "a2a+p2p" in comms and ((heads // plan.tp) % 2 != 0 or
                               (plan.cp > 2 and kv % 2 != 0)):
        return False
    return True


def layers_of(config):
    with open(config) as f:
        c = json.load(f)
    return c.get("n_layer") or c["num_hidden_layers"]


def perturbed(kind):
    """A negative control's run of OPT and STEPS (torch_reference.perturbed)."""
    return ref_perturbed(kind, OPT, STEPS)


def main():
    global S
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--comm-types", default="allgather",
                    help="comma-separated: allgather, p2p, a2a, a2a+p2p")
    ap.add_argument("--full", action="store_true", help="every plan, not the slice")
    ap.add_argument("--shard", metavar="K/N",
                    help="with --full: only the plans whose index is K mod N "
                         "(a CI run's share of the whole matrix; the cp 1 "
                         "baselines run in every shard)")
    ap.add_argument("--models", default="gpt-tiny,llama-tiny")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="bf16: llama-tiny at cp 2 and 4 (every comm type "
                         "given, tp 1, dp 1) against cp 1 in bf16 with f32 "
                         "main parameters, at bf16's tolerances (TOLERANCES)")
    ap.add_argument("--documents", action="store_true",
                    help="import with Megatron's --reset-attention-mask and "
                         "--reset-position-ids")
    ap.add_argument("--seq-length", type=int, default=S,
                    help="sequence length (one that 2 x cp does not divide is "
                         "padded by loom-compile)")
    ap.add_argument("--control", metavar="PLAN:KIND", action="append", default=[],
                    help="negative control: PLAN runs once more with KIND (%s) "
                         "and its comparison with cp 1 must fail"
                         % ", ".join(CONTROLS))
    args = ap.parse_args()
    S = args.seq_length
    global ELEM
    ELEM = 2 if args.dtype == "bf16" else 4
    sys.stdout.reconfigure(line_buffering=True)  # in order with the FAIL lines
    comms = [c for c in args.comm_types.split(",") if c]
    tol = TOLERANCES[args.dtype]
    # Megatron's document masks: each token attends within its document and
    # positions restart after every EOD (the structured data has one EOD a
    # sample, so every sample holds two documents).
    documents = (["--reset-attention-mask", "--reset-position-ids"]
                 if args.documents else [])
    dtype = ["--dtype", args.dtype] if args.dtype != "f32" else []
    tool = lambda name: os.path.join(args.bin, name)
    os.makedirs(args.work, exist_ok=True)
    started = time.time()

    data_file = os.path.join(args.work, "tokens.i32")
    tokens(data_file)
    data = ["--data", data_file, "--data-format", "int32"]
    shifted = os.path.join(args.work, "shifted.i32")
    with open(data_file, "rb") as f, open(shifted, "wb") as g:
        g.write(f.read()[4:] + struct.pack("<i", 0))

    models = [m for m in args.models.split(",") if m]
    layers = {m: layers_of(os.path.join(args.examples, m + ".json")) for m in models}
    if args.dtype == "bf16":
        plans = [Plan(m, cp, 1, False, 1, c) for m in models for cp in (2, 4)
                 for c in comms]
    else:
        plans = list(full_matrix(models, comms, layers) if args.full
                     else slice_matrix(comms, layers))
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        plans = [p for i, p in enumerate(plans) if i % n == k]
        print("shard %d of %d: %d plans" % (k, n, len(plans)))
    controls = []
    for c in args.control:
        name, _, kind = c.rpartition(":")
        if name not in [p.name for p in plans]:
            sys.exit("--control %s: no such plan (%s)"
                     % (name, ", ".join(p.name for p in plans)))
        perturbed(kind)
        controls.append((name, kind))
    ran = rejected = 0

    for model in models:
        mine = [p for p in plans if p.model == model]
        if not mine:
            continue
        config = os.path.join(args.examples, model + ".json")
        # 1. Pretrain at cp 1 on the structured data.
        mlir = os.path.join(args.work, model + ".mlir")
        run([tool("loom-import"), config, "--micro-batch-size", str(B),
             "--seq-length", str(S), "--eod-token-id", str(EOD), "-o", mlir]
            + documents + dtype)
        pre_mlir = os.path.join(args.work, model + "-pretrain.mlir")
        pre = os.path.join(args.work, model + "-pretrain")
        run([tool("loom-import"), config, "--micro-batch-size", str(PRETRAIN_B),
             "--seq-length", str(S), "--eod-token-id", str(EOD), "-o", pre_mlir]
            + documents + dtype)
        compile_plan([tool("loom-compile"), pre_mlir, "--train", "-o", pre, "--quiet"], pre)
        run([tool("loom-run"), pre, "--train", "--steps", str(PRETRAIN_STEPS),
             "--seed", "5"] + data + PRETRAIN_OPT
            + ["--metrics-jsonl", pre + ".jsonl", "--save", pre + ".safetensors"])
        loss, _ = metrics(pre + ".jsonl")
        print("%s: pretrained at cp 1, loss %.3f -> %.3f in %d steps"
              % (model, loss[0], loss[-1], len(loss)))
        if not loss[-1] < PRETRAINED_BELOW:
            sys.exit("FAIL: %s: pretraining left the loss at %.3f (want < %g)"
                     % (model, loss[-1], PRETRAINED_BELOW))
        # The model file alone: AdamW starts from zero at iteration 0.
        start = os.path.join(args.work, model + "-start.safetensors")
        shutil.copyfile(pre + ".safetensors", start)

        def train(p, out, kind=None):
            """Trains plan p from the checkpoint (perturbed by a control's
            kind): its metrics, model, optimizer state and first gradients."""
            opt, steps, which = perturbed(kind) if kind else (OPT, STEPS, False)
            tag = out + ("-" + kind if kind else "")
            jsonl, ckpt, grads = tag + ".jsonl", tag + ".safetensors", tag + ".grads"
            log = run([tool("loom-run"), out, "--train", "--steps", str(steps),
                       "--seed", "5", "--load", start]
                      + (["--data", shifted, "--data-format", "int32"] if which
                         else data)
                      + opt + distributed(p) + ["--metrics-jsonl", jsonl, "--save", ckpt,
                               "--dump-grads", grads,
                               "--check-weight-hash-interval", "1"])
            if "resuming" in log:
                sys.exit("FAIL: %s resumed an optimizer state:\n%s" % (p.name, log))
            return jsonl, ckpt, grads

        def differences(p, result, b):
            """How far a run is from cp 1's: (losses and grad norms,
            first-step gradients, final parameters), each the worst relative
            difference (normwise for tensors); files that do not hold the
            same finite tensors fail here."""
            jsonl, ckpt, grads = result
            curve = compare_metric_files(jsonl, b[0])[0]
            try:
                gworst = compare_files("gradients", grads, b[2], show=0)
                pworst = compare_files("parameters", ckpt, b[1], show=0)
            except SystemExit as e:
                sys.exit("FAIL: %s: %s" % (p.name, e.code))
            return curve, gworst, pworst

        base = {}
        for p in [Plan(model, 1, 1, False, dp, None)
                  for dp in sorted({p.dp for p in mine})] + mine:
            out = os.path.join(args.work, p.name)
            if not a2a_fits(config, p):
                # Ulysses splits each tp rank's query heads over cp: a plan
                # where they do not divide is a named error.
                bad = subprocess.run([tool("loom-compile"), mlir, "--train", "-o", out,
                                      "--quiet"] + p.flags(), text=True,
                                     capture_output=True)
                if bad.returncode == 0 or "which does not divide them" not in bad.stderr:
                    sys.exit("FAIL: %s: expected the error about query heads, got:\n%s"
                             % (p.name, bad.stderr))
                print("%s: rejected (query heads per tp rank do not divide over cp)"
                      % p.name)
                rejected += 1
                continue
            report = compile_plan([tool("loom-compile"), mlir, "--train", "-o", out,
                                   "--quiet", "--report"] + p.flags(), out)
            vol = reported(report)
            padded = re.search(r"sequence: (\d+) tokens padded to (\d+)", report)
            if (int(padded.group(2)) if padded else S) != padded_length(p):
                sys.exit("FAIL: %s: the report's padding %s, Megatron's %d"
                         % (p.name, padded and padded.group(0), padded_length(p)))
            sends, want = per_pass(report, "p2p send"), ring_analytic(config, p)
            if sends != want:
                sys.exit("FAIL: %s: the report's ring sends %s, TransformerEngine's %s"
                         % (p.name, sends, want))
            a2as, want = per_pass(report, "all-to-all"), a2a_analytic(config, p)
            if a2as != want:
                sys.exit("FAIL: %s: the report's all-to-alls %s, the analytic %s"
                         % (p.name, a2as, want))
            result = train(p, out)
            jsonl, ckpt, grads = result
            loss, norm = metrics(jsonl)
            if p.cp == 1:
                # 2. cp 1 against PyTorch from the same checkpoint.
                common = ["--config", config, "--manifest",
                          os.path.join(out, "manifest.json"), "--checkpoint", start] + data
                if documents:
                    common += documents + ["--eod-token-id", str(EOD)]
                g = run(["/usr/bin/python3", REFERENCE, "grads", "--grads", grads,
                         "--rtol", str(tol["reference_grads"])] + common)
                t = run(["/usr/bin/python3", REFERENCE, "train", "--metrics", jsonl,
                         "--final", ckpt, "--steps", str(STEPS)] + common + OPT
                        + tol["reference_train"]
                        + (["--main-params", ckpt[:-len(".safetensors")]
                            + ".optim.safetensors"] if args.dtype != "f32" else []))
                worst = lambda text, prefix: max(
                    float(l.rsplit("relative difference", 1)[1].split()[0])
                    for l in text.splitlines()
                    if l.startswith(prefix) and "relative difference" in l)
                print("%s: losses %s; matches PyTorch (loss within %.1e, gradients "
                      "within %.1e, parameters within %.1e)"
                      % (p.name, ["%.6f" % x for x in loss], worst(t, "step "),
                         worst(g, "gradient "), worst(t, "final ")))
                for line in t.splitlines():
                    if line.startswith(("sensitivity:", "main parameters moved")):
                        print("  " + line)
                base[p.dp] = (jsonl, ckpt, grads)
                ran += 1
                continue
            curve, gworst, pworst = differences(p, result, base[p.dp])
            if not (curve <= tol["curve"] and gworst <= tol["grads"]
                    and pworst <= tol["params"]):
                sys.exit("FAIL: %s: differs from cp 1: losses and grad norms by "
                         "%.2e (tolerance %.0e), gradients by %.2e (%.0e), "
                         "parameters by %.2e (%.0e)"
                         % (p.name, curve, tol["curve"], gworst, tol["grads"],
                            pworst, tol["params"]))
            print("%s: matches cp 1 (losses within %.1e, gradients within %.1e, "
                  "parameters within %.1e)%s"
                  % (p.name, curve, gworst, pworst,
                     "" if padded_length(p) == S else
                     "; sequence padded from %d to %d" % (S, padded_length(p))))
            print("  volume per micro-batch: %s; ring sends %s; all-to-alls %s"
                  % (volumes(vol), sends, a2as))
            ran += 1
            for name, kind in controls:
                if name != p.name:
                    continue
                # The control changes the run; the comparison must see it in
                # the parameters (the losses hide a weight decay or the last
                # update, which only the parameters show).
                c = train(p, out, kind)
                if kind == "one-step-fewer":
                    curve = gworst = 0.0  # one step fewer logged, by design
                    try:
                        pworst = compare_files("parameters", c[1], base[p.dp][1], show=0)
                    except SystemExit as e:
                        sys.exit("FAIL: control %s: %s" % (name, e.code))
                else:
                    curve, gworst, pworst = differences(p, c, base[p.dp])
                print("control %s with %s: parameters differ from cp 1 by %.2e "
                      "(%.1fx the tolerance), losses and grad norms by %.2e, "
                      "gradients by %.2e" % (name, kind, pworst,
                                             pworst / tol["params"], curve,
                                             gworst))
                # Shifted data is another computation: any part of the
                # comparison must reject it (in bf16 the parameters move by
                # less than their tolerance in 5 steps at lr 1e-4). The
                # optimizer's parts show in the parameters alone.
                seen = pworst > tol["params"] or (
                    kind == "shifted-data" and
                    (curve > tol["curve"] or gworst > tol["grads"]))
                if not seen:
                    sys.exit("FAIL: control %s with %s passes the comparison "
                             "with cp 1: it cannot see that change" % (name, kind))
    print("context-parallel matrix passes: %d plans ran, %d rejected as expected, "
          "%d negative controls failed as they must, in %.0f s"
          % (ran, rejected, len(controls), time.time() - started))


if __name__ == "__main__":
    main()
