//===- RankProgram.cpp - What loom-run needs of the rank program ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The manifest half of RankProgram.h (the flag half is in Options.cpp, next
// to the definitions).
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/RankProgram.h"

#include "runtime/rank/Manifest.h"

namespace loom::rank {

std::string readLaunchFacts(const std::string &path, LaunchFacts &facts) {
  try {
    Manifest m = readManifest(path);
    facts.worldSize = m.worldSize;
    facts.backend = m.backend;
  } catch (const Error &e) {
    return e.what();
  } catch (const std::bad_alloc &) {
    return path + ": out of memory while reading it";
  }
  return "";
}

} // namespace loom::rank
