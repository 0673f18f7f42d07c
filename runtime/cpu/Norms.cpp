//===- Norms.cpp - LayerNorm and RMSNorm ------------------------*- C++ -*-===//
//
// Row-parallel: every thread normalizes whole rows. The parameter gradients
// (sums over rows) are reduced through per-thread f32 partial vectors that
// are added in thread order, so results do not depend on scheduling.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <omp.h>

#include <cmath>

using namespace loomrt;

namespace {
struct Stats {
  float mean, rstd;
};

/// Mean and 1/sqrt(var + eps) of one row, two-pass for accuracy.
Stats layerNormStats(const float *x, int64_t H, float eps) {
  float mean = sumF32(x, H) / float(H);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= H; i += 8)
    for (int j = 0; j < 8; ++j) {
      float d = x[i + j] - mean;
      acc[j] += d * d;
    }
  for (; i < H; ++i)
    acc[0] += (x[i] - mean) * (x[i] - mean);
  float var = sumF32(acc, 8) / float(H);
  return {mean, 1.0f / std::sqrt(var + eps)};
}

float rmsRstd(const float *x, int64_t H, float eps) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= H; i += 8)
    for (int j = 0; j < 8; ++j)
      acc[j] += x[i + j] * x[i + j];
  for (; i < H; ++i)
    acc[0] += x[i] * x[i];
  return 1.0f / std::sqrt(sumF32(acc, 8) / float(H) + eps);
}

/// Writes the row-parallel parameter-gradient partials of all threads into
/// `out` (overwrite or accumulate).
void reducePartials(const std::vector<std::vector<float>> &partials, int64_t H,
                    float *out, bool accumulate) {
  for (int64_t i = 0; i < H; ++i) {
    float s = accumulate ? out[i] : 0.0f;
    for (const auto &p : partials)
      s += p[size_t(i)];
    out[i] = s;
  }
}
} // namespace

void loomrt::backend::loomrt_layer_norm_forward(loomrt_dtype dtype,
                                                int64_t rows, int64_t H,
                                                const void *x, const void *w,
                                                const void *b, float eps,
                                                void *y) {
  LOOMRT_DEVICE_CALL(x, w, b, y);
  if (rows == 0)
    return;
  In xf(dtype, x, rows * H), wf(dtype, w, H), bf(dtype, b, H);
  Out yf(dtype, y, rows * H, false);
  const float *bias = bf.get();
#pragma omp parallel for schedule(static) if (rows * H > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = xf.get() + r * H;
    float *yr = yf.get() + r * H;
    Stats s = layerNormStats(xr, H, eps);
    for (int64_t i = 0; i < H; ++i)
      yr[i] = (xr[i] - s.mean) * s.rstd * wf.get()[i] + (bias ? bias[i] : 0.0f);
  }
  yf.commit();
}

// With xhat = (x - mean) * rstd and g = dy * w:
//   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
//   dw = sum_rows dy * xhat,  db = sum_rows dy.
void loomrt::backend::loomrt_layer_norm_backward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x, const void *w,
    const void *dy, float eps, const void *dx_add, void *dx,
    loomrt_dtype gdtype, void *dw, void *db, int32_t accumulate) {
  LOOMRT_DEVICE_CALL(x, w, dy, dx_add, dx, dw, db);
  In xf(dtype, x, rows * H), wf(dtype, w, H), dyf(dtype, dy, rows * H);
  // dx_add may be dx: each element is read before it is written (through
  // the f32 view, or converted before anything is).
  In addf(dtype, dx_add, dx_add ? rows * H : 0);
  Out dxf(dtype, dx, rows * H, false);
  Out dwf(gdtype, dw, H, accumulate != 0), dbf(gdtype, db, H, accumulate != 0);
  const int threads = rows * H > kMinParallelWork ? omp_get_max_threads() : 1;
  std::vector<std::vector<float>> dwPart(size_t(threads),
                                         std::vector<float>(size_t(H), 0.0f));
  std::vector<std::vector<float>> dbPart(size_t(threads),
                                         std::vector<float>(size_t(H), 0.0f));
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    float *dwp = dwPart[size_t(t)].data(), *dbp = dbPart[size_t(t)].data();
    std::vector<float> g(static_cast<size_t>(H)), gx(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = xf.get() + r * H, *dyr = dyf.get() + r * H;
      float *dxr = dxf.get() + r * H;
      Stats s = layerNormStats(xr, H, eps);
      for (int64_t i = 0; i < H; ++i) {
        float xhat = (xr[i] - s.mean) * s.rstd;
        g[size_t(i)] = dyr[i] * wf.get()[i];
        gx[size_t(i)] = g[size_t(i)] * xhat;
        dwp[i] += dyr[i] * xhat;
        dbp[i] += dyr[i];
      }
      float meanG = sumF32(g.data(), H) / float(H);
      float meanGx = sumF32(gx.data(), H) / float(H);
      for (int64_t i = 0; i < H; ++i) {
        float xhat = (xr[i] - s.mean) * s.rstd;
        const float v = s.rstd * (g[size_t(i)] - meanG - xhat * meanGx);
        // Element i of dx_add is read before dx's is written.
        dxr[i] = dx_add ? v + addf.get()[r * H + i] : v;
      }
    }
  }
  reducePartials(dwPart, H, dwf, accumulate != 0);
  if (db)
    reducePartials(dbPart, H, dbf, accumulate != 0);
  dxf.commit();
  dwf.commit();
  dbf.commit();
}

