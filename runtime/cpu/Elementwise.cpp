//===- Elementwise.cpp - Casts, activations, dropout, AdamW -----*- C++ -*-===//
//
// Elementwise kernels. They walk the tensor in blocks of kBlock elements,
// widening each block of a bf16/f16 operand to f32 on the stack, so no
// kernel here allocates.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/AdamwStep.h"
#include "runtime/common/Backend.h"
#include "runtime/common/Profile.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <algorithm>
#include <cmath>

using namespace loomrt;

//===----------------------------------------------------------------------===//
// Casts and checks
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_cast(loomrt_dtype src_dtype, const void *src,
                                  loomrt_dtype dst_dtype, void *dst,
                                  int64_t n) {
  LOOMRT_DEVICE_CALL(src, dst);
  if (n == 0)
    return;
  if (src_dtype == dst_dtype) {
    if (src != dst)
      std::memcpy(dst, src, size_t(n * dtypeSize(src_dtype)));
    return;
  }
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float tmp[kBlock];
    const float *v = loadBlock(src_dtype, src, begin, len, tmp);
    if (dst_dtype == LOOMRT_F32)
      std::memcpy(static_cast<float *>(dst) + begin, v, size_t(len) * 4);
    else
      fromF32(v, dst_dtype, static_cast<char *>(dst) + begin * 2, len);
  });
}

int32_t loomrt::backend::loomrt_has_nonfinite(loomrt_dtype dtype, const void *x,
                                              int64_t n) {
  LOOMRT_DEVICE_CALL(x);
  profile::hostSync(); // the answer is the host's
  const int64_t size = dtypeSize(dtype);
  if (n == 0)
    return 0;
  // Non-finite means "all exponent bits set": test the bits, no conversion.
  int found = 0;
  if (size == 4) {
    auto *u = static_cast<const uint32_t *>(x);
#pragma omp parallel for reduction(| : found) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      found |= (u[i] & 0x7f800000u) == 0x7f800000u;
  } else {
    uint16_t mask = dtype == LOOMRT_BF16 ? 0x7f80u : 0x7c00u;
    auto *u = static_cast<const uint16_t *>(x);
#pragma omp parallel for reduction(| : found) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      found |= (u[i] & mask) == mask;
  }
  return found ? 1 : 0;
}

//===----------------------------------------------------------------------===//
// Scale, axpy, add, sum of squares
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_scale(loomrt_dtype dtype, void *x, int64_t n,
                                   float alpha) {
  LOOMRT_DEVICE_CALL(x);
  if (n == 0)
    return;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float tmp[kBlock];
    loadBlock(dtype, x, begin, len, tmp);
    float *v = outBlock(dtype, x, begin, tmp);
    for (int64_t i = 0; i < len; ++i)
      v[i] *= alpha;
    storeBlock(v, dtype, x, begin, len);
  });
}

void loomrt::backend::loomrt_axpy(int64_t n, float alpha, loomrt_dtype x_dtype,
                                  const void *x, loomrt_dtype y_dtype,
                                  void *y) {
  LOOMRT_DEVICE_CALL(x, y);
  if (n == 0)
    return;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float xt[kBlock], yt[kBlock];
    const float *xv = loadBlock(x_dtype, x, begin, len, xt);
    loadBlock(y_dtype, y, begin, len, yt);
    float *yv = outBlock(y_dtype, y, begin, yt);
    for (int64_t i = 0; i < len; ++i)
      yv[i] += alpha * xv[i];
    storeBlock(yv, y_dtype, y, begin, len);
  });
}

void loomrt::backend::loomrt_add(loomrt_dtype dtype, int64_t n, const void *a,
                                 const void *b, void *out) {
  LOOMRT_DEVICE_CALL(a, b, out);
  if (n == 0)
    return;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float at[kBlock], bt[kBlock], ot[kBlock];
    const float *av = loadBlock(dtype, a, begin, len, at);
    const float *bv = loadBlock(dtype, b, begin, len, bt);
    float *ov = outBlock(dtype, out, begin, ot);
    for (int64_t i = 0; i < len; ++i)
      ov[i] = av[i] + bv[i];
    storeBlock(ov, dtype, out, begin, len);
  });
}

