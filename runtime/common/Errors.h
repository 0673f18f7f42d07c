//===- Errors.h - Error reporting shared by the backends --------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/: both backends report misuse and MPI failures the same
// way, "loomrt: rank R: <fn>: <reason>", and end the whole job.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_ERRORS_H
#define LOOM_RUNTIME_COMMON_ERRORS_H

#include "loomrt/loomrt.h"

#include <cstdint>

namespace loomrt {

/// Prints "loomrt: rank R: <fn>: <formatted>" and terminates the job
/// (MPI_Abort once MPI is up, so every rank stops, not only this one).
[[noreturn]] void fatal(const char *fn, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define LOOMRT_CHECK(cond, ...)                                                \
  do {                                                                         \
    if (!(cond))                                                               \
      ::loomrt::fatal(__func__, __VA_ARGS__);                                  \
  } while (0)

/// Validates a dtype argument and returns its size in bytes.
int64_t checkedDtypeSize(const char *fn, loomrt_dtype dtype);

/// The size in bytes of a dtype the ABI front has checked.
inline int64_t dtypeSize(loomrt_dtype dtype) {
  return dtype == LOOMRT_F32 ? 4 : 2;
}

/// Prints "loomrt: rank R: <message>" and terminates the job as fatal()
/// does (loomrt_abort).
[[noreturn]] void abortJob(const char *message);

/// Aborts with MPI's error string when an MPI call did not succeed.
void checkMpi(int rc, const char *call);

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_ERRORS_H
