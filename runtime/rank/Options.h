//===- Options.h - The flags of the per-rank executables --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Every flag of the rank program is defined once, in Options.cpp (with
// CLI11): its name, value, check and help. The rank program parses its
// command line there; loom-run forwards what it does not own verbatim and
// uses the same definitions (RankProgram.h) to check them before launching
// and to print them in its --help.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_OPTIONS_H
#define LOOM_RUNTIME_RANK_OPTIONS_H

#include "runtime/rank/Data.h"
#include "runtime/rank/LrStyle.h"
#include "runtime/rank/RankProgram.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::rank {

struct Options {
  std::string manifest; // empty: manifest.json next to the executable
  int64_t steps = 1;
  std::string data;     // empty: synthetic
  std::optional<RawFormat> dataFormat;
  uint64_t seed = 1234;
  std::string metricsJsonl;
  std::string load, save;
  // One file per rank plus index.json, for the same plan only.
  std::string loadSharded, saveSharded;
  // Megatron's --save-interval: --save / --save-sharded also every N
  // iterations (0: only at the end), each replacing the last atomically.
  int64_t saveInterval = 0;
  int32_t threads = 0; // 0: the runtime's default
  // Megatron's --distributed-timeout-minutes: a wait for other ranks that
  // lasts longer ends the job with a report (loomrt_set_timeout).
  double distributedTimeoutMinutes = 10;
  bool tracePipeline = false; // loomrt_set_trace
  // The runtime's profiler (loomrt_profile_begin_step): rank profileRank
  // prints a table of entry points per step after the run, and writes one
  // JSON object per step to profileJson. --profile-json implies --profile.
  bool profile = false;
  int32_t profileRank = 0;
  std::string profileJson;
  // Every N steps, check that all holders of a parameter box hold the same
  // bytes (Megatron's --check-weight-hash-across-dp-replicas-interval, over
  // every kind of replica); 0: never.
  int64_t checkWeightHashInterval = 0;
  bool help = false;

  // Training (--train): run the train_step entry and AdamW. The schedule
  // and optimizer flags are optional: a value not given comes from the
  // --load checkpoint, else from the defaults (AdamWConfig, kDefaultLr).
  bool train = false;
  std::optional<double> lr, minLr;
  // Megatron's schedule flags, counted in iterations (--lr-warmup-iters,
  // --lr-decay-iters; Loom's older names --lr-warmup-steps and
  // --lr-decay-steps are aliases), or the warmup as a fraction of the decay.
  std::optional<int64_t> lrWarmupSteps, lrDecaySteps;
  std::optional<double> lrWarmupFraction, lrWarmupInit;
  std::optional<LrDecayStyle> lrDecayStyle;
  std::optional<int64_t> lrWsdDecaySteps;
  std::optional<WsdDecayStyle> lrWsdDecayStyle;
  std::optional<double> weightDecay, adamBeta1, adamBeta2, adamEps;
  std::optional<double> clipGrad; // 0: no clipping
  // Dynamic loss scaling, f16 parameters only.
  double initialLossScale = 4294967296.0; // 2^32
  double minLossScale = 1.0;
  int64_t lossScaleWindow = 1000;
  int64_t hysteresis = 2;
  std::string dumpGrads; // gradients of the first step, safetensors
  // Validation (Megatron's --valid-data-path, --eval-interval,
  // --eval-iters): the forward loss of evalIters global batches of validData
  // every evalInterval iterations and after the last; each evaluation reads
  // the next batches.
  std::string validData;
  int64_t evalInterval = 1000, evalIters = 100;
  // Megatron-Core's DistributedOptimizer: reduce-scatter the main grads over
  // dp, AdamW on this rank's 1/dp slice, all-gather the parameters.
  bool useDistributedOptimizer = false;
  // Megatron's --calculate-per-token-loss: the gradient is that of the
  // step's global token mean (each micro-batch weighted by its loss tokens)
  // instead of the mean of the micro-batch means.
  bool calculatePerTokenLoss = false;
};

/// The default peak learning rate of --train.
constexpr double kDefaultLr = 1e-3;

/// Parses the flags after argv[0] ("--flag value" or "--flag=value"; a
/// repeated flag keeps its last value). Throws Error for unknown flags, bad
/// values and flags that need others.
Options parseOptions(const std::vector<std::string> &args);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_OPTIONS_H
