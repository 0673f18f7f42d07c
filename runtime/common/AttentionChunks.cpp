//===- AttentionChunks.cpp - All-gather attention of causal CP ------------===//
//
// Part of the Loom project.
//
// loomrt_attention_chunked_forward/backward: a context-parallel rank's
// queries against the whole sequence's keys (TransformerEngine's
// AttnFuncWithCPAndKVAllGather), for any chunk order. Backend-neutral like
// AttentionSections.cpp: tensors are touched only through other loomrt_*
// calls, so the same code is linked into every backend.
//
// A local query chunk that is global chunk g sees keys [0, g c) whole and
// keys [g c, (g+1) c) causally. Both pieces are position-free attention
// calls (no mask, or the top-left causal mask of a square tile): the cuda
// backend hands those to cuDNN's fused attention, which one call with
// position arrays would not get. Per batch entry b the rows of a chunk are
// contiguous; only its lse entries, strided in [B,Nq,L], go through a
// contiguous [Nq,c] temporary.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Composed.h"
#include "runtime/common/Errors.h"

#include "runtime/abi/Common.h.inc"

#include <cstdint>

using namespace loomrt;

namespace {

/// The layout of a chunked call, in elements and bytes.
struct ChunkDims {
  int64_t B, L, c, S, Nq, Nkv, D;
  int64_t first;        ///< the stored chunk of the rank's first token
  const int64_t *order; ///< stored chunk -> global chunk; NULL: identity
  int64_t qRow;         ///< bytes of one q/o row (Nq*D elements)
  int64_t kvRow;        ///< bytes of one k/v row (Nkv*D elements)

  /// The global chunk of local chunk h.
  int64_t global(int64_t h) const {
    return order ? order[first + h] : first + h;
  }
  /// Bytes of one chunk's [Nq,c] lse.
  int64_t lseBytes() const { return Nq * c * int64_t(sizeof(float)); }
};

/// The layout of a call the front has checked (runtime/common/Rules.cpp).
ChunkDims chunkDims(loomrt_dtype dtype, int64_t B, int64_t L, int64_t start,
                    int64_t chunk, int32_t numChunks, const int64_t *order,
                    int64_t Nq, int64_t Nkv, int64_t D) {
  const int64_t es = dtypeSize(dtype);
  return ChunkDims{B,     L,           chunk,       chunk * numChunks,
                   Nq,    Nkv,         D,           start / chunk,
                   order, Nq * D * es, Nkv * D * es};
}

} // namespace

void common::loomrt_attention_chunked_forward(
    loomrt_dtype dtype, int64_t B, int64_t L, int64_t start, int64_t chunk,
    int32_t num_chunks, const int64_t *order, int64_t Nq, int64_t Nkv,
    int64_t D, float scale, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, void *o, float *lse) {
  const ChunkDims d =
      chunkDims(dtype, B, L, start, chunk, num_chunks, order, Nq, Nkv, D);
  if (B == 0 || L == 0)
    return;
  const int64_t c = d.c, S = d.S, lseRow = c * int64_t(sizeof(float));

  // The diagonal tile's o and lse (merged into the chunk's rows of o) and
  // the chunk's lse before it is scattered into [B,Nq,L].
  const int64_t oBytes = c * d.qRow;
  Scratch s(Scratch::round(oBytes) + 2 * Scratch::round(d.lseBytes()));
  void *oDiag = s.take(oBytes);
  float *lseDiag = static_cast<float *>(s.take(d.lseBytes()));
  float *lseChunk = static_cast<float *>(s.take(d.lseBytes()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < L / c; ++h) {
      const int64_t g = d.global(h);
      // First query row, first key row of b, first key row of chunk g.
      const int64_t qr = b * L + h * c, kr = b * S, gr = kr + g * c;
      const void *qh = at(q, qr * d.qRow);
      void *oh = at(o, qr * d.qRow);
      // Every key of the earlier chunks is visible: no mask.
      if (g > 0)
        loomrt_attention_forward(
            dtype, 1, c, g * c, Nq, Nkv, D, scale,
            /*causal=*/0, nullptr, nullptr, docAt(q_doc, qr), docAt(k_doc, kr),
            qh, at(k, kr * d.kvRow), at(v, kr * d.kvRow), oh, lseChunk);
      // Query and key chunk coincide: causal on local indices is exact.
      loomrt_attention_forward(dtype, 1, c, c, Nq, Nkv, D, scale,
                               /*causal=*/1, nullptr, nullptr, docAt(q_doc, qr),
                               docAt(k_doc, gr), qh, at(k, gr * d.kvRow),
                               at(v, gr * d.kvRow), g > 0 ? oDiag : oh,
                               g > 0 ? lseDiag : lseChunk);
      if (g > 0)
        loomrt_attention_merge(dtype, 1, c, Nq, D, oh, lseChunk, oDiag,
                               lseDiag);
      loomrt_copy_2d(lse + b * Nq * L + h * c, L * int64_t(sizeof(float)),
                     lseChunk, lseRow, Nq, lseRow);
    }
}

void common::loomrt_attention_chunked_backward(
    loomrt_dtype dtype, int64_t B, int64_t L, int64_t start, int64_t chunk,
    int32_t num_chunks, const int64_t *order, int64_t Nq, int64_t Nkv,
    int64_t D, float scale, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, const void *o,
    const float *lse, const void *dout, void *dq, void *dk, void *dv) {
  const ChunkDims d =
      chunkDims(dtype, B, L, start, chunk, num_chunks, order, Nq, Nkv, D);
  if (B == 0)
    return;
  // Keys no local query sees get zero gradients (all of them when L == 0),
  // and the pieces below accumulate.
  loomrt_zero(dk, B * d.S * d.kvRow);
  loomrt_zero(dv, B * d.S * d.kvRow);
  if (L == 0)
    return;
  loomrt_zero(dq, B * L * d.qRow);
  const int64_t c = d.c, S = d.S, lseRow = c * int64_t(sizeof(float));

  Scratch s(d.lseBytes());
  float *lseChunk = static_cast<float *>(s.take(d.lseBytes()));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < L / c; ++h) {
      const int64_t g = d.global(h);
      const int64_t qr = b * L + h * c, kr = b * S, gr = kr + g * c;
      const int64_t qOff = qr * d.qRow;
      // The chunk's lse rows, contiguous as a [1,Nq,c] call reads them.
      loomrt_copy_2d(lseChunk, lseRow, lse + b * Nq * L + h * c,
                     L * int64_t(sizeof(float)), Nq, lseRow);
      if (g > 0)
        loomrt_attention_backward(
            dtype, 1, c, g * c, Nq, Nkv, D, scale, /*causal=*/0, nullptr,
            nullptr, docAt(q_doc, qr), docAt(k_doc, kr), at(q, qOff),
            at(k, kr * d.kvRow), at(v, kr * d.kvRow), at(o, qOff), lseChunk,
            at(dout, qOff), at(dq, qOff), at(dk, kr * d.kvRow),
            at(dv, kr * d.kvRow), /*accumulate=*/1);
      loomrt_attention_backward(
          dtype, 1, c, c, Nq, Nkv, D, scale, /*causal=*/1, nullptr, nullptr,
          docAt(q_doc, qr), docAt(k_doc, gr), at(q, qOff), at(k, gr * d.kvRow),
          at(v, gr * d.kvRow), at(o, qOff), lseChunk, at(dout, qOff),
          at(dq, qOff), at(dk, gr * d.kvRow), at(dv, gr * d.kvRow),
          /*accumulate=*/1);
    }
}
