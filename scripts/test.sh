#!/usr/bin/env bash
# Sets up the machine (Debian 12), builds Loom and runs every test with ctest:
# lit suites (dialect, importer, tools, passes), GoogleTest unit tests and the
# MPI runtime tests. Extra arguments go to ctest, e.g. `-L Runtime`.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
