//===- Driver.cpp - main() of every per-rank executable -------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The program, on every rank:
//   1. loomrt_init (MPI), flags, manifest, world size check;
//   2. one communicator per group kind the compiled code or the driver uses;
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
//   all-reduce main_grad over dp, / dp; unscale by 1 / loss_scale;
//   f16: all ranks agree on inf/nan, the scaler updates, overflow skips;
//   global grad norm (every element once), clip, AdamW with the schedule's
//   lr on the f32 main params, cast back into the model's dtype.
// With --use-distributed-optimizer (Megatron-Core's DistributedOptimizer,
// DistOptimizer.h) the all-reduce becomes a reduce-scatter, everything
// after it works on this rank's 1/dp slice of the flat buffer, and the
// updated parameters are all-gathered over dp.
//
// Failures before and between steps are collective: every rank reports its
// status, the lowest failing rank prints "<binary>: error: <message>", and
// all ranks exit with status 1. Nothing hangs on a rank that failed alone.
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/Driver.h"

#include "runtime/driver/Checkpoint.h"
#include "runtime/driver/CheckpointPair.h"
#include "runtime/driver/DeviceIO.h"
#include "runtime/driver/DistOptimizer.h"
#include "runtime/driver/Manifest.h"
#include "runtime/driver/Optimizer.h"
#include "runtime/driver/ParamInit.h"
#include "runtime/driver/ShardedCheckpoint.h"
#include "runtime/driver/StageSharing.h"

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

namespace loom::driver {

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

/// Thrown after a collective failure has been reported: unwinds to main.
struct JobFailed {};

using EntryFn = void (*)(void **);

/// A compiled entry bound to the driver's buffers.
struct BoundEntry {
  EntryFn fn = nullptr;
  std::vector<void *> args;
  bool producesLoss = false;
};

/// One parameter shard this rank trains. The f32 state of all of them lives
/// in flat buffers (main grads, moments, main params), so the data-parallel
/// all-reduce, the inf/nan check and unscaling are one call each.
struct TrainParam {
  size_t index = 0;         // in Manifest::params
  const ParamSpec *spec = nullptr;
  int64_t n = 0;            // elements of the shard
  int64_t offset = 0;       // in the flat main-grad buffer
  void *model = nullptr;    // the shard in the param dtype (entry argument)
  void *grad = nullptr;     // train_step's gradient output, param dtype
  bool decay = false;       // takesWeightDecay
  // Counted in the grad norm: this rank is the first holder of its box or,
  // with the distributed optimizer, that holder is in this rank's
  // data-parallel group, whose slices hold every element exactly once.
  bool countsInNorm = false;
};

/// What one step produced, for the log.
/// Micro-batch losses weighted by their loss tokens: Megatron logs the
/// token-weighted mean over micro-batches and data-parallel ranks.
struct LossTally {
  double weighted = 0.0; // sum of loss x this rank's loss tokens
  double tokens = 0.0;   // this rank's loss tokens (its cp chunk's)
};

struct StepResult {
  LossTally loss; // over this rank's micro-batches
  double lr = 0.0;
  std::optional<double> gradNorm; // none for a skipped update
  bool skipped = false;
};

const char *const kMomentPrefixes[] = {"optimizer.exp_avg.",
                                       "optimizer.exp_avg_sq."};
const char *const kMainParamPrefix = "optimizer.main_param.";

class Run {
public:
  Run(int argc, char **argv)
      : tool(baseName(argv[0])), exeDir(executableDir(argv[0])),
        rank(loomrt_world_rank()), worldSize(loomrt_world_size()) {
    for (int i = 1; i < argc; ++i)
      args.push_back(argv[i]);
    dev.scalar = DeviceBuffer(sizeof(float));
  }
  ~Run() {
    for (auto &[name, buf] : buffers)
      loomrt_free(buf);
    for (TrainParam &t : trained)
      loomrt_free(t.grad);
    for (float *buf : {mainGrads, expAvg, expAvgSq, mainParams, gradShard})
      loomrt_free(buf);
  }

  int main();

private:
  /// Runs `fn` on every rank; if it threw on any rank, the lowest failing
  /// rank prints its message and every rank throws JobFailed.
  void collectively(const std::function<void()> &fn);

  void setUp();
  void createCommunicators();
  void allocateParameters();
  void setUpTraining();
  void loadOptimizerState();
  BoundEntry bind(const Entry &entry);
  void runSteps();
  /// The logs_loss rank's line (and metrics record) for the step just run.
  void logStep(const StepResult &result, float stepLoss, double seconds,
               int64_t lastIteration, std::optional<float> validLoss);
  /// Reads micro-batch `micro` of step `step` into `batch`; a bad token
  /// aborts the job (only this rank sees the samples).
  void readBatch(const BatchReader &from, int64_t step, int64_t micro);
  /// all_reduce(op) of one host value over `comm` (collectives take backend
  /// memory: it crosses through dev.scalar).
  float allReduceScalar(loomrt_comm comm, int32_t op, float value);
  /// The loss tokens of the micro-batch read last (its loss-mask sum).
  double batchTokens() const;
  /// The token-weighted mean loss of `tally` over the gradient group (dp,
  /// or dp x cp: every cp rank adds its chunk's tokens with the micro-batch
  /// loss, which is the whole sequence's). Collective over that group.
  float meanLoss(const LossTally &tally);
  /// --calculate-per-token-loss: each micro-batch's gradient weight,
  /// lossScale x dp x (its loss tokens over cp) / (the step's loss tokens
  /// over dp and cp), so that the gradient is that of the global token mean.
  std::vector<float> perTokenGradScales(const BatchReader &from, int64_t step,
                                        double lossScale);
  /// The loss the last call of `entry` wrote (0 when it computes none).
  float takeLoss(const BoundEntry &entry);
  /// Runs `entry` on every micro-batch of step `step` of `from`, adding
  /// their losses to `tally`.
  void forwardStep(BoundEntry &entry, const BatchReader &from, int64_t step,
                   LossTally &tally);
  /// The mean validation loss of the next --eval-iters global batches,
  /// averaged over data-parallel ranks (meaningful on the ranks that
  /// compute the loss).
  float evaluate();
  /// --save and --save-sharded, whichever were given.
  void saveCheckpoints();
  void trainStep(BoundEntry &entry, int64_t dataStep, bool first,
                 StepResult &result);
  double globalGradNorm();
  /// --check-weight-hash-interval: every rank compares the hash of each of
  /// its shards with that of the box's first holder; a difference is an
  /// error naming the parameter and both ranks.
  void checkWeightHashes();
  /// Distributed optimizer: all-gathers the dp group's slices of a flat
  /// f32 buffer (shardSize elements each) into `full` (padded elements).
  void allGatherFlat(const float *slice, float *full);
  /// Distributed optimizer: the owners' updated parameters to every rank
  /// of the data-parallel group, into the model buffers.
  void allGatherParams();
  /// The f32 main parameters of an owned piece: the model buffer itself
  /// for f32 parameters.
  float *mainOf(const FlatPiece &piece) const;
  void reportOptimizerMemory();
  void save();
  void saveSharded();
  /// --load-sharded: this rank's parameter shards (after the index check).
  void loadShardedParams();
  /// --load-sharded with --train: the training state and this rank's
  /// optimizer slice, from the files of its data-parallel group.
  void loadShardedOptimizer();
  /// Rank 0 writes `layout` (a manifest or a stateLayout of it) to `path`;
  /// every rank sends the pieces it is the first holder of. bufferOf(k) is
  /// this rank's buffer of layout.params[k].
  void writeFile(const std::string &path, const Manifest &layout,
                 const std::function<const void *(size_t)> &bufferOf,
                 const std::map<std::string, std::string> &metadata);
  /// writeFile without the final rename: on rank 0 the staged file (the
  /// other ranks return an empty one).
  StagedFile stageFile(const std::string &path, const Manifest &layout,
                       const std::function<const void *(size_t)> &bufferOf,
                       const std::map<std::string, std::string> &metadata);

