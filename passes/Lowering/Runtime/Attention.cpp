//===- Attention.cpp - Runtime lowerings of attention ------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Attention and its gradient, with the causal mask on global positions
// (context parallelism), document masks, the all-gather scheme's chunked
// calls and ring attention's sections.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/ChunkOrder.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace loom::lowering {

namespace {

/// The document ids of the queries' and the keys' tokens for a
/// causal_document mask (null pointers for a plain causal mask): those of
/// the whole sequence, computed from its tokens, read at the positions
/// `pos` where those are not 0, 1, ... (context parallelism).
template <typename OpT>
std::pair<rt::Ptr, rt::Ptr> documentIds(OpT op, Value tokens,
                                        std::pair<rt::Ptr, rt::Ptr> pos,
                                        Emitter &e) {
  if (op.getMask() != MaskKind::causal_document)
    return {e.null(), e.null()};
  int64_t batch = dim(tokens, 0), seq = dim(tokens, 1);
  rt::Ptr doc = e.ptr(e.alloc(op.getTokens().getType()));
  e.call(rt::DocumentIds{.B = e.i64(batch),
                         .S = e.i64(seq),
                         .tokens = e.ptr(tokens),
                         .eod = e.i32(*op.getEod()),
                         .doc = doc});
  auto at = [&](rt::Ptr positions, Value of) {
    if (isa_and_nonnull<LLVM::ZeroOp>(positions.value.getDefiningOp()))
      return doc; // 0, 1, ...: the whole sequence's own ids
    int64_t local = dim(of, 1);
    rt::Ptr picked =
        e.ptr(e.alloc(RankedTensorType::get({batch, local}, e.i32Type())));
    e.call(rt::GatherPositions{.B = e.i64(batch),
                               .S = e.i64(seq),
                               .L = e.i64(local),
                               .src = doc,
                               .idx = positions,
                               .dst = picked});
    return picked;
  };
  rt::Ptr q = at(pos.first, op.getQuery());
  return {q, at(pos.second, op.getKey())};
}

/// The global positions of the queries' and the keys' tokens (null
/// pointers where they are 0, 1, ...): the causal mask compares them, so a
/// context-parallel rank's queries attend exactly as in the whole sequence.
FailureOr<std::pair<rt::Ptr, rt::Ptr>>
queryKeyPositions(ArrayRef<PositionedDim> dims, Emitter &e) {
  auto q = e.sequencePositions(dims[0]);
  auto k = e.sequencePositions(dims[1]);
  if (failed(q) || failed(k))
    return failure();
  return std::make_pair(*q, *k);
}

/// Whether the queries hold whole chunks of a sequence split over a group
/// and the keys the whole sequence in order: context parallelism's
/// all-gather scheme, which loomrt_attention_chunked_* computes with
/// position-free attention calls (fused attention on the cuda backend).
bool allGathered(ArrayRef<PositionedDim> dims) {
  const PositionedDim &q = dims[0], &k = dims[1];
  return !q.group.empty() && !q.chunks.empty() &&
         int64_t(q.chunks.size()) % q.parts == 0 && k.isIdentity();
}

/// What loomrt_attention_chunked_forward and _backward take before their
/// tensors: the layout of the queries' chunks, the heads, the scale and the
/// document ids (gathered at the queries' positions only when there are
/// documents).
struct ChunkedArgs {
  rt::I32 dtype;
  rt::I64 batch, local, start, chunk;
  rt::I32 numChunks;
  rt::Ptr order;
  rt::I64 numHeads, numKvHeads, headDim;
  rt::F32 scale;
  rt::Ptr qDoc, kDoc;
};

template <typename OpT>
FailureOr<ChunkedArgs> chunkedArgs(OpT op, Value tokens, Value query,
                                   const PositionedDim &q, Emitter &e) {
  auto layout = e.chunkLayout(q);
  if (failed(layout))
    return failure();
  rt::Ptr qPos = e.null();
  if (op.getMask() == MaskKind::causal_document) {
    auto positions = e.sequencePositions(q, &*layout);
    if (failed(positions))
      return failure();
    qPos = *positions;
  }
  auto [qDoc, kDoc] = documentIds(op, tokens, {qPos, e.null()}, e);
  rt::I32 dtype = e.dtype(query);
  rt::I64 batch = e.i64(dim(query, 0)), local = e.i64(dim(query, 1));
  rt::I32 numChunks = e.i32(layout->numChunks);
  rt::I64 numHeads = e.i64(op.getNumHeads()),
          numKvHeads = e.i64(op.getNumKvHeads()),
          headDim = e.i64(op.getHeadDim());
  rt::F32 scale = e.f32(op.getScale().convertToDouble());
  return ChunkedArgs{dtype,     batch,      local,   rt::I64(layout->start),
                     rt::I64(layout->chunk), numChunks, layout->order,
                     numHeads,  numKvHeads, headDim, scale,
                     qDoc,      kDoc};
}

} // namespace

