//===- AttentionTest.cpp - Masked GQA attention, merge, backward ----------===//
//
// The reference is the textbook softmax(q k^T * scale + mask) v in double.
// Its analytic backward is itself checked against finite differences on a
// small case, then used for shapes too large for finite differences.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Runtime/TestUtil.h"

#include <limits>

using namespace loomrt_test;

namespace {
const double kInf = std::numeric_limits<double>::infinity();

struct Problem {
  int64_t B, S, Sk, Nq, Nkv, D;
  float scale;
  bool causal = true;
  std::vector<int32_t> qPos, kPos, qDoc, kDoc; // empty = NULL
  std::vector<float> q, k, v, dout;

  Problem(int64_t B, int64_t S, int64_t Sk, int64_t Nq, int64_t Nkv, int64_t D,
          uint32_t seed)
      : B(B), S(S), Sk(Sk), Nq(Nq), Nkv(Nkv), D(D),
        scale(float(1.0 / std::sqrt(double(D)))) {
    q = randomVec(size_t(B * S * Nq * D), seed, -2.0f, 2.0f);
    k = randomVec(size_t(B * Sk * Nkv * D), seed + 1, -2.0f, 2.0f);
    v = randomVec(size_t(B * Sk * Nkv * D), seed + 2);
    dout = randomVec(size_t(B * S * Nq * D), seed + 3);
  }
  const int32_t *ptr(const std::vector<int32_t> &a) const {
    return a.empty() ? nullptr : a.data();
  }
  bool visible(int64_t b, int64_t i, int64_t j) const {
    int32_t qp = qPos.empty() ? int32_t(i) : qPos[b * S + i];
    int32_t kp = kPos.empty() ? int32_t(j) : kPos[b * Sk + j];
    if (causal && kp > qp)
      return false;
    return qDoc.empty() || qDoc[b * S + i] == kDoc[b * Sk + j];
  }
  size_t qIdx(int64_t b, int64_t i, int64_t h) const {
    return size_t(((b * S + i) * Nq + h) * D);
  }
  size_t kIdx(int64_t b, int64_t j, int64_t h) const {
    return size_t(((b * Sk + j) * Nkv + h) * D);
  }
};

struct RefOut {
  std::vector<double> o, lse;
};

RefOut refForward(const Problem &p, const std::vector<double> &q,
                  const std::vector<double> &k, const std::vector<double> &v) {
  RefOut r{std::vector<double>(q.size(), 0.0),
           std::vector<double>(size_t(p.B * p.Nq * p.S), -kInf)};
  const int64_t group = p.Nq / p.Nkv;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Nq; ++h)
      for (int64_t i = 0; i < p.S; ++i) {
        std::vector<double> s(size_t(p.Sk), -kInf);
        double m = -kInf;
        for (int64_t j = 0; j < p.Sk; ++j) {
          if (!p.visible(b, i, j))
            continue;
          double acc = 0;
          for (int64_t d = 0; d < p.D; ++d)
            acc += q[p.qIdx(b, i, h) + d] * k[p.kIdx(b, j, h / group) + d];
          s[j] = acc * p.scale;
          m = std::max(m, s[j]);
        }
        if (m == -kInf)
          continue;
        double sum = 0;
        for (int64_t j = 0; j < p.Sk; ++j)
          sum += std::exp(s[j] - m);
        r.lse[(b * p.Nq + h) * p.S + i] = m + std::log(sum);
        for (int64_t j = 0; j < p.Sk; ++j) {
          double w = std::exp(s[j] - m) / sum;
          for (int64_t d = 0; d < p.D; ++d)
            r.o[p.qIdx(b, i, h) + d] += w * v[p.kIdx(b, j, h / group) + d];
        }
      }
  return r;
}

struct RefGrads {
  std::vector<double> dq, dk, dv;
};

/// Analytic backward in double: dS = P * (dP - rowsum(dO * O)).
RefGrads refBackward(const Problem &p) {
  auto q = toDouble(p.q), k = toDouble(p.k), v = toDouble(p.v);
  RefOut f = refForward(p, q, k, v);
  RefGrads g{std::vector<double>(q.size(), 0.0),
             std::vector<double>(k.size(), 0.0),
             std::vector<double>(v.size(), 0.0)};
  const int64_t group = p.Nq / p.Nkv;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Nq; ++h)
      for (int64_t i = 0; i < p.S; ++i) {
        const double lse = f.lse[(b * p.Nq + h) * p.S + i];
        if (lse == -kInf)
          continue;
        double rowDot = 0;
        for (int64_t d = 0; d < p.D; ++d)
          rowDot += p.dout[p.qIdx(b, i, h) + d] * f.o[p.qIdx(b, i, h) + d];
        for (int64_t j = 0; j < p.Sk; ++j) {
          if (!p.visible(b, i, j))
            continue;
          const size_t qi = p.qIdx(b, i, h), kj = p.kIdx(b, j, h / group);
          double s = 0, dP = 0;
          for (int64_t d = 0; d < p.D; ++d) {
            s += q[qi + d] * k[kj + d];
            dP += p.dout[qi + d] * v[kj + d];
          }
          const double prob = std::exp(s * p.scale - lse);
          const double dS = prob * (dP - rowDot) * p.scale;
          for (int64_t d = 0; d < p.D; ++d) {
            g.dv[kj + d] += prob * p.dout[qi + d];
            g.dq[qi + d] += dS * k[kj + d];
            g.dk[kj + d] += dS * q[qi + d];
          }
        }
      }
  return g;
}

struct KernelOut {
  std::vector<float> o, lse;
};

KernelOut runForward(const Problem &p, loomrt_dtype dt = LOOMRT_F32) {
  Buf o(dt, p.q.size());
  std::vector<float> lse(size_t(p.B * p.Nq * p.S), 123.0f);
  loomrt_attention_forward(
      dt, p.B, p.S, p.Sk, p.Nq, p.Nkv, p.D, p.scale, p.causal, p.ptr(p.qPos),
      p.ptr(p.kPos), p.ptr(p.qDoc), p.ptr(p.kDoc), Buf(dt, p.q).data(),
      Buf(dt, p.k).data(), Buf(dt, p.v).data(), o.data(), lse.data());
  return {o.values(), lse};
}

void runBackward(const Problem &p, const std::vector<float> &o,
                 const std::vector<float> &lse, std::vector<float> &dq,
                 std::vector<float> &dk, std::vector<float> &dv,
                 int32_t accumulate) {
  loomrt_attention_backward(
      LOOMRT_F32, p.B, p.S, p.Sk, p.Nq, p.Nkv, p.D, p.scale, p.causal,
      p.ptr(p.qPos), p.ptr(p.kPos), p.ptr(p.qDoc), p.ptr(p.kDoc), p.q.data(),
      p.k.data(), p.v.data(), o.data(), lse.data(), p.dout.data(), dq.data(),
      dk.data(), dv.data(), accumulate);
}

