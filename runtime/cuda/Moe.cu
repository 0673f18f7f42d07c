//===- Moe.cu - Mixture of experts: routing, dispatch, experts -*- CUDA -*-===//
//
// The router's row work (top-k, softmaxes, their gradients) runs one warp
// per token: E is small, and warp reductions keep every sum in a fixed
// order. The losses' sums over tokens are column kernels and one
// single-block kernel, as in Norms.cu and CrossEntropy.cu: deterministic,
// no floating-point atomics.
//
// Dispatch sorts the T*k (token, slot) pairs by expert with CUB's radix
// sort, which is stable; the key (expert << 32 | pair index) makes the
// order (expert, token, slot) whatever the sort. Counting tokens per
// expert uses integer atomics, whose result does not depend on the order.
//
// The grouped linear layer reads the expert counts on the device: a
// one-block kernel turns them into row offsets and row-tile offsets in
// scratch, and every block of the grouped GEMM finds its expert there by
// binary search. Blocks past the groups write the zero rows, so one launch
// writes all of y (or dx). The GEMM is a plain shared-memory tiling
// (64x64 tile, 16-deep k steps, 4x4 outputs per thread) with operands
// widened to f32 on the load, f32 accumulation and one rounding.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"
#include "runtime/cuda/RadixSort.h"


#include <climits>

using namespace loomrt;

namespace {
constexpr int kWarpsPerBlock = kThreads / 32;
constexpr int kRowThreads = 256;

/// Blocks for one warp per item.
unsigned warpGrid(const char *fn, int64_t n) {
  const int64_t blocks = (n + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LOOMRT_CHECK(blocks <= INT32_MAX, "%s: %lld rows are too many for one grid",
               fn, (long long)n);
  return unsigned(blocks < 1 ? 1 : blocks);
}

/// The warp's item: blockIdx.x * warps + warp index.
__device__ __forceinline__ int64_t warpItem() {
  return int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
}

__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

/// Row max and sum of exp(l - max) over E f32 values, in every lane.
__device__ void rowSoftmaxStats(const float *l, int64_t E, float &m, float &s) {
  const int lane = threadIdx.x & 31;
  m = -INFINITY;
  for (int64_t e = lane; e < E; e += 32)
    m = fmaxf(m, l[e]);
  m = warpMax(m);
  s = 0.0f;
  for (int64_t e = lane; e < E; e += 32)
    s += expf(l[e] - m);
  s = warpSum(s);
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

/// The selection order: larger value first, ties to the lower index. NaN
/// ranks as -inf so every pass finds an expert (k <= E).
__device__ __forceinline__ bool ranksBefore(float v, int64_t i, float w,
                                            int64_t j) {
  return v > w || (v == w && i < j);
}

__device__ __forceinline__ float rankValue(float v) {
  return isnan(v) ? -INFINITY : v;
}

/// One warp per token: k passes, each taking the best expert ranked after
/// the previous pick (no mask needed, E may be anything).
__global__ void routeForward(int64_t T, int64_t E, int64_t k, bool preSoftmax,
                             const float *logits, float *probs,
                             int32_t *experts) {
  const int64_t t = warpItem();
  if (t >= T)
    return;
  const int lane = threadIdx.x & 31;
  const float *l = logits + t * E;
  float m, s;
  rowSoftmaxStats(l, E, m, s);
  float prevV = INFINITY;
  int64_t prevI = -1;
  for (int64_t j = 0; j < k; ++j) {
    float bestV = -INFINITY;
    int64_t bestI = INT64_MAX;
    for (int64_t e = lane; e < E; e += 32) {
      const float v = rankValue(preSoftmax ? expf(l[e] - m) / s : l[e]);
      if (ranksBefore(prevV, prevI, v, e) && ranksBefore(v, e, bestV, bestI)) {
        bestV = v;
        bestI = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bestV, o);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, bestI, o);
      if (ranksBefore(ov, oi, bestV, bestI)) {
        bestV = ov;
        bestI = oi;
      }
    }
    if (lane == 0) {
      experts[t * k + j] = int32_t(bestI);
      if (preSoftmax)
        probs[t * k + j] = expf(l[bestI] - m) / s;
    }
    prevV = bestV;
    prevI = bestI;
  }
  if (preSoftmax || lane != 0)
    return;
  // Softmax over the k chosen logits; the first is their max. Lane 0 reads
  // back the experts it wrote.
  const float top = l[experts[t * k]];
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j)
    sum += expf(l[experts[t * k + j]] - top);
  for (int64_t j = 0; j < k; ++j)
    probs[t * k + j] = expf(l[experts[t * k + j]] - top) / sum;
}

/// One warp per token; each lane recomputes the k-element sums itself (in
/// the same order, so all lanes agree) and writes its columns of the row.
__global__ void routeBackward(int64_t T, int64_t E, int64_t k, bool preSoftmax,
                              const float *logits, const int32_t *experts,
                              const float *dprobs, float *dlogits) {
  const int64_t t = warpItem();
  if (t >= T)
    return;
  const int lane = threadIdx.x & 31;
  const float *l = logits + t * E;
  const int32_t *ex = experts + t * k;
  const float *dp = dprobs + t * k;
  float *dl = dlogits + t * E;
  auto valid = [&](int32_t e) { return e >= 0 && e < E; };
  if (!preSoftmax) {
    // p = softmax over the chosen logits; dl = p (dp - <p, dp>) there.
    float top = -INFINITY;
    for (int64_t j = 0; j < k; ++j)
      if (valid(ex[j]))
        top = fmaxf(top, l[ex[j]]);
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      if (valid(ex[j]))
        sum += expf(l[ex[j]] - top);
    float dot = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      if (valid(ex[j]))
        dot += expf(l[ex[j]] - top) / sum * dp[j];
    for (int64_t e = lane; e < E; e += 32) {
      float g = 0.0f;
      for (int64_t j = 0; j < k; ++j)
        if (ex[j] == e)
          g += expf(l[e] - top) / sum * (dp[j] - dot);
      dl[e] = g;
    }
    return;
  }
  // probs are full-softmax scores s at the chosen experts: with g_e the
  // dprobs scattered to E columns, dl = s (g - <s, g>).
  float m, s;
  rowSoftmaxStats(l, E, m, s);
  float dot = 0.0f;
  for (int64_t j = 0; j < k; ++j)
    if (valid(ex[j]))
      dot += expf(l[ex[j]] - m) / s * dp[j];
  for (int64_t e = lane; e < E; e += 32) {
    float g = 0.0f;
    for (int64_t j = 0; j < k; ++j)
      if (ex[j] == e)
        g += dp[j];
    dl[e] = expf(l[e] - m) / s * (g - dot);
  }
}

//===----------------------------------------------------------------------===//
// Router losses
//===----------------------------------------------------------------------===//

/// count[e] += 1 per token whose experts include e (a repeated expert
/// counts once). counts must be zero first.
__global__ void countTokens(int64_t T, int64_t k, int64_t E,
                            const int32_t *experts, int32_t *counts) {
  GRID_STRIDE(i, T * k) {
    const int64_t t = i / k, j = i % k;
    const int32_t e = experts[i];
    bool first = e >= 0 && e < E;
    for (int64_t q = 0; q < j && first; ++q)
      first = experts[t * k + q] != e;
    if (first)
      atomicAdd(&counts[e], 1);
  }
}

/// counts[e] += 1 per (token, slot) pair routed to e, in f32: integer sums
/// below 2^24 are exact in any order. counts must be zero first.
__global__ void countRoutes(int64_t n, int64_t E, const int32_t *experts,
                            float *counts) {
  GRID_STRIDE(i, n) {
    const int32_t e = experts[i];
    if (e >= 0 && e < E)
      atomicAdd(&counts[e], 1.0f);
  }
}

/// The micro-batch's tokens, sum_e counts[e] / k, at least 1, summed by
/// every thread that calls it (E is small).
__device__ double routedTokens(int64_t E, int64_t k, const float *counts) {
  double pairs = 0.0;
  for (int64_t e = 0; e < E; ++e)
    pairs += counts[e];
  return fmax(pairs / double(k), 1.0);
}

/// lse[t] = logsumexp(logits[t]), one warp per token.
__global__ void rowLse(int64_t T, int64_t E, const float *logits, float *lse) {
  const int64_t t = warpItem();
  if (t >= T)
    return;
  float m, s;
  rowSoftmaxStats(logits + t * E, E, m, s);
  if ((threadIdx.x & 31) == 0)
    lse[t] = m + logf(s);
}

/// P[e] = sum_t exp(logits[t, e] - lse[t]). Block (32, 8) owns 32 experts;
/// thread row ty adds tokens ty, ty+8, ..., then the 8 partials in order.
__global__ void probSums(int64_t T, int64_t E, const float *logits,
                         const float *lse, float *P) {
  __shared__ float part[8][33];
  const int64_t e = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (e < E)
    for (int64_t t = threadIdx.y; t < T; t += 8)
      acc += expf(logits[t * E + e] - lse[t]);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || e >= E)
    return;
  float sum = 0.0f;
  for (int q = 0; q < 8; ++q)
    sum += part[q][threadIdx.x];
  P[e] = sum;
}

