#!/usr/bin/env bash
# Configures (once) and builds Loom into build/ with Ninja and ccache.
#   scripts/build.sh [--sanitize] [TARGET...]
# --sanitize builds into build-asan/ instead, with AddressSanitizer and
# UBSan (LOOM_SANITIZE; UB is fatal). Other arguments are build targets
# (default: everything).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
cmake_args=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  dir=build-asan
  # No CUDA: nvcc objects are not instrumented, and the GPU backend's tests
  # need a GPU anyway.
  cmake_args=(-DLOOM_SANITIZE=ON -DLOOMRT_ENABLE_CUDA=OFF)
fi

if [ ! -f $dir/build.ninja ]; then
  cmake -G Ninja -S . -B $dir -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
fi
cmake --build $dir -- "$@"
