//===- CastTest.cpp - dtype casts, checks and elementwise helpers ---------===//
//
// f16 results are compared with GCC's _Float16 conversions (libgcc's
// soft-fp, an independent round-to-nearest-even implementation); bf16 with a
// reference that picks the nearer of the two neighbouring bf16 values in
// double arithmetic.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Runtime/TestUtil.h"

#include <limits>

using namespace loomrt_test;

namespace {
uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f16Bits(_Float16 h) {
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

/// bf16 reference: nearest of truncation and truncation + 1 ulp, ties to
/// the even one (finite inputs whose rounding stays finite).
uint16_t bf16Reference(float f) {
  const uint32_t u = bitsOf(f);
  const uint16_t lo = uint16_t(u >> 16), hi = uint16_t(lo + 1);
  const double dLo = std::fabs(double(f) - double(floatOf(uint32_t(lo) << 16)));
  const double dHi = std::fabs(double(floatOf(uint32_t(hi) << 16)) - double(f));
  if (dLo < dHi)
    return lo;
  if (dHi < dLo)
    return hi;
  return (lo & 1) ? hi : lo;
}

uint16_t toBits(loomrt_dtype dt, float f) {
  uint16_t out;
  loomrt_cast(LOOMRT_F32, &f, dt, &out, 1);
  return out;
}

float fromBits(loomrt_dtype dt, uint16_t h) {
  float out;
  loomrt_cast(dt, &h, LOOMRT_F32, &out, 1);
  return out;
}

/// Values that exercise rounding: random magnitudes over the whole range,
/// exact ties of both dtypes and subnormals of f16.
std::vector<float> roundingCorpus() {
  std::mt19937 gen(7);
  std::vector<float> v;
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  for (int i = 0; i < 20000; ++i) {
    float f = floatOf(bits(gen));
    if (std::isfinite(f) && std::fabs(f) < 3e38f)
      v.push_back(f);
  }
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 20000; ++i)
    v.push_back(small(gen) * std::pow(2.0f, -float(i % 40)));
  for (uint32_t m = 0; m < 2000; ++m) {
    // Halfway cases: the dropped bits are exactly 100...0.
    v.push_back(floatOf((0x3f800000u + (m << 16)) | 0x8000u)); // bf16 tie
    v.push_back(floatOf((0x3f800000u + (m << 13)) | 0x1000u)); // f16 tie
    v.push_back(floatOf((0x33800000u + (m << 13)) | 0x1000u)); // f16 subnormal
  }
  return v;
}
} // namespace

TEST(CastTest, F16WideningIsExactForAllBitPatterns) {
  for (uint32_t h = 0; h < 65536; ++h) {
    _Float16 ref;
    uint16_t h16 = uint16_t(h);
    std::memcpy(&ref, &h16, 2);
    float got = fromBits(LOOMRT_F16, h16);
    if (std::isnan(float(ref))) {
      EXPECT_TRUE(std::isnan(got)) << std::hex << h;
      continue;
    }
    ASSERT_EQ(bitsOf(got), bitsOf(float(ref)))
        << "f16 bits 0x" << std::hex << h;
    // Every f16 survives the round trip.
    ASSERT_EQ(toBits(LOOMRT_F16, got), h16) << "round trip 0x" << std::hex << h;
  }
}

TEST(CastTest, F32ToF16MatchesCompilerRounding) {
  std::vector<float> v = roundingCorpus();
  v.insert(v.end(),
           {65504.0f, 65519.99f, 65520.0f, 1e6f, -1e6f, 0.0f, -0.0f,
            std::numeric_limits<float>::infinity(),
            -std::numeric_limits<float>::infinity(),
            std::numeric_limits<float>::denorm_min(), 2.98e-8f, 2.99e-8f});
  std::vector<uint16_t> got(v.size());
  loomrt_cast(LOOMRT_F32, v.data(), LOOMRT_F16, got.data(), int64_t(v.size()));
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(got[i], f16Bits(_Float16(v[i])))
        << "value " << v[i] << " (0x" << std::hex << bitsOf(v[i]) << ")";
}

TEST(CastTest, F32ToBf16RoundsToNearestEven) {
  std::vector<float> v = roundingCorpus();
  std::vector<uint16_t> got(v.size());
  loomrt_cast(LOOMRT_F32, v.data(), LOOMRT_BF16, got.data(), int64_t(v.size()));
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(got[i], bf16Reference(v[i]))
        << "value " << v[i] << " (0x" << std::hex << bitsOf(v[i]) << ")";
  // Widening is the exact inverse on bf16 values.
  for (uint32_t h = 0; h < 65536; h += 7) {
    float f = fromBits(LOOMRT_BF16, uint16_t(h));
    EXPECT_EQ(bitsOf(f), h << 16);
  }
}

