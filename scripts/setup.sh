#!/usr/bin/env bash
# Installs everything Loom needs on a fresh Debian 12 machine from Debian's apt.
# Safe to run more than once: apt-get skips what is already installed.
# clang-19, libfuzzer-19-dev and libomp-19-dev (OpenMP for clang) are for
# scripts/fuzz.sh only.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential cmake ninja-build ccache git python3 \
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools \
  libzstd-dev zlib1g-dev libedit-dev libxml2-dev libcurl4-openssl-dev \
  libgtest-dev libgmock-dev libbenchmark-dev \
  openmpi-bin libopenmpi-dev libopenblas-dev \
  nlohmann-json3-dev libcli11-dev python3-torch python3-numpy \
  clang-19 libfuzzer-19-dev libomp-19-dev
