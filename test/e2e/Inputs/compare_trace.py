#!/usr/bin/env python3
# ===- compare_trace.py - A traced pipeline run against its schedule ------===#
#
# Part of the Loom project.
#
# ===-----------------------------------------------------------------------===#
#
#   compare_trace.py TRACE SCHEDULE.json MANIFEST.json STEPS
#
# TRACE holds the "loom-trace: rank R F<m>.<c>" lines of a loom-run
# --trace-pipeline run of STEPS steps; SCHEDULE.json is loom-ranks --json
# --schedule output for the same plan. Every rank of the run must have run
# its pp rank's schedule, in order, once per step. Exit 1 otherwise.
#
# ===-----------------------------------------------------------------------===#

import json
import sys


def main():
    trace, schedule, manifest, steps = sys.argv[1:5]
    expected = json.load(open(schedule))["schedule"]
    groups = json.load(open(manifest))["groups"]["pp"]
    pp_rank = {r: i for g in groups for i, r in enumerate(g)}
    ran = {}
    for line in open(trace):
        if line.startswith("loom-trace: rank "):
            _, _, rank, step = line.split()
            ran.setdefault(int(rank), []).append(step)
    if sorted(ran) != sorted(pp_rank):
        print(f"traced ranks {sorted(ran)}, expected {sorted(pp_rank)}")
        return 1
    for rank, steps_run in sorted(ran.items()):
        want = expected[str(pp_rank[rank])] * int(steps)
        if steps_run != want:
            print(f"rank {rank} (pp rank {pp_rank[rank]}) ran {steps_run}, "
                  f"the schedule says {want}")
            return 1
    print(f"{len(ran)} ranks ran their schedules ({len(want)} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
