#!/usr/bin/python3
# ===- families.py - Llama 3.x, Qwen2 and Mistral against PyTorch ---------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# The Llama family's relatives (examples/llama3-tiny.json: llama3 RoPE
# scaling, attention and MLP biases; qwen2-tiny: q/k/v biases, tied
# embeddings; mistral-tiny) trained by loom and by the independent PyTorch
# implementation (torch_reference.py, float64), from weights far from
# initialization. Near initialization the loss sits at ln(vocab) whatever
# RoPE does (the llama3 scaling moves it by ~1e-6 relative, below any
# tolerance) and biases are zero; hence, per model:
#   1. pretraining at tp 1 on cp_matrix.py's structured tokens (predicting
#      them needs attention back to position 0 at the right positions) far
#      below ln(512) = 6.24, which also moves every bias away from zero;
#   2. controls, from that checkpoint, in the reference: the loss changes by
#      far more than the tolerance when the RoPE scaling is dropped (llama3)
#      or the biases are zeroed (llama3, qwen2), so a kernel that ignored
#      either could not pass 3;
#   3. tp 1 and tp 2 with sequence parallelism train STEPS AdamW steps from
#      it (--load); each is checked against PyTorch: the first step's
#      gradients (--dump-grads), the loss curve, the grad norms and the
#      final parameters (1e-5); and tp 2 and 4 with SP, and cp 2, against
#      tp 1: losses, grad norms, gradients and parameters within 1e-5
#      (normwise per tensor). Each reference run also checks that weight
#      decay, Adam's epsilon, bias correction and the last step each move
#      the final parameters by 10x the tolerance (cp_matrix.py's OPT); a
#      negative control (--control) runs one plan with one of them changed,
#      and its parameters must fail the comparison with tp 1.
# The checkpoints hold the Hugging Face names, biases included
# (model.layers.N.self_attn.q_proj.bias, ...), and nothing else; at tp > 1
# the manifest places column-parallel biases split with their weights and
# row-parallel ones whole.
#
#   families.py --bin BUILD/bin --work DIR --examples DIR [--models a,b]
#
# ===-----------------------------------------------------------------------===#

import argparse
import copy
import json
import os
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_reference as ref  # noqa: E402
from cp_matrix import (B, CONTROLS, OPT, PRETRAIN_B, PRETRAIN_OPT,  # noqa: E402
                       PRETRAINED_BELOW, S, STEPS, perturbed, run, tokens)
from tp_matrix import close, metrics  # noqa: E402

REFERENCE = os.path.join(HERE, "torch_reference.py")
MODELS = ("llama3-tiny", "qwen2-tiny", "mistral-tiny")
# tp 4 exceeds the 2 kv heads: k, v (and their biases) are split over tp,
# gathered and repeated. cp 2 (ring attention) rotates each rank's tokens by
# their global positions.
PLANS = (("tp1", []), ("tp2-sp", ["--tp", "2", "--sp"]),
         ("tp4-sp", ["--tp", "4", "--sp"]), ("cp2", ["--cp", "2"]))
# Qwen2's tied embeddings learn the structured tokens more slowly than the
# others: 60 steps leave every model well below PRETRAINED_BELOW (many more
# leave losses so low that f32 gradients lose digits).
PRETRAIN_STEPS = 60
# A control must move the loss by this much more than the tolerance.
CONTROL_MARGIN = 100 * 1e-5


def expected_names(cfg):
    """The Hugging Face tensor names of a Llama-family checkpoint."""
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not cfg.tied:
        names.add("lm_head.weight")
    for i in range(cfg.layers):
        p = "model.layers.%d." % i
        names |= {p + "input_layernorm.weight", p + "post_attention_layernorm.weight"}
        for proj, bias in (("q", cfg.qkv_bias), ("k", cfg.qkv_bias),
                           ("v", cfg.qkv_bias), ("o", cfg.o_bias)):
            names.add(p + "self_attn.%s_proj.weight" % proj)
            if bias:
                names.add(p + "self_attn.%s_proj.bias" % proj)
        for proj in ("gate", "up", "down"):
            names.add(p + "mlp.%s_proj.weight" % proj)
            if cfg.mlp_bias:
                names.add(p + "mlp.%s_proj.bias" % proj)
    return names


def check_bias_placements(name, manifest_path):
    """Megatron's layout at tp > 1: a column-parallel bias (q, k, v, gate,
    up) is split over tp with its weight's rows; a row-parallel one (o_proj,
    down_proj) is whole on every rank, added once after the reduction."""
    with open(manifest_path) as f:
        params = json.load(f)["params"]
    count = 0
    for p in params:
        if not p["name"].endswith(".bias"):
            continue
        row = any(s in p["name"] for s in ("o_proj", "down_proj"))
        split = p.get("placement", {}).get("split_dim")
        if split != (None if row else 0):
            sys.exit("FAIL: %s: %s is placed %s" % (name, p["name"],
                                                    p.get("placement")))
        count += 1
    return count


