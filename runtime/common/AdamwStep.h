//===- AdamwStep.h - One AdamW update for both backends ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The arithmetic of loomrt_adamw and loomrt_adamw_multi, written once for
// both backends (host code on cpu, device code on cuda) so that every path
// rounds alike: torch.optim.AdamW's single-tensor operation order (1.13),
// whose results it matches to the last bit or two.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_COMMON_ADAMWSTEP_H
#define LOOM_RUNTIME_COMMON_ADAMWSTEP_H

#include "runtime/common/ClipCoefficient.h"

#include <cmath>
#include <cstdint>

namespace loomrt {

/// What every tensor of one step shares, computed once on the host.
struct AdamwStep {
  float lr, beta1, beta2, eps;
  float stepSize; // lr / (1 - beta1^step)
  float bc2Sqrt;  // sqrt(1 - beta2^step)

  AdamwStep(float lr, float beta1, float beta2, float eps, int64_t step)
      : lr(lr), beta1(beta1), beta2(beta2), eps(eps),
        stepSize(lr / (1.0f - std::pow(beta1, float(step)))),
        bc2Sqrt(std::sqrt(1.0f - std::pow(beta2, float(step)))) {}

  /// The factor decoupled weight decay multiplies the parameters by.
  float decay(float weightDecay) const { return 1.0f - lr * weightDecay; }
};

/// Whether the step runs given the gradient's sum of squares in backend
/// memory (NULL: no check), and its clip coefficient: a non-finite sum
/// skips it (Megatron's skipped iteration).
LOOMRT_HOST_DEVICE inline bool adamwRuns(const float *sumSquares, float maxNorm,
                                         float &clip) {
  clip = 1.0f;
  if (!sumSquares)
    return true;
  const float s = *sumSquares;
  if (!isfinite(s))
    return false;
  clip = clipCoefficient(s, maxNorm);
  return true;
}

/// Element i of one tensor; returns the new parameter.
LOOMRT_HOST_DEVICE inline float adamwElement(const AdamwStep &s, float clip,
                                             float decay, float *param,
                                             const float *grad, float *m1,
                                             float *m2, int64_t i) {
  const float g = clip == 1.0f ? grad[i] : grad[i] * clip;
  const float p = param[i] * decay;
  const float m = s.beta1 * m1[i] + (1.0f - s.beta1) * g;
  const float v = m2[i] * s.beta2 + (1.0f - s.beta2) * g * g;
  const float denom = sqrtf(v) / s.bc2Sqrt + s.eps;
  const float updated = p - s.stepSize * (m / denom);
  param[i] = updated;
  m1[i] = m;
  m2[i] = v;
  return updated;
}

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_ADAMWSTEP_H
