//===- Common.h - Shared helpers of the cpu backend -------------*- C++ -*-===//
//
// Internal to runtime/cpu: error reporting, f32 <-> bf16/f16 conversion and
// the f32 views every kernel computes through. Kernels are written once, in
// f32; a bf16/f16 tensor is widened into a scratch buffer on entry and
// rounded back once on exit, which is what "accumulate in f32" means here.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_COMMON_H
#define LOOM_RUNTIME_CPU_COMMON_H

#include "loomrt/loomrt.h"
#include "runtime/common/Errors.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace loomrt {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// fatal(), LOOMRT_CHECK and checkedDtypeSize() come from
// runtime/common/Errors.h, shared with the other backend.


//===----------------------------------------------------------------------===//
// Scalar conversions (round-to-nearest-even)
//===----------------------------------------------------------------------===//

inline uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16ToF32(uint16_t h) { return floatOf(uint32_t(h) << 16); }

inline uint16_t f32ToBf16(float f) {
  uint32_t u = bitsOf(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it quiet, keep the sign.
    return uint16_t((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even;
  // a carry into the exponent correctly rounds up to the next binade or inf.
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16ToF32(uint16_t h);
uint16_t f32ToF16(float f);

//===----------------------------------------------------------------------===//
// Bulk conversions
//===----------------------------------------------------------------------===//

/// dst[i] = src[i] widened to f32.
void toF32(loomrt_dtype dtype, const void *src, float *dst, int64_t n);
/// dst[i] = src[i] rounded to dtype.
void fromF32(const float *src, loomrt_dtype dtype, void *dst, int64_t n);

/// A read-only f32 view of a tensor: aliases f32 data, widens other dtypes
/// into an owned buffer. A NULL pointer gives a NULL view (optional inputs).
class In {
public:
  In(loomrt_dtype dtype, const void *p, int64_t n) {
    if (!p) {
      ptr = nullptr;
    } else if (dtype == LOOMRT_F32) {
      ptr = static_cast<const float *>(p);
    } else {
      buf.resize(size_t(n));
      toF32(dtype, p, buf.data(), n);
      ptr = buf.data();
    }
  }
  const float *get() const { return ptr; }
  operator const float *() const { return ptr; }

private:
  const float *ptr;
  std::vector<float> buf;
};

/// A writable f32 view of an output tensor. For f32 it aliases the output;
/// otherwise it owns a scratch buffer (pre-loaded with the current contents
/// when `load` is set, for accumulation) that commit() rounds back.
class Out {
public:
  Out(loomrt_dtype dtype, void *p, int64_t n, bool load)
      : dtype(dtype), dst(p), n(n) {
    if (!p) {
      ptr = nullptr;
    } else if (dtype == LOOMRT_F32) {
      ptr = static_cast<float *>(p);
    } else {
      buf.resize(size_t(n));
      if (load)
        toF32(dtype, p, buf.data(), n);
      ptr = buf.data();
    }
  }
  float *get() { return ptr; }
  operator float *() { return ptr; }
  void commit() {
    if (dst && dtype != LOOMRT_F32)
      fromF32(buf.data(), dtype, dst, n);
  }

private:
  loomrt_dtype dtype;
  void *dst;
  int64_t n;
  float *ptr;
  std::vector<float> buf;
};

/// Fewest elements per thread worth a parallel region for cheap
/// elementwise loops; below it the fork/join costs more than it saves.
constexpr int64_t kMinParallelWork = 1 << 15;

/// Elements per block of the blocked elementwise loops: small enough for a
/// stack scratch buffer, large enough to amortize the loop overhead.
constexpr int64_t kBlock = 4096;

/// Calls fn(begin, len) for consecutive blocks of [0, n), in parallel when n
/// is large enough.
template <typename Fn> void parallelBlocks(int64_t n, Fn fn) {
  const int64_t numBlocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t b = 0; b < numBlocks; ++b) {
    int64_t begin = b * kBlock;
    fn(begin, n - begin < kBlock ? n - begin : kBlock);
  }
}

/// f32 view of elements [begin, begin+len) of p: p itself for f32 data, else
/// widened into tmp (at least len floats).
inline const float *loadBlock(loomrt_dtype dtype, const void *p, int64_t begin,
                              int64_t len, float *tmp) {
  if (dtype == LOOMRT_F32)
    return static_cast<const float *>(p) + begin;
  toF32(dtype, static_cast<const char *>(p) + begin * 2, tmp, len);
  return tmp;
}

/// Where to compute elements [begin, begin+len) of an output: the output
/// itself for f32, else tmp (then storeBlock rounds it back).
inline float *outBlock(loomrt_dtype dtype, void *p, int64_t begin, float *tmp) {
  return dtype == LOOMRT_F32 ? static_cast<float *>(p) + begin : tmp;
}

inline void storeBlock(const float *v, loomrt_dtype dtype, void *p,
                       int64_t begin, int64_t len) {
  if (dtype != LOOMRT_F32)
    fromF32(v, dtype, static_cast<char *>(p) + begin * 2, len);
}

/// Row-major C = alpha op(A) op(B) + beta C on f32 data with cblas_sgemm.
/// OpenBLAS is kept single-threaded (see Support.cpp); this splits the larger
/// of M and N across the runtime's OpenMP threads instead, and runs on the
/// calling thread alone when already inside a parallel region, so kernels
/// can run independent GEMMs from their own parallel loops.
void sgemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
           float alpha, const float *A, int64_t lda, const float *B,
           int64_t ldb, float beta, float *C, int64_t ldc);

/// Sum of src[0..n) in f32 with 8 independent partial sums (better rounding
/// and vectorization than one running sum).
float sumF32(const float *src, int64_t n);

} // namespace loomrt

#endif // LOOM_RUNTIME_CPU_COMMON_H
