//===- Launcher.h - Starting a compiled program's ranks ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What loom-run and loom-train share to run a loom-compile output
// directory:
//  - the launcher's flags (--mpirun, --mpirun-arg, --threads-per-rank,
//    --check-device-contract, --dry-run), registered once;
//  - sortCommandLine: a command line split between the tool's own LLVM
//    options (by category) and the rank program's flags, whose one
//    definition is runtime/rank/Options.cpp (RankProgram.h): a flag that is
//    neither is named before anything runs;
//  - launchProgram: `mpirun -np <world size from the manifest> ... launch
//    RANK-FLAGS` (Open MPI's container flags when it is Open MPI), or, inside
//    an MPI or Slurm job of the right size, exec of the launcher.
//
// LLVM's Support library and the rank program's flag and manifest readers
// only (no MLIR).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_LAUNCHER_H
#define LOOM_COMPILER_SUPPORT_LAUNCHER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace loom {

/// The launcher's flags.
class LaunchFlags {
public:
  explicit LaunchFlags(llvm::cl::OptionCategory &category);

  llvm::cl::opt<std::string> threadsPerRank;
  llvm::cl::opt<bool> checkDeviceContract;
  llvm::cl::opt<std::string> mpirun;
  llvm::cl::list<std::string> mpirunArgs;
  llvm::cl::opt<bool> dryRun;
};

/// One argument of a sorted command line: a flag with its value (one word,
/// "--tp=2", or two, "--tp" "2"), or a positional argument.
struct SortedArg {
  std::vector<std::string> words;
  /// The LLVM option it sets (its aliases' target's category), if any.
  const llvm::cl::Option *option = nullptr;
  /// Whether it is (also) a flag of the rank program.
  bool rank = false;
};

struct SortedCommandLine {
  std::vector<SortedArg> args;
  /// What LLVM's parser gets: argv[0], then every positional and LLVM
  /// option, in order.
  std::vector<std::string> llvmArgs;
  /// What the ranks get, in order.
  std::vector<std::string> rankArgs;
  std::vector<std::string> positionals;
  /// -h, --help, --help-list, --help-hidden or --version was given.
  bool help = false;
  /// The first flag that is neither an option of `categories` nor a rank
  /// flag, as given ("--stpes", "-o").
  std::optional<std::string> unknown;
};

/// Sorts `args` (argv[1..]): a flag registered in one of `categories` goes
/// to llvmArgs, a rank-program flag (given with two dashes) to rankArgs,
/// one that is both (loom-train's --seed: dropout at import, initialization
/// at run time) to both; a flag's value goes with it. Help flags go to
/// llvmArgs. Runs of list flags must have been joined first
/// (joinListFlags).
SortedCommandLine
sortCommandLine(llvm::ArrayRef<std::string> args,
                llvm::ArrayRef<const llvm::cl::OptionCategory *> categories);

/// The mpirun to launch with: --mpirun, else the one on PATH; or the error.
llvm::Expected<std::string> findMpirun(const LaunchFlags &flags);

/// The number of ranks of the MPI or Slurm job this process runs in, and
/// the variable that says so, if it was started by one.
std::optional<std::pair<std::string, int64_t>> enclosingJob();

/// Runs the ranks of the loom-compile output directory `dir` with
/// `rankArgs`, as `flags` say, and returns mpirun's exit status (inside a
/// job it execs the launcher and returns only on failure). Errors name the
/// problem ("no manifest.json in 'out' (...)", "mpirun not found on PATH;
/// ...").
llvm::Expected<int> launchProgram(llvm::StringRef dir,
                                  std::vector<std::string> rankArgs,
                                  const LaunchFlags &flags);

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_LAUNCHER_H