void loomrt::backend::loomrt_add_bias(loomrt_dtype dtype, int64_t rows,
                                      int64_t n, const void *x,
                                      const void *bias, void *out) {
  LOOMRT_DEVICE_CALL(x, bias, out);
  if (rows * n == 0)
    return;
  std::vector<float> b(static_cast<size_t>(n));
  const float *bv = loadBlock(dtype, bias, 0, n, b.data());
  if (bv != b.data())
    std::copy(bv, bv + n, b.data());
  parallelBlocks(rows * n, [&](int64_t begin, int64_t len) {
    float xt[kBlock], ot[kBlock];
    const float *xv = loadBlock(dtype, x, begin, len, xt);
    float *ov = outBlock(dtype, out, begin, ot);
    for (int64_t i = 0; i < len; ++i)
      ov[i] = xv[i] + b[size_t((begin + i) % n)];
    storeBlock(ov, dtype, out, begin, len);
  });
}

void loomrt::backend::loomrt_safe_divide(const float *num, const float *den,
                                         float *out) {
  LOOMRT_DEVICE_CALL(num, den, out);
  *out = *den == 0.0f ? 0.0f : *num / *den;
}

namespace {
/// sum(x[i]^2): f32 per block, double across blocks.
double sumSquares(loomrt_dtype dtype, const void *x, int64_t n) {
  if (n == 0)
    return 0.0;
  const int64_t numBlocks = (n + kBlock - 1) / kBlock;
  double total = 0.0;
#pragma omp parallel for reduction(+ : total) if (n > kMinParallelWork)
  for (int64_t b = 0; b < numBlocks; ++b) {
    int64_t begin = b * kBlock, len = std::min(kBlock, n - begin);
    float tmp[kBlock], sq[kBlock];
    const float *v = loadBlock(dtype, x, begin, len, tmp);
    for (int64_t i = 0; i < len; ++i)
      sq[i] = v[i] * v[i];
    total += double(sumF32(sq, len));
  }
  return total;
}
} // namespace

float loomrt::backend::loomrt_sum_squares(loomrt_dtype dtype, const void *x,
                                          int64_t n) {
  LOOMRT_DEVICE_CALL(x);
  profile::hostSync(); // the sum is the host's
  return float(sumSquares(dtype, x, n));
}

void loomrt::backend::loomrt_sum_squares_add(loomrt_dtype dtype, const void *x,
                                             int64_t n, float *acc) {
  LOOMRT_DEVICE_CALL(x, acc);
  *acc += float(sumSquares(dtype, x, n));
}

//===----------------------------------------------------------------------===//
// Activations
//===----------------------------------------------------------------------===//

namespace {
constexpr float kSqrtHalf = 0.70710678118654752f;    // 1/sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1/sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f; // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;

float gelu(float x, bool tanhApprox) {
  if (tanhApprox)
    return 0.5f * x *
           (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
  return 0.5f * x * (1.0f + std::erf(x * kSqrtHalf));
}

float geluGrad(float x, bool tanhApprox) {
  if (tanhApprox) {
    float t = std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du;
  }
  return 0.5f * (1.0f + std::erf(x * kSqrtHalf)) +
         x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// Shared driver of y = f(x) and dx = dy * f'(x) kernels.
template <typename Fn>
void unary(loomrt_dtype dtype, int64_t n, const void *x, void *y, Fn f) {
  if (n == 0)
    return;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float xt[kBlock], yt[kBlock];
    const float *xv = loadBlock(dtype, x, begin, len, xt);
    float *yv = outBlock(dtype, y, begin, yt);
    for (int64_t i = 0; i < len; ++i)
      yv[i] = f(xv[i]);
    storeBlock(yv, dtype, y, begin, len);
  });
}

template <typename Fn>
void unaryBackward(loomrt_dtype dtype, int64_t n, const void *x, const void *dy,
                   void *dx, Fn grad) {
  if (n == 0)
    return;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float xt[kBlock], dyt[kBlock], dxt[kBlock];
    const float *xv = loadBlock(dtype, x, begin, len, xt);
    const float *dyv = loadBlock(dtype, dy, begin, len, dyt);
    float *dxv = outBlock(dtype, dx, begin, dxt);
    for (int64_t i = 0; i < len; ++i)
      dxv[i] = dyv[i] * grad(xv[i]);
    storeBlock(dxv, dtype, dx, begin, len);
  });
}
} // namespace

void loomrt::backend::loomrt_gelu_forward(loomrt_dtype dtype,
                                          int32_t approximate, int64_t n,
                                          const void *x, void *y) {
  LOOMRT_DEVICE_CALL(x, y);
  bool t = approximate == LOOMRT_GELU_TANH;
  unary(dtype, n, x, y, [t](float v) { return gelu(v, t); });
}

void loomrt::backend::loomrt_gelu_backward(loomrt_dtype dtype,
                                           int32_t approximate, int64_t n,
                                           const void *x, const void *dy,
                                           void *dx) {
  LOOMRT_DEVICE_CALL(x, dy, dx);
  bool t = approximate == LOOMRT_GELU_TANH;
  unaryBackward(dtype, n, x, dy, dx, [t](float v) { return geluGrad(v, t); });
}

