//===- Launcher.cpp - Starting a compiled program's ranks -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/Launcher.h"

#include "runtime/rank/RankProgram.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Errno.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <thread>
#include <unistd.h>

using namespace llvm;
using namespace loom;

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

LaunchFlags::LaunchFlags(cl::OptionCategory &category)
    : threadsPerRank("threads-per-rank",
                     cl::desc("Kernel threads per rank, the ranks' --threads "
                              "(default: cores / ranks)"),
                     cl::value_desc("n"), cl::cat(category)),
      checkDeviceContract(
          "check-device-contract",
          cl::desc("Run the cpu backend as if its memory were a GPU's: a "
                   "host access to loomrt_alloc memory, or a host buffer "
                   "passed as a tensor, stops the run naming the call and the "
                   "driver step (slower; results are bitwise those of a plain "
                   "run)"),
          cl::cat(category)),
      mpirun("mpirun", cl::desc("mpirun to use (default: the one on PATH)"),
             cl::value_desc("path"), cl::cat(category)),
      mpirunArgs("mpirun-arg",
                 cl::desc("Extra argument for mpirun (repeat)"),
                 cl::value_desc("arg"), cl::cat(category)),
      dryRun("dry-run", cl::desc("Print the command instead of running it"),
             cl::cat(category)) {}

//===----------------------------------------------------------------------===//
// Sorting a command line
//===----------------------------------------------------------------------===//

SortedCommandLine
loom::sortCommandLine(ArrayRef<std::string> args,
                      ArrayRef<const cl::OptionCategory *> categories) {
  SortedCommandLine out;
  const StringMap<cl::Option *> &registered = cl::getRegisteredOptions();
  auto optionOf = [&](StringRef name) -> const cl::Option * {
    auto it = registered.find(name);
    if (it == registered.end())
      return nullptr;
    for (const cl::OptionCategory *c : it->second->Categories)
      if (is_contained(categories, c))
        return it->second;
    return nullptr;
  };
  for (size_t i = 0; i < args.size(); ++i) {
    StringRef a = args[i];
    SortedArg arg;
    arg.words.push_back(a.str());
    if (!a.starts_with("-") || a == "-") {
      out.positionals.push_back(a.str());
      out.llvmArgs.push_back(a.str());
      out.args.push_back(std::move(arg));
      continue;
    }
    bool twoDashes = a.starts_with("--");
    StringRef body = a.drop_front(twoDashes ? 2 : 1);
    auto [name, value] = body.split('=');
    bool hasValue = body.contains('=');
    if (is_contained({"h", "help", "help-list", "help-hidden", "version"},
                     name)) {
      out.help |= name != "version";
      out.llvmArgs.push_back(a.str());
      out.args.push_back(std::move(arg));
      continue;
    }
    arg.option = optionOf(name);
    std::string rankName = ("--" + name).str();
    arg.rank = twoDashes && rank::isRankFlag(rankName);
    if (!arg.option && !arg.rank) {
      if (!out.unknown)
        out.unknown = name.empty() ? a.str() : a.split('=').first.str();
      continue;
    }
    bool takesValue =
        !hasValue &&
        ((arg.option &&
          arg.option->getValueExpectedFlag() == cl::ValueRequired) ||
         (arg.rank && rank::rankFlagTakesValue(rankName)));
    if (takesValue && i + 1 < args.size())
      arg.words.push_back(args[++i]);
    if (arg.option)
      out.llvmArgs.insert(out.llvmArgs.end(), arg.words.begin(),
                          arg.words.end());
    if (arg.rank)
      out.rankArgs.insert(out.rankArgs.end(), arg.words.begin(),
                          arg.words.end());
    out.args.push_back(std::move(arg));
  }
  return out;
}

//===----------------------------------------------------------------------===//
// Launching
//===----------------------------------------------------------------------===//

/// mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's hydra PMI_SIZE, srun
/// SLURM_STEP_NUM_TASKS; a plain sbatch script has none.
std::optional<std::pair<std::string, int64_t>> loom::enclosingJob() {
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

Expected<std::string> loom::findMpirun(const LaunchFlags &flags) {
  std::string mpirun = flags.mpirun;
  if (mpirun.empty()) {
    ErrorOr<std::string> found = sys::findProgramByName("mpirun");
    if (!found)
      return fail("mpirun not found on PATH; install an MPI (Debian: "
                  "openmpi-bin) or pass --mpirun <path>");
    return *found;
  }
  if (!sys::fs::can_execute(mpirun))
    return fail("--mpirun '" + mpirun + "' is not an executable");
  return mpirun;
}

Expected<int> loom::launchProgram(StringRef dir,
                                  std::vector<std::string> rankArgs,
                                  const LaunchFlags &flags) {
  if (!sys::fs::is_directory(dir))
    return fail("'" + dir + "' is not a directory (expected the output "
                "directory of loom-compile)");
  SmallString<256> manifest(dir), launch(dir);
  sys::path::append(manifest, "manifest.json");
  sys::path::append(launch, "launch");
  if (!sys::fs::exists(manifest))
    return fail("no manifest.json in '" + dir +
                "' (is it the output directory of loom-compile?)");
  // The ranks' own reader: a manifest they would refuse fails here.
  rank::LaunchFacts facts;
  std::string manifestError =
      rank::readLaunchFacts(manifest.str().str(), facts);
  if (!manifestError.empty())
    return fail(manifestError);
  const int64_t world = facts.worldSize;
  if (flags.checkDeviceContract && facts.backend != "cpu")
    return fail("--check-device-contract checks the cpu backend, but '" + dir +
                "' was compiled for " + facts.backend +
                " (loom-compile --backend cpu)");
  if (!sys::fs::can_execute(launch))
    return fail("'" + launch + "' is missing or not executable");
  SmallString<256> launchAbs(launch);
  sys::fs::make_absolute(launchAbs);

  if (flags.threadsPerRank.getNumOccurrences()) {
    rankArgs.push_back("--threads");
    rankArgs.push_back(flags.threadsPerRank);
  }
  // Ranks share the machine's cores unless told otherwise (children inherit
  // the environment on the local node).
  bool threadsGiven = any_of(rankArgs, [](StringRef a) {
    return a == "--threads" || a.starts_with("--threads=");
  });
  if (!threadsGiven && !sys::Process::GetEnv("OMP_NUM_THREADS")) {
    unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    rankArgs.push_back("--threads");
    rankArgs.push_back(std::to_string(std::max<int64_t>(1, cores / world)));
  }

  if (flags.checkDeviceContract) {
    // Read by the cpu backend at its first allocation; ranks on this node
    // inherit it, Open MPI's -x carries it to other nodes.
    ::setenv("LOOMRT_CHECK_DEVICE_CONTRACT", "1", 1);
  }

  std::vector<std::string> command;
  // A session directory base of this job's own (Open MPI), removed after.
  SmallString<128> sessionBase;
  if (auto job = enclosingJob()) {
    if (job->second != world)
      return fail("this job has " + Twine(job->second) + " rank" +
                  (job->second == 1 ? "" : "s") + " (" + job->first +
                  ") but '" + manifest + "' is for " + Twine(world));
    command.push_back(launchAbs.str().str());
  } else {
    Expected<std::string> mpirun = findMpirun(flags);
    if (!mpirun)
      return mpirun.takeError();
    command = {*mpirun, "-np", std::to_string(world)};
    if (isOpenMpi(*mpirun)) {
      // Open MPI refuses to run as root (containers) and to place more
      // ranks than cores without these.
      if (::geteuid() == 0)
        command.push_back("--allow-run-as-root");
      command.push_back("--oversubscribe");
      // Open MPI puts a session directory per host and user under the
      // temporary directory; two launches that start at once race to create
      // it (and each removes it when it ends), and one fails with "File
      // exists". A job of its own gets a base of its own.
      if (!flags.dryRun && !std::getenv("OMPI_MCA_orte_tmpdir_base") &&
          !sys::fs::createUniqueDirectory("loom-run-ompi", sessionBase)) {
        command.push_back("--mca");
        command.push_back("orte_tmpdir_base");
        command.push_back(sessionBase.str().str());
      }
      if (flags.checkDeviceContract) {
        command.push_back("-x");
        command.push_back("LOOMRT_CHECK_DEVICE_CONTRACT");
      }
    }
    for (const std::string &a : flags.mpirunArgs)
      command.push_back(a);
    command.push_back(launchAbs.str().str());
  }
  command.insert(command.end(), rankArgs.begin(), rankArgs.end());

  if (flags.dryRun) {
    for (size_t i = 0; i < command.size(); ++i)
      outs() << (i ? " " : "") << command[i];
    outs() << "\n";
    return 0;
  }
  outs().flush();
  errs().flush();

  if (command.size() == 1 + rankArgs.size()) {
    // Inside a job: become the rank's launcher.
    std::vector<char *> argv;
    for (std::string &a : command)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    return fail("cannot run '" + command[0] + "': " + sys::StrError());
  }
  SmallVector<StringRef> refs(command.begin(), command.end());
  std::string message;
  int rc = sys::ExecuteAndWait(refs[0], refs, std::nullopt, {}, 0, 0, &message);
  if (!sessionBase.empty())
    sys::fs::remove_directories(sessionBase);
  if (rc < 0)
    return fail("cannot run '" + command[0] + "'" +
                (message.empty() ? "" : ": " + message));
  return rc;
}
