//===- Error.h - Errors of the rank program ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Every user-facing failure of the rank program (bad flags, manifest, data or
// checkpoint files) is thrown as loom::rank::Error with a message in LLVM
// style (lowercase, no trailing period, names the bad value). The main loop
// catches it, agrees with the other ranks that the job failed, and prints
// "<binary>: error: <message>" once.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_ERROR_H
#define LOOM_RUNTIME_RANK_ERROR_H

#include <stdexcept>
#include <string>

namespace loom::rank {

class Error : public std::runtime_error {
public:
  explicit Error(const std::string &message) : std::runtime_error(message) {}
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_ERROR_H
