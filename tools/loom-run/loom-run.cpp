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
// program's definitions (runtime/rank/Options.cpp).
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ShortHelp.h"
#include "runtime/rank/RankProgram.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <thread>
#include <unistd.h>

using namespace llvm;

static cl::OptionCategory category("loom-run options");

static cl::opt<std::string> optDir(cl::Positional, cl::Required,
                                   cl::desc("<output directory of loom-compile>"),
                                   cl::cat(category));

// loom-run's own flags. Every other argument is a rank-program flag: it is
// checked against the rank program's own definitions (RankProgram.h) and
// forwarded verbatim, in order, to every rank.
static cl::opt<std::string>
    optThreads("threads-per-rank",
               cl::desc("Kernel threads per rank, the ranks' --threads "
                        "(default: cores / ranks)"),
               cl::value_desc("n"), cl::cat(category));
static cl::opt<bool> optCheckDeviceContract(
    "check-device-contract",
    cl::desc("Run the cpu backend as if its memory were a GPU's: a host "
             "access to loomrt_alloc memory, or a host buffer passed as a "
             "tensor, stops the run naming the call and the driver step "
             "(slower; results are bitwise those of a plain run)"),
    cl::cat(category));

// Launcher flags.
static cl::opt<std::string> optMpirun("mpirun",
                                      cl::desc("mpirun to use (default: the "
                                               "one on PATH)"),
                                      cl::value_desc("path"),
                                      cl::cat(category));
static cl::list<std::string>
    optMpirunArgs("mpirun-arg", cl::desc("Extra argument for mpirun (repeat)"),
                  cl::value_desc("arg"), cl::cat(category));
static cl::opt<bool>
    optDryRun("dry-run", cl::desc("Print the command instead of running it"),
              cl::cat(category));

/// The rank-program flags of this command line, in order.
static std::vector<std::string> rankFlags;

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-run") << message << "\n";
  return 1;
}

/// The number of ranks of the MPI or Slurm job this process belongs to, if
/// it was started by one (mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's hydra
/// PMI_SIZE, srun SLURM_STEP_NUM_TASKS; a plain sbatch script has none).
static std::optional<std::pair<std::string, int64_t>> enclosingJob() {
  for (const char *var :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"}) {
    if (std::optional<std::string> v = sys::Process::GetEnv(var)) {
      int64_t n;
      if (!StringRef(*v).getAsInteger(10, n))
        return std::make_pair(std::string(var), n);
    }
  }
  return std::nullopt;
}

/// Whether `mpirun` is Open MPI's (which knows --oversubscribe and
/// --allow-run-as-root; MPICH's does not).
static bool isOpenMpi(StringRef mpirun) {
  SmallString<128> out;
  if (sys::fs::createTemporaryFile("loom-run-mpirun", "txt", out))
    return false;
  std::optional<StringRef> redirects[] = {std::nullopt, StringRef(out),
                                          StringRef(out)};
  StringRef args[] = {mpirun, "--version"};
  int rc = sys::ExecuteAndWait(mpirun, args, std::nullopt, redirects, 30);
  auto text = MemoryBuffer::getFile(out);
  sys::fs::remove(out);
  return rc == 0 && text && (*text)->getBuffer().contains("Open MPI");
}

