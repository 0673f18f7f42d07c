//===- Support.cpp - Errors, dtypes, memory, threads, time ------*- C++ -*-===//
//
// The plumbing every other file of the cpu backend uses, plus the ABI's
// process/memory/time helpers.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/common/Profile.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <cblas.h>
#include <mpi.h>
#include <omp.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace loomrt;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// fatal(): runtime/common/Errors.cpp; the entry points' argument checks:
// runtime/common/Rules.cpp.

//===----------------------------------------------------------------------===//
// f16 conversions
//===----------------------------------------------------------------------===//

float loomrt::f16ToF32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in f32.
    float mag = float(mant) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }
  if (exp == 31)
    return floatOf(sign | 0x7f800000u | (mant << 13));
  return floatOf(sign | ((exp + 112u) << 23) | (mant << 13));
}

// Round-to-nearest-even without a hardware converter (F. Giesen's
// float_to_half_fast3_rtne): subnormal results are rounded by the FPU itself
// by adding a magic number whose ulp is the f16 subnormal step; normal
// results round the dropped 13 mantissa bits with the "+0xfff + odd" rule.
uint16_t loomrt::f32ToF16(float f) {
  uint32_t u = bitsOf(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  uint16_t out;
  if (u >= (127u + 16u) << 23) { // >= 65536: inf, or NaN
    out = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (u < 113u << 23) { // below 2^-14: subnormal or zero
    const uint32_t magicBits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    float sum = floatOf(u) + floatOf(magicBits);
    out = uint16_t(bitsOf(sum) - magicBits);
  } else {
    uint32_t mantOdd = (u >> 13) & 1u;
    u += (uint32_t(15 - 127) << 23) + 0xfffu;
    u += mantOdd;
    out = uint16_t(u >> 13);
  }
  return uint16_t(out | sign);
}

//===----------------------------------------------------------------------===//
// Bulk conversions
//===----------------------------------------------------------------------===//

void loomrt::toF32(loomrt_dtype dtype, const void *src, float *dst, int64_t n) {
  switch (dtype) {
  case LOOMRT_F32:
    if (src != dst)
      std::memcpy(dst, src, size_t(n) * 4);
    return;
  case LOOMRT_BF16: {
    auto *s = static_cast<const uint16_t *>(src);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = bf16ToF32(s[i]);
    return;
  }
  case LOOMRT_F16: {
    auto *s = static_cast<const uint16_t *>(src);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      dst[i] = f16ToF32(s[i]);
    return;
  }
  default:
    fatal(__func__, "unknown dtype %d", int(dtype));
  }
}

void loomrt::fromF32(const float *src, loomrt_dtype dtype, void *dst,
                     int64_t n) {
  switch (dtype) {
  case LOOMRT_F32:
    if (src != dst)
      std::memcpy(dst, src, size_t(n) * 4);
    return;
  case LOOMRT_BF16: {
    auto *d = static_cast<uint16_t *>(dst);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      d[i] = f32ToBf16(src[i]);
    return;
  }
  case LOOMRT_F16: {
    auto *d = static_cast<uint16_t *>(dst);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
    for (int64_t i = 0; i < n; ++i)
      d[i] = f32ToF16(src[i]);
    return;
  }
  default:
    fatal(__func__, "unknown dtype %d", int(dtype));
  }
}

float loomrt::sumF32(const float *src, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j)
      acc[j] += src[i + j];
  for (; i < n; ++i)
    acc[0] += src[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

//===----------------------------------------------------------------------===//
// Threads, memory, time
//===----------------------------------------------------------------------===//

// The runtime has one thread pool, OpenMP's. OpenBLAS (the pthread build on
// Debian) would bring a second one whose workers spin after every call and
// fight the OpenMP workers for the same cores, so OpenBLAS runs
// single-threaded and loomrt::sgemm splits GEMMs over OpenMP threads. Set
// when the library is loaded, before any kernel can call BLAS.
static const bool kOpenBlasSingleThreaded = [] {
  openblas_set_num_threads(1);
  return true;
}();

// The thread count OpenMP chose before anyone called set_num_threads, so
// that n <= 0 can restore it.
static int defaultThreads() {
  static const int threads = omp_get_max_threads();
  return threads;
}

void loomrt::backend::loomrt_set_num_threads(int32_t n) {
  (void)kOpenBlasSingleThreaded;
  (void)defaultThreads(); // Capture the default before the first change.
  omp_set_num_threads(n > 0 ? int(n) : defaultThreads());
}

int32_t loomrt::backend::loomrt_get_num_threads() {
  return omp_get_max_threads();
}

void *loomrt::backend::loomrt_alloc(int64_t bytes) {
  profile::allocation();
  if (contract::enabled())
    return contract::alloc(bytes);
  // aligned_alloc needs a multiple of the alignment; rounding up also makes
  // a zero-byte request return a real, unique pointer.
  size_t rounded = size_t((bytes + 63) / 64 * 64);
  if (rounded == 0)
    rounded = 64;
  void *p = std::aligned_alloc(64, rounded);
  LOOMRT_CHECK(p, "out of memory allocating %lld bytes", (long long)bytes);
  return p;
}

void loomrt::backend::loomrt_free(void *ptr) {
  // A device backend waits for queued work before it frees.
  profile::hostSync();
  if (contract::enabled())
    contract::release(ptr);
  else
    std::free(ptr);
}

void loomrt::backend::loomrt_upload(void *dst, const void *src,
                                    int64_t bytes) {
  LOOMRT_DEVICE_CALL(dst);
  // Ordered after earlier calls, like a device queue: nothing to wait for.
  if (bytes)
    std::memcpy(dst, src, size_t(bytes));
}

void loomrt::backend::loomrt_copy(void *dst, const void *src, int64_t bytes) {
  LOOMRT_DEVICE_CALL();
  // Complete on return (loomrt.h): a device backend waits for it.
  profile::hostSync();
  if (bytes)
    std::memcpy(dst, src, size_t(bytes));
}

void loomrt::backend::loomrt_zero(void *dst, int64_t bytes) {
  LOOMRT_DEVICE_CALL(dst);
  if (bytes)
    std::memset(dst, 0, size_t(bytes));
}

void loomrt::backend::loomrt_copy_2d(void *dst, int64_t dst_stride,
                                     const void *src, int64_t src_stride,
                                     int64_t rows, int64_t row_bytes) {
  LOOMRT_DEVICE_CALL(dst, src);
  if (rows == 0 || row_bytes == 0)
    return;
#pragma omp parallel for schedule(static) if (rows * row_bytes > (1 << 20))
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(static_cast<char *>(dst) + r * dst_stride,
                static_cast<const char *>(src) + r * src_stride,
                size_t(row_bytes));
}

double loomrt::backend::loomrt_wtime() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

//===----------------------------------------------------------------------===//
// The profiler's timeline: host clock stamps (every call is synchronous)
//===----------------------------------------------------------------------===//

namespace {
std::vector<std::chrono::steady_clock::time_point> &marks() {
  static std::vector<std::chrono::steady_clock::time_point> m;
  return m;
}
} // namespace

void loomrt::backend::profiling::reset() { marks().clear(); }

int32_t loomrt::backend::profiling::mark() {
  marks().push_back(std::chrono::steady_clock::now());
  return int32_t(marks().size() - 1);
}

void loomrt::backend::profiling::finish() {}

double loomrt::backend::profiling::elapsedMs(int32_t a, int32_t b) {
  return std::chrono::duration<double, std::milli>(marks()[size_t(b)] -
                                                   marks()[size_t(a)])
      .count();
}