template <>
LogicalResult lower(AttentionOp op, AttentionOp::Adaptor a, Emitter &e) {
  Value out = e.result(0), lse = e.result(1);
  auto dims = positionedDims(op);
  if (failed(dims))
    return failure();
  if (allGathered(*dims)) {
    rt::Ptr q = e.ptr(a.getQuery()), k = e.ptr(a.getKey()),
            v = e.ptr(a.getValue()), o = e.ptr(out), l = e.ptr(lse);
    auto c = chunkedArgs(op, a.getTokens(), a.getQuery(), (*dims)[0], e);
    if (failed(c))
      return failure();
    e.call(rt::AttentionChunkedForward{.dtype = c->dtype,
                                       .B = c->batch,
                                       .L = c->local,
                                       .start = c->start,
                                       .chunk = c->chunk,
                                       .num_chunks = c->numChunks,
                                       .order = c->order,
                                       .Nq = c->numHeads,
                                       .Nkv = c->numKvHeads,
                                       .D = c->headDim,
                                       .scale = c->scale,
                                       .q_doc = c->qDoc,
                                       .k_doc = c->kDoc,
                                       .q = q,
                                       .k = k,
                                       .v = v,
                                       .o = o,
                                       .lse = l});
    return success();
  }
  auto pos = queryKeyPositions(*dims, e);
  if (failed(pos))
    return failure();
  auto [qDoc, kDoc] = documentIds(op, a.getTokens(), *pos, e);
  e.call(rt::AttentionForward{.dtype = e.dtype(out),
                              .B = e.i64(dim(out, 0)),
                              .S = e.i64(dim(out, 1)),
                              .Sk = e.i64(dim(a.getKey(), 1)),
                              .Nq = e.i64(op.getNumHeads()),
                              .Nkv = e.i64(op.getNumKvHeads()),
                              .D = e.i64(op.getHeadDim()),
                              .scale = e.f32(op.getScale().convertToDouble()),
                              .causal = e.i32(1),
                              .q_pos = pos->first,
                              .k_pos = pos->second,
                              .q_doc = qDoc,
                              .k_doc = kDoc,
                              .q = e.ptr(a.getQuery()),
                              .k = e.ptr(a.getKey()),
                              .v = e.ptr(a.getValue()),
                              .o = e.ptr(out),
                              .lse = e.ptr(lse)});
  return success();
}

template <>
LogicalResult lower(AttentionGradOp op, AttentionGradOp::Adaptor a,
                    Emitter &e) {
  Value dq = e.result(0), dk = e.result(1), dv = e.result(2);
  auto dims = positionedDims(op);
  if (failed(dims))
    return failure();
  if (allGathered(*dims)) {
    rt::Ptr q = e.ptr(a.getQuery()), k = e.ptr(a.getKey()),
            v = e.ptr(a.getValue()), o = e.ptr(a.getOut()),
            l = e.ptr(a.getLse()), dout = e.ptr(a.getOutGrad()),
            pdq = e.ptr(dq), pdk = e.ptr(dk), pdv = e.ptr(dv);
    auto c = chunkedArgs(op, a.getTokens(), a.getQuery(), (*dims)[0], e);
    if (failed(c))
      return failure();
    e.call(rt::AttentionChunkedBackward{.dtype = c->dtype,
                                        .B = c->batch,
                                        .L = c->local,
                                        .start = c->start,
                                        .chunk = c->chunk,
                                        .num_chunks = c->numChunks,
                                        .order = c->order,
                                        .Nq = c->numHeads,
                                        .Nkv = c->numKvHeads,
                                        .D = c->headDim,
                                        .scale = c->scale,
                                        .q_doc = c->qDoc,
                                        .k_doc = c->kDoc,
                                        .q = q,
                                        .k = k,
                                        .v = v,
                                        .o = o,
                                        .lse = l,
                                        .dout = dout,
                                        .dq = pdq,
                                        .dk = pdk,
                                        .dv = pdv});
    return success();
  }
  auto pos = queryKeyPositions(*dims, e);
  if (failed(pos))
    return failure();
  auto [qDoc, kDoc] = documentIds(op, a.getTokens(), *pos, e);
  e.call(rt::AttentionBackward{.dtype = e.dtype(dq),
                               .B = e.i64(dim(dq, 0)),
                               .S = e.i64(dim(dq, 1)),
                               .Sk = e.i64(dim(dk, 1)),
                               .Nq = e.i64(op.getNumHeads()),
                               .Nkv = e.i64(op.getNumKvHeads()),
                               .D = e.i64(op.getHeadDim()),
                               .scale = e.f32(op.getScale().convertToDouble()),
                               .causal = e.i32(1),
                               .q_pos = pos->first,
                               .k_pos = pos->second,
                               .q_doc = qDoc,
                               .k_doc = kDoc,
                               .q = e.ptr(a.getQuery()),
                               .k = e.ptr(a.getKey()),
                               .v = e.ptr(a.getValue()),
                               .o = e.ptr(a.getOut()),
                               .lse = e.ptr(a.getLse()),
                               .dout = e.ptr(a.getOutGrad()),
                               .dq = e.ptr(dq),
                               .dk = e.ptr(dk),
                               .dv = e.ptr(dv),
                               .accumulate = e.i32(0)});
  return success();
}