  std::string tool, exeDir;
  int32_t rank, worldSize;
  std::vector<std::string> args;
  Options opts;
  std::string manifestPath;
  Manifest m;
  const RankInfo *me = nullptr;
  std::map<std::string, loomrt_comm> comms; // by group kind; null if absent
  std::map<std::string, void *> buffers;    // this rank's shards
  std::unique_ptr<TokenStream> stream, validStream;
  std::unique_ptr<BatchReader> reader, validReader;
  BoundEntry evalEntry; // forward, on the validation batches
  MicroBatch batch;
  // The entries' inputs and outputs in backend memory: the batch (copied in
  // by readBatch), the loss (copied out by takeLoss), grad_scale; and the
  // float that host values cross collectives in (allReduceScalar).
  struct {
    DeviceBuffer tokens, labels, lossMask, loss, gradScale, scalar;
  } dev;
  float loss = 0.0f;
  FILE *metrics = nullptr;
  int64_t dpSize = 1, dpRank = 0;
  // The group the gradients are reduced over and the distributed optimizer
  // shards over: dp, or with context parallelism dp x cp.
  int64_t gradSize = 1, gradRank = 0;
  int64_t samplesPerStep = 1;

  // Training (--train).
  // Held parameters: those shared with other pipeline stages first, then
  // the rest, each in manifest order (the flat buffers' layout).
  std::vector<TrainParam> trained;
  int64_t trainedElements = 0;
  StageSharing sharing;       // the tied embedding of first and last stage
  int64_t sharedElements = 0; // the shared parameters' prefix of the buffer
  float *mainGrads = nullptr, *expAvg = nullptr, *expAvgSq = nullptr;
  float *mainParams = nullptr; // only when some parameter is not f32
  // The optimizer's share of the flat buffer: everything, or with
  // --use-distributed-optimizer and dp > 1 the 1/dp slice [ownBegin,
  // ownEnd) (Megatron-Core's DistributedOptimizer). expAvg, expAvgSq,
  // mainParams and ownGrads hold flat elements ownBegin.. of that range.
  bool distributed = false;
  DpPartition partition;
  int64_t ownBegin = 0, ownEnd = 0;
  std::vector<FlatPiece> owned; // FlatPiece::param indexes `trained`
  float *gradShard = nullptr;   // the reduce-scatter's output (distributed)
  float *ownGrads = nullptr;    // reduced main grads of the owned range
  loomrt_dtype gatherDtype = LOOMRT_F32; // of the parameter all-gather
  bool mixedPrecision = false; // f32 main params apart from the model's
  bool dynamicScaling = false; // f16: DynamicLossScaler
  TrainState state;            // where training stands (checkpointed)
  bool resumed = false;        // the optimizer state came from --load
  ShardedIndex shardedIndex;   // --load-sharded
};

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
    manifestPath =
        opts.manifest.empty() ? exeDir + "/manifest.json" : opts.manifest;
    m = readManifest(manifestPath);
    if (m.worldSize != worldSize)
      throw Error("manifest is for " + std::to_string(m.worldSize) +
                  " rank" + (m.worldSize == 1 ? "" : "s") +
                  " but this job has " + std::to_string(worldSize));
    me = &m.ranks[rank];
    std::tie(dpSize, dpRank) = m.dataParallel(rank);
    std::tie(gradSize, gradRank) = m.gradientParallel(rank);
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

//===----------------------------------------------------------------------===//
// Training state
//===----------------------------------------------------------------------===//

void Run::setUpTraining() {
  collectively([&] {
    const Entry &entry = me->entries.at("train_step");
    if (!entry.hasArg(ArgKind::GradScale))
      throw Error("the train_step entry of rank " + std::to_string(rank) +
                  " has no grad_scale argument");
    if (me->logsLoss && !entry.hasArg(ArgKind::Loss))
      throw Error("rank " + std::to_string(rank) + " logs the loss but its "
                  "train_step entry has no loss argument");
    std::set<std::string> grads;
    for (const EntryArg &a : entry.args)
      if (a.kind == ArgKind::Grad && !grads.insert(a.name).second)
        throw Error("the train_step entry of rank " + std::to_string(rank) +
                    " returns the gradient of \"" + a.name + "\" twice");

    // The distributed optimizer slices a flat buffer that every rank of
    // the data-parallel group must lay out alike.
    distributed = opts.useDistributedOptimizer && gradSize > 1;
    const std::vector<int32_t> *dpGroup =
        distributed ? m.groupOf(m.gradientGroup, rank)->first : nullptr;
    auto inDpGroup = [&](int32_t r) {
      return std::find(dpGroup->begin(), dpGroup->end(), r) != dpGroup->end();
    };
    if (distributed)
      for (const ParamSpec &p : m.params)
        for (int32_t peer : *dpGroup) {
          const Shard *a = p.shardOf(rank), *b = p.shardOf(peer);
          if (!a && !b)
            continue;
          if (!a || !b || a->box != b->box)
            throw Error("--use-distributed-optimizer needs the ranks of a "
                        "data-parallel group to hold the same shards, but "
                        "ranks " + std::to_string(rank) + " and " +
                        std::to_string(peer) + " hold different parts of \"" +
                        p.name + "\"");
        }

    sharing = findStageSharing(m, rank);
    std::vector<size_t> order = sharing.params;
    for (size_t i = 0; i < m.params.size(); ++i)
      if (!sharing.shares(i))
        order.push_back(i);
    for (size_t i : order) {
      const ParamSpec &p = m.params[i];
      const Shard *s = p.shardOf(rank);
      if (!s)
        continue;
      if (!grads.count(p.name))
        throw Error("the train_step entry of rank " + std::to_string(rank) +
                    " returns no gradient for parameter \"" + p.name + "\"");
      TrainParam t;
      t.index = i;
      t.spec = &p;
      t.n = numElements(s->box.shape);
      t.offset = trainedElements;
      t.model = buffers.at(p.name);
      t.grad = loomrt_alloc(t.n * dtypeBytes(p.dtype));
      t.decay = takesWeightDecay(p.name, p.shape);
      // The first holder of this box is counted, through the optimizer
      // slices of its data-parallel group (the whole buffer of that one
      // rank without the distributed optimizer).
      int32_t first = p.firstHolder(*s);
      t.countsInNorm = distributed ? inDpGroup(first) : first == rank;
      trainedElements += t.n;
      if (sharing.shares(i))
        sharedElements = trainedElements;
      mixedPrecision |= p.dtype != LOOMRT_F32;
      dynamicScaling |= p.dtype == LOOMRT_F16;
      trained.push_back(t);
    }

    partition = flatPartition(m, rank, distributed);
    ownBegin = partition.begin(distributed ? gradRank : 0);
    ownEnd = partition.end(distributed ? gradRank : 0);
    std::vector<int64_t> offsets, sizes;
    for (const TrainParam &t : trained) {
      offsets.push_back(t.offset);
      sizes.push_back(t.n);
    }
    owned = ownedPieces(offsets, sizes, ownBegin, ownEnd);
    int64_t slice = distributed ? partition.shardSize() : trainedElements;
    int64_t bytes = slice * int64_t(sizeof(float));
    auto allocFloats = [](int64_t bytes) {
      return static_cast<float *>(loomrt_alloc(bytes));
    };
    // The pad at the end of the gradient buffer stays zero through the
    // reduce-scatter.
    mainGrads = allocFloats(partition.padded() * int64_t(sizeof(float)));
    expAvg = allocFloats(bytes);
    expAvgSq = allocFloats(bytes);
    loomrt_zero(expAvg, bytes);
    loomrt_zero(expAvgSq, bytes);
    ownGrads = mainGrads;
    if (distributed)
      ownGrads = gradShard = allocFloats(bytes);
    if (mixedPrecision) {
      // Zero where f32 parameters leave it unused (sharded files hold it).
      mainParams = allocFloats(bytes);
      loomrt_zero(mainParams, bytes);
    }
    // f32 parameters are their own main parameters; the others start as
    // their widened values (a --load optimizer state may replace them).
    for (const FlatPiece &pc : owned) {
      const TrainParam &t = trained[pc.param];
      if (t.spec->dtype != LOOMRT_F32)
        loomrt_cast(t.spec->dtype,
                    static_cast<char *>(t.model) +
                        pc.paramOffset * dtypeBytes(t.spec->dtype),
                    LOOMRT_F32, mainOf(pc), pc.n);
    }
    // Megatron gathers the parameters in their own dtype; f32 when the
    // dtypes are mixed.
    gatherDtype = trained.empty() ? LOOMRT_F32 : trained[0].spec->dtype;
    for (const TrainParam &t : trained)
      if (t.spec->dtype != gatherDtype)
        gatherDtype = LOOMRT_F32;

    if (!opts.load.empty())
      loadOptimizerState();
    else if (!opts.loadSharded.empty())
      loadShardedOptimizer();

    // Settings: flags win, then the checkpoint, then the defaults.
    AdamWConfig &ad = state.adamw;
    if (!resumed)
      ad = AdamWConfig();
    ad.weightDecay = opts.weightDecay.value_or(ad.weightDecay);
    ad.beta1 = opts.adamBeta1.value_or(ad.beta1);
    ad.beta2 = opts.adamBeta2.value_or(ad.beta2);
    ad.eps = opts.adamEps.value_or(ad.eps);
    ad.clipGrad = opts.clipGrad.value_or(ad.clipGrad);
    LrSchedule &lr = state.schedule;
    if (!resumed)
      lr = LrSchedule{kDefaultLr};
    lr.maxLr = opts.lr.value_or(lr.maxLr);
    lr.minLr = opts.minLr.value_or(lr.minLr);
    lr.initLr = opts.lrWarmupInit.value_or(lr.initLr);
    lr.style = opts.lrDecayStyle.value_or(lr.style);
    lr.wsdDecaySteps = opts.lrWsdDecaySteps.value_or(lr.wsdDecaySteps);
    lr.wsdStyle = opts.lrWsdDecayStyle.value_or(lr.wsdStyle);
    state.decayStepsGiven =
        opts.lrDecaySteps || (resumed && state.decayStepsGiven);
    lr.decaySteps = opts.lrDecaySteps            ? *opts.lrDecaySteps
                    : resumed && state.decayStepsGiven ? lr.decaySteps
                                                 : state.iteration + opts.steps;
    // A warmup fraction is of this run's decay length, also when resumed.
    if (opts.lrWarmupSteps || opts.lrWarmupFraction || !resumed)
      state.warmupFraction = opts.lrWarmupFraction;
    if (state.warmupFraction)
      lr.warmupSteps = *state.warmupFraction * double(lr.decaySteps);
    else if (opts.lrWarmupSteps)
      lr.warmupSteps = double(*opts.lrWarmupSteps);
    if (lr.style == LrDecayStyle::WSD && lr.wsdDecaySteps == 0)
      throw Error("--lr-decay-style WSD needs --lr-wsd-decay-iters");
    if (lr.style != LrDecayStyle::WSD &&
        (opts.lrWsdDecaySteps || opts.lrWsdDecayStyle))
      throw Error(std::string("--lr-wsd-decay-iters and --lr-wsd-decay-style "
                              "need --lr-decay-style WSD (the schedule is ") +
                  styleName(kLrDecayStyles, lr.style) + ")");
    if (lr.minLr > lr.maxLr)
      throw Error("the minimum learning rate " + std::to_string(lr.minLr) +
                  " exceeds the peak " + std::to_string(lr.maxLr));
    // The scaler's settings come from the flags, its position from the
    // checkpoint (Megatron saves scale and trackers only).
    DynamicLossScaler &sc = state.scaler;
    sc.minScale = opts.minLossScale;
    sc.growthInterval = opts.lossScaleWindow;
    sc.hysteresis = opts.hysteresis;
    if (!state.hasScaler) {
      sc.scale = opts.initialLossScale;
      sc.growthTracker = 0;
      sc.hysteresisTracker = opts.hysteresis;
    }
    state.hasScaler = dynamicScaling;
    if (state.consumedSamples % samplesPerStep != 0)
      throw Error("the checkpoint consumed " +
                  std::to_string(state.consumedSamples) +
                  " samples, not a multiple of this plan's global batch of " +
                  std::to_string(samplesPerStep));
  });
  if (rank == 0 && (!opts.load.empty() || !opts.loadSharded.empty())) {
    std::string from = opts.load.empty() ? opts.loadSharded
                                         : optimizerStatePath(opts.load);
    if (resumed)
      std::printf("loom: resuming at iteration %" PRId64
                  " (consumed samples %" PRId64 ", optimizer step %" PRId64
                  ") from %s\n",
                  state.iteration, state.consumedSamples, state.optimizerSteps,
                  from.c_str());
    else if (!opts.load.empty())
      std::printf("loom: %s not found: the optimizer starts from zero at "
                  "iteration 0\n",
                  from.c_str());
    else
      std::printf("loom: %s holds no optimizer state: the optimizer starts "
                  "from zero at iteration 0\n",
                  from.c_str());
    std::fflush(stdout);
  }
}

void Run::loadOptimizerState() {
  std::string path = optimizerStatePath(opts.load);
  // A model-only checkpoint (e.g. converted from Hugging Face) starts a
  // fresh optimizer; a damaged optimizer file is an error.
  if (!fileExists(path))
    return;
  SafetensorsFile file(path);
  auto meta = file.metadata().find("loom.train_state");
  if (meta == file.metadata().end())
    throw Error("optimizer state " + path +
                " has no \"loom.train_state\" metadata");
  state = TrainState::fromJson(meta->second, "optimizer state " + path);
  resumed = true;

  // The file holds whole tensors: the distributed optimizer reads this
  // rank's full shards into temporary flat buffers and keeps its slice.
  std::vector<DeviceBuffer> temps;
  auto full = [&](float *slice) {
    if (!distributed)
      return slice;
    temps.emplace_back(trainedElements * int64_t(sizeof(float)));
    return temps.back().as<float>();
  };
  auto keepSlice = [&](float *slice, const float *fullBuf) {
    if (distributed)
      loomrt_copy(slice, fullBuf + ownBegin,
                  (ownEnd - ownBegin) * int64_t(sizeof(float)));
  };

  std::map<std::string, void *> bufs;
  Manifest moments = stateLayout(
      m, {kMomentPrefixes[0], kMomentPrefixes[1]}, LOOMRT_F32);
  float *avg = full(expAvg), *avgSq = full(expAvgSq);
  for (const TrainParam &t : trained) {
    bufs[kMomentPrefixes[0] + t.spec->name] = avg + t.offset;
    bufs[kMomentPrefixes[1] + t.spec->name] = avgSq + t.offset;
  }
  loadCheckpoint(path, moments, rank, bufs);
  keepSlice(expAvg, avg);
  keepSlice(expAvgSq, avgSq);

  // Main parameters are saved when the saving run had low-precision
  // parameters; they are more precise than the model file's values.
  bool hasMain = std::any_of(
      file.tensors().begin(), file.tensors().end(), [](const auto &kv) {
        return kv.first.rfind(kMainParamPrefix, 0) == 0;
      });
  if (!hasMain)
    return;
  bufs.clear();
  // Laid out like the gradients; an f32 parameter is its own main param.
  float *main = mixedPrecision ? full(mainParams) : nullptr;
  for (const TrainParam &t : trained)
    bufs[kMainParamPrefix + t.spec->name] =
        t.spec->dtype == LOOMRT_F32 ? t.model : main + t.offset;
  loadCheckpoint(path, stateLayout(m, {kMainParamPrefix}, LOOMRT_F32), rank,
                 bufs);
  if (mixedPrecision)
    keepSlice(mainParams, main);
  for (const TrainParam &t : trained)
    if (t.spec->dtype != LOOMRT_F32)
      loomrt_cast(LOOMRT_F32, main + t.offset, t.spec->dtype, t.model, t.n);
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
  for (const EntryArg &a : entry.args) {
    switch (a.kind) {
    case ArgKind::Tokens:
      b.args.push_back(dev.tokens.get());
      break;
    case ArgKind::Labels:
      b.args.push_back(dev.labels.get());
      break;
    case ArgKind::LossMask:
      b.args.push_back(dev.lossMask.get());
      break;
    case ArgKind::Param:
      b.args.push_back(buffers.at(a.name));
      break;
    case ArgKind::Loss:
      b.args.push_back(dev.loss.get());
      b.producesLoss = true;
      break;
    case ArgKind::Comm:
      // The entry receives a pointer to the handle (null when this rank is
      // in no group of that kind).
      b.args.push_back(&comms.at(a.name));
      break;
    case ArgKind::GradScale:
      b.args.push_back(dev.gradScale.get());
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
                  "kind \"" + a.name + "\", which this driver does not "
                  "provide");
    }
  }
  return b;
}

