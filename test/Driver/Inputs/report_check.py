#!/usr/bin/env python3
# Checks loom-compile --report-json against the analytic volumes of a
# pipelined plan (Megatron-Core's schedule, f32 activations):
#
#   - each virtual stage (stage s of pp x vpp runs on pp rank s % pp) sends
#     its activations forward once per micro-batch (unless it is the last)
#     and their gradients back once per micro-batch (unless it is the
#     first), each a [b, s / cp (/ tp with SP), h] tensor;
#   - the collectives of the stages' forward passes, summed over the pp
#     ranks, are the unpipelined program's per micro-batch times the
#     micro-batches (the schedule changes where layers run, not what they
#     communicate); so are the backward's when no gradient is reduced once
#     per step (no sequence parallelism: its norm weights' gradients are the
#     only ones a pipelined step reduces once), except that with ring
#     attention (cp > 1) each layer's backward, a block function of its
#     own, first fetches the k and v block its forward ended with (one more
#     hop of k and v per layer and micro-batch than the unpipelined step,
#     whose backward still holds them);
#   - one program per pp rank, whose ranks are those of the pp rank.
#
#   report_check.py PIPELINED.json UNPIPELINED.json HIDDEN LAYERS
# Exits non-zero naming the first difference.

import json
import sys

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all",
         "p2p_send")


def fail(message):
    sys.exit("FAIL: " + message)


def main(pipelined_path, flat_path, hidden, layers):
    pipelined = json.load(open(pipelined_path))
    flat = json.load(open(flat_path))
    hidden, layers = int(hidden), int(layers)
    plan = pipelined["plan"]
    pp, tp, cp, vpp = plan["pp"], plan["tp"], plan["cp"], plan["vpp"]
    stages = pp * vpp
    m = plan["num_microbatches"]
    b, s = pipelined["micro_batch_size"], pipelined["seq_length"]
    local = s // cp // (tp if plan["sequence_parallel"] else 1)
    send_bytes = b * local * hidden * 4

    programs = pipelined["programs"]
    if len(programs) != pp:
        fail("%d programs for pp %d" % (len(programs), pp))
    world = pipelined["world_size"]
    for r, p in enumerate(programs):
        if p.get("pp_rank") != r:
            fail("program %d is pp rank %s" % (r, p.get("pp_rank")))
        if len(p["ranks"]) != world // pp:
            fail("pp rank %d runs on %d ranks, not %d" %
                 (r, len(p["ranks"]), world // pp))
        sends = m * sum((s < stages - 1) + (s > 0)
                        for s in range(r, stages, pp))
        got = p["pipeline_send"]
        if got != {"count": sends, "bytes": sends * send_bytes}:
            fail("pp rank %d sends %s between stages, the schedule %s" %
                 (r, got, {"count": sends, "bytes": sends * send_bytes}))
        if p["peak_bytes"] <= 0 or p["parameters_bytes"] <= 0:
            fail("pp rank %d: no memory counted" % r)

    (unpipelined,) = flat["programs"]
    for phase in ("forward", "backward"):
        if phase == "backward" and plan["sequence_parallel"]:
            continue
        for kind in KINDS:
            total = {"count": 0, "bytes": 0}
            for p in programs:
                for key in total:
                    total[key] += p[phase][kind][key]
            want = dict(unpipelined[phase][kind])
            if phase == "backward" and kind == "p2p_send" and cp > 1:
                # k and v of the local block (GPT: h features over tp).
                want["count"] += m * layers * 2
                want["bytes"] += m * layers * 2 * b * (s // cp) * \
                    (hidden // tp) * 4
            if total != want:
                fail("%s %s: the stages send %s per step, the unpipelined "
                     "program %s" % (phase, kind, total, want))
    print("report matches: pp %d x vpp %d, tp %d, cp %d, %d micro-batches" %
          (pp, vpp, tp, cp, m))


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: report_check.py PIPELINED.json UNPIPELINED.json "
                 "HIDDEN LAYERS")
    main(*sys.argv[1:])
