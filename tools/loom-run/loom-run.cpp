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
// which do the real work.
//
//===----------------------------------------------------------------------===//

#include "loom/Support/ShortHelp.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
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

// Flags forwarded to every rank executable.
static cl::opt<std::string> optSteps("steps", cl::desc("Steps to run"),
                                     cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optData("data",
            cl::desc("Megatron .bin/.idx dataset (prefix or either file) or "
                     "raw token file (default: synthetic data)"),
            cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string>
    optDataFormat("data-format", cl::desc("Raw token file of int32 or uint16"),
                  cl::value_desc("int32|uint16"), cl::cat(category));
static cl::opt<std::string> optSeed("seed",
                                    cl::desc("Initialization and data seed"),
                                    cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optMetrics("metrics-jsonl", cl::desc("Write one JSON object per step"),
               cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string> optLoad("load",
                                    cl::desc("Start from this safetensors "
                                             "checkpoint"),
                                    cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string> optSave("save",
                                    cl::desc("Write a safetensors checkpoint "
                                             "at the end"),
                                    cl::value_desc("file"), cl::cat(category));
// libLLVM.so already registers a "threads" option.
static cl::opt<std::string>
    optThreads("threads-per-rank",
               cl::desc("Kernel threads per rank, the ranks' --threads "
                        "(default: cores / ranks)"),
               cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string> optTimeout(
    "distributed-timeout-minutes",
    cl::desc("End the job when a collective or p2p waits longer, naming the "
             "ranks that did not arrive (default 10)"),
    cl::value_desc("x"), cl::cat(category));

static cl::opt<std::string>
    optValidData("valid-data",
                 cl::desc("Validation tokens (the forms of --data)"),
                 cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string>
    optEvalInterval("eval-interval",
                    cl::desc("Validate every n iterations and after the last "
                             "(default 1000)"),
                    cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optEvalIters("eval-iters",
                 cl::desc("Global batches per validation (default 100)"),
                 cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optSaveInterval("save-interval",
                    cl::desc("Also write --save / --save-sharded every n "
                             "iterations"),
                    cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string> optCheckWeightHash(
    "check-weight-hash-interval",
    cl::desc("Every n steps, check that all ranks holding the same part of a "
             "parameter hold the same bytes"),
    cl::value_desc("n"), cl::cat(category));

// Training flags, forwarded as given (the ranks validate the values).
static cl::opt<bool> optTrain("train",
                              cl::desc("Run train_step and AdamW (a program "
                                       "compiled with loom-compile --train)"),
                              cl::cat(category));
static cl::opt<std::string> optLr("lr", cl::desc("Peak learning rate"),
                                  cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string> optMinLr("min-lr",
                                     cl::desc("Floor of the cosine decay"),
                                     cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string>
    optWarmup("lr-warmup-steps", cl::desc("Linear learning-rate warmup steps"),
              cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optDecay("lr-decay-steps",
             cl::desc("Step at which the cosine decay reaches --min-lr"),
             cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optWeightDecay("weight-decay",
                   cl::desc("AdamW weight decay (not for biases and 1-D "
                            "parameters)"),
                   cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string> optBeta1("adam-beta1", cl::desc("AdamW beta1"),
                                     cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string> optBeta2("adam-beta2", cl::desc("AdamW beta2"),
                                     cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string> optEps("adam-eps", cl::desc("AdamW epsilon"),
                                   cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string>
    optClip("clip-grad", cl::desc("Global gradient-norm clip (0: off)"),
            cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string>
    optInitialScale("initial-loss-scale",
                    cl::desc("f16 dynamic loss scaler: initial scale"),
                    cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string>
    optMinScale("min-loss-scale", cl::desc("f16 dynamic loss scaler: floor"),
                cl::value_desc("x"), cl::cat(category));
static cl::opt<std::string>
    optScaleWindow("loss-scale-window",
                   cl::desc("f16 dynamic loss scaler: clean steps before "
                            "growing the scale"),
                   cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optHysteresis("hysteresis",
                  cl::desc("f16 dynamic loss scaler: overflows before "
                           "backing off"),
                  cl::value_desc("n"), cl::cat(category));
static cl::opt<std::string>
    optDumpGrads("dump-grads",
                 cl::desc("Write the first step's gradients (safetensors, "
                          "HF names)"),
                 cl::value_desc("file"), cl::cat(category));
static cl::opt<std::string>
    optLoadSharded("load-sharded",
                   cl::desc("Start from a per-rank checkpoint directory "
                            "saved under the same plan"),
                   cl::value_desc("dir"), cl::cat(category));
static cl::opt<std::string>
    optSaveSharded("save-sharded",
                   cl::desc("Write a per-rank checkpoint directory at the "
                            "end"),
                   cl::value_desc("dir"), cl::cat(category));
static cl::opt<bool> optDistOptimizer(
    "use-distributed-optimizer",
    cl::desc("Shard the optimizer state over the data-parallel ranks "
             "(reduce-scatter, AdamW on 1/dp, all-gather)"),
    cl::cat(category));

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

/// What loom-run needs of dir/manifest.json.
struct ManifestFacts {
  int64_t worldSize = 0;
  std::string backend = "cpu"; // absent in manifests before the field
};

/// Reads world_size and backend from dir/manifest.json.
static Expected<ManifestFacts> readManifestFacts(StringRef manifestPath) {
  auto buffer = MemoryBuffer::getFile(manifestPath);
  if (!buffer)
    return createStringError(buffer.getError(),
                             "cannot read " + manifestPath + ": " +
                                 buffer.getError().message());
  Expected<json::Value> value = json::parse((*buffer)->getBuffer());
  if (!value)
    return createStringError(inconvertibleErrorCode(),
                             manifestPath + ": invalid JSON: " +
                                 toString(value.takeError()));
  const json::Object *root = value->getAsObject();
  std::optional<int64_t> world =
      root ? root->getInteger("world_size") : std::nullopt;
  if (!world || *world < 1)
    return createStringError(inconvertibleErrorCode(),
                             manifestPath +
                                 ": missing or invalid \"world_size\"");
  ManifestFacts facts;
  facts.worldSize = *world;
  if (std::optional<StringRef> b = root->getString("backend"))
    facts.backend = b->str();
  return facts;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  loom::ShortHelpArgs parsed(argc, argv);
  cl::ParseCommandLineOptions(
      parsed.argc(), parsed.argv(),
      "loom-run: launch the per-rank programs of a loom-compile output "
      "directory with mpirun\n");

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
  Expected<ManifestFacts> facts = readManifestFacts(manifest);
  if (!facts)
    return error(toString(facts.takeError()));
  const int64_t world = facts->worldSize;
  if (optCheckDeviceContract && facts->backend != "cpu")
    return error("--check-device-contract checks the cpu backend, but '" +
                 dir + "' was compiled for " + facts->backend +
                 " (loom-compile --backend cpu)");
  if (!sys::fs::can_execute(launch))
    return error("'" + launch + "' is missing or not executable");
  SmallString<256> launchAbs(launch);
  sys::fs::make_absolute(launchAbs);

  // Arguments of every rank executable.
  std::vector<std::string> rankArgs;
  auto forward = [&](const char *flag, const cl::opt<std::string> &opt) {
    if (opt.getNumOccurrences()) {
      rankArgs.push_back(flag);
      rankArgs.push_back(opt);
    }
  };
  forward("--steps", optSteps);
  forward("--data", optData);
  forward("--data-format", optDataFormat);
  forward("--seed", optSeed);
  forward("--metrics-jsonl", optMetrics);
  forward("--load", optLoad);
  forward("--save", optSave);
  forward("--load-sharded", optLoadSharded);
  forward("--save-sharded", optSaveSharded);
  forward("--threads", optThreads);
  forward("--distributed-timeout-minutes", optTimeout);
  forward("--check-weight-hash-interval", optCheckWeightHash);
  forward("--save-interval", optSaveInterval);
  forward("--valid-data", optValidData);
  forward("--eval-interval", optEvalInterval);
  forward("--eval-iters", optEvalIters);
  if (optTrain)
    rankArgs.push_back("--train");
  forward("--lr", optLr);
  forward("--min-lr", optMinLr);
  forward("--lr-warmup-steps", optWarmup);
  forward("--lr-decay-steps", optDecay);
  forward("--weight-decay", optWeightDecay);
  forward("--adam-beta1", optBeta1);
  forward("--adam-beta2", optBeta2);
  forward("--adam-eps", optEps);
  forward("--clip-grad", optClip);
  forward("--initial-loss-scale", optInitialScale);
  forward("--min-loss-scale", optMinScale);
  forward("--loss-scale-window", optScaleWindow);
  forward("--hysteresis", optHysteresis);
  forward("--dump-grads", optDumpGrads);
  if (optDistOptimizer)
    rankArgs.push_back("--use-distributed-optimizer");
  // Ranks share the machine's cores unless told otherwise (children inherit
  // the environment on the local node).
  if (!optThreads.getNumOccurrences() &&
      !sys::Process::GetEnv("OMP_NUM_THREADS")) {
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
  if (rc < 0)
    return error("cannot run '" + command[0] + "'" +
                 (message.empty() ? "" : ": " + message));
  return rc;
}
