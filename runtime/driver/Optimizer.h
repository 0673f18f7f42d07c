//===- Optimizer.h - Training math of the driver ----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The pieces of a training step that are plain arithmetic on scalars, kept
// apart from the step loop so that unit tests pin them to Megatron-LM:
//   - the learning-rate schedule (OptimizerParamScheduler, cosine style),
//   - the no-weight-decay rule (biases and 1-D parameters),
//   - the gradient-clipping coefficient (clip_grad_norm_fp32),
//   - the dynamic loss scaler (DynamicGradScaler),
//   - the training state stored next to a checkpoint (TrainState).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_DRIVER_OPTIMIZER_H
#define LOOM_RUNTIME_DRIVER_OPTIMIZER_H

#include "runtime/driver/Manifest.h"

#include <cstdint>
#include <string>

namespace loom::driver {

/// Megatron's OptimizerParamScheduler with lr_decay_style "cosine" and
/// lr_warmup_init 0. `numSteps` is the number of optimizer updates already
/// applied (Megatron calls the scheduler after each successful update, so
/// update k, 1-based, uses lr(k - 1)):
///   numSteps <= warmup (warmup > 0):  maxLr * numSteps / warmup
///   numSteps >  decaySteps:           minLr
///   otherwise, r = (numSteps - warmup) / (decaySteps - warmup):
///                                     minLr + (maxLr - minLr) *
///                                     0.5 * (cos(pi * r) + 1)
/// With warmup > 0 the first update therefore has lr 0, as in Megatron.
struct LrSchedule {
  double maxLr = 1e-3;
  double minLr = 0.0;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0;
  double at(int64_t numSteps) const;
};

/// Megatron's default no_weight_decay_cond: biases and every 1-D parameter
/// (norm weights) take no weight decay. `shape` is the global shape.
bool takesWeightDecay(const std::string &name, const Shape &shape);

/// clip_grad_norm_fp32: the gradients are multiplied by the result, which is
/// clip / (norm + 1e-6) when that is below 1 and 1 otherwise (and always 1
/// when clip <= 0, clipping off).
double clipCoefficient(double totalNorm, double clip);

/// Megatron's DynamicGradScaler (fp16 only). On overflow the growth tracker
/// restarts and, once `hysteresis` overflows have been seen since the last
/// growth, the scale is multiplied by `backoff` (not below `minScale`);
/// after `growthInterval` clean steps in a row it is multiplied by `growth`
/// and the hysteresis budget refills.
struct DynamicLossScaler {
  double scale = 4294967296.0; // 2^32
  double minScale = 1.0;
  double growth = 2.0, backoff = 0.5;
  int64_t growthInterval = 1000;
  int64_t hysteresis = 2;
  // State (saved in checkpoints).
  int64_t growthTracker = 0;
  int64_t hysteresisTracker = 2;

  void update(bool foundNonfinite);
};

/// AdamW and clipping settings (Megatron's defaults).
struct AdamWConfig {
  double weightDecay = 0.01;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double clipGrad = 1.0; // 0: no clipping
};

/// What a checkpoint records beyond tensors: where training is (for the
/// data and the schedule), the optimizer settings and the scaler.
/// Serialized as one JSON string in the optimizer file's safetensors
/// metadata ("loom.train_state").
struct TrainState {
  int64_t iteration = 0;        // steps run (skipped ones included)
  int64_t consumedSamples = 0;  // samples read, over all data-parallel ranks
  int64_t consumedValidSamples = 0; // validation samples evaluated so far
  int64_t optimizerSteps = 0;   // successful updates: AdamW's step, lr position
  int64_t skippedIterations = 0;
  LrSchedule schedule;
  /// Whether schedule.decaySteps was given (--lr-decay-steps) rather than
  /// defaulted to the end of the saving run; a default is not carried over
  /// (saved as null), as the resumed run has its own end.
  bool decayStepsGiven = false;
  AdamWConfig adamw;
  bool hasScaler = false;
  DynamicLossScaler scaler;

  std::string toJson() const;
  /// Throws Error naming `what` for malformed text.
  static TrainState fromJson(const std::string &text, const std::string &what);
};

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_OPTIMIZER_H
