//===- Driver.h - main() of every per-rank executable -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A per-rank executable is the compiler's object file (exporting the entry
// points the manifest names) linked with libloomrt_main (this driver) and a
// runtime backend. The driver owns everything around the compiled code:
// flags, MPI, communicators, parameter shards, data, the step loop, logging
// and checkpoints (docs/MANIFEST.md).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_DRIVER_DRIVER_H
#define LOOM_RUNTIME_DRIVER_DRIVER_H

#include "runtime/driver/Data.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::driver {

struct Options {
  std::string manifest; // empty: manifest.json next to the executable
  int64_t steps = 1;
  std::string data;     // empty: synthetic
  std::optional<RawFormat> dataFormat;
  uint64_t seed = 1234;
  std::string metricsJsonl;
  std::string load, save;
  int32_t threads = 0; // 0: the runtime's default
  bool help = false;
};

/// Parses the flags after argv[0]. Accepts "--flag value" and
/// "--flag=value". Throws Error for unknown flags and bad values.
Options parseOptions(const std::vector<std::string> &args);

/// The usage text printed by --help.
std::string usage(const std::string &tool);

/// The whole program; returns the process exit code.
int driverMain(int argc, char **argv);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_DRIVER_H
