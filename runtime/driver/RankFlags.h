//===- RankFlags.h - The rank program's flags, for loom-run -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What loom-run needs of the rank program's flag definitions (Options.cpp),
// without exceptions in its interface: loom-run is built like LLVM, with
// -fno-exceptions.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_DRIVER_RANKFLAGS_H
#define LOOM_RUNTIME_DRIVER_RANKFLAGS_H

#include <string>
#include <vector>

namespace loom::driver {

/// The rank program's --help text, `tool` naming it in the usage line.
std::string rankUsage(const std::string &tool);

/// "" when `args` are valid rank-program flags, else the error message
/// ("unknown flag '--stpes' (see --help)", "--steps must be at least 0, got
/// -1", ...).
std::string checkRankFlags(const std::vector<std::string> &args);

/// Whether the rank flag `name` ("--steps") takes a value; false for flags
/// without one and for names that are not rank flags.
bool rankFlagTakesValue(const std::string &name);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_RANKFLAGS_H
