//===- CrossEntropy.cu - Cross-entropy, full and sharded -------*- CUDA -*-===//
//
// One thread block per row of logits for the row reductions (max, sum of
// exp) and the gradients; one single-block kernel for the masked sums over
// rows, accumulated in double in a fixed order (deterministic, as the cpu
// backend's). The scalar outputs (loss, masked_sum, mask_sum) may point to
// device or host memory.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"

using namespace loomrt;

namespace {
constexpr int kRowThreads = 256;

// This backend's grid limit, beyond the ABI's rules.
void checkCudaCE(const char *fn, int64_t n) {
  if (n > INT32_MAX)
    fatal(fn, "%lld rows are too many for one grid", (long long)n);
}

/// Reductions over the first `valid` of the V columns of a row (the rest
/// is vocabulary padding).
__device__ float rowMax(loomrt_dtype dt, const void *x, int64_t row, int64_t V,
                        int64_t valid, float *shared) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    m = fmaxf(m, ld(x, dt, row * V + j));
  return blockMax(m, shared);
}

__device__ float rowSumExp(loomrt_dtype dt, const void *x, int64_t row,
                           int64_t V, int64_t valid, float m, float *shared) {
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x)
    s += expf(ld(x, dt, row * V + j) - m);
  return blockSum(s, shared);
}

enum RowOp { RowLoss, RowMaxOnly, RowSumExpOnly };

/// Per-row reductions. RowLoss: out[i] = lse_i - x[i, labels[i]] (flags a
/// label outside [0, V) in *bad); RowMaxOnly: out[i] = max; RowSumExpOnly:
/// out[i] = sum exp(x - rowMax[i]).
__global__ void rowKernel(RowOp op, loomrt_dtype dt, int64_t V, int64_t valid,
                          const void *x, const int32_t *labels,
                          const float *rowMaxIn, float *out, int *bad) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  if (op == RowSumExpOnly) {
    const float s = rowSumExp(dt, x, row, V, valid, rowMaxIn[row], shared);
    if (threadIdx.x == 0)
      out[row] = s;
    return;
  }
  const float m = rowMax(dt, x, row, V, valid, shared);
  if (op == RowMaxOnly) {
    if (threadIdx.x == 0)
      out[row] = m;
    return;
  }
  const float s = rowSumExp(dt, x, row, V, valid, m, shared);
  if (threadIdx.x == 0) {
    const int32_t label = labels[row];
    if (label < 0 || label >= V) {
      *bad = 1;
      out[row] = 0.0f;
    } else {
      out[row] = m + logf(s) - ld(x, dt, row * V + label);
    }
  }
}

/// num = sum mask_i * rl_i, den = sum mask_i (mask NULL = ones) in double,
/// by one block in a fixed order. Writes loss = num/den (0 if den == 0) or,
/// for the vocab-parallel form, num and den themselves. With `scaleOut`,
/// writes dloss/den instead (the backward's row weight).
__global__ void maskedSums(int64_t n, const float *rl, const float *mask,
                           float dloss, float *lossOut, float *numOut,
                           float *denOut, float *scaleOut) {
  __shared__ double sn[1024], sd[1024];
  double num = 0.0, den = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double m = mask ? double(mask[i]) : 1.0;
    if (rl)
      num += m * double(rl[i]);
    den += m;
  }
  sn[threadIdx.x] = num;
  sd[threadIdx.x] = den;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s) {
      sn[threadIdx.x] += sn[threadIdx.x + s];
      sd[threadIdx.x] += sd[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x != 0)
    return;
  if (lossOut)
    *lossOut = sd[0] == 0 ? 0.0f : float(sn[0] / sd[0]);
  if (numOut)
    *numOut = float(sn[0]);
  if (denOut)
    *denOut = float(sd[0]);
  if (scaleOut)
    *scaleOut = sd[0] == 0 ? 0.0f : float(double(dloss) / sd[0]);
}

