#!/usr/bin/env python3
"""Kills a saving training run at random moments and resumes each survivor.

Usage: kill_saves.py LOOM_RUN RANK_DIR WORK_DIR STEPS SECONDS -- RUN_FLAGS...

The uninterrupted run (STEPS steps, --save WORK_DIR/ref.safetensors) is the
reference. Each trial starts the same run with --save-interval 1, SIGKILLs
one of its rank processes (a random one) at a random moment (every other
trial while a save is under way), then resumes
from whatever checkpoint the trial left and runs to STEPS: the final model
and optimizer files must equal the reference's bitwise. Trials repeat until
SECONDS have passed (at least 4). A checkpoint that cannot be resumed, or a
resumed run that differs, fails the test.
"""
import glob
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time


def optimizer_iteration(path):
    """The iteration a Loom optimizer file was saved at (its train state)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    return json.loads(header["__metadata__"]["loom.train_state"])["iteration"]


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def rank_pids(rank_dir):
    out = subprocess.run(["pgrep", "-f", os.path.join(rank_dir, "rank-")],
                         capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main():
    sep = sys.argv.index("--")
    loom_run, rank_dir, work, steps, seconds = sys.argv[1:sep]
    flags = sys.argv[sep + 1:]
    steps, seconds = int(steps), float(seconds)
    rank_dir = os.path.abspath(rank_dir)
    os.makedirs(work, exist_ok=True)
    ref = os.path.join(work, "ref.safetensors")
    ref_optim = os.path.join(work, "ref.optim.safetensors")

    begin = time.monotonic()
    subprocess.run([loom_run, rank_dir, *flags, "--steps", str(steps),
                    "--save", ref], check=True, stdout=subprocess.DEVNULL)
    run_time = time.monotonic() - begin

    rng = random.Random(int(os.environ.get("KILL_SAVES_SEED", "1")))
    trials = completed = resumed_mid = 0
    deadline = time.monotonic() + seconds
    while trials < 4 or time.monotonic() < deadline:
        trials += 1
        trial = os.path.join(work, "trial%d" % trials)
        shutil.rmtree(trial, ignore_errors=True)
        os.makedirs(trial)
        ck = os.path.join(trial, "ck.safetensors")
        job = subprocess.Popen(
            [loom_run, rank_dir, *flags, "--steps", str(steps), "--save", ck,
             "--save-interval", "1"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Every other trial kills at a random moment of the run, the others
        # in the first 15 ms after a save began (a .tmp file appeared; a
        # gpt-tiny save takes about that long): where pairs can tear.
        # The victim is chosen once its process exists (looking it up takes
        # milliseconds, longer than a small save).
        wake = time.monotonic() + rng.uniform(0.2, run_time)
        pids = []
        while job.poll() is None and len(pids) < 2:
            pids = rank_pids(rank_dir)
        victim = rng.choice(pids) if pids else None
        if trials % 2:
            time.sleep(max(0.0, wake - time.monotonic()))
        else:
            while job.poll() is None and not (
                    time.monotonic() > wake and
                    any(n.endswith(".tmp") for n in os.listdir(trial))):
                pass
            time.sleep(rng.uniform(0, 0.015))
        if victim is not None and job.poll() is None:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.wait()
        for p in rank_pids(rank_dir):  # nothing may outlive the job
            os.kill(p, signal.SIGKILL)

        optim = os.path.join(trial, "ck.optim.safetensors")
        if not os.path.exists(optim):
            continue  # killed before the first save: nothing to resume
        done = optimizer_iteration(optim)
        out = os.path.join(trial, "resumed.safetensors")
        resume = subprocess.run(
            [loom_run, rank_dir, *flags, "--steps", str(steps - done),
             "--load", ck, "--save", out],
            capture_output=True, text=True)
        if resume.returncode != 0:
            sys.exit("trial %d: cannot resume from iteration %d:\n%s" %
                     (trials, done, resume.stdout + resume.stderr))
        if "completed the interrupted save" in resume.stdout:
            completed += 1
        if not (same_bytes(out, ref) and
                same_bytes(os.path.join(trial, "resumed.optim.safetensors"),
                           ref_optim)):
            sys.exit("trial %d: resumed from iteration %d, the result differs "
                     "from the uninterrupted run" % (trials, done))
        if 0 < done < steps:
            resumed_mid += 1
        shutil.rmtree(trial)
    print("kill_saves: %d trials, %d resumed mid-run, %d completed an "
          "interrupted save, all equal the uninterrupted run" %
          (trials, resumed_mid, completed))


if __name__ == "__main__":
    main()