void expectForward(const Problem &p, double tol) {
  RefOut want = refForward(p, toDouble(p.q), toDouble(p.k), toDouble(p.v));
  KernelOut got = runForward(p);
  expectClose(got.o, want.o, tol, tol, "o");
  expectClose(got.lse, want.lse, tol, tol, "lse");
}

/// Keeps keys [j0, j1) of p (with their positions and documents).
Problem keySlice(const Problem &p, int64_t j0, int64_t j1) {
  Problem c = p;
  c.Sk = j1 - j0;
  c.k.clear();
  c.v.clear();
  c.kPos.clear();
  c.kDoc.clear();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t j = j0; j < j1; ++j) {
      c.k.insert(c.k.end(), p.k.begin() + p.kIdx(b, j, 0),
                 p.k.begin() + p.kIdx(b, j, 0) + p.Nkv * p.D);
      c.v.insert(c.v.end(), p.v.begin() + p.kIdx(b, j, 0),
                 p.v.begin() + p.kIdx(b, j, 0) + p.Nkv * p.D);
      c.kPos.push_back(p.kPos.empty() ? int32_t(j) : p.kPos[b * p.Sk + j]);
      if (!p.kDoc.empty())
        c.kDoc.push_back(p.kDoc[b * p.Sk + j]);
    }
  return c;
}
} // namespace

TEST(AttentionTest, ForwardGqaNoMask) {
  Problem p(2, 5, 7, 4, 2, 8, 1);
  p.causal = false;
  expectForward(p, 1e-5);
}

TEST(AttentionTest, ForwardCausalWithDocuments) {
  Problem p(2, 6, 6, 4, 1, 4, 2);
  std::vector<int32_t> tokens = {3, 1, 0, 4, 0, 5, //
                                 0, 2, 2, 0, 0, 2};
  p.qDoc.resize(12);
  loomrt_document_ids(2, 6, tokens.data(), 0, p.qDoc.data());
  p.kDoc = p.qDoc;
  expectForward(p, 1e-5);
}

TEST(AttentionTest, FullyMaskedRowsGiveZeroAndMinusInf) {
  // A context-parallel chunk: queries at positions 0..3 see keys at 2..5
  // causally, so queries 0 and 1 see nothing.
  Problem p(1, 4, 4, 2, 2, 4, 3);
  p.qPos = {0, 1, 2, 3};
  p.kPos = {2, 3, 4, 5};
  KernelOut got = runForward(p);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_EQ(got.lse[h * 4 + i], -std::numeric_limits<float>::infinity());
      for (int64_t d = 0; d < 4; ++d)
        EXPECT_EQ(got.o[p.qIdx(0, i, h) + d], 0.0f);
    }
  expectForward(p, 1e-5);
  std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  runBackward(p, got.o, got.lse, dq, dk, dv, 0);
  for (float x : dq)
    ASSERT_FALSE(std::isnan(x));
  RefGrads want = refBackward(p);
  expectClose(dq, want.dq, 1e-5, 1e-4, "dq");
  expectClose(dk, want.dk, 1e-5, 1e-4, "dk");
  expectClose(dv, want.dv, 1e-5, 1e-4, "dv");
}

TEST(AttentionTest, UnsortedKeyPositionsAndHiddenKeyChunks) {
  // The kernel trims trailing keys that no query of a block can see; keys
  // in arbitrary order (zigzag context-parallel chunks) must still be
  // masked one by one, and a chunk entirely in the future yields nothing.
  Problem p(2, 4, 6, 2, 1, 4, 10);
  p.qPos = {3, 4, 5, 6, 0, 1, 2, 3};
  p.kPos = {5, 0, 9, 1, 2, 4, 7, 6, 1, 8, 0, 3};
  expectForward(p, 1e-5);
  KernelOut f = runForward(p);
  std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  runBackward(p, f.o, f.lse, dq, dk, dv, 0);
  RefGrads want = refBackward(p);
  expectClose(dq, want.dq, 1e-5, 1e-4, "dq");
  expectClose(dk, want.dk, 1e-5, 1e-4, "dk");
  expectClose(dv, want.dv, 1e-5, 1e-4, "dv");

  p.kPos = {7, 8, 9, 10, 11, 12, 7, 8, 9, 10, 11, 12};
  f = runForward(p);
  for (size_t i = 0; i < f.lse.size(); ++i)
    EXPECT_EQ(f.lse[i], -std::numeric_limits<float>::infinity());
  for (float x : f.o)
    EXPECT_EQ(x, 0.0f);
  std::fill(dk.begin(), dk.end(), 3.0f);
  runBackward(p, f.o, f.lse, dq, dk, dv, 0);
  for (float x : dk)
    EXPECT_EQ(x, 0.0f) << "overwrite mode zeroes untouched gradients";
}

TEST(AttentionTest, MergeOfKeyChunksEqualsFullAttention) {
  Problem p(2, 6, 8, 4, 2, 4, 4);
  p.qPos = {2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5};
  KernelOut full = runForward(p);
  // Ring order: the chunk with the later keys first, so some rows start
  // fully masked (-inf) and are filled by the merge.
  KernelOut acc = runForward(keySlice(p, 4, 8));
  KernelOut part = runForward(keySlice(p, 0, 4));
  EXPECT_TRUE(std::count(acc.lse.begin(), acc.lse.end(),
                         -std::numeric_limits<float>::infinity()) > 0);
  loomrt_attention_merge(LOOMRT_F32, p.B, p.S, p.Nq, p.D, acc.o.data(),
                         acc.lse.data(), part.o.data(), part.lse.data());
  expectClose(acc.o, full.o, 1e-5, 1e-5, "merged o");
  expectClose(acc.lse, full.lse, 1e-5, 1e-5, "merged lse");
}

TEST(AttentionTest, ReferenceBackwardMatchesFiniteDifferences) {
  // Guards the analytic reference used by the larger tests below.
  Problem p(1, 4, 5, 2, 1, 3, 5);
  p.qPos = {1, 2, 3, 4};
  p.qDoc = {0, 0, 1, 1};
  p.kDoc = {0, 0, 0, 1, 1};
  RefGrads g = refBackward(p);
  auto q = toDouble(p.q), k = toDouble(p.k), v = toDouble(p.v);
  auto L = [&](const std::vector<double> &qq, const std::vector<double> &kk,
               const std::vector<double> &vv) {
    return dot(refForward(p, qq, kk, vv).o, p.dout);
  };
  auto cast = [](const std::vector<double> &x) {
    return std::vector<float>(x.begin(), x.end());
  };
  expectClose(cast(g.dq),
              numericGrad([&](const auto &x) { return L(x, k, v); }, q), 1e-7,
              1e-6, "ref dq");
  expectClose(cast(g.dk),
              numericGrad([&](const auto &x) { return L(q, x, v); }, k), 1e-7,
              1e-6, "ref dk");
  expectClose(cast(g.dv),
              numericGrad([&](const auto &x) { return L(q, k, x); }, v), 1e-7,
              1e-6, "ref dv");
}

