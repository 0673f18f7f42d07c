//===- FusedLinears.cpp - Linears of one input; a linear with GELU -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The fused linears of the compiled code (tfm.multi_linear(_grad),
// tfm.linear_gelu, tfm.linear_grad_gelu, tfm.linear_swiglu,
// tfm.linear_grad_swiglu), the same on every backend: the backend's linear
// and activation calls, in the order and with the rounding the
// unfused ops have, so a fused program equals the unfused one. A backend
// that batches the GEMMs or runs the GELU as a GEMM epilogue can take
// these over.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Composed.h"

#include "runtime/abi/Common.h.inc"

using namespace loomrt;

void common::loomrt_multi_linear_forward(loomrt_dtype dtype, int32_t count,
                                         int64_t M, int64_t K,
                                         const int64_t *N, const void *x,
                                         const void *const *W,
                                         const void *const *bias,
                                         void *const *y) {
  for (int32_t i = 0; i < count; ++i)
    ::loomrt_linear_forward(dtype, M, N[i], K, x, W[i],
                            bias ? bias[i] : nullptr, y[i]);
}

void common::loomrt_multi_linear_backward_data(
    loomrt_dtype dtype, int32_t count, int64_t M, int64_t K, const int64_t *N,
    const void *const *dy, const void *const *W, void *dx,
    int32_t accumulate) {
  for (int32_t i = 0; i < count; ++i)
    ::loomrt_linear_backward_data(dtype, M, N[i], K, dy[i], W[i], dx,
                                  i > 0 || accumulate);
}

void common::loomrt_multi_linear_backward_weight(
    loomrt_dtype dtype, int32_t count, int64_t M, int64_t K, const int64_t *N,
    const void *const *dy, const void *x, loomrt_dtype gdtype,
    void *const *dW, void *const *dbias, int32_t accumulate) {
  for (int32_t i = 0; i < count; ++i)
    ::loomrt_linear_backward_weight(dtype, M, N[i], K, dy[i], x, gdtype, dW[i],
                                    dbias ? dbias[i] : nullptr, accumulate);
}

void common::loomrt_linear_gelu_forward(loomrt_dtype dtype,
                                        int32_t approximate, int64_t M,
                                        int64_t N, int64_t K, const void *x,
                                        const void *W, const void *bias,
                                        void *pre, void *y) {
  ::loomrt_linear_forward(dtype, M, N, K, x, W, bias, pre);
  ::loomrt_gelu_forward(dtype, approximate, M * N, pre, y);
}

void common::loomrt_linear_backward_data_gelu(
    loomrt_dtype dtype, int32_t approximate, int64_t M, int64_t N, int64_t K,
    const void *dy, const void *W, const void *gelu_input, void *dx) {
  // The product is rounded to dtype in dx, then scaled there (the GELU's
  // backward may write over its output gradient).
  ::loomrt_linear_backward_data(dtype, M, N, K, dy, W, dx, 0);
  ::loomrt_gelu_backward(dtype, approximate, M * K, gelu_input, dx, dx);
}

void common::loomrt_linear_swiglu_forward(loomrt_dtype dtype, int64_t M,
                                          int64_t F, int64_t K, const void *x,
                                          const void *Wg, const void *Wu,
                                          const void *bg, const void *bu,
                                          void *gate, void *up, void *out) {
  ::loomrt_linear_forward(dtype, M, F, K, x, Wg, bg, gate);
  ::loomrt_linear_forward(dtype, M, F, K, x, Wu, bu, up);
  ::loomrt_swiglu_forward(dtype, M, F, F, gate, up, out);
}

void common::loomrt_linear_backward_data_swiglu(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t F, const void *dy,
    const void *W, const void *gate, const void *up, void *dgate, void *dup) {
  // The product (SwiGLU's output gradient) is rounded to dtype in dgate,
  // which the SwiGLU's backward then overwrites element by element.
  ::loomrt_linear_backward_data(dtype, M, N, F, dy, W, dgate, 0);
  ::loomrt_swiglu_backward(dtype, M, F, F, gate, up, dgate, dgate, dup);
}