/// dlogits[i, j] = (exp(x - max_i) / sumexp_i - [j == target_i]) * w_i with
/// w_i = mask_i * (*scale). Full form: max/sumexp recomputed here (rowMaxIn
/// NULL), target = labels[i]; vocab-parallel form: the reduced max/sumexp
/// are given and target = labels[i] - vocabStart. dlogits may alias x: each
/// element is read by the thread that writes it, after the reductions.
__global__ void ceGradKernel(loomrt_dtype dt, int64_t V, int64_t valid,
                             const void *x,
                             const int32_t *labels, int64_t vocabStart,
                             const float *rowMaxIn, const float *sumExpIn,
                             const float *mask, const float *scale,
                             float gradScale, void *dx) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  float m, s;
  if (rowMaxIn) {
    m = rowMaxIn[row];
    s = sumExpIn[row];
  } else {
    m = rowMax(dt, x, row, V, valid, shared);
    s = rowSumExp(dt, x, row, V, valid, m, shared);
  }
  const float w = (mask ? mask[row] : 1.0f) * (scale ? *scale : gradScale);
  const float inv = 1.0f / s;
  const int64_t t = int64_t(labels[row]) - vocabStart;
  for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
    // Padding columns (j >= valid) are not in the softmax: no gradient.
    float g = j < valid ? expf(ld(x, dt, row * V + j) - m) * inv * w : 0.0f;
    if (j == t)
      g -= w;
    st(dx, dt, row * V + j, g);
  }
}

__global__ void localTarget(loomrt_dtype dt, int64_t n, int64_t Vl,
                            const void *x, const int32_t *labels,
                            int64_t vocabStart, float *target) {
  GRID_STRIDE(i, n) {
    const int64_t j = int64_t(labels[i]) - vocabStart;
    target[i] = j < 0 || j >= Vl ? 0.0f : ld(x, dt, i * Vl + j);
  }
}

__global__ void lossFromParts(int64_t n, const float *rowMax,
                              const float *sumExp, const float *target,
                              float *rowLoss) {
  GRID_STRIDE(i, n) { rowLoss[i] = logf(sumExp[i]) + rowMax[i] - target[i]; }
}
} // namespace

void loomrt::backend::loomrt_cross_entropy_forward(
    loomrt_dtype dtype, int64_t n, int64_t V, const void *logits,
    const int32_t *labels, const float *mask, float *loss, float *row_loss) {
  checkCudaCE(__func__, n);
  Scratch result(sizeof(float) + sizeof(int));
  float *lossDev = result.as<float>();
  int *bad = reinterpret_cast<int *>(lossDev + 1);
  if (n == 0) {
    CUDA_CHECK(cudaMemsetAsync(lossDev, 0, sizeof(float), stream()));
    storeScalar(loss, lossDev);
    return;
  }
  Scratch rlBuf(row_loss ? 0 : n * 4);
  float *rl = row_loss ? row_loss : rlBuf.as<float>();
  CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), stream()));
  rowKernel<<<unsigned(n), kRowThreads, 0, stream()>>>(
      RowLoss, dtype, V, V, logits, labels, nullptr, rl, bad);
  CUDA_CHECK_LAUNCH();
  maskedSums<<<1, 1024, 0, stream()>>>(n, rl, mask, 0.0f, lossDev, nullptr,
                                       nullptr, nullptr);
  CUDA_CHECK_LAUNCH();
  int badHost = 0;
  CUDA_CHECK(cudaMemcpyAsync(&badHost, bad, sizeof(int), cudaMemcpyDeviceToHost,
                             stream()));
  storeScalar(loss, lossDev); // synchronizes, so badHost is valid after it
  if (badHost)
    fatal("loomrt_cross_entropy", "a label is outside [0, %lld)", (long long)V);
}

