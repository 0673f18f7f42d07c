#!/bin/bash
# usage: checked-equals-plain.sh LOOM-RUN WORK OUTDIR LOOM-RUN-ARGS...
# Runs `LOOM-RUN OUTDIR ARGS --metrics-jsonl @/metrics.jsonl` twice: plainly
# in WORK/plain and with --check-device-contract in WORK/checked; an `@` in
# ARGS stands for that directory (--save @/model.safetensors). Passes when
# both succeed, every file they wrote is bitwise the same, and the metrics
# agree bitwise once the timings are removed; and when the same checked run
# with a planted host access to backend memory (the rank program's test
# hook LOOM_TEST_PLANT_HOST_ACCESS) fails, naming it: the check was on.
set -eu
loomrun=$1 work=$2 outdir=$3; shift 3
for mode in plain checked; do
  dir=$work/$mode
  rm -rf "$dir" && mkdir -p "$dir"
  args=()
  for a in "$@"; do args+=("${a//@/$dir}"); done
  flag=()
  [ $mode = checked ] && flag=(--check-device-contract)
  "$loomrun" "$outdir" "${flag[@]}" "${args[@]}" --metrics-jsonl "$dir/metrics.jsonl" \
    > "$dir/log" 2>&1 || { cat "$dir/log"; echo "FAIL: $mode run failed" >&2; exit 1; }
  sed -E -i 's/"step_time_ms": [0-9.]+, "tokens_per_second": [0-9.]+, //' "$dir/metrics.jsonl"
done
n=0
for f in $(cd "$work/plain" && find . -type f ! -name log | sort); do
  cmp "$work/plain/$f" "$work/checked/$f" || { echo "FAIL: $f differs" >&2; exit 1; }
  n=$((n + 1))
done
[ "$(cd "$work/plain" && find . -type f | wc -l)" = "$(cd "$work/checked" && find . -type f | wc -l)" ] ||
  { echo "FAIL: the runs wrote different files" >&2; exit 1; }
dir=$work/planted
rm -rf "$dir" && mkdir -p "$dir"
args=()
for a in "$@"; do args+=("${a//@/$dir}"); done
if LOOM_TEST_PLANT_HOST_ACCESS=1 "$loomrun" "$outdir" --check-device-contract "${args[@]}" > "$dir/log" 2>&1; then
  cat "$dir/log"; echo "FAIL: a checked run with a planted host access passed: the check is off" >&2; exit 1
fi
grep -q "device-contract violation: the host touched device memory" "$dir/log" ||
  { cat "$dir/log"; echo "FAIL: the planted run failed, but not on the device contract" >&2; exit 1; }
echo "checked run equals plain run: $n files bitwise, $(wc -l < "$work/plain/metrics.jsonl") steps; a planted host access fails it"
