//===- Gemm.cu - GEMM and linear layers on cuBLAS --------------*- CUDA -*-===//
//
// Every matrix product goes through cublasGemmStridedBatchedEx with
// CUBLAS_COMPUTE_32F (f32 accumulation; plain f32 stays f32, no TF32).
// cuBLAS is column-major: a row-major C = op(A) op(B) is computed as the
// column-major C^T = op(B)^T op(A)^T, i.e. with the operands swapped.
//
// cuBLAS takes A and B of one type and, for f32 compute, C of that type or
// f32. Other combinations (an f32 operand with a bf16 one, f32 inputs into a
// bf16 C) widen the odd operand into f32 scratch or compute C in f32 scratch
// and round it once, like the cpu backend.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Common.h"

#include <algorithm>
#include <climits>

using namespace loomrt;

namespace {
cudaDataType_t cudaType(loomrt_dtype d) {
  return d == LOOMRT_F32    ? CUDA_R_32F
         : d == LOOMRT_BF16 ? CUDA_R_16BF
                            : CUDA_R_16F;
}

int checkedInt(const char *what, int64_t v) {
  if (v < 0 || v > INT_MAX)
    fatal("loomrt_gemm", "%s = %lld does not fit cuBLAS's int", what,
          (long long)v);
  return int(v);
}

/// Copies a strided rows x cols matrix (row stride ld, batch stride) into a
/// compact f32 buffer [batch][rows][cols].
__global__ void widenMatrices(loomrt_dtype dt, const void *src, int64_t rows,
                              int64_t cols, int64_t ld_, int64_t stride,
                              int64_t batch, float *dst) {
  GRID_STRIDE(e, batch * rows * cols) {
    const int64_t b = e / (rows * cols), r = (e / cols) % rows, c = e % cols;
    dst[e] = ld(src, dt, b * stride + r * ld_ + c);
  }
}

/// The reverse for C: rounds compact f32 [batch][rows][cols] into a strided
/// output.
__global__ void narrowMatrices(const float *src, int64_t rows, int64_t cols,
                               loomrt_dtype dt, void *dst, int64_t ld_,
                               int64_t stride, int64_t batch) {
  GRID_STRIDE(e, batch * rows * cols) {
    const int64_t b = e / (rows * cols), r = (e / cols) % rows, c = e % cols;
    st(dst, dt, b * stride + r * ld_ + c, src[e]);
  }
}

/// C = beta * C (beta == 0 writes zeros without reading C): the K == 0
/// product, which cuBLAS would otherwise treat as beta-scaling with reads.
__global__ void scaleMatrices(loomrt_dtype dt, void *C, int64_t rows,
                              int64_t cols, int64_t ld_, int64_t stride,
                              int64_t batch, float beta) {
  GRID_STRIDE(e, batch * rows * cols) {
    const int64_t b = e / (rows * cols), r = (e / cols) % rows, c = e % cols;
    const int64_t k = b * stride + r * ld_ + c;
    st(C, dt, k, beta == 0.0f ? 0.0f : beta * ld(C, dt, k));
  }
}

/// A matrix operand as cuBLAS will see it.
struct Operand {
  const void *ptr;
  loomrt_dtype dtype;
  int64_t ld, stride;
};

/// Row-major batched C = alpha op(A) op(B) + beta C with cuBLAS, all
/// operands already of cuBLAS-compatible types.
void cublasGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                const Operand &a, const Operand &b, float beta, void *C,
                loomrt_dtype cDtype, int64_t ldc, int64_t strideC,
                int64_t batch) {
  // Column-major view: C^T [N x M] = op(B)^T [N x K] * op(A)^T [K x M]; the
  // stored row-major B is the column-major B^T, so the transpose flags carry
  // over unchanged.
  CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      ctx().blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
      ta ? CUBLAS_OP_T : CUBLAS_OP_N, checkedInt("N", N), checkedInt("M", M),
      checkedInt("K", K), &alpha, b.ptr, cudaType(b.dtype),
      checkedInt("ldb", b.ld), b.stride, a.ptr, cudaType(a.dtype),
      checkedInt("lda", a.ld), a.stride, &beta, C, cudaType(cDtype),
      checkedInt("ldc", ldc), strideC, checkedInt("batch", batch),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

/// Widens one operand into compact f32 scratch: [batch or 1][rows][cols].
Operand widen(const Operand &op, int64_t rows, int64_t cols, int64_t batch,
              Scratch &buf) {
  // A broadcast operand (stride 0) is widened once.
  const int64_t copies = op.stride == 0 ? 1 : batch;
  const int64_t n = copies * rows * cols;
  widenMatrices<<<gridFor(n), kThreads, 0, stream()>>>(
      op.dtype, op.ptr, rows, cols, op.ld, op.stride, copies, buf.as<float>());
  CUDA_CHECK_LAUNCH();
  return {buf.as<float>(), LOOMRT_F32, cols, op.stride == 0 ? 0 : rows * cols};
}

/// loomrt_gemm without the argument checks, for the linear layers too.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
          Operand a, Operand b, float beta, loomrt_dtype cDtype, void *C,
          int64_t ldc, int64_t strideC, int64_t batch) {
  if (K == 0) {
    const int64_t n = batch * M * N;
    scaleMatrices<<<gridFor(n), kThreads, 0, stream()>>>(cDtype, C, M, N, ldc,
                                                         strideC, batch, beta);
    CUDA_CHECK_LAUNCH();
    return;
  }
  // Make A and B one type: f32 wins unless both are the same 16-bit type.
  Scratch aBuf(a.dtype != b.dtype && a.dtype != LOOMRT_F32
                   ? (a.stride ? batch : 1) * M * K * 4
                   : 0);
  Scratch bBuf(a.dtype != b.dtype && b.dtype != LOOMRT_F32
                   ? (b.stride ? batch : 1) * K * N * 4
                   : 0);
  if (a.dtype != b.dtype) {
    if (a.dtype != LOOMRT_F32)
      a = widen(a, ta ? K : M, ta ? M : K, batch, aBuf);
    if (b.dtype != LOOMRT_F32)
      b = widen(b, tb ? N : K, tb ? K : N, batch, bBuf);
  }
  // C may be the operands' type or f32; otherwise go through f32 scratch.
  if (cDtype == a.dtype || cDtype == LOOMRT_F32) {
    cublasGemm(ta, tb, M, N, K, alpha, a, b, beta, C, cDtype, ldc, strideC,
               batch);
    return;
  }
  Scratch cBuf(batch * M * N * 4);
  if (beta != 0.0f) {
    widenMatrices<<<gridFor(batch * M * N), kThreads, 0, stream()>>>(
        cDtype, C, M, N, ldc, strideC, batch, cBuf.as<float>());
    CUDA_CHECK_LAUNCH();
  }
  cublasGemm(ta, tb, M, N, K, alpha, a, b, beta, cBuf.as<float>(), LOOMRT_F32,
             N, M * N, batch);
  narrowMatrices<<<gridFor(batch * M * N), kThreads, 0, stream()>>>(
      cBuf.as<float>(), M, N, cDtype, C, ldc, strideC, batch);
  CUDA_CHECK_LAUNCH();
}

