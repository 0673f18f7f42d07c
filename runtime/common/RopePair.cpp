//===- RopePair.cpp - q's and k's rotations in one entry point ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loomrt_rope_pair_forward / _backward, the same on every backend: the
// backend's single rotation, once per tensor. One entry point for the
// compiled code (tfm.rope_pair); a backend that rotates both in one kernel
// can take these over.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Composed.h"

#include "runtime/abi/Common.h.inc"

#include <initializer_list>
#include <tuple>

using namespace loomrt;

void common::loomrt_rope_pair_forward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t N1, int64_t N2, int64_t D,
    int64_t rot_dim, float theta, int32_t scaling, float factor,
    float low_freq_factor, float high_freq_factor,
    int64_t original_max_positions, const int32_t *pos, const void *x1,
    const void *x2, void *y1, void *y2) {
  for (auto [N, x, y] : {std::tuple(N1, x1, y1), std::tuple(N2, x2, y2)})
    ::loomrt_rope_forward(dtype, B, S, N, D, rot_dim, theta, scaling, factor,
                          low_freq_factor, high_freq_factor,
                          original_max_positions, pos, x, y);
}

void common::loomrt_rope_pair_backward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t N1, int64_t N2, int64_t D,
    int64_t rot_dim, float theta, int32_t scaling, float factor,
    float low_freq_factor, float high_freq_factor,
    int64_t original_max_positions, const int32_t *pos, const void *dy1,
    const void *dy2, void *dx1, void *dx2) {
  for (auto [N, dy, dx] : {std::tuple(N1, dy1, dx1), std::tuple(N2, dy2, dx2)})
    ::loomrt_rope_backward(dtype, B, S, N, D, rot_dim, theta, scaling, factor,
                           low_freq_factor, high_freq_factor,
                           original_max_positions, pos, dy, dx);
}
