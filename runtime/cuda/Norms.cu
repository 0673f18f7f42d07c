//===- Norms.cu - LayerNorm and RMSNorm ------------------------*- CUDA -*-===//
//
// One thread block per row for the row-wise work (statistics, y, dx), with
// two passes over the row for the LayerNorm variance as on the cpu backend.
// The parameter gradients (sums over rows) are a second kernel in which
// each thread owns a column and adds rows in a fixed order: deterministic,
// no atomics. The backward keeps the row statistics of its first kernel in
// scratch for the second.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"

using namespace loomrt;

namespace {
constexpr int kRowThreads = 256;

struct Stats {
  float mean, rstd;
};

/// Row statistics, computed by the whole block and returned to every
/// thread. rms: mean = 0 and rstd = 1/sqrt(mean(x^2) + eps).
__device__ Stats rowStats(loomrt_dtype dt, const void *x, int64_t row,
                          int64_t H, float eps, bool rms, float *shared) {
  float mean = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
      s += ld(x, dt, row * H + i);
    mean = blockSum(s, shared) / float(H);
  }
  float sq = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    float d = ld(x, dt, row * H + i) - mean;
    sq += d * d;
  }
  const float var = blockSum(sq, shared) / float(H);
  return {mean, 1.0f / sqrtf(var + eps)};
}

/// y = norm(x), or with `residual` the norm of sum = residual + x, which
/// the block writes (rounded to dt) and then reads back: the values the
/// separate add and norm compute.
__global__ void normForward(loomrt_dtype dt, int64_t H, const void *x,
                            const void *residual, const void *w, const void *b,
                            float eps, bool rms, void *sum, void *y) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  if (residual) {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x)
      st(sum, dt, row * H + i,
         ld(residual, dt, row * H + i) + ld(x, dt, row * H + i));
    __syncthreads();
    x = sum;
  }
  const Stats s = rowStats(dt, x, row, H, eps, rms, shared);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float xhat = (ld(x, dt, row * H + i) - s.mean) * s.rstd;
    st(y, dt, row * H + i, xhat * ld(w, dt, i) + (b ? ld(b, dt, i) : 0.0f));
  }
}

// With xhat = (x - mean) * rstd and g = dy * w:
//   LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   RMSNorm:   dx = rstd * (g - xhat * mean(g * xhat))
__global__ void normBackwardRows(loomrt_dtype dt, int64_t H, const void *x,
                                 const void *w, const void *dy, float eps,
                                 bool rms, const void *dxAdd, void *dx,
                                 Stats *stats) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const Stats s = rowStats(dt, x, row, H, eps, rms, shared);
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float xhat = (ld(x, dt, row * H + i) - s.mean) * s.rstd;
    const float g = ld(dy, dt, row * H + i) * ld(w, dt, i);
    sg += g;
    sgx += g * xhat;
  }
  const float meanG = rms ? 0.0f : blockSum(sg, shared) / float(H);
  const float meanGx = blockSum(sgx, shared) / float(H);
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
    const float xhat = (ld(x, dt, row * H + i) - s.mean) * s.rstd;
    const float g = ld(dy, dt, row * H + i) * ld(w, dt, i);
    const float v = s.rstd * (g - meanG - xhat * meanGx);
    // Read before written: dxAdd may be dx.
    st(dx, dt, row * H + i, dxAdd ? v + ld(dxAdd, dt, row * H + i) : v);
  }
  if (threadIdx.x == 0)
    stats[row] = s;
}

/// dw = sum_rows dy * xhat, db = sum_rows dy. Block (32, 8) owns 32
/// columns; thread row ty adds rows ty, ty+8, ..., then the 8 partials are
/// added in order.
__global__ void normParamGrads(loomrt_dtype dt, int64_t rows, int64_t H,
                               const void *x, const void *dy,
                               const Stats *stats, loomrt_dtype gdt, void *dw,
                               void *db, bool accumulate) {
  __shared__ float pw[8][33], pb[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float aw = 0.0f, ab = 0.0f;
  if (c < H)
    for (int64_t r = threadIdx.y; r < rows; r += 8) {
      const float d = ld(dy, dt, r * H + c);
      aw += d * (ld(x, dt, r * H + c) - stats[r].mean) * stats[r].rstd;
      ab += d;
    }
  pw[threadIdx.y][threadIdx.x] = aw;
  pb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || c >= H)
    return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < 8; ++k) {
    sw += pw[k][threadIdx.x];
    sb += pb[k][threadIdx.x];
  }
  st(dw, gdt, c, accumulate ? ld(dw, gdt, c) + sw : sw);
  if (db)
    st(db, gdt, c, accumulate ? ld(db, gdt, c) + sb : sb);
}

