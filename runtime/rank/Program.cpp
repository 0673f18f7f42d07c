//===- Program.cpp - The rank program: setup and main() -------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The program, on every rank:
//   1. loomrt_init (MPI), flags, manifest, world size check;
//   2. one communicator per group kind the compiled code or the rank program uses;
//   3. this rank's parameter shards: initialized from the seed or cut out of
//      a --load checkpoint; with --train also the f32 training state (main
//      grads, AdamW moments, main params for bf16/f16) and, from
//      CKPT.optim.safetensors, where a previous run stopped;
//   4. --steps steps; a step runs the "forward" entry (or, with --train,
//      "train_step" followed by the optimizer) once per micro-batch,
//      averages the loss over micro-batches and data-parallel ranks, and
//      the rank with logs_loss prints a Megatron-style line;
//   5. --save: rank 0 gathers the shards and writes one safetensors file
//      (plus the optimizer state with --train); --save-sharded: every rank
//      writes its own file, rank 0 an index (ShardedCheckpoint.h).
//
// A training step (Megatron's train_step with a DDP grad buffer and the
// mixed-precision optimizer):
//   for each micro-batch: train_step(grad_scale = loss_scale / nmb, or
//     with --calculate-per-token-loss loss_scale x dp x its share of the
//     step's loss tokens), then main_grad (f32) += grad;
//   all-reduce main_grad over dp (the experts' over expert:dp: one bucket
//     per group, GradBuckets.h), / dp; unscale by 1 / loss_scale;
//   f16: all ranks agree on inf/nan, the scaler updates, overflow skips;
//   global grad norm (every element once), clip, AdamW with the schedule's
//   lr on the f32 main params, cast back into the model's dtype.
// With --use-distributed-optimizer (Megatron-Core's DistributedOptimizer,
// DistOptimizer.h) each all-reduce becomes a reduce-scatter, everything
// after it works on this rank's slice of each bucket (1/dp of the dense
// one, 1/edp of the experts'), and the updated parameters are all-gathered
// over each bucket's group.
//
// Failures before and between steps are collective: every rank reports its
// status, the lowest failing rank prints "<binary>: error: <message>", and
// all ranks exit with status 1. Nothing hangs on a rank that failed alone.
//
// This file holds the setup (1-3), entry binding and main(); the class
// (Run.h) has its training in RunTraining.cpp, the step loop (4) in
// RunSteps.cpp and the checkpoints (5) in RunCheckpoints.cpp.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Run.h"

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/CheckpointPair.h"
#include "runtime/rank/DeviceIO.h"
#include "runtime/rank/DistOptimizer.h"
#include "runtime/rank/Manifest.h"
#include "runtime/rank/Optimizer.h"
#include "runtime/rank/ParamInit.h"
#include "runtime/rank/ShardedCheckpoint.h"
#include "runtime/rank/StageSharing.h"

#include "loomrt/loomrt.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unistd.h>

