//===- ExpandRingAttention.cpp - Ring attention step by step ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Context parallelism's p2p attention as TransformerEngine computes it
// (AttnFuncWithCPAndKVP2P), written out as per-rank ops: the ring's hops are
// tfm.ring_shift, each step's tile tfm.attention_section(_grad). Which
// section a step computes depends on this rank and the block's owner, so
// the sections are chosen when the ops are lowered (one program serves
// every rank); the ops say which rank's block they see (kv_from).
//
// Hierarchical rings (cp_comm_type a2a+p2p, `a2a A` on the op) follow
// TransformerEngine with a list of cp groups: q, k and v trade heads for
// sequence with an all-to-all within each group of A consecutive cp ranks
// (level 0 of the plan's hierarchical cp groups), which leaves the P = cp /
// A ranks of each level-1 group holding exactly the load-balanced layout of
// a 2P split (fine chunks pA .. pA+A-1, then the mirrored ones, once the
// 2A received pieces are reordered); the ring then runs over level 1 with
// A times fewer heads and A times the sequence, and the results trade back.
// The backward exchanges its inputs again instead of keeping the forward's
// exchanged copies.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include <tuple>

namespace loom::lowering {
#define GEN_PASS_DEF_TFMEXPANDRINGATTENTION
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

class RingWriter {
public:
  explicit RingWriter(MLIRContext *ctx) : b(ctx) {}

  LogicalResult forward(AttentionOp op);
  LogicalResult backward(AttentionGradOp op);

private:
  /// The ring of `op`: its size, mesh and axis; for a hierarchical ring
  /// the size of the level-0 groups (`a2a`) and the ring's level (1).
  struct Ring {
    int64_t size;
    FlatSymbolRefAttr mesh;
    StringAttr axis;
    Location loc;
    int64_t a2a = 1;
    IntegerAttr level;
  };
  /// The ring of `op` (an error if its axis is not the mesh's), with the
  /// builder set before `op`.
  template <typename OpT> FailureOr<Ring> begin(OpT op) {
    FlatSymbolRefAttr meshName = getDist(op.getQuery()).getMesh();
    FailureOr<MeshAxesInfo> mesh = MeshAxesInfo::lookup(op, meshName);
    if (failed(mesh))
      return failure();
    if (!mesh->index(*op.getRing()))
      return op.emitOpError() << "rings over " << *op.getRing()
                              << ", which is not an axis of the mesh";
    b.setInsertionPoint(op);
    Ring ring{mesh->size(*op.getRing()), meshName, op.getRingAttr(),
              op.getLoc()};
    if (std::optional<uint64_t> a2a = op.getRingA2a(); a2a && *a2a > 1) {
      ring.a2a = int64_t(*a2a);
      if (ring.size % ring.a2a != 0)
        return op.emitOpError()
               << "a2a groups of " << ring.a2a << " do not divide the "
               << ring.size << " ranks of " << *op.getRing();
      int64_t heads = int64_t(op.getNumHeads()),
              kvHeads = int64_t(op.getNumKvHeads());
      if (heads % ring.a2a != 0 || kvHeads % ring.a2a != 0)
        return op.emitOpError()
               << heads << " query and " << kvHeads
               << " kv heads do not divide over a2a groups of " << ring.a2a;
      ring.size /= ring.a2a;
      ring.level = b.getI64IntegerAttr(1);
    }
    return ring;
  }
  SmallVector<Value> shift(const Ring &ring, ValueRange values,
                           int64_t offset) {
    return b
        .create<RingShiftOp>(ring.loc, values.getTypes(), values, ring.mesh,
                             ring.axis, b.getI64IntegerAttr(offset),
                             ring.level)
        .getResults();
  }

