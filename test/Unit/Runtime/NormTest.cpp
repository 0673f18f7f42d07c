//===- NormTest.cpp - LayerNorm and RMSNorm -------------------------------===//

#include "test/Unit/Runtime/TestUtil.h"

using namespace loomrt_test;

namespace {
constexpr int64_t kRows = 5, kH = 16;
constexpr float kEps = 1e-5f;

std::vector<double> refLayerNorm(const std::vector<double> &x,
                                 const std::vector<double> &w,
                                 const std::vector<double> *b) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < kH; ++i)
      mean += x[r * kH + i] / kH;
    for (int64_t i = 0; i < kH; ++i)
      var += (x[r * kH + i] - mean) * (x[r * kH + i] - mean) / kH;
    for (int64_t i = 0; i < kH; ++i)
      y[r * kH + i] = (x[r * kH + i] - mean) / std::sqrt(var + kEps) * w[i] +
                      (b ? (*b)[i] : 0.0);
  }
  return y;
}

std::vector<double> refRmsNorm(const std::vector<double> &x,
                               const std::vector<double> &w) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < kRows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < kH; ++i)
      ms += x[r * kH + i] * x[r * kH + i] / kH;
    for (int64_t i = 0; i < kH; ++i)
      y[r * kH + i] = x[r * kH + i] / std::sqrt(ms + kEps) * w[i];
  }
  return y;
}
} // namespace

TEST(LayerNormTest, ForwardAndBackward) {
  // An offset mean checks the two-pass variance.
  std::vector<float> x = randomVec(kRows * kH, 1, 2.0f, 4.0f);
  std::vector<float> w = randomVec(kH, 2, 0.5f, 1.5f), b = randomVec(kH, 3);
  std::vector<float> dy = randomVec(kRows * kH, 4);
  auto X = toDouble(x), Wd = toDouble(w), Bd = toDouble(b);
  for (bool withBias : {true, false}) {
    SCOPED_TRACE(withBias ? "bias" : "no bias");
    std::vector<float> y(x.size());
    loomrt_layer_norm_forward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                              withBias ? b.data() : nullptr, kEps, y.data());
    expectClose(y, refLayerNorm(X, Wd, withBias ? &Bd : nullptr), 1e-5, 1e-5,
                "y");

    auto gx = numericGrad(
        [&](const auto &v) {
          return dot(refLayerNorm(v, Wd, withBias ? &Bd : nullptr), dy);
        },
        X);
    auto gw = numericGrad(
        [&](const auto &v) {
          return dot(refLayerNorm(X, v, withBias ? &Bd : nullptr), dy);
        },
        Wd);
    auto gb = numericGrad(
        [&](const auto &v) { return dot(refLayerNorm(X, Wd, &v), dy); }, Bd);
    std::vector<float> dx(x.size()), dw(size_t(kH), 9.0f), db(size_t(kH), 9.0f);
    loomrt_layer_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                               dy.data(), kEps, nullptr, dx.data(), LOOMRT_F32,
                               dw.data(), withBias ? db.data() : nullptr, 0);
    expectClose(dx, gx, 1e-4, 1e-4, "dx");
    expectClose(dw, gw, 1e-4, 1e-4, "dw");
    if (withBias)
      expectClose(db, gb, 1e-4, 1e-4, "db");
  }
}

TEST(LayerNormTest, AccumulatesParameterGradients) {
  std::vector<float> x = randomVec(kRows * kH, 5), w = randomVec(kH, 6);
  std::vector<float> dy = randomVec(kRows * kH, 7);
  std::vector<float> dx(x.size()), dw1(static_cast<size_t>(kH)),
      db1(static_cast<size_t>(kH));
  loomrt_layer_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                             dy.data(), kEps, nullptr, dx.data(), LOOMRT_F32, dw1.data(),
                             db1.data(), 0);
  std::vector<float> dw2 = dw1, db2 = db1;
  loomrt_layer_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                             dy.data(), kEps, nullptr, dx.data(), LOOMRT_F32, dw2.data(),
                             db2.data(), 1);
  std::vector<double> twice(static_cast<size_t>(kH));
  for (int64_t i = 0; i < kH; ++i)
    twice[i] = 2.0 * dw1[i];
  expectClose(dw2, twice, 1e-6, 1e-6, "dw");
  for (int64_t i = 0; i < kH; ++i)
    twice[i] = 2.0 * db1[i];
  expectClose(db2, twice, 1e-6, 1e-6, "db");
}

TEST(LayerNormTest, Bf16MatchesF32WithinRounding) {
  const loomrt_dtype dt = LOOMRT_BF16;
  std::vector<float> x = rounded(randomVec(kRows * kH, 8), dt);
  std::vector<float> w = rounded(randomVec(kH, 9, 0.5f, 1.5f), dt);
  Buf y(dt, x.size());
  loomrt_layer_norm_forward(dt, kRows, kH, Buf(dt, x).data(), Buf(dt, w).data(),
                            nullptr, kEps, y.data());
  expectClose(y.values(), refLayerNorm(toDouble(x), toDouble(w), nullptr), 1e-3,
              1.0 / 128, "y");
}

