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
// loomrt_pipeline_tokens and loomrt_pipeline_loss print what a step
// computed (a checksum of the micro-batch's tokens, its loss), so a test
// can check that each step computed the micro-batch it says: they copy the
// values to the host through loomrt_copy, only when tracing.
//
// loomrt_grads_ready marks the end of a chunk's last backward step: it
// calls the rank program's hook, which starts the data-parallel reduction
// of that chunk's gradients.
//
//===----------------------------------------------------------------------===//

#include "runtime/abi/Common.h.inc"

#include "loomrt/loomrt.h"

#include <mpi.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

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

void loomrt::common::loomrt_pipeline_tokens(int64_t microbatch, int64_t chunk,
                                            const int32_t *tokens, int64_t n) {
  if (!tracing)
    return;
  std::vector<int32_t> host(size_t(n > 0 ? n : 0));
  if (n > 0)
    ::loomrt_copy(host.data(), tokens, n * int64_t(sizeof(int32_t)));
  int64_t sum = 0;
  for (int64_t i = 0; i < n; ++i)
    sum += (i + 1) * int64_t(host[size_t(i)]);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr,
               "loom-trace: rank %d D%" PRId64 ".%" PRId64 " tokens %" PRId64
               "\n",
               rank, microbatch, chunk, sum);
  std::fflush(stderr);
}

void loomrt::common::loomrt_pipeline_loss(int64_t microbatch, int64_t chunk,
                                          loomrt_dtype dtype,
                                          const void *loss) {
  if (!tracing)
    return;
  float value = 0;
  if (dtype == LOOMRT_F32) {
    ::loomrt_copy(&value, loss, sizeof(float));
  } else {
    // bf16 or f16: widened by the backend (on the device), then copied.
    void *wide = ::loomrt_alloc(sizeof(float));
    ::loomrt_cast(dtype, loss, LOOMRT_F32, wide, 1);
    ::loomrt_copy(&value, wide, sizeof(float));
    ::loomrt_free(wide);
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr,
               "loom-trace: rank %d D%" PRId64 ".%" PRId64 " loss %.9e\n",
               rank, microbatch, chunk, double(value));
  std::fflush(stderr);
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
