//===- Errors.cpp - Error reporting shared by the backends ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Errors.h"

#include <mpi.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

using namespace loomrt;

static int currentWorldRank() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (!up || down)
    return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// MPI_Abort tells every rank at once; a lone abort() would rely on mpirun
// noticing (and a rank blocked in a collective would never notice itself).
[[noreturn]] static void terminateJob() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down)
    MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

void loomrt::fatal(const char *fn, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "loomrt: rank %d: %s: %s\n", currentWorldRank(), fn,
               msg);
  std::fflush(stderr);
  terminateJob();
}

void loomrt::checkMpi(int rc, const char *call) {
  if (rc == MPI_SUCCESS)
    return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  fatal(call, "failed: %s", text);
}

int64_t loomrt::checkedDtypeSize(const char *fn, loomrt_dtype dtype) {
  switch (dtype) {
  case LOOMRT_F32:
    return 4;
  case LOOMRT_BF16:
  case LOOMRT_F16:
    return 2;
  default:
    fatal(fn, "unknown dtype %d", int(dtype));
  }
}

void loomrt::abortJob(const char *message) {
  std::fprintf(stderr, "loomrt: rank %d: %s\n", currentWorldRank(), message);
  std::fflush(stderr);
  terminateJob();
}
