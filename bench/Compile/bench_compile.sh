#!/usr/bin/env bash
# Compile-time benchmark: wall time and peak memory of loom-import and of
# loom-compile (forward + train step, every pass, LLVM codegen and link) for
# the example models, at sequence length 2048 (1024 for GPT-2) in bf16.
#   bench/Compile/bench_compile.sh [build-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${1:-$root/build}/bin"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

printf '%-12s %14s %14s %16s %16s\n' model "import (s)" "import (MiB)" "compile (s)" "compile (MiB)"
for model in gpt-tiny llama-tiny gpt2-124m llama3-8b gpt3-175b; do
  case "$model" in
    gpt-tiny|llama-tiny) seq=64 ;;
    gpt2-124m) seq=1024 ;;
    *) seq=2048 ;;
  esac
  /usr/bin/time -f "%e %M" -o "$work/import.t" "$bin/loom-import" \
    "$root/examples/$model.json" --seq-length "$seq" --dtype bf16 \
    -o "$work/$model.mlir"
  /usr/bin/time -f "%e %M" -o "$work/compile.t" "$bin/loom-compile" \
    "$work/$model.mlir" --train --quiet -o "$work/$model.out"
  read -r it im < "$work/import.t"
  read -r ct cm < "$work/compile.t"
  printf '%-12s %14s %14d %16s %16d\n' "$model" "$it" $((im / 1024)) "$ct" $((cm / 1024))
done

# Pipelined: GPT-3 175B at tp 8 x pp 16 x dp 8 (1,024 ranks), 64 and 512
# micro-batches per step. Compile time grows with the distinct stage
# programs, not with the ranks; the steady phase is a loop, so not with
# the micro-batches either (the ratio: 1.0 is flat).
for m in 64 512; do
  /usr/bin/time -f "%e %M" -o "$work/pp$m.t" "$bin/loom-compile" \
    "$work/gpt3-175b.mlir" --train --tp 8 --pp 16 --dp 8 --num-microbatches $m \
    --quiet -o "$work/gpt3-pp$m.out"
  read -r ct cm < "$work/pp$m.t"
  printf '%-12s %14s %14s %16s %16d\n' "gpt3-175b tp8 x pp16 x dp8, $m micro-batches" "" "" "$ct" $((cm / 1024))
done
read -r t64 m64 < "$work/pp64.t"
read -r t512 m512 < "$work/pp512.t"
awk -v t1="$t64" -v t2="$t512" -v m1="$m64" -v m2="$m512" \
  'BEGIN { printf "512 / 64 micro-batches: time %.2f, memory %.2f\n", t2 / t1, m2 / m1 }'
