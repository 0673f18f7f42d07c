#!/bin/sh
#===- check-symbols.sh - Both backends export the same ABI ---------------===#
#
# usage: check-symbols.sh libloomrt_cpu.so libloomrt_cuda.so
# The functions each library exports must be the same set: the cuda backend
# implements exactly the loomrt.h ABI, no more, no less.
#
#===----------------------------------------------------------------------===#
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for lib in "$1" "$2"; do
  nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}' | sort \
    > "$dir/$(basename "$lib").syms"
done
cpu="$dir/$(basename "$1").syms"
cuda="$dir/$(basename "$2").syms"
if ! diff "$cpu" "$cuda"; then
  echo "FAIL: exported functions differ (< cpu, > cuda)"
  exit 1
fi
echo "$(wc -l < "$cpu") exported functions, identical in both backends"