void forward(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t H,
             const void *x, const void *residual, const void *w, const void *b,
             float eps, bool rms, void *sum, void *y) {
  if (rows == 0)
    return;
  LOOMRT_CHECK(rows <= INT32_MAX, "%s: too many rows", fn);
  normForward<<<unsigned(rows), kRowThreads, 0, stream()>>>(
      dtype, H, x, residual, w, b, eps, rms, sum, y);
  CUDA_CHECK_LAUNCH();
}

void backward(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t H,
              const void *x, const void *w, const void *dy, float eps, bool rms,
              const void *dxAdd, void *dx, loomrt_dtype gdtype, void *dw,
              void *db, bool accumulate) {
  LOOMRT_CHECK(rows <= INT32_MAX, "%s: too many rows", fn);
  Scratch stats(rows * int64_t(sizeof(Stats)));
  if (rows > 0) {
    normBackwardRows<<<unsigned(rows), kRowThreads, 0, stream()>>>(
        dtype, H, x, w, dy, eps, rms, dxAdd, dx, stats.as<Stats>());
    CUDA_CHECK_LAUNCH();
  }
  normParamGrads<<<unsigned((H + 31) / 32), dim3(32, 8), 0, stream()>>>(
      dtype, rows, H, x, dy, stats.as<Stats>(), gdtype, dw, db, accumulate);
  CUDA_CHECK_LAUNCH();
}
} // namespace

void loomrt::backend::loomrt_layer_norm_forward(loomrt_dtype dtype,
                                                int64_t rows, int64_t H,
                                                const void *x, const void *w,
                                                const void *b, float eps,
                                                void *y) {
  forward(__func__, dtype, rows, H, x, nullptr, w, b, eps, /*rms=*/false,
          nullptr, y);
}

void loomrt::backend::loomrt_layer_norm_backward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x, const void *w,
    const void *dy, float eps, const void *dx_add, void *dx,
    loomrt_dtype gdtype, void *dw, void *db, int32_t accumulate) {
  backward(__func__, dtype, rows, H, x, w, dy, eps, /*rms=*/false, dx_add, dx,
           gdtype, dw, db, accumulate != 0);
}

void loomrt::backend::loomrt_rms_norm_forward(loomrt_dtype dtype, int64_t rows,
                                              int64_t H, const void *x,
                                              const void *w, float eps,
                                              void *y) {
  forward(__func__, dtype, rows, H, x, nullptr, w, nullptr, eps, /*rms=*/true,
          nullptr, y);
}

void loomrt::backend::loomrt_rms_norm_backward(loomrt_dtype dtype, int64_t rows,
                                               int64_t H, const void *x,
                                               const void *w, const void *dy,
                                               float eps, const void *dx_add,
                                               void *dx, loomrt_dtype gdtype,
                                               void *dw, int32_t accumulate) {
  backward(__func__, dtype, rows, H, x, w, dy, eps, /*rms=*/true, dx_add, dx,
           gdtype, dw, nullptr, accumulate != 0);
}

void loomrt::backend::loomrt_add_layer_norm_forward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *residual, const void *w, const void *b, float eps, void *sum,
    void *y) {
  forward(__func__, dtype, rows, H, x, residual, w, b, eps, /*rms=*/false, sum,
          y);
}

void loomrt::backend::loomrt_add_rms_norm_forward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *residual, const void *w, float eps, void *sum, void *y) {
  forward(__func__, dtype, rows, H, x, residual, w, nullptr, eps, /*rms=*/true,
          sum, y);
}
