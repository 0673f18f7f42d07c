#!/usr/bin/env python3
"""Kills a saving training run at random moments and resumes each survivor.

Usage: kill_saves.py LOOM_RUN RANK_DIR WORK_DIR STEPS SECONDS
           [--hook-at I,J,...] [--min-resumed N] [--min-in-save N] -- RUN_FLAGS...

The uninterrupted run (STEPS steps, --save WORK_DIR/ref.safetensors) is the
reference. Each trial starts the same run with --save-interval 1, SIGKILLs
one of its rank processes (a random one) at a random moment (every other
trial while a save is under way), then resumes
from whatever checkpoint the trial left and runs to STEPS: the final model
and optimizer files must equal the reference's bitwise. Trials repeat until
SECONDS have passed (at least 4). A checkpoint that cannot be resumed, or a
resumed run that differs, fails the test.

--hook-at I,J runs one trial more for each iteration given, killed by the
rank program's test hook (LOOM_TEST_KILL_BETWEEN_RENAMES) between the two
renames of that iteration's save, the moment a pair can tear: each must
leave the model file at its .tmp name, and its resume must complete the
save and equal the uninterrupted run. The test fails unless at least
--min-in-save trials were killed inside a save (a .tmp file left behind)
and resumed, and at least --min-resumed resumed mid-run: a run where the
kills missed every save, or nothing was resumed, proves nothing.
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


def random_kill(job, rank_dir, trial, rng, trials, run_time):
    """SIGKILLs one rank of the job at a random moment: every other trial
    at any time, the others in the first 15 ms after a save began (a .tmp
    file appeared; a gpt-tiny save takes about that long): where pairs can
    tear. The victim is chosen once its process exists (looking it up
    takes milliseconds, longer than a small save)."""
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


def finish(job, rank_dir, timeout):
    """Waits for a trial's job; its stderr ("" when not captured), or None
    when it hung: Open MPI's mpirun has been seen to wait forever (in a
    futex) after one of its ranks was SIGKILLed, which is the launcher's
    failure, not the checkpoint's. A hung job is killed (loom-run, its
    mpirun, the ranks) and its trial not counted."""
    try:
        return job.communicate(timeout=timeout)[1] or ""
    except subprocess.TimeoutExpired:
        children = subprocess.run(["pgrep", "-P", str(job.pid)],
                                  capture_output=True, text=True).stdout.split()
        for p in [int(c) for c in children] + rank_pids(rank_dir) + [job.pid]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.communicate()
        return None


def main():
    sep = sys.argv.index("--")
    loom_run, rank_dir, work, steps, seconds = sys.argv[1:6]
    options = sys.argv[6:sep]
    flags = sys.argv[sep + 1:]
    hook_at, min_resumed, min_in_save = [], 0, 0
    while options:
        name, value = options[0], options[1]
        options = options[2:]
        if name == "--hook-at":
            hook_at = [int(x) for x in value.split(",")]
        elif name == "--min-resumed":
            min_resumed = int(value)
        elif name == "--min-in-save":
            min_in_save = int(value)
        else:
            sys.exit("kill_saves.py: unknown option %s" % name)
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
    trials = completed = resumed_mid = in_save = hung = 0
    deadline = time.monotonic() + seconds
    hooks = list(hook_at)
    while hooks or trials < 4 or time.monotonic() < deadline:
        trials += 1
        trial = os.path.join(work, "trial%d" % trials)
        shutil.rmtree(trial, ignore_errors=True)
        os.makedirs(trial)
        ck = os.path.join(trial, "ck.safetensors")
        hook = hooks.pop(0) if hooks else None
        env = dict(os.environ)
        if hook is not None:
            env["LOOM_TEST_KILL_BETWEEN_RENAMES"] = str(hook)
        job = subprocess.Popen(
            [loom_run, rank_dir, *flags, "--steps", str(steps), "--save", ck,
             "--save-interval", "1"], env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE if hook is not None else subprocess.DEVNULL,
            text=True)
        if hook is not None:
            err = finish(job, rank_dir, 60 + 10 * run_time)
            if job.returncode == 0 or "killed between the renames" not in err:
                sys.exit("trial %d: the test hook did not kill the save of "
                         "iteration %d (exit %d):\n%s"
                         % (trials, hook, job.returncode, err))
            if not os.path.exists(ck + ".tmp"):
                sys.exit("trial %d: killed between the renames, but the model "
                         "file is not left at its .tmp name" % trials)
        # Every other trial kills at a random moment of the run, the others
        # in the first 15 ms after a save began (a .tmp file appeared; a
        # gpt-tiny save takes about that long): where pairs can tear.
        # The victim is chosen once its process exists (looking it up takes
        # milliseconds, longer than a small save).
        else:
            random_kill(job, rank_dir, trial, rng, trials, run_time)
            if finish(job, rank_dir, 60 + 10 * run_time) is None:
                hung += 1
                continue
        for p in rank_pids(rank_dir):  # nothing may outlive the job
            os.kill(p, signal.SIGKILL)
        # Killed inside a save: a staged file is left behind.
        torn = any(n.endswith(".tmp") for n in os.listdir(trial))

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
        if hook is not None and "completed the interrupted save" not in resume.stdout:
            sys.exit("trial %d: killed between the renames at iteration %d, but "
                     "the resume did not complete that save:\n%s"
                     % (trials, hook, resume.stdout))
        if 0 < done < steps:
            resumed_mid += 1
        in_save += torn
        shutil.rmtree(trial)
    print("kill_saves: %d trials, %d resumed mid-run, %d killed inside a save, "
          "%d completed an interrupted save, all equal the uninterrupted run%s" %
          (trials, resumed_mid, in_save, completed,
           " (%d hung in mpirun, not counted)" % hung if hung else ""))
    if resumed_mid < min_resumed or in_save < min_in_save:
        sys.exit("FAIL: %d trials resumed mid-run (at least %d wanted), %d were "
                 "killed inside a save (at least %d wanted): the trials did not "
                 "exercise what they test" % (resumed_mid, min_resumed, in_save,
                                              min_in_save))


if __name__ == "__main__":
    main()
