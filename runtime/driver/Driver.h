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

#include "runtime/driver/Options.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::driver {

/// Where the optimizer state of checkpoint `path` lives: "x.safetensors"
/// -> "x.optim.safetensors", any other name gets ".optim.safetensors"
/// appended.
std::string optimizerStatePath(const std::string &path);

/// The whole program; returns the process exit code.
int driverMain(int argc, char **argv);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_DRIVER_H
