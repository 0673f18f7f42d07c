#!/usr/bin/env python3
"""Stops one rank of a running job and reports how the job ended.

Usage: stall_rank.py RANK_DIR RANK METRICS TIMEOUT_S -- COMMAND...

Runs COMMAND (a loom-run job of the rank executables in RANK_DIR); once
METRICS holds two steps, sends SIGSTOP to rank RANK, then waits up to
TIMEOUT_S seconds for the job to end. Prints "exit: N" (or "exit: hang"
when it did not end; the job is killed then) and the job's stderr. Any
process of the job still alive at the end gets SIGKILL.
"""
import os
import signal
import subprocess
import sys
import time


def pids(rank_dir, rank):
    out = subprocess.run(
        ["pgrep", "-f", os.path.join(rank_dir, "rank-%05d" % rank)],
        capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main():
    sep = sys.argv.index("--")
    rank_dir, rank, metrics, timeout = sys.argv[1:sep]
    rank_dir, rank, timeout = os.path.abspath(rank_dir), int(rank), float(timeout)
    job = subprocess.Popen(sys.argv[sep + 1:], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    while job.poll() is None and time.monotonic() - start < 60:
        if os.path.exists(metrics) and sum(1 for _ in open(metrics)) >= 2:
            break
        time.sleep(0.05)
    for p in pids(rank_dir, rank):
        os.kill(p, signal.SIGSTOP)
    try:
        _, err = job.communicate(timeout=timeout)
        print("exit: %d" % job.returncode)
    except subprocess.TimeoutExpired:
        job.kill()
        _, err = job.communicate()
        print("exit: hang")
    for r in range(64):
        for p in pids(rank_dir, r):
            os.kill(p, signal.SIGKILL)
    sys.stdout.write(err)


if __name__ == "__main__":
    main()