TEST(AttentionTest, BackwardGqaCausalDocuments) {
  Problem p(2, 5, 5, 4, 2, 4, 6);
  p.qDoc = {0, 0, 1, 1, 1, 0, 0, 0, 0, 1};
  p.kDoc = p.qDoc;
  KernelOut f = runForward(p);
  std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  runBackward(p, f.o, f.lse, dq, dk, dv, 0);
  RefGrads want = refBackward(p);
  expectClose(dq, want.dq, 1e-5, 1e-4, "dq");
  expectClose(dk, want.dk, 1e-5, 1e-4, "dk");
  expectClose(dv, want.dv, 1e-5, 1e-4, "dv");
}

TEST(AttentionTest, BackwardOverKeyChunksAccumulates) {
  // Ring-attention backward: every step sees the final o/lse and one chunk
  // of keys; dq accumulates, each chunk's dk/dv belong to that chunk.
  Problem p(1, 6, 6, 2, 2, 4, 7);
  KernelOut f = runForward(p);
  RefGrads want = refBackward(p);
  std::vector<float> dq(p.q.size(), 0.0f), dk, dv;
  for (int64_t j0 : {3, 0}) {
    Problem c = keySlice(p, j0, j0 + 3);
    std::vector<float> dkc(c.k.size(), 5.0f), dvc(c.v.size(), 5.0f);
    loomrt_attention_backward(
        LOOMRT_F32, c.B, c.S, c.Sk, c.Nq, c.Nkv, c.D, c.scale, c.causal,
        nullptr, c.kPos.data(), nullptr, nullptr, c.q.data(), c.k.data(),
        c.v.data(), f.o.data(), f.lse.data(), c.dout.data(), dq.data(),
        dkc.data(), dvc.data(), /*accumulate=*/j0 == 0 ? 1 : 0);
    // The first step (overwrite) ignores the 5.0 fill of dk/dv; the second
    // (accumulate) adds onto it, and onto the first step's dq.
    if (j0 == 0)
      for (size_t i = 0; i < dkc.size(); ++i) {
        dkc[i] -= 5.0f;
        dvc[i] -= 5.0f;
      }
    dk.insert(dk.begin(), dkc.begin(), dkc.end());
    dv.insert(dv.begin(), dvc.begin(), dvc.end());
  }
  expectClose(dq, want.dq, 1e-5, 1e-4, "dq");
  expectClose(dk, want.dk, 1e-5, 1e-4, "dk");
  expectClose(dv, want.dv, 1e-5, 1e-4, "dv");
}

TEST(AttentionTest, LargerThanOneQueryBlock) {
  // 300 queries span three 128-row blocks of the kernel.
  Problem p(1, 300, 300, 2, 1, 16, 8);
  expectForward(p, 1e-5);
  KernelOut f = runForward(p);
  std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
  runBackward(p, f.o, f.lse, dq, dk, dv, 0);
  RefGrads want = refBackward(p);
  expectClose(dq, want.dq, 1e-4, 1e-3, "dq");
  expectClose(dk, want.dk, 1e-4, 1e-3, "dk");
  expectClose(dv, want.dv, 1e-4, 1e-3, "dv");
}

TEST(AttentionTest, Bf16Forward) {
  Problem p(1, 8, 8, 2, 2, 8, 9);
  for (auto *t : {&p.q, &p.k, &p.v})
    *t = rounded(*t, LOOMRT_BF16);
  RefOut want = refForward(p, toDouble(p.q), toDouble(p.k), toDouble(p.v));
  KernelOut got = runForward(p, LOOMRT_BF16);
  expectClose(got.o, want.o, 1e-2, 1.0 / 128, "o");
  expectClose(got.lse, want.lse, 1e-5, 1e-5, "lse (f32 from bf16 inputs)");
}

//===----------------------------------------------------------------------===//
// Ring attention sections (loomrt_attention_section_*): every cp rank of a
// context-parallel ring simulated in one process, against attention over the
// whole sequence.
//===----------------------------------------------------------------------===//

namespace {
/// One sequence batch split over cp ranks in Megatron's load-balanced layout:
/// rank r holds global chunks r and 2cp-1-r of c tokens each.
struct CpLayout {
  int64_t cp, c, B, S, L;
  CpLayout(int64_t cp, int64_t c, int64_t B)
      : cp(cp), c(c), B(B), S(2 * cp * c), L(2 * c) {}
  /// The global token of rank r's local token i.
  int64_t global(int64_t r, int64_t i) const {
    return i < c ? r * c + i : (2 * cp - 1 - r) * c + (i - c);
  }
  /// Rank r's rows of a [B,S,width] tensor, as [B,L,width].
  std::vector<float> rows(const std::vector<float> &full, int64_t width,
                          int64_t r) const {
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) {
        auto row = full.begin() + (b * S + global(r, i)) * width;
        out.insert(out.end(), row, row + width);
      }
    return out;
  }
  /// Rank r's entries of a [B,N,S] lse, as [B,N,L].
  std::vector<float> lse(const std::vector<float> &full, int64_t N,
                         int64_t r) const {
    std::vector<float> out;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t i = 0; i < L; ++i)
          out.push_back(full[size_t((b * N + h) * S + global(r, i))]);
    return out;
  }
  /// The section of rank r's queries against the block of rank j.
  static int32_t section(int64_t r, int64_t j) {
    return j == r  ? LOOMRT_SECTION_DIAGONAL
           : j < r ? LOOMRT_SECTION_LOWER
                   : LOOMRT_SECTION_UPPER;
  }
};

struct Whole {
  std::vector<float> o, lse, dq, dk, dv;
};

/// Causal attention over the whole sequence (forward, then backward from
/// its own o and lse), through the runtime's f32 kernels; `doc` [B,S], when
/// given, masks keys of other documents too.
Whole wholeSequence(const Problem &p, const int32_t *doc = nullptr) {
  Whole w{std::vector<float>(p.q.size()),
          std::vector<float>(size_t(p.B * p.Nq * p.S)),
          std::vector<float>(p.q.size()), std::vector<float>(p.k.size()),
          std::vector<float>(p.v.size())};
  loomrt_attention_forward(LOOMRT_F32, p.B, p.S, p.S, p.Nq, p.Nkv, p.D, p.scale,
                           1, nullptr, nullptr, doc, doc, p.q.data(),
                           p.k.data(), p.v.data(), w.o.data(), w.lse.data());
  loomrt_attention_backward(
      LOOMRT_F32, p.B, p.S, p.S, p.Nq, p.Nkv, p.D, p.scale, 1, nullptr, nullptr,
      doc, doc, p.q.data(), p.k.data(), p.v.data(), w.o.data(),
      w.lse.data(), p.dout.data(), w.dq.data(), w.dk.data(), w.dv.data(), 0);
  return w;
}

const int64_t kRingNq = 4, kRingNkv = 2, kRingD = 8, kRingC = 3, kRingB = 2;
} // namespace

