//===- GemmTest.cpp - loomrt_gemm and linear layers -----------------------===//

#include "test/Unit/Runtime/TestUtil.h"

#include <limits>

using namespace loomrt_test;

namespace {
/// Naive batched row-major reference, reading stored matrices like BLAS.
std::vector<double>
refGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha,
        const std::vector<float> &A, int64_t lda, int64_t sa,
        const std::vector<float> &B, int64_t ldb, int64_t sb, double beta,
        const std::vector<float> &C, int64_t ldc, int64_t sc, int64_t batch) {
  std::vector<double> out(C.begin(), C.end());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          double a = ta ? A[b * sa + k * lda + i] : A[b * sa + i * lda + k];
          double bv = tb ? B[b * sb + j * ldb + k] : B[b * sb + k * ldb + j];
          acc += a * bv;
        }
        double &c = out[b * sc + i * ldc + j];
        c = alpha * acc + (beta == 0 ? 0.0 : beta * c);
      }
  return out;
}
} // namespace

TEST(GemmTest, StridedTransposedBatchedF32) {
  const int64_t M = 7, N = 5, K = 9, batch = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      // Padded leading dimensions and batch strides larger than a matrix.
      const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 1, ldc = N + 2;
      const int64_t sa = (ta ? K : M) * lda + 5, sb = (tb ? N : K) * ldb;
      const int64_t sc = M * ldc + 1;
      std::vector<float> A = randomVec(size_t(sa * batch), 1);
      std::vector<float> B = randomVec(size_t(sb * batch), 2);
      std::vector<float> C = randomVec(size_t(sc * batch), 3);
      std::vector<double> want = refGemm(ta, tb, M, N, K, 0.5, A, lda, sa, B,
                                         ldb, sb, 2.0, C, ldc, sc, batch);
      loomrt_gemm(ta, tb, M, N, K, 0.5f, LOOMRT_F32, A.data(), lda, sa,
                  LOOMRT_F32, B.data(), ldb, sb, 2.0f, LOOMRT_F32, C.data(),
                  ldc, sc, batch);
      expectClose(C, want, 1e-5, 1e-5, "C");
    }
}

TEST(GemmTest, BroadcastOperandAndBetaZeroIgnoresNaN) {
  const int64_t M = 4, N = 6, K = 3, batch = 2;
  std::vector<float> A = randomVec(size_t(M * K * batch), 4);
  std::vector<float> B = randomVec(size_t(K * N), 5); // shared: stride 0
  std::vector<float> C(size_t(M * N * batch),
                       std::numeric_limits<float>::quiet_NaN());
  std::vector<double> want = refGemm(false, false, M, N, K, 1.0, A, K, M * K, B,
                                     N, 0, 0.0, C, N, M * N, batch);
  loomrt_gemm(0, 0, M, N, K, 1.0f, LOOMRT_F32, A.data(), K, M * K, LOOMRT_F32,
              B.data(), N, 0, 0.0f, LOOMRT_F32, C.data(), N, M * N, batch);
  expectClose(C, want, 1e-6, 1e-6, "C");
}

