#!/usr/bin/python3
# ===- bench_forward.py - Loom vs PyTorch eager, single-rank forward ------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# Times one forward pass (logits and masked cross-entropy) of each model, as
# compiled by Loom (the median step time loom's driver reports) and as
# PyTorch eager computes it (test/e2e/torch_reference.py's model, f32, same
# thread count), and prints the ratio loom / torch (below 1: Loom is faster).
#
#   bench_forward.py --build build [--models gpt-tiny,gpt2-124m] [--steps 10]
#
# ===-----------------------------------------------------------------------===#

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import torch  # noqa: E402
import torch_reference as ref  # noqa: E402

SHAPES = {"gpt-tiny": (4, 64), "gpt2-124m": (1, 256), "llama-tiny": (4, 64)}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def loom_step_ms(build, config, batch, seq, steps, threads, work):
    mlir = os.path.join(work, "model.mlir")
    out = os.path.join(work, "out")
    run([os.path.join(build, "bin", "loom-import"), config,
         "--micro-batch-size", str(batch), "--seq-length", str(seq), "-o", mlir])
    run([os.path.join(build, "bin", "loom-compile"), mlir, "-o", out, "--quiet"])
    metrics = os.path.join(work, "metrics.jsonl")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS=str(threads))
    run([os.path.join(out, "rank-00000"), "--steps", str(steps + 1),
         "--metrics-jsonl", metrics, "--threads", str(threads)], env=env)
    with open(metrics) as f:
        times = [json.loads(line)["step_time_ms"] for line in f if line.strip()]
    # The first step pays for page faults and thread start-up.
    return statistics.median(times[1:]), os.path.join(out, "manifest.json")


def torch_step_ms(config, manifest_path, batch, seq, steps, threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = ref.Config(config)
    with open(manifest_path) as f:
        manifest = json.load(f)
    weights = {}
    for p in manifest["params"]:
        hf = p["hf"]
        if hf["name"] not in weights:
            weights[hf["name"]] = torch.randn(hf["shape"]) * 0.02
    tokens = torch.randint(0, manifest["vocab_size"], (batch, seq + 1))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    mask = torch.ones(batch, seq)
    pos = torch.arange(seq).expand(batch, seq)
    logits_fn = ref.gpt2_logits if cfg.family == "gpt2" else ref.llama_logits
    times = []
    with torch.no_grad():
        for _ in range(steps + 1):
            start = time.perf_counter()
            logits = logits_fn(cfg, weights, inputs, pos, None)
            ref.masked_mean_ce(logits, labels, mask)
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="gpt-tiny,gpt2-124m")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    print("%-12s %-10s %12s %12s %10s" %
          ("model", "B x S", "loom ms", "torch ms", "loom/torch"))
    for model in args.models.split(","):
        config = os.path.join(ROOT, "examples", model + ".json")
        batch, seq = SHAPES[model]
        with tempfile.TemporaryDirectory() as work:
            loom_ms, manifest = loom_step_ms(args.build, config, batch, seq,
                                             args.steps, args.threads, work)
            torch_ms = torch_step_ms(config, manifest, batch, seq, args.steps,
                                     args.threads)
        print("%-12s %-10s %12.2f %12.2f %10.2f" %
              (model, "%dx%d" % (batch, seq), loom_ms, torch_ms,
               loom_ms / torch_ms))


if __name__ == "__main__":
    main()