namespace loom::rank {

//===----------------------------------------------------------------------===//
// Checkpoint names
//===----------------------------------------------------------------------===//

std::string optimizerStatePath(const std::string &path) {
  const std::string ext = ".safetensors";
  if (path.size() > ext.size() &&
      path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size()) + ".optim" + ext;
  return path + ".optim" + ext;
}

//===----------------------------------------------------------------------===//
// The run
//===----------------------------------------------------------------------===//

namespace {

std::string executableDir(const char *argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  std::string path = n > 0 ? std::string(buf, size_t(n)) : std::string(argv0);
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

std::string baseName(const char *argv0) {
  std::string s = argv0 ? argv0 : "loom-rank";
  size_t slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

} // namespace

Run::Run(int argc, char **argv)
    : tool(baseName(argv[0])), exeDir(executableDir(argv[0])),
      rank(loomrt_world_rank()), worldSize(loomrt_world_size()) {
  for (int i = 1; i < argc; ++i)
    args.push_back(argv[i]);
  dev.scalar = DeviceBuffer(2 * sizeof(float));
}

Run::~Run() {
  for (auto &[name, buf] : buffers)
    loomrt_free(buf);
  for (GradRun &r : gradRuns)
    loomrt_free(r.base);
  for (float *buf : {mainGrads, expAvg, expAvgSq, mainParams, gradShard})
    loomrt_free(buf);
}

void Run::collectively(const std::function<void()> &fn) {
  std::string error;
  try {
    fn();
  } catch (const Error &e) {
    error = e.what();
  } catch (const std::bad_alloc &) {
    error = "out of memory";
  } catch (const std::exception &e) {
    // A bug rather than bad input, but it must not leave the others hanging.
    error = std::string("internal error: ") + e.what();
  }
  // MAX over (worldSize - rank) of the failing ranks names the lowest one;
  // small integers are exact in f32.
  float flag = error.empty() ? 0.0f : float(worldSize - rank);
  if (worldSize > 1)
    flag = allReduceScalar(loomrt_comm_world(), LOOMRT_MAX, flag);
  if (flag == 0.0f)
    return;
  if (worldSize - int32_t(flag) == rank) {
    std::fprintf(stderr, "%s: error: %s\n", tool.c_str(), error.c_str());
    std::fflush(stderr);
  }
  throw JobFailed{};
}

void Run::setUp() {
  collectively([&] {
    opts = parseOptions(args);
    if (opts.help)
      return;
    loomrt_set_timeout(opts.distributedTimeoutMinutes * 60);
    loomrt_set_trace(opts.tracePipeline ? 1 : 0);
    manifestPath =
        opts.manifest.empty() ? exeDir + "/manifest.json" : opts.manifest;
    m = readManifest(manifestPath);
    if (m.worldSize != worldSize)
      throw Error("manifest is for " + std::to_string(m.worldSize) +
                  " rank" + (m.worldSize == 1 ? "" : "s") +
                  " but this job has " + std::to_string(worldSize));
    me = &m.ranks[rank];
    std::tie(dpSize, dpRank) = m.dataParallel(rank);
    gradSize = m.gradientParallel(rank).first;
    samplesPerStep = m.microBatchSize * m.numMicrobatches * dpSize;
    // The loss is averaged over each data-parallel group: its members must
    // all produce one or all not.
    const char *entry = opts.train ? "train_step" : "forward";
    if (opts.train)
      for (const RankInfo &r : m.ranks)
        if (!r.entries.count("train_step"))
          throw Error("--train needs a \"train_step\" entry, but rank " +
                      std::to_string(r.rank) + " of " + manifestPath +
                      " has none (compile with loom-compile --train)");
    if (auto g = m.groupOf("dp", rank))
      for (int32_t peer : *g->first)
        if (m.ranks[peer].entries.at(entry).hasArg(ArgKind::Loss) !=
            me->entries.at(entry).hasArg(ArgKind::Loss))
          throw Error("ranks " + std::to_string(rank) + " and " +
                      std::to_string(peer) +
                      " are in one data-parallel group but only one of "
                      "them computes the loss");
  });
}

void Run::createCommunicators() {
  // Every rank creates the same kinds in the same (sorted) order:
  // loomrt_comm_create is collective over the world.
  // The decision uses manifest-wide facts only, never this rank's view.
  std::set<std::string> kinds;
  if (m.groups.count("dp") && m.groups.at("dp")[0].size() > 1)
    kinds.insert("dp");
  if (m.groups.count(m.gradientGroup) &&
      m.groups.at(m.gradientGroup)[0].size() > 1)
    kinds.insert(m.gradientGroup);
  // Expert parameters' gradients are summed over their own group.
  if (opts.train)
    for (const ParamSpec &p : m.params)
      if (p.gradientGroup && m.groups.count(*p.gradientGroup) &&
          m.groups.at(*p.gradientGroup)[0].size() > 1)
        kinds.insert(*p.gradientGroup);
  // --calculate-per-token-loss counts each micro-batch's tokens over cp.
  if (opts.calculatePerTokenLoss && m.groups.count("cp") &&
      m.groups.at("cp")[0].size() > 1)
    kinds.insert("cp");
  // Pipeline stages that share the tied embedding sum its gradients.
  if (opts.train && m.groups.count("embedding"))
    for (const auto &g : m.groups.at("embedding"))
      if (g.size() > 1)
        kinds.insert("embedding");
  for (const RankInfo &r : m.ranks)
    for (const auto &[name, entry] : r.entries)
      for (const EntryArg &a : entry.args)
        if (a.kind == ArgKind::Comm)
          kinds.insert(a.name);
  for (const std::string &kind : kinds) {
    const auto &lists = m.groups.at(kind);
    std::vector<int32_t> sizes, ranks;
    for (const auto &g : lists) {
      sizes.push_back(int32_t(g.size()));
      ranks.insert(ranks.end(), g.begin(), g.end());
    }
    comms[kind] =
        loomrt_comm_create(int32_t(lists.size()), sizes.data(), ranks.data());
  }
}

void Run::allocateParameters() {
  for (const ParamSpec &p : m.params)
    if (const Shard *s = p.shardOf(rank))
      buffers[p.name] =
          loomrt_alloc(numElements(s->box.shape) * dtypeBytes(p.dtype));
  if (!opts.load.empty()) {
    if (opts.train)
      collectively([&] {
        if (rank != 0)
          return;
        if (auto note =
                settleCheckpointPair(opts.load, optimizerStatePath(opts.load)))
          std::printf("%s\n", note->c_str());
        std::fflush(stdout);
      });
    collectively(
        [&] { loadCheckpoint(opts.load, m, rank, buffers, opts.seed); });
    return;
  }
  if (!opts.loadSharded.empty()) {
    collectively([&] { loadShardedParams(); });
    return;
  }
  for (const ParamSpec &p : m.params)
    if (const Shard *s = p.shardOf(rank))
      initializeBox(p, s->box, opts.seed, buffers[p.name]);
}

BoundEntry Run::bind(const Entry &entry) {
  BoundEntry b;
  // The object exports the symbol; the executable is linked with
  // --export-dynamic so that it is in the dynamic symbol table.
  dlerror();
  void *sym = dlsym(RTLD_DEFAULT, entry.symbol.c_str());
  if (!sym)
    throw Error("entry point '" + entry.symbol + "' is not exported by " +
                tool + " (was it linked with -rdynamic?)");
  b.fn = reinterpret_cast<EntryFn>(sym);
  b.pipelined = entry.pipelined();
  // An input or loss: every micro-batch's slot (stacked) or the first.
  auto slot = [&](const SlotBuffer &bufs, const EntryArg &a) {
    if (a.stacked != b.pipelined || (a.stacked && bufs.size() < 2 &&
                                     m.numMicrobatches > 1))
      throw Error("entry point '" + entry.symbol + "' takes " +
                  (a.stacked ? "every micro-batch" : "one micro-batch") +
                  " per call, but this rank's entries are not all "
                  "pipelined alike");
    return bufs.at(0);
  };
  for (const EntryArg &a : entry.args) {
    switch (a.kind) {
    case ArgKind::Tokens:
      b.args.push_back(slot(dev.tokens, a));
      break;
    case ArgKind::Labels:
      b.args.push_back(slot(dev.labels, a));
      break;
    case ArgKind::LossMask:
      b.args.push_back(slot(dev.lossMask, a));
      break;
    case ArgKind::Param:
      b.args.push_back(buffers.at(a.name));
      break;
    case ArgKind::Loss:
      b.args.push_back(slot(dev.loss, a));
      b.producesLoss = true;
      break;
    case ArgKind::Comm:
      // The entry receives a pointer to the handle (null when this rank is
      // in no group of that kind).
      b.args.push_back(&comms.at(a.name));
      break;
    case ArgKind::GradScale:
      b.args.push_back(slot(dev.gradScale, a));
      break;
    case ArgKind::Grad: {
      auto t = std::find_if(trained.begin(), trained.end(), [&](auto &t) {
        return t.spec->name == a.name;
      });
      if (t == trained.end())
        throw Error("entry point '" + entry.symbol + "' returns gradients, "
                    "which only --train provides buffers for");
      b.args.push_back(t->grad);
      break;
    }
    case ArgKind::Other:
      // The manifest parser admits these only in entries not run yet.
      throw Error("entry point '" + entry.symbol + "' takes an argument of "
                  "kind \"" + a.name + "\", which this rank program does not "
                  "provide");
    }
  }
  if (entry.workspaceBytes > 0) {
    // One workspace for every entry of this rank (they never run at once),
    // as large as the largest needs, allocated at the first bind and kept:
    // a step allocates nothing.
    if (!workspace.get()) {
      int64_t bytes = 0;
      for (const auto &[name, e] : me->entries)
        bytes = std::max(bytes, e.workspaceBytes);
      workspace = DeviceBuffer(bytes);
    }
    b.args.push_back(workspace.get());
  }
  return b;
}

int Run::main() {
  setUp();
  if (opts.help) {
    if (rank == 0)
      std::fputs(rankUsage(tool).c_str(), stdout);
    return 0;
  }
  if (opts.threads > 0)
    loomrt_set_num_threads(opts.threads);
  // A --save or --dump-grads that cannot succeed fails before the steps,
  // not after them.
  for (auto [what, out] : {std::pair{"checkpoint", &opts.save},
                            {"gradient file", &opts.dumpGrads}})
    if (!out->empty())
      collectively([&] {
        if (rank != 0)
          return;
        std::string dir = out->substr(0, out->rfind('/') + 1);
        if (dir.empty())
          dir = ".";
        if (::access(dir.c_str(), W_OK) != 0)
          throw Error(std::string("cannot write ") + what + " " + *out +
                      ": directory " + dir + " is missing or not writable");
      });
  if (!opts.saveSharded.empty())
    collectively([&] {
      if (rank != 0)
        return;
      std::string dir = std::filesystem::path(opts.saveSharded)
                            .parent_path()
                            .string();
      if (dir.empty())
        dir = ".";
      if (::access(dir.c_str(), W_OK) != 0)
        throw Error("cannot write sharded checkpoint " + opts.saveSharded +
                    ": directory " + dir + " is missing or not writable");
    });
  createCommunicators();
  allocateParameters();
  if (opts.train)
    setUpTraining();
  runSteps();
  saveCheckpoints();
  return 0;
}

int rankMain(int argc, char **argv) {
  loomrt_init(&argc, &argv);
  int status;
  try {
    status = Run(argc, argv).main();
  } catch (const JobFailed &) {
    status = 1;
  }
  loomrt_finalize();
  return status;
}

} // namespace loom::rank
