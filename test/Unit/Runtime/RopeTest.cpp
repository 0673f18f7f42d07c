//===- RopeTest.cpp - Rotary embedding, position and document ids ---------===//

#include "TestUtil.h"

using namespace loomrt_test;

namespace {
constexpr int64_t kB = 2, kS = 5, kN = 3, kD = 8;

/// HF Llama apply_rotary_pos_emb, in double, on the first rotDim features.
std::vector<double> refRope(const std::vector<double> &x,
                            const std::vector<int32_t> &pos, int64_t rotDim,
                            double theta) {
  std::vector<double> y = x;
  const int64_t half = rotDim / 2;
  for (int64_t bs = 0; bs < kB * kS; ++bs)
    for (int64_t h = 0; h < kN; ++h)
      for (int64_t i = 0; i < half; ++i) {
        double a = pos[bs] / std::pow(theta, double(2 * i) / double(rotDim));
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
                        pos.data(), x.data(), y.data());
    // Angles up to 100 rad in f32: a few ulps of the angle.
    expectClose(y, refRope(toDouble(x), pos, rotDim, 10000.0), 2e-5, 2e-5, "y");
    auto gx = numericGrad(
        [&](const auto &v) {
          return dot(refRope(v, pos, rotDim, 10000.0), dy);
        },
        toDouble(x));
    std::vector<float> dx(x.size());
    loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, rotDim, 10000.0f,
                         pos.data(), dy.data(), dx.data());
    expectClose(dx, gx, 2e-5, 2e-5, "dx");
  }
}

TEST(RopeTest, NullPositionsMeanArangeAndInPlaceWorks) {
  std::vector<int32_t> pos(kB * kS);
  for (int64_t i = 0; i < kB * kS; ++i)
    pos[i] = int32_t(i % kS);
  std::vector<float> x = randomVec(kB * kS * kN * kD, 3);
  std::vector<float> withPos(x.size()), inPlace = x;
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, pos.data(),
                      x.data(), withPos.data());
  loomrt_rope_forward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, nullptr,
                      inPlace.data(), inPlace.data());
  EXPECT_EQ(inPlace, withPos);
  // Backward undoes forward: the rotation is orthogonal.
  loomrt_rope_backward(LOOMRT_F32, kB, kS, kN, kD, kD, 500000.0f, nullptr,
                       inPlace.data(), inPlace.data());
  expectClose(inPlace, x, 1e-6, 1e-5, "x");
}

TEST(RopeTest, Bf16) {
  std::vector<int32_t> pos = {0, 1, 2, 3, 4, 0, 1, 2, 3, 4};
  std::vector<float> x = rounded(randomVec(kB * kS * kN * kD, 4), LOOMRT_BF16);
  Buf y(LOOMRT_BF16, x.size());
  loomrt_rope_forward(LOOMRT_BF16, kB, kS, kN, kD, kD, 10000.0f, pos.data(),
                      Buf(LOOMRT_BF16, x).data(), y.data());
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
