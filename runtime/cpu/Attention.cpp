//===- Attention.cpp - Masked GQA attention and its backward ----*- C++ -*-===//
//
// Blocked over query rows: for one (batch, head, block of kQueryBlock
// queries) the scores against all keys are one GEMM, the masked softmax is a
// row loop, and p*v is a second GEMM. Independent blocks run in parallel on
// the OpenMP threads (each GEMM then runs on its thread alone); when there
// are fewer blocks than threads, blocks run one after another and the GEMMs
// and row loops inside them are parallel instead. The backward recomputes
// probabilities from the saved lse, as flash attention does, and never
// materializes more than one block per thread.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

using namespace loomrt;

namespace {
constexpr int64_t kQueryBlock = 128;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// The sizes of one call (q [B,S,Nq,D], k/v [B,Sk,Nkv,D]).
struct Dims {
  int64_t B, S, Sk, Nq, Nkv, D;
};

/// The mask of one batch entry: key j is visible from query i iff
/// (!causal || kPos[j] <= qPos[i]) && (no docs || qDoc[i] == kDoc[j]).
struct Mask {
  bool causal;
  std::vector<int32_t> qPos, kPos;
  const int32_t *qDoc, *kDoc;

  Mask(const Dims &d, int64_t b, bool causal, const int32_t *qPosAll,
       const int32_t *kPosAll, const int32_t *qDocAll, const int32_t *kDocAll)
      : causal(causal), qPos(size_t(d.S)), kPos(size_t(d.Sk)),
        qDoc(qDocAll ? qDocAll + b * d.S : nullptr),
        kDoc(kDocAll ? kDocAll + b * d.Sk : nullptr) {
    for (int64_t i = 0; i < d.S; ++i)
      qPos[size_t(i)] = qPosAll ? qPosAll[b * d.S + i] : int32_t(i);
    for (int64_t j = 0; j < d.Sk; ++j)
      kPos[size_t(j)] = kPosAll ? kPosAll[b * d.Sk + j] : int32_t(j);
  }
  bool visible(int64_t i, int64_t j) const {
    if (causal && kPos[size_t(j)] > qPos[size_t(i)])
      return false;
    return !qDoc || qDoc[i] == kDoc[j];
  }
  /// One past the last key that any query of [i0, i0 + rows) can see
  /// causally. Keys from there on are hidden from the whole block, so its
  /// GEMMs stop there: half the work of causal self-attention.
  int64_t keyEnd(int64_t i0, int64_t rows) const {
    int64_t end = int64_t(kPos.size());
    if (!causal)
      return end;
    const int32_t maxQ =
        *std::max_element(qPos.begin() + i0, qPos.begin() + i0 + rows);
    while (end > 0 && kPos[size_t(end - 1)] > maxQ)
      --end;
    return end;
  }
};
} // namespace

