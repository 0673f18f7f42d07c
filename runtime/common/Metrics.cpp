//===- Metrics.cpp - loomrt_metrics ------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The accumulators of the values a compiled step reports besides its loss
// (loomrt.h): one small buffer of backend memory per process, allocated at
// the first request and kept, so that asking for it costs nothing per step.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"

#include "runtime/abi/Common.h.inc"

using namespace loomrt;

float *common::loomrt_metrics() {
  static float *metrics = [] {
    constexpr int64_t bytes = LOOMRT_NUM_METRICS * sizeof(float);
    auto *p = static_cast<float *>(backend::loomrt_alloc(bytes));
    backend::loomrt_zero(p, bytes);
    return p;
  }();
  return metrics;
}