TEST(AttentionSectionTest, RingForwardEqualsWholeSequence) {
  for (int64_t cp : {1, 2, 3, 4}) {
    SCOPED_TRACE("cp=" + std::to_string(cp));
    const CpLayout lay(cp, kRingC, kRingB);
    Problem p(kRingB, lay.S, lay.S, kRingNq, kRingNkv, kRingD,
              uint32_t(20 + cp));
    const int64_t qW = p.Nq * p.D, kvW = p.Nkv * p.D;
    const Whole want = wholeSequence(p);
    for (int64_t r = 0; r < cp; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::vector<float> q = lay.rows(p.q, qW, r);
      const std::vector<float> wantO = lay.rows(want.o, qW, r);
      const std::vector<float> wantLse = lay.lse(want.lse, p.Nq, r);
      for (bool fromEmpty : {true, false}) {
        SCOPED_TRACE(fromEmpty ? "from o=0, lse=-inf, blocks cp-1..0"
                               : "from a causal forward, ring order");
        std::vector<float> o(q.size(), 0.0f),
            lse(wantLse.size(), -std::numeric_limits<float>::infinity());
        std::vector<int64_t> order;
        if (fromEmpty) {
          // Any order: upper triangles before the diagonal, onto nothing.
          for (int64_t j = cp - 1; j >= 0; --j)
            order.push_back(j);
        } else {
          // TE's ring: step i brings the block of rank (r - i) mod cp.
          const std::vector<float> k = lay.rows(p.k, kvW, r),
                                   v = lay.rows(p.v, kvW, r);
          loomrt_attention_forward(LOOMRT_F32, p.B, lay.L, lay.L, p.Nq, p.Nkv,
                                   p.D, p.scale, 1, nullptr, nullptr, nullptr,
                                   nullptr, q.data(), k.data(), v.data(),
                                   o.data(), lse.data());
          for (int64_t i = 1; i < cp; ++i)
            order.push_back((r - i + cp) % cp);
        }
        for (int64_t j : order) {
          const std::vector<float> k = lay.rows(p.k, kvW, j),
                                   v = lay.rows(p.v, kvW, j);
          loomrt_attention_section_forward(
              LOOMRT_F32, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale,
              CpLayout::section(r, j), nullptr, nullptr, q.data(), k.data(), v.data(), o.data(),
              lse.data());
        }
        expectClose(o, wantO, 1e-5, 1e-5, "ring o");
        expectClose(lse, wantLse, 1e-5, 1e-5, "ring lse");
      }
    }
  }
}

TEST(AttentionSectionTest, RingWithDocumentsEqualsWholeSequence) {
  // Two documents a sequence, the boundary inside a chunk: the sections
  // must mask keys of the other document (forward and backward).
  for (int64_t cp : {2, 3}) {
    SCOPED_TRACE("cp=" + std::to_string(cp));
    const CpLayout lay(cp, kRingC, kRingB);
    Problem p(kRingB, lay.S, lay.S, kRingNq, kRingNkv, kRingD,
              uint32_t(70 + cp));
    const int64_t qW = p.Nq * p.D, kvW = p.Nkv * p.D;
    std::vector<int32_t> doc(size_t(p.B * lay.S));
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t s = 0; s < lay.S; ++s)
        doc[size_t(b * lay.S + s)] = s >= lay.S / 3 + b ? 1 : 0;
    const Whole want = wholeSequence(p, doc.data());
    auto docOf = [&](int64_t r) {
      std::vector<float> f(doc.begin(), doc.end());
      std::vector<float> local = lay.rows(f, 1, r);
      return std::vector<int32_t>(local.begin(), local.end());
    };
    std::vector<std::vector<float>> dk(static_cast<size_t>(cp)),
        dv(static_cast<size_t>(cp));
    for (int64_t j = 0; j < cp; ++j) {
      dk[size_t(j)].assign(size_t(p.B * lay.L * kvW), 0.0f);
      dv[size_t(j)].assign(size_t(p.B * lay.L * kvW), 0.0f);
    }
    for (int64_t r = 0; r < cp; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::vector<float> q = lay.rows(p.q, qW, r);
      const std::vector<int32_t> qDoc = docOf(r);
      std::vector<float> o(q.size(), 0.0f),
          lse(size_t(p.B * p.Nq * lay.L),
              -std::numeric_limits<float>::infinity());
      for (int64_t j = 0; j < cp; ++j) {
        const std::vector<float> k = lay.rows(p.k, kvW, j),
                                 v = lay.rows(p.v, kvW, j);
        const std::vector<int32_t> kDoc = docOf(j);
        loomrt_attention_section_forward(
            LOOMRT_F32, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale,
            CpLayout::section(r, j), qDoc.data(), kDoc.data(), q.data(),
            k.data(), v.data(), o.data(), lse.data());
      }
      expectClose(o, lay.rows(want.o, qW, r), 1e-5, 1e-5, "ring o");
      expectClose(lse, lay.lse(want.lse, p.Nq, r), 1e-5, 1e-5, "ring lse");
      const std::vector<float> wo = lay.rows(want.o, qW, r),
                               wl = lay.lse(want.lse, p.Nq, r),
                               dout = lay.rows(p.dout, qW, r);
      std::vector<float> dq(q.size(), 0.0f);
      for (int64_t j = 0; j < cp; ++j) {
        const std::vector<float> k = lay.rows(p.k, kvW, j),
                                 v = lay.rows(p.v, kvW, j);
        const std::vector<int32_t> kDoc = docOf(j);
        loomrt_attention_section_backward(
            LOOMRT_F32, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale,
            CpLayout::section(r, j), qDoc.data(), kDoc.data(), q.data(),
            k.data(), v.data(), wo.data(), wl.data(), dout.data(), dq.data(),
            dk[size_t(j)].data(), dv[size_t(j)].data());
      }
      expectClose(dq, lay.rows(want.dq, qW, r), 1e-5, 1e-4, "ring dq");
    }
    for (int64_t j = 0; j < cp; ++j) {
      expectClose(dk[size_t(j)], lay.rows(want.dk, kvW, j), 1e-5, 1e-4,
                  "ring dk");
      expectClose(dv[size_t(j)], lay.rows(want.dv, kvW, j), 1e-5, 1e-4,
                  "ring dv");
    }
  }
}