/// y[r, :] = bias for every row: the linear layer adds the bias through a
/// GEMM with beta = 1 into this.
__global__ void broadcastRows(loomrt_dtype dt, const void *bias, int64_t M,
                              int64_t N, void *y) {
  GRID_STRIDE(e, M * N) { st(y, dt, e, ld(bias, dt, e % N)); }
}
} // namespace

void loomrt::backend::loomrt_gemm(int32_t trans_a, int32_t trans_b, int64_t M,
                                  int64_t N, int64_t K, float alpha,
                                  loomrt_dtype a_dtype, const void *A,
                                  int64_t lda, int64_t stride_a,
                                  loomrt_dtype b_dtype, const void *B,
                                  int64_t ldb, int64_t stride_b, float beta,
                                  loomrt_dtype c_dtype, void *C, int64_t ldc,
                                  int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0)
    return;
  gemm(trans_a != 0, trans_b != 0, M, N, K, alpha, {A, a_dtype, lda, stride_a},
       {B, b_dtype, ldb, stride_b}, beta, c_dtype, C, ldc, stride_c, batch);
}

//===----------------------------------------------------------------------===//
// Linear layers
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_linear_forward(loomrt_dtype dtype, int64_t M,
                                            int64_t N, int64_t K, const void *x,
                                            const void *W, const void *bias,
                                            void *y) {
  if (M == 0 || N == 0)
    return;
  // The bias rows are exact in the storage dtype, and cuBLAS adds them in
  // f32 before its single rounding: the same result as the cpu backend.
  if (bias) {
    broadcastRows<<<gridFor(M * N), kThreads, 0, stream()>>>(dtype, bias, M, N,
                                                             y);
    CUDA_CHECK_LAUNCH();
  }
  gemm(false, true, M, N, K, 1.0f, {x, dtype, K, 0}, {W, dtype, K, 0},
       bias ? 1.0f : 0.0f, dtype, y, N, 0, 1);
}

void loomrt::backend::loomrt_linear_backward_data(loomrt_dtype dtype, int64_t M,
                                                  int64_t N, int64_t K,
                                                  const void *dy, const void *W,
                                                  void *dx,
                                                  int32_t accumulate) {
  if (M == 0 || K == 0)
    return;
  gemm(false, false, M, K, N, 1.0f, {dy, dtype, N, 0}, {W, dtype, K, 0},
       accumulate ? 1.0f : 0.0f, dtype, dx, K, 0, 1);
}

void loomrt::backend::loomrt_linear_backward_weight(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, const void *dy,
    const void *x, loomrt_dtype gdtype, void *dW, void *dbias,
    int32_t accumulate) {
  if (N == 0)
    return;
  if (K) {
    // dW [N,K] = dy^T [N,M] x [M,K]; M == 0 is the K == 0 case of gemm().
    gemm(true, false, N, K, M, 1.0f, {dy, dtype, N, 0}, {x, dtype, K, 0},
         accumulate ? 1.0f : 0.0f, gdtype, dW, K, 0, 1);
  }
  if (dbias) {
    if (M == 0) {
      if (!accumulate)
        CUDA_CHECK(
            cudaMemsetAsync(dbias, 0, size_t(N * dtypeSize(gdtype)), stream()));
    } else {
      columnSums(dtype, dy, M, N, gdtype, dbias, accumulate != 0);
    }
  }
}