TEST(CastTest, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(toBits(LOOMRT_BF16, inf), 0x7f80);
  EXPECT_EQ(toBits(LOOMRT_BF16, -inf), 0xff80);
  EXPECT_EQ(toBits(LOOMRT_BF16, std::numeric_limits<float>::max()), 0x7f80)
      << "FLT_MAX is past the last bf16 midpoint";
  EXPECT_EQ(toBits(LOOMRT_BF16, -0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(fromBits(LOOMRT_BF16, toBits(LOOMRT_BF16, nan))));
  EXPECT_TRUE(std::isnan(fromBits(LOOMRT_F16, toBits(LOOMRT_F16, nan))));
  // A signalling-looking NaN whose payload sits in the dropped bits must
  // not turn into inf.
  EXPECT_TRUE(std::isnan(
      fromBits(LOOMRT_BF16, toBits(LOOMRT_BF16, floatOf(0x7f800001u)))));
  EXPECT_EQ(toBits(LOOMRT_F16, 70000.0f), 0x7c00);
  EXPECT_EQ(toBits(LOOMRT_F16, -70000.0f), 0xfc00);
}

TEST(CastTest, Bf16ToF16AndSameDtypeCopy) {
  std::vector<float> v = randomVec(1000, 3, -100.0f, 100.0f);
  Buf b(LOOMRT_BF16, v);
  Buf h(LOOMRT_F16, v.size());
  loomrt_cast(LOOMRT_BF16, b.data(), LOOMRT_F16, h.data(), int64_t(v.size()));
  std::vector<float> bv = b.values(), hv = h.values();
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(f16Bits(_Float16(bv[i])), toBits(LOOMRT_F16, hv[i]));
  Buf copy(LOOMRT_BF16, v.size());
  loomrt_cast(LOOMRT_BF16, b.data(), LOOMRT_BF16, copy.data(),
              int64_t(v.size()));
  EXPECT_EQ(copy.bytes, b.bytes);
}

TEST(CastTest, LargeCastUsesAllBlocks) {
  // Bigger than the parallel threshold and not a multiple of the block.
  std::vector<float> v = randomVec(100003, 11, -5.0f, 5.0f);
  Buf b(LOOMRT_BF16, v);
  std::vector<float> back = b.values();
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_NEAR(back[i], v[i], std::fabs(v[i]) * (1.0 / 256) + 1e-30) << i;
}

TEST(NonfiniteTest, DetectsInfAndNanInEveryDtype) {
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    std::vector<float> v = randomVec(70000, 5, -1000.0f, 1000.0f);
    EXPECT_EQ(loomrt_has_nonfinite(dt, Buf(dt, v).data(), int64_t(v.size())),
              0);
    v[12345] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(loomrt_has_nonfinite(dt, Buf(dt, v).data(), int64_t(v.size())),
              1);
    v[12345] = 1.0f;
    v[69999] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(loomrt_has_nonfinite(dt, Buf(dt, v).data(), int64_t(v.size())),
              1);
    EXPECT_EQ(loomrt_has_nonfinite(dt, Buf(dt, v).data(), 69999), 0)
        << "only the first n elements are inspected";
  }
  // Overflow in a narrowing cast is what loss scaling must notice.
  std::vector<float> big = {1.0f, 1e5f};
  EXPECT_EQ(loomrt_has_nonfinite(LOOMRT_F16, Buf(LOOMRT_F16, big).data(), 2),
            1);
}

