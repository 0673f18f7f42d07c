//===- Checks.cpp - Argument checks shared by the backends -----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Checks.h"

#include <algorithm>

namespace loomrt {

void checkAttention(const char *fn, loomrt_dtype dtype, const AttentionDims &d,
                    const int32_t *qDoc, const int32_t *kDoc) {
  checkedDtypeSize(fn, dtype);
  if (d.B < 0 || d.S < 0 || d.Sk < 0 || d.Nq <= 0 || d.Nkv <= 0 || d.D <= 0)
    fatal(fn, "bad sizes B=%lld S=%lld Sk=%lld Nq=%lld Nkv=%lld D=%lld",
          (long long)d.B, (long long)d.S, (long long)d.Sk, (long long)d.Nq,
          (long long)d.Nkv, (long long)d.D);
  if (d.Nq % d.Nkv != 0)
    fatal(fn, "%lld query heads are not a multiple of %lld kv heads",
          (long long)d.Nq, (long long)d.Nkv);
  if ((qDoc == nullptr) != (kDoc == nullptr))
    fatal(fn, "q_doc and k_doc must both be given or both be NULL");
}

void checkCE(const char *fn, loomrt_dtype dtype, int64_t n, int64_t V) {
  checkedDtypeSize(fn, dtype);
  if (n < 0 || V <= 0)
    fatal(fn, "bad sizes n=%lld V=%lld", (long long)n, (long long)V);
}

void checkValid(const char *fn, int64_t valid, int64_t V) {
  if (valid < 0 || valid > V)
    fatal(fn, "bad vocabulary count valid=%lld of V=%lld", (long long)valid,
          (long long)V);
}

void checkSwiglu(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t F,
                 int64_t in_ld) {
  checkedDtypeSize(fn, dtype);
  if (rows < 0 || F < 0 || in_ld < F)
    fatal(fn, "bad sizes rows=%lld F=%lld in_ld=%lld (need in_ld >= F)",
          (long long)rows, (long long)F, (long long)in_ld);
}

void checkEmbedding(const char *fn, loomrt_dtype dtype, int64_t n, int64_t H,
                    int64_t start, int64_t end) {
  checkedDtypeSize(fn, dtype);
  if (n < 0 || H <= 0 || start < 0 || end < start)
    fatal(fn, "bad sizes n=%lld H=%lld vocab range [%lld, %lld)", (long long)n,
          (long long)H, (long long)start, (long long)end);
}

void checkLinear(const char *fn, loomrt_dtype dtype, int64_t M, int64_t N,
                 int64_t K) {
  checkedDtypeSize(fn, dtype);
  if (M < 0 || N < 0 || K < 0)
    fatal(fn, "negative size M=%lld N=%lld K=%lld", (long long)M, (long long)N,
          (long long)K);
}

void checkNorm(const char *fn, loomrt_dtype dtype, int64_t rows, int64_t H) {
  checkedDtypeSize(fn, dtype);
  if (rows < 0 || H <= 0)
    fatal(fn, "bad sizes rows=%lld H=%lld (H must be positive)",
          (long long)rows, (long long)H);
}

void checkLd(const char *what, int64_t ld, int64_t cols) {
  if (ld < std::max<int64_t>(cols, 1))
    fatal("loomrt_gemm", "%s = %lld is smaller than the %lld stored columns",
          what, (long long)ld, (long long)cols);
}

} // namespace loomrt
