//===- Gemm.cpp - GEMM and linear layers on OpenBLAS ------------*- C++ -*-===//
//
// Every matrix product of the cpu backend goes through cblas_sgemm; bf16/f16
// operands are widened to compact f32 copies first (OpenBLAS 0.3.21 has no
// usable bf16 GEMM on all targets), and the product is rounded once.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>

using namespace loomrt;

// Below this many multiply-adds a GEMM is not worth splitting.
static constexpr double kMinParallelGemm = 1 << 18;

void loomrt::sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc) {
  auto call = [&](int64_t i0, int64_t m, int64_t j0, int64_t n) {
    // Row block i0 of op(A): rows of A, or columns when A is transposed;
    // column block j0 of op(B) likewise.
    const float *a = transA ? A + i0 : A + i0 * lda;
    const float *b = transB ? B + j0 * ldb : B + j0;
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                transB ? CblasTrans : CblasNoTrans, int(m), int(n), int(K),
                alpha, a, int(lda), b, int(ldb), beta, C + i0 * ldc + j0,
                int(ldc));
  };
  const int threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (threads == 1 || double(M) * double(N) * double(K) < kMinParallelGemm) {
    call(0, M, 0, N);
    return;
  }
  // Split the larger output dimension into equal chunks that are multiples
  // of 16 (whole micro-kernel tiles).
  const bool splitRows = M >= N;
  const int64_t extent = splitRows ? M : N;
  int64_t chunk = (extent + threads - 1) / threads;
  chunk = (chunk + 15) / 16 * 16;
  const int64_t parts = (extent + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t p = 0; p < parts; ++p) {
    const int64_t begin = p * chunk, len = std::min(chunk, extent - begin);
    if (splitRows)
      call(begin, len, 0, N);
    else
      call(0, M, begin, len);
  }
}

