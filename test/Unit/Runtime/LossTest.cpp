//===- LossTest.cpp - Embedding, cross-entropy, AdamW ---------------------===//

#include "test/Unit/Runtime/TestUtil.h"
#include <cstring>
#include <limits>
#include <string>

using namespace loomrt_test;

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

TEST(EmbeddingTest, VocabRangeLookupAndScatterAdd) {
  const int64_t H = 3, start = 4, end = 8; // vocab [4, 8) of this rank
  std::vector<float> table = randomVec(size_t((end - start) * H), 1);
  std::vector<int32_t> ids = {4, 0, 7, 4, 9, 5};
  std::vector<float> out(ids.size() * H, -1.0f);
  loomrt_embedding_forward(LOOMRT_F32, int64_t(ids.size()), H, ids.data(),
                           start, end, table.data(), out.data());
  for (size_t i = 0; i < ids.size(); ++i)
    for (int64_t c = 0; c < H; ++c) {
      bool local = ids[i] >= start && ids[i] < end;
      EXPECT_EQ(out[i * H + c], local ? table[(ids[i] - start) * H + c] : 0.0f)
          << "token " << i << " (id " << ids[i] << ")";
    }

  // Backward: id 4 appears twice and sums; out-of-range ids are ignored.
  std::vector<float> dout = randomVec(ids.size() * H, 2);
  std::vector<double> want(table.size(), 0.5);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= start && ids[i] < end)
      for (int64_t c = 0; c < H; ++c)
        want[(ids[i] - start) * H + c] += dout[i * H + c];
  std::vector<float> dtable(table.size(), 0.5f);
  loomrt_embedding_backward(LOOMRT_F32, int64_t(ids.size()), H, ids.data(),
                            start, end, dout.data(), LOOMRT_F32, dtable.data(),
                            1);
  expectClose(dtable, want, 1e-6, 1e-6, "dtable accumulated");
  // bf16 gradients into an f32 table gradient, overwrite mode.
  std::vector<float> doutB = rounded(dout, LOOMRT_BF16);
  want.assign(table.size(), 0.0);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= start && ids[i] < end)
      for (int64_t c = 0; c < H; ++c)
        want[(ids[i] - start) * H + c] += doutB[i * H + c];
  loomrt_embedding_backward(LOOMRT_BF16, int64_t(ids.size()), H, ids.data(),
                            start, end, Buf(LOOMRT_BF16, dout).data(),
                            LOOMRT_F32, dtable.data(), 0);
  expectClose(dtable, want, 1e-6, 1e-6, "dtable from bf16");
}

//===----------------------------------------------------------------------===//
// Cross-entropy
//===----------------------------------------------------------------------===//

namespace {
constexpr int64_t kN = 6, kV = 11;

double refLoss(const std::vector<double> &logits,
               const std::vector<int32_t> &labels,
               const std::vector<float> &mask) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < kN; ++i) {
    double m = -1e300, s = 0;
    for (int64_t j = 0; j < kV; ++j)
      m = std::max(m, logits[i * kV + j]);
    for (int64_t j = 0; j < kV; ++j)
      s += std::exp(logits[i * kV + j] - m);
    num += mask[i] * (m + std::log(s) - logits[i * kV + labels[i]]);
    den += mask[i];
  }
  return num / den;
}

struct CECase {
  std::vector<float> logits = randomVec(size_t(kN * kV), 1, -5.0f, 5.0f);
  std::vector<int32_t> labels = {0, 10, 3, 3, 7, 5};
  std::vector<float> mask = {1, 0, 1, 1, 0.5f, 1};
};
} // namespace