TEST(AttentionSectionTest, RingBackwardEqualsWholeSequence) {
  for (int64_t cp : {1, 2, 3, 4}) {
    SCOPED_TRACE("cp=" + std::to_string(cp));
    const CpLayout lay(cp, kRingC, kRingB);
    Problem p(kRingB, lay.S, lay.S, kRingNq, kRingNkv, kRingD,
              uint32_t(30 + cp));
    const int64_t qW = p.Nq * p.D, kvW = p.Nkv * p.D;
    const Whole want = wholeSequence(p);
    // dk/dv of every block, summed over the ranks whose queries see it.
    std::vector<std::vector<float>> dk(static_cast<size_t>(cp)),
        dv(static_cast<size_t>(cp));
    for (int64_t j = 0; j < cp; ++j) {
      dk[size_t(j)].assign(size_t(p.B * lay.L * kvW), 0.0f);
      dv[size_t(j)].assign(size_t(p.B * lay.L * kvW), 0.0f);
    }
    for (int64_t r = 0; r < cp; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::vector<float> q = lay.rows(p.q, qW, r),
                               o = lay.rows(want.o, qW, r),
                               dout = lay.rows(p.dout, qW, r),
                               lse = lay.lse(want.lse, p.Nq, r);
      std::vector<float> dq(q.size(), 0.0f);
      // The backward ring: step i uses the block of rank (r + 1 + i) mod cp.
      for (int64_t i = 0; i < cp; ++i) {
        const int64_t j = (r + 1 + i) % cp;
        const std::vector<float> k = lay.rows(p.k, kvW, j),
                                 v = lay.rows(p.v, kvW, j);
        loomrt_attention_section_backward(
            LOOMRT_F32, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale,
            CpLayout::section(r, j), nullptr, nullptr, q.data(), k.data(), v.data(), o.data(),
            lse.data(), dout.data(), dq.data(), dk[size_t(j)].data(),
            dv[size_t(j)].data());
      }
      expectClose(dq, lay.rows(want.dq, qW, r), 1e-5, 1e-4, "ring dq");
    }
    for (int64_t j = 0; j < cp; ++j) {
      SCOPED_TRACE("block " + std::to_string(j));
      expectClose(dk[size_t(j)], lay.rows(want.dk, kvW, j), 1e-5, 1e-4,
                  "ring dk");
      expectClose(dv[size_t(j)], lay.rows(want.dv, kvW, j), 1e-5, 1e-4,
                  "ring dv");
    }
  }
}

TEST(AttentionSectionTest, SectionsLeaveOtherHalvesUntouched) {
  // UPPER reads and writes only query half 1 (o, lse, dq); LOWER only kv
  // half 0 (dk, dv). The untouched halves keep their bits, NaN included.
  const CpLayout lay(2, kRingC, kRingB);
  const int64_t L = lay.L, c = lay.c;
  Problem p(kRingB, L, L, kRingNq, kRingNkv, kRingD, 40);
  const int64_t qW = p.Nq * p.D, kvW = p.Nkv * p.D;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto half = [&](int64_t i) { return i < c ? 0 : 1; };
  std::vector<float> o(p.q.size(), 0.0f), lse(size_t(p.B * p.Nq * L));
  for (size_t x = 0; x < o.size(); ++x)
    if (half(int64_t(x / size_t(qW)) % L) == 0)
      o[x] = nan;
  for (size_t x = 0; x < lse.size(); ++x)
    lse[x] = half(int64_t(x) % L) == 0
                 ? nan
                 : -std::numeric_limits<float>::infinity();
  loomrt_attention_section_forward(
      LOOMRT_F32, p.B, L, p.Nq, p.Nkv, p.D, p.scale, LOOMRT_SECTION_UPPER, nullptr, nullptr,
      p.q.data(), p.k.data(), p.v.data(), o.data(), lse.data());
  for (size_t x = 0; x < o.size(); ++x)
    EXPECT_EQ(std::isnan(o[x]), half(int64_t(x / size_t(qW)) % L) == 0) << x;
  for (size_t x = 0; x < lse.size(); ++x)
    EXPECT_EQ(std::isnan(lse[x]), half(int64_t(x) % L) == 0) << x;

  // Backward with finite o, lse: UPPER leaves dq half 0 alone, LOWER dk/dv
  // half 1.
  KernelOut f = runForward(p);
  std::vector<float> dq(p.q.size(), 7.0f), dk(p.k.size(), 0.0f),
      dv(p.v.size(), 0.0f);
  loomrt_attention_section_backward(
      LOOMRT_F32, p.B, L, p.Nq, p.Nkv, p.D, p.scale, LOOMRT_SECTION_UPPER, nullptr, nullptr,
      p.q.data(), p.k.data(), p.v.data(), f.o.data(), f.lse.data(),
      p.dout.data(), dq.data(), dk.data(), dv.data());
  for (size_t x = 0; x < dq.size(); ++x) {
    if (half(int64_t(x / size_t(qW)) % L) == 0) {
      EXPECT_EQ(dq[x], 7.0f) << x;
    }
  }
  std::fill(dk.begin(), dk.end(), 7.0f);
  std::fill(dv.begin(), dv.end(), 7.0f);
  loomrt_attention_section_backward(
      LOOMRT_F32, p.B, L, p.Nq, p.Nkv, p.D, p.scale, LOOMRT_SECTION_LOWER, nullptr, nullptr,
      p.q.data(), p.k.data(), p.v.data(), f.o.data(), f.lse.data(),
      p.dout.data(), dq.data(), dk.data(), dv.data());
  size_t changed = 0;
  for (size_t x = 0; x < dk.size(); ++x) {
    const bool h1 = half(int64_t(x / size_t(kvW)) % L) == 1;
    if (h1) {
      EXPECT_EQ(dk[x], 7.0f) << x;
      EXPECT_EQ(dv[x], 7.0f) << x;
    } else {
      changed += dk[x] != 7.0f;
    }
  }
  EXPECT_GT(changed, dk.size() / 4) << "LOWER must add into kv half 0";
}

