#!/usr/bin/env bash
# The long matrices the default run (and CI) only slices: the whole
# context-parallel matrix (test/e2e/context-parallel-matrix.test, every
# plan of cp x comm type x tp x dp for gpt-tiny and llama-tiny) and the
# whole pipeline matrix (test/e2e/pipeline-matrix.test). Meant to run
# regularly (weekly, or on a machine with more than CI's 2 cores); about
# an hour on 2 cores. Both count only the plans that ran ("N plans ran,
# M rejected as expected"; "equals pp 1" once per plan), so a plan that
# silently stopped running fails their FileCheck.
#
#   scripts/test-matrices.sh [cp|pp]...    (default: both)
#
# Under CI=true (as in .ci/run) a skipped suite is an error, as everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
which=("$@")
[ ${#which[@]} -eq 0 ] && which=(cp pp)
scripts/build.sh
for m in "${which[@]}"; do
  case $m in
    cp|pp) ctest --test-dir build -C "$m" -L "$m" --output-on-failure ;;
    *) echo "test-matrices.sh: unknown matrix $m (cp or pp)" >&2; exit 2 ;;
  esac
done
