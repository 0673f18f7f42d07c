//===- Trace.cpp - Pipeline schedule tracing --------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loomrt_pipeline_step marks each forward and backward step of a compiled
// pipelined step; with tracing on (loom-run --trace-pipeline) the rank
// prints it, so tests see the order the compiled program really runs. The
// same for both backends: on cuda the line is printed when the step's work
// is issued, which is the order that matters for p2p matching.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <mpi.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>

namespace {
std::atomic<bool> tracing{false};
} // namespace

extern "C" void loomrt_set_trace(int32_t on) { tracing = on != 0; }

extern "C" void loomrt_pipeline_step(int32_t forward, int64_t microbatch,
                                     int64_t chunk) {
  if (!tracing)
    return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One write per line, so that lines of ranks sharing stderr stay whole.
  std::fprintf(stderr, "loom-trace: rank %d %c%" PRId64 ".%" PRId64 "\n", rank,
               forward ? 'F' : 'B', microbatch, chunk);
  std::fflush(stderr);
}
