#!/usr/bin/env bash
# Runtime calls a transformer layer costs per training step, with and
# without the fuse stage: each model is imported with 2 and 4 layers,
# compiled with `loom-compile --train --print-ir-after=lower`, and the
# loomrt_* calls of @train_step are counted; the difference over 2 layers
# is one layer's. The run-time counterpart is `loom-run --profile`.
#
#   bench/Calls/calls_per_layer.sh [MODEL.json ...]   (default: gpt-tiny, llama3-tiny)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/bin
models=("$@")
[ ${#models[@]} -gt 0 ] || models=("$root/examples/gpt-tiny.json" "$root/examples/llama3-tiny.json")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

calls() { # mlir, extra flags -> loomrt calls in @train_step
  "$bin/loom-compile" "$1" --train --quiet --print-ir-after=lower -o "$work/out" "${@:2}" \
    | awk '/llvm.func @train_step\(/,/^  }/' | grep -c 'call @loomrt_'
}

printf '%-16s %10s %10s\n' model --no-fuse fused
for json in "${models[@]}"; do
  name=$(basename "$json" .json)
  declare -A n=()
  for layers in 2 4; do
    # GPT-2 configs name the layer count n_layer, the others num_hidden_layers.
    sed -E "s/\"(n_layer|num_hidden_layers)\": *[0-9]+/\"\1\": $layers/" "$json" > "$work/m.json"
    "$bin/loom-import" "$work/m.json" --micro-batch-size 2 --seq-length 32 -o "$work/m.mlir"
    n[unfused$layers]=$(calls "$work/m.mlir" --no-fuse)
    n[fused$layers]=$(calls "$work/m.mlir")
  done
  printf '%-16s %10d %10d\n' "$name" $(((n[unfused4] - n[unfused2]) / 2)) \
    $(((n[fused4] - n[fused2]) / 2))
  unset n
done
