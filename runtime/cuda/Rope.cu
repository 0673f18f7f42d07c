//===- Rope.cu - Rotary embedding, position/document ids -------*- CUDA -*-===//
//
// RoPE in the Hugging Face Llama "rotate half" layout, computed in f32 the
// way the cpu backend and transformers do: inv_freq (rescaled for Llama
// 3.x), then angle = pos * inv_freq, then cos/sin (full-precision
// sinf/cosf, no fast math).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/common/SequencePositions.h"
#include "runtime/cuda/Common.h"

#include <vector>

using namespace loomrt;

namespace {
/// The frequency scaling of a call (loomrt_rope_scaling and its numbers),
/// passed to the kernel by value.
struct Scaling {
  int32_t kind;
  float factor, low, high;
  int64_t original;
};

constexpr double kTwoPi = 6.283185307179586; // Python's 2 * math.pi

/// transformers' _compute_llama3_parameters for one frequency, in f32 as
/// torch evaluates it; the same code as the cpu backend's llama3InvFreq.
__device__ float llama3InvFreq(float invFreq, const Scaling &s) {
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

/// One thread per rotated pair (and per copied feature beyond rot_dim);
/// the thread reads both elements of its pair before writing, so y may
/// alias x.
__global__ void ropeKernel(loomrt_dtype dt, int64_t BS, int64_t S, int64_t N,
                           int64_t D, int64_t rotDim, float theta,
                           Scaling scaling, const int32_t *pos, const void *x,
                           void *y, float sign) {
  const int64_t half = rotDim / 2, perHead = half + (D - rotDim);
  GRID_STRIDE(e, BS * N * perHead) {
    const int64_t bs = e / (N * perHead), h = (e / perHead) % N,
                  i = e % perHead;
    const int64_t base = (bs * N + h) * D;
    if (i >= half) { // a feature past rot_dim: copied
      const int64_t k = base + rotDim + (i - half);
      st(y, dt, k, ld(x, dt, k));
      continue;
    }
    const float p = pos ? float(pos[bs]) : float(bs % S);
    // pow in double, rounded once: the correctly rounded powf of glibc that
    // the cpu backend uses (CUDA's powf may be 2 ulp off, which positions in
    // the thousands would amplify into visible angle errors).
    const float pw =
        float(pow(double(theta), double(float(2 * i) / float(rotDim))));
    const float invFreq = scaling.kind == LOOMRT_ROPE_LLAMA3
                              ? llama3InvFreq(1.0f / pw, scaling)
                              : 1.0f / pw;
    const float a = p * invFreq;
    const float c = cosf(a), s = sign * sinf(a);
    const float x1 = ld(x, dt, base + i), x2 = ld(x, dt, base + i + half);
    st(y, dt, base + i, x1 * c - x2 * s);
    st(y, dt, base + i + half, x2 * c + x1 * s);
  }
}

void rope(loomrt_dtype dtype, int64_t B, int64_t S, int64_t N, int64_t D,
          int64_t rotDim, float theta, const Scaling &scaling,
          const int32_t *pos, const void *x, void *y, float sign) {
  const int64_t pairs = B * S * N * (rotDim / 2 + (D - rotDim));
  if (B * S * N == 0)
    return;
  ropeKernel<<<gridFor(pairs), kThreads, 0, stream()>>>(
      dtype, B * S, S, N, D, rotDim, theta, scaling, pos, x, y, sign);
  CUDA_CHECK_LAUNCH();
}

/// One thread per batch row walks the sequence: the ids depend on every
/// earlier token of the row, and the work is tiny (once per micro-batch).
__global__ void documentIds(int64_t B, int64_t S, const int32_t *tokens,
                            int32_t eod, int32_t *doc) {
  GRID_STRIDE(b, B) {
    int32_t id = 0;
    for (int64_t s = 0; s < S; ++s) {
      doc[b * S + s] = id;
      if (tokens[b * S + s] == eod)
        ++id; // The EOD itself stays in the document it ends.
    }
  }
}

__global__ void gatherPositions(int64_t B, int64_t S, int64_t L,
                                const int32_t *src, const int32_t *idx,
                                int32_t *dst) {
  GRID_STRIDE(e, B * L) {
    int64_t b = e / L;
    int32_t j = idx[e];
    // Out of range indices (a bad layout) read position 0 of the row; the
    // cpu backend aborts on them.
    dst[e] = src[b * S + (j >= 0 && j < S ? j : 0)];
  }
}

__global__ void positionIds(int64_t B, int64_t S, const int32_t *tokens,
                            int32_t eod, int32_t reset, int32_t *pos) {
  GRID_STRIDE(b, B) {
    int32_t p = 0;
    for (int64_t s = 0; s < S; ++s) {
      pos[b * S + s] = p++;
      if (reset && tokens[b * S + s] == eod)
        p = 0;
    }
  }
}
} // namespace

void loomrt::backend::loomrt_rope_forward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t N, int64_t D,
    int64_t rot_dim, float theta, int32_t scaling, float factor,
    float low_freq_factor, float high_freq_factor,
    int64_t original_max_positions, const int32_t *pos, const void *x,
    void *y) {
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
  rope(dtype, B, S, N, D, rot_dim, theta,
       {scaling, factor, low_freq_factor, high_freq_factor,
        original_max_positions},
       pos, dy, dx, -1.0f);
}

void loomrt::backend::loomrt_document_ids(int64_t B, int64_t S,
                                          const int32_t *tokens, int32_t eod,
                                          int32_t *doc) {
  if (B * S == 0)
    return;
  documentIds<<<gridFor(B, 32), 32, 0, stream()>>>(B, S, tokens, eod, doc);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_position_ids(int64_t B, int64_t S,
                                          const int32_t *tokens, int32_t eod,
                                          int32_t reset, int32_t *pos) {
  if (B * S == 0)
    return;
  positionIds<<<gridFor(B, 32), 32, 0, stream()>>>(B, S, tokens, eod, reset,
                                                   pos);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_sequence_positions(int64_t B, int64_t L,
                                                int64_t start, int64_t chunk,
                                                int32_t /*num_chunks*/,
                                                const int64_t *order,
                                                int32_t *pos) {
  if (B * L == 0)
    return;
  // A few positions per step, computed on the host (order is a host array)
  // and copied once.
  std::vector<int32_t> host(size_t(B * L));
  fillSequencePositions(B, L, start, chunk, order, host.data());
  CUDA_CHECK(cudaMemcpyAsync(pos, host.data(), host.size() * sizeof(int32_t),
                             cudaMemcpyHostToDevice, stream()));
  CUDA_CHECK(syncStream(stream()));
}

void loomrt::backend::loomrt_gather_positions(int64_t B, int64_t S, int64_t L,
                                              const int32_t *src,
                                              const int32_t *idx,
                                              int32_t *dst) {
  if (B * L == 0)
    return;
  gatherPositions<<<gridFor(B * L), kThreads, 0, stream()>>>(B, S, L, src, idx,
                                                             dst);
  CUDA_CHECK_LAUNCH();
}
