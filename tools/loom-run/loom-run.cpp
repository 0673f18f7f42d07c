//===- loom-run.cpp - Launch a compiled Loom program ----------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loom-run starts the ranks of a directory written by loom-compile:
//
//   loom-run out/ --steps 20 --data tokens.bin
//
// Outside an MPI job it runs
//   mpirun -np <world_size> [--allow-run-as-root] --oversubscribe out/launch ARGS
// (the Open MPI flags only when mpirun is Open MPI); inside one (mpirun,
// srun) it checks that the job has world_size ranks and execs out/launch
// directly, so `mpirun -np 4 loom-run out/` and `srun -n 4 loom-run out/`
// work too. ARGS are the flags of the rank executables (docs/MANIFEST.md),
// which do the real work: loom-run defines only its own flags and forwards
// every other argument verbatim, after checking it against the rank
// program's definitions (runtime/rank/Options.cpp). The launcher (its flags,
// the sorting of a command line, the mpirun command) is loom-train's too:
// compiler/Support/Launcher.h.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/Launcher.h"
#include "compiler/Support/ShortHelp.h"
#include "runtime/rank/RankProgram.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

static cl::OptionCategory category("loom-run options");

static cl::opt<std::string> optDir(cl::Positional, cl::Required,
                                   cl::desc("<output directory of loom-compile>"),
                                   cl::cat(category));

// loom-run's own flags, the launcher's. Every other argument is a
// rank-program flag: it is checked against the rank program's own
// definitions (RankProgram.h) and forwarded verbatim, in order, to every
// rank.
static loom::LaunchFlags launchFlags(category);

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-run") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  // The rank program's flags, from their one definition, close the help.
  std::string rankHelp =
      "\nEvery other flag is the rank program's, checked here and passed to "
      "every rank as given:\n\n" +
      loom::rank::rankUsage("rank-NNNNN");
  cl::extrahelp rankHelpText(rankHelp);

  // Split: loom-run's own flags and the directory go to cl, the rest (the
  // rank program's flags and their values) to the ranks.
  std::vector<std::string> args(argv + 1, argv + argc);
  loom::SortedCommandLine sorted = loom::sortCommandLine(args, {&category});
  if (sorted.unknown && !sorted.help)
    return error("unknown flag '" + *sorted.unknown + "' (see --help)");
  if (sorted.positionals.size() > 1)
    return error("unexpected argument '" + sorted.positionals[1] +
                 "' (loom-run takes one directory; see --help)");
  std::vector<const char *> own = {argv[0]};
  for (const std::string &a : sorted.llvmArgs)
    own.push_back(a.c_str());
  loom::ShortHelpArgs parsed(int(own.size()), own.data());
  cl::ParseCommandLineOptions(
      parsed.argc(), parsed.argv(),
      "loom-run: launch the per-rank programs of a loom-compile output "
      "directory with mpirun\n");
  std::string flagError = loom::rank::checkRankFlags(sorted.rankArgs);
  if (!flagError.empty())
    return error(flagError);

  Expected<int> status =
      loom::launchProgram(optDir, sorted.rankArgs, launchFlags);
  if (!status)
    return error(toString(status.takeError()));
  return *status;
}
