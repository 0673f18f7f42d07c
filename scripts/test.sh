#!/usr/bin/env bash
# Sets up the machine (Debian 12), builds Loom and runs every test with ctest:
# lit suites (dialect, importer, tools, passes), GoogleTest unit tests and the
# MPI runtime tests. Extra arguments go to ctest, e.g. `-L Runtime`.
#
#   scripts/test.sh --sanitize [CTEST ARGS...]
# builds build-asan/ with AddressSanitizer and UBSan (scripts/build.sh
# --sanitize) and runs the same tests there: any ASan report or undefined
# behavior fails the test that hit it. Leak detection is off: Open MPI's
# libraries leak by design at MPI_Finalize, and every rank program and MPI
# unit test links them. The LLVM/MLIR libraries from apt are not
# instrumented, and that is why user poisoning is off
# (allow_user_poisoning=0): LLVM's headers see ASan in our code
# (LLVM_ADDRESS_SANITIZER_BUILD) and our inlined BumpPtrAllocator poisons the
# rest of each new slab, but libMLIR's own copy of Allocate never unpoisons
# what it hands out from that slab, so every tool that links libMLIR
# reported use-after-poison on valid attribute storage. Only those in-slab
# checks are lost: redzones and freed memory are still caught.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=build
build_args=()
if [ "${1:-}" = "--sanitize" ]; then
  shift
  dir=build-asan
  build_args=(--sanitize)
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:strict_string_checks=1:allow_user_poisoning=0
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
fi

scripts/setup.sh
scripts/build.sh "${build_args[@]}"
ctest --test-dir $dir --output-on-failure -j"$(nproc)" "$@"
