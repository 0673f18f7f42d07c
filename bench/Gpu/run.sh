#!/usr/bin/env bash
# bench/Gpu, step 2 (on the GPU machine, from the folder prepare.sh made):
#   bench/run.sh [STEPS]
# For each model: Loom's single-rank bf16 training step (cuda backend,
# f32 main weights, AdamW, clipping) and the same model in PyTorch (bf16
# autocast, f32 weights, fused AdamW, clipping), eager and torch.compile,
# all in this run. Prints tokens/s, MFU against the H100's 989 TFLOP/s dense
# bf16 peak, and Loom's ratio to each.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
steps=${1:-10}
python=$(command -v python3)
printf '%-16s %-14s %10s %12s %7s %9s\n' model impl step_ms tokens/s MFU peak_GiB
while read -r name batch seq; do
  m=$here/$name
  "$m/rank-00000" --manifest "$m/manifest.json" --train --steps $((steps + 3)) \
    --lr 3e-4 --clip-grad 1.0 --metrics-jsonl "$m/metrics.jsonl" > "$m/log" 2>&1 ||
    { echo "$name: loom failed:"; tail -5 "$m/log"; continue; }
  fpt=$("$python" "$here/torch_train.py" --config "$here/$name.json" --batch "$batch" --seq "$seq" --steps "$steps" --flops-only)
  loom=$("$python" - "$m/metrics.jsonl" "$batch" "$seq" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]  # after 3 warm-up steps
ms = statistics.median(r["step_time_ms"] for r in rows)
print(ms, int(sys.argv[2]) * int(sys.argv[3]) / (ms / 1e3))
PY
)
  read -r loom_ms loom_tps <<< "$loom"
  printf '%-16s %-14s %10.1f %12.0f %6.1f%% %9s\n' "$name" loom "$loom_ms" "$loom_tps" \
    "$("$python" -c "print($loom_tps * $fpt / 989e12 * 100)")" "-"
  for mode in eager compile; do
    flag=(); [ $mode = compile ] && flag=(--compile)
    r=$("$python" "$here/torch_train.py" --config "$here/$name.json" --batch "$batch" --seq "$seq" --steps "$steps" "${flag[@]}" 2>"$m/torch-$mode.err" | tail -1)
    [ -n "$r" ] || { echo "$name: torch $mode failed:"; tail -3 "$m/torch-$mode.err"; continue; }
    "$python" - "$r" "$name" "$loom_tps" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); loom = float(sys.argv[3])
mfu = r["tokens_per_s"] * r["flops_per_token"] / 989e12 * 100
print("%-16s %-14s %10.1f %12.0f %6.1f%% %9.1f   loom/this %.2f" % (sys.argv[2], r["impl"], r["step_ms"], r["tokens_per_s"], mfu, r["peak_gib"], loom / r["tokens_per_s"]))
PY
  done
done < "$here/models.txt"
