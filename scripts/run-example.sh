#!/usr/bin/env bash
# The main job on the default example: sets up the machine, builds Loom,
# imports examples/gpt-tiny.json (or the config given as $1), compiles the
# training step for 4 ranks (tensor parallel 2 x data parallel 2) and trains
# 50 steps under mpirun on synthetic data, printing the loss as it falls.
set -euo pipefail
cd "$(dirname "$0")/.."

config="${1:-examples/gpt-tiny.json}"
scripts/setup.sh
scripts/build.sh loom-import loom-compile loom-run
mkdir -p out
build/bin/loom-import "$config" --micro-batch-size 4 --seq-length 64 \
  -o out/model.mlir --summary
build/bin/loom-compile out/model.mlir --tp 2 --dp 2 --train -o out/example --report
build/bin/loom-run out/example --train --steps 50