TEST(GemmTest, MixedDtypesAccumulateInF32) {
  const int64_t M = 16, N = 12, K = 64;
  for (loomrt_dtype dt : {LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    // References see the same rounded inputs the kernel sees.
    std::vector<float> A = rounded(randomVec(size_t(K * M), 6), dt);
    std::vector<float> B = rounded(randomVec(size_t(N * K), 7), dt);
    std::vector<float> C = rounded(randomVec(size_t(M * N), 8), dt);
    std::vector<double> want =
        refGemm(true, true, M, N, K, 1.0, A, M, 0, B, K, 0, 1.0, C, N, 0, 1);
    Buf a(dt, A), b(dt, B), c(dt, C);
    loomrt_gemm(1, 1, M, N, K, 1.0f, dt, a.data(), M, 0, dt, b.data(), K, 0,
                1.0f, dt, c.data(), N, 0, 1);
    // One final rounding: half an ulp of the output dtype.
    const double ulp = dt == LOOMRT_BF16 ? 1.0 / 128 : 1.0 / 1024;
    expectClose(c.values(), want, 1e-6, ulp, "C");
    // bf16 operands into an f32 result.
    std::vector<float> cf = C;
    loomrt_gemm(1, 1, M, N, K, 1.0f, dt, a.data(), M, 0, dt, b.data(), K, 0,
                1.0f, LOOMRT_F32, cf.data(), N, 0, 1);
    expectClose(cf, want, 1e-5, 1e-5, "C f32");
  }
}

namespace {
struct LinearCase {
  int64_t M = 6, N = 5, K = 7;
  std::vector<float> x = randomVec(size_t(M * K), 10),
                     W = randomVec(size_t(N * K), 11),
                     b = randomVec(size_t(N), 12),
                     dy = randomVec(size_t(M * N), 13);
};
} // namespace

TEST(LinearTest, ForwardMatchesDefinition) {
  LinearCase t;
  for (bool withBias : {true, false}) {
    std::vector<double> want(size_t(t.M * t.N));
    for (int64_t i = 0; i < t.M; ++i)
      for (int64_t o = 0; o < t.N; ++o) {
        double acc = withBias ? t.b[o] : 0.0;
        for (int64_t k = 0; k < t.K; ++k)
          acc += double(t.x[i * t.K + k]) * t.W[o * t.K + k];
        want[i * t.N + o] = acc;
      }
    std::vector<float> y(size_t(t.M * t.N), -7.0f);
    loomrt_linear_forward(LOOMRT_F32, t.M, t.N, t.K, t.x.data(), t.W.data(),
                          withBias ? t.b.data() : nullptr, y.data());
    expectClose(y, want, 1e-5, 1e-5, withBias ? "y+b" : "y");
  }
}

TEST(LinearTest, BackwardMatchesFiniteDifferences) {
  LinearCase t;
  // L = <x W^T + b, dy>, so dL/dx, dL/dW, dL/db are the three gradients.
  auto loss = [&](const std::vector<double> &x, const std::vector<double> &W,
                  const std::vector<double> &b) {
    double L = 0;
    for (int64_t i = 0; i < t.M; ++i)
      for (int64_t o = 0; o < t.N; ++o) {
        double acc = b[o];
        for (int64_t k = 0; k < t.K; ++k)
          acc += x[i * t.K + k] * W[o * t.K + k];
        L += acc * t.dy[i * t.N + o];
      }
    return L;
  };
  auto X = toDouble(t.x), W = toDouble(t.W), B = toDouble(t.b);
  auto gx = numericGrad([&](const auto &v) { return loss(v, W, B); }, X);
  auto gW = numericGrad([&](const auto &v) { return loss(X, v, B); }, W);
  auto gb = numericGrad([&](const auto &v) { return loss(X, W, v); }, B);

  std::vector<float> dx(t.x.size()), dW(t.W.size()), db(t.b.size());
  loomrt_linear_backward_data(LOOMRT_F32, t.M, t.N, t.K, t.dy.data(),
                              t.W.data(), dx.data(), 0);
  loomrt_linear_backward_weight(LOOMRT_F32, t.M, t.N, t.K, t.dy.data(),
                                t.x.data(), LOOMRT_F32, dW.data(), db.data(),
                                0);
  expectClose(dx, gx, 1e-5, 1e-5, "dx");
  expectClose(dW, gW, 1e-5, 1e-5, "dW");
  expectClose(db, gb, 1e-5, 1e-5, "db");

  // accumulate = 1 adds a second micro-batch's gradients (beta = 1).
  loomrt_linear_backward_data(LOOMRT_F32, t.M, t.N, t.K, t.dy.data(),
                              t.W.data(), dx.data(), 1);
  loomrt_linear_backward_weight(LOOMRT_F32, t.M, t.N, t.K, t.dy.data(),
                                t.x.data(), LOOMRT_F32, dW.data(), db.data(),
                                1);
  for (auto *g : {&gx, &gW, &gb})
    for (double &v : *g)
      v *= 2;
  expectClose(dx, gx, 1e-5, 1e-5, "dx accumulated");
  expectClose(dW, gW, 1e-5, 1e-5, "dW accumulated");
  expectClose(db, gb, 1e-5, 1e-5, "db accumulated");
}

TEST(LinearTest, Bf16ActivationsIntoF32MainGrad) {
  LinearCase t;
  const loomrt_dtype dt = LOOMRT_BF16;
  std::vector<float> x = rounded(t.x, dt), dy = rounded(t.dy, dt);
  // dW and db start at 1 and accumulate on top of that.
  std::vector<double> want(size_t(t.N * t.K), 1.0), wantDb(size_t(t.N), 1.0);
  for (int64_t o = 0; o < t.N; ++o)
    for (int64_t i = 0; i < t.M; ++i) {
      wantDb[o] += dy[i * t.N + o];
      for (int64_t k = 0; k < t.K; ++k)
        want[o * t.K + k] += double(dy[i * t.N + o]) * x[i * t.K + k];
    }
  std::vector<float> dW(size_t(t.N * t.K), 1.0f), db(size_t(t.N), 1.0f);
  loomrt_linear_backward_weight(dt, t.M, t.N, t.K, Buf(dt, dy).data(),
                                Buf(dt, x).data(), LOOMRT_F32, dW.data(),
                                db.data(), 1);
  expectClose(dW, want, 1e-6, 1e-6, "dW");
  expectClose(db, wantDb, 1e-6, 1e-6, "db");
}

/// The fused linears' entry points (runtime/common/FusedLinears.cpp) give
/// exactly what the separate calls give, in every dtype: q, k and v of
/// different widths with biases, their gradients summed in the given
/// order onto an accumulated value; a linear with a GELU and the GELU's
/// gradient on the next linear's input gradient; gate and up with their
/// SwiGLU, and its gradient on down's input gradient.
TEST(FusedLinearTest, EqualSeparateCalls) {
  const int64_t M = 12, K = 16;
  const int64_t widths[3] = {16, 8, 8};
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    Buf x(dt, randomVec(size_t(M * K), 1)), acc(dt, randomVec(size_t(M * K), 2));
    std::vector<Buf> w, b, dy;
    for (int i = 0; i < 3; ++i) {
      w.emplace_back(dt, randomVec(size_t(widths[i] * K), 10 + i));
      b.emplace_back(dt, randomVec(size_t(widths[i]), 20 + i));
      dy.emplace_back(dt, randomVec(size_t(M * widths[i]), 30 + i));
    }
    const void *wp[3] = {w[0].data(), w[1].data(), w[2].data()};
    const void *bp[3] = {b[0].data(), b[1].data(), b[2].data()};
    const void *dyp[3] = {dy[0].data(), dy[1].data(), dy[2].data()};

    std::vector<Buf> y, yRef, dW, dWRef, db, dbRef;
    for (int i = 0; i < 3; ++i) {
      y.emplace_back(dt, size_t(M * widths[i]));
      yRef.emplace_back(dt, size_t(M * widths[i]));
      dW.emplace_back(LOOMRT_F32, size_t(widths[i] * K));
      dWRef.emplace_back(LOOMRT_F32, size_t(widths[i] * K));
      db.emplace_back(LOOMRT_F32, size_t(widths[i]));
      dbRef.emplace_back(LOOMRT_F32, size_t(widths[i]));
      loomrt_linear_forward(dt, M, widths[i], K, x.data(), wp[i], bp[i],
                            yRef[i].data());
      loomrt_linear_backward_weight(dt, M, widths[i], K, dyp[i], x.data(),
                                    LOOMRT_F32, dWRef[i].data(),
                                    dbRef[i].data(), 0);
    }
    void *yp[3] = {y[0].data(), y[1].data(), y[2].data()};
    loomrt_multi_linear_forward(dt, 3, M, K, widths, x.data(), wp, bp, yp);
    void *dWp[3] = {dW[0].data(), dW[1].data(), dW[2].data()};
    void *dbp[3] = {db[0].data(), db[1].data(), db[2].data()};
    loomrt_multi_linear_backward_weight(dt, 3, M, K, widths, dyp, x.data(),
                                        LOOMRT_F32, dWp, dbp, 0);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(y[i].values(), yRef[i].values()) << "y " << i;
      EXPECT_EQ(dW[i].values(), dWRef[i].values()) << "dW " << i;
      EXPECT_EQ(db[i].values(), dbRef[i].values()) << "db " << i;
    }

    // dx = acc + dy0 W0 + dy1 W1 + dy2 W2, added in that order.
    Buf dx(dt, acc.values()), dxRef(dt, acc.values());
    for (int i = 0; i < 3; ++i)
      loomrt_linear_backward_data(dt, M, widths[i], K, dyp[i], wp[i],
                                  dxRef.data(), 1);
    loomrt_multi_linear_backward_data(dt, 3, M, K, widths, dyp, wp, dx.data(),
                                      1);
    EXPECT_EQ(dx.values(), dxRef.values());
    Buf fresh(dt, size_t(M * K)), freshRef(dt, size_t(M * K));
    loomrt_multi_linear_backward_data(dt, 2, M, K, widths, dyp, wp,
                                      fresh.data(), 0);
    loomrt_linear_backward_data(dt, M, widths[0], K, dyp[0], wp[0],
                                freshRef.data(), 0);
    loomrt_linear_backward_data(dt, M, widths[1], K, dyp[1], wp[1],
                                freshRef.data(), 1);
    EXPECT_EQ(fresh.values(), freshRef.values());

    // fc1 [M,K] -> [M,16] with a GELU; fc2's input gradient through it.
    const int64_t F = widths[0];
    for (int32_t approx : {LOOMRT_GELU_ERF, LOOMRT_GELU_TANH}) {
      Buf pre(dt, size_t(M * F)), act(dt, size_t(M * F)),
          preRef(dt, size_t(M * F)), actRef(dt, size_t(M * F));
      loomrt_linear_gelu_forward(dt, approx, M, F, K, x.data(), wp[0], bp[0],
                                 pre.data(), act.data());
      loomrt_linear_forward(dt, M, F, K, x.data(), wp[0], bp[0],
                            preRef.data());
      loomrt_gelu_forward(dt, approx, M * F, preRef.data(), actRef.data());
      EXPECT_EQ(pre.values(), preRef.values());
      EXPECT_EQ(act.values(), actRef.values());
      // fc2: W [K, F], dy [M, K].
      Buf w2(dt, randomVec(size_t(K * F), 40)), dh(dt, size_t(M * F)),
          da(dt, size_t(M * F)), dhRef(dt, size_t(M * F));
      loomrt_linear_backward_data_gelu(dt, approx, M, K, F, acc.data(),
                                       w2.data(), pre.data(), dh.data());
      loomrt_linear_backward_data(dt, M, K, F, acc.data(), w2.data(),
                                  da.data(), 0);
      loomrt_gelu_backward(dt, approx, M * F, preRef.data(), da.data(),
                           dhRef.data());
      EXPECT_EQ(dh.values(), dhRef.values()) << "approximate " << approx;
    }

    // gate and up [M,K] -> [M,16] (with biases and without) and their
    // SwiGLU; down [16 -> K]'s input gradient through it.
    for (int biased = 0; biased < 2; ++biased) {
      const void *bg = biased ? bp[0] : nullptr, *bu = biased ? bp[0] : nullptr;
      Buf gate(dt, size_t(M * F)), up(dt, size_t(M * F)), out(dt, size_t(M * F)),
          gateRef(dt, size_t(M * F)), upRef(dt, size_t(M * F)),
          outRef(dt, size_t(M * F));
      Buf wu(dt, randomVec(size_t(F * K), 50));
      loomrt_linear_swiglu_forward(dt, M, F, K, x.data(), wp[0], wu.data(), bg,
                                   bu, gate.data(), up.data(), out.data());
      loomrt_linear_forward(dt, M, F, K, x.data(), wp[0], bg, gateRef.data());
      loomrt_linear_forward(dt, M, F, K, x.data(), wu.data(), bu, upRef.data());
      loomrt_swiglu_forward(dt, M, F, F, gateRef.data(), upRef.data(),
                            outRef.data());
      EXPECT_EQ(gate.values(), gateRef.values()) << "biased " << biased;
      EXPECT_EQ(up.values(), upRef.values()) << "biased " << biased;
      EXPECT_EQ(out.values(), outRef.values()) << "biased " << biased;
      Buf wd(dt, randomVec(size_t(K * F), 51)), dg(dt, size_t(M * F)),
          du(dt, size_t(M * F)), dout(dt, size_t(M * F)),
          dgRef(dt, size_t(M * F)), duRef(dt, size_t(M * F));
      loomrt_linear_backward_data_swiglu(dt, M, K, F, acc.data(), wd.data(),
                                         gate.data(), up.data(), dg.data(),
                                         du.data());
      loomrt_linear_backward_data(dt, M, K, F, acc.data(), wd.data(),
                                  dout.data(), 0);
      loomrt_swiglu_backward(dt, M, F, F, gate.data(), up.data(), dout.data(),
                             dgRef.data(), duRef.data());
      EXPECT_EQ(dg.values(), dgRef.values());
      EXPECT_EQ(du.values(), duRef.values());
    }
  }
}