TEST(CrossEntropyTest, ForwardAndBackward) {
  CECase t;
  // Large logits must not overflow: the max is subtracted.
  t.logits[0] += 80.0f;
  float loss = 0;
  std::vector<float> rowLoss(static_cast<size_t>(kN));
  loomrt_cross_entropy_forward(LOOMRT_F32, kN, kV, t.logits.data(),
                               t.labels.data(), t.mask.data(), &loss,
                               rowLoss.data());
  auto X = toDouble(t.logits);
  EXPECT_NEAR(loss, refLoss(X, t.labels, t.mask), 1e-5);
  std::vector<float> ones(size_t(kN), 1.0f);
  float plain = 0;
  loomrt_cross_entropy_forward(LOOMRT_F32, kN, kV, t.logits.data(),
                               t.labels.data(), nullptr, &plain, nullptr);
  EXPECT_NEAR(plain, refLoss(X, t.labels, ones), 1e-5) << "NULL mask = ones";
  double sum = 0;
  for (float r : rowLoss)
    sum += r;
  EXPECT_NEAR(sum / kN, plain, 1e-5);

  const float dloss = 0.7f;
  auto g = numericGrad(
      [&](const auto &v) { return dloss * refLoss(v, t.labels, t.mask); }, X);
  std::vector<float> dlogits(t.logits.size());
  loomrt_cross_entropy_backward(LOOMRT_F32, kN, kV, t.logits.data(),
                                t.labels.data(), t.mask.data(), dloss,
                                dlogits.data());
  expectClose(dlogits, g, 1e-6, 1e-4, "dlogits");
  // In place, as the header allows.
  std::vector<float> inPlace = t.logits;
  loomrt_cross_entropy_backward(LOOMRT_F32, kN, kV, inPlace.data(),
                                t.labels.data(), t.mask.data(), dloss,
                                inPlace.data());
  EXPECT_EQ(inPlace, dlogits);
}

TEST(CrossEntropyTest, AllMaskedGivesZero) {
  CECase t;
  std::vector<float> zeros(size_t(kN), 0.0f), d(t.logits.size(), 1.0f);
  float loss = 1;
  loomrt_cross_entropy_forward(LOOMRT_F32, kN, kV, t.logits.data(),
                               t.labels.data(), zeros.data(), &loss, nullptr);
  EXPECT_EQ(loss, 0.0f);
  loomrt_cross_entropy_backward(LOOMRT_F32, kN, kV, t.logits.data(),
                                t.labels.data(), zeros.data(), 1.0f, d.data());
  for (float v : d)
    EXPECT_EQ(v, 0.0f);
}

TEST(CrossEntropyTest, VocabParallelPiecesReproduceTheFullLoss) {
  // Three "ranks" own vocab [0,4), [4,8), [8,11); the test performs the
  // all-reduces that the compiled program would.
  CECase t;
  const int64_t bounds[] = {0, 4, 8, kV};
  auto shard = [&](int r) {
    std::vector<float> s;
    for (int64_t i = 0; i < kN; ++i)
      s.insert(s.end(), t.logits.begin() + i * kV + bounds[r],
               t.logits.begin() + i * kV + bounds[r + 1]);
    return Buf(LOOMRT_BF16, s);
  };
  // bf16 logits: the reference uses the rounded values.
  std::vector<float> roundedLogits = rounded(t.logits, LOOMRT_BF16);
  std::vector<float> gmax(size_t(kN), -1e30f), gsum(size_t(kN), 0.0f),
      gtarget(size_t(kN), 0.0f);
  for (int r = 0; r < 3; ++r) {
    std::vector<float> m(static_cast<size_t>(kN));
    loomrt_ce_local_max(LOOMRT_BF16, kN, bounds[r + 1] - bounds[r],
                        bounds[r + 1] - bounds[r], shard(r).data(), m.data());
    for (int64_t i = 0; i < kN; ++i)
      gmax[i] = std::max(gmax[i], m[i]);
  }
  for (int r = 0; r < 3; ++r) {
    std::vector<float> s(static_cast<size_t>(kN)), tg(static_cast<size_t>(kN));
    const int64_t Vl = bounds[r + 1] - bounds[r];
    loomrt_ce_local_sum_exp(LOOMRT_BF16, kN, Vl, Vl, shard(r).data(), gmax.data(),
                            s.data());
    loomrt_ce_local_target(LOOMRT_BF16, kN, Vl, shard(r).data(),
                           t.labels.data(), bounds[r], tg.data());
    for (int64_t i = 0; i < kN; ++i) {
      gsum[i] += s[i];
      gtarget[i] += tg[i];
    }
  }
  float maskedSum = 0, maskSum = 0;
  std::vector<float> rowLoss(static_cast<size_t>(kN));
  loomrt_ce_loss_from_parts(kN, gmax.data(), gsum.data(), gtarget.data(),
                            t.mask.data(), rowLoss.data(), &maskedSum,
                            &maskSum);
  EXPECT_NEAR(maskSum, 4.5f, 1e-6);
  EXPECT_NEAR(maskedSum / maskSum,
              refLoss(toDouble(roundedLogits), t.labels, t.mask), 1e-5);

  // Backward shards, concatenated, equal the full backward.
  std::vector<float> full(t.logits.size());
  loomrt_cross_entropy_backward(LOOMRT_F32, kN, kV, roundedLogits.data(),
                                t.labels.data(), t.mask.data(), 2.0f,
                                full.data());
  const float scale = 2.0f / maskSum; // in backend memory: the host's here
  for (int r = 0; r < 3; ++r) {
    const int64_t Vl = bounds[r + 1] - bounds[r];
    Buf d(LOOMRT_BF16, size_t(kN * Vl)); // dlogits share the logits' dtype
    loomrt_ce_vocab_parallel_backward(
        LOOMRT_BF16, kN, Vl, Vl, shard(r).data(), t.labels.data(), bounds[r],
        gmax.data(), gsum.data(), t.mask.data(), &scale, d.data());
    std::vector<float> dv = d.values();
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < Vl; ++j)
        EXPECT_NEAR(dv[i * Vl + j], full[i * kV + bounds[r] + j],
                    1e-6 + std::fabs(full[i * kV + bounds[r] + j]) / 128)
            << "rank " << r << " row " << i << " col " << j;
  }
}