TEST(AttentionSectionTest, Bf16RingForwardAndBackward) {
  // bf16 storage: every merge and every accumulated gradient rounds once
  // more than the whole-sequence kernel, so the tolerance is a few bf16
  // ulps; lse stays f32.
  const int64_t cp = 3;
  const CpLayout lay(cp, kRingC, kRingB);
  Problem p(kRingB, lay.S, lay.S, kRingNq, kRingNkv, kRingD, 50);
  for (auto *t : {&p.q, &p.k, &p.v, &p.dout})
    *t = rounded(*t, LOOMRT_BF16);
  const int64_t qW = p.Nq * p.D, kvW = p.Nkv * p.D;
  const Whole want = wholeSequence(p);
  const loomrt_dtype bf = LOOMRT_BF16;
  std::vector<Buf> dk, dv;
  for (int64_t j = 0; j < cp; ++j) {
    dk.emplace_back(bf, std::vector<float>(size_t(p.B * lay.L * kvW), 0.0f));
    dv.emplace_back(bf, std::vector<float>(size_t(p.B * lay.L * kvW), 0.0f));
  }
  for (int64_t r = 0; r < cp; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Buf q(bf, lay.rows(p.q, qW, r));
    Buf o(bf, std::vector<float>(q.size(), 0.0f));
    std::vector<float> lse(size_t(p.B * p.Nq * lay.L),
                           -std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < cp; ++j) {
      const Buf k(bf, lay.rows(p.k, kvW, j)), v(bf, lay.rows(p.v, kvW, j));
      loomrt_attention_section_forward(
          bf, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale, CpLayout::section(r, j), nullptr, nullptr,
          q.data(), k.data(), v.data(), o.data(), lse.data());
    }
    expectClose(o.values(), lay.rows(want.o, qW, r), 1e-2, 1.0 / 128,
                "bf16 ring o");
    expectClose(lse, lay.lse(want.lse, p.Nq, r), 1e-5, 1e-5, "bf16 ring lse");

    const Buf wantO(bf, lay.rows(want.o, qW, r)),
        dout(bf, lay.rows(p.dout, qW, r));
    const std::vector<float> wantLse = lay.lse(want.lse, p.Nq, r);
    Buf dq(bf, std::vector<float>(q.size(), 0.0f));
    for (int64_t j = 0; j < cp; ++j) {
      const Buf k(bf, lay.rows(p.k, kvW, j)), v(bf, lay.rows(p.v, kvW, j));
      loomrt_attention_section_backward(
          bf, p.B, lay.L, p.Nq, p.Nkv, p.D, p.scale, CpLayout::section(r, j), nullptr, nullptr,
          q.data(), k.data(), v.data(), wantO.data(), wantLse.data(),
          dout.data(), dq.data(), dk[size_t(j)].data(), dv[size_t(j)].data());
    }
    expectClose(dq.values(), lay.rows(want.dq, qW, r), 1e-2, 1.0 / 64,
                "bf16 ring dq");
  }
  for (int64_t j = 0; j < cp; ++j) {
    SCOPED_TRACE("block " + std::to_string(j));
    expectClose(dk[size_t(j)].values(), lay.rows(want.dk, kvW, j), 1e-2,
                1.0 / 64, "bf16 ring dk");
    expectClose(dv[size_t(j)].values(), lay.rows(want.dv, kvW, j), 1e-2,
                1.0 / 64, "bf16 ring dv");
  }
}

TEST(AttentionSectionDeathTest, MisuseAbortsWithTheFunctionName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> t(64, 0.0f);
  float *x = t.data();
  EXPECT_DEATH(loomrt_attention_section_forward(LOOMRT_F32, 1, 3, 1, 1, 4, 1.0f,
                                                LOOMRT_SECTION_LOWER, nullptr, nullptr, x, x, x,
                                                x, x),
               "loomrt_attention_section_forward: L = 3 local tokens is odd");
  EXPECT_DEATH(loomrt_attention_section_backward(LOOMRT_F32, 1, 2, 1, 1, 4,
                                                 1.0f, 3, nullptr, nullptr, x, x, x, x, x, x, x,
                                                 x, x),
               "loomrt_attention_section_backward: bad section 3");
  EXPECT_DEATH(loomrt_attention_section_forward(LOOMRT_F32, 1, 2, 1, 1, 4, 1.0f,
                                                LOOMRT_SECTION_UPPER, nullptr, nullptr, x,
                                                nullptr, x, x, x),
               "loomrt_attention_section_forward: NULL tensor");
  EXPECT_DEATH(loomrt_attention_section_backward(LOOMRT_F32, -1, 2, 1, 1, 4,
                                                 1.0f, LOOMRT_SECTION_DIAGONAL, nullptr, nullptr,
                                                 x, x, x, x, x, x, x, x, x),
               "loomrt_attention_section_backward: bad sizes");
  EXPECT_DEATH(loomrt_attention_section_forward(LOOMRT_F32, 1, 2, 3, 2, 4, 1.0f,
                                                LOOMRT_SECTION_DIAGONAL, nullptr, nullptr, x, x,
                                                x, x, x),
               "not a multiple of 2 kv heads");
}

//===----------------------------------------------------------------------===//
// All-gather attention (loomrt_attention_chunked_*): every cp rank's queries
// against the whole sequence's keys, checked against attention with the
// tokens' global positions and, over all ranks, against the whole sequence.
//===----------------------------------------------------------------------===//

namespace {
/// A sequence stored in numChunks chunks of c tokens, stored chunk j being
/// global chunk order[j] (empty: the natural order); `whole` holds it in
/// natural order, `doc` [B,S] its document ids (empty: none).
struct ChunkedSeq {
  Problem whole;
  int64_t c;
  int32_t numChunks;
  std::vector<int64_t> order;
  std::vector<int32_t> doc;