namespace {
/// An f32 view of a (possibly strided) rows x cols matrix with row stride ld.
/// f32 data is used in place with its ld; other dtypes are widened into a
/// compact buffer whose ld is cols.
struct MatIn {
  const float *ptr;
  int64_t ld;
  std::vector<float> buf;
  MatIn(loomrt_dtype dtype, const void *p, int64_t rows, int64_t cols,
        int64_t ldIn) {
    if (dtype == LOOMRT_F32) {
      ptr = static_cast<const float *>(p);
      ld = ldIn;
      return;
    }
    buf.resize(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      toF32(dtype, static_cast<const char *>(p) + r * ldIn * 2,
            buf.data() + r * cols, cols);
    ptr = buf.data();
    ld = cols;
  }
};

} // namespace

void loomrt::backend::loomrt_gemm(int32_t trans_a, int32_t trans_b, int64_t M,
                                  int64_t N, int64_t K, float alpha,
                                  loomrt_dtype a_dtype, const void *A,
                                  int64_t lda, int64_t stride_a,
                                  loomrt_dtype b_dtype, const void *B,
                                  int64_t ldb, int64_t stride_b, float beta,
                                  loomrt_dtype c_dtype, void *C, int64_t ldc,
                                  int64_t stride_c, int64_t batch) {
  LOOMRT_DEVICE_CALL(A, B, C);
  const int64_t aSize = dtypeSize(a_dtype), bSize = dtypeSize(b_dtype),
                cSize = dtypeSize(c_dtype);
  if (M == 0 || N == 0 || batch == 0)
    return;
  // Stored shapes: A is [M,K] or [K,M], B is [K,N] or [N,K].
  const int64_t aRows = trans_a ? K : M, aCols = trans_a ? M : K;
  const int64_t bRows = trans_b ? N : K, bCols = trans_b ? K : N;

  for (int64_t b = 0; b < batch; ++b) {
    const char *aPtr = static_cast<const char *>(A) + b * stride_a * aSize;
    const char *bPtr = static_cast<const char *>(B) + b * stride_b * bSize;
    char *cPtr = static_cast<char *>(C) + b * stride_c * cSize;
    MatIn a(a_dtype, aPtr, K ? aRows : 0, aCols, lda);
    MatIn bm(b_dtype, bPtr, K ? bRows : 0, bCols, ldb);
    float *c;
    int64_t cLd;
    std::vector<float> cBuf;
    if (c_dtype == LOOMRT_F32) {
      c = reinterpret_cast<float *>(cPtr);
      cLd = ldc;
    } else {
      cBuf.assign(size_t(M * N), 0.0f);
      if (beta != 0.0f)
        for (int64_t r = 0; r < M; ++r)
          toF32(c_dtype, cPtr + r * ldc * 2, cBuf.data() + r * N, N);
      c = cBuf.data();
      cLd = N;
    }
    if (K == 0) {
      // BLAS would scale C by beta; keep the "beta == 0 never reads C" rule.
      for (int64_t r = 0; r < M; ++r)
        for (int64_t j = 0; j < N; ++j)
          c[r * cLd + j] = beta == 0.0f ? 0.0f : beta * c[r * cLd + j];
    } else {
      sgemm(trans_a != 0, trans_b != 0, M, N, K, alpha, a.ptr, a.ld, bm.ptr,
            bm.ld, beta, c, cLd);
    }
    if (c_dtype != LOOMRT_F32)
      for (int64_t r = 0; r < M; ++r)
        fromF32(c + r * N, c_dtype, cPtr + r * ldc * 2, N);
  }
}

//===----------------------------------------------------------------------===//
// Linear layers
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_linear_forward(loomrt_dtype dtype, int64_t M,
                                            int64_t N, int64_t K, const void *x,
                                            const void *W, const void *bias,
                                            void *y) {
  LOOMRT_DEVICE_CALL(x, W, bias, y);
  if (M == 0 || N == 0)
    return;
  In xf(dtype, K ? x : nullptr, M * K), wf(dtype, K ? W : nullptr, N * K);
  In bf(dtype, bias, N);
  Out yf(dtype, y, M * N, /*load=*/false);
  // Pre-filling y with the bias lets one GEMM with beta = 1 add it.
  if (bias) {
#pragma omp parallel for schedule(static) if (M * N > kMinParallelWork)
    for (int64_t r = 0; r < M; ++r)
      std::memcpy(yf.get() + r * N, bf.get(), size_t(N) * 4);
  } else if (K == 0) {
    std::memset(yf.get(), 0, size_t(M * N) * 4);
  }
  if (K)
    sgemm(false, true, M, N, K, 1.0f, xf, K, wf, K, bias ? 1.0f : 0.0f, yf, N);
  yf.commit();
}

void loomrt::backend::loomrt_linear_backward_data(loomrt_dtype dtype, int64_t M,
                                                  int64_t N, int64_t K,
                                                  const void *dy, const void *W,
                                                  void *dx,
                                                  int32_t accumulate) {
  LOOMRT_DEVICE_CALL(dy, W, dx);
  if (M == 0 || K == 0)
    return;
  Out dxf(dtype, dx, M * K, accumulate != 0);
  if (N == 0) {
    if (!accumulate)
      std::memset(dxf.get(), 0, size_t(M * K) * 4);
  } else {
    In dyf(dtype, dy, M * N), wf(dtype, W, N * K);
    sgemm(false, false, M, K, N, 1.0f, dyf, N, wf, K, accumulate ? 1.0f : 0.0f,
          dxf, K);
  }
  dxf.commit();
}

void loomrt::backend::loomrt_linear_backward_weight(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, const void *dy,
    const void *x, loomrt_dtype gdtype, void *dW, void *dbias,
    int32_t accumulate) {
  LOOMRT_DEVICE_CALL(dy, x, dW, dbias);
  if (N == 0)
    return;
  In dyf(dtype, M ? dy : nullptr, M * N);
  if (K) {
    In xf(dtype, M ? x : nullptr, M * K);
    Out dwf(gdtype, dW, N * K, accumulate != 0);
    if (M == 0) {
      if (!accumulate)
        std::memset(dwf.get(), 0, size_t(N * K) * 4);
    } else {
      sgemm(true, false, N, K, M, 1.0f, dyf, N, xf, K, accumulate ? 1.0f : 0.0f,
            dwf, K);
    }
    dwf.commit();
  }
  if (dbias) {
    Out dbf(gdtype, dbias, N, accumulate != 0);
    const float *d = dyf.get();
    float *db = dbf.get();
    // Column sums: each thread owns a block of columns and walks all rows,
    // so there is no reduction between threads and the order is fixed.
    const int64_t colBlock = 64;
    const int64_t numBlocks = (N + colBlock - 1) / colBlock;
#pragma omp parallel for schedule(static) if (M * N > kMinParallelWork)
    for (int64_t cb = 0; cb < numBlocks; ++cb) {
      int64_t c0 = cb * colBlock, c1 = std::min(N, c0 + colBlock);
      double acc[colBlock] = {};
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = c0; c < c1; ++c)
          acc[c - c0] += d[r * N + c];
      for (int64_t c = c0; c < c1; ++c)
        db[c] = float(accumulate ? db[c] + acc[c - c0] : acc[c - c0]);
    }
    dbf.commit();
  }
}
