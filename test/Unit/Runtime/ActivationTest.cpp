//===- ActivationTest.cpp - GELU, SiLU, SwiGLU, dropout -------------------===//

#include "test/Unit/Runtime/TestUtil.h"

#include <algorithm>

using namespace loomrt_test;

namespace {
double refGelu(double x, bool tanhApprox) {
  if (tanhApprox)
    return 0.5 * x *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
double refSilu(double x) { return x / (1 + std::exp(-x)); }

std::vector<double> mapRef(const std::vector<double> &x, double (*f)(double)) {
  std::vector<double> y(x.size());
  std::transform(x.begin(), x.end(), y.begin(), f);
  return y;
}
} // namespace

TEST(ActivationTest, GeluBothApproximations) {
  std::vector<float> x = randomVec(257, 1, -6.0f, 6.0f);
  std::vector<float> dy = randomVec(x.size(), 2);
  for (int32_t approx : {LOOMRT_GELU_ERF, LOOMRT_GELU_TANH}) {
    SCOPED_TRACE(approx == LOOMRT_GELU_ERF ? "erf" : "tanh");
    auto f = [approx](const std::vector<double> &v) {
      std::vector<double> y(v.size());
      for (size_t i = 0; i < v.size(); ++i)
        y[i] = refGelu(v[i], approx == LOOMRT_GELU_TANH);
      return y;
    };
    std::vector<float> y(x.size()), dx(x.size());
    loomrt_gelu_forward(LOOMRT_F32, approx, int64_t(x.size()), x.data(),
                        y.data());
    expectClose(y, f(toDouble(x)), 1e-6, 1e-5, "y");
    loomrt_gelu_backward(LOOMRT_F32, approx, int64_t(x.size()), x.data(),
                         dy.data(), dx.data());
    expectClose(
        dx,
        numericGrad([&](const auto &v) { return dot(f(v), dy); }, toDouble(x)),
        1e-5, 1e-4, "dx");
  }
  // tanh and erf forms differ (by up to ~1e-3): the flag is honoured.
  std::vector<float> a(1), b(1);
  float one = 1.0f;
  loomrt_gelu_forward(LOOMRT_F32, LOOMRT_GELU_ERF, 1, &one, a.data());
  loomrt_gelu_forward(LOOMRT_F32, LOOMRT_GELU_TANH, 1, &one, b.data());
  EXPECT_NE(a[0], b[0]);
}

TEST(ActivationTest, SiluForwardBackwardAndInPlaceBf16) {
  std::vector<float> x = randomVec(100, 3, -8.0f, 8.0f);
  std::vector<float> dy = randomVec(x.size(), 4);
  std::vector<float> y(x.size()), dx(x.size());
  loomrt_silu_forward(LOOMRT_F32, int64_t(x.size()), x.data(), y.data());
  expectClose(y, mapRef(toDouble(x), refSilu), 1e-6, 1e-5, "y");
  loomrt_silu_backward(LOOMRT_F32, int64_t(x.size()), x.data(), dy.data(),
                       dx.data());
  expectClose(
      dx,
      numericGrad([&](const auto &v) { return dot(mapRef(v, refSilu), dy); },
                  toDouble(x)),
      1e-5, 1e-4, "dx");
  // dx may alias dy.
  Buf xb(LOOMRT_BF16, x), g(LOOMRT_BF16, dy);
  loomrt_silu_backward(LOOMRT_BF16, int64_t(x.size()), xb.data(), g.data(),
                       g.data());
  expectClose(g.values(), dx, 2e-2, 1.0 / 64, "dx bf16 in place");
}

TEST(ActivationTest, SwigluSeparateAndFusedLayouts) {
  const int64_t rows = 3, F = 5;
  std::vector<float> fused = randomVec(size_t(rows * 2 * F), 5, -3.0f, 3.0f);
  std::vector<float> dout = randomVec(size_t(rows * F), 6);
  // Separate gate/up tensors extracted from the fused [rows, 2F] layout.
  std::vector<float> gate, up;
  for (int64_t r = 0; r < rows; ++r) {
    gate.insert(gate.end(), fused.begin() + r * 2 * F,
                fused.begin() + r * 2 * F + F);
    up.insert(up.end(), fused.begin() + r * 2 * F + F,
              fused.begin() + (r + 1) * 2 * F);
  }
  auto f = [&](const std::vector<double> &g, const std::vector<double> &u) {
    std::vector<double> y(g.size());
    for (size_t i = 0; i < g.size(); ++i)
      y[i] = refSilu(g[i]) * u[i];
    return y;
  };
  auto G = toDouble(gate), U = toDouble(up);
  std::vector<float> out(size_t(rows * F)), outFused(size_t(rows * F));
  loomrt_swiglu_forward(LOOMRT_F32, rows, F, F, gate.data(), up.data(),
                        out.data());
  expectClose(out, f(G, U), 1e-6, 1e-5, "out");
  loomrt_swiglu_forward(LOOMRT_F32, rows, F, 2 * F, fused.data(),
                        fused.data() + F, outFused.data());
  EXPECT_EQ(out, outFused);

  auto dG = numericGrad([&](const auto &v) { return dot(f(v, U), dout); }, G);
  auto dU = numericGrad([&](const auto &v) { return dot(f(G, v), dout); }, U);
  std::vector<float> dgate(gate.size()), dup(up.size());
  loomrt_swiglu_backward(LOOMRT_F32, rows, F, F, gate.data(), up.data(),
                         dout.data(), dgate.data(), dup.data());
  expectClose(dgate, dG, 1e-5, 1e-4, "dgate");
  expectClose(dup, dU, 1e-5, 1e-4, "dup");
  // Fused: gradients land interleaved in one [rows, 2F] buffer.
  std::vector<float> dfused(fused.size(), 0.0f);
  loomrt_swiglu_backward(LOOMRT_F32, rows, F, 2 * F, fused.data(),
                         fused.data() + F, dout.data(), dfused.data(),
                         dfused.data() + F);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < F; ++i) {
      EXPECT_EQ(dfused[r * 2 * F + i], dgate[r * F + i]);
      EXPECT_EQ(dfused[r * 2 * F + F + i], dup[r * F + i]);
    }
}