TEST(RmsNormTest, ForwardAndBackward) {
  std::vector<float> x = randomVec(kRows * kH, 10), w = randomVec(kH, 11);
  std::vector<float> dy = randomVec(kRows * kH, 12);
  auto X = toDouble(x), Wd = toDouble(w);
  std::vector<float> y(x.size());
  loomrt_rms_norm_forward(LOOMRT_F32, kRows, kH, x.data(), w.data(), kEps,
                          y.data());
  expectClose(y, refRmsNorm(X, Wd), 1e-5, 1e-5, "y");

  auto gx =
      numericGrad([&](const auto &v) { return dot(refRmsNorm(v, Wd), dy); }, X);
  auto gw =
      numericGrad([&](const auto &v) { return dot(refRmsNorm(X, v), dy); }, Wd);
  std::vector<float> dx(x.size()), dw(static_cast<size_t>(kH));
  loomrt_rms_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(), dy.data(),
                           kEps, nullptr, dx.data(), LOOMRT_F32, dw.data(), 0);
  expectClose(dx, gx, 1e-4, 1e-4, "dx");
  expectClose(dw, gw, 1e-4, 1e-4, "dw");
  loomrt_rms_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(), dy.data(),
                           kEps, nullptr, dx.data(), LOOMRT_F32, dw.data(), 1);
  for (double &g : gw)
    g *= 2;
  expectClose(dw, gw, 1e-4, 1e-4, "dw accumulated");
}

TEST(RmsNormTest, ManyRowsTakeTheParallelPath) {
  // Enough work for several threads: the per-thread dw partials must add up.
  const int64_t rows = 4096, H = 64;
  std::vector<float> x = randomVec(size_t(rows * H), 13);
  std::vector<float> w(size_t(H), 1.0f), dy(size_t(rows * H), 1.0f);
  std::vector<float> dx(x.size()), dw(static_cast<size_t>(H));
  loomrt_rms_norm_backward(LOOMRT_F32, rows, H, x.data(), w.data(), dy.data(),
                           kEps, nullptr, dx.data(), LOOMRT_F32, dw.data(), 0);
  std::vector<double> want(size_t(H), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t i = 0; i < H; ++i)
      ms += double(x[r * H + i]) * x[r * H + i] / H;
    for (int64_t i = 0; i < H; ++i)
      want[i] += x[r * H + i] / std::sqrt(ms + kEps);
  }
  expectClose(dw, want, 1e-3, 1e-4, "dw");
}

// dx_add: the input gradient plus another value (the residual stream's
// gradient), the same f32 sum as adding after, also when dx_add is dx.
TEST(NormTest, InputGradientAddsDxAdd) {
  std::vector<float> x = randomVec(kRows * kH, 14), w = randomVec(kH, 15);
  std::vector<float> b = randomVec(kH, 16), dy = randomVec(kRows * kH, 17);
  std::vector<float> add = randomVec(kRows * kH, 18);
  std::vector<float> dw(static_cast<size_t>(kH)), db(static_cast<size_t>(kH));
  for (bool rms : {false, true}) {
    auto backward = [&](const float *dxAdd, float *dx) {
      if (rms)
        loomrt_rms_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                                 dy.data(), kEps, dxAdd, dx, LOOMRT_F32,
                                 dw.data(), 0);
      else
        loomrt_layer_norm_backward(LOOMRT_F32, kRows, kH, x.data(), w.data(),
                                   dy.data(), kEps, dxAdd, dx, LOOMRT_F32,
                                   dw.data(), db.data(), 0);
    };
    std::vector<float> plain(x.size()), summed(x.size()), inPlace = add;
    backward(nullptr, plain.data());
    backward(add.data(), summed.data());
    backward(inPlace.data(), inPlace.data());
    for (size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(summed[i], add[i] + plain[i]) << (rms ? "rms " : "") << i;
      EXPECT_EQ(inPlace[i], summed[i]) << (rms ? "rms " : "") << i;
    }
  }
}

// A residual add and the norm of its sum in one call: the values loomrt_add
// and the norm compute, in f32 and in bf16 (the sum rounded, then
// normalized as stored).
TEST(NormTest, AddNormForwardIsTheAddThenTheNorm) {
  std::vector<float> x = randomVec(kRows * kH, 19), r = randomVec(kRows * kH, 20);
  std::vector<float> w = randomVec(kH, 21), b = randomVec(kH, 22);
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16}) {
    Buf xd(dt, x), rd(dt, r), wd(dt, w), bd(dt, b);
    for (bool rms : {false, true}) {
      Buf sum(dt, x.size()), y(dt, x.size());
      Buf sum2(dt, x.size()), y2(dt, x.size());
      loomrt_add(dt, kRows * kH, rd.data(), xd.data(), sum.data());
      if (rms) {
        loomrt_rms_norm_forward(dt, kRows, kH, sum.data(), wd.data(), kEps, y.data());
        loomrt_add_rms_norm_forward(dt, kRows, kH, xd.data(), rd.data(), wd.data(),
                                    kEps, sum2.data(), y2.data());
      } else {
        loomrt_layer_norm_forward(dt, kRows, kH, sum.data(), wd.data(), bd.data(),
                                  kEps, y.data());
        loomrt_add_layer_norm_forward(dt, kRows, kH, xd.data(), rd.data(),
                                      wd.data(), bd.data(), kEps, sum2.data(),
                                      y2.data());
      }
      EXPECT_EQ(sum.values(), sum2.values()) << (rms ? "rms" : "layer") << " sum";
      EXPECT_EQ(y.values(), y2.values()) << (rms ? "rms" : "layer") << " y";
    }
  }
}