/// aux = aux_coeff E / (k N^2) sum_e P[e] counts[e], z = z_coeff / N
/// sum_t lse[t]^2 (N = routedTokens), by one block in double in a fixed
/// order.
__global__ void routerLossTotals(int64_t T, int64_t E, int64_t k,
                                 double auxCoeff, double zCoeff,
                                 const float *P, const float *counts,
                                 const float *lse, float *aux, float *z) {
  __shared__ double sa[1024], sz[1024];
  double a = 0.0, b = 0.0;
  for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
    a += double(P[e]) * double(counts[e]);
  for (int64_t t = threadIdx.x; t < T; t += blockDim.x)
    b += double(lse[t]) * double(lse[t]);
  sa[threadIdx.x] = a;
  sz[threadIdx.x] = b;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) {
      sa[threadIdx.x] += sa[threadIdx.x + s];
      sz[threadIdx.x] += sz[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double n = routedTokens(E, k, counts);
    *aux = float(auxCoeff * double(E) / (double(k) * n * n) * sa[0]);
    *z = float(zCoeff / n * sz[0]);
  }
}

/// With p = softmax(logits[t]), g = *gradScale, N = routedTokens and
/// dP = g aux_coeff E / (k N^2) counts:
///   dlogits[t] = p (dP - <p, dP>) + g z_coeff / N 2 lse_t p.
/// One warp per token; the scale and N are read on the device (no host
/// sync).
__global__ void routerLossGrad(int64_t T, int64_t E, int64_t k,
                               float auxCoeff, float zCoeff,
                               const float *logits, const float *counts,
                               const float *gradScale, float *dlogits) {
  const int64_t t = warpItem();
  if (t >= T)
    return;
  const int lane = threadIdx.x & 31;
  const float *l = logits + t * E;
  const float g = *gradScale;
  const double n = routedTokens(E, k, counts);
  const float auxScale = float(double(auxCoeff) * double(E) / (double(k) * n * n));
  const float zScale = float(double(zCoeff) / n);
  float m, s;
  rowSoftmaxStats(l, E, m, s);
  const float lse = m + logf(s);
  float dot = 0.0f;
  for (int64_t e = lane; e < E; e += 32)
    dot += expf(l[e] - m) / s * (g * auxScale * counts[e]);
  dot = warpSum(dot);
  const float zTerm = g * zScale * 2.0f * lse;
  for (int64_t e = lane; e < E; e += 32) {
    const float p = expf(l[e] - m) / s;
    const float dP = g * auxScale * counts[e];
    dlogits[t * E + e] = p * (dP - dot) + zTerm * p;
  }
}

