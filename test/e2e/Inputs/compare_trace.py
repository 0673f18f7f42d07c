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
# right after the chunk's last backward step. The data lines
# ("loom-trace: rank R D<m>.<c> tokens|loss V") must follow their forward
# step: the first stage's forward of each micro-batch traces its tokens,
# the last stage's its loss, once a micro-batch and step (their values
# are checked against PyTorch by torch_reference.py trace). Exit 1
# otherwise.
#
# ===-----------------------------------------------------------------------===#

import json
import sys


def main():
    trace, schedule, manifest, steps = sys.argv[1:5]
    expected = json.load(open(schedule))["schedule"]
    groups = json.load(open(manifest))["groups"]["pp"]
    pp_rank = {r: i for g in groups for i, r in enumerate(g)}
    ran, data = {}, {}
    for line in open(trace):
        if not line.startswith("loom-trace: rank "):
            continue
        fields = line.split()
        rank = int(fields[2])
        if len(fields) == 4:
            ran.setdefault(rank, []).append(fields[3])
            continue
        if len(fields) != 6 or not fields[3].startswith("D") or \
                fields[4] not in ("tokens", "loss"):
            print(f"unreadable trace line: {line.strip()}")
            return 1
        # A data line belongs to the forward step just traced.
        step = "F" + fields[3][1:]
        last = ran.get(rank, [None])[-1]
        if last != step:
            print(f"rank {rank}: {fields[3]} {fields[4]} after {last}, not after {step}")
            return 1
        data.setdefault(rank, []).append((step, fields[4]))
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
        # Which forward steps trace data: the first chunk's on pp rank 0
        # (tokens), the last chunk's on the last pp rank (loss).
        pp_size = len(expected)
        chunks = max(int(s.split(".")[1]) for s in expected["0"]) + 1
        want_data = []
        for s in want:
            if not s.startswith("F"):
                continue
            c = int(s.split(".")[1])
            if pp == 0 and c == 0:
                want_data.append((s, "tokens"))
            if pp == pp_size - 1 and c == chunks - 1:
                want_data.append((s, "loss"))
        if data.get(rank, []) != want_data:
            print(f"rank {rank} (pp rank {pp}) traced data {data.get(rank, [])}, "
                  f"expected {want_data}")
            return 1
    print(f"{len(ran)} ranks ran their schedules ({len(want)} steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
