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
// loomrt_grads_ready marks the end of a chunk's last backward step: it
// calls the rank program's hook, which starts the data-parallel reduction
// of that chunk's gradients.
//
//===----------------------------------------------------------------------===//

#include "runtime/abi/Common.h.inc"

#include <mpi.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>

namespace {
std::atomic<bool> tracing{false};
loomrt_grads_ready_fn gradsReadyHook = nullptr;
void *gradsReadyContext = nullptr;

void trace(const char *what, int64_t a, int64_t b, bool two) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // One write per line, so that lines of ranks sharing stderr stay whole.
  if (two)
    std::fprintf(stderr, "loom-trace: rank %d %s%" PRId64 ".%" PRId64 "\n",
                 rank, what, a, b);
  else
    std::fprintf(stderr, "loom-trace: rank %d %s%" PRId64 "\n", rank, what, a);
  std::fflush(stderr);
}
} // namespace

void loomrt::common::loomrt_set_trace(int32_t on) { tracing = on != 0; }

void loomrt::common::loomrt_pipeline_step(int32_t forward, int64_t microbatch,
                                          int64_t chunk) {
  if (tracing)
    trace(forward ? "F" : "B", microbatch, chunk, true);
}

void loomrt::common::loomrt_set_grads_ready_hook(loomrt_grads_ready_fn hook,
                                                 void *context) {
  gradsReadyHook = hook;
  gradsReadyContext = context;
}

void loomrt::common::loomrt_grads_ready(int64_t chunk) {
  if (tracing)
    trace("G", chunk, 0, false);
  if (gradsReadyHook)
    gradsReadyHook(gradsReadyContext, chunk);
}
