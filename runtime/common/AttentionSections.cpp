//===- AttentionSections.cpp - Ring attention sections of causal CP -------===//
//
// Part of the Loom project.
//
// loomrt_attention_section_forward/backward: one tile of TransformerEngine's
// AttnFuncWithCPAndKVP2P (diagonal, lower or upper triangle) on Megatron's
// load-balanced layout. Backend-neutral: tensors are touched only through
// other loomrt_* calls (on the cuda backend they are device memory), so the
// same code is linked into every backend.
//
// Per batch b the rows a section needs are contiguous: kv half 0 of b is the
// first c rows of b's block, query half 1 of b is rows c..2c-1. Only the
// half-1 lse entries, strided in [B,Nq,L], go through a [B,Nq,c] temporary.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Composed.h"
#include "runtime/common/Errors.h"

#include "runtime/abi/Common.h.inc"

#include <cstdint>

using namespace loomrt;

namespace {

/// The sizes of a section call, in elements and bytes.
struct SectionDims {
  int64_t B, L, c, Nq, Nkv, D;
  int64_t es;    ///< bytes per element of dtype
  int64_t qRow;  ///< bytes of one q/o row (Nq*D elements)
  int64_t kvRow; ///< bytes of one k/v row (Nkv*D elements)
};

SectionDims sectionDims(loomrt_dtype dtype, int64_t B, int64_t L, int64_t Nq,
                        int64_t Nkv, int64_t D) {
  const int64_t es = dtypeSize(dtype);
  return SectionDims{B, L, L / 2, Nq, Nkv, D, es, Nq * D * es, Nkv * D * es};
}

/// Copies the half-1 entries lse[b, h, c..2c) of a [B,Nq,L] lse to a
/// contiguous [B,Nq,c] ...
void gatherLseHalf1(const SectionDims &d, const float *full, float *half) {
  const int64_t rowBytes = d.c * int64_t(sizeof(float));
  loomrt_copy_2d(half, rowBytes, full + d.c, d.L * int64_t(sizeof(float)),
                 d.B * d.Nq, rowBytes);
}

/// ... and back.
void scatterLseHalf1(const SectionDims &d, const float *half, float *full) {
  const int64_t rowBytes = d.c * int64_t(sizeof(float));
  loomrt_copy_2d(full + d.c, d.L * int64_t(sizeof(float)), half, rowBytes,
                 d.B * d.Nq, rowBytes);
}

} // namespace

// The front has checked the arguments (runtime/common/Rules.cpp).
void common::loomrt_attention_section_forward(
    loomrt_dtype dtype, int64_t B, int64_t L, int64_t Nq, int64_t Nkv,
    int64_t D, float scale, int32_t section, const int32_t *q_doc,
    const int32_t *k_doc, const void *q, const void *k, const void *v,
    void *o_acc, float *lse_acc) {
  if (B == 0 || L == 0)
    return;
  const SectionDims d = sectionDims(dtype, B, L, Nq, Nkv, D);
  const int64_t c = d.c;

  if (section == LOOMRT_SECTION_DIAGONAL || section == LOOMRT_SECTION_LOWER) {
    // Every query row: the tile has the accumulators' shape.
    const int64_t oBytes = B * L * d.qRow;
    const int64_t lseBytes = B * Nq * L * int64_t(sizeof(float));
    Scratch s(Scratch::round(oBytes) + lseBytes);
    void *oPart = s.take(oBytes);
    float *lsePart = static_cast<float *>(s.take(lseBytes));
    if (section == LOOMRT_SECTION_DIAGONAL) {
      // Local indices as positions: chunk r precedes chunk 2cp-1-r.
      loomrt_attention_forward(dtype, B, L, L, Nq, Nkv, D, scale,
                               /*causal=*/1, nullptr, nullptr, q_doc, k_doc, q,
                               k, v, oPart, lsePart);
    } else {
      // Keys of chunk j < r precede every query; chunk 2cp-1-j follows them
      // all. Per batch, kv half 0 is the first c rows of the block.
      for (int64_t b = 0; b < B; ++b)
        loomrt_attention_forward(
            dtype, 1, L, c, Nq, Nkv, D, scale, /*causal=*/0, nullptr, nullptr,
            docAt(q_doc, b * L), docAt(k_doc, b * L), at(q, b * L * d.qRow),
            at(k, b * L * d.kvRow),
            at(v, b * L * d.kvRow), at(oPart, b * L * d.qRow),
            lsePart + b * Nq * L);
    }
    loomrt_attention_merge(dtype, B, L, Nq, D, o_acc, lse_acc, oPart, lsePart);
    return;
  }

  // UPPER: query half 1 (chunk 2cp-1-r) sees both chunks of block j > r;
  // query half 0 (chunk r < j) sees none of them.
  const int64_t oBytes = B * c * d.qRow;
  const int64_t lseBytes = B * Nq * c * int64_t(sizeof(float));
  Scratch s(Scratch::round(oBytes) + 2 * Scratch::round(lseBytes));
  void *oPart = s.take(oBytes);
  float *lsePart = static_cast<float *>(s.take(lseBytes));
  float *lseAcc1 = static_cast<float *>(s.take(lseBytes));
  for (int64_t b = 0; b < B; ++b)
    loomrt_attention_forward(dtype, 1, c, L, Nq, Nkv, D, scale, /*causal=*/0,
                             nullptr, nullptr, docAt(q_doc, b * L + c),
                             docAt(k_doc, b * L), at(q, (b * L + c) * d.qRow),
                             at(k, b * L * d.kvRow), at(v, b * L * d.kvRow),
                             at(oPart, b * c * d.qRow), lsePart + b * Nq * c);
  gatherLseHalf1(d, lse_acc, lseAcc1);
  for (int64_t b = 0; b < B; ++b)
    loomrt_attention_merge(dtype, 1, c, Nq, D, at(o_acc, (b * L + c) * d.qRow),
                           lseAcc1 + b * Nq * c, at(oPart, b * c * d.qRow),
                           lsePart + b * Nq * c);
  scatterLseHalf1(d, lseAcc1, lse_acc);
}

