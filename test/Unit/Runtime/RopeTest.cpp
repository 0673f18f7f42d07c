//===- RopeTest.cpp - Rotary embedding, position and document ids ---------===//

#include "test/Unit/Runtime/TestUtil.h"

using namespace loomrt_test;

namespace {
constexpr int64_t kB = 2, kS = 5, kN = 3, kD = 8;

// The scaling arguments of an unscaled call.
#define NO_SCALING LOOMRT_ROPE_DEFAULT, 1.0f, 1.0f, 1.0f, int64_t(0)

/// Llama 3.x's rescaled inverse frequency (transformers'
/// _compute_llama3_parameters), in double.
double llama3(double invFreq, double factor, double low, double high,
              double original) {
  double wavelen = 2 * M_PI / invFreq;
  if (wavelen > original / low)
    return invFreq / factor;
  if (wavelen < original / high)
    return invFreq;
  double smooth = (original / wavelen - low) / (high - low);
  return (1 - smooth) * invFreq / factor + smooth * invFreq;
}

/// HF Llama apply_rotary_pos_emb, in double, on the first rotDim features;
/// `scale` rescales the inverse frequencies.
template <typename Scale = double (*)(double)>
std::vector<double> refRope(
    const std::vector<double> &x, const std::vector<int32_t> &pos,
    int64_t rotDim, double theta, Scale scale = [](double f) { return f; }) {
  std::vector<double> y = x;
  const int64_t half = rotDim / 2;
  for (int64_t bs = 0; bs < kB * kS; ++bs)
    for (int64_t h = 0; h < kN; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double a = pos[bs] *
                   scale(1 / std::pow(theta, double(2 * i) / double(rotDim)));
        const double *xr = &x[(bs * kN + h) * kD];
        double *yr = &y[(bs * kN + h) * kD];
        yr[i] = xr[i] * std::cos(a) - xr[i + half] * std::sin(a);
        yr[i + half] = xr[i + half] * std::cos(a) + xr[i] * std::sin(a);
      }
  return y;
}
} // namespace

TEST(RopeTest, ForwardMatchesHfAndBackwardIsTheTranspose) {
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 7, 100, 2, 0, 1};
  std::vector<float> x = randomVec(kB * kS * kN * kD, 1);
  std::vector<float> dy = randomVec(x.size(), 2);
  for (int64_t rotDim : {kD, kD / 2}) {
    SCOPED_TRACE("rot_dim " + std::to_string(rotDim));
    std::vector<float> y(x.size());
    loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, rotDim, 10000.0f,
                        NO_SCALING, pos.data(), x.data(), y.data());
    // Angles up to 100 rad in f32: a few ulps of the angle.
    expectClose(y, refRope(toDouble(x), pos, rotDim, 10000.0), 2e-5, 2e-5, "y");
    auto gx = numericGrad(
        [&](const auto &v) {
          return dot(refRope(v, pos, rotDim, 10000.0), dy);
        },
        toDouble(x));
    std::vector<float> dx(x.size());
    loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, rotDim, 10000.0f,
                         NO_SCALING, pos.data(), dy.data(), dx.data());
    expectClose(dx, gx, 2e-5, 2e-5, "dx");
  }
}

// kD = 8, theta 10000: wavelengths 6.3, 62.8, 628, 6283. With an original
// context of 400, low 1 and high 8, the first is kept (< 50), the second
// is in the smooth band (50 .. 400) and the last two are divided by the
// factor.
TEST(RopeTest, Llama3ScalingMatchesHf) {
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 7, 100, 2, 0, 1};
  std::vector<float> x = randomVec(kB * kS * kN * kD, 5);
  std::vector<float> dy = randomVec(x.size(), 6);
  auto scale = [](double f) { return llama3(f, 4.0, 1.0, 8.0, 400.0); };
  std::vector<double> want = refRope(toDouble(x), pos, kD, 10000.0, scale);
  std::vector<float> y(x.size());
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 10000.0f,
                      LOOMRT_ROPE_LLAMA3, 4.0f, 1.0f, 8.0f, 400, pos.data(),
                      x.data(), y.data());
  expectClose(y, want, 2e-5, 2e-5, "y");
  // The scaling changes the result (else this test would see nothing).
  std::vector<double> unscaled = refRope(toDouble(x), pos, kD, 10000.0);
  double gap = 0;
  for (size_t i = 0; i < y.size(); ++i)
    gap = std::max(gap, std::abs(unscaled[i] - want[i]));
  EXPECT_GT(gap, 1e-2);
  auto gx = numericGrad(
      [&](const auto &v) {
        return dot(refRope(v, pos, kD, 10000.0, scale), dy);
      },
      toDouble(x));
  std::vector<float> dx(x.size());
  loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, kD, 10000.0f,
                       LOOMRT_ROPE_LLAMA3, 4.0f, 1.0f, 8.0f, 400, pos.data(),
                       dy.data(), dx.data());
  expectClose(dx, gx, 2e-5, 2e-5, "dx");
}

