//===- RankProgram.h - What the tools need of the rank program --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loom-run and loom-train read the manifest and the rank flags with the rank
// program's own code (Manifest.cpp, Options.cpp), so each has one
// definition; this interface has no exceptions: the tools are built like
// LLVM, with -fno-exceptions.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_RANKPROGRAM_H
#define LOOM_RUNTIME_RANK_RANKPROGRAM_H

#include <cstdint>
#include <string>
#include <vector>

namespace loom::rank {

/// The rank program's --help text, `tool` naming it in the usage line.
std::string rankUsage(const std::string &tool);

/// "" when `args` are valid rank-program flags, else the error message
/// ("unknown flag '--stpes' (see --help)", "--steps must be at least 0, got
/// -1", ...).
std::string checkRankFlags(const std::vector<std::string> &args);

/// Whether the rank flag `name` ("--steps") takes a value; false for flags
/// without one and for names that are not rank flags.
bool rankFlagTakesValue(const std::string &name);

/// Whether `name` ("--steps", "--train-iters") is one of the rank program's
/// flags (their long names; "-h" and "--help" are the tools' own).
bool isRankFlag(const std::string &name);

/// What loom-run needs of a manifest.
struct LaunchFacts {
  int64_t worldSize = 0;
  std::string backend; // "cpu" or "cuda"
};

/// Reads and validates the manifest at `path` as a rank would (the whole
/// schema); "" on success, else the error ("<path>: invalid JSON: ...",
/// "<path>: \"world_size\": missing", ...).
std::string readLaunchFacts(const std::string &path, LaunchFacts &facts);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_RANKPROGRAM_H
