//===- Elementwise.cu - Casts, activations, dropout, AdamW -----*- CUDA -*-===//
//
// Elementwise kernels: grid-stride loops, one element per thread per step,
// f32 arithmetic, one rounding on the store. The two functions that return
// a value to the host (has_nonfinite, sum_squares) synchronize.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/AdamwStep.h"
#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"

#include <cmath>

using namespace loomrt;

//===----------------------------------------------------------------------===//
// Casts and checks
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_cast(loomrt_dtype src_dtype, const void *src,
                                  loomrt_dtype dst_dtype, void *dst,
                                  int64_t n) {
  if (n == 0)
    return;
  if (src_dtype == dst_dtype) {
    if (src != dst)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n * dtypeSize(src_dtype)),
                                 cudaMemcpyDefault, stream()));
    return;
  }
  // In place (bf16 <-> f16) is safe: each thread reads its element before
  // writing it.
  convert(src_dtype, src, dst_dtype, dst, n);
}

namespace {
__global__ void nonfiniteKernel(int size, uint16_t mask16, const void *x,
                                int64_t n, int *found) {
  bool any = false;
  GRID_STRIDE(i, n) {
    if (size == 4)
      any |= (static_cast<const uint32_t *>(x)[i] & 0x7f800000u) == 0x7f800000u;
    else
      any |= (static_cast<const uint16_t *>(x)[i] & mask16) == mask16;
  }
  // Every writer stores the same value, so the race is benign.
  if (__syncthreads_or(any) && threadIdx.x == 0)
    *found = 1;
}
} // namespace

int32_t loomrt::backend::loomrt_has_nonfinite(loomrt_dtype dtype, const void *x,
                                              int64_t n) {
  const int64_t size = dtypeSize(dtype);
  if (n == 0)
    return 0;
  // Non-finite means "all exponent bits set": test the bits, no conversion.
  Scratch flag(sizeof(int));
  CUDA_CHECK(cudaMemsetAsync(flag.as<int>(), 0, sizeof(int), stream()));
  nonfiniteKernel<<<gridFor(n), kThreads, 0, stream()>>>(
      int(size), dtype == LOOMRT_BF16 ? 0x7f80u : 0x7c00u, x, n,
      flag.as<int>());
  CUDA_CHECK_LAUNCH();
  int found = 0;
  CUDA_CHECK(cudaMemcpyAsync(&found, flag.as<int>(), sizeof(int),
                             cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(syncStream(stream()));
  return found ? 1 : 0;
}

//===----------------------------------------------------------------------===//
// Scale, axpy, add, sum of squares
//===----------------------------------------------------------------------===//

namespace {
__global__ void scaleKernel(loomrt_dtype dt, void *x, int64_t n, float a) {
  GRID_STRIDE(i, n) { st(x, dt, i, ld(x, dt, i) * a); }
}

__global__ void axpyKernel(int64_t n, float a, loomrt_dtype xd, const void *x,
                           loomrt_dtype yd, void *y) {
  GRID_STRIDE(i, n) { st(y, yd, i, ld(y, yd, i) + a * ld(x, xd, i)); }
}

__global__ void addKernel(loomrt_dtype dt, int64_t n, const void *a,
                          const void *b, void *out) {
  GRID_STRIDE(i, n) { st(out, dt, i, ld(a, dt, i) + ld(b, dt, i)); }
}

__global__ void addBiasKernel(loomrt_dtype dt, int64_t rows, int64_t n,
                              const void *x, const void *bias, void *out) {
  GRID_STRIDE(i, rows * n) {
    st(out, dt, i, ld(x, dt, i) + ld(bias, dt, i % n));
  }
}

// As on the cpu backend: f32 partial sums over blocks of kSumBlock
// elements, double across blocks. One CUDA block per element block.
constexpr int64_t kSumBlock = 4096;

__global__ void sumSquaresBlocks(loomrt_dtype dt, const void *x, int64_t n,
                                 float *partial) {
  __shared__ float shared[32];
  const int64_t begin = int64_t(blockIdx.x) * kSumBlock;
  const int64_t end = begin + kSumBlock < n ? begin + kSumBlock : n;
  float acc = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float v = ld(x, dt, i);
    acc += v * v;
  }
  acc = blockSum(acc, shared);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}

__global__ void sumPartials(const float *partial, int64_t count,
                            float *result) {
  __shared__ double shared[1024];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x)
    acc += double(partial[i]);
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s)
      shared[threadIdx.x] += shared[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    *result = float(shared[0]);
}
} // namespace