  const int64_t *orderPtr() const {
    return order.empty() ? nullptr : order.data();
  }
  const int32_t *docPtr() const { return doc.empty() ? nullptr : doc.data(); }
  /// The global positions [B,L] of stored tokens [start, start + L).
  std::vector<int32_t> positions(int64_t start, int64_t L) const {
    std::vector<int32_t> pos(size_t(whole.B * L));
    loomrt_sequence_positions(whole.B, L, start, c, numChunks, orderPtr(),
                              pos.data());
    return pos;
  }
  /// The rows of a [B,S,width] tensor at positions pos [B,L].
  std::vector<float> rows(const std::vector<float> &full, int64_t width,
                          const std::vector<int32_t> &pos) const {
    const int64_t L = int64_t(pos.size()) / whole.B;
    std::vector<float> out;
    for (int64_t b = 0; b < whole.B; ++b)
      for (int64_t i = 0; i < L; ++i) {
        auto row =
            full.begin() + (b * whole.S + pos[size_t(b * L + i)]) * width;
        out.insert(out.end(), row, row + width);
      }
    return out;
  }
  /// The entries of a [B,N,S] lse at positions pos, as [B,N,L].
  std::vector<float> lse(const std::vector<float> &full,
                         const std::vector<int32_t> &pos) const {
    const int64_t L = int64_t(pos.size()) / whole.B, N = whole.Nq;
    std::vector<float> out;
    for (int64_t b = 0; b < whole.B; ++b)
      for (int64_t h = 0; h < N; ++h)
        for (int64_t i = 0; i < L; ++i)
          out.push_back(
              full[size_t((b * N + h) * whole.S + pos[size_t(b * L + i)])]);
    return out;
  }
  /// The document ids of the tokens at pos (empty without documents).
  std::vector<int32_t> docs(const std::vector<int32_t> &pos) const {
    if (doc.empty())
      return {};
    std::vector<int32_t> out(pos.size());
    loomrt_gather_positions(whole.B, whole.S, int64_t(pos.size()) / whole.B,
                            doc.data(), pos.data(), out.data());
    return out;
  }
};

/// Megatron's load-balanced chunk order for cp ranks: 0, 2cp-1, 1, 2cp-2, ...
/// (rank r holds stored chunks 2r and 2r+1).
std::vector<int64_t> loadBalancedOrder(int64_t cp) {
  std::vector<int64_t> order;
  for (int64_t r = 0; r < cp; ++r) {
    order.push_back(r);
    order.push_back(2 * cp - 1 - r);
  }
  return order;
}

ChunkedSeq chunkedSeq(int64_t c, int32_t numChunks, std::vector<int64_t> order,
                      uint32_t seed) {
  const int64_t S = c * numChunks;
  return ChunkedSeq{
      Problem(2, S, S, 4, 2, 16, seed), c, numChunks, std::move(order), {}};
}

/// Runs the ranks holding stored tokens [start, start + L) (the pairs of
/// `ranks`, covering the sequence once) through the chunked forward and
/// backward in f32; each must match attention with its global positions,
/// and together the whole sequence's attention (dk, dv summed over ranks).
void expectChunkedRanks(const ChunkedSeq &s,
                        const std::vector<std::pair<int64_t, int64_t>> &ranks) {
  const Problem &w = s.whole;
  const int64_t qW = w.Nq * w.D;
  const Whole want = wholeSequence(w, s.docPtr());
  std::vector<float> dkSum(w.k.size(), 0.0f), dvSum(w.v.size(), 0.0f);
  for (auto [start, L] : ranks) {
    SCOPED_TRACE("tokens from " + std::to_string(start) +
                 ", L=" + std::to_string(L));
    const std::vector<int32_t> pos = s.positions(start, L);
    // The same rank through loomrt_attention_forward/backward with positions.
    Problem p = w;
    p.S = L;
    p.q = s.rows(w.q, qW, pos);
    p.dout = s.rows(w.dout, qW, pos);
    p.qPos = pos;
    p.qDoc = s.docs(pos);
    p.kDoc = s.doc;
    const KernelOut ref = runForward(p);
    std::vector<float> refDq(p.q.size()), refDk(p.k.size()), refDv(p.v.size());
    runBackward(p, ref.o, ref.lse, refDq, refDk, refDv, 0);

    std::vector<float> o(p.q.size(), 9.0f), lse(ref.lse.size(), 9.0f);
    loomrt_attention_chunked_forward(
        LOOMRT_F32, w.B, L, start, s.c, s.numChunks, s.orderPtr(), w.Nq, w.Nkv,
        w.D, w.scale, p.ptr(p.qDoc), p.ptr(p.kDoc), p.q.data(), w.k.data(),
        w.v.data(), o.data(), lse.data());
    expectClose(o, ref.o, 1e-5, 1e-5, "chunked o");
    expectClose(lse, ref.lse, 1e-5, 1e-5, "chunked lse");
    expectClose(o, s.rows(want.o, qW, pos), 1e-5, 1e-5, "chunked o (whole)");
    expectClose(lse, s.lse(want.lse, pos), 1e-5, 1e-5, "chunked lse (whole)");

    // Filled, not zeroed: the backward overwrites.
    std::vector<float> dq(p.q.size(), 9.0f), dk(w.k.size(), 9.0f),
        dv(w.v.size(), 9.0f);
    loomrt_attention_chunked_backward(
        LOOMRT_F32, w.B, L, start, s.c, s.numChunks, s.orderPtr(), w.Nq, w.Nkv,
        w.D, w.scale, p.ptr(p.qDoc), p.ptr(p.kDoc), p.q.data(), w.k.data(),
        w.v.data(), o.data(), lse.data(), p.dout.data(), dq.data(), dk.data(),
        dv.data());
    expectClose(dq, refDq, 1e-5, 1e-4, "chunked dq");
    expectClose(dk, refDk, 1e-5, 1e-4, "chunked dk");
    expectClose(dv, refDv, 1e-5, 1e-4, "chunked dv");
    expectClose(dq, s.rows(want.dq, qW, pos), 1e-5, 1e-4, "chunked dq (whole)");
    for (size_t x = 0; x < dk.size(); ++x) {
      dkSum[x] += dk[x];
      dvSum[x] += dv[x];
    }
  }
  expectClose(dkSum, want.dk, 1e-5, 1e-4, "dk summed over ranks");
  expectClose(dvSum, want.dv, 1e-5, 1e-4, "dv summed over ranks");
}

/// Rank r of cp in the load-balanced layout: stored chunks 2r and 2r+1.
std::vector<std::pair<int64_t, int64_t>> loadBalancedRanks(int64_t cp,
                                                           int64_t c) {
  std::vector<std::pair<int64_t, int64_t>> ranks;
  for (int64_t r = 0; r < cp; ++r)
    ranks.emplace_back(r * 2 * c, 2 * c);
  return ranks;
}
} // namespace

TEST(AttentionChunkedTest, LoadBalancedRanksEqualWholeSequence) {
  for (int64_t cp : {1, 2, 4}) {
    SCOPED_TRACE("cp=" + std::to_string(cp));
    const int64_t c = 5;
    const ChunkedSeq s = chunkedSeq(c, int32_t(2 * cp), loadBalancedOrder(cp),
                                    uint32_t(80 + cp));
    expectChunkedRanks(s, loadBalancedRanks(cp, c));
  }
}

TEST(AttentionChunkedTest, DocumentsMaskAcrossChunks) {
  // Document boundaries inside chunks, different per batch entry: the
  // whole-key piece of a later chunk then has fully masked rows (lse -inf),
  // which the merge must ignore.
  for (int64_t cp : {2, 4}) {
    SCOPED_TRACE("cp=" + std::to_string(cp));
    const int64_t c = 5;
    ChunkedSeq s = chunkedSeq(c, int32_t(2 * cp), loadBalancedOrder(cp),
                              uint32_t(90 + cp));
    const int64_t S = s.whole.S;
    s.doc.resize(size_t(2 * S));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t t = 0; t < S; ++t)
        s.doc[size_t(b * S + t)] =
            int32_t(t >= S / 3 + b) + int32_t(t >= S - 3);
    expectChunkedRanks(s, loadBalancedRanks(cp, c));
  }
}

TEST(AttentionChunkedTest, NaturalOrderUnevenRanks) {
  // order NULL: ranks hold contiguous runs of chunks, of different lengths;
  // 70-token chunks make the whole-key pieces span several kernel blocks.
  const int64_t c = 70;
  const ChunkedSeq s = chunkedSeq(c, 6, {}, 100);
  expectChunkedRanks(s, {{0, 2 * c}, {2 * c, 3 * c}, {5 * c, c}});
}