  /// The all-to-all within the level-0 group: `x` cut into A pieces along
  /// `split`, joined along `concat`. The result is typed `like` (back in
  /// cp's layout, the value it replaces), else without #tfm.dist: a value
  /// in the hierarchical ring's layout (heads split over a level-0 group,
  /// the sequence of its ranks) is per-rank only.
  Value levelAllToAll(const Ring &ring, Value x, int64_t split,
                      int64_t concat, Type like = {}) {
    auto type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[split] /= ring.a2a;
    shape[concat] *= ring.a2a;
    return b.create<LevelAllToAllOp>(
        ring.loc,
        like ? like : RankedTensorType::get(shape, type.getElementType()),
        x, ring.mesh, ring.axis, b.getI64IntegerAttr(0),
        b.getI64IntegerAttr(split), b.getI64IntegerAttr(concat));
  }
  /// The order of the 2A received pieces (each member's two chunks, in
  /// member order) that makes the load-balanced layout of the level-1
  /// ring: the members' first chunks in order, then their second chunks in
  /// reverse order.
  static SmallVector<int64_t> ringOrder(int64_t a2a, bool inverse) {
    SmallVector<int64_t> order(size_t(2 * a2a));
    for (int64_t j = 0; j < 2 * a2a; ++j) {
      int64_t from = j < a2a ? 2 * j : 2 * (2 * a2a - 1 - j) + 1;
      if (inverse)
        order[size_t(from)] = j;
      else
        order[size_t(j)] = from;
    }
    return order;
  }
  Value permute(const Ring &ring, Value x, int64_t dim, bool inverse) {
    return b.create<PermuteChunksOp>(ring.loc, x.getType(), x,
                                     b.getI64IntegerAttr(dim),
                                     b.getDenseI64ArrayAttr(
                                         ringOrder(ring.a2a, inverse)));
  }
  /// Where a tensor holds the heads and the sequence: [b, s, heads*d]
  /// activations, [b, heads, s] log-sum-exps.
  struct Dims {
    int64_t heads, seq;
  };
  static constexpr Dims kActivation{2, 1}, kLse{1, 2};
  /// `x` in cp's layout -> the hierarchical ring's (heads / A, the
  /// sequence of the A ranks of the level-0 group); identity for a plain
  /// ring.
  Value toRing(const Ring &ring, Value x, Dims d = kActivation) {
    if (ring.a2a == 1)
      return x;
    return permute(ring, levelAllToAll(ring, x, d.heads, d.seq), d.seq, false);
  }
  /// And back, typed `like`.
  Value fromRing(const Ring &ring, Value x, Type like, Dims d = kActivation) {
    if (ring.a2a == 1)
      return x;
    return levelAllToAll(ring, permute(ring, x, d.seq, true), d.seq, d.heads,
                         like);
  }
  IntegerAttr heads(const Ring &ring, uint64_t n) {
    return b.getI64IntegerAttr(int64_t(n) / ring.a2a);
  }

  /// What identifies a k or v: the value, or for heads repeated for tensor
  /// parallelism (tfm.repeat_kv, built again in backward) its input and
  /// factor.
  using KvKey = std::tuple<Value, int64_t, Value, int64_t>;
  static std::pair<Value, int64_t> keyOf(Value v) {
    if (auto r = v.getDefiningOp<RepeatKvOp>())
      return {r.getInput(), static_cast<int64_t>(r.getFactor())};
    return {v, 0};
  }
  static KvKey keyOf(Value k, Value v) {
    auto [kb, kf] = keyOf(k);
    auto [vb, vf] = keyOf(v);
    return {kb, kf, vb, vf};
  }