TEST(DropoutTest, MaskIsDeterministicScaledAndHasRateP) {
  const int64_t n = 100000;
  const float p = 0.25f;
  std::vector<float> ones(size_t(n), 1.0f), y(static_cast<size_t>(n)),
      y2(static_cast<size_t>(n));
  loomrt_dropout_forward(LOOMRT_F32, 1, n, ones.data(), y.data(), p, 42, 0, n);
  loomrt_dropout_forward(LOOMRT_F32, 1, n, ones.data(), y2.data(), p, 42, 0, n);
  EXPECT_EQ(y, y2);
  int64_t dropped = 0;
  for (float v : y) {
    ASSERT_TRUE(v == 0.0f || v == 1.0f / (1.0f - p)) << v;
    dropped += v == 0.0f;
  }
  // Binomial(n, p): 5 standard deviations is ~690.
  EXPECT_NEAR(double(dropped), p * n, 700.0);
  loomrt_dropout_forward(LOOMRT_F32, 1, n, ones.data(), y2.data(), p, 43, 0, n);
  EXPECT_NE(y, y2) << "another seed gives another mask";
  // The backward applies the same mask to the gradient.
  std::vector<float> dy = randomVec(size_t(n), 1), dx(static_cast<size_t>(n));
  loomrt_dropout_backward(LOOMRT_F32, 1, n, dy.data(), dx.data(), p, 42, 0, n);
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(dx[i], dy[i] * y[i]) << i;
}

TEST(DropoutTest, EveryShardingSeesTheSameGlobalMask) {
  const int64_t S = 6, H = 10;
  std::vector<float> x = randomVec(size_t(S * H), 2, 0.5f, 1.5f);
  std::vector<float> full(x.size());
  loomrt_dropout_forward(LOOMRT_F32, S, H, x.data(), full.data(), 0.5f, 7, 0,
                         H);
  // Split along H (tensor parallel): columns [4, 10) of every row.
  const int64_t h0 = 4, hl = H - h0;
  std::vector<float> shard(size_t(S * hl)), out(size_t(S * hl));
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < hl; ++h)
      shard[s * hl + h] = x[s * H + h0 + h];
  loomrt_dropout_forward(LOOMRT_F32, S, hl, shard.data(), out.data(), 0.5f, 7,
                         h0, H);
  for (int64_t s = 0; s < S; ++s)
    for (int64_t h = 0; h < hl; ++h)
      ASSERT_EQ(out[s * hl + h], full[s * H + h0 + h]) << s << "," << h;
  // Split along S (sequence parallel): rows [2, 5) are contiguous.
  std::vector<float> rows(size_t(3 * H));
  loomrt_dropout_forward(LOOMRT_F32, 3, H, x.data() + 2 * H, rows.data(), 0.5f,
                         7, 2 * H, H);
  EXPECT_TRUE(std::equal(rows.begin(), rows.end(), full.begin() + 2 * H));
  // bf16 storage drops the same elements.
  Buf xb(LOOMRT_BF16, x), yb(LOOMRT_BF16, x.size());
  loomrt_dropout_forward(LOOMRT_BF16, S, H, xb.data(), yb.data(), 0.5f, 7, 0,
                         H);
  std::vector<float> yv = yb.values();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(yv[i] == 0.0f, full[i] == 0.0f) << i;
}

TEST(DropoutTest, ProbabilityZeroAndOne) {
  std::vector<float> x = randomVec(1000, 3), y(1000);
  loomrt_dropout_forward(LOOMRT_F32, 1, 1000, x.data(), y.data(), 0.0f, 1, 0,
                         1000);
  EXPECT_EQ(x, y);
  loomrt_dropout_forward(LOOMRT_F32, 1, 1000, x.data(), y.data(), 1.0f, 1, 0,
                         1000);
  EXPECT_TRUE(
      std::all_of(y.begin(), y.end(), [](float v) { return v == 0.0f; }));
}