// The sum as loomrt_add rounds it, then the norm of what was stored: the
// same values as the two calls.
void loomrt::backend::loomrt_add_layer_norm_forward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *residual, const void *w, const void *b, float eps, void *sum,
    void *y) {
  loomrt::backend::loomrt_add(dtype, rows * H, residual, x, sum);
  loomrt::backend::loomrt_layer_norm_forward(dtype, rows, H, sum, w, b, eps, y);
}

void loomrt::backend::loomrt_add_rms_norm_forward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *residual, const void *w, float eps, void *sum, void *y) {
  loomrt::backend::loomrt_add(dtype, rows * H, residual, x, sum);
  loomrt::backend::loomrt_rms_norm_forward(dtype, rows, H, sum, w, eps, y);
}

void loomrt::backend::loomrt_rms_norm_forward(loomrt_dtype dtype, int64_t rows,
                                              int64_t H, const void *x,
                                              const void *w, float eps,
                                              void *y) {
  LOOMRT_DEVICE_CALL(x, w, y);
  if (rows == 0)
    return;
  In xf(dtype, x, rows * H), wf(dtype, w, H);
  Out yf(dtype, y, rows * H, false);
#pragma omp parallel for schedule(static) if (rows * H > kMinParallelWork)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = xf.get() + r * H;
    float *yr = yf.get() + r * H;
    float rstd = rmsRstd(xr, H, eps);
    for (int64_t i = 0; i < H; ++i)
      yr[i] = xr[i] * rstd * wf.get()[i];
  }
  yf.commit();
}

// With xhat = x * rstd and g = dy * w:
//   dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum_rows dy * xhat.
void loomrt::backend::loomrt_rms_norm_backward(loomrt_dtype dtype, int64_t rows,
                                               int64_t H, const void *x,
                                               const void *w, const void *dy,
                                               float eps, const void *dx_add,
                                               void *dx, loomrt_dtype gdtype,
                                               void *dw, int32_t accumulate) {
  LOOMRT_DEVICE_CALL(x, w, dy, dx_add, dx, dw);
  In xf(dtype, x, rows * H), wf(dtype, w, H), dyf(dtype, dy, rows * H);
  // dx_add may be dx: each element is read before it is written (through
  // the f32 view, or converted before anything is).
  In addf(dtype, dx_add, dx_add ? rows * H : 0);
  Out dxf(dtype, dx, rows * H, false);
  Out dwf(gdtype, dw, H, accumulate != 0);
  const int threads = rows * H > kMinParallelWork ? omp_get_max_threads() : 1;
  std::vector<std::vector<float>> dwPart(size_t(threads),
                                         std::vector<float>(size_t(H), 0.0f));
#pragma omp parallel num_threads(threads)
  {
    float *dwp = dwPart[size_t(omp_get_thread_num())].data();
    std::vector<float> gx(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = xf.get() + r * H, *dyr = dyf.get() + r * H;
      float *dxr = dxf.get() + r * H;
      float rstd = rmsRstd(xr, H, eps);
      for (int64_t i = 0; i < H; ++i) {
        float xhat = xr[i] * rstd;
        gx[size_t(i)] = dyr[i] * wf.get()[i] * xhat;
        dwp[i] += dyr[i] * xhat;
      }
      float meanGx = sumF32(gx.data(), H) / float(H);
      for (int64_t i = 0; i < H; ++i) {
        const float v = rstd * (dyr[i] * wf.get()[i] - xr[i] * rstd * meanGx);
        dxr[i] = dx_add ? v + addf.get()[r * H + i] : v;
      }
    }
  }
  reducePartials(dwPart, H, dwf, accumulate != 0);
  dxf.commit();
  dwf.commit();
}
