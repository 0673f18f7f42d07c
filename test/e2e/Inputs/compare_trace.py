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
# its pp rank's schedule, in order, once per step, and signalled each
# chunk's gradients (G<c>, where their data-parallel reduction starts)
# right after the chunk's last backward step. Exit 1 otherwise.
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
    stage_entries = json.load(open(manifest)).get("stage_entries", [])

    def with_grads_ready(pp, schedule):
        # The chunks whose gradients this pp rank's train step signals.
        train = stage_entries[pp].get("train_step", {}) if stage_entries else {}
        chunks = {a["chunk"] for a in train.get("args", []) if "chunk" in a}
        last = {}
        for i, step in enumerate(schedule):
            if step.startswith("B"):
                last[int(step.split(".")[1])] = i
        out = []
        for i, step in enumerate(schedule):
            out.append(step)
            out += [f"G{c}" for c in sorted(chunks) if last.get(c) == i]
        return out

    for rank, steps_run in sorted(ran.items()):
        pp = pp_rank[rank]
        want = with_grads_ready(pp, expected[str(pp)]) * int(steps)
        if steps_run != want:
            print(f"rank {rank} (pp rank {pp}) ran {steps_run}, "
                  f"the schedule says {want}")
            return 1
    print(f"{len(ran)} ranks ran their schedules ({len(want)} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