TEST(FusedLinearDeathTest, MisuseAbortsWithTheFunctionName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> x(8, 0.0f), w(8, 0.0f), y(8, 0.0f);
  const int64_t n[1] = {2};
  const void *ws[1] = {w.data()};
  void *ys[1] = {y.data()};
  EXPECT_DEATH(loomrt_multi_linear_forward(LOOMRT_F32, 0, 2, 4, n, x.data(),
                                           ws, nullptr, ys),
               "loomrt_multi_linear_forward: count is 0");
  EXPECT_DEATH(loomrt_multi_linear_backward_data(LOOMRT_F32, 1, 2, 4, n,
                                                 nullptr, ws, x.data(), 0),
               "loomrt_multi_linear_backward_data: NULL host array");
  const int64_t bad[1] = {-1};
  EXPECT_DEATH(loomrt_multi_linear_forward(LOOMRT_F32, 1, 2, 4, bad, x.data(),
                                           ws, nullptr, ys),
               "loomrt_multi_linear_forward: N\\[0\\] is -1");
  EXPECT_DEATH(loomrt_linear_gelu_forward(LOOMRT_F32, 5, 2, 2, 4, x.data(),
                                          w.data(), nullptr, y.data(),
                                          y.data()),
               "loomrt_linear_gelu_forward: unknown gelu approximation 5");
}
