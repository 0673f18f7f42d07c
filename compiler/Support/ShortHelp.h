//===- ShortHelp.h - A `-h` that does not swallow other flags ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// LLVM's own `-h` (an alias of --help) is a grouping option, so every unknown
// flag that starts with h (`--hx`, a misspelt `--hierarchical-...`) parsed as
// `-h` plus more, printed the help and exited 0: a script believed it worked.
// LLVM lets a tool replace that default option. The tools register a plain
// `-h` instead and pass their arguments through ShortHelpArgs, which spells
// `-h` as `--help` (help printed while parsing, exit 0, before missing
// positional arguments are reported); an unknown h-flag is then an error
// like any other.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_COMPILER_SUPPORT_SHORTHELP_H
#define LOOM_COMPILER_SUPPORT_SHORTHELP_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"

#include <vector>

namespace loom {

/// The arguments to parse: argv with `-h` and `--h` spelled `--help`. Also
/// registers the tool's `-h` (once), which shadows LLVM's grouping alias.
class ShortHelpArgs {
public:
  template <typename CharT> ShortHelpArgs(int argc, CharT **argv) {
    static llvm::cl::opt<bool> shortHelp(
        "h", llvm::cl::desc("Alias for --help"), llvm::cl::ValueDisallowed,
        llvm::cl::Hidden);
    (void)shortHelp;
    static char help[] = "--help";
    for (int i = 0; i < argc; ++i) {
      llvm::StringRef a(argv[i]);
      args.push_back(i > 0 && (a == "-h" || a == "--h")
                         ? help
                         : const_cast<char *>(argv[i]));
    }
    args.push_back(nullptr);
  }
  int argc() const { return int(args.size()) - 1; }
  char **argv() { return args.data(); }

private:
  std::vector<char *> args;
};

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_SHORTHELP_H
