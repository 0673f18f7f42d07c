//===- Attention.cu - Masked GQA attention and its backward ----*- CUDA -*-===//
//
// Flash-attention style kernels in f32 (CUDA cores, no tensor cores): the
// [S, Sk] score matrix is never stored. A thread block holds kRows warps,
// one query row (or, for dK/dV, one key row) per warp, and walks the other
// side in tiles of 32 rows staged in shared memory as f32; inside a tile
// lane j owns row j of the tile (its score) and the warp combines them with
// shuffles. Each output element is written by exactly one warp, so results
// are deterministic and need no atomics.
//
//   forward  online softmax over key tiles -> o, lse
//   backward P = exp(s - lse) is recomputed from the forward's lse;
//            delta_i = dO_i . O_i;  dS = P * (dO V^T - delta)
//            kernel 1 (per query row): dQ = scale * dS K
//            kernel 2 (per key row, all query heads of its kv group):
//                     dV = P^T dO,  dK = scale * dS^T Q
//
// Head dims up to kMaxD = 256 are supported (every Llama/GPT size); each
// lane keeps D/32 accumulators in registers.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Attention.h"
#include "runtime/cuda/Common.h"

using namespace loomrt;

namespace {
constexpr int kRows = 8;  // warps (rows of the outer side) per block
constexpr int kTile = 32; // rows of the inner side per shared-memory tile
constexpr int kMaxD = 256;
constexpr int kPerLane = kMaxD / 32;

using Dims = AttentionDims;

/// Mask arguments, as in loomrt.h (NULL positions mean 0..S-1 / 0..Sk-1).
struct MaskArgs {
  bool causal;
  const int32_t *qPos, *kPos, *qDoc, *kDoc;
};

__device__ __forceinline__ int32_t qPosOf(const MaskArgs &m, const Dims &d,
                                          int64_t b, int64_t i) {
  return m.qPos ? m.qPos[b * d.S + i] : int32_t(i);
}
__device__ __forceinline__ int32_t kPosOf(const MaskArgs &m, const Dims &d,
                                          int64_t b, int64_t j) {
  return m.kPos ? m.kPos[b * d.Sk + j] : int32_t(j);
}

/// Key j is visible from query i iff (!causal || kpos <= qpos) && same doc.
__device__ __forceinline__ bool visible(const MaskArgs &m, const Dims &d,
                                        int64_t b, int64_t i, int64_t j) {
  if (m.causal && kPosOf(m, d, b, j) > qPosOf(m, d, b, i))
    return false;
  return !m.qDoc || m.qDoc[b * d.S + i] == m.kDoc[b * d.Sk + j];
}

/// Stages rows [r0, r0 + kTile) of head `head` of a [B, rows, heads * D]
/// tensor into tile[kTile][D + 1] (f32, zero past the end). The +1 pad puts
/// lane j's row j in its own bank when lanes walk rows.
__device__ void loadTile(loomrt_dtype dt, const void *src, int64_t b,
                         int64_t rows, int64_t heads, int64_t head, int64_t D,
                         int64_t r0, float *tile) {
  for (int64_t e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int64_t r = e / D, c = e % D;
    tile[r * (D + 1) + c] =
        r0 + r < rows
            ? ld(src, dt, ((b * rows + r0 + r) * heads + head) * D + c)
            : 0.0f;
  }
}

/// Loads one row (of D features) into shared f32.
__device__ void loadRow(loomrt_dtype dt, const void *src, int64_t offset,
                        int64_t D, float *row) {
  for (int64_t c = threadIdx.x & 31; c < D; c += 32)
    row[c] = ld(src, dt, offset + c);
}

/// Dot product of a shared row with row `lane` of a padded tile.
__device__ __forceinline__ float dotRow(const float *row, const float *tile,
                                        int64_t D, int lane) {
  const float *t = tile + lane * (D + 1);
  float s = 0.0f;
  for (int64_t c = 0; c < D; ++c)
    s += row[c] * t[c];
  return s;
}

/// acc[t] += sum over tile rows r of w_r * tile[r][lane + 32t], with w_r
/// held by lane r.
__device__ __forceinline__ void accumulateRows(float (&acc)[kPerLane], float w,
                                               const float *tile, int64_t D,
                                               int lane) {
  for (int r = 0; r < kTile; ++r) {
    const float wr = __shfl_sync(0xffffffffu, w, r);
    if (wr == 0.0f) // warp-uniform: masked or underflowed rows
      continue;
    const float *t = tile + r * (D + 1);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int64_t c = lane + 32 * k;
      if (c < D)
        acc[k] += wr * t[c];
    }
  }
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

// Shared memory: K tile, V tile ([kTile][D+1] each), kRows query rows [D].
__global__ void attentionForward(loomrt_dtype dt, Dims d, float scale,
                                 MaskArgs mask, const void *q, const void *k,
                                 const void *v, void *o, float *lse) {
  extern __shared__ float smem[];
  float *kT = smem, *vT = kT + kTile * (d.D + 1),
        *qRows = vT + kTile * (d.D + 1);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t kvh = h / (d.Nq / d.Nkv);
  const int64_t i = int64_t(blockIdx.x) * kRows + warp;
  const bool valid = i < d.S;
  float *qRow = qRows + warp * d.D;
  if (valid)
    loadRow(dt, q, ((b * d.S + i) * d.Nq + h) * d.D, d.D, qRow);

  // The block's largest query position: key tiles entirely after it are
  // causally hidden from every row of the block and are not even loaded.
  __shared__ int32_t maxQ;
  if (threadIdx.x == 0) {
    int32_t m = INT32_MIN;
    for (int r = 0; r < kRows; ++r)
      if (blockIdx.x * kRows + r < d.S)
        m = max(m, qPosOf(mask, d, b, blockIdx.x * kRows + r));
    maxQ = m;
  }
  __syncthreads();

  float m = -INFINITY, l = 0.0f, acc[kPerLane] = {};
  for (int64_t j0 = 0; j0 < d.Sk; j0 += kTile) {
    if (mask.causal) {
      const bool needed = threadIdx.x < kTile && j0 + threadIdx.x < d.Sk &&
                          kPosOf(mask, d, b, j0 + threadIdx.x) <= maxQ;
      if (!__syncthreads_or(needed))
        continue;
    }
    loadTile(dt, k, b, d.Sk, d.Nkv, kvh, d.D, j0, kT);
    loadTile(dt, v, b, d.Sk, d.Nkv, kvh, d.D, j0, vT);
    __syncthreads();
    if (valid) {
      const int64_t j = j0 + lane;
      float s = -INFINITY;
      if (j < d.Sk && visible(mask, d, b, i, j))
        s = scale * dotRow(qRow, kT, d.D, lane);
      const float tileMax = warpMax(s);
      if (tileMax != -INFINITY) {
        const float mNew = fmaxf(m, tileMax);
        const float alpha = expf(m - mNew); // 0 while m is -inf
        const float p = expf(s - mNew);     // 0 for masked keys
        l = l * alpha + warpSum(p);
#pragma unroll
        for (int t = 0; t < kPerLane; ++t)
          acc[t] *= alpha;
        accumulateRows(acc, p, vT, d.D, lane);
        m = mNew;
      }
    }
    __syncthreads();
  }
  if (!valid)
    return;
  // A row without visible keys: o = 0, lse = -inf (l stayed 0).
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  const int64_t oOff = ((b * d.S + i) * d.Nq + h) * d.D;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < d.D)
      st(o, dt, oOff + c, acc[t] * inv);
  }
  if (lane == 0)
    lse[(b * d.Nq + h) * d.S + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

//===----------------------------------------------------------------------===//
// Merge
//===----------------------------------------------------------------------===//

/// One warp per (b, s, head) row.
__global__ void attentionMerge(loomrt_dtype dt, int64_t B, int64_t S,
                               int64_t Nq, int64_t D, void *oAcc, float *lseAcc,
                               const void *oPart, const float *lsePart) {
  const int lane = threadIdx.x & 31;
  const int64_t rowsTotal = B * S * Nq;
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       row < rowsTotal; row += int64_t(gridDim.x) * blockDim.x / 32) {
    const int64_t bs = row / Nq, h = row % Nq, b = bs / S, s = bs % S;
    float *l1p = lseAcc + (b * Nq + h) * S + s;
    const float l1 = *l1p, l2 = lsePart[(b * Nq + h) * S + s];
    if (l2 == -INFINITY)
      continue;
    float w1 = 0.0f, w2 = 1.0f, l = l2;
    if (l1 != -INFINITY) {
      // l = log(e^l1 + e^l2) = max + log1p(e^-|l1 - l2|), overflow-free.
      l = fmaxf(l1, l2) + log1pf(expf(-fabsf(l1 - l2)));
      w1 = expf(l1 - l);
      w2 = expf(l2 - l);
    }
    for (int64_t c = lane; c < D; c += 32) {
      const int64_t e = row * D + c;
      st(oAcc, dt, e,
         l1 == -INFINITY ? ld(oPart, dt, e)
                         : ld(oAcc, dt, e) * w1 + ld(oPart, dt, e) * w2);
    }
    __syncwarp();
    if (lane == 0)
      *l1p = l;
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// delta[b, h, i] = dO_i . O_i, one warp per query row.
__global__ void attentionDelta(loomrt_dtype dt, Dims d, const void *o,
                               const void *dout, float *delta) {
  const int lane = threadIdx.x & 31;
  const int64_t rowsTotal = d.B * d.S * d.Nq;
  for (int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
       row < rowsTotal; row += int64_t(gridDim.x) * blockDim.x / 32) {
    float s = 0.0f;
    for (int64_t c = lane; c < d.D; c += 32)
      s += ld(dout, dt, row * d.D + c) * ld(o, dt, row * d.D + c);
    s = warpSum(s);
    if (lane == 0) {
      const int64_t bs = row / d.Nq, h = row % d.Nq;
      delta[((bs / d.S) * d.Nq + h) * d.S + bs % d.S] = s;
    }
  }
}

/// dQ: one warp per query row, walking key tiles.
// Shared memory: K tile, V tile, kRows q rows, kRows dO rows.
__global__ void attentionBackwardQ(loomrt_dtype dt, Dims d, float scale,
                                   MaskArgs mask, const void *q, const void *k,
                                   const void *v, const float *lse,
                                   const float *delta, const void *dout,
                                   void *dq, bool accumulate) {
  extern __shared__ float smem[];
  float *kT = smem, *vT = kT + kTile * (d.D + 1);
  float *qRow = vT + kTile * (d.D + 1) + (threadIdx.x >> 5) * d.D;
  float *doRow =
      vT + kTile * (d.D + 1) + kRows * d.D + (threadIdx.x >> 5) * d.D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t kvh = h / (d.Nq / d.Nkv);
  const int64_t i = int64_t(blockIdx.x) * kRows + warp;
  const bool valid = i < d.S;
  const int64_t off = ((b * d.S + i) * d.Nq + h) * d.D;
  float l = -INFINITY, di = 0.0f;
  if (valid) {
    loadRow(dt, q, off, d.D, qRow);
    loadRow(dt, dout, off, d.D, doRow);
    l = lse[(b * d.Nq + h) * d.S + i];
    di = delta[(b * d.Nq + h) * d.S + i];
  }
  __shared__ int32_t maxQ;
  if (threadIdx.x == 0) {
    int32_t m = INT32_MIN;
    for (int r = 0; r < kRows; ++r)
      if (blockIdx.x * kRows + r < d.S)
        m = max(m, qPosOf(mask, d, b, blockIdx.x * kRows + r));
    maxQ = m;
  }
  __syncthreads();

  float acc[kPerLane] = {};
  for (int64_t j0 = 0; j0 < d.Sk; j0 += kTile) {
    if (mask.causal) {
      const bool needed = threadIdx.x < kTile && j0 + threadIdx.x < d.Sk &&
                          kPosOf(mask, d, b, j0 + threadIdx.x) <= maxQ;
      if (!__syncthreads_or(needed))
        continue;
    }
    loadTile(dt, k, b, d.Sk, d.Nkv, kvh, d.D, j0, kT);
    loadTile(dt, v, b, d.Sk, d.Nkv, kvh, d.D, j0, vT);
    __syncthreads();
    // A fully masked row has lse = -inf and no probability mass.
    if (valid && l != -INFINITY) {
      const int64_t j = j0 + lane;
      float ds = 0.0f;
      if (j < d.Sk && visible(mask, d, b, i, j)) {
        const float p = expf(scale * dotRow(qRow, kT, d.D, lane) - l);
        ds = p * (dotRow(doRow, vT, d.D, lane) - di);
      }
      accumulateRows(acc, ds, kT, d.D, lane);
    }
    __syncthreads();
  }
  if (!valid)
    return;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t c = lane + 32 * t;
    if (c < d.D)
      st(dq, dt, off + c,
         scale * acc[t] + (accumulate ? ld(dq, dt, off + c) : 0.0f));
  }
}

/// dK, dV: one warp per key row of a kv head, walking query tiles of every
/// query head that shares the kv head.
// Shared memory: Q tile, dO tile, kRows k rows, kRows v rows.
__global__ void attentionBackwardKV(loomrt_dtype dt, Dims d, float scale,
                                    MaskArgs mask, const void *q, const void *k,
                                    const void *v, const float *lse,
                                    const float *delta, const void *dout,
                                    void *dk, void *dv, bool accumulate) {
  extern __shared__ float smem[];
  float *qT = smem, *doT = qT + kTile * (d.D + 1);
  float *kRow = doT + kTile * (d.D + 1) + (threadIdx.x >> 5) * d.D;
  float *vRow =
      doT + kTile * (d.D + 1) + kRows * d.D + (threadIdx.x >> 5) * d.D;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, kvh = blockIdx.y;
  const int64_t group = d.Nq / d.Nkv;
  const int64_t j = int64_t(blockIdx.x) * kRows + warp;
  const bool valid = j < d.Sk;
  const int64_t off = ((b * d.Sk + j) * d.Nkv + kvh) * d.D;
  if (valid) {
    loadRow(dt, k, off, d.D, kRow);
    loadRow(dt, v, off, d.D, vRow);
  }
  // The block's smallest key position: query tiles entirely before it see
  // none of the block's keys causally.
  __shared__ int32_t minK;
  if (threadIdx.x == 0) {
    int32_t m = INT32_MAX;
    for (int r = 0; r < kRows; ++r)
      if (blockIdx.x * kRows + r < d.Sk)
        m = min(m, kPosOf(mask, d, b, blockIdx.x * kRows + r));
    minK = m;
  }
  __syncthreads();

  float dkAcc[kPerLane] = {}, dvAcc[kPerLane] = {};
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t i0 = 0; i0 < d.S; i0 += kTile) {
      if (mask.causal) {
        const bool needed = threadIdx.x < kTile && i0 + threadIdx.x < d.S &&
                            qPosOf(mask, d, b, i0 + threadIdx.x) >= minK;
        if (!__syncthreads_or(needed))
          continue;
      }
      loadTile(dt, q, b, d.S, d.Nq, h, d.D, i0, qT);
      loadTile(dt, dout, b, d.S, d.Nq, h, d.D, i0, doT);
      __syncthreads();
      if (valid) {
        const int64_t i = i0 + lane;
        float p = 0.0f, ds = 0.0f;
        if (i < d.S && visible(mask, d, b, i, j)) {
          const float l = lse[(b * d.Nq + h) * d.S + i];
          if (l != -INFINITY) {
            p = expf(scale * dotRow(kRow, qT, d.D, lane) - l);
            ds = p * (dotRow(vRow, doT, d.D, lane) -
                      delta[(b * d.Nq + h) * d.S + i]);
          }
        }
        accumulateRows(dvAcc, p, doT, d.D, lane);
        accumulateRows(dkAcc, ds, qT, d.D, lane);
      }
      __syncthreads();
    }
  }
  if (!valid)
    return;
