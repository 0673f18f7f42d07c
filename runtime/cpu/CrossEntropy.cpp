//===- CrossEntropy.cpp - Cross-entropy, full and sharded -------*- C++ -*-===//
//
// The full-vocabulary loss and the pieces of Megatron's vocab-parallel
// cross-entropy (local max, local sum of exp, local target logit), whose
// all-reduces the compiled program performs between the calls.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace loomrt;

namespace {
float rowMax(const float *x, int64_t V) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < V; ++j)
    m = std::max(m, x[j]);
  return m;
}

float rowSumExp(const float *x, int64_t V, float m) {
  float acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= V; j += 8)
    for (int t = 0; t < 8; ++t)
      acc[t] += std::exp(x[j + t] - m);
  for (; j < V; ++j)
    acc[0] += std::exp(x[j] - m);
  return sumF32(acc, 8);
}

// Checked before the parallel loops: fatal() must run on the calling thread.
void checkLabels(const int32_t *labels, int64_t n, int64_t V) {
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= V)
      fatal("loomrt_cross_entropy", "label %d of row %lld is outside [0, %lld)",
            labels[i], (long long)i, (long long)V);
}

double maskSum(const float *mask, int64_t n) {
  if (!mask)
    return double(n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += mask[i];
  return s;
}
} // namespace

void loomrt::backend::loomrt_cross_entropy_forward(
    loomrt_dtype dtype, int64_t n, int64_t V, const void *logits,
    const int32_t *labels, const float *mask, float *loss, float *row_loss) {
  LOOMRT_DEVICE_CALL(logits, labels, mask, row_loss);
  if (n == 0) {
    *loss = 0.0f;
    return;
  }
  checkLabels(labels, n, V);
  In x(dtype, logits, n * V);
  std::vector<float> rl(static_cast<size_t>(n));
#pragma omp parallel for schedule(static) if (n * V > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x.get() + i * V;
    float m = rowMax(xr, V);
    rl[size_t(i)] = m + std::log(rowSumExp(xr, V, m)) - xr[labels[i]];
  }
  double num = 0;
  for (int64_t i = 0; i < n; ++i)
    num += double(mask ? mask[i] : 1.0f) * rl[size_t(i)];
  const double den = maskSum(mask, n);
  *loss = den == 0 ? 0.0f : float(num / den);
  if (row_loss)
    std::copy(rl.begin(), rl.end(), row_loss);
}

void loomrt::backend::loomrt_cross_entropy_backward(
    loomrt_dtype dtype, int64_t n, int64_t V, const void *logits,
    const int32_t *labels, const float *mask, float dloss, void *dlogits) {
  LOOMRT_DEVICE_CALL(logits, labels, mask, dlogits);
  if (n == 0)
    return;
  checkLabels(labels, n, V);
  const double den = maskSum(mask, n);
  const float scale = den == 0 ? 0.0f : float(double(dloss) / den);
  In x(dtype, logits, n * V);
  Out g(dtype, dlogits, n * V, false);
#pragma omp parallel for schedule(static) if (n * V > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x.get() + i * V;
    float *gr = g.get() + i * V;
    const float w = (mask ? mask[i] : 1.0f) * scale;
    const float m = rowMax(xr, V);
    const float inv = 1.0f / rowSumExp(xr, V, m);
    for (int64_t j = 0; j < V; ++j)
      gr[j] = std::exp(xr[j] - m) * inv * w;
    gr[labels[i]] -= w;
  }
  g.commit();
}

//===----------------------------------------------------------------------===//
// Vocab-parallel pieces
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_ce_local_max(loomrt_dtype dtype, int64_t n,
                                          int64_t Vl, int64_t valid,
                                          const void *logits, float *row_max) {
  LOOMRT_DEVICE_CALL(logits, row_max);
  if (n == 0)
    return;
  In x(dtype, logits, n * Vl);
#pragma omp parallel for schedule(static) if (n * Vl > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    row_max[i] = valid ? rowMax(x.get() + i * Vl, valid)
                       : -std::numeric_limits<float>::infinity();
}

void loomrt::backend::loomrt_ce_local_sum_exp(loomrt_dtype dtype, int64_t n,
                                              int64_t Vl, int64_t valid,
                                              const void *logits,
                                              const float *row_max,
                                              float *sum_exp) {
  LOOMRT_DEVICE_CALL(logits, row_max, sum_exp);
  if (n == 0)
    return;
  In x(dtype, logits, n * Vl);
#pragma omp parallel for schedule(static) if (n * Vl > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    sum_exp[i] = valid ? rowSumExp(x.get() + i * Vl, valid, row_max[i]) : 0.0f;
}

void loomrt::backend::loomrt_ce_local_target(loomrt_dtype dtype, int64_t n,
                                             int64_t Vl, const void *logits,
                                             const int32_t *labels,
                                             int64_t vocab_start,
                                             float *target) {
  LOOMRT_DEVICE_CALL(logits, labels, target);
  // Only the target element is read: convert it alone.
  const int64_t esz = dtypeSize(dtype);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = int64_t(labels[i]) - vocab_start;
    if (j < 0 || j >= Vl) {
      target[i] = 0.0f;
      continue;
    }
    toF32(dtype, static_cast<const char *>(logits) + (i * Vl + j) * esz,
          &target[i], 1);
  }
}

void loomrt::backend::loomrt_ce_loss_from_parts(
    int64_t n, const float *row_max, const float *sum_exp, const float *target,
    const float *mask, float *row_loss, float *masked_sum, float *mask_sum) {
  LOOMRT_DEVICE_CALL(row_max, sum_exp, target, mask, row_loss);
  double num = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float l = std::log(sum_exp[i]) + row_max[i] - target[i];
    if (row_loss)
      row_loss[i] = l;
    num += double(mask ? mask[i] : 1.0f) * l;
  }
  *masked_sum = float(num);
  *mask_sum = float(maskSum(mask, n));
}

void loomrt::backend::loomrt_mask_sum(int64_t n, const float *mask,
                                      float *sum) {
  LOOMRT_DEVICE_CALL(mask, sum);
  *sum = float(maskSum(mask, n));
}

void loomrt::backend::loomrt_ce_vocab_parallel_backward(
    loomrt_dtype dtype, int64_t n, int64_t Vl, int64_t valid,
    const void *logits, const int32_t *labels, int64_t vocab_start,
    const float *row_max, const float *sum_exp, const float *mask,
    const float *grad_scale_ptr, void *dlogits) {
  LOOMRT_DEVICE_CALL(logits, labels, row_max, sum_exp, mask, grad_scale_ptr,
                     dlogits);
  if (n == 0)
    return;
  const float grad_scale = *grad_scale_ptr;
  In x(dtype, logits, n * Vl);
  Out g(dtype, dlogits, n * Vl, false);
#pragma omp parallel for schedule(static) if (n * Vl > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float *xr = x.get() + i * Vl;
    float *gr = g.get() + i * Vl;
    const float w = (mask ? mask[i] : 1.0f) * grad_scale;
    const float inv = 1.0f / sum_exp[i];
    for (int64_t j = 0; j < valid; ++j)
      gr[j] = std::exp(xr[j] - row_max[i]) * inv * w;
    std::fill(gr + valid, gr + Vl, 0.0f); // padding: not in the softmax
    const int64_t t = int64_t(labels[i]) - vocab_start;
    if (t >= 0 && t < Vl)
      gr[t] -= w;
  }
  g.commit();
}
