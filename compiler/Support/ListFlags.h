//===- ListFlags.h - Megatron's space-separated list flags -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron-LM's list flags take their values space-separated (argparse's
// nargs="+"): `--cp-comm-type p2p a2a`. LLVM's command line takes one value
// per flag, comma-separated lists with cl::CommaSeparated. Before parsing,
// joinListFlags rewrites the space-separated form into the comma-separated
// one: the words after such a flag that are values of it (a predicate says
// which, so that a positional argument after the list stays positional) are
// joined with commas.
//
//   --cp-comm-type p2p a2a model.mlir  ->  --cp-comm-type=p2p,a2a model.mlir
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_LISTFLAGS_H
#define LOOM_COMPILER_SUPPORT_LISTFLAGS_H

#include <functional>
#include <string>
#include <vector>

namespace loom {

struct ListFlag {
  /// The flag's name without dashes ("cp-comm-type").
  std::string name;
  /// Whether a word is one of its values.
  std::function<bool(const std::string &)> isValue;
};

/// argv with every flag of `flags` and its space-separated values joined
/// into `--name=v1,v2`. The strings live in `storage`; the pointers it
/// returns stay valid while `storage` does.
std::vector<const char *> joinListFlags(int argc, char **argv,
                                        const std::vector<ListFlag> &flags,
                                        std::vector<std::string> &storage);

/// Whether `word` is a (non-negative) decimal integer.
bool isDecimal(const std::string &word);

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_LISTFLAGS_H