TEST(RopeDeathTest, BadScalingAbortsWithTheFunctionName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> t(kD, 0.0f);
  float *x = t.data();
  EXPECT_DEATH(loomrt_rope_forward(LOOMRT_F32, 1, 1, 1, kD, kD, 10000.0f, 7,
                                   8.0f, 1.0f, 4.0f, 32, nullptr, x, x),
               "loomrt_rope_forward: unknown rope scaling 7");
  // high_freq_factor must exceed low_freq_factor (the smooth band divides
  // by their difference).
  EXPECT_DEATH(loomrt_rope_backward(LOOMRT_F32, 1, 1, 1, kD, kD, 10000.0f,
                                    LOOMRT_ROPE_LLAMA3, 8.0f, 4.0f, 4.0f, 32,
                                    nullptr, x, x),
               "loomrt_rope_backward: bad llama3 rope scaling factor=8 "
               "low_freq_factor=4 high_freq_factor=4");
}

TEST(RopeTest, NullPositionsMeanArangeAndInPlaceWorks) {
  std::vector<int32_t> pos(kB * kS);
  for (int64_t i = 0; i < kB * kS; ++i)
    pos[i] = int32_t(i % kS);
  std::vector<float> x = randomVec(kB * kS * kN * kD, 3);
  std::vector<float> withPos(x.size()), inPlace = x;
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, NO_SCALING,
                      pos.data(), x.data(), withPos.data());
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, NO_SCALING,
                      nullptr, inPlace.data(), inPlace.data());
  EXPECT_EQ(inPlace, withPos);
  // Backward undoes forward: the rotation is orthogonal.
  loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, NO_SCALING,
                       nullptr, inPlace.data(), inPlace.data());
  expectClose(inPlace, x, 1e-6, 1e-5, "x");
}

TEST(RopeTest, Bf16) {
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
  std::vector<float> x = rounded(randomVec(kB * kS * kN * kD, 4), LOOMRT_BF16);
  Buf y(LOOMRT_BF16, x.size());
  loomrt_rope_forward(LOOMRT_BF16, kB, kS, kN, kD, kD, 10000.0f, NO_SCALING,
                      pos.data(), Buf(LOOMRT_BF16, x).data(), y.data());
  expectClose(y.values(), refRope(toDouble(x), pos, kD, 10000.0), 1e-2,
              1.0 / 128, "y");
}

TEST(MaskIdsTest, DocumentIdsIncrementAfterEod) {
  const int32_t eod = 0;
  // Two rows; the EOD belongs to the document it ends.
  std::vector<int32_t> tokens = {5, 6, 0, 7, 0, 0, 8, //
                                 0, 9, 9, 9, 9, 9, 0};
  std::vector<int32_t> doc(tokens.size()), pos(tokens.size());
  loomrt_document_ids(2, 7, tokens.data(), eod, doc.data());
  EXPECT_EQ(doc, (std::vector<int32_t>{0, 0, 0, 1, 1, 2, 3, //
                                       0, 1, 1, 1, 1, 1, 1}));
  loomrt_position_ids(2, 7, tokens.data(), eod, 1, pos.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0, //
                                       0, 0, 1, 2, 3, 4, 5}));
  loomrt_position_ids(2, 7, tokens.data(), eod, 0, pos.data());
  EXPECT_EQ(pos, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, //
                                       0, 1, 2, 3, 4, 5, 6}));
}

// q and k in one call: each as the single calls rotate it, both ways.
TEST(RopeTest, PairIsTwoRotations) {
  const int64_t kKvHeads = 1;
  std::vector<float> q = randomVec(size_t(kB * kS * kN * kD), 30);
  std::vector<float> k = randomVec(size_t(kB * kS * kKvHeads * kD), 31);
  std::vector<int32_t> pos(size_t(kB * kS));
  for (size_t i = 0; i < pos.size(); ++i)
    pos[i] = int32_t(i * 7 % 11);
  std::vector<float> q1(q.size()), k1(k.size()), q2(q.size()), k2(k.size());
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 10000.0f,
                      LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0, pos.data(), q.data(),
                      q1.data());
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kKvHeads, kD, kD, 10000.0f,
                      LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0, pos.data(), k.data(),
                      k1.data());
  loomrt_rope_pair_forward(LOOMRT_F32, kB, kS, kN, kKvHeads, kD, kD, 10000.0f,
                           LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0, pos.data(),
                           q.data(), k.data(), q2.data(), k2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(k1, k2);
  loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, kD, 10000.0f,
                       LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0, pos.data(), q1.data(),
                       q1.data());
  loomrt_rope_backward(LOOMRT_F32, kB, kS, kKvHeads, kD, kD, 10000.0f,
                       LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0, pos.data(), k1.data(),
                       k1.data());
  loomrt_rope_pair_backward(LOOMRT_F32, kB, kS, kN, kKvHeads, kD, kD,
                            10000.0f, LOOMRT_ROPE_DEFAULT, 1, 1, 1, 0,
                            pos.data(), q2.data(), k2.data(), q2.data(),
                            k2.data());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(k1, k2);
}
