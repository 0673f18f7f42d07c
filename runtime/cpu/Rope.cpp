//===- Rope.cpp - Rotary embedding, position/document ids -------*- C++ -*-===//
//
// RoPE in the Hugging Face Llama "rotate half" layout, computed in f32 the
// way transformers does (inv_freq, rescaled for Llama 3.x, then angle =
// pos * inv_freq, then cos/sin), so the result matches it to rounding.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/common/SequencePositions.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <cmath>

using namespace loomrt;

namespace {
/// The frequency scaling of a call (loomrt_rope_scaling and its numbers).
struct Scaling {
  int32_t kind;
  float factor, low, high;
  int64_t original;
};

constexpr double kTwoPi = 6.283185307179586; // Python's 2 * math.pi

/// transformers' _compute_llama3_parameters for one frequency, in f32 as
/// torch evaluates it (`2 * math.pi / inv_freq` is reciprocal(inv_freq) *
/// 2 pi; the thresholds are python floats compared in f32). The cuda
/// backend's llama3InvFreq is the same code.
float llama3InvFreq(float invFreq, const Scaling &s) {
  const float wavelen = (1.0f / invFreq) * float(kTwoPi);
  const float lowWavelen = float(double(s.original) / double(s.low));
  const float highWavelen = float(double(s.original) / double(s.high));
  if (wavelen > lowWavelen)
    return invFreq / s.factor;
  if (wavelen < highWavelen)
    return invFreq;
  const float smooth = ((1.0f / wavelen) * float(s.original) - s.low) /
                       float(double(s.high) - double(s.low));
  return (1.0f - smooth) * invFreq / s.factor + smooth * invFreq;
}

void rope(loomrt_dtype dtype, int64_t B, int64_t S, int64_t N, int64_t D,
          int64_t rotDim, float theta, const Scaling &scaling,
          const int32_t *pos, const void *x, void *y, float sign) {
  const int64_t total = B * S * N * D;
  if (total == 0)
    return;
  const int64_t half = rotDim / 2;
  std::vector<float> invFreq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    float f = 1.0f / std::pow(theta, float(2 * i) / float(rotDim));
    invFreq[size_t(i)] =
        scaling.kind == LOOMRT_ROPE_LLAMA3 ? llama3InvFreq(f, scaling) : f;
  }
  In xf(dtype, x, total);
  Out yf(dtype, y, total, false);
#pragma omp parallel
  {
    std::vector<float> cosv(static_cast<size_t>(half)),
        sinv(static_cast<size_t>(half));
#pragma omp for schedule(static)
    for (int64_t bs = 0; bs < B * S; ++bs) {
      float p = pos ? float(pos[bs]) : float(bs % S);
      for (int64_t i = 0; i < half; ++i) {
        float a = p * invFreq[size_t(i)];
        cosv[size_t(i)] = std::cos(a);
        sinv[size_t(i)] = sign * std::sin(a);
      }
      for (int64_t h = 0; h < N; ++h) {
        const float *xr = xf.get() + (bs * N + h) * D;
        float *yr = yf.get() + (bs * N + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          float x1 = xr[i], x2 = xr[i + half];
          yr[i] = x1 * cosv[size_t(i)] - x2 * sinv[size_t(i)];
          yr[i + half] = x2 * cosv[size_t(i)] + x1 * sinv[size_t(i)];
        }
        for (int64_t i = rotDim; i < D; ++i)
          yr[i] = xr[i];
      }
    }
  }
  yf.commit();
}
} // namespace

void loomrt::backend::loomrt_rope_forward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t N, int64_t D,
    int64_t rot_dim, float theta, int32_t scaling, float factor,
    float low_freq_factor, float high_freq_factor,
    int64_t original_max_positions, const int32_t *pos, const void *x,
    void *y) {
  LOOMRT_DEVICE_CALL(pos, x, y);
  rope(dtype, B, S, N, D, rot_dim, theta,
       {scaling, factor, low_freq_factor, high_freq_factor,
        original_max_positions},
       pos, x, y, 1.0f);
}

// The rotation is orthogonal, so its transpose (rotation by -a) is the
// gradient map.
void loomrt::backend::loomrt_rope_backward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t N, int64_t D,
    int64_t rot_dim, float theta, int32_t scaling, float factor,
    float low_freq_factor, float high_freq_factor,
    int64_t original_max_positions, const int32_t *pos, const void *dy,
    void *dx) {
  LOOMRT_DEVICE_CALL(pos, dy, dx);
  rope(dtype, B, S, N, D, rot_dim, theta,
       {scaling, factor, low_freq_factor, high_freq_factor,
        original_max_positions},
       pos, dy, dx, -1.0f);
}

void loomrt::backend::loomrt_document_ids(int64_t B, int64_t S,
                                          const int32_t *tokens, int32_t eod,
                                          int32_t *doc) {
  LOOMRT_DEVICE_CALL(tokens, doc);
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = 0;
    for (int64_t s = 0; s < S; ++s) {
      doc[b * S + s] = id;
      if (tokens[b * S + s] == eod)
        ++id; // The EOD itself stays in the document it ends.
    }
  }
}

void loomrt::backend::loomrt_position_ids(int64_t B, int64_t S,
                                          const int32_t *tokens, int32_t eod,
                                          int32_t reset, int32_t *pos) {
  LOOMRT_DEVICE_CALL(tokens, pos);
  for (int64_t b = 0; b < B; ++b) {
    int32_t p = 0;
    for (int64_t s = 0; s < S; ++s) {
      pos[b * S + s] = p++;
      if (reset && tokens[b * S + s] == eod)
        p = 0;
    }
  }
}

void loomrt::backend::loomrt_sequence_positions(int64_t B, int64_t L,
                                                int64_t start, int64_t chunk,
                                                int32_t /*num_chunks*/,
                                                const int64_t *order,
                                                int32_t *pos) {
  LOOMRT_DEVICE_CALL(pos);
  if (B * L != 0)
    fillSequencePositions(B, L, start, chunk, order, pos);
}

void loomrt::backend::loomrt_gather_positions(int64_t B, int64_t S, int64_t L,
                                              const int32_t *src,
                                              const int32_t *idx,
                                              int32_t *dst) {
  LOOMRT_DEVICE_CALL(src, idx, dst);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < L; ++i) {
      int32_t j = idx[b * L + i];
      LOOMRT_CHECK(j >= 0 && j < S, "position %d outside [0, %lld)", int(j),
                   (long long)S);
      dst[b * L + i] = src[b * S + j];
    }
}
