#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang-19, ASan and UBSan into
# build-fuzz/ and runs each for a given time, printing executions and crashes
# per target. Not part of CI.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#     SECONDS  run time per target (default 60)
#     TARGET   config manifest safetensors megatron-idx tfm-ir (default: all)
#
# Seeds come from test/Fuzz/corpus/<target>/ (never written), tokens from
# fuzz/<target>.dict when there is one; inputs that
# found new coverage go to build-fuzz/fuzz/<target>/corpus/, a crashing input
# to build-fuzz/fuzz/<target>/crash-* (or leak-, timeout-, oom-). A target
# stops at its first crash; reproduce with
#   build-fuzz/bin/loom-fuzz-<target> build-fuzz/fuzz/<target>/crash-...
# LOOM_FUZZ_JOBS sets the build's parallelism (default: ninja's).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
if [ $# -gt 0 ]; then
  seconds=$1
  shift
fi
all=(config manifest safetensors megatron-idx tfm-ir)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")

if [ ! -f build-fuzz/build.ninja ]; then
  # -gline-tables-only: symbolized stack traces at little build cost.
  cmake -G Ninja -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_C_FLAGS=-gline-tables-only -DCMAKE_CXX_FLAGS=-gline-tables-only \
    -DLOOM_ENABLE_FUZZERS=ON -DLOOMRT_ENABLE_CUDA=OFF
fi
cmake --build build-fuzz --target loom-fuzzers -- \
  ${LOOM_FUZZ_JOBS:+-j"$LOOM_FUZZ_JOBS"}

export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer
summary=()
failed=0
for t in "${targets[@]}"; do
  bin=build-fuzz/bin/loom-fuzz-$t
  seeds=test/Fuzz/corpus/$t
  out=build-fuzz/fuzz/$t
  if [ ! -x "$bin" ] || [ ! -d "$seeds" ]; then
    echo "fuzz.sh: unknown target '$t' (expected one of: ${all[*]})" >&2
    exit 2
  fi
  mkdir -p "$out/corpus"
  echo "=== $t: $seconds s"
  log=$out/last-run.log
  # -timeout: one input running this long is a hang; -rss_limit_mb: one
  # that needs this much memory is a crash.
  dict=()
  [ -f fuzz/$t.dict ] && dict=(-dict="fuzz/$t.dict")
  set +e
  "$bin" "$out/corpus" "$seeds" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$out/" \
    "${dict[@]}" >"$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    failed=1
    tail -40 "$log"
  fi
  summary+=("$(printf '%-14s %12s executions  %s  %s' "$t" "${execs:-?}" \
    "$([ "$rc" -eq 0 ] && echo "0 crashes" || echo "CRASH (exit $rc)")" \
    "${artifact:-}")")
done

echo "=== summary ($seconds s per target; logs in build-fuzz/fuzz/<target>/last-run.log)"
printf '%s\n' "${summary[@]}"
exit $failed