//===----------------------------------------------------------------------===//
// Ring attention (context parallelism's p2p)
//===----------------------------------------------------------------------===//

namespace {

/// loomrt.h's LOOMRT_SECTION_* (the ABI fixes these values).
enum RingSection : int32_t { kDiagonal = 0, kLower = 1, kUpper = 2 };

/// The section of the tile of rank (r + kv_from)'s block: the diagonal for
/// the rank's own block, else lower for a lower rank's and upper for a
/// higher one's, chosen at run time.
template <typename OpT> FailureOr<rt::I32> sectionOf(OpT op, Emitter &e) {
  FailureOr<Ring> ring = ringOf(e);
  if (failed(ring))
    return failure();
  // I64Attr reads back unsigned; the offset is signed.
  int64_t from = static_cast<int64_t>(op.getKvFrom());
  if (from % ring->size == 0)
    return e.i32(kDiagonal);
  Value owner = ringPeer(*ring, from, e);
  return rt::I32(e.selectLess(owner, ring->rank, e.i32(kLower),
                              e.i32(kUpper)));
}

/// With a document mask, the document ids of this rank's queries and of
/// the block's keys (of rank r + kv_from): those of the whole sequence, from
/// its tokens, read at their global positions; null pointers without one.
template <typename OpT>
FailureOr<std::pair<rt::Ptr, rt::Ptr>> sectionDocuments(OpT op, Value tokens,
                                                        Emitter &e) {
  if (!tokens)
    return std::make_pair(e.null(), e.null());
  FailureOr<Ring> ring = ringOf(e);
  if (failed(ring))
    return failure();
  int64_t batch = dim(tokens, 0), seq = dim(tokens, 1);
  int64_t local = dim(op.getQuery(), 1);
  // Where the rank's queries lie: from the split of the query's sequence
  // over cp or, on a level of the hierarchical groups (whose layout no
  // #tfm.dist names), the load-balanced layout of the ring: rank p of P
  // holds chunks p and 2P-1-p of 2P.
  std::optional<PositionedDim> q;
  if (!op.getLevel()) {
    auto dims = positionedDims(op);
    if (failed(dims))
      return failure();
    q = dims->front();
  }
  auto writePositions = [&](rt::Ptr pos, Value ofRank) -> LogicalResult {
    if (q)
      return e.writeSequencePositions(*q, pos, ofRank);
    Value start = e.mulI64(ofRank ? ofRank : ring->rank, local);
    e.call(rt::SequencePositions{
        .B = e.i64(batch),
        .L = e.i64(local),
        .start = rt::I64(start),
        .chunk = e.i64(local / 2),
        .num_chunks = e.i32(int32_t(2 * ring->size)),
        .order = e.int64Array(tfm::zigzagOrder(ring->size)),
        .pos = pos});
    return success();
  };
  auto ids = RankedTensorType::get({batch, local}, e.i32Type());
  rt::Ptr doc =
      e.ptr(e.alloc(RankedTensorType::get({batch, seq}, e.i32Type())));
  e.call(rt::DocumentIds{.B = e.i64(batch),
                         .S = e.i64(seq),
                         .tokens = e.ptr(tokens),
                         .eod = e.i32(*op.getEod()),
                         .doc = doc});
  auto at = [&](Value ofRank) -> FailureOr<rt::Ptr> {
    rt::Ptr pos = e.ptr(e.alloc(ids));
    if (failed(writePositions(pos, ofRank)))
      return failure();
    rt::Ptr picked = e.ptr(e.alloc(ids));
    e.call(rt::GatherPositions{.B = e.i64(batch),
                               .S = e.i64(seq),
                               .L = e.i64(local),
                               .src = doc,
                               .idx = pos,
                               .dst = picked});
    return picked;
  };
  FailureOr<rt::Ptr> mine = at(Value());
  if (failed(mine))
    return failure();
  int64_t from = static_cast<int64_t>(op.getKvFrom());
  if (from % ring->size == 0)
    return std::make_pair(*mine, *mine);
  FailureOr<rt::Ptr> theirs = at(ringPeer(*ring, from, e));
  if (failed(theirs))
    return failure();
  return std::make_pair(*mine, *theirs);
}

} // namespace

