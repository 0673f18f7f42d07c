#!/usr/bin/python3
# ===- bench_train.py - Loom vs PyTorch eager, single-rank training step --===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
# Times one training step (forward, backward, global-norm clipping, AdamW)
# of each model, as compiled by Loom (`loom-compile --train`, the median
# step_time_ms of `--train --metrics-jsonl`) and as PyTorch eager computes
# it (test/e2e/torch_reference.py's model in f32, autograd,
# clip_grad_norm_ and torch.optim.AdamW with the driver's defaults, same
# thread count), and prints the ratio loom / torch (below 1: Loom is
# faster). Memory per rank is the peak RSS of each process (the loom rank;
# a fresh Python process for torch, whose figure includes the torch
# library itself, reported apart as "torch import").
#
#   bench_train.py --build build [--models gpt-tiny,gpt2-124m] [--steps 5]
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

SHAPES = {"gpt-tiny": (4, 64), "gpt2-124m": (1, 128), "llama-tiny": (4, 64)}


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def loom_step(build, config, batch, seq, steps, threads, work):
    mlir = os.path.join(work, "model.mlir")
    out = os.path.join(work, "out")
    run([os.path.join(build, "bin", "loom-import"), config,
         "--micro-batch-size", str(batch), "--seq-length", str(seq), "-o", mlir])
    run([os.path.join(build, "bin", "loom-compile"), mlir, "--train", "-o", out,
         "--quiet"])
    metrics = os.path.join(work, "metrics.jsonl")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS=str(threads))
    # GNU time's %M is the peak RSS of the rank process (KiB).
    err = run(["/usr/bin/time", "-f", "peak-rss-kib %M",
               os.path.join(out, "rank-00000"), "--train",
               "--steps", str(steps + 1), "--metrics-jsonl", metrics,
               "--threads", str(threads)], env=env).stderr
    rss = [int(l.split()[1]) for l in err.splitlines()
           if l.startswith("peak-rss-kib")][-1] / 1024.0
    with open(metrics) as f:
        times = [json.loads(line)["step_time_ms"] for line in f if line.strip()]
    # The first step pays for page faults and thread start-up.
    return statistics.median(times[1:]), rss, os.path.join(out, "manifest.json")


def torch_worker(args):
    """In a process of its own, so that its peak RSS is torch's alone."""
    import torch
    import torch_reference as ref

    def peak_mib():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
        return float("nan")

    base = peak_mib()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = ref.Config(args.config)
    with open(args.manifest) as f:
        manifest = json.load(f)
    W = {}
    for p in manifest["params"]:
        hf = p["hf"]
        if hf["name"] not in W:
            W[hf["name"]] = (torch.randn(hf["shape"]) * 0.02).requires_grad_(True)
    B, S = args.batch, args.seq
    # The driver's defaults: lr 1e-3, weight decay 0.01 except biases and
    # 1-D tensors, betas (0.9, 0.999), eps 1e-8, clip 1.0.
    decay = [w for k, w in W.items() if w.dim() > 1 and not k.endswith(".bias")]
    other = [w for k, w in W.items() if not (w.dim() > 1 and not k.endswith(".bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    tokens = torch.randint(0, manifest["vocab_size"], (B, S + 1))
    inputs, labels = tokens[:, :-1], tokens[:, 1:]
    mask = torch.ones(B, S)
    pos = torch.arange(S).expand(B, S)
    logits_fn = ref.gpt2_logits if cfg.family == "gpt2" else ref.llama_logits
    times = []
    for _ in range(args.steps + 1):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = ref.masked_mean_ce(logits_fn(cfg, W, inputs, pos, None), labels, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), 1.0)
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"ms": statistics.median(times[1:]), "rss": peak_mib(),
                      "import_rss": base}))


def torch_step(config, manifest, batch, seq, steps, threads):
    out = run([sys.executable, os.path.abspath(__file__),
               "--torch-worker", "--config", config,
               "--manifest", manifest, "--batch", str(batch),
               "--seq", str(seq), "--steps", str(steps),
               "--threads", str(threads)]).stdout
    r = json.loads(out.strip().splitlines()[-1])
    return r["ms"], r["rss"], r["import_rss"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="gpt-tiny,gpt2-124m")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    # Internal: the torch side, run in a child process.
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    ap.add_argument("--manifest", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args)
        return
    print("%-10s %-7s %10s %10s %10s %14s %14s %14s" %
          ("model", "B x S", "loom ms", "torch ms", "loom/torch",
           "loom RSS MiB", "torch RSS MiB", "torch import"))
    for model in args.models.split(","):
        config = os.path.join(ROOT, "examples", model + ".json")
        batch, seq = SHAPES[model]
        with tempfile.TemporaryDirectory() as work:
            loom_ms, loom_rss, manifest = loom_step(
                args.build, config, batch, seq, args.steps, args.threads, work)
            torch_ms, torch_rss, torch_base = torch_step(
                config, manifest, batch, seq, args.steps, args.threads)
        print("%-10s %-7s %10.2f %10.2f %10.2f %14.1f %14.1f %14.1f" %
              (model, "%dx%d" % (batch, seq), loom_ms, torch_ms,
               loom_ms / torch_ms, loom_rss, torch_rss, torch_base),
              flush=True)


if __name__ == "__main__":
    main()