//===----------------------------------------------------------------------===//
// Dispatch and combine
//===----------------------------------------------------------------------===//

/// key = expert << 32 | pair index. A dropped pair (expert -1) sorts after
/// all of them as E and gets no row.
__global__ void pairKeys(int64_t n, int64_t E, const int32_t *experts,
                         uint64_t *keys) {
  GRID_STRIDE(i, n) {
    const int64_t e = experts[i];
    keys[i] = (uint64_t(e >= 0 && e < E ? e : E) << 32) | uint64_t(i);
  }
}

/// start[e] = rows of experts before e (counts before padding), by one
/// thread: E is small.
__global__ void groupStarts(int64_t E, const int32_t *counts, int64_t *start) {
  int64_t s = 0;
  for (int64_t e = 0; e < E; ++e) {
    start[e] = s;
    s += counts[e];
  }
}

/// The row of sorted pair p: p itself, or with padding its rank in its
/// expert's group placed at e * padTo; -1 for a dropped pair.
__global__ void pairRows(int64_t n, int64_t E, int64_t padTo,
                         const int64_t *start, const uint64_t *sorted,
                         int32_t *rowMap) {
  GRID_STRIDE(p, n) {
    const int64_t e = int64_t(sorted[p] >> 32);
    int64_t row = -1;
    if (e < E)
      row = padTo > 0 ? e * padTo + (p - start[e]) : p;
    rowMap[sorted[p] & 0xffffffffu] = int32_t(row);
  }
}

/// rows[row_map[i]] = x[token of pair i]: a copy, 16-bit data as 16-bit
/// words; pairs without a row (dropped) or past N copy nothing.
__global__ void gatherRows(int esz, int64_t n, int64_t H, int64_t k, int64_t N,
                           const int32_t *rowMap, const void *x, void *rows) {
  GRID_STRIDE(e, n * H) {
    const int64_t i = e / H, c = e % H;
    const int64_t r = rowMap[i];
    if (r < 0 || r >= N)
      continue;
    const int64_t t = i / k;
    if (esz == 4)
      static_cast<float *>(rows)[r * H + c] =
          static_cast<const float *>(x)[t * H + c];
    else
      static_cast<uint16_t *>(rows)[r * H + c] =
          static_cast<const uint16_t *>(x)[t * H + c];
  }
}

__global__ void fillInt(int64_t n, int32_t v, int32_t *out) {
  GRID_STRIDE(i, n) { out[i] = v; }
}

/// key = expert << 32 | ~bits(prob) (descending probs within an expert:
/// probs are >= 0, whose bits order as the values), or expert << 32 alone
/// for the position policy; the sort is stable, so ties keep pair order.
__global__ void dropKeys(int64_t n, int64_t E, bool byProbs,
                         const int32_t *experts, const float *probs,
                         uint64_t *keys, int32_t *index) {
  GRID_STRIDE(i, n) {
    const int64_t e = experts[i];
    uint64_t key = uint64_t(e >= 0 && e < E ? e : E) << 32;
    if (byProbs)
      key |= uint64_t(~__float_as_uint(fmaxf(probs[i], 0.0f)));
    keys[i] = key;
    index[i] = int32_t(i);
  }
}

/// kept[pair] = its expert when its rank in the expert's group is below
/// the capacity, else -1.
__global__ void keepRanks(int64_t n, int64_t E, int64_t capacity,
                          const int64_t *start, const uint64_t *sorted,
                          const int32_t *index, int32_t *kept) {
  GRID_STRIDE(p, n) {
    const int64_t e = int64_t(sorted[p] >> 32);
    kept[index[p]] = e < E && p - start[e] < capacity ? int32_t(e) : -1;
  }
}

/// out[t, c] = sum_j w_j src[row_map[t, j], c] (w = probs, or 1 without),
/// summed in f32 in slot order and rounded once.
__global__ void combineRows(loomrt_dtype dt, int64_t T, int64_t H, int64_t k,
                            const void *src, const float *probs,
                            const int32_t *rowMap, void *out) {
  GRID_STRIDE(e, T * H) {
    const int64_t t = e / H, c = e % H;
    float acc = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      if (rowMap[t * k + j] < 0)
        continue; // dropped
      const float v = ld(src, dt, int64_t(rowMap[t * k + j]) * H + c);
      acc += probs ? probs[t * k + j] * v : v;
    }
    st(out, dt, e, acc);
  }
}

/// drows[row_map[t, j], c] = probs[t, j] * dout[t, c]; drows is zero first.
__global__ void scatterRows(loomrt_dtype dt, int64_t T, int64_t H, int64_t k,
                            int64_t N, const float *probs,
                            const int32_t *rowMap, const void *dout,
                            void *drows) {
  GRID_STRIDE(e, T * k * H) {
    const int64_t i = e / H, c = e % H, t = i / k;
    const int64_t r = rowMap[i];
    if (r >= 0 && r < N)
      st(drows, dt, r * H + c, probs[i] * ld(dout, dt, t * H + c));
  }
}