#pragma unroll
  for (int t = 0; t < kPerLane; ++t) {
    const int64_t c = lane + 32 * t;
    if (c >= d.D)
      continue;
    st(dk, dt, off + c,
       scale * dkAcc[t] + (accumulate ? ld(dk, dt, off + c) : 0.0f));
    st(dv, dt, off + c, dvAcc[t] + (accumulate ? ld(dv, dt, off + c) : 0.0f));
  }
}

//===----------------------------------------------------------------------===//
// Host side
//===----------------------------------------------------------------------===//

} // namespace

void loomrt::checkCudaAttention(const char *fn, const AttentionDims &d) {
  if (d.D > kMaxD)
    fatal(fn, "head dim %lld exceeds the cuda backend's limit of %d",
          (long long)d.D, kMaxD);
  if (d.B > 65535 || d.Nq > 65535)
    fatal(fn, "B=%lld or Nq=%lld exceeds a grid dimension", (long long)d.B,
          (long long)d.Nq);
}

namespace {
/// Dynamic shared memory of all three tiled kernels: two padded tiles and
/// two sets of kRows rows (the forward uses one of them).
size_t sharedBytes(int64_t D) {
  return size_t(2 * kTile * (D + 1) + 2 * kRows * D) * sizeof(float);
}

/// Above 48 KiB a kernel must opt in to its dynamic shared memory.
template <typename Kernel> void allowShared(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

dim3 rowGrid(int64_t rows, int64_t heads, int64_t B) {
  return dim3(unsigned((rows + kRows - 1) / kRows), unsigned(heads),
              unsigned(B));
}
} // namespace

void loomrt::kernelAttentionForward(loomrt_dtype dtype, int64_t B, int64_t S,
                                    int64_t Sk, int64_t Nq, int64_t Nkv,
                                    int64_t D, float scale, int32_t causal,
                                    const int32_t *q_pos, const int32_t *k_pos,
                                    const int32_t *q_doc, const int32_t *k_doc,
                                    const void *q, const void *k, const void *v,
                                    void *o, float *lse) {
  const Dims d{B, S, Sk, Nq, Nkv, D};
  if (B == 0 || S == 0)
    return;
  const MaskArgs mask{causal != 0, q_pos, k_pos, q_doc, k_doc};
  const size_t shared = sharedBytes(D);
  allowShared(attentionForward, shared);
  attentionForward<<<rowGrid(S, Nq, B), kRows * 32, shared, stream()>>>(
      dtype, d, scale, mask, q, k, v, o, lse);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_attention_merge(loomrt_dtype dtype, int64_t B,
                                             int64_t S, int64_t Nq, int64_t D,
                                             void *o_acc, float *lse_acc,
                                             const void *o_part,
                                             const float *lse_part) {
  if (B * S == 0)
    return;
  attentionMerge<<<gridFor(B * S * Nq * 32), kThreads, 0, stream()>>>(
      dtype, B, S, Nq, D, o_acc, lse_acc, o_part, lse_part);
  CUDA_CHECK_LAUNCH();
}

void loomrt::kernelAttentionBackward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t Sk, int64_t Nq,
    int64_t Nkv, int64_t D, float scale, int32_t causal, const int32_t *q_pos,
    const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, const void *o,
    const float *lse, const void *dout, void *dq, void *dk, void *dv,
    int32_t accumulate) {
  const Dims d{B, S, Sk, Nq, Nkv, D};
  if (B == 0 || (S == 0 && Sk == 0))
    return;
  const int64_t esz = loomrt_dtype_size(dtype);
  // With one side empty the other side's gradients are zero (or unchanged).
  if (S == 0 || Sk == 0) {
    if (accumulate)
      return;
    if (S)
      CUDA_CHECK(
          cudaMemsetAsync(dq, 0, size_t(B * S * Nq * D * esz), stream()));
    if (Sk) {
      CUDA_CHECK(
          cudaMemsetAsync(dk, 0, size_t(B * Sk * Nkv * D * esz), stream()));
      CUDA_CHECK(
          cudaMemsetAsync(dv, 0, size_t(B * Sk * Nkv * D * esz), stream()));
    }
    return;
  }
  const MaskArgs mask{causal != 0, q_pos, k_pos, q_doc, k_doc};
  Scratch delta(B * Nq * S * int64_t(sizeof(float)));
  attentionDelta<<<gridFor(B * S * Nq * 32), kThreads, 0, stream()>>>(
      dtype, d, o, dout, delta.as<float>());
  CUDA_CHECK_LAUNCH();
  const size_t shared = sharedBytes(D);
  allowShared(attentionBackwardQ, shared);
  allowShared(attentionBackwardKV, shared);
  // Both kernels overwrite (or add to) every element of their outputs.
  attentionBackwardQ<<<rowGrid(S, Nq, B), kRows * 32, shared, stream()>>>(
      dtype, d, scale, mask, q, k, v, lse, delta.as<float>(), dout, dq,
      accumulate != 0);
  CUDA_CHECK_LAUNCH();
  attentionBackwardKV<<<rowGrid(Sk, Nkv, B), kRows * 32, shared, stream()>>>(
      dtype, d, scale, mask, q, k, v, lse, delta.as<float>(), dout, dk, dv,
      accumulate != 0);
  CUDA_CHECK_LAUNCH();
}