//===----------------------------------------------------------------------===//
// The step loop
//===----------------------------------------------------------------------===//

double Run::globalGradNorm() {
  // Every element once: each distinct box of a parameter is counted by its
  // first holder only (data-parallel and tensor-parallel replicas hold equal
  // gradients after the all-reduce) or, with the distributed optimizer, by
  // the slices of that holder's data-parallel group; the world sums the
  // parts.
  double local = 0.0;
  for (const FlatPiece &pc : owned)
    if (trained[pc.param].countsInNorm)
      local += double(loomrt_sum_squares(
          LOOMRT_F32, ownGrads + (pc.flatOffset - ownBegin), pc.n));
  float sum = float(local);
  if (worldSize > 1)
    sum = allReduceScalar(loomrt_comm_world(), LOOMRT_SUM, sum);
  return std::sqrt(double(sum));
}

void Run::trainStep(BoundEntry &entry, int64_t dataStep, bool first,
                    StepResult &result) {
  double lossScale = dynamicScaling ? state.scaler.scale : 1.0;
  // The compiled code differentiates grad_scale * loss: scaling for f16 and
  // the mean over micro-batches (or Megatron's per-token weighting) cost
  // nothing there.
  std::vector<float> gradScales =
      opts.calculatePerTokenLoss
          ? perTokenGradScales(*reader, dataStep, lossScale)
          : std::vector<float>(size_t(m.numMicrobatches),
                               float(lossScale / double(m.numMicrobatches)));
  loomrt_zero(mainGrads, partition.padded() * int64_t(sizeof(float)));
  for (int64_t micro = 0; micro < m.numMicrobatches; ++micro) {
    readBatch(*reader, dataStep, micro);
    loomrt_copy(dev.gradScale.get(), &gradScales[size_t(micro)],
                sizeof(float));
    entry.fn(entry.args.data());
    result.loss.weighted += takeLoss(entry) * batchTokens();
    result.loss.tokens += batchTokens();
    // Accumulate in f32 whatever the parameter dtype (Megatron's main_grad).
    for (const TrainParam &t : trained)
      loomrt_axpy(t.n, 1.0f, t.spec->dtype, t.grad, LOOMRT_F32,
                  mainGrads + t.offset);
  }
  // Gradient sync once, after the last micro-batch: the data-parallel mean,
  // of the whole buffer or (distributed optimizer) of this rank's slice.
  // Both sum the same dp values per element, so for dp 2 the slice is
  // bitwise the all-reduce's. With context parallelism the group is dp x cp
  // (Megatron's data-parallel group with cp): each cp rank's gradient is its
  // tokens' part, so the sum over cp is the micro-batch's gradient and the
  // mean is still over dp.
  int64_t ownN = ownEnd - ownBegin;
  if (distributed) {
    int64_t shape[1] = {partition.padded()};
    loomrt_reduce_scatter(comms.at(m.gradientGroup), LOOMRT_F32, 1, shape, 0,
                          mainGrads, gradShard);
    loomrt_scale(LOOMRT_F32, gradShard, ownN, float(1.0 / dpSize));
  } else if (gradSize > 1) {
    loomrt_all_reduce(comms.at(m.gradientGroup), LOOMRT_F32, LOOMRT_SUM,
                      mainGrads, mainGrads, trainedElements);
    loomrt_scale(LOOMRT_F32, mainGrads, trainedElements, float(1.0 / dpSize));
  }
  // Megatron's _allreduce_word_embedding_grads, after the data-parallel
  // reduction: each stage holding the tied embedding adds the other's part.
  // The members' slices are aligned (StageSharing.h), so this covers only
  // the shared elements of this rank's optimizer range.
  if (sharing.group) {
    int64_t n = std::min(ownEnd, sharedElements) - ownBegin;
    if (n > 0)
      loomrt_all_reduce(comms.at("embedding"), LOOMRT_F32, LOOMRT_SUM,
                        ownGrads, ownGrads, n);
  }
  if (lossScale != 1.0)
    loomrt_scale(LOOMRT_F32, ownGrads, ownN, float(1.0 / lossScale));
  // The unreduced buffer is dead now; the dump gathers the slices into it.
  if (first && !opts.dumpGrads.empty() && distributed)
    allGatherFlat(gradShard, mainGrads);
  if (first && !opts.dumpGrads.empty())
    writeFile(opts.dumpGrads, stateLayout(m, {""}, LOOMRT_F32),
              [&](size_t k) -> const void * {
                for (const TrainParam &t : trained)
                  if (t.index == k)
                    return mainGrads + t.offset;
                return nullptr; // not held: never asked for
              },
              {{"format", "pt"}, {"loom.family", m.family}});

  result.lr = state.schedule.at(state.optimizerSteps);
  bool nonfinite = false;
  if (dynamicScaling) {
    // Every rank must take the same decision: MAX over the world.
    float flag = float(loomrt_has_nonfinite(LOOMRT_F32, ownGrads, ownN));
    if (worldSize > 1)
      flag = allReduceScalar(loomrt_comm_world(), LOOMRT_MAX, flag);
    nonfinite = flag != 0.0f;
    state.scaler.update(nonfinite);
  }
  double norm = nonfinite ? 0.0 : globalGradNorm();
  // Without a scaler, a non-finite gradient would poison the weights: the
  // update is skipped all the same (the norm is the same on every rank).
  if (nonfinite || !std::isfinite(norm)) {
    result.skipped = true;
    ++state.skippedIterations;
    return;
  }
  result.gradNorm = norm;
  const AdamWConfig &ad = state.adamw;
  double coeff = clipCoefficient(norm, ad.clipGrad);
  if (coeff < 1.0)
    loomrt_scale(LOOMRT_F32, ownGrads, ownN, float(coeff));
  ++state.optimizerSteps;
  for (const FlatPiece &pc : owned) {
    const TrainParam &t = trained[pc.param];
    int64_t at = pc.flatOffset - ownBegin;
    loomrt_adamw(pc.n, mainOf(pc), ownGrads + at, expAvg + at, expAvgSq + at,
                 float(result.lr), float(ad.beta1), float(ad.beta2),
                 float(ad.eps), t.decay ? float(ad.weightDecay) : 0.0f,
                 state.optimizerSteps);
    if (!distributed && t.spec->dtype != LOOMRT_F32)
      loomrt_cast(LOOMRT_F32, mainOf(pc), t.spec->dtype, t.model, pc.n);
  }
  if (distributed)
    allGatherParams();
}