/// dprobs[t, j] = <dout[t], rows[row_map[t, j]]>, one warp per pair.
__global__ void pairDots(loomrt_dtype dt, int64_t T, int64_t H, int64_t k,
                         const void *rows, const int32_t *rowMap,
                         const void *dout, float *dprobs) {
  const int64_t i = warpItem();
  if (i >= T * k)
    return;
  const int64_t t = i / k, r = rowMap[i];
  if (r < 0) {
    if ((threadIdx.x & 31) == 0)
      dprobs[i] = 0.0f; // dropped
    return;
  }
  float acc = 0.0f;
  for (int64_t c = threadIdx.x & 31; c < H; c += 32)
    acc += ld(dout, dt, t * H + c) * ld(rows, dt, r * H + c);
  acc = warpSum(acc);
  if ((threadIdx.x & 31) == 0)
    dprobs[i] = acc;
}

//===----------------------------------------------------------------------===//
// Grouped GEMM
//===----------------------------------------------------------------------===//

constexpr int kTileM = 64, kTileN = 64, kTileK = 16;
constexpr int kGemmThreads = 256; // 16 x 16, each 4 x 4 outputs

/// A logical matrix operand: element (i, j) at off + i * si + j * sj.
struct View {
  const void *p;
  int64_t off, si, sj;
};