def reference_loss(cfg, W, stream):
    """The loss of the first micro-batch in float64 (no gradients)."""
    args = argparse.Namespace(eod_token_id=None, reset_position_ids=False,
                              reset_attention_mask=False)
    manifest = {"micro_batch_size": B, "seq_length": S}
    with torch.no_grad():
        return float(ref.step_loss(args, cfg, manifest, W, stream, 0))


def controls(model, cfg, start, data_file):
    """What the checks below can see: the loss without the RoPE scaling and
    without the biases, against the real one."""
    W = {k: v.double() for k, v in ref.read_safetensors(start).items()}
    stream = ref.read_tokens(data_file, "int32")
    loss = reference_loss(cfg, W, stream)
    out = []
    if cfg.rope_scaling is not None:
        plain = copy.copy(cfg)
        plain.rope_scaling = None
        out.append(("unscaled RoPE", reference_loss(plain, W, stream)))
    biases = [k for k in W if k.endswith(".bias")]
    if biases:
        zeroed = dict(W, **{k: torch.zeros_like(W[k]) for k in biases})
        smallest = min(float(W[k].abs().max()) for k in biases)
        if not smallest > 0:
            sys.exit("FAIL: %s: pretraining left a bias at zero" % model)
        out.append(("zero biases", reference_loss(cfg, zeroed, stream)))
    for what, other in out:
        rel = abs(other - loss) / loss
        print("%s: control: %s changes the loss %.4f by %.1e relative"
              % (model, what, loss, rel))
        if not rel > CONTROL_MARGIN:
            sys.exit("FAIL: %s: %s changes the loss by only %.1e: the checks "
                     "could not see it" % (model, what, rel))


def compare(what, a, b):
    """Worst normwise relative difference over the tensors of two files (b
    the reference), which must hold the same finite tensors. Epsilon 1e-5
    (cp_matrix.py) keeps the f32 noise of nearly ignored gradients (RoPE
    barely turns the slowest pairs of a head, so the softmax nearly ignores
    those elements of k_proj.bias) from becoming lr steps, so the key
    biases are compared like every other tensor."""
    return ref.compare_files(what, a, b, show=0)