void Run::checkWeightHashes() {
  // A 64-bit FNV-1a hash of each shard's bytes, as four exact 16-bit floats, for
  // the params in manifest order (zeros where not held), gathered from all.
  const int64_t n = int64_t(m.params.size()) * 4;
  std::vector<float> mine(size_t(n), 0.0f), all(size_t(n * worldSize));
  std::vector<char> bytes;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec &p = m.params[i];
    const Shard *s = p.shardOf(rank);
    if (!s)
      continue;
    bytes.resize(size_t(numElements(s->box.shape) * dtypeBytes(p.dtype)));
    loomrt_copy(bytes.data(), buffers.at(p.name), int64_t(bytes.size()));
    // FNV-1a over 8-byte words (then the tail bytes): 8x fewer steps than
    // bytewise, and only ever compared with itself.
    uint64_t h = 14695981039346656037ull;
    size_t words = bytes.size() / 8;
    for (size_t w = 0; w < words; ++w) {
      uint64_t v;
      std::memcpy(&v, bytes.data() + w * 8, 8);
      h = (h ^ v) * 1099511628211ull;
    }
    for (size_t b = words * 8; b < bytes.size(); ++b)
      h = (h ^ uint8_t(bytes[b])) * 1099511628211ull;
    for (int k = 0; k < 4; ++k)
      mine[i * 4 + k] = float((h >> (16 * k)) & 0xffff);
  }
  DeviceBuffer send(n * int64_t(sizeof(float))),
      recv(n * worldSize * int64_t(sizeof(float)));
  loomrt_copy(send.get(), mine.data(), n * int64_t(sizeof(float)));
  int64_t shape[1] = {n};
  loomrt_all_gather(loomrt_comm_world(), LOOMRT_F32, 1, shape, 0, send.get(),
                    recv.get());
  loomrt_copy(all.data(), recv.get(), n * worldSize * int64_t(sizeof(float)));
  collectively([&] {
    for (size_t i = 0; i < m.params.size(); ++i) {
      const ParamSpec &p = m.params[i];
      const Shard *s = p.shardOf(rank);
      if (!s)
        continue;
      int32_t first = p.firstHolder(*s);
      if (!std::equal(mine.begin() + i * 4, mine.begin() + i * 4 + 4,
                      all.begin() + first * n + i * 4))
        throw Error("after iteration " + std::to_string(state.iteration) +
                    ", rank " + std::to_string(rank) + "'s copy of \"" +
                    p.name + "\" differs from rank " + std::to_string(first) +
                    "'s, which holds the same part of it");
    }
  });
}

