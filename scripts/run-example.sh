#!/usr/bin/env bash
# The main job on the default example: sets up the machine, builds Loom, and
# with one loom-train command imports examples/gpt-tiny.json (or the config
# given as $1), compiles the training step for 4 ranks (tensor parallel 2 x
# data parallel 2, into the cache out/cache) and trains 50 steps under
# mpirun on synthetic data, printing the loss as it falls. Run again, it
# reuses the compiled program.
set -euo pipefail
cd "$(dirname "$0")/.."

config="${1:-examples/gpt-tiny.json}"
scripts/setup.sh
scripts/build.sh loom-train
build/bin/loom-train "$config" --micro-batch-size 4 --seq-length 64 \
  --tensor-model-parallel-size 2 --dp 2 --train-iters 50 \
  --cache-dir out/cache --report