void loomrt::backend::loomrt_attention_forward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t Sk, int64_t Nq,
    int64_t Nkv, int64_t D, float scale, int32_t causal, const int32_t *q_pos,
    const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, void *o, float *lse) {
  LOOMRT_DEVICE_CALL(q_pos, k_pos, q_doc, k_doc, q, k, v, o, lse);
  const Dims d{B, S, Sk, Nq, Nkv, D};
  if (B == 0 || S == 0)
    return;
  const int64_t group = Nq / Nkv;
  const int64_t qLd = Nq * D, kvLd = Nkv * D;
  In qf(dtype, q, B * S * qLd), kf(dtype, Sk ? k : nullptr, B * Sk * kvLd),
      vf(dtype, Sk ? v : nullptr, B * Sk * kvLd);
  Out of(dtype, o, B * S * qLd, false);
  std::vector<Mask> masks;
  for (int64_t b = 0; b < B; ++b)
    masks.emplace_back(d, b, causal != 0, q_pos, k_pos, q_doc, k_doc);

  const int64_t numBlocks = (S + kQueryBlock - 1) / kQueryBlock;
  const int64_t numTasks = B * Nq * numBlocks;
  const size_t scratch =
      size_t(std::min(S, kQueryBlock) * std::max<int64_t>(Sk, 1));
  auto task = [&](int64_t t, float *sc) {
    const int64_t b = t / (Nq * numBlocks), h = (t / numBlocks) % Nq;
    const int64_t i0 = (t % numBlocks) * kQueryBlock;
    const int64_t rows = std::min(kQueryBlock, S - i0);
    const Mask &mask = masks[size_t(b)];
    const float *qb = qf.get() + (b * S + i0) * qLd + h * D;
    float *ob = of.get() + (b * S + i0) * qLd + h * D;
    float *lseb = lse + (b * Nq + h) * S + i0;
    // Scores only for keys [0, kEnd); the rest are masked for every row.
    const int64_t kEnd = mask.keyEnd(i0, rows);
    if (kEnd == 0) {
      for (int64_t r = 0; r < rows; ++r) {
        std::fill(ob + r * qLd, ob + r * qLd + D, 0.0f);
        lseb[r] = kNegInf;
      }
      return;
    }
    const float *kb = kf.get() + b * Sk * kvLd + (h / group) * D;
    const float *vb = vf.get() + b * Sk * kvLd + (h / group) * D;
    sgemm(false, true, rows, kEnd, D, scale, qb, qLd, kb, kvLd, 0.0f, sc, kEnd);
    // Masked softmax in place; a row without visible keys becomes zeros, so
    // the p*v GEMM writes o = 0 for it.
#pragma omp parallel for schedule(static) if (!omp_in_parallel() &&            \
                                              rows * kEnd > kMinParallelWork)
    for (int64_t r = 0; r < rows; ++r) {
      float *row = sc + r * kEnd;
      float m = kNegInf;
      for (int64_t j = 0; j < kEnd; ++j) {
        if (!mask.visible(i0 + r, j))
          row[j] = kNegInf;
        m = std::max(m, row[j]);
      }
      if (m == kNegInf) {
        std::fill(row, row + kEnd, 0.0f);
        lseb[r] = kNegInf;
        continue;
      }
      for (int64_t j = 0; j < kEnd; ++j)
        row[j] = std::exp(row[j] - m); // exp(-inf) == 0 for masked keys
      const float sum = sumF32(row, kEnd);
      const float inv = 1.0f / sum;
      for (int64_t j = 0; j < kEnd; ++j)
        row[j] *= inv;
      lseb[r] = m + std::log(sum);
    }
    sgemm(false, false, rows, D, kEnd, 1.0f, sc, kEnd, vb, kvLd, 0.0f, ob, qLd);
  };

  if (numTasks >= omp_get_max_threads()) {
#pragma omp parallel
    {
      std::vector<float> sc(scratch);
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < numTasks; ++t)
        task(t, sc.data());
    }
  } else {
    std::vector<float> sc(scratch);
    for (int64_t t = 0; t < numTasks; ++t)
      task(t, sc.data());
  }
  of.commit();
}

void loomrt::backend::loomrt_attention_merge(loomrt_dtype dtype, int64_t B,
                                             int64_t S, int64_t Nq, int64_t D,
                                             void *o_acc, float *lse_acc,
                                             const void *o_part,
                                             const float *lse_part) {
  LOOMRT_DEVICE_CALL(o_acc, lse_acc, o_part, lse_part);
  if (B * S == 0)
    return;
  const int64_t n = B * S * Nq * D;
  Out acc(dtype, o_acc, n, true);
  In part(dtype, o_part, n);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t bs = 0; bs < B * S; ++bs) {
    const int64_t b = bs / S, s = bs % S;
    for (int64_t h = 0; h < Nq; ++h) {
      float &l1 = lse_acc[(b * Nq + h) * S + s];
      const float l2 = lse_part[(b * Nq + h) * S + s];
      float *o1 = acc.get() + (bs * Nq + h) * D;
      const float *o2 = part.get() + (bs * Nq + h) * D;
      if (l2 == kNegInf)
        continue;
      if (l1 == kNegInf) {
        std::copy(o2, o2 + D, o1);
        l1 = l2;
        continue;
      }
      // l = log(e^l1 + e^l2) = max + log1p(e^-|l1 - l2|), overflow-free.
      const float l =
          std::max(l1, l2) + std::log1p(std::exp(-std::fabs(l1 - l2)));
      const float w1 = std::exp(l1 - l), w2 = std::exp(l2 - l);
      for (int64_t i = 0; i < D; ++i)
        o1[i] = o1[i] * w1 + o2[i] * w2;
      l1 = l;
    }
  }
  acc.commit();
}