void Run::reportOptimizerMemory() {
  // What the distributed optimizer divides by dp: the moments and the f32
  // main params (Megatron's "optimizer state"); the main grads stay whole
  // for the accumulation, plus the reduce-scatter's slice.
  const double mib = 1024.0 * 1024.0;
  int64_t perElement = (mixedPrecision ? 3 : 2) * int64_t(sizeof(float));
  int64_t slice = distributed ? partition.shardSize() : trainedElements;
  std::string what = mixedPrecision ? "exp_avg, exp_avg_sq, main params"
                                    : "exp_avg, exp_avg_sq";
  std::printf("loom: optimizer state on rank %d: %.3f MiB (%s of %" PRId64,
              rank, double(slice * perElement) / mib, what.c_str(),
              ownEnd - ownBegin);
  if (distributed)
    std::printf(" of %" PRId64 " elements; distributed over %s %" PRId64
                ", %.3f MiB without)",
                trainedElements, m.gradientGroup.c_str(), gradSize,
                double(trainedElements * perElement) / mib);
  else
    std::printf(" elements)");
  std::printf(", main grads %.3f MiB", double(partition.padded()) * 4 / mib);
  if (distributed)
    std::printf(" + %.3f MiB slice", double(partition.shardSize()) * 4 / mib);
  std::printf("\n");
}

float *Run::mainOf(const FlatPiece &pc) const {
  const TrainParam &t = trained[pc.param];
  if (t.spec->dtype == LOOMRT_F32)
    return static_cast<float *>(t.model) + pc.paramOffset;
  return mainParams + (pc.flatOffset - ownBegin);
}

void Run::allGatherFlat(const float *slice, float *full) {
  int64_t shape[1] = {partition.shardSize()};
  loomrt_all_gather(comms.at(m.gradientGroup), LOOMRT_F32, 1, shape, 0, slice,
                    full);
}

void Run::allGatherParams() {
  // Through the buffers that are free until the next step: the slice goes
  // out of gradShard (in the gather dtype, the owner's rounding of its main
  // params, as the plain optimizer's cast does) and the group's slices come
  // back into mainGrads.
  int64_t w = dtypeBytes(gatherDtype);
  char *send = reinterpret_cast<char *>(gradShard);
  for (const FlatPiece &pc : owned)
    loomrt_cast(LOOMRT_F32, mainOf(pc), gatherDtype,
                send + (pc.flatOffset - ownBegin) * w, pc.n);
  int64_t shape[1] = {partition.shardSize()};
  loomrt_all_gather(comms.at(m.gradientGroup), gatherDtype, 1, shape, 0, send,
                    mainGrads);
  const char *recv = reinterpret_cast<const char *>(mainGrads);
  for (const TrainParam &t : trained)
    loomrt_cast(gatherDtype, recv + t.offset * w, t.spec->dtype, t.model, t.n);
}

float Run::allReduceScalar(loomrt_comm comm, int32_t op, float value) {
  loomrt_copy(dev.scalar.get(), &value, sizeof(float));
  loomrt_all_reduce(comm, LOOMRT_F32, op, dev.scalar.get(), dev.scalar.get(),
                    1);
  loomrt_copy(&value, dev.scalar.get(), sizeof(float));
  return value;
}

double Run::batchTokens() const {
  double n = 0.0;
  for (float w : batch.lossMask)
    n += w;
  return n;
}

float Run::meanLoss(const LossTally &tally) {
  float weighted = float(tally.weighted), tokens = float(tally.tokens);
  if (gradSize > 1) {
    loomrt_comm group = comms.at(m.gradientGroup);
    weighted = allReduceScalar(group, LOOMRT_SUM, weighted);
    tokens = allReduceScalar(group, LOOMRT_SUM, tokens);
  }
  return tokens > 0.0f ? weighted / tokens : 0.0f;
}