TEST(CrossEntropyTest, PaddingColumnsStayOutOfTheSoftmax) {
  // The vocabulary of 11 padded to 16 and split over two "ranks" of 8
  // columns: rank 1 holds 3 real columns and 5 of padding, filled with
  // logits larger than any real one. The loss and gradient must be the
  // unpadded model's, the padding's gradient exactly 0.
  CECase t;
  constexpr int64_t kPadded = 16, kVl = 8;
  std::vector<float> padded(size_t(kN * kPadded), 40.0f);
  for (int64_t i = 0; i < kN; ++i)
    std::copy(t.logits.begin() + i * kV, t.logits.begin() + (i + 1) * kV,
              padded.begin() + i * kPadded);
  auto shard = [&](int r) {
    std::vector<float> s;
    for (int64_t i = 0; i < kN; ++i)
      s.insert(s.end(), padded.begin() + i * kPadded + r * kVl,
               padded.begin() + i * kPadded + (r + 1) * kVl);
    return s;
  };
  const int64_t valid[] = {kVl, kV - kVl};
  std::vector<float> gmax(size_t(kN), -1e30f), gsum(size_t(kN), 0.0f),
      gtarget(size_t(kN), 0.0f);
  for (int r = 0; r < 2; ++r) {
    std::vector<float> m(static_cast<size_t>(kN));
    loomrt_ce_local_max(LOOMRT_F32, kN, kVl, valid[r], shard(r).data(),
                        m.data());
    for (int64_t i = 0; i < kN; ++i)
      gmax[i] = std::max(gmax[i], m[i]);
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<float> s(static_cast<size_t>(kN)), tg(static_cast<size_t>(kN));
    loomrt_ce_local_sum_exp(LOOMRT_F32, kN, kVl, valid[r], shard(r).data(),
                            gmax.data(), s.data());
    loomrt_ce_local_target(LOOMRT_F32, kN, kVl, shard(r).data(),
                           t.labels.data(), r * kVl, tg.data());
    for (int64_t i = 0; i < kN; ++i) {
      gsum[i] += s[i];
      gtarget[i] += tg[i];
    }
  }
  float maskedSum = 0, maskSum = 0;
  loomrt_ce_loss_from_parts(kN, gmax.data(), gsum.data(), gtarget.data(),
                            t.mask.data(), nullptr, &maskedSum, &maskSum);
  EXPECT_NEAR(maskedSum / maskSum, refLoss(toDouble(t.logits), t.labels, t.mask),
              1e-5);

  std::vector<float> full(t.logits.size());
  loomrt_cross_entropy_backward(LOOMRT_F32, kN, kV, t.logits.data(),
                                t.labels.data(), t.mask.data(), 1.0f,
                                full.data());
  const float scale = 1.0f / maskSum; // in backend memory: the host's here
  for (int r = 0; r < 2; ++r) {
    std::vector<float> d(size_t(kN * kVl), 7.0f);
    loomrt_ce_vocab_parallel_backward(
        LOOMRT_F32, kN, kVl, valid[r], shard(r).data(), t.labels.data(),
        r * kVl, gmax.data(), gsum.data(), t.mask.data(), &scale, d.data());
    for (int64_t i = 0; i < kN; ++i)
      for (int64_t j = 0; j < kVl; ++j) {
        int64_t col = r * kVl + j;
        if (col >= kV)
          EXPECT_EQ(d[i * kVl + j], 0.0f) << "padding row " << i << " col " << col;
        else
          EXPECT_NEAR(d[i * kVl + j], full[i * kV + col], 1e-6)
              << "row " << i << " col " << col;
      }
  }
  // A slice of padding alone: max -inf, sum 0.
  std::vector<float> m(static_cast<size_t>(kN)), s(static_cast<size_t>(kN));
  loomrt_ce_local_max(LOOMRT_F32, kN, kVl, 0, shard(1).data(), m.data());
  loomrt_ce_local_sum_exp(LOOMRT_F32, kN, kVl, 0, shard(1).data(), gmax.data(),
                          s.data());
  for (int64_t i = 0; i < kN; ++i) {
    EXPECT_EQ(m[i], -std::numeric_limits<float>::infinity());
    EXPECT_EQ(s[i], 0.0f);
  }
}

