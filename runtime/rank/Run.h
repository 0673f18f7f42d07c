//===- Run.h - The rank program's state, shared by its parts ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Internal to runtime/rank: the class behind rankMain (Program.h), whose
// methods are split by concern over Program.cpp (setup, entry binding,
// main), RunTraining.cpp (training state, the optimizer step, weight
// hashes), RunBuckets.cpp (the gradient buckets' reduction and the
// distributed optimizer's all-gathers), RunSteps.cpp (batches, losses, the
// step loop and its log) and RunCheckpoints.cpp (--save, --save-sharded,
// --load-sharded).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_RUN_H
#define LOOM_RUNTIME_RANK_RUN_H

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/Data.h"
#include "runtime/rank/DeviceIO.h"
#include "runtime/rank/DistOptimizer.h"
#include "runtime/rank/GradBuckets.h"
#include "runtime/rank/Program.h"
#include "runtime/rank/Manifest.h"
#include "runtime/rank/Optimizer.h"
#include "runtime/rank/Options.h"
#include "runtime/rank/ShardedCheckpoint.h"
#include "runtime/rank/StageSharing.h"

#include "loomrt/loomrt.h"

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace loom::rank {

/// Thrown after a collective failure has been reported: unwinds to main.
struct JobFailed {};

using EntryFn = void (*)(void **);

/// A compiled entry bound to the rank program's buffers.
struct BoundEntry {
  EntryFn fn = nullptr;
  std::vector<void *> args;
  bool producesLoss = false;
  /// One call runs the whole step's micro-batches (a pipelined step).
  bool pipelined = false;
};

/// One parameter shard this rank trains. The f32 state of all of them lives
/// in flat buffers (main grads, moments, main params), so the data-parallel
/// all-reduce, the inf/nan check and unscaling are one call each per
/// bucket (GradBuckets.h).
struct TrainParam {
  size_t index = 0;         // in Manifest::params
  const ParamSpec *spec = nullptr;
  int64_t n = 0;            // elements of the shard
  int64_t offset = 0;       // in the flat main-grad buffer
  size_t bucket = 0;        // in Run::buckets: its gradient group's
  void *model = nullptr;    // the shard in the param dtype (entry argument)
  void *grad = nullptr;     // train_step's gradient output, in gradDtype
  loomrt_dtype gradDtype = LOOMRT_F32; // the param's, or the entry's dtype
  bool decay = false;       // takesWeightDecay
  // Counted in the grad norm: this rank is the first holder of its box or,
  // with the distributed optimizer, that holder is in this rank's group of
  // the bucket, whose slices hold every element exactly once.
  bool countsInNorm = false;
  /// A pipelined step's model chunk whose last backward completes this
  /// gradient (EntryArg::chunk); -1: complete when the step returns.
  int64_t chunk = -1;
};

/// One gradient bucket as the rank program runs it.
struct TrainBucket : GradBucket {
  loomrt_comm comm = nullptr; // its group's; null for a group of one rank
  /// The pieces of its slice: FlatPiece::param indexes Run::trained, and
  /// flatOffset is in the flat buffer.
  std::vector<FlatPiece> owned;
};

/// What one step produced, for the log.
/// Micro-batch losses weighted by their loss tokens: Megatron logs the
/// token-weighted mean over micro-batches and data-parallel ranks.
struct LossTally {
  double weighted = 0.0; // sum of loss x this rank's loss tokens
  double tokens = 0.0;   // this rank's loss tokens (its cp chunk's)
};

/// A train step's scalars in backend memory, summed over the world by one
/// all-reduce and read back once (RunTraining.cpp): the gradient's sum of
/// squares, the loss weighted by its tokens and those tokens, the routers'
/// losses (loomrt_metrics).
enum StepStat : int64_t {
  kSumSquares = 0,
  kLossWeighted = 1,
  kLossTokens = 2,
  kMetrics = 3,
  kStepStats = kMetrics + LOOMRT_NUM_METRICS
};

struct StepResult {
  /// The token-weighted mean loss over micro-batches and data-parallel (and
  /// cp) ranks; 0 without loss tokens.
  float meanLoss = 0.0f;
  double lr = 0.0;
  std::optional<double> gradNorm; // none for a skipped update
  bool skipped = false;
  /// The routers' losses without their coefficients, averaged over MoE
  /// layers, micro-batches and data-parallel replicas (Megatron's
  /// load_balancing_loss and z_loss); none without them.
  std::optional<double> loadBalancingLoss, zLoss;
};

const char *const kMomentPrefixes[] = {"optimizer.exp_avg.",
                                       "optimizer.exp_avg_sq."};
const char *const kMainParamPrefix = "optimizer.main_param.";

/// The rank program: its flags, manifest, communicators, parameter shards,
/// training state, data and checkpoints, and the steps over them. Setup and
/// main() are in Program.cpp, the optimizer in RunTraining.cpp, the step
/// loop and its log in RunSteps.cpp, checkpoints in RunCheckpoints.cpp.
class Run {
public:
  Run(int argc, char **argv);
  ~Run();

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
  /// Reads micro-batch `micro` of step `step` into `batch` and the input
  /// slot `entry` reads it from, records its loss tokens in microTokens; a
  /// bad token aborts the job (only this rank sees the samples).
  void readBatch(const BoundEntry &entry, const BatchReader &from,
                 int64_t step, int64_t micro);
  /// The buffer slot of micro-batch `micro` for `entry`.
  static size_t slotOf(const BoundEntry &entry, int64_t micro) {
    return entry.pipelined ? size_t(micro) : 0;
  }
  /// all_reduce(op) of one host value over `comm` (collectives take backend
  /// memory: it crosses through dev.scalar).
  float allReduceScalar(loomrt_comm comm, int32_t op, float value);
  /// The same for two values at once (one host wait).
  std::pair<float, float> allReduceScalars(loomrt_comm comm, int32_t op,
                                           float a, float b);
  /// The routers' losses of the step from the world's sums of
  /// loomrt_metrics, into `result`.
  void takeRouterLosses(const float *sums, StepResult &result);
  /// The token-weighted mean loss of `tally` over the gradient group (dp,
  /// or dp x cp: every cp rank adds its chunk's tokens with the micro-batch
  /// loss, which is the whole sequence's). Collective over that group.
  float meanLoss(const LossTally &tally);
  /// --calculate-per-token-loss: each micro-batch's gradient weight,
  /// lossScale x dp x (its loss tokens over cp) / (the step's loss tokens
  /// over dp and cp), so that the gradient is that of the global token mean.
  std::vector<float> perTokenGradScales(const BatchReader &from, int64_t step,
                                        double lossScale);
  /// The loss of micro-batch `micro` that the last call of `entry` wrote
  /// (the previous value when it computes none).
  float takeLoss(const BoundEntry &entry, int64_t micro);
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
  /// Adds the squares of the gradient elements this rank counts for the
  /// norm to the f32 scalar `acc` in backend memory.
  void addGradSumSquares(float *acc);
  /// The data-parallel reduction of the main gradients after a step (of
  /// the runs not reduced during it), ending with every reduction done.
  void reduceGradients();
  /// loomrt_grads_ready's hook: chunk `chunk`'s gradients are final, so
  /// they join the main gradients and their reduction starts.
  static void onGradsReady(void *run, int64_t chunk);
  void gradsReady(int64_t chunk);
  /// Issues the reduction of flat main-gradient elements `run`, each
  /// bucket's part over its group (all-reduce, or reduce-scatter into the
  /// optimizer's slice).
  void startReduction(const FlatRun &run);
  /// --check-weight-hash-interval: every rank compares the hash of each of
  /// its shards with that of the box's first holder; a difference is an
  /// error naming the parameter and both ranks.
  void checkWeightHashes();
  /// Distributed optimizer: all-gathers each bucket's slices of an f32
  /// buffer laid out as the optimizer state (stateSize) into `full`, laid
  /// out as the flat buffer (flatSize).
  void allGatherFlat(const float *slice, float *full);
  /// Distributed optimizer: the owners' updated parameters to every rank
  /// of each bucket's group, into the model buffers.
  void allGatherParams();
  /// All-gathers bucket `b`'s slices (shardSize elements of `dtype` each)
  /// over its group; a copy for a group of one rank.
  void gatherBucket(const TrainBucket &b, loomrt_dtype dtype, const void *send,
                    void *recv);
  /// Where an owned piece lies in the optimizer state buffers (expAvg,
  /// expAvgSq, mainParams, ownGrads).
  static int64_t stateOffset(const TrainBucket &b, const FlatPiece &piece) {
    return b.stateBase + (piece.flatOffset - b.ownBegin());
  }
  /// The f32 main parameters of an owned piece: the model buffer itself
  /// for f32 parameters.
  float *mainOf(const TrainBucket &b, const FlatPiece &piece) const;
  /// Fills adamwTables from the owned pieces (once, after the settings).
  void buildAdamwTables();
  void reportOptimizerMemory();
  void save();
  /// Test hook: rank 0 dies between a save's two renames when told to
  /// (LOOM_TEST_KILL_BETWEEN_RENAMES, RunCheckpoints.cpp).
  void killBetweenRenamesForTests() const;
  /// Test hook: a host read of backend memory when told to
  /// (LOOM_TEST_PLANT_HOST_ACCESS, RunSteps.cpp).
  void plantHostAccessForTests(const void *device) const;
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
  // by readBatch), the loss (copied out by takeLoss), grad_scale, one slot
  // per micro-batch for pipelined entries (else one); and the float that
  // host values cross collectives in (allReduceScalar).
  struct {
    SlotBuffer tokens, labels, lossMask, loss, gradScale;
    /// Host values crossing a collective (allReduceScalars: up to 2).
    DeviceBuffer scalar;
    /// A train step's scalars (StepStat), read back once.
    DeviceBuffer stepStats;
  } dev;
  /// The entries' workspace (Entry::workspaceBytes): the largest any entry
  /// of this rank needs, allocated once by bind().
  DeviceBuffer workspace;
  /// Each micro-batch's loss tokens on this rank, as readBatch found them.
  std::vector<double> microTokens;
  float loss = 0.0f;
  FILE *metrics = nullptr;
  int64_t dpSize = 1, dpRank = 0;
  // The size of the group the dense gradients are reduced over and the
  // distributed optimizer shards them over: dp, or with context
  // parallelism dp x cp (each bucket has its group, GradBuckets.h).
  int64_t gradSize = 1;
  int64_t samplesPerStep = 1;

  // Training (--train).
  // Held parameters in the flat buffers' layout (GradBuckets.h): bucket by
  // bucket, the gradient group's first, those shared with other pipeline
  // stages at its start.
  std::vector<TrainParam> trained;
  /// train_step's gradient outputs, allocated in runs: consecutive params
  /// of one bucket, gradient dtype and chunk lie in one buffer in the flat
  /// main-grad layout, so each run joins the main gradients in one call.
  struct GradRun {
    int64_t offset = 0, n = 0; // in the flat main-grad buffer
    loomrt_dtype dtype = LOOMRT_F32;
    int64_t chunk = -1;
    void *base = nullptr;
  };
  std::vector<GradRun> gradRuns;
  void allocateGradRuns();
  int64_t trainedElements = 0;
  StageSharing sharing;       // the tied embedding of first and last stage
  int64_t sharedElements = 0; // the shared parameters' prefix of the buffer
  float *mainGrads = nullptr, *expAvg = nullptr, *expAvgSq = nullptr;
  float *mainParams = nullptr; // only when some parameter is not f32
  // The optimizer's share of each bucket: all of it, or with
  // --use-distributed-optimizer and dp > 1 its slice over the bucket's
  // group (Megatron-Core's DistributedOptimizer, with a dense and an expert
  // buffer). expAvg, expAvgSq, mainParams and ownGrads hold the slices one
  // after the other (stateSize elements; stateOffset); mainGrads holds the
  // buckets whole (flatSize). Without the distributed optimizer the two
  // layouts are the same.
  bool distributed = false;
  std::vector<TrainBucket> buckets;
  int64_t flatSize = 0, stateSize = 0;
  float *gradShard = nullptr;   // the reduce-scatter's output (distributed)
  // Overlapped reduction of a pipelined step (Megatron's
  // overlap_grad_reduce): each chunk's runs of the flat buffer, reduced as
  // soon as the compiled step signals the chunk; the runs no chunk covers
  // (and the pad), reduced after the step; the reductions in flight.
  std::map<int64_t, std::vector<FlatRun>> chunkRuns;
  std::vector<FlatRun> lateRuns;
  std::set<int64_t> signalledChunks;
  std::vector<loomrt_request> inFlight;
  float *ownGrads = nullptr;    // reduced main grads of the owned slices
  // The optimizer's tensors, one loomrt_adamw_multi call per table a step:
  // the owned pieces, with the model copy each writes (none for f32
  // parameters and sliced buckets), one table per dtype of those copies.
  struct AdamwTable {
    std::optional<loomrt_dtype> modelDtype; // none yet: takes any
    std::vector<loomrt_adamw_tensor> tensors;
  };
  std::vector<AdamwTable> adamwTables;
  loomrt_dtype gatherDtype = LOOMRT_F32; // of the parameter all-gather
  bool mixedPrecision = false; // f32 main params apart from the model's
  bool dynamicScaling = false; // f16: DynamicLossScaler
  TrainState state;            // where training stands (checkpointed)
  bool resumed = false;        // the optimizer state came from --load
  ShardedIndex shardedIndex;   // --load-sharded
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_RUN_H