std::vector<float> Run::perTokenGradScales(const BatchReader &from,
                                           int64_t step, double lossScale) {
  // The counts come from the data alone: read ahead, before any backward.
  size_t n = size_t(m.numMicrobatches);
  std::vector<float> counts(n);
  MicroBatch ahead;
  for (size_t micro = 0; micro < n; ++micro) {
    from.read(step, int64_t(micro), dpRank, dpSize, ahead);
    double tokens = 0.0;
    for (float w : ahead.lossMask)
      tokens += w;
    counts[micro] = float(tokens);
  }
  // Each micro-batch's tokens over its cp chunks, then the step's over dp.
  if (comms.count("cp") && comms.at("cp")) {
    DeviceBuffer buf(int64_t(n * sizeof(float)));
    loomrt_copy(buf.get(), counts.data(), int64_t(n * sizeof(float)));
    loomrt_all_reduce(comms.at("cp"), LOOMRT_F32, LOOMRT_SUM, buf.get(),
                      buf.get(), int64_t(n));
    loomrt_copy(counts.data(), buf.get(), int64_t(n * sizeof(float)));
  }
  float total = 0.0f;
  for (float c : counts)
    total += c;
  if (dpSize > 1)
    total = allReduceScalar(comms.at("dp"), LOOMRT_SUM, total);
  std::vector<float> scales(n, 0.0f);
  if (total > 0.0f)
    for (size_t micro = 0; micro < n; ++micro)
      scales[micro] =
          float(lossScale * double(dpSize) * counts[micro] / double(total));
  return scales;
}

float Run::takeLoss(const BoundEntry &entry) {
  if (entry.producesLoss)
    loomrt_copy(&loss, dev.loss.get(), sizeof(float));
  return loss;
}

void Run::readBatch(const BatchReader &from, int64_t step, int64_t micro) {
  try {
    from.read(step, micro, dpRank, dpSize, batch);
    int64_t bytes = int64_t(batch.tokens.size()) * 4;
    loomrt_copy(dev.tokens.get(), batch.tokens.data(), bytes);
    loomrt_copy(dev.labels.get(), batch.labels.data(), bytes);
    loomrt_copy(dev.lossMask.get(), batch.lossMask.data(), bytes);
  } catch (const Error &e) {
    std::string msg = tool + ": error: " + e.what();
    loomrt_abort(msg.c_str());
  }
}

void Run::forwardStep(BoundEntry &entry, const BatchReader &from,
                      int64_t step, LossTally &tally) {
  for (int64_t micro = 0; micro < m.numMicrobatches; ++micro) {
    readBatch(from, step, micro);
    entry.fn(entry.args.data());
    tally.weighted += takeLoss(entry) * batchTokens();
    tally.tokens += batchTokens();
  }
}

float Run::evaluate() {
  // Megatron's evaluate(): the token-weighted mean of the micro-batch
  // losses; each evaluation continues where the last one stopped (consumed
  // valid samples are checkpointed).
  int64_t first = state.consumedValidSamples / samplesPerStep;
  LossTally tally;
  for (int64_t k = 0; k < opts.evalIters; ++k)
    forwardStep(evalEntry, *validReader, first + k, tally);
  state.consumedValidSamples += opts.evalIters * samplesPerStep;
  return evalEntry.producesLoss ? meanLoss(tally) : 0.0f;
}

void Run::logStep(const StepResult &result, float stepLoss, double seconds,
                  int64_t lastIteration, std::optional<float> validLoss) {
  int64_t tokensPerStep = samplesPerStep * m.seqLength;
  double ms = seconds * 1e3;
  double tps = seconds > 0 ? double(tokensPerStep) / seconds : 0.0;
  // Megatron's training_log fields, in its order.
  std::printf(" iteration %8" PRId64 "/%8" PRId64
              " | consumed samples: %12" PRId64
              " | elapsed time per iteration (ms): %.1f"
              " | tokens per second: %.1f",
              state.iteration, lastIteration, state.consumedSamples, ms, tps);
  if (opts.train)
    std::printf(" | learning rate: %E", result.lr);
  std::printf(" | global batch size: %5" PRId64 " | lm loss: %E |",
              samplesPerStep, double(stepLoss));
  if (opts.train) {
    if (dynamicScaling)
      std::printf(" loss scale: %.1f |", state.scaler.scale);
    if (result.gradNorm)
      std::printf(" grad norm: %.3f |", *result.gradNorm);
    std::printf(" number of skipped iterations: %3d |", int(result.skipped));
  }
  std::printf("\n");
  if (validLoss) {
    // Megatron's evaluate_and_print_results block.
    char line[200];
    std::snprintf(line, sizeof(line),
                  " validation loss at iteration %" PRId64
                  " | lm loss value: %E | lm loss PPL: %E | ",
                  state.iteration, double(*validLoss),
                  std::exp(std::min(20.0, double(*validLoss))));
    std::string rule(std::strlen(line) + 1, '-');
    std::printf("%s\n%s\n%s\n", rule.c_str(), line, rule.c_str());
  }
  std::fflush(stdout);
  if (metrics) {
    // %.9g round-trips an f32 exactly; JSON has no NaN/inf literals.
    auto number = [](double v, const char *fmt) {
      char text[40];
      if (std::isfinite(v))
        std::snprintf(text, sizeof(text), fmt, v);
      else
        std::snprintf(text, sizeof(text), "null");
      return std::string(text);
    };
    std::fprintf(metrics,
                 "{\"step\": %" PRId64 ", \"loss\": %s, \"step_time_ms\": "
                 "%.3f, \"tokens_per_second\": %.1f, \"consumed_samples\": "
                 "%" PRId64,
                 state.iteration, number(stepLoss, "%.9g").c_str(), ms, tps,
                 state.consumedSamples);
    if (opts.train) {
      // lr and grad norm in full double precision for reference checks.
      std::fprintf(metrics, ", \"lr\": %s, \"grad_norm\": %s",
                   number(result.lr, "%.17g").c_str(),
                   result.gradNorm ? number(*result.gradNorm, "%.17g").c_str()
                                   : "null");
      if (dynamicScaling)
        std::fprintf(metrics, ", \"loss_scale\": %s",
                     number(state.scaler.scale, "%.17g").c_str());
      std::fprintf(metrics, ", \"skipped_iterations\": %" PRId64,
                   state.skippedIterations);
    }
    if (validLoss)
      std::fprintf(metrics, ", \"valid_loss\": %s",
                   number(*validLoss, "%.9g").c_str());
    std::fprintf(metrics, "}\n");
    std::fflush(metrics);
  }
}

void Run::saveCheckpoints() {
  if (!opts.save.empty())
    save();
  if (!opts.saveSharded.empty())
    saveSharded();
}

