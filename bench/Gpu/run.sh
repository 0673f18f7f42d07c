#!/usr/bin/env bash
# bench/Gpu, step 2 (on the GPU machine, from the folder prepare.sh made):
#   bench/run.sh [STEPS]
# For each model: Loom's single-rank bf16 training step (cuda backend,
# f32 main weights, AdamW, clipping), once with attention on cuDNN (the
# default) and once on Loom's own kernels (LOOMRT_CUDA_ATTENTION=loom), and
# the same model in PyTorch (bf16 autocast, f32 weights, fused AdamW,
# clipping), eager and torch.compile, all in this run: no dropout on either,
# the vocabulary padded to a multiple of 128 on both, weight decay 0.1 of
# matrices on both (torch_train.py). Prints tokens/s, MFU against the H100's
# 989 TFLOP/s dense bf16 peak, and the ratio of Loom (on cuDNN) to each;
# then a short profiled run of Loom (loom-run --profile: the entry points by
# time, allocations and host syncs per step), its JSON lines in
# <model>/profile.jsonl.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
steps=${1:-10}
python=$(command -v python3)
printf '%-16s %-14s %10s %12s %7s %9s\n' model impl step_ms tokens/s MFU peak_GiB
while read -r name batch seq; do
  m=$here/$name
  fpt=$("$python" "$here/torch_train.py" --config "$here/$name.json" --batch "$batch" --seq "$seq" --steps "$steps" --flops-only)
  loom_tps=""
  # loom: attention on cuDNN where it covers the call; loom-own-attn: on
  # Loom's kernels alone.
  for attn in auto loom; do
    impl=loom; [ $attn = loom ] && impl=loom-own-attn
    LOOMRT_CUDA_ATTENTION=$attn "$m/rank-00000" --manifest "$m/manifest.json" \
      --train --steps $((steps + 3)) --lr 3e-4 --clip-grad 1.0 --weight-decay 0.1 \
      --metrics-jsonl "$m/metrics-$attn.jsonl" > "$m/log-$attn" 2>&1 ||
      { echo "$name: $impl failed:"; tail -5 "$m/log-$attn"; continue; }
    grep 'Loom.s kernels for' "$m/log-$attn" | head -3
    r=$("$python" - "$m/metrics-$attn.jsonl" "$batch" "$seq" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][3:]  # after 3 warm-up steps
ms = statistics.median(r["step_time_ms"] for r in rows)
print(ms, int(sys.argv[2]) * int(sys.argv[3]) / (ms / 1e3))
PY
)
    read -r ms tps <<< "$r"
    [ $attn = auto ] && loom_tps=$tps
    printf '%-16s %-14s %10.1f %12.0f %6.1f%% %9s\n' "$name" "$impl" "$ms" "$tps" \
      "$("$python" -c "print($tps * $fpt / 989e12 * 100)")" "-"
  done
  [ -n "$loom_tps" ] || continue
  # Profiled apart, so the events it records do not touch the timed steps.
  "$m/rank-00000" --manifest "$m/manifest.json" --train --steps 4 --lr 3e-4 \
    --clip-grad 1.0 --weight-decay 0.1 --profile --profile-json "$m/profile.jsonl" \
    > "$m/log-profile" 2>&1 && sed -n '/^loom profile/,$p' "$m/log-profile" | head -25 ||
    { echo "$name: profiled run failed:"; tail -5 "$m/log-profile"; }
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