// Labels are not range-checked here (that would cost a host round trip);
// the forward of the same batch has checked them.
void loomrt::backend::loomrt_cross_entropy_backward(
    loomrt_dtype dtype, int64_t n, int64_t V, const void *logits,
    const int32_t *labels, const float *mask, float dloss, void *dlogits) {
  checkCudaCE(__func__, n);
  if (n == 0)
    return;
  Scratch scale(sizeof(float));
  maskedSums<<<1, 1024, 0, stream()>>>(n, nullptr, mask, dloss, nullptr,
                                       nullptr, nullptr, scale.as<float>());
  CUDA_CHECK_LAUNCH();
  ceGradKernel<<<unsigned(n), kRowThreads, 0, stream()>>>(
      dtype, V, V, logits, labels, 0, nullptr, nullptr, mask, scale.as<float>(),
      0.0f, dlogits);
  CUDA_CHECK_LAUNCH();
}

//===----------------------------------------------------------------------===//
// Vocab-parallel pieces
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_ce_local_max(loomrt_dtype dtype, int64_t n,
                                          int64_t Vl, int64_t valid,
                                          const void *logits, float *row_max) {
  checkCudaCE(__func__, n);
  if (n == 0)
    return;
  rowKernel<<<unsigned(n), kRowThreads, 0, stream()>>>(
      RowMaxOnly, dtype, Vl, valid, logits, nullptr, nullptr, row_max, nullptr);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_ce_local_sum_exp(loomrt_dtype dtype, int64_t n,
                                              int64_t Vl, int64_t valid,
                                              const void *logits,
                                              const float *row_max,
                                              float *sum_exp) {
  checkCudaCE(__func__, n);
  if (n == 0)
    return;
  rowKernel<<<unsigned(n), kRowThreads, 0, stream()>>>(
      RowSumExpOnly, dtype, Vl, valid, logits, nullptr, row_max, sum_exp,
      nullptr);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_ce_local_target(loomrt_dtype dtype, int64_t n,
                                             int64_t Vl, const void *logits,
                                             const int32_t *labels,
                                             int64_t vocab_start,
                                             float *target) {
  checkCudaCE(__func__, n);
  if (n == 0)
    return;
  localTarget<<<gridFor(n), kThreads, 0, stream()>>>(
      dtype, n, Vl, logits, labels, vocab_start, target);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_ce_loss_from_parts(
    int64_t n, const float *row_max, const float *sum_exp, const float *target,
    const float *mask, float *row_loss, float *masked_sum, float *mask_sum) {
  Scratch sums(2 * sizeof(float));
  Scratch rlBuf(row_loss ? 0 : n * 4);
  float *rl = row_loss ? row_loss : rlBuf.as<float>();
  if (n > 0) {
    lossFromParts<<<gridFor(n), kThreads, 0, stream()>>>(n, row_max, sum_exp,
                                                         target, rl);
    CUDA_CHECK_LAUNCH();
  }
  maskedSums<<<1, 1024, 0, stream()>>>(n, rl, mask, 0.0f, nullptr,
                                       sums.as<float>(), sums.as<float>() + 1,
                                       nullptr);
  CUDA_CHECK_LAUNCH();
  storeScalar(masked_sum, sums.as<float>());
  storeScalar(mask_sum, sums.as<float>() + 1);
}

void loomrt::backend::loomrt_mask_sum(int64_t n, const float *mask,
                                      float *sum) {
  maskedSums<<<1, 1024, 0, stream()>>>(n, nullptr, mask, 0.0f, nullptr,
                                       nullptr, sum, nullptr);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_ce_vocab_parallel_backward(
    loomrt_dtype dtype, int64_t n, int64_t Vl, int64_t valid,
    const void *logits, const int32_t *labels, int64_t vocab_start,
    const float *row_max, const float *sum_exp, const float *mask,
    const float *grad_scale, void *dlogits) {
  checkCudaCE(__func__, n);
  if (n == 0)
    return;
  ceGradKernel<<<unsigned(n), kRowThreads, 0, stream()>>>(
      dtype, Vl, valid, logits, labels, vocab_start, row_max, sum_exp, mask,
      grad_scale, 0.0f, dlogits);
  CUDA_CHECK_LAUNCH();
}