void loomrt::backend::loomrt_silu_forward(loomrt_dtype dtype, int64_t n,
                                          const void *x, void *y) {
  LOOMRT_DEVICE_CALL(x, y);
  unary(dtype, n, x, y, [](float v) { return v * sigmoid(v); });
}

void loomrt::backend::loomrt_silu_backward(loomrt_dtype dtype, int64_t n,
                                           const void *x, const void *dy,
                                           void *dx) {
  LOOMRT_DEVICE_CALL(x, dy, dx);
  unaryBackward(dtype, n, x, dy, dx, [](float v) {
    float s = sigmoid(v);
    return s * (1.0f + v * (1.0f - s));
  });
}

// Rows are independent, and a row of F values is the natural block; the
// strided rows of the fused [rows, 2F] layout are read one row at a time.
void loomrt::backend::loomrt_swiglu_forward(loomrt_dtype dtype, int64_t rows,
                                            int64_t F, int64_t in_ld,
                                            const void *gate, const void *up,
                                            void *out) {
  LOOMRT_DEVICE_CALL(gate, up, out);
  if (rows == 0 || F == 0)
    return;
  const int64_t esz = dtypeSize(dtype);
#pragma omp parallel
  {
    std::vector<float> g(F), u(F), o(F);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      toF32(dtype, static_cast<const char *>(gate) + r * in_ld * esz, g.data(),
            F);
      toF32(dtype, static_cast<const char *>(up) + r * in_ld * esz, u.data(),
            F);
      for (int64_t i = 0; i < F; ++i)
        o[i] = g[i] * sigmoid(g[i]) * u[i];
      fromF32(o.data(), dtype, static_cast<char *>(out) + r * F * esz, F);
    }
  }
}

void loomrt::backend::loomrt_swiglu_backward(loomrt_dtype dtype, int64_t rows,
                                             int64_t F, int64_t in_ld,
                                             const void *gate, const void *up,
                                             const void *dout, void *dgate,
                                             void *dup) {
  LOOMRT_DEVICE_CALL(gate, up, dout, dgate, dup);
  if (rows == 0 || F == 0)
    return;
  const int64_t esz = dtypeSize(dtype);
#pragma omp parallel
  {
    std::vector<float> g(F), u(F), d(F), dg(F), du(F);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      toF32(dtype, static_cast<const char *>(gate) + r * in_ld * esz, g.data(),
            F);
      toF32(dtype, static_cast<const char *>(up) + r * in_ld * esz, u.data(),
            F);
      toF32(dtype, static_cast<const char *>(dout) + r * F * esz, d.data(), F);
      for (int64_t i = 0; i < F; ++i) {
        float s = sigmoid(g[i]);
        dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
        du[i] = d[i] * g[i] * s;
      }
      fromF32(dg.data(), dtype, static_cast<char *>(dgate) + r * in_ld * esz,
              F);
      fromF32(du.data(), dtype, static_cast<char *>(dup) + r * in_ld * esz, F);
    }
  }
}

//===----------------------------------------------------------------------===//
// Dropout
//===----------------------------------------------------------------------===//

namespace {
/// Philox4x32-10 (Salmon et al., SC'11), the generator of cuRAND and of
/// PyTorch's CUDA dropout: counter-based, so any element's random number is
/// computed from its global index without generating the ones before it.
struct Philox {
  uint32_t c[4];
  Philox(uint64_t seed, uint64_t counter) {
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    c[0] = uint32_t(counter);
    c[1] = uint32_t(counter >> 32);
    c[2] = 0;
    c[3] = 0;
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t(0xD2511F53u) * c[0];
      uint64_t p1 = uint64_t(0xCD9E8D57u) * c[2];
      uint32_t n0 = uint32_t(p1 >> 32) ^ c[1] ^ k0;
      uint32_t n2 = uint32_t(p0 >> 32) ^ c[3] ^ k1;
      c[0] = n0;
      c[1] = uint32_t(p1);
      c[2] = n2;
      c[3] = uint32_t(p0);
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
  }
};

/// Applies the dropout mask of global elements offset + r*rowStride + c.
void dropout(loomrt_dtype dtype, int64_t rows, int64_t cols, const void *x,
             void *y, float p, uint64_t seed, int64_t offset,
             int64_t rowStride) {
  if (rows == 0 || cols == 0)
    return;
  const float keepScale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const int64_t n = rows * cols;
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    float xt[kBlock], yt[kBlock];
    const float *xv = loadBlock(dtype, x, begin, len, xt);
    float *yv = outBlock(dtype, y, begin, yt);
    uint64_t cachedCounter = ~uint64_t(0);
    Philox rng(seed, 0);
    for (int64_t i = 0; i < len; ++i) {
      int64_t local = begin + i;
      uint64_t g = uint64_t(offset + (local / cols) * rowStride + local % cols);
      if (g / 4 != cachedCounter) {
        cachedCounter = g / 4;
        rng = Philox(seed, cachedCounter);
      }
      // 24 random bits give a float in [0,1) with no rounding up to 1.
      float u = float(rng.c[g % 4] >> 8) * (1.0f / 16777216.0f);
      yv[i] = u >= p ? xv[i] * keepScale : 0.0f;
    }
    storeBlock(yv, dtype, y, begin, len);
  });
}
} // namespace