namespace {
__global__ void safeDivideKernel(const float *num, const float *den,
                                 float *out) {
  float d = *den;
  *out = d == 0.0f ? 0.0f : *num / d;
}
} // namespace

void loomrt::backend::loomrt_safe_divide(const float *num, const float *den,
                                         float *out) {
  safeDivideKernel<<<1, 1, 0, stream()>>>(num, den, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_scale(loomrt_dtype dtype, void *x, int64_t n,
                                   float alpha) {
  if (n == 0)
    return;
  scaleKernel<<<gridFor(n), kThreads, 0, stream()>>>(dtype, x, n, alpha);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_axpy(int64_t n, float alpha, loomrt_dtype x_dtype,
                                  const void *x, loomrt_dtype y_dtype,
                                  void *y) {
  if (n == 0)
    return;
  axpyKernel<<<gridFor(n), kThreads, 0, stream()>>>(n, alpha, x_dtype, x,
                                                    y_dtype, y);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_add(loomrt_dtype dtype, int64_t n, const void *a,
                                 const void *b, void *out) {
  if (n == 0)
    return;
  addKernel<<<gridFor(n), kThreads, 0, stream()>>>(dtype, n, a, b, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_add_bias(loomrt_dtype dtype, int64_t rows,
                                      int64_t n, const void *x,
                                      const void *bias, void *out) {
  if (rows * n == 0)
    return;
  addBiasKernel<<<gridFor(rows * n), kThreads, 0, stream()>>>(dtype, rows, n,
                                                              x, bias, out);
  CUDA_CHECK_LAUNCH();
}

namespace {
/// Queues sum(x[i]^2) into *result (device memory; partials in `scratch`).
void sumSquaresInto(loomrt_dtype dtype, const void *x, int64_t n,
                    Scratch &scratch, float *result) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  sumSquaresBlocks<<<unsigned(blocks), kThreads, 0, stream()>>>(
      dtype, x, n, scratch.as<float>());
  CUDA_CHECK_LAUNCH();
  sumPartials<<<1, 1024, 0, stream()>>>(scratch.as<float>(), blocks, result);
  CUDA_CHECK_LAUNCH();
}

__global__ void addScalarKernel(float *acc, const float *value) {
  *acc += *value;
}

int64_t sumBlocks(int64_t n) {
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  LOOMRT_CHECK(blocks <= INT32_MAX, "%lld elements are too many", (long long)n);
  return blocks;
}
} // namespace

void loomrt::backend::loomrt_sum_squares_add(loomrt_dtype dtype, const void *x,
                                             int64_t n, float *acc) {
  if (n == 0)
    return;
  const int64_t blocks = sumBlocks(n);
  Scratch partial((blocks + 1) * int64_t(sizeof(float)));
  float *result = partial.as<float>() + blocks;
  sumSquaresInto(dtype, x, n, partial, result);
  addScalarKernel<<<1, 1, 0, stream()>>>(acc, result);
  CUDA_CHECK_LAUNCH();
}

float loomrt::backend::loomrt_sum_squares(loomrt_dtype dtype, const void *x,
                                          int64_t n) {
  if (n == 0)
    return 0.0f;
  const int64_t blocks = sumBlocks(n);
  Scratch partial((blocks + 1) * int64_t(sizeof(float)));
  float *result = partial.as<float>() + blocks;
  sumSquaresInto(dtype, x, n, partial, result);
  float total = 0.0f;
  CUDA_CHECK(cudaMemcpyAsync(&total, result, sizeof(float),
                             cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(syncStream(stream()));
  return total;
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

namespace {
constexpr float kSqrtHalf = 0.70710678118654752f;    // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f; // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;

__device__ float gelu(float x, bool tanhApprox) {
  if (tanhApprox)
    return 0.5f * x *
           (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
  return 0.5f * x * (1.0f + erff(x * kSqrtHalf));
}

__device__ float geluGrad(float x, bool tanhApprox) {
  if (tanhApprox) {
    float t = tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
  }
  return 0.5f * (1.0f + erff(x * kSqrtHalf)) +
         x * kInvSqrt2Pi * expf(-0.5f * x * x);
}

__device__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

__device__ float siluGrad(float x) {
  float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}

enum Act { GeluErf, GeluTanh, Silu };

__device__ float activation(Act a, float x) {
  return a == Silu ? x * sigmoid(x) : gelu(x, a == GeluTanh);
}
__device__ float activationGrad(Act a, float x) {
  return a == Silu ? siluGrad(x) : geluGrad(x, a == GeluTanh);
}

__global__ void actForward(Act a, loomrt_dtype dt, int64_t n, const void *x,
                           void *y) {
  GRID_STRIDE(i, n) { st(y, dt, i, activation(a, ld(x, dt, i))); }
}

// dx may alias dy: each element is read before it is written.
__global__ void actBackward(Act a, loomrt_dtype dt, int64_t n, const void *x,
                            const void *dy, void *dx) {
  GRID_STRIDE(i, n) {
    st(dx, dt, i, ld(dy, dt, i) * activationGrad(a, ld(x, dt, i)));
  }
}

void launchAct(Act a, loomrt_dtype dtype, int64_t n, const void *x,
               const void *dy, void *out) {
  if (n == 0)
    return;
  if (dy)
    actBackward<<<gridFor(n), kThreads, 0, stream()>>>(a, dtype, n, x, dy, out);
  else
    actForward<<<gridFor(n), kThreads, 0, stream()>>>(a, dtype, n, x, out);
  CUDA_CHECK_LAUNCH();
}

Act geluKind(int32_t approximate) {
  return approximate == LOOMRT_GELU_TANH ? GeluTanh : GeluErf;
}
} // namespace

void loomrt::backend::loomrt_gelu_forward(loomrt_dtype dtype,
                                          int32_t approximate, int64_t n,
                                          const void *x, void *y) {
  launchAct(geluKind(approximate), dtype, n, x, nullptr, y);
}

void loomrt::backend::loomrt_gelu_backward(loomrt_dtype dtype,
                                           int32_t approximate, int64_t n,
                                           const void *x, const void *dy,
                                           void *dx) {
  launchAct(geluKind(approximate), dtype, n, x, dy, dx);
}

void loomrt::backend::loomrt_silu_forward(loomrt_dtype dtype, int64_t n,
                                          const void *x, void *y) {
  launchAct(Silu, dtype, n, x, nullptr, y);
}

void loomrt::backend::loomrt_silu_backward(loomrt_dtype dtype, int64_t n,
                                           const void *x, const void *dy,
                                           void *dx) {
  launchAct(Silu, dtype, n, x, dy, dx);
}

//===----------------------------------------------------------------------===//
// SwiGLU
//===----------------------------------------------------------------------===//

namespace {
__global__ void swigluForward(loomrt_dtype dt, int64_t rows, int64_t F,
                              int64_t ld_, const void *gate, const void *up,
                              void *out) {
  GRID_STRIDE(e, rows * F) {
    const int64_t r = e / F, i = e % F;
    const float g = ld(gate, dt, r * ld_ + i), u = ld(up, dt, r * ld_ + i);
    st(out, dt, e, g * sigmoid(g) * u);
  }
}

__global__ void swigluBackward(loomrt_dtype dt, int64_t rows, int64_t F,
                               int64_t ld_, const void *gate, const void *up,
                               const void *dout, void *dgate, void *dup) {
  GRID_STRIDE(e, rows * F) {
    const int64_t r = e / F, i = e % F, k = r * ld_ + i;
    const float g = ld(gate, dt, k), u = ld(up, dt, k), d = ld(dout, dt, e);
    const float s = sigmoid(g);
    st(dgate, dt, k, d * u * s * (1.0f + g * (1.0f - s)));
    st(dup, dt, k, d * g * s);
  }
}

} // namespace

void loomrt::backend::loomrt_swiglu_forward(loomrt_dtype dtype, int64_t rows,
                                            int64_t F, int64_t in_ld,
                                            const void *gate, const void *up,
                                            void *out) {
  if (rows == 0 || F == 0)
    return;
  swigluForward<<<gridFor(rows * F), kThreads, 0, stream()>>>(
      dtype, rows, F, in_ld, gate, up, out);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_swiglu_backward(loomrt_dtype dtype, int64_t rows,
                                             int64_t F, int64_t in_ld,
                                             const void *gate, const void *up,
                                             const void *dout, void *dgate,
                                             void *dup) {
  if (rows == 0 || F == 0)
    return;
  swigluBackward<<<gridFor(rows * F), kThreads, 0, stream()>>>(
      dtype, rows, F, in_ld, gate, up, dout, dgate, dup);
  CUDA_CHECK_LAUNCH();
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

namespace {
/// Philox4x32-10 keyed by seed on counter c, word w: the same generator and
/// the same bits as the cpu backend (and cuRAND), so both backends drop the
/// same elements.
__device__ uint32_t philoxWord(uint64_t seed, uint64_t counter, int w) {
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
    const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return w == 0 ? c0 : w == 1 ? c1 : w == 2 ? c2 : c3;
}

__global__ void dropoutKernel(loomrt_dtype dt, int64_t rows, int64_t cols,
                              const void *x, void *y, float p, uint64_t seed,
                              int64_t offset, int64_t rowStride,
                              float keepScale) {
  GRID_STRIDE(e, rows * cols) {
    const uint64_t g = uint64_t(offset + (e / cols) * rowStride + e % cols);
    // 24 random bits give a float in [0,1) with no rounding up to 1.
    const float u =
        float(philoxWord(seed, g / 4, int(g % 4)) >> 8) * (1.0f / 16777216.0f);
    st(y, dt, e, u >= p ? ld(x, dt, e) * keepScale : 0.0f);
  }
}

void dropout(loomrt_dtype dtype, int64_t rows, int64_t cols, const void *x,
             void *y, float p, uint64_t seed, int64_t offset,
             int64_t rowStride) {
  if (rows == 0 || cols == 0)
    return;
  const float keepScale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  dropoutKernel<<<gridFor(rows * cols), kThreads, 0, stream()>>>(
      dtype, rows, cols, x, y, p, seed, offset, rowStride, keepScale);
  CUDA_CHECK_LAUNCH();
}
} // namespace

void loomrt::backend::loomrt_dropout_forward(loomrt_dtype dtype, int64_t rows,
                                             int64_t cols, const void *x,
                                             void *y, float p, uint64_t seed,
                                             int64_t offset,
                                             int64_t row_stride) {
  dropout(dtype, rows, cols, x, y, p, seed, offset, row_stride);
}

void loomrt::backend::loomrt_dropout_backward(loomrt_dtype dtype, int64_t rows,
                                              int64_t cols, const void *dy,
                                              void *dx, float p, uint64_t seed,
                                              int64_t offset,
                                              int64_t row_stride) {
  dropout(dtype, rows, cols, dy, dx, p, seed, offset, row_stride);
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

namespace {
// The arithmetic is the cpu backend's (AdamwStep.h). The skip and the clip
// coefficient come from the gradient's sum of squares on the device (no
// host wait).
__global__ void adamwKernel(int64_t n, float *param, const float *grad,
                            float *m1, float *m2, const AdamwStep step,
                            float decay, const float *sumsq, float maxNorm) {
  float clip;
  if (!adamwRuns(sumsq, maxNorm, clip))
    return; // skipped
  GRID_STRIDE(i, n) {
    adamwElement(step, clip, decay, param, grad, m1, m2, i);
  }
}

// loomrt_adamw_multi launches one kernel per group of up to kMultiTensors
// tensors, whose table travels by value as the kernel's parameter: no
// host-to-device copy, so a CUDA graph can capture the launch. Each tensor
// is cut into chunks of kMultiChunk elements, one block per chunk.
constexpr int kMultiTensors = 64;
constexpr int64_t kMultiChunk = 16 * kThreads;

struct MultiTensor {
  float *param;
  const float *grad;
  float *m1, *m2;
  void *model; // NULL: no cast
  int64_t n;
  float decay;
};

struct MultiLaunch {
  AdamwStep step;
  const float *sumsq;
  float maxNorm;
  loomrt_dtype modelDtype;
  int32_t count;
  // Tensor k owns blocks [firstBlock[k], firstBlock[k + 1]).
  int32_t firstBlock[kMultiTensors + 1];
  MultiTensor tensors[kMultiTensors];
};
// The classic limit of a kernel's parameters, which every toolkit accepts.
static_assert(sizeof(MultiLaunch) <= 4096, "kernel parameters over 4 KB");

__global__ void adamwMultiKernel(const __grid_constant__ MultiLaunch a) {
  float clip;
  if (!adamwRuns(a.sumsq, a.maxNorm, clip))
    return; // skipped
  // This block's tensor: the last one starting at or before it.
  const int32_t block = int32_t(blockIdx.x);
  int lo = 0, hi = a.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.firstBlock[mid] <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  const MultiTensor &t = a.tensors[lo];
  const int64_t begin = int64_t(block - a.firstBlock[lo]) * kMultiChunk;
  const int64_t end = begin + kMultiChunk < t.n ? begin + kMultiChunk : t.n;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float p =
        adamwElement(a.step, clip, t.decay, t.param, t.grad, t.m1, t.m2, i);
    if (t.model)
      st(t.model, a.modelDtype, i, p); // loomrt_cast's rounding
  }
}
} // namespace

void loomrt::backend::loomrt_adamw(int64_t n, float *param, const float *grad,
                                   float *exp_avg, float *exp_avg_sq, float lr,
                                   float beta1, float beta2, float eps,
                                   float weight_decay, int64_t step,
                                   const float *grad_sumsq, float max_norm) {
  if (n == 0)
    return;
  // The scalars are computed on the host exactly as the cpu backend does.
  const AdamwStep s(lr, beta1, beta2, eps, step);
  adamwKernel<<<gridFor(n), kThreads, 0, stream()>>>(
      n, param, grad, exp_avg, exp_avg_sq, s, s.decay(weight_decay),
      grad_sumsq, max_norm);
  CUDA_CHECK_LAUNCH();
}

void loomrt::backend::loomrt_adamw_multi(int64_t count,
                                         const loomrt_adamw_tensor *tensors,
                                         loomrt_dtype model_dtype, float lr,
                                         float beta1, float beta2, float eps,
                                         int64_t step, const float *grad_sumsq,
                                         float max_norm) {
  MultiLaunch a{AdamwStep(lr, beta1, beta2, eps, step), grad_sumsq, max_norm,
                model_dtype, 0, {}, {}};
  int64_t blocks = 0;
  auto launch = [&] {
    if (a.count == 0)
      return;
    a.firstBlock[a.count] = int32_t(blocks);
    adamwMultiKernel<<<unsigned(blocks), kThreads, 0, stream()>>>(a);
    CUDA_CHECK_LAUNCH();
    a.count = 0;
    blocks = 0;
  };
  for (int64_t i = 0; i < count; ++i) {
    const loomrt_adamw_tensor &t = tensors[i];
    if (t.n == 0)
      continue;
    const int64_t need = (t.n + kMultiChunk - 1) / kMultiChunk;
    LOOMRT_CHECK(need <= INT32_MAX, "tensors[%lld]: %lld elements are too many",
                 (long long)i, (long long)t.n);
    if (a.count == kMultiTensors || blocks + need > INT32_MAX)
      launch();
    a.firstBlock[a.count] = int32_t(blocks);
    a.tensors[a.count++] = {t.param, t.grad, t.exp_avg, t.exp_avg_sq,
                            t.model, t.n, a.step.decay(t.weight_decay)};
    blocks += need;
  }
  launch();
}
