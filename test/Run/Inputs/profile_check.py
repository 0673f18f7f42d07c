"""Checks loom-run --profile-json output of gpt-tiny trained with tp 2.

usage: profile_check.py PROFILE.jsonl CONFIG.json RANK STEPS [MAX_HOST_SYNCS [MICROBATCHES]]

Every step has the required keys; the calls are the ones the model makes
(the fused linears' calls per layer, one adamw_multi for all parameter
tensors, no per-tensor adamw); the
steps after the first make the same calls and host waits (the program is
the same every step) and allocate nothing; no call is longer than its step;
with MAX_HOST_SYNCS, the steps after the first wait for the device at most
that often.
"""
import json
import sys

path, config_path, rank, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
max_syncs = int(sys.argv[5]) if len(sys.argv) > 5 else None
microbatches = int(sys.argv[6]) if len(sys.argv) > 6 else 1
config = json.load(open(config_path))
layers = config["n_layer"]
rows = [json.loads(line) for line in open(path)]
errors = []
if [r.get("step") for r in rows] != list(range(1, steps + 1)):
    errors.append("steps %s, expected 1..%d" % ([r.get("step") for r in rows], steps))
for r in rows:
    for key in ("step", "rank", "ms", "allocations", "host_syncs", "calls"):
        if key not in r:
            errors.append("step %s: no %s" % (r.get("step"), key))
    if r.get("rank") != rank:
        errors.append("step %s: rank %s, expected %d" % (r["step"], r.get("rank"), rank))
    calls = r.get("calls", {})
    for name, c in calls.items():
        if not name.startswith("loomrt_") or c["count"] < 1 or c["ms"] < 0:
            errors.append("step %s: bad record %s %s" % (r["step"], name, c))
    total = sum(c["ms"] for c in calls.values())
    if total > r["ms"] * 1.01 + 0.05:
        errors.append("step %s: calls take %.3f ms of a %.3f ms step" % (r["step"], total, r["ms"]))
    # GPT-2, fused (loom-compile's fuse stage): q, k and v in one call, fc
    # with its GELU in one; the attention and mlp projections and the
    # output layer alone. The profiler counts the outermost call only (a
    # fused entry's own linear calls are inside it). The optimizer updates
    # all parameter tensors in one call (f32 here: no model copies to cast).
    want = {"loomrt_linear_forward": (2 * layers + 1) * microbatches,
            "loomrt_multi_linear_forward": layers * microbatches,
            "loomrt_linear_gelu_forward": layers * microbatches,
            "loomrt_adamw_multi": 1, "loomrt_adamw": None}
    for name, n in want.items():
        got = calls.get(name, {}).get("count")
        if got != n:
            errors.append("step %s: %s called %s times, expected %s" % (r["step"], name, got, n))
steady = rows[1:]
# The workspaces are allocated once, before the first step (issue: no
# allocation in a step).
for r in steady:
    if r["allocations"] != 0:
        errors.append("step %d allocates %d buffers" % (r["step"], r["allocations"]))
    if max_syncs is not None and r["host_syncs"] > max_syncs:
        errors.append("step %d waits for the device %d times (at most %d)"
                      % (r["step"], r["host_syncs"], max_syncs))
for r in steady[1:]:
    a, b = steady[0], r
    if {k: v["count"] for k, v in a["calls"].items()} != {k: v["count"] for k, v in b["calls"].items()}:
        errors.append("steps %d and %d make different calls" % (a["step"], b["step"]))
    if (a["allocations"], a["host_syncs"]) != (b["allocations"], b["host_syncs"]):
        errors.append("steps %d and %d differ in allocations or host syncs" % (a["step"], b["step"]))
for e in errors:
    print("error:", e)
print("profile: %d steps, %s" % (len(rows), "ok" if not errors else "%d errors" % len(errors)))
sys.exit(1 if errors else 0)