void loomrt::backend::loomrt_dropout_forward(loomrt_dtype dtype, int64_t rows,
                                             int64_t cols, const void *x,
                                             void *y, float p, uint64_t seed,
                                             int64_t offset,
                                             int64_t row_stride) {
  LOOMRT_DEVICE_CALL(x, y);
  dropout(dtype, rows, cols, x, y, p, seed, offset, row_stride);
}

// y = x * keep * s is linear in x, so the backward is the same map on dy.
void loomrt::backend::loomrt_dropout_backward(loomrt_dtype dtype, int64_t rows,
                                              int64_t cols, const void *dy,
                                              void *dx, float p, uint64_t seed,
                                              int64_t offset,
                                              int64_t row_stride) {
  LOOMRT_DEVICE_CALL(dy, dx);
  dropout(dtype, rows, cols, dy, dx, p, seed, offset, row_stride);
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

namespace {
/// One tensor of a step that runs; model (NULL: none) receives the updated
/// parameters block by block, rounded as loomrt_cast rounds them.
void adamwTensor(const AdamwStep &s, float clip, float decay, int64_t n,
                 float *param, const float *grad, float *m1, float *m2,
                 loomrt_dtype modelDtype, void *model) {
  parallelBlocks(n, [&](int64_t begin, int64_t len) {
    // Local copies: the stores through float pointers could otherwise
    // change them, which keeps the loop from vectorizing.
    const AdamwStep step = s;
    const float c = clip, d = decay;
    for (int64_t i = begin; i < begin + len; ++i)
      adamwElement(step, c, d, param, grad, m1, m2, i);
    if (!model)
      return;
    if (modelDtype == LOOMRT_F32)
      std::memcpy(static_cast<float *>(model) + begin, param + begin,
                  size_t(len) * 4);
    else
      fromF32(param + begin, modelDtype, static_cast<char *>(model) + begin * 2,
              len);
  });
}
} // namespace

void loomrt::backend::loomrt_adamw(int64_t n, float *param, const float *grad,
                                   float *exp_avg, float *exp_avg_sq, float lr,
                                   float beta1, float beta2, float eps,
                                   float weight_decay, int64_t step,
                                   const float *grad_sumsq, float max_norm) {
  LOOMRT_DEVICE_CALL(param, grad, exp_avg, exp_avg_sq, grad_sumsq);
  float clip;
  if (n == 0 || !adamwRuns(grad_sumsq, max_norm, clip))
    return;
  const AdamwStep s(lr, beta1, beta2, eps, step);
  adamwTensor(s, clip, s.decay(weight_decay), n, param, grad, exp_avg,
              exp_avg_sq, LOOMRT_F32, nullptr);
}

void loomrt::backend::loomrt_adamw_multi(int64_t count,
                                         const loomrt_adamw_tensor *tensors,
                                         loomrt_dtype model_dtype, float lr,
                                         float beta1, float beta2, float eps,
                                         int64_t step, const float *grad_sumsq,
                                         float max_norm) {
  LOOMRT_DEVICE_CALL(grad_sumsq);
  if (contract::enabled())
    for (int64_t i = 0; i < count; ++i) {
      const loomrt_adamw_tensor &t = tensors[i];
      contract::enterTable(__func__, "tensors", i,
                           "param, grad, exp_avg, exp_avg_sq, model",
                           {t.param, t.grad, t.exp_avg, t.exp_avg_sq, t.model});
    }
  float clip;
  if (count == 0 || !adamwRuns(grad_sumsq, max_norm, clip))
    return;
  const AdamwStep s(lr, beta1, beta2, eps, step);
  for (int64_t i = 0; i < count; ++i) {
    const loomrt_adamw_tensor &t = tensors[i];
    adamwTensor(s, clip, s.decay(t.weight_decay), t.n, t.param, t.grad,
                t.exp_avg, t.exp_avg_sq, model_dtype, t.model);
  }
}