def worst(text, prefix):
    return max(float(line.rsplit("relative difference", 1)[1].split()[0])
               for line in text.splitlines()
               if line.startswith(prefix) and "relative difference" in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--examples", required=True)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--control", metavar="MODEL-PLAN:KIND", action="append",
                    default=[],
                    help="negative control: MODEL-PLAN (e.g. qwen2-tiny-tp2-sp) "
                         "runs once more with KIND (%s); its parameters must "
                         "differ from tp 1's beyond the tolerance"
                         % ", ".join(CONTROLS))
    args = ap.parse_args()
    negative = [c.rpartition(":")[::2] for c in args.control]
    for name, kind in negative:
        perturbed(kind)
        if not any(name == m + "-" + p for m in args.models.split(",")
                   for p, _ in PLANS):
            sys.exit("--control %s: no such plan" % name)
    sys.stdout.reconfigure(line_buffering=True)
    tool = lambda name: os.path.join(args.bin, name)
    os.makedirs(args.work, exist_ok=True)
    started = time.time()
    data_file = os.path.join(args.work, "tokens.i32")
    tokens(data_file)
    data = ["--data", data_file, "--data-format", "int32"]

    for model in [m for m in args.models.split(",") if m]:
        config = os.path.join(args.examples, model + ".json")
        cfg = ref.Config(config)
        work = lambda name: os.path.join(args.work, model + "-" + name)
        # 1. Pretrain at tp 1.
        run([tool("loom-import"), config, "--micro-batch-size", str(PRETRAIN_B),
             "--seq-length", str(S), "-o", work("pretrain.mlir")])
        run([tool("loom-compile"), work("pretrain.mlir"), "--train", "-o",
             work("pretrain"), "--quiet"])
        run([tool("loom-run"), work("pretrain"), "--train", "--steps",
             str(PRETRAIN_STEPS), "--seed", "5"] + data + PRETRAIN_OPT
            + ["--metrics-jsonl", work("pretrain.jsonl"), "--save",
               work("pretrain.safetensors")])
        loss, _ = metrics(work("pretrain.jsonl"))
        print("%s: pretrained at tp 1, loss %.3f -> %.3f in %d steps"
              % (model, loss[0], loss[-1], len(loss)))
        if not loss[-1] < PRETRAINED_BELOW:
            sys.exit("FAIL: %s: pretraining left the loss at %.3f (want < %g)"
                     % (model, loss[-1], PRETRAINED_BELOW))
        # The model file alone: AdamW starts from zero at iteration 0.
        start = work("start.safetensors")
        shutil.copyfile(work("pretrain.safetensors"), start)
        names = set(ref.read_safetensors(start))
        if names != expected_names(cfg):
            sys.exit("FAIL: %s: checkpoint tensors differ from Hugging Face's: "
                     "extra %s, missing %s" % (
                         model, sorted(names - expected_names(cfg)),
                         sorted(expected_names(cfg) - names)))
        print("%s: checkpoint holds the %d Hugging Face tensors (%d biases)"
              % (model, len(names), sum(n.endswith(".bias") for n in names)))
        # 2. What the comparisons can see.
        controls(model, cfg, start, data_file)

        # 3. tp 1 and tp 2 + SP against PyTorch, and against each other.
        run([tool("loom-import"), config, "--micro-batch-size", str(B),
             "--seq-length", str(S), "-o", work("m.mlir")])
        base = None
        for plan, flags in PLANS:
            out = work(plan)
            run([tool("loom-compile"), work("m.mlir"), "--train", "-o", out,
                 "--quiet"] + flags)
            def train(kind=None):
                opt, steps, shifted = perturbed(kind) if kind else (OPT, STEPS, False)
                if shifted:
                    sys.exit("--control %s: families.py has no shifted data" % kind)
                tag = out + ("-" + kind if kind else "")
                jsonl, ckpt, grads = tag + ".jsonl", tag + ".safetensors", tag + ".grads"
                log = run([tool("loom-run"), out, "--train", "--steps", str(steps),
                           "--seed", "5", "--load", start] + data + opt
                          + ["--metrics-jsonl", jsonl, "--save", ckpt,
                             "--dump-grads", grads])
                if "resuming" in log:
                    sys.exit("FAIL: %s-%s resumed an optimizer state:\n%s"
                             % (model, plan, log))
                return jsonl, ckpt, grads

            jsonl, ckpt, grads = train()
            common = ["--config", config, "--manifest",
                      os.path.join(out, "manifest.json"), "--checkpoint", start] + data
            g = run(["/usr/bin/python3", REFERENCE, "grads", "--grads", grads] + common)
            t = run(["/usr/bin/python3", REFERENCE, "train", "--metrics", jsonl,
                     "--final", ckpt, "--steps", str(STEPS)] + common + OPT)
            if "--tp" in flags:
                n = check_bias_placements(model + "-" + plan,
                                          os.path.join(out, "manifest.json"))
                print("%s-%s: %d biases placed as Megatron's (column-parallel "
                      "split, row-parallel whole)" % (model, plan, n))
            loss, norm = metrics(jsonl)
            print("%s-%s: losses %s; matches PyTorch (loss within %.1e, gradients "
                  "within %.1e, parameters within %.1e)"
                  % (model, plan, ["%.6f" % x for x in loss], worst(t, "step "),
                     worst(g, "gradient "), worst(t, "final ")))
            if base is None:
                for line in t.splitlines():
                    if line.startswith("sensitivity:"):
                        print("  " + line)
                base = (loss, norm, ckpt, grads)
                continue
            if not close(loss, base[0]) or not close(norm, base[1]):
                sys.exit("FAIL: %s-%s: losses %s grad norms %s, tp 1: %s %s"
                         % (model, plan, loss, norm, base[0], base[1]))
            gworst = compare("gradients", grads, base[3])
            pworst = compare("parameters", ckpt, base[2])
            if not (gworst <= 1e-5 and pworst <= 1e-5):
                sys.exit("FAIL: %s-%s: gradients differ from tp 1 by %.2e, "
                         "parameters by %.2e" % (model, plan, gworst, pworst))
            print("%s-%s: matches tp 1 (gradients within %.1e, parameters within "
                  "%.1e)" % (model, plan, gworst, pworst))
            for name, kind in negative:
                if name != model + "-" + plan:
                    continue
                # The parameters must show the change (the losses hide a
                # weight decay or the last update).
                pworst = compare("parameters", train(kind)[1], base[2])
                print("control %s with %s: parameters differ from tp 1 by %.2e "
                      "(%.1fx the tolerance)" % (name, kind, pworst, pworst / 1e-5))
                if not pworst > 1e-5:
                    sys.exit("FAIL: control %s with %s passes the comparison "
                             "with tp 1: it cannot see that change" % (name, kind))
    print("model families pass in %.0f s" % (time.time() - started))


if __name__ == "__main__":
    main()