  OpBuilder b;
  /// The last block the forward of (k, v) received: the first the backward
  /// needs (TransformerEngine keeps that buffer for backward too).
  DenseMap<KvKey, std::pair<Value, Value>> lastBlock;
};

LogicalResult RingWriter::forward(AttentionOp op) {
  FailureOr<Ring> ring = begin(op);
  if (failed(ring))
    return failure();
  int64_t n = ring->size;
  Location loc = ring->loc;
  Value q = toRing(*ring, op.getQuery());
  // The log-sum-exp in the ring's layout: [b, heads / A, A * s] (per-rank
  // only, as levelAllToAll's results) for a hierarchical ring.
  auto lseType = cast<RankedTensorType>(op.getLse().getType());
  if (ring->a2a > 1) {
    SmallVector<int64_t> lseShape(lseType.getShape());
    lseShape[1] /= ring->a2a;
    lseShape[2] *= ring->a2a;
    lseType = RankedTensorType::get(lseShape, lseType.getElementType());
  }
  auto section = [&](Value k, Value v, ValueRange merge, int64_t from) {
    return b.create<AttentionSectionOp>(
        loc, q.getType(), lseType, q, k, v, merge, op.getTokens(),
        b.getI64IntegerAttr(from), ring->mesh, ring->axis,
        heads(*ring, op.getNumHeads()), heads(*ring, op.getNumKvHeads()),
        op.getHeadDimAttr(), op.getScaleAttr(), op.getEodAttr(), ring->level);
  };
  // Step 0: the rank's own block, the diagonal.
  Value k = toRing(*ring, op.getKey()), v = toRing(*ring, op.getValue());
  auto result = section(k, v, {}, 0);
  // Step i: the block of rank r - i, received from the previous rank.
  for (int64_t i = 1; i < n; ++i) {
    SmallVector<Value> kv = shift(*ring, {k, v}, 1);
    k = kv[0];
    v = kv[1];
    result = section(k, v, result.getResults(), -i);
  }
  lastBlock[keyOf(op.getKey(), op.getValue())] = {k, v};
  Value out = fromRing(*ring, result.getResult(), op.getResult().getType());
  Value lse =
      fromRing(*ring, result.getResultLse(), op.getLse().getType(), kLse);
  op.replaceAllUsesWith(ValueRange{out, lse});
  op.erase();
  return success();
}

LogicalResult RingWriter::backward(AttentionGradOp op) {
  FailureOr<Ring> ring = begin(op);
  if (failed(ring))
    return failure();
  int64_t n = ring->size;
  Location loc = ring->loc;
  Value q = toRing(*ring, op.getQuery()), out = toRing(*ring, op.getOut()),
        dout = toRing(*ring, op.getOutGrad()),
        lse = toRing(*ring, op.getLse(), kLse);
  // Step 0 sees the block of rank r + 1.
  Value k, v;
  if (auto it = lastBlock.find(keyOf(op.getKey(), op.getValue()));
      it != lastBlock.end() && n > 1) {
    std::tie(k, v) = it->second;
  } else {
    SmallVector<Value> kv = shift(*ring,
                                  {toRing(*ring, op.getKey()),
                                   toRing(*ring, op.getValue())},
                                  -1);
    k = kv[0];
    v = kv[1];
  }
  SmallVector<Value> grads;
  for (int64_t i = 0; i < n; ++i) {
    // Step i: the block of rank r + 1 + i and its gradient so far; the
    // last step is the rank's own block.
    auto step = b.create<AttentionSectionGradOp>(
        loc, q.getType(), k.getType(), v.getType(), q, k, v, out, lse, dout,
        grads, op.getTokens(), b.getI64IntegerAttr(i + 1), ring->mesh,
        ring->axis, heads(*ring, op.getNumHeads()),
        heads(*ring, op.getNumKvHeads()), op.getHeadDimAttr(),
        op.getScaleAttr(), op.getEodAttr(), ring->level);
    grads.assign(step.getResults().begin(), step.getResults().end());
    if (i + 1 == n)
      break;
    SmallVector<Value> moved = shift(*ring, {k, v, grads[1], grads[2]}, -1);
    k = moved[0];
    v = moved[1];
    grads[1] = moved[2];
    grads[2] = moved[3];
  }
  for (auto [g, like] : llvm::zip(grads, op.getResultTypes()))
    g = fromRing(*ring, g, like);
  op.replaceAllUsesWith(grads);
  op.erase();
  return success();
}

struct ExpandRingAttentionPass
    : lowering::impl::TfmExpandRingAttentionBase<ExpandRingAttentionPass> {
  void runOnOperation() override {
    RingWriter writer(&getContext());
    // Program order: a forward before the backward that reuses its blocks.
    SmallVector<Operation *> rings;
    getOperation().walk([&](Operation *op) {
      if (auto a = dyn_cast<AttentionOp>(op); a && a.getRing())
        rings.push_back(op);
      if (auto g = dyn_cast<AttentionGradOp>(op); g && g.getRing())
        rings.push_back(op);
    });
    for (Operation *op : rings) {
      LogicalResult done = isa<AttentionOp>(op)
                               ? writer.forward(cast<AttentionOp>(op))
                               : writer.backward(cast<AttentionGradOp>(op));
      if (failed(done))
        return signalPassFailure();
    }
  }
};

} // namespace