void common::loomrt_attention_section_backward(
    loomrt_dtype dtype, int64_t B, int64_t L, int64_t Nq, int64_t Nkv,
    int64_t D, float scale, int32_t section, const int32_t *q_doc,
    const int32_t *k_doc, const void *q, const void *k, const void *v,
    const void *o, const float *lse, const void *dout, void *dq, void *dk,
    void *dv) {
  if (B == 0 || L == 0)
    return;
  const SectionDims d = sectionDims(dtype, B, L, Nq, Nkv, D);
  const int64_t c = d.c;

  switch (section) {
  case LOOMRT_SECTION_DIAGONAL:
    loomrt_attention_backward(dtype, B, L, L, Nq, Nkv, D, scale, /*causal=*/1,
                              nullptr, nullptr, q_doc, k_doc, q, k, v, o, lse,
                              dout, dq, dk, dv, /*accumulate=*/1);
    return;
  case LOOMRT_SECTION_LOWER:
    // All query rows against kv half 0; dk/dv of half 1 get nothing.
    for (int64_t b = 0; b < B; ++b) {
      const int64_t qOff = b * L * d.qRow, kvOff = b * L * d.kvRow;
      loomrt_attention_backward(dtype, 1, L, c, Nq, Nkv, D, scale, /*causal=*/0,
                                nullptr, nullptr, docAt(q_doc, b * L),
                                docAt(k_doc, b * L), at(q, qOff),
                                at(k, kvOff), at(v, kvOff), at(o, qOff),
                                lse + b * Nq * L, at(dout, qOff), at(dq, qOff),
                                at(dk, kvOff), at(dv, kvOff), /*accumulate=*/1);
    }
    return;
  default: {
    // UPPER: query half 1 against the whole block; dq of half 0 untouched.
    const int64_t lseBytes = B * Nq * c * int64_t(sizeof(float));
    Scratch s(lseBytes);
    float *lse1 = static_cast<float *>(s.take(lseBytes));
    gatherLseHalf1(d, lse, lse1);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t qOff = (b * L + c) * d.qRow, kvOff = b * L * d.kvRow;
      loomrt_attention_backward(dtype, 1, c, L, Nq, Nkv, D, scale, /*causal=*/0,
                                nullptr, nullptr, docAt(q_doc, b * L + c),
                                docAt(k_doc, b * L), at(q, qOff),
                                at(k, kvOff), at(v, kvOff), at(o, qOff),
                                lse1 + b * Nq * c, at(dout, qOff), at(dq, qOff),
                                at(dk, kvOff), at(dv, kvOff), /*accumulate=*/1);
    }
    return;
  }
  }
}