TEST(AttentionChunkedTest, Bf16LoadBalancedRanks) {
  // bf16 storage: the merge and the gradients accumulated over pieces round
  // once more than the whole-sequence kernel; lse stays f32.
  const int64_t cp = 2, c = 6;
  ChunkedSeq s = chunkedSeq(c, int32_t(2 * cp), loadBalancedOrder(cp), 110);
  Problem &w = s.whole;
  for (auto *t : {&w.q, &w.k, &w.v, &w.dout})
    *t = rounded(*t, LOOMRT_BF16);
  const int64_t qW = w.Nq * w.D;
  const Whole want = wholeSequence(w);
  const loomrt_dtype bf = LOOMRT_BF16;
  const Buf k(bf, w.k), v(bf, w.v);
  std::vector<float> dkSum(w.k.size(), 0.0f), dvSum(w.v.size(), 0.0f);
  for (auto [start, L] : loadBalancedRanks(cp, c)) {
    SCOPED_TRACE("tokens from " + std::to_string(start));
    const std::vector<int32_t> pos = s.positions(start, L);
    const Buf q(bf, s.rows(w.q, qW, pos)), dout(bf, s.rows(w.dout, qW, pos));
    Buf o(bf, q.size());
    std::vector<float> lse(size_t(w.B * w.Nq * L));
    loomrt_attention_chunked_forward(bf, w.B, L, start, c, s.numChunks,
                                     s.orderPtr(), w.Nq, w.Nkv, w.D, w.scale,
                                     nullptr, nullptr, q.data(), k.data(),
                                     v.data(), o.data(), lse.data());
    expectClose(o.values(), s.rows(want.o, qW, pos), 1e-2, 1.0 / 128,
                "bf16 chunked o");
    expectClose(lse, s.lse(want.lse, pos), 1e-5, 1e-5, "bf16 chunked lse");

    Buf dq(bf, q.size()), dk(bf, w.k.size()), dv(bf, w.v.size());
    loomrt_attention_chunked_backward(
        bf, w.B, L, start, c, s.numChunks, s.orderPtr(), w.Nq, w.Nkv, w.D,
        w.scale, nullptr, nullptr, q.data(), k.data(), v.data(), o.data(),
        lse.data(), dout.data(), dq.data(), dk.data(), dv.data());
    expectClose(dq.values(), s.rows(want.dq, qW, pos), 1e-2, 1.0 / 64,
                "bf16 chunked dq");
    const std::vector<float> dkr = dk.values(), dvr = dv.values();
    for (size_t x = 0; x < dkr.size(); ++x) {
      dkSum[x] += dkr[x];
      dvSum[x] += dvr[x];
    }
  }
  expectClose(dkSum, want.dk, 1e-2, 1.0 / 64, "bf16 dk summed over ranks");
  expectClose(dvSum, want.dv, 1e-2, 1.0 / 64, "bf16 dv summed over ranks");
}

TEST(AttentionChunkedTest, EmptyRankGivesZeroKeyGradients) {
  // No local tokens: no query sees any key, so dk and dv are all zero; the
  // forward and B == 0 touch nothing.
  std::vector<float> t(64, 7.0f), dk(40, 7.0f), dv(40, 7.0f);
  float *x = t.data();
  loomrt_attention_chunked_forward(LOOMRT_F32, 1, 0, 2, 2, 5, nullptr, 1, 1, 4,
                                   1.0f, nullptr, nullptr, x, x, x, x, x);
  loomrt_attention_chunked_backward(LOOMRT_F32, 0, 2, 0, 2, 5, nullptr, 1, 1, 4,
                                    1.0f, nullptr, nullptr, x, x, x, x, x, x, x,
                                    x, x);
  for (float e : t)
    EXPECT_EQ(e, 7.0f);
  loomrt_attention_chunked_backward(LOOMRT_F32, 1, 0, 2, 2, 5, nullptr, 1, 1, 4,
                                    1.0f, nullptr, nullptr, x, x, x, x, x, x, x,
                                    dk.data(), dv.data());
  for (size_t i = 0; i < dk.size(); ++i) {
    EXPECT_EQ(dk[i], 0.0f) << i;
    EXPECT_EQ(dv[i], 0.0f) << i;
  }
}

TEST(AttentionChunkedDeathTest, MisuseAbortsWithTheFunctionName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<float> t(256, 0.0f);
  float *x = t.data();
  const int32_t doc[64] = {};
  const int64_t badOrder[3] = {0, 2, 3}, order[3] = {2, 0, 1};
  // chunk 2, 3 chunks: S = 6.
  EXPECT_DEATH(loomrt_attention_chunked_forward(LOOMRT_F32, 1, 2, 0, 0, 3,
                                                nullptr, 1, 1, 4, 1.0f, nullptr,
                                                nullptr, x, x, x, x, x),
               "loomrt_attention_chunked_forward: bad chunking: chunk = 0");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 0, 2, 0, nullptr, 1, 1, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x, x, x, x, x),
               "loomrt_attention_chunked_backward: bad chunking: chunk = 2, "
               "num_chunks = 0");
  EXPECT_DEATH(loomrt_attention_chunked_forward(LOOMRT_F32, 1, 3, 0, 2, 3,
                                                nullptr, 1, 1, 4, 1.0f, nullptr,
                                                nullptr, x, x, x, x, x),
               "loomrt_attention_chunked_forward: L = 3 local tokens is not a "
               "multiple of chunk = 2");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 1, 2, 3, nullptr, 1, 1, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x, x, x, x, x),
               "loomrt_attention_chunked_backward: start = 1 is not a chunk "
               "boundary");
  EXPECT_DEATH(loomrt_attention_chunked_forward(LOOMRT_F32, 1, 4, 4, 2, 3,
                                                nullptr, 1, 1, 4, 1.0f, nullptr,
                                                nullptr, x, x, x, x, x),
               "loomrt_attention_chunked_forward: tokens \\[4, 8\\) beyond a "
               "sequence of 6");
  // Every entry is checked, not only those of the rank's chunks.
  EXPECT_DEATH(loomrt_attention_chunked_forward(
                   LOOMRT_F32, 1, 2, 0, 2, 3, badOrder, 1, 1, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x),
               "loomrt_attention_chunked_forward: order\\[2\\] = 3 is not a "
               "chunk of 3");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 0, 2, 3, order, 1, 1, 4, 1.0f, doc,
                   nullptr, x, x, x, x, x, x, x, x, x),
               "loomrt_attention_chunked_backward: q_doc and k_doc must both");
  EXPECT_DEATH(loomrt_attention_chunked_forward(LOOMRT_F32, 1, 2, 0, 2, 3,
                                                order, 1, 1, 4, 1.0f, nullptr,
                                                nullptr, x, x, nullptr, x, x),
               "loomrt_attention_chunked_forward: NULL tensor");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 0, 2, 3, order, 1, 1, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x, x, nullptr, x, x),
               "loomrt_attention_chunked_backward: NULL tensor");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 0, 2, 3, order, 1, 1, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x, x, x, nullptr, x),
               "loomrt_attention_chunked_backward: NULL tensor");
  EXPECT_DEATH(loomrt_attention_chunked_forward(LOOMRT_F32, -1, 2, 0, 2, 3,
                                                nullptr, 1, 1, 4, 1.0f, nullptr,
                                                nullptr, x, x, x, x, x),
               "loomrt_attention_chunked_forward: bad sizes");
  EXPECT_DEATH(loomrt_attention_chunked_backward(
                   LOOMRT_F32, 1, 2, 0, 2, 3, nullptr, 3, 2, 4, 1.0f, nullptr,
                   nullptr, x, x, x, x, x, x, x, x, x),
               "loomrt_attention_chunked_backward: 3 query heads are not a "
               "multiple of 2 kv heads");
}
