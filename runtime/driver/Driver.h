//===- Driver.h - main() of every per-rank executable -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A per-rank executable is the compiler's object file (exporting the entry
// points the manifest names) linked with libloomrt_main (this driver) and a
// runtime backend. The driver owns everything around the compiled code:
// flags, MPI, communicators, parameter shards, data, the step loop, logging
// and checkpoints (docs/MANIFEST.md).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_DRIVER_DRIVER_H
#define LOOM_RUNTIME_DRIVER_DRIVER_H

#include "runtime/driver/Data.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::driver {

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
  std::optional<int64_t> lrWarmupSteps, lrDecaySteps;
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
};

/// The default peak learning rate of --train.
constexpr double kDefaultLr = 1e-3;

/// Where the optimizer state of checkpoint `path` lives: "x.safetensors"
/// -> "x.optim.safetensors", any other name gets ".optim.safetensors"
/// appended.
std::string optimizerStatePath(const std::string &path);

/// Parses the flags after argv[0]. Accepts "--flag value" and
/// "--flag=value". Throws Error for unknown flags and bad values.
Options parseOptions(const std::vector<std::string> &args);

/// The usage text printed by --help.
std::string usage(const std::string &tool);

/// The whole program; returns the process exit code.
int driverMain(int argc, char **argv);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_DRIVER_H