TEST(ElementwiseTest, ScaleAxpyAddSumSquares) {
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    const double tol = dt == LOOMRT_F32 ? 1e-6 : 1e-2;
    std::vector<float> a = rounded(randomVec(50001, 1), dt);
    std::vector<float> b = rounded(randomVec(50001, 2), dt);
    Buf s(dt, a);
    loomrt_scale(dt, s.data(), int64_t(a.size()), 0.5f);
    std::vector<double> want(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      want[i] = 0.5 * a[i];
    expectClose(s.values(), want, 0, tol, "scale");

    Buf sum(dt, a.size());
    loomrt_add(dt, int64_t(a.size()), Buf(dt, a).data(), Buf(dt, b).data(),
               sum.data());
    for (size_t i = 0; i < a.size(); ++i)
      want[i] = double(a[i]) + b[i];
    expectClose(sum.values(), want, tol, tol, "add");

    // Low-precision x accumulated into an f32 y (main-grad style).
    std::vector<float> y = randomVec(a.size(), 3);
    std::vector<float> y0 = y;
    loomrt_axpy(int64_t(a.size()), -2.0f, dt, Buf(dt, a).data(), LOOMRT_F32,
                y.data());
    for (size_t i = 0; i < a.size(); ++i)
      want[i] = double(y0[i]) - 2.0 * a[i];
    expectClose(y, want, 1e-6, 1e-6, "axpy");

    double sq = 0;
    for (float x : a)
      sq += double(x) * x;
    EXPECT_NEAR(loomrt_sum_squares(dt, Buf(dt, a).data(), int64_t(a.size())),
                sq, sq * 1e-5);
  }
}

TEST(SupportTest, AllocIsAlignedAndClockAdvances) {
  for (int64_t bytes : {0, 1, 63, 64, 1000, 1 << 20}) {
    void *p = loomrt_alloc(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    loomrt_zero(p, bytes);
    loomrt_free(p);
  }
  char src[16] = "loomrt copy", dst[16] = {};
  loomrt_copy(dst, src, 16);
  EXPECT_STREQ(dst, "loomrt copy");
  double t0 = loomrt_wtime(), t1 = loomrt_wtime();
  EXPECT_LE(t0, t1);
  EXPECT_EQ(loomrt_dtype_size(LOOMRT_F32), 4);
  EXPECT_EQ(loomrt_dtype_size(LOOMRT_BF16), 2);
  EXPECT_EQ(loomrt_dtype_size(LOOMRT_F16), 2);
  loomrt_set_num_threads(1);
  EXPECT_EQ(loomrt_get_num_threads(), 1);
  loomrt_set_num_threads(0);
  EXPECT_GE(loomrt_get_num_threads(), 1);
}

TEST(SupportTest, Copy2dSlicesAndConcatenates) {
  // Split a fused [4, 3*2] "QKV" row layout into its middle [4, 2] part and
  // write it back into a zeroed [4, 6] buffer at the same columns.
  std::vector<float> fused(24), mid(8), back(24, 0.0f);
  for (int i = 0; i < 24; ++i)
    fused[i] = float(i);
  loomrt_copy_2d(mid.data(), 2 * 4, fused.data() + 2, 6 * 4, 4, 2 * 4);
  EXPECT_EQ(mid, (std::vector<float>{2, 3, 8, 9, 14, 15, 20, 21}));
  loomrt_copy_2d(back.data() + 2, 6 * 4, mid.data(), 2 * 4, 4, 2 * 4);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(back[i], (i % 6 == 2 || i % 6 == 3) ? float(i) : 0.0f) << i;
}

TEST(SupportDeathTest, MisuseAbortsWithTheFunctionName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float x = 0;
  EXPECT_DEATH(loomrt_cast(7, &x, LOOMRT_F32, &x, 1),
               "loomrt: rank 0: loomrt_cast: unknown dtype 7");
  EXPECT_DEATH(loomrt_scale(LOOMRT_F32, &x, -1, 1.0f),
               "loomrt_scale: negative element count");
  EXPECT_DEATH(loomrt_abort("compiled program gave up"),
               "loomrt: rank 0: compiled program gave up");
}

TEST(ElementwiseTest, AddBiasBroadcastsOverRows) {
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    const double tol = dt == LOOMRT_F32 ? 1e-6 : 1e-2;
    // Rows not a multiple of the kernel block, so the bias index wraps
    // inside blocks.
    const int64_t rows = 37, n = 211;
    std::vector<float> x = rounded(randomVec(size_t(rows * n), 4), dt);
    std::vector<float> bias = rounded(randomVec(size_t(n), 5), dt);
    Buf out(dt, x.size());
    loomrt_add_bias(dt, rows, n, Buf(dt, x).data(), Buf(dt, bias).data(),
                    out.data());
    std::vector<double> want(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        want[size_t(r * n + j)] = double(x[size_t(r * n + j)]) + bias[size_t(j)];
    expectClose(out.values(), want, tol, tol, "add_bias");
    // In place.
    Buf inPlace(dt, x);
    loomrt_add_bias(dt, rows, n, inPlace.data(), Buf(dt, bias).data(),
                    inPlace.data());
    expectClose(inPlace.values(), want, tol, tol, "add_bias in place");
  }
}
