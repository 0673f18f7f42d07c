#!/usr/bin/env bash
# The main job on the default example: sets up the machine, builds Loom,
# imports examples/gpt-tiny.json (or the config given as $1), compiles it for
# 2 data-parallel ranks and runs 3 steps under mpirun, printing the loss.
set -euo pipefail
cd "$(dirname "$0")/.."

config="${1:-examples/gpt-tiny.json}"
scripts/setup.sh
scripts/build.sh loom-import loom-compile loom-run
mkdir -p out
build/bin/loom-import "$config" --micro-batch-size 2 --seq-length 64 \
  -o out/model.mlir --summary
build/bin/loom-compile out/model.mlir --dp 2 -o out/example --report
build/bin/loom-run out/example --steps 3