// With P = softmax probabilities (recomputed), Di = sum_d dO_i * O_i:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Di),
//   dQ = scale * dS K,  dK = scale * dS^T Q.
void loomrt::backend::loomrt_attention_backward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t Sk, int64_t Nq,
    int64_t Nkv, int64_t D, float scale, int32_t causal, const int32_t *q_pos,
    const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, const void *o,
    const float *lse, const void *dout, void *dq, void *dk, void *dv,
    int32_t accumulate) {
  LOOMRT_DEVICE_CALL(q_pos, k_pos, q_doc, k_doc, q, k, v, o, lse, dout, dq, dk, dv);
  const Dims d{B, S, Sk, Nq, Nkv, D};
  if (B == 0 || (S == 0 && Sk == 0))
    return;
  const int64_t group = Nq / Nkv;
  const int64_t qLd = Nq * D, kvLd = Nkv * D;
  const int64_t qN = B * S * qLd, kvN = B * Sk * kvLd;
  Out dqf(dtype, S ? dq : nullptr, qN, accumulate != 0);
  Out dkf(dtype, Sk ? dk : nullptr, kvN, accumulate != 0);
  Out dvf(dtype, Sk ? dv : nullptr, kvN, accumulate != 0);
  if (!accumulate) {
    if (S)
      std::fill(dqf.get(), dqf.get() + qN, 0.0f);
    if (Sk) {
      std::fill(dkf.get(), dkf.get() + kvN, 0.0f);
      std::fill(dvf.get(), dvf.get() + kvN, 0.0f);
    }
  }
  if (S && Sk) {
    In qf(dtype, q, qN), kf(dtype, k, kvN), vf(dtype, v, kvN), of(dtype, o, qN),
        dof(dtype, dout, qN);
    std::vector<Mask> masks;
    for (int64_t b = 0; b < B; ++b)
      masks.emplace_back(d, b, causal != 0, q_pos, k_pos, q_doc, k_doc);
    const size_t scratch = size_t(std::min(S, kQueryBlock) * Sk);

    // One task per (batch, kv head): it owns that head's dK/dV and the dQ of
    // the query heads sharing it, so tasks never write the same memory.
    auto task = [&](int64_t t, float *p, float *dp) {
      const int64_t b = t / Nkv, kvh = t % Nkv;
      const Mask &mask = masks[size_t(b)];
      const float *kb = kf.get() + b * Sk * kvLd + kvh * D;
      const float *vb = vf.get() + b * Sk * kvLd + kvh * D;
      float *dkb = dkf.get() + b * Sk * kvLd + kvh * D;
      float *dvb = dvf.get() + b * Sk * kvLd + kvh * D;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t i0 = 0; i0 < S; i0 += kQueryBlock) {
          const int64_t rows = std::min(kQueryBlock, S - i0);
          const int64_t qOff = (b * S + i0) * qLd + h * D;
          const float *qb = qf.get() + qOff, *ob = of.get() + qOff,
                      *dob = dof.get() + qOff;
          float *dqb = dqf.get() + qOff;
          const float *lseb = lse + (b * Nq + h) * S + i0;
          const int64_t kEnd = mask.keyEnd(i0, rows);
          if (kEnd == 0)
            continue; // no key visible: no gradient flows
          sgemm(false, true, rows, kEnd, D, scale, qb, qLd, kb, kvLd, 0.0f, p,
                kEnd);
          sgemm(false, true, rows, kEnd, D, 1.0f, dob, qLd, vb, kvLd, 0.0f, dp,
                kEnd);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() &&            \
                                              rows * kEnd > kMinParallelWork)
          for (int64_t r = 0; r < rows; ++r) {
            float *pr = p + r * kEnd, *dpr = dp + r * kEnd;
            const float l = lseb[r];
            float dot = 0.0f;
            for (int64_t i = 0; i < D; ++i)
              dot += dob[r * qLd + i] * ob[r * qLd + i];
            for (int64_t j = 0; j < kEnd; ++j) {
              // A fully masked row has lse = -inf and no probability mass.
              const float prob = (l != kNegInf && mask.visible(i0 + r, j))
                                     ? std::exp(pr[j] - l)
                                     : 0.0f;
              pr[j] = prob;
              dpr[j] = prob * (dpr[j] - dot);
            }
          }
          // dV += P^T dO ; dQ += scale dS K ; dK += scale dS^T Q.
          sgemm(true, false, kEnd, D, rows, 1.0f, p, kEnd, dob, qLd, 1.0f, dvb,
                kvLd);
          sgemm(false, false, rows, D, kEnd, scale, dp, kEnd, kb, kvLd, 1.0f,
                dqb, qLd);
          sgemm(true, false, kEnd, D, rows, scale, dp, kEnd, qb, qLd, 1.0f, dkb,
                kvLd);
        }
      }
    };

    const int64_t numTasks = B * Nkv;
    if (numTasks >= omp_get_max_threads()) {
#pragma omp parallel
      {
        std::vector<float> p(scratch), dp(scratch);
#pragma omp for schedule(dynamic)
        for (int64_t t = 0; t < numTasks; ++t)
          task(t, p.data(), dp.data());
      }
    } else {
      std::vector<float> p(scratch), dp(scratch);
      for (int64_t t = 0; t < numTasks; ++t)
        task(t, p.data(), dp.data());
    }
  }
  dqf.commit();
  dkf.commit();
  dvf.commit();
}