template <>
LogicalResult lower(AttentionSectionOp op, AttentionSectionOp::Adaptor a,
                    Emitter &e) {
  Value q = a.getQuery();
  int64_t batch = dim(q, 0), local = dim(q, 1);
  auto docs = sectionDocuments(op, a.getTokens(), e);
  if (failed(docs))
    return failure();
  if (a.getMerge().empty()) {
    // The first step: the diagonal, a causal mask on local indices.
    Value out = e.result(0), lse = e.result(1);
    e.call(rt::AttentionForward{
        .dtype = e.dtype(out),
        .B = e.i64(batch),
        .S = e.i64(local),
        .Sk = e.i64(local),
        .Nq = e.i64(op.getNumHeads()),
        .Nkv = e.i64(op.getNumKvHeads()),
        .D = e.i64(op.getHeadDim()),
        .scale = e.f32(op.getScale().convertToDouble()),
        .causal = e.i32(1),
        .q_pos = e.null(),
        .k_pos = e.null(),
        .q_doc = docs->first,
        .k_doc = docs->second,
        .q = e.ptr(q),
        .k = e.ptr(a.getKey()),
        .v = e.ptr(a.getValue()),
        .o = e.ptr(out),
        .lse = e.ptr(lse)});
    return success();
  }
  FailureOr<rt::I32> section = sectionOf(op, e);
  if (failed(section))
    return failure();
  // The tile merges into copies of the running output and log-sum-exp.
  Value out = e.copyOf(a.getMerge()[0], op.getResult().getType());
  Value lse = e.copyOf(a.getMerge()[1], op.getResultLse().getType());
  e.setResult(0, out);
  e.setResult(1, lse);
  e.call(rt::AttentionSectionForward{
      .dtype = e.dtype(out),
      .B = e.i64(batch),
      .L = e.i64(local),
      .Nq = e.i64(op.getNumHeads()),
      .Nkv = e.i64(op.getNumKvHeads()),
      .D = e.i64(op.getHeadDim()),
      .scale = e.f32(op.getScale().convertToDouble()),
      .section = *section,
      .q_doc = docs->first,
      .k_doc = docs->second,
      .q = e.ptr(q),
      .k = e.ptr(a.getKey()),
      .v = e.ptr(a.getValue()),
      .o_acc = e.ptr(out),
      .lse_acc = e.ptr(lse)});
  return success();
}

template <>
LogicalResult lower(AttentionSectionGradOp op,
                    AttentionSectionGradOp::Adaptor a, Emitter &e) {
  FailureOr<rt::I32> section = sectionOf(op, e);
  auto docs = sectionDocuments(op, a.getTokens(), e);
  if (failed(section) || failed(docs))
    return failure();
  // The tile's gradients add to copies of the running sums (zeros first).
  SmallVector<Value> grads;
  for (auto [i, type] : llvm::enumerate(op.getResultTypes())) {
    grads.push_back(a.getGrads().empty() ? e.zeros(type)
                                         : e.copyOf(a.getGrads()[i], type));
    e.setResult(i, grads.back());
  }
  Value q = a.getQuery();
  e.call(rt::AttentionSectionBackward{
      .dtype = e.dtype(q),
      .B = e.i64(dim(q, 0)),
      .L = e.i64(dim(q, 1)),
      .Nq = e.i64(op.getNumHeads()),
      .Nkv = e.i64(op.getNumKvHeads()),
      .D = e.i64(op.getHeadDim()),
      .scale = e.f32(op.getScale().convertToDouble()),
      .section = *section,
      .q_doc = docs->first,
      .k_doc = docs->second,
      .q = e.ptr(q),
      .k = e.ptr(a.getKey()),
      .v = e.ptr(a.getValue()),
      .o = e.ptr(a.getOut()),
      .lse = e.ptr(a.getLse()),
      .dout = e.ptr(a.getOutGrad()),
      .dq = e.ptr(grads[0]),
      .dk = e.ptr(grads[1]),
      .dv = e.ptr(grads[2])});
  return success();
}

void attachAttentionLowerings(MLIRContext *ctx) {
  attach<AttentionOp, AttentionGradOp, AttentionSectionOp,
         AttentionSectionGradOp>(ctx);
}

} // namespace loom::lowering