/// One 64x64 tile of C = A B: rows [0, m) of A (already offset to the
/// tile), columns [n0, n0 + 64) of B's nCount, kCount deep. C's element
/// (i, n0 + j) is at cOff + i * ldc + n0 + j; accumulate adds C's value.
/// Out-of-range elements load as zero, so the inner loop has no branches.
__device__ void gemmTile(loomrt_dtype dt, View a, View b, int64_t m, int64_t n0,
                         int64_t nCount, int64_t kCount, loomrt_dtype cdt,
                         void *c, int64_t cOff, int64_t ldc, bool accumulate) {
  __shared__ float as[kTileK][kTileM + 1], bs[kTileK][kTileN + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  // Consecutive threads walk an operand's contiguous dimension.
  const bool aAlongK = a.sj == 1, bAlongN = b.sj == 1;
  float acc[4][4] = {};
  for (int64_t k0 = 0; k0 < kCount; k0 += kTileK) {
    for (int q = tid; q < kTileM * kTileK; q += kGemmThreads) {
      const int i = aAlongK ? q / kTileK : q % kTileM;
      const int kk = aAlongK ? q % kTileK : q / kTileM;
      as[kk][i] = i < m && k0 + kk < kCount
                      ? ld(a.p, dt, a.off + i * a.si + (k0 + kk) * a.sj)
                      : 0.0f;
    }
    for (int q = tid; q < kTileN * kTileK; q += kGemmThreads) {
      const int j = bAlongN ? q % kTileN : q / kTileK;
      const int kk = bAlongN ? q / kTileN : q % kTileK;
      bs[kk][j] = n0 + j < nCount && k0 + kk < kCount
                      ? ld(b.p, dt, b.off + (k0 + kk) * b.si + (n0 + j) * b.sj)
                      : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTileK; ++kk) {
      float av[4], bv[4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        av[r] = as[kk][ty + 16 * r];
        bv[r] = bs[kk][tx + 16 * r];
      }
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int s = 0; s < 4; ++s)
          acc[r][s] += av[r] * bv[s];
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      const int64_t i = ty + 16 * r, j = n0 + tx + 16 * s;
      if (i < m && j < nCount) {
        const int64_t at = cOff + i * ldc + j;
        st(c, cdt, at, accumulate ? ld(c, cdt, at) + acc[r][s] : acc[r][s]);
      }
    }
}

/// rowStart[0..E+1]: group e is rows [rowStart[e], rowStart[e+1]), the
/// tail [rowStart[E], M) (clamped to M); tileStart[0..E+1]: group e's
/// 64-row tiles are [tileStart[e], tileStart[e+1]), the tail's from
/// tileStart[E] to tileStart[E+1]. One block; a chunked Hillis-Steele scan.
__global__ void groupLayout(int64_t E, int64_t M, const int32_t *counts,
                            int64_t *rowStart, int64_t *tileStart) {
  __shared__ int64_t rs[kThreads], ts[kThreads];
  const int tid = threadIdx.x;
  int64_t rowCarry = 0, tileCarry = 0;
  for (int64_t base = 0; base < E; base += kThreads) {
    const int64_t e = base + tid;
    const int64_t c = e < E ? max(int64_t(counts[e]), int64_t(0)) : 0;
    const int64_t tiles = (c + kTileM - 1) / kTileM;
    rs[tid] = c;
    ts[tid] = tiles;
    __syncthreads();
    for (int o = 1; o < kThreads; o <<= 1) {
      const int64_t r = tid >= o ? rs[tid - o] : 0;
      const int64_t t = tid >= o ? ts[tid - o] : 0;
      __syncthreads();
      rs[tid] += r;
      ts[tid] += t;
      __syncthreads();
    }
    if (e < E) {
      rowStart[e] = min(rowCarry + rs[tid] - c, M);
      tileStart[e] = tileCarry + ts[tid] - tiles;
    }
    rowCarry += rs[kThreads - 1];
    tileCarry += ts[kThreads - 1];
    __syncthreads();
  }
  if (tid == 0) {
    const int64_t total = min(rowCarry, M);
    rowStart[E] = total;
    rowStart[E + 1] = M;
    tileStart[E] = tileCarry;
    tileStart[E + 1] = tileCarry + (M - total + kTileM - 1) / kTileM;
  }
}

/// C [M, nCount] = A [M, kCount] B_e per group, zero past the groups.
/// B_e's element (kk, j) is at e * bExpert + kk * bSi + j * bSj. Block x is
/// a row tile (found in tileStart), block y a column tile.
__global__ void groupedRowsGemm(loomrt_dtype dt, int64_t E, int64_t nCount,
                                int64_t kCount, const int64_t *rowStart,
                                const int64_t *tileStart, const void *A,
                                const void *B, int64_t bExpert, int64_t bSi,
                                int64_t bSj, void *C) {
  __shared__ int64_t tileGroup, tileRow0, tileRow1;
  const int64_t tile = blockIdx.x;
  if (threadIdx.x == 0) {
    // The last group whose tiles start at or before this one: groups with
    // no rows share their start with the next.
    int64_t lo = 0, hi = E;
    while (lo < hi) {
      const int64_t mid = (lo + hi + 1) / 2;
      if (tileStart[mid] <= tile)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t r0 = rowStart[lo] + (tile - tileStart[lo]) * kTileM;
    tileGroup = tile < tileStart[E + 1] ? lo : -1;
    tileRow0 = r0;
    tileRow1 = min(r0 + kTileM, rowStart[lo + 1]);
  }
  __syncthreads();
  const int64_t g = tileGroup, r0 = tileRow0, m = tileRow1 - tileRow0;
  if (g < 0 || m <= 0)
    return;
  const int64_t n0 = int64_t(blockIdx.y) * kTileN;
  if (g == E) {
    for (int q = threadIdx.x; q < kTileM * kTileN; q += kGemmThreads) {
      const int64_t i = q / kTileN, j = n0 + q % kTileN;
      if (i < m && j < nCount)
        st(C, dt, (r0 + i) * nCount + j, 0.0f);
    }
    return;
  }
  gemmTile(dt, {A, r0 * kCount, kCount, 1}, {B, g * bExpert, bSi, bSj}, m, n0,
           nCount, kCount, dt, C, r0 * nCount, nCount, false);
}

/// dW[e] [N, K] = dy_e^T x_e: block (x, y, z) is column tile x, row tile y
/// of expert z; the group's rows are the k dimension.
__global__ void groupedWeightGemm(loomrt_dtype dt, int64_t N, int64_t K,
                                  const int64_t *rowStart, const void *dy,
                                  const void *x, loomrt_dtype gdt, void *dW,
                                  bool accumulate) {
  const int64_t e = blockIdx.z;
  const int64_t r0 = rowStart[e], rows = rowStart[e + 1] - r0;
  if (rows <= 0 && accumulate)
    return; // keeps its value exactly
  const int64_t n0 = int64_t(blockIdx.y) * kTileM,
                k0 = int64_t(blockIdx.x) * kTileN;
  const int64_t m = min(int64_t(kTileM), N - n0);
  gemmTile(dt, {dy, r0 * N + n0, 1, N}, {x, r0 * K, K, 1}, m, k0, K,
           max(rows, int64_t(0)), gdt, dW, e * N * K + n0 * K, K, accumulate);
}

/// Runs groupLayout into scratch; the caller keeps `buf` alive while the
/// kernels that read it are queued (stream-ordered free).
void groupLayoutOnDevice(int64_t E, int64_t M, const int32_t *counts,
                         Scratch &buf, int64_t *&rowStart,
                         int64_t *&tileStart) {
  rowStart = buf.as<int64_t>();
  tileStart = rowStart + (E + 2);
  groupLayout<<<1, kThreads, 0, stream()>>>(E, M, counts, rowStart, tileStart);
  CUDA_CHECK_LAUNCH();
}

/// y or dx: C [M, nCount] from A [M, kCount] and the experts' B.
void groupedRows(const char *fn, loomrt_dtype dtype, int64_t M, int64_t nCount,
                 int64_t kCount, int64_t E, const void *A, const void *B,
                 int64_t bSi, int64_t bSj, const int32_t *counts, void *C) {
  if (M == 0 || nCount == 0)
    return;
  // At most one partial tile per group and the tail beyond full tiles.
  const int64_t rowTiles = (M + kTileM - 1) / kTileM + E + 1;
  const int64_t colTiles = (nCount + kTileN - 1) / kTileN;
  LOOMRT_CHECK(rowTiles <= INT32_MAX && colTiles <= 65535,
               "%s: %lld x %lld tiles are too many for one grid", fn,
               (long long)rowTiles, (long long)colTiles);
  Scratch layout(2 * (E + 2) * int64_t(sizeof(int64_t)));
  int64_t *rowStart, *tileStart;
  groupLayoutOnDevice(E, M, counts, layout, rowStart, tileStart);
  groupedRowsGemm<<<dim3(unsigned(rowTiles), unsigned(colTiles)), kGemmThreads,
                    0, stream()>>>(dtype, E, nCount, kCount, rowStart,
                                   tileStart, A, B, nCount * kCount, bSi, bSj,
                                   C);
  CUDA_CHECK_LAUNCH();
}
} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_moe_route_forward(int64_t T, int64_t E, int64_t k,
                                               int32_t pre_softmax,
                                               const float *logits,
                                               float *probs, int32_t *experts) {
  if (T == 0 || k == 0)
    return;
  routeForward<<<warpGrid(__func__, T), kThreads, 0, stream()>>>(
      T, E, k, pre_softmax != 0, logits, probs, experts);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_route_backward(
    int64_t T, int64_t E, int64_t k, int32_t pre_softmax, const float *logits,
    const int32_t *experts, const float *dprobs, float *dlogits) {
  if (T == 0 || E == 0)
    return;
  routeBackward<<<warpGrid(__func__, T), kThreads, 0, stream()>>>(
      T, E, k, pre_softmax != 0, logits, experts, dprobs, dlogits);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_route_counts(int64_t T, int64_t E,
                                              int64_t k,
                                              const int32_t *experts,
                                              float *counts) {
  CUDA_CHECK(cudaMemsetAsync(counts, 0, size_t(E * 4), stream()));
  if (T * k == 0)
    return;
  countRoutes<<<gridFor(T * k), kThreads, 0, stream()>>>(T * k, E, experts,
                                                         counts);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_router_loss_forward(
    int64_t T, int64_t E, int64_t k, float aux_coeff, float z_coeff,
    const float *logits, const float *counts, float *aux_loss,
    float *z_loss) {
  // No tokens here: both sums are empty, and this rank's losses 0.
  Scratch buf(Scratch::round(T * 4) + E * 4);
  float *lse = buf.as<float>();
  float *P = reinterpret_cast<float *>(buf.as<char>() + Scratch::round(T * 4));
  const bool any = T > 0 && E > 0;
  if (any) {
    rowLse<<<warpGrid(__func__, T), kThreads, 0, stream()>>>(T, E, logits, lse);
    CUDA_CHECK_LAUNCH();
    probSums<<<unsigned((E + 31) / 32), dim3(32, 8), 0, stream()>>>(
        T, E, logits, lse, P);
    CUDA_CHECK_LAUNCH();
  }
  routerLossTotals<<<1, 1024, 0, stream()>>>(any ? T : 0, any ? E : 0, k,
                                             aux_coeff, z_coeff, P, counts, lse,
                                             aux_loss, z_loss);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_router_loss_backward(
    int64_t T, int64_t E, int64_t k, float aux_coeff, float z_coeff,
    const float *logits, const float *counts, const float *grad_scale,
    float *dlogits) {
  if (T == 0 || E == 0)
    return;
  routerLossGrad<<<warpGrid(__func__, T), kThreads, 0, stream()>>>(
      T, E, k, aux_coeff, z_coeff, logits, counts, grad_scale, dlogits);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_drop(int64_t T, int64_t E, int64_t k,
                                      int64_t capacity, int32_t policy,
                                      const float *probs,
                                      const int32_t *experts, int32_t *kept) {
  const int64_t n = T * k;
  LOOMRT_CHECK(n <= INT32_MAX && E < INT32_MAX,
               "%lld (token, slot) pairs or %lld experts are too many",
               (long long)n, (long long)E);
  if (n == 0)
    return;
  Scratch buf(2 * n * int64_t(sizeof(uint64_t)) + 2 * Scratch::round(n * 4) +
              Scratch::round(E * 4) + E * int64_t(sizeof(int64_t)));
  uint64_t *keys = buf.as<uint64_t>(), *sorted = keys + n;
  char *rest = reinterpret_cast<char *>(sorted + n);
  int32_t *index = reinterpret_cast<int32_t *>(rest);
  int32_t *sortedIndex =
      reinterpret_cast<int32_t *>(rest + Scratch::round(n * 4));
  int32_t *counts =
      reinterpret_cast<int32_t *>(rest + 2 * Scratch::round(n * 4));
  int64_t *start = reinterpret_cast<int64_t *>(rest + 2 * Scratch::round(n * 4) +
                                               Scratch::round(E * 4));
  CUDA_CHECK(cudaMemsetAsync(counts, 0, size_t(E * 4), stream()));
  countTokens<<<gridFor(n), kThreads, 0, stream()>>>(n, 1, E, experts, counts);
  CUDA_CHECK_LAUNCH();
  groupStarts<<<1, 1, 0, stream()>>>(E, counts, start);
  CUDA_CHECK_LAUNCH();
  dropKeys<<<gridFor(n), kThreads, 0, stream()>>>(n, E, policy == 0, experts,
                                                  probs, keys, index);
  CUDA_CHECK_LAUNCH();
  // By expert, then (probs) by descending prob; stable, so ties keep the
  // pairs' order.
  radixSort(keys, sorted, n, policy == 0 ? 0 : 32,
            32 + significantBits(uint64_t(E)), index, sortedIndex);
  keepRanks<<<gridFor(n), kThreads, 0, stream()>>>(n, E, capacity, start,
                                                   sorted, sortedIndex, kept);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_permute(loomrt_dtype dtype, int64_t T,
                                         int64_t H, int64_t k, int64_t E,
                                         int64_t N, int64_t pad_to,
                                         const void *x, const int32_t *experts,
                                         void *rows, int32_t *counts,
                                         int32_t *row_map) {
  const int64_t n = T * k;
  LOOMRT_CHECK(n <= INT32_MAX && E < INT32_MAX && N <= INT32_MAX,
               "%lld (token, slot) pairs, %lld experts or %lld rows are too "
               "many",
               (long long)n, (long long)E, (long long)N);
  if (E > 0) {
    CUDA_CHECK(cudaMemsetAsync(counts, 0, size_t(E * 4), stream()));
    if (n > 0) {
      // Every pair counts (unlike the router loss, which counts tokens).
      countTokens<<<gridFor(n), kThreads, 0, stream()>>>(n, 1, E, experts,
                                                         counts);
      CUDA_CHECK_LAUNCH();
    }
  }
  // Rows no pair lands on (padding, rows past the kept pairs) are zero.
  if (N * H > 0)
    CUDA_CHECK(
        cudaMemsetAsync(rows, 0, size_t(N * H * dtypeSize(dtype)), stream()));
  if (n > 0) {
    Scratch keys(2 * n * int64_t(sizeof(uint64_t)) +
                 E * int64_t(sizeof(int64_t)));
    uint64_t *in = keys.as<uint64_t>(), *sorted = in + n;
    int64_t *start = reinterpret_cast<int64_t *>(sorted + n);
    pairKeys<<<gridFor(n), kThreads, 0, stream()>>>(n, E, experts, in);
    CUDA_CHECK_LAUNCH();
    if (pad_to > 0) {
      groupStarts<<<1, 1, 0, stream()>>>(E, counts, start);
      CUDA_CHECK_LAUNCH();
    }
    // Sort the bits that can differ: the pair index and experts 0..E.
    radixSort(in, sorted, n, 0, 32 + significantBits(uint64_t(E)));
    pairRows<<<gridFor(n), kThreads, 0, stream()>>>(n, E, pad_to, start, sorted,
                                                    row_map);
    CUDA_CHECK_LAUNCH();
    if (H > 0) {
      gatherRows<<<gridFor(n * H), kThreads, 0, stream()>>>(
          int(dtypeSize(dtype)), n, H, k, N, row_map, x, rows);
      CUDA_CHECK_LAUNCH();
    }
  }
  if (pad_to > 0 && E > 0) {
    fillInt<<<gridFor(E), kThreads, 0, stream()>>>(E, int32_t(pad_to), counts);
    CUDA_CHECK_LAUNCH();
  }
}

void loomrt::backend::loomrt_moe_permute_backward(loomrt_dtype dtype, int64_t T,
                                                  int64_t H, int64_t k,
                                                  const void *drows,
                                                  const int32_t *row_map,
                                                  void *dx) {
  if (T * H == 0)
    return;
  combineRows<<<gridFor(T * H), kThreads, 0, stream()>>>(dtype, T, H, k, drows,
                                                         nullptr, row_map, dx);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_unpermute(loomrt_dtype dtype, int64_t T,
                                           int64_t H, int64_t k,
                                           const void *rows, const float *probs,
                                           const int32_t *row_map, void *out) {
  if (T * H == 0)
    return;
  combineRows<<<gridFor(T * H), kThreads, 0, stream()>>>(dtype, T, H, k, rows,
                                                         probs, row_map, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_moe_unpermute_backward(
    loomrt_dtype dtype, int64_t T, int64_t H, int64_t k, int64_t N,
    const void *rows, const float *probs, const int32_t *row_map,
    const void *dout, void *drows, float *dprobs) {
  // Rows no pair maps to (capacity padding, dropped pairs) are zero: clear
  // all, then scatter; no two pairs share a row.
  if (N * H > 0)
    CUDA_CHECK(
        cudaMemsetAsync(drows, 0, size_t(N * H * dtypeSize(dtype)), stream()));
  if (T * k == 0)
    return;
  if (H > 0) {
    scatterRows<<<gridFor(T * k * H), kThreads, 0, stream()>>>(
        dtype, T, H, k, N, probs, row_map, dout, drows);
    CUDA_CHECK_LAUNCH();
  }
  pairDots<<<warpGrid(__func__, T * k), kThreads, 0, stream()>>>(
      dtype, T, H, k, rows, row_map, dout, dprobs);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_grouped_linear_forward(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *x, const void *W, const int32_t *counts, void *y) {
  // y [M, N] = x [M, K] W[e]^T: B(kk, j) = W[e][j, kk].
  groupedRows(__func__, dtype, M, N, K, E, x, W, 1, K, counts, y);
}

void loomrt::backend::loomrt_grouped_linear_backward_data(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *dy, const void *W, const int32_t *counts, void *dx) {
  // dx [M, K] = dy [M, N] W[e]: B(kk, j) = W[e][kk, j].
  groupedRows(__func__, dtype, M, K, N, E, dy, W, K, 1, counts, dx);
}

void loomrt::backend::loomrt_grouped_linear_backward_weight(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *dy, const void *x, const int32_t *counts, loomrt_dtype gdtype,
    void *dW, int32_t accumulate) {
  if (E == 0 || N == 0 || K == 0)
    return;
  const int64_t colTiles = (K + kTileN - 1) / kTileN;
  const int64_t rowTiles = (N + kTileM - 1) / kTileM;
  LOOMRT_CHECK(colTiles <= INT32_MAX && rowTiles <= 65535 && E <= 65535,
               "N=%lld K=%lld E=%lld are too many tiles for one grid",
               (long long)N, (long long)K, (long long)E);
  Scratch layout(2 * (E + 2) * int64_t(sizeof(int64_t)));
  int64_t *rowStart, *tileStart;
  groupLayoutOnDevice(E, M, counts, layout, rowStart, tileStart);
  groupedWeightGemm<<<dim3(unsigned(colTiles), unsigned(rowTiles), unsigned(E)),
                      kGemmThreads, 0, stream()>>>(dtype, N, K, rowStart, dy, x,
                                                   gdtype, dW, accumulate != 0);
  CUDA_CHECK_LAUNCH();
}

//===----------------------------------------------------------------------===//
// Sigmoid gate
//===----------------------------------------------------------------------===//

namespace {
__global__ void sigmoidGateForward(loomrt_dtype dt, int64_t rows, int64_t H,
                                   const void *x, const void *gate, void *out) {
  GRID_STRIDE(e, rows * H) {
    st(out, dt, e, sigmoid(ld(gate, dt, e / H)) * ld(x, dt, e));
  }
}

/// One block per row. dx may alias dout or x: the dot product is complete
/// (block barrier) before any write, and each element is read by the
/// thread that writes it.
__global__ void sigmoidGateBackward(loomrt_dtype dt, int64_t H, const void *x,
                                    const void *gate, const void *dout,
                                    void *dx, void *dgate) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float s = sigmoid(ld(gate, dt, row));
  float dot = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    dot += ld(dout, dt, row * H + i) * ld(x, dt, row * H + i);
  dot = blockSum(dot, shared);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
    st(dx, dt, row * H + i, s * ld(dout, dt, row * H + i));
  if (threadIdx.x == 0)
    st(dgate, dt, row, s * (1.0f - s) * dot);
}
} // namespace

void loomrt::backend::loomrt_sigmoid_gate_forward(loomrt_dtype dtype,
                                                  int64_t rows, int64_t H,
                                                  const void *x,
                                                  const void *gate, void *out) {
  if (rows * H == 0)
    return;
  sigmoidGateForward<<<gridFor(rows * H), kThreads, 0, stream()>>>(
      dtype, rows, H, x, gate, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_sigmoid_gate_backward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *gate, const void *dout, void *dx, void *dgate) {
  if (rows == 0)
    return;
  LOOMRT_CHECK(rows <= INT32_MAX, "%lld rows are too many for one grid",
               (long long)rows);
  sigmoidGateBackward<<<unsigned(rows), kRowThreads, 0, stream()>>>(
      dtype, H, x, gate, dout, dx, dgate);
  CUDA_CHECK_LAUNCH();
}

//===----------------------------------------------------------------------===//
// The allgather dispatcher's local rows
//===----------------------------------------------------------------------===//
//
// One block per run (local expert j, source rank s): thread 0 finds the
// run's first gathered row, first dispatched row and length from the
// counts in device memory (E + local * P reads), and the block copies it in
// 2-byte words (every dtype's rows are a whole number of them). No count
// reaches the host, so no call waits. Rows are copied only within the
// buffers: a run past M (counts no permute returns) is cut off there.

namespace {
struct ExpertRun {
  int64_t src, dst, n;
};

__device__ ExpertRun expertRun(int64_t P, int64_t r, int64_t E, int64_t N,
                               const int32_t *counts, int64_t j, int64_t s) {
  const int64_t local = E / P, e = r * local + j;
  ExpertRun run{s * N, 0, counts[s * E + e]};
  for (int64_t i = 0; i < e; ++i)
    run.src += counts[s * E + i];
  for (int64_t jj = 0; jj <= j; ++jj)
    for (int64_t ss = 0; ss < (jj == j ? s : P); ++ss)
      run.dst += counts[ss * E + r * local + jj];
  return run;
}

/// Block b < local * P copies run (b / P, b % P) between gathered and
/// dispatched (`take`: into dispatched). With `take`, the last block also
/// writes local_counts and zeroes the dispatched rows past the runs.
__global__ void copyExpertRuns(bool take, int64_t P, int64_t r, int64_t E,
                               int64_t N, int64_t M, int64_t rowWords,
                               const int32_t *counts, uint16_t *gathered,
                               uint16_t *dispatched, int32_t *localCounts) {
  __shared__ ExpertRun run;
  const int64_t local = E / P, b = blockIdx.x;
  if (b == local * P) {
    if (!take)
      return;
    // Every run's rows, then the tail.
    __shared__ int64_t received;
    if (threadIdx.x == 0) {
      received = 0;
      for (int64_t j = 0; j < local; ++j) {
        int64_t n = 0;
        for (int64_t s = 0; s < P; ++s)
          n += counts[s * E + r * local + j];
        localCounts[j] = int32_t(n);
        received += n;
      }
      received = received < M ? received : M;
    }
    __syncthreads();
    for (int64_t w = received * rowWords + threadIdx.x; w < M * rowWords;
         w += blockDim.x)
      dispatched[w] = 0;
    return;
  }
  if (threadIdx.x == 0)
    run = expertRun(P, r, E, N, counts, b / P, b % P);
  __syncthreads();
  int64_t n = run.n;
  if (run.dst + n > M)
    n = M - run.dst;
  if (run.src + n > P * N)
    n = P * N - run.src;
  for (int64_t w = threadIdx.x; w < n * rowWords; w += blockDim.x) {
    uint16_t *g = gathered + run.src * rowWords + w;
    uint16_t *d = dispatched + run.dst * rowWords + w;
    if (take)
      *d = *g;
    else
      *g = *d;
  }
}

void expertRuns(const char *fn, bool take, loomrt_dtype dtype, int64_t P,
                int64_t r, int64_t E, int64_t N, int64_t H, int64_t M,
                const int32_t *counts, const void *gathered,
                const void *dispatched, int32_t *localCounts) {
  const int64_t blocks = (E / P) * P + 1;
  LOOMRT_CHECK(blocks <= INT32_MAX, "%s: %lld experts are too many for one "
               "grid", fn, (long long)E);
  copyExpertRuns<<<unsigned(blocks), kRowThreads, 0, stream()>>>(
      take, P, r, E, N, M, H * int64_t(dtypeSize(dtype)) / 2, counts,
      static_cast<uint16_t *>(const_cast<void *>(gathered)),
      static_cast<uint16_t *>(const_cast<void *>(dispatched)), localCounts);
  CUDA_CHECK_LAUNCH();
}
} // namespace

void loomrt::backend::loomrt_moe_take_expert_rows(
    loomrt_dtype dtype, int64_t P, int64_t r, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *gathered,
    void *dispatched, int32_t *local_counts) {
  expertRuns(__func__, /*take=*/true, dtype, P, r, E, N, H, M, all_counts,
             gathered, dispatched, local_counts);
}

void loomrt::backend::loomrt_moe_put_expert_rows(
    loomrt_dtype dtype, int64_t P, int64_t r, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *dispatched,
    void *gathered) {
  if (P * N * H > 0)
    CUDA_CHECK(cudaMemsetAsync(gathered, 0,
                               size_t(P * N * H * dtypeSize(dtype)), stream()));
  expertRuns(__func__, /*take=*/false, dtype, P, r, E, N, H, M, all_counts,
             gathered, dispatched, nullptr);
}