//===----------------------------------------------------------------------===//
// AdamW
//===----------------------------------------------------------------------===//

TEST(AdamWTest, ThreeStepsMatchTorchFormula) {
  const int64_t n = 50;
  std::vector<float> p = randomVec(size_t(n), 1), m(size_t(n), 0.0f),
                     v(size_t(n), 0.0f);
  std::vector<double> P = toDouble(p), M(size_t(n), 0.0), Vv(size_t(n), 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
  for (int64_t step = 1; step <= 3; ++step) {
    std::vector<float> g = randomVec(size_t(n), uint32_t(10 + step));
    loomrt_adamw(n, p.data(), g.data(), m.data(), v.data(), float(lr),
                 float(b1), float(b2), float(eps), float(wd), step, nullptr,
                 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      P[i] -= lr * wd * P[i];
      M[i] = b1 * M[i] + (1 - b1) * g[i];
      Vv[i] = b2 * Vv[i] + (1 - b2) * g[i] * g[i];
      const double mh = M[i] / (1 - std::pow(b1, step));
      const double vh = Vv[i] / (1 - std::pow(b2, step));
      P[i] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
  expectClose(p, P, 1e-6, 1e-5, "param");
  expectClose(m, M, 1e-7, 1e-5, "exp_avg");
  expectClose(v, Vv, 1e-8, 1e-5, "exp_avg_sq");
}

TEST(AdamWTest, SkipsAndClipsFromTheDeviceSumOfSquares) {
  // A non-finite sum of squares leaves everything as it was; a finite one
  // over the clip takes the step on g * clip / (norm + 1e-6), exactly as
  // scaling the gradient first; under the clip, the plain step.
  const int64_t n = 40;
  const std::vector<float> p0 = randomVec(size_t(n), 3),
                           g = randomVec(size_t(n), 4);
  auto step = [&](const float *sumsq, float maxNorm,
                  const std::vector<float> &grad) {
    std::vector<float> p = p0, m(size_t(n), 0.5f), v(size_t(n), 0.25f);
    loomrt_adamw(n, p.data(), grad.data(), m.data(), v.data(), 1e-2f, 0.9f,
                 0.95f, 1e-8f, 0.1f, 2, sumsq, maxNorm);
    return std::vector<std::vector<float>>{p, m, v};
  };
  for (float bad : {std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    auto out = step(&bad, 1.0f, g);
    EXPECT_EQ(out[0], p0);
    EXPECT_EQ(out[1], std::vector<float>(size_t(n), 0.5f));
    EXPECT_EQ(out[2], std::vector<float>(size_t(n), 0.25f));
  }
  const float sumsq = 16.0f; // norm 4
  std::vector<float> scaled = g;
  const float coeff = float(0.5 / (4.0 + 1e-6));
  for (float &x : scaled)
    x *= coeff;
  EXPECT_EQ(step(&sumsq, 0.5f, g), step(nullptr, 0.0f, scaled));
  EXPECT_EQ(step(&sumsq, 8.0f, g), step(nullptr, 0.0f, g));
  EXPECT_EQ(step(&sumsq, 0.0f, g), step(nullptr, 0.0f, g)); // clipping off
}

TEST(AdamWTest, MultiEqualsAdamwThenCastBitwise) {
  // Odd sizes (one across blocks, one across threads, an empty one), decay
  // on some, a model copy on some; three steps: clipped, skipped (inf),
  // plain. Every buffer must end bit for bit as per-tensor loomrt_adamw and
  // loomrt_cast leave it.
  const std::vector<int64_t> sizes = {1, 4097, 37, 0, 33001};
  const std::vector<float> decays = {0.1f, 0.0f, 0.1f, 0.3f, 0.0f};
  const std::vector<bool> hasModel = {true, true, false, true, true};
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::pair<float, float>> steps = {
      {2500.0f, 1.0f}, {inf, 1.0f}, {0.25f, 1.0f}}; // grad_sumsq, max_norm
  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16}) {
    SCOPED_TRACE(dtypeName(dt));
    const size_t count = sizes.size();
    const int64_t w = loomrt_dtype_size(dt);
    struct State {
      std::vector<float> p, g, m, v;
      std::vector<char> model;
    };
    std::vector<State> multi(count);
    for (size_t k = 0; k < count; ++k) {
      size_t n = size_t(sizes[k]);
      multi[k] = {randomVec(n, uint32_t(50 + k)),
                  randomVec(n, uint32_t(60 + k)), std::vector<float>(n, 0.01f),
                  std::vector<float>(n, 0.02f),
                  std::vector<char>(n * size_t(w), char(0x5a))};
    }
    std::vector<State> single = multi;
    for (size_t s = 0; s < steps.size(); ++s) {
      const float sumsq = steps[s].first, maxNorm = steps[s].second;
      const int64_t step = int64_t(s) + 1;
      std::vector<loomrt_adamw_tensor> table(count);
      for (size_t k = 0; k < count; ++k) {
        State &x = multi[k];
        table[k] = {sizes[k],   x.p.data(),
                    x.g.data(), x.m.data(),
                    x.v.data(), hasModel[k] ? x.model.data() : nullptr,
                    decays[k]};
        State &y = single[k];
        loomrt_adamw(sizes[k], y.p.data(), y.g.data(), y.m.data(), y.v.data(),
                     1e-2f, 0.9f, 0.95f, 1e-8f, decays[k], step, &sumsq,
                     maxNorm);
        if (hasModel[k])
          loomrt_cast(LOOMRT_F32, y.p.data(), dt, y.model.data(), sizes[k]);
      }
      const std::vector<State> before = multi;
      loomrt_adamw_multi(int64_t(count), table.data(), dt, 1e-2f, 0.9f, 0.95f,
                         1e-8f, step, &sumsq, maxNorm);
      auto same = [](const auto &a, const auto &b) {
        return a.size() == b.size() &&
               std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
      };
      for (size_t k = 0; k < count; ++k) {
        SCOPED_TRACE("step " + std::to_string(step) + ", tensor " +
                     std::to_string(k));
        EXPECT_TRUE(same(multi[k].p, single[k].p)) << "param";
        EXPECT_TRUE(same(multi[k].m, single[k].m)) << "exp_avg";
        EXPECT_TRUE(same(multi[k].v, single[k].v)) << "exp_avg_sq";
        EXPECT_TRUE(same(multi[k].model, single[k].model)) << "model";
        // The skipped step writes nothing; the others move every tensor.
        EXPECT_EQ(same(multi[k].p, before[k].p),
                  !std::isfinite(sumsq) || sizes[k] == 0)
            << "param changed or not";
        EXPECT_EQ(same(multi[k].model, before[k].model),
                  !std::isfinite(sumsq) || sizes[k] == 0 || !hasModel[k])
            << "model copy written or not";
      }
    }
  }
}

TEST(CrossEntropyTest, SafeDivideTakesTheMeanOnTheDevice) {
  // The loss's mean from its parts: num / den, 0 over no tokens, and the
  // result may overwrite an operand.
  float parts[2] = {7.5f, 3.0f}, out = -1.0f;
  loomrt_safe_divide(&parts[0], &parts[1], &out);
  EXPECT_FLOAT_EQ(out, 2.5f);
  float none[2] = {0.0f, 0.0f};
  loomrt_safe_divide(&none[0], &none[1], &out);
  EXPECT_EQ(out, 0.0f);
  loomrt_safe_divide(&parts[0], &parts[1], &parts[0]);
  EXPECT_FLOAT_EQ(parts[0], 2.5f);
}
