#!/usr/bin/env bash
# The main job on the default example: sets up the machine, builds the tools,
# imports examples/gpt-tiny.json (or the config given as $1) into tfm IR,
# verifies it and prints a summary of the IR.
set -euo pipefail
cd "$(dirname "$0")/.."

config="${1:-examples/gpt-tiny.json}"
scripts/setup.sh
scripts/build.sh loom-import loom-opt
mkdir -p out
build/bin/loom-import "$config" --micro-batch-size 2 --seq-length 64 \
  -o out/model.mlir --summary
build/bin/loom-opt out/model.mlir --verify-roundtrip -o /dev/null
echo "IR written to out/model.mlir (verified, round-trips)"
