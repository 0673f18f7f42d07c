//===- Checks.h - Argument checks shared by the backends --------*- C++ -*-===//
//
// Part of the Loom project.
//
// Internal to runtime/: the argument rules of the loomrt.h entry points are
// the ABI's, not a backend's, so both backends validate with these (a
// backend adds only its own limits, such as grid sizes).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_COMMON_CHECKS_H
#define LOOM_RUNTIME_COMMON_CHECKS_H

#include "runtime/common/Errors.h"

namespace loomrt {

#define LOOMRT_CHECK_N(n)                                                      \
  LOOMRT_CHECK((n) >= 0, "negative element count %lld", (long long)(n))
#define LOOMRT_CHECK_PTR(p) LOOMRT_CHECK((p) != nullptr, "%s is NULL", #p)

/// The sizes of one attention call (q [B,S,Nq,D], k/v [B,Sk,Nkv,D]).
struct AttentionDims {
  int64_t B, S, Sk, Nq, Nkv, D;
};

void checkAttention(const char *fn, loomrt_dtype dtype, const AttentionDims &d,
                    const int32_t *qDoc, const int32_t *kDoc);
/// Cross-entropy over n rows of V logits (V: this rank's vocabulary slice).
void checkCE(const char *fn, loomrt_dtype dtype, int64_t n, int64_t V);
/// The columns of a V-column slice that are real vocabulary (the rest is
/// padding): 0 <= valid <= V.
void checkValid(const char *fn, int64_t valid, int64_t V);
void checkSwiglu(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t F,
                 int64_t in_ld);
void checkEmbedding(const char *fn, loomrt_dtype dtype, int64_t n, int64_t H,
                    int64_t start, int64_t end);
void checkLinear(const char *fn, loomrt_dtype dtype, int64_t M, int64_t N,
                 int64_t K);
void checkNorm(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t H);
/// A GEMM leading dimension `what` must cover the `cols` stored columns.
void checkLd(const char *what, int64_t ld, int64_t cols);

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_CHECKS_H