/// Whether `arg` ("--mpirun", "--mpirun=x", "-h") is one of loom-run's own
/// flags; `takesValue` tells whether it expects the next argument.
static bool isOwnFlag(StringRef arg, bool &takesValue) {
  StringRef name = arg.split('=').first;
  takesValue = !arg.contains('=') &&
               llvm::is_contained({"--mpirun", "--mpirun-arg",
                                   "--threads-per-rank", "-mpirun",
                                   "-mpirun-arg", "-threads-per-rank"},
                                  name);
  return llvm::is_contained(
      {"--mpirun", "--mpirun-arg", "--threads-per-rank", "--dry-run",
       "--check-device-contract", "--help", "--help-list", "--help-hidden",
       "--version", "-h", "-mpirun", "-mpirun-arg", "-threads-per-rank",
       "-dry-run", "-check-device-contract", "-help"},
      name);
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
  std::vector<const char *> own = {argv[0]};
  bool haveDir = false;
  for (int i = 1; i < argc; ++i) {
    StringRef arg = argv[i];
    bool takesValue = false;
    if (isOwnFlag(arg, takesValue)) {
      own.push_back(argv[i]);
      if (takesValue && i + 1 < argc)
        own.push_back(argv[++i]);
    } else if (!arg.starts_with("-") && !haveDir) {
      own.push_back(argv[i]);
      haveDir = true;
    } else {
      rankFlags.push_back(argv[i]);
      if (!arg.contains('=') &&
          loom::rank::rankFlagTakesValue(arg.str()) && i + 1 < argc)
        rankFlags.push_back(argv[++i]);
    }
  }
  loom::ShortHelpArgs parsed(int(own.size()), own.data());
  cl::ParseCommandLineOptions(
      parsed.argc(), parsed.argv(),
      "loom-run: launch the per-rank programs of a loom-compile output "
      "directory with mpirun\n");
  std::string flagError = loom::rank::checkRankFlags(rankFlags);
  if (!flagError.empty())
    return error(flagError);

  StringRef dir = optDir;
  if (!sys::fs::is_directory(dir))
    return error("'" + dir + "' is not a directory (expected the output "
                 "directory of loom-compile)");
  SmallString<256> manifest(dir), launch(dir);
  sys::path::append(manifest, "manifest.json");
  sys::path::append(launch, "launch");
  if (!sys::fs::exists(manifest))
    return error("no manifest.json in '" + dir +
                 "' (is it the output directory of loom-compile?)");
  // The ranks' own reader: a manifest they would refuse fails here.
  loom::rank::LaunchFacts facts;
  std::string manifestError =
      loom::rank::readLaunchFacts(manifest.str().str(), facts);
  if (!manifestError.empty())
    return error(manifestError);
  const int64_t world = facts.worldSize;
  if (optCheckDeviceContract && facts.backend != "cpu")
    return error("--check-device-contract checks the cpu backend, but '" +
                 dir + "' was compiled for " + facts.backend +
                 " (loom-compile --backend cpu)");
  if (!sys::fs::can_execute(launch))
    return error("'" + launch + "' is missing or not executable");
  SmallString<256> launchAbs(launch);
  sys::fs::make_absolute(launchAbs);

  // Arguments of every rank executable: the rank flags as given.
  std::vector<std::string> rankArgs = rankFlags;
  if (optThreads.getNumOccurrences()) {
    rankArgs.push_back("--threads");
    rankArgs.push_back(optThreads);
  }
  // Ranks share the machine's cores unless told otherwise (children inherit
  // the environment on the local node).
  bool threadsGiven = llvm::any_of(rankArgs, [](StringRef a) {
    return a == "--threads" || a.starts_with("--threads=");
  });
  if (!threadsGiven && !sys::Process::GetEnv("OMP_NUM_THREADS")) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rankArgs.push_back("--threads");
    rankArgs.push_back(std::to_string(std::max<int64_t>(1, cores / world)));
  }

  if (optCheckDeviceContract) {
    // Read by the cpu backend at its first allocation; ranks on this node
    // inherit it, Open MPI's -x carries it to other nodes.
    ::setenv("LOOMRT_CHECK_DEVICE_CONTRACT", "1", 1);
  }

  std::vector<std::string> command;

  /// A session directory base of this job's own (Open MPI).

  SmallString<128> sessionBase;
  if (auto job = enclosingJob()) {
    if (job->second != world)
      return error("this job has " + Twine(job->second) + " rank" +
                   (job->second == 1 ? "" : "s") + " (" + job->first +
                   ") but '" + manifest + "' is for " + Twine(world));
    command.push_back(launchAbs.str().str());
  } else {
    std::string mpirun = optMpirun;
    if (mpirun.empty()) {
      ErrorOr<std::string> found = sys::findProgramByName("mpirun");
      if (!found)
        return error("mpirun not found on PATH; install an MPI (Debian: "
                     "openmpi-bin) or pass --mpirun <path>");
      mpirun = *found;
    } else if (!sys::fs::can_execute(mpirun)) {
      return error("--mpirun '" + mpirun + "' is not an executable");
    }
    command = {mpirun, "-np", std::to_string(world)};
    if (isOpenMpi(mpirun)) {
      // Open MPI refuses to run as root (containers) and to place more
      // ranks than cores without these.
      if (::geteuid() == 0)
        command.push_back("--allow-run-as-root");
      command.push_back("--oversubscribe");
      // Open MPI puts a session directory per host and user under the
      // temporary directory; two launches that start at once race to create
      // it (and each removes it when it ends), and one fails with "File
      // exists". A job of its own gets a base of its own, removed after.
      if (!optDryRun && !std::getenv("OMPI_MCA_orte_tmpdir_base") &&
          !sys::fs::createUniqueDirectory("loom-run-ompi", sessionBase)) {
        command.push_back("--mca");
        command.push_back("orte_tmpdir_base");
        command.push_back(sessionBase.str().str());
      }
      if (optCheckDeviceContract) {
        command.push_back("-x");
        command.push_back("LOOMRT_CHECK_DEVICE_CONTRACT");
      }
    }
    for (const std::string &a : optMpirunArgs)
      command.push_back(a);
    command.push_back(launchAbs.str().str());
  }
  command.insert(command.end(), rankArgs.begin(), rankArgs.end());

  if (optDryRun) {
    for (size_t i = 0; i < command.size(); ++i)
      outs() << (i ? " " : "") << command[i];
    outs() << "\n";
    return 0;
  }
  outs().flush();

  if (command.size() == 1 + rankArgs.size()) {
    // Inside a job: become the rank's launcher.
    std::vector<char *> args;
    for (std::string &a : command)
      args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    return error("cannot run '" + command[0] + "': " + sys::StrError());
  }
  SmallVector<StringRef> refs(command.begin(), command.end());
  std::string message;
  int rc = sys::ExecuteAndWait(refs[0], refs, std::nullopt, {}, 0, 0, &message);
  if (!sessionBase.empty())
    sys::fs::remove_directories(sessionBase);
  if (rc < 0)
    return error("cannot run '" + command[0] + "'" +
                 (message.empty() ? "" : ": " + message));
  return rc;
}
