//===- Optimizer.h - Training math of the rank program ----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The pieces of a training step that are plain arithmetic on scalars, kept
// apart from the step loop so that unit tests pin them to Megatron-LM:
//   - the learning-rate schedule (OptimizerParamScheduler, every style),
//   - the no-weight-decay rule (biases and 1-D parameters),
//   - the gradient-clipping coefficient (clip_grad_norm_fp32),
//   - the dynamic loss scaler (DynamicGradScaler),
//   - the training state stored next to a checkpoint (TrainState).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_OPTIMIZER_H
#define LOOM_RUNTIME_RANK_OPTIMIZER_H

#include "runtime/rank/LrStyle.h"
#include "runtime/rank/Manifest.h"

#include <cstdint>
#include <optional>
#include <string>

namespace loom::rank {

/// Megatron's OptimizerParamScheduler.get_lr, counted in optimizer updates
/// instead of samples (Megatron steps it by the global batch size, so the
/// ratios are the same). `numSteps` is the number of updates already applied
/// (Megatron calls the scheduler after each successful update, so update k,
/// 1-based, uses lr(k - 1)). In order:
///   warmup > 0 and numSteps <= warmup:  initLr + (maxLr - initLr) *
///                                       numSteps / warmup
///   constant:                           maxLr
///   numSteps > decaySteps:              minLr
///   inverse-square-root:                max(minLr, maxLr * sqrt(max(warmup,
///                                       1)) / sqrt(max(numSteps, 1)))
///   otherwise, with r = (numSteps - warmup) / (decaySteps - warmup),
///   minLr + (maxLr - minLr) * coeff where coeff is
///     linear: 1 - r;  cosine: (cos(pi r) + 1) / 2;
///     WSD: 1 until decaySteps - wsdDecaySteps, then, with w the fraction
///     of the last wsdDecaySteps gone, exponential 2 * 0.5^w - 1, linear
///     1 - w, cosine (cos(pi w) + 1) / 2, minus_sqrt 1 - sqrt(w).
/// The warmup may be fractional (--lr-warmup-fraction times decaySteps), as
/// in Megatron. With warmup > 0 the first update has lr initLr.
struct LrSchedule {
  double maxLr = 1e-3;
  double minLr = 0.0;
  double warmupSteps = 0;
  int64_t decaySteps = 0;
  LrDecayStyle style = LrDecayStyle::Linear; // Megatron's default
  double initLr = 0.0;                       // --lr-warmup-init
  int64_t wsdDecaySteps = 0;                 // WSD only
  WsdDecayStyle wsdStyle = WsdDecayStyle::Exponential;
  double at(int64_t numSteps) const;
};

/// Megatron's default no_weight_decay_cond: biases and every 1-D parameter
/// (norm weights) take no weight decay. `shape` is the global shape.
bool takesWeightDecay(const std::string &name, const Shape &shape);

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
  /// --lr-warmup-fraction when it set the warmup: a resumed run without
  /// warmup flags takes this fraction of its own decay length again.
  std::optional<double> warmupFraction;
  AdamWConfig adamw;
  bool hasScaler = false;
  DynamicLossScaler scaler;

  std::string toJson() const;
  /// Throws Error naming `what` for malformed text.
  static TrainState fromJson(const std::string &text, const std::string &what);
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_OPTIMIZER_H