void Run::runSteps() {
  BoundEntry entry;
  collectively([&] {
    if (opts.data.empty())
      stream = syntheticTokenStream(opts.seed, m.vocabSize);
    else
      stream = openTokenStream(opts.data, opts.dataFormat);
    reader = std::make_unique<BatchReader>(
        *stream, m.microBatchSize, m.seqLength, m.numMicrobatches, m.vocabSize,
        m.eodTokenId, me->sequenceRanges);
    // Size the buffers once: the bound pointers stay valid.
    int64_t n = m.microBatchSize * me->localSeqLength();
    batch.tokens.resize(n);
    batch.labels.resize(n);
    batch.lossMask.resize(n);
    for (DeviceBuffer *buf : {&dev.tokens, &dev.labels, &dev.lossMask})
      *buf = DeviceBuffer(n * 4); // int32 or f32
    dev.loss = DeviceBuffer(sizeof(float));
    dev.gradScale = DeviceBuffer(sizeof(float)); // set by trainStep
    entry = bind(me->entries.at(opts.train ? "train_step" : "forward"));
    if (!opts.validData.empty()) {
      validStream = openTokenStream(opts.validData, opts.dataFormat);
      validReader = std::make_unique<BatchReader>(
          *validStream, m.microBatchSize, m.seqLength, m.numMicrobatches,
          m.vocabSize, m.eodTokenId, me->sequenceRanges);
      evalEntry = bind(me->entries.at("forward"));
    }
    if (me->logsLoss && !opts.metricsJsonl.empty()) {
      metrics = std::fopen(opts.metricsJsonl.c_str(), "w");
      if (!metrics)
        throw Error("cannot open metrics file " + opts.metricsJsonl + ": " +
                    std::strerror(errno));
    }
  });

  if (me->logsLoss) {
    // Megatron's order of the parallel sizes.
    std::string plan;
    for (const char *k : {"tp", "cp", "ep", "pp", "dp"})
      if (m.plan.count(k))
        plan += (plan.empty() ? "" : ", ") + std::string(k) + " " +
                std::to_string(m.plan.at(k));
    std::string data = stream->describe();
    if (stream->size() != INT64_MAX)
      data += ", " + std::to_string(reader->numSamples()) + " samples";
    if (validReader)
      data += "; validation: " + validStream->describe() + ", " +
              std::to_string(validReader->numSamples()) + " samples";
    std::printf("loom: %s, %d rank%s (%s), micro-batch %" PRId64
                " x seq %" PRId64 ", %" PRId64 " micro-batch%s x dp %" PRId64
                ", data: %s\n",
                m.family.empty() ? "model" : m.family.c_str(), worldSize,
                worldSize == 1 ? "" : "s", plan.c_str(), m.microBatchSize,
                m.seqLength, m.numMicrobatches,
                m.numMicrobatches == 1 ? "" : "es", dpSize, data.c_str());
    if (opts.train)
      reportOptimizerMemory();
    std::fflush(stdout);
  }

  // A resumed run continues the iteration count and the sample stream.
  int64_t firstIteration = state.iteration;
  int64_t firstDataStep = state.consumedSamples / samplesPerStep;
  int64_t lastIteration = firstIteration + opts.steps;
  for (int64_t step = 0; step < opts.steps; ++step) {
    double start = loomrt_wtime();
    StepResult result;
    if (opts.train) {
      trainStep(entry, firstDataStep + step, step == 0, result);
    } else {
      forwardStep(entry, *reader, firstDataStep + step, result.loss);
    }
    state.iteration += 1;
    state.consumedSamples += samplesPerStep;
    float stepLoss = entry.producesLoss ? meanLoss(result.loss) : 0.0f;
    double seconds = loomrt_wtime() - start;
    // Validation after the step, untimed; the last step's too.
    std::optional<float> validLoss;
    if (validReader && (state.iteration % opts.evalInterval == 0 ||
                        step + 1 == opts.steps))
      validLoss = evaluate();
    // Not timed, as Megatron's check is not.
    if (opts.checkWeightHashInterval > 0 &&
        state.iteration % opts.checkWeightHashInterval == 0)
      checkWeightHashes();
    if (me->logsLoss)
      logStep(result, stepLoss, seconds, lastIteration, validLoss);
    // Megatron's --save-interval: the latest checkpoint, replaced
    // atomically; the last step's is written after the loop.
    if (opts.saveInterval > 0 && state.iteration % opts.saveInterval == 0 &&
        step + 1 < opts.steps)
      saveCheckpoints();
  }
  if (metrics) {
    std::fclose(metrics);
    metrics = nullptr;
  }
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

void Run::writeFile(const std::string &path, const Manifest &layout,
                    const std::function<const void *(size_t)> &bufferOf,
                    const std::map<std::string, std::string> &metadata) {
  StagedFile staged = stageFile(path, layout, bufferOf, metadata);
  collectively([&] {
    if (rank == 0)
      publish(staged);
  });
}

StagedFile
Run::stageFile(const std::string &path, const Manifest &layout,
               const std::function<const void *(size_t)> &bufferOf,
               const std::map<std::string, std::string> &metadata) {
  StagedFile staged;
  // Rank 0 writes; the first holder of every distinct shard sends it, in
  // the order forEachCheckpointPiece defines on every rank.
  auto indexOf = [&](const ParamSpec &p) {
    return size_t(&p - layout.params.data());
  };
  collectively([&] {
    if (rank != 0) {
      forEachCheckpointPiece(layout, [&](const HfTensor &, const ParamSpec &p,
                                         const Shard &s) {
        if (s.rank == rank)
          loomrt_send(loomrt_comm_world(), p.dtype, bufferOf(indexOf(p)),
                      numElements(s.box.shape), 0);
      });
      return;
    }
    staged = stageCheckpoint(
        path, layout,
        [&](const ParamSpec &p, const Shard &s, void *out) {
          int64_t n = numElements(s.box.shape);
          int64_t bytes = n * dtypeBytes(p.dtype);
          if (s.rank == 0) {
            loomrt_copy(out, bufferOf(indexOf(p)), bytes);
          } else {
            // Received into backend memory (a GPU's on cuda), then copied.
            DeviceBuffer staged(bytes);
            loomrt_recv(loomrt_comm_world(), p.dtype, staged.get(), n, s.rank);
            loomrt_copy(out, staged.get(), bytes);
          }
        },
        metadata);
  });
  return staged;
}

void Run::save() {
  // Both files complete at their .tmp names first, then the optimizer state
  // renamed into place, then the model; the optimizer state names its model
  // by digest, so a --load finds one whole pair whenever this stops
  // (CheckpointPair.h). Only what describes the tensors goes into the model
  // file: the same parameters give the same bytes whatever the plan, seed
  // or step count that produced them.
  StagedFile model = stageFile(
      opts.save, m,
      [&](size_t k) -> const void * { return buffers.at(m.params[k].name); },
      {{"format", "pt"}, {"loom.family", m.family}});
  std::optional<StagedFile> optimizer;
  if (opts.train) {
    std::vector<std::string> prefixes = {kMomentPrefixes[0],
                                         kMomentPrefixes[1]};
    if (mixedPrecision)
      prefixes.push_back(kMainParamPrefix);
    Manifest layout = stateLayout(m, prefixes, LOOMRT_F32);
    size_t n = m.params.size();
    std::vector<const TrainParam *> byIndex(n, nullptr);
    for (const TrainParam &t : trained)
      byIndex[t.index] = &t;
    // The distributed optimizer's slices are gathered into whole buffers
    // first: the file is the plain optimizer's, whatever the plan.
    std::vector<DeviceBuffer> temps;
    auto full = [&](float *slice) {
      if (!distributed)
        return slice;
      temps.emplace_back(partition.padded() * int64_t(sizeof(float)));
      allGatherFlat(slice, temps.back().as<float>());
      return temps.back().as<float>();
    };
    float *avg = full(expAvg), *avgSq = full(expAvgSq);
    float *main = mixedPrecision ? full(mainParams) : nullptr;
    optimizer = stageFile(optimizerStatePath(opts.save), layout,
              [&](size_t k) -> const void * {
                const TrainParam &t = *byIndex[k % n];
                switch (k / n) {
                case 0:
                  return avg + t.offset;
                case 1:
                  return avgSq + t.offset;
                default:
                  return t.spec->dtype == LOOMRT_F32 ? t.model
                                                     : main + t.offset;
                }
              },
              {{"format", "pt"},
               {"loom.family", m.family},
               {"loom.train_state", state.toJson()},
               {kModelDigestKey, modelDigestStamp(model.digest)}});
  }
  collectively([&] {
    if (rank != 0)
      return;
    if (optimizer)
      publish(*optimizer);
    publish(model);
  });
  if (rank == 0) {
    std::printf("loom: saved checkpoint %s%s at iteration %" PRId64 "\n",
                opts.save.c_str(),
                opts.train ? (" and " + optimizerStatePath(opts.save)).c_str()
                           : "",
                state.iteration);
    std::fflush(stdout);
  }
}

//===----------------------------------------------------------------------===//
// Sharded checkpoints
//===----------------------------------------------------------------------===//

void Run::saveSharded() {
  namespace fs = std::filesystem;
  const std::string &dir = opts.saveSharded;
  std::string tmp = dir + ".tmp", old = dir + ".old";
  // Everything goes to DIR.tmp; index.json is written last and the
  // directory renamed into place, so DIR is always a complete checkpoint
  // (the previous one, or this one) or absent.
  collectively([&] {
    if (rank != 0)
      return;
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!fs::create_directory(tmp, ec) || ec)
      throw Error("cannot create " + tmp + ": " + ec.message());
  });
  collectively([&] {
    // Each box once, from its first holder (shardedIndexJson lists the same).
    std::vector<NamedTensor> tensors;
    for (const ParamSpec &p : m.params)
      if (const Shard *s = p.shardOf(rank); s && p.firstHolder(*s) == rank)
        tensors.push_back({p.name, p.dtype, s->box.shape, buffers.at(p.name)});
    if (opts.train && writesOptimizerSlice(m, rank, distributed)) {
      Shape slice = {ownEnd - ownBegin};
      tensors.push_back({kShardedExpAvg, LOOMRT_F32, slice, expAvg});
      tensors.push_back({kShardedExpAvgSq, LOOMRT_F32, slice, expAvgSq});
      if (mixedPrecision)
        tensors.push_back({kShardedMainParam, LOOMRT_F32, slice, mainParams});
    }
    writeSafetensors(tmp + "/" + shardFileName(rank), tensors,
                     {{"format", "pt"}, {"loom.rank", std::to_string(rank)}});
  });
  collectively([&] {
    if (rank != 0)
      return;
    std::string index = shardedIndexJson(
        m, distributed, opts.train ? state.toJson() : std::string());
    std::string indexTmp = tmp + "/index.json.tmp";
    FILE *f = std::fopen(indexTmp.c_str(), "w");
    bool ok = f && std::fwrite(index.data(), 1, index.size(), f) == index.size();
    ok = f && std::fflush(f) == 0 && ::fsync(fileno(f)) == 0 && ok;
    if (f)
      ok = std::fclose(f) == 0 && ok;
    if (!ok || ::rename(indexTmp.c_str(), (tmp + "/index.json").c_str()) != 0)
      throw Error("cannot write " + tmp + "/index.json: " +
                  std::strerror(errno));
    syncDirectory(tmp);
    std::error_code ec;
    fs::remove_all(old, ec);
    if (fs::exists(dir))
      fs::rename(dir, old, ec);
    if (!ec)
      fs::rename(tmp, dir, ec);
    if (ec)
      throw Error("cannot move " + tmp + " to " + dir + ": " + ec.message());
    std::string parent = fs::path(dir).parent_path().string();
    syncDirectory(parent.empty() ? "." : parent);
    fs::remove_all(old, ec);
    std::printf("loom: saved sharded checkpoint %s (%d rank files) at "
                "iteration %" PRId64 "\n",
                dir.c_str(), worldSize, state.iteration);
    std::fflush(stdout);
  });
}

