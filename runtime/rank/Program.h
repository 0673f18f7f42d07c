//===- Program.h - main() of every per-rank executable ----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A per-rank executable is the compiler's object file (exporting the entry
// points the manifest names) linked with libloomrt_main (this rank program) and a
// runtime backend. The rank program owns everything around the compiled code:
// flags, MPI, communicators, parameter shards, data, the step loop, logging
// and checkpoints (docs/MANIFEST.md).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_PROGRAM_H
#define LOOM_RUNTIME_RANK_PROGRAM_H

#include "runtime/rank/Options.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::rank {

/// Where the optimizer state of checkpoint `path` lives: "x.safetensors"
/// -> "x.optim.safetensors", any other name gets ".optim.safetensors"
/// appended.
std::string optimizerStatePath(const std::string &path);

/// The whole program; returns the process exit code.
int rankMain(int argc, char **argv);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_PROGRAM_H
