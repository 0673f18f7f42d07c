#!/usr/bin/env bash
# bench/Gpu, step 1 (on the build machine): compiles the benchmark models
# for the cuda backend and packs them with their libraries and the PyTorch
# peer into a folder to carry to a GPU machine:
#   bench/Gpu/prepare.sh [OUTDIR]      (default gpu-bundle, git-ignored)
# Step 2, on the GPU machine: OUTDIR/bench/run.sh (see bench/README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/gpu-bundle}
bin=$root/build/bin
[ -x "$bin/loom-compile" ] || { echo "build Loom first (scripts/build.sh)" >&2; exit 1; }
[ -f "$root/build/lib/libloomrt_cuda.so" ] ||
  { echo "this build has no cuda backend (see 'loomrt: cuda backend' in the CMake output)" >&2; exit 1; }
rm -rf "$out"
"$root/scripts/gpu-bundle.sh" "$out" "$root/build/lib/libloomrt_cuda.so" > /dev/null
# Transports a single-GPU run never loads, and their large dependencies.
rm -f "$out"/lib/openmpi/mca_*{ucx,ofi,psm,verbs,openib,usnic,portals}* 2>/dev/null || true
mkdir -p "$out/bench"
cp "$root/bench/Gpu/run.sh" "$root/bench/Gpu/torch_train.py" "$out/bench/"
# name  config  micro-batch  sequence
while read -r name config batch seq; do
  cp "$root/examples/$config.json" "$out/bench/$name.json"
  "$bin/loom-import" "$root/examples/$config.json" --dtype bf16 \
    --micro-batch-size "$batch" --seq-length "$seq" -o "$out/bench/$name.mlir"
  "$bin/loom-compile" "$out/bench/$name.mlir" --train --backend cuda \
    -o "$out/bench/$name" --quiet
  rm "$out/bench/$name.mlir"
  echo "$name $batch $seq" >> "$out/bench/models.txt"
done <<'MODELS'
gpt2-124m gpt2-124m 8 1024
tinyllama-1.1b tinyllama-1.1b 4 2048
MODELS
du -sh "$out"