void Run::loadShardedParams() {
  const std::string &dir = opts.loadSharded;
  shardedIndex = readShardedIndex(dir, m);
  // Every rank's file must be there, even one this rank reads nothing from.
  std::map<int32_t, std::unique_ptr<SafetensorsFile>> files;
  auto fileOf = [&](int32_t writer) -> SafetensorsFile & {
    auto &f = files[writer];
    if (!f)
      f = std::make_unique<SafetensorsFile>(dir + "/" + shardFileName(writer));
    return *f;
  };
  fileOf(rank);
  for (const ParamSpec &p : m.params) {
    const Shard *s = p.shardOf(rank);
    if (!s)
      continue;
    // A replica's box is in the file of its first holder.
    int32_t writer = p.firstHolder(*s);
    SafetensorsFile &file = fileOf(writer);
    std::string path = dir + "/" + shardFileName(writer);
    auto it = file.tensors().find(p.name);
    if (it == file.tensors().end())
      throw Error("sharded checkpoint file " + path + " has no tensor \"" +
                  p.name + "\"");
    const SafetensorsFile::Tensor &t = it->second;
    if (t.dtypeName != safetensorsDTypeName(p.dtype) || t.shape != s->box.shape)
      throw Error("sharded checkpoint file " + path + ": tensor \"" + p.name +
                  "\" is " + t.dtypeName + " " + shapeString(t.shape) +
                  ", expected " + safetensorsDTypeName(p.dtype) + " " +
                  shapeString(s->box.shape));
    loomrt_copy(buffers.at(p.name), file.data() + t.begin, t.end - t.begin);
  }
}

void Run::loadShardedOptimizer() {
  const std::string &dir = opts.loadSharded;
  // A checkpoint saved without --train starts a fresh optimizer.
  if (shardedIndex.trainState.empty())
    return;
  state = TrainState::fromJson(shardedIndex.trainState,
                               "sharded checkpoint " + dir);
  resumed = true;
  // The slices the files of this rank's data-parallel group hold cover its
  // flat buffer (data-parallel rank 0's holds all of it without the
  // distributed optimizer); the saving run may have used the other
  // optimizer, so each rank takes its range from whichever files hold it.
  std::vector<int32_t> group = {rank};
  if (auto g = m.groupOf(m.gradientGroup, rank))
    group = *g->first;
  std::vector<std::pair<int64_t, int64_t>> read;
  for (int32_t peer : group) {
    if (!shardedIndex.slices[size_t(peer)])
      continue;
    const FlatSlice &saved = *shardedIndex.slices[size_t(peer)];
    int64_t lo = std::max(ownBegin, saved.begin);
    int64_t hi = std::min(ownEnd, saved.end);
    if (lo >= hi)
      continue;
    read.emplace_back(lo, hi);
    std::string path = dir + "/" + shardFileName(peer);
    SafetensorsFile file(path);
    std::vector<std::pair<const char *, float *>> parts = {
        {kShardedExpAvg, expAvg}, {kShardedExpAvgSq, expAvgSq}};
    if (mixedPrecision)
      parts.push_back({kShardedMainParam, mainParams});
    for (auto [name, buf] : parts) {
      auto it = file.tensors().find(name);
      Shape shape = {saved.end - saved.begin};
      if (it == file.tensors().end() || it->second.dtypeName != "F32" ||
          it->second.shape != shape)
        throw Error("sharded checkpoint file " + path + " lacks the F32 " +
                    shapeString(shape) + " tensor \"" + name + "\"");
      loomrt_copy(buf + (lo - ownBegin),
                  file.data() + it->second.begin +
                      (lo - saved.begin) * int64_t(sizeof(float)),
                  (hi - lo) * int64_t(sizeof(float)));
    }
  }
  std::sort(read.begin(), read.end());
  int64_t covered = ownBegin;
  for (auto [lo, hi] : read)
    if (lo <= covered)
      covered = std::max(covered, hi);
  if (covered < ownEnd)
    throw Error("sharded checkpoint " + dir + " holds no optimizer state for "
                "elements " + std::to_string(covered) + ".." +
                std::to_string(ownEnd) + " of rank " + std::to_string(rank) +
                "'s flat buffer in the files of its data-parallel group");
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

} // namespace

int driverMain(int argc, char **argv) {
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

} // namespace loom::driver
