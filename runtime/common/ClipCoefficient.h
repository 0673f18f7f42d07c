//===- ClipCoefficient.h - Megatron's gradient clipping coefficient -------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One definition for both backends' AdamW (host code on cpu, device code on
// cuda), which read the gradient's sum of squares in backend memory.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_COMMON_CLIPCOEFFICIENT_H
#define LOOM_RUNTIME_COMMON_CLIPCOEFFICIENT_H

#include <math.h>

#ifdef __CUDACC__
#define LOOMRT_HOST_DEVICE __host__ __device__
#else
#define LOOMRT_HOST_DEVICE
#endif

namespace loomrt {

/// clip_grad_norm_fp32: the gradients are multiplied by max_norm / (norm +
/// 1e-6) when that is below 1, else by 1 (always 1 when maxNorm <= 0,
/// clipping off); norm = sqrt(sumSquares), in double as Megatron's is.
LOOMRT_HOST_DEVICE inline float clipCoefficient(float sumSquares,
                                                float maxNorm) {
  if (maxNorm <= 0.0f)
    return 1.0f;
  const double coeff = double(maxNorm) / (sqrt(double(sumSquares)) + 1.0e-6);
  return coeff < 1.0 ? float(coeff) : 1.0f;
}

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_CLIPCOEFFICIENT_H
