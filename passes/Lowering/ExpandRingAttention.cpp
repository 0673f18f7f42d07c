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
  /// The ring of `op`: its size, mesh and axis.
  struct Ring {
    int64_t size;
    FlatSymbolRefAttr mesh;
    StringAttr axis;
    Location loc;
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
    return Ring{mesh->size(*op.getRing()), meshName, op.getRingAttr(),
                op.getLoc()};
  }
  SmallVector<Value> shift(const Ring &ring, ValueRange values,
                           int64_t offset) {
    return b
        .create<RingShiftOp>(ring.loc, values.getTypes(), values, ring.mesh,
                             ring.axis, b.getI64IntegerAttr(offset))
        .getResults();
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
  FlatSymbolRefAttr mesh = ring->mesh;
  StringAttr axis = ring->axis;
  auto section = [&](Value k, Value v, ValueRange merge, int64_t from) {
    return b.create<AttentionSectionOp>(
        loc, op.getResult().getType(), op.getLse().getType(), op.getQuery(), k,
        v, merge, op.getTokens(), b.getI64IntegerAttr(from), mesh, axis,
        op.getNumHeadsAttr(), op.getNumKvHeadsAttr(), op.getHeadDimAttr(),
        op.getScaleAttr(), op.getEodAttr());
  };
  // Step 0: the rank's own block, the diagonal.
  auto result = section(op.getKey(), op.getValue(), {}, 0);
  Value k = op.getKey(), v = op.getValue();
  // Step i: the block of rank r - i, received from the previous rank.
  for (int64_t i = 1; i < n; ++i) {
    SmallVector<Value> kv = shift(*ring, {k, v}, 1);
    k = kv[0];
    v = kv[1];
    result = section(k, v, result.getResults(), -i);
  }
  lastBlock[keyOf(op.getKey(), op.getValue())] = {k, v};
  op.replaceAllUsesWith(result.getResults());
  op.erase();
  return success();
}

LogicalResult RingWriter::backward(AttentionGradOp op) {
  FailureOr<Ring> ring = begin(op);
  if (failed(ring))
    return failure();
  int64_t n = ring->size;
  Location loc = ring->loc;
  FlatSymbolRefAttr mesh = ring->mesh;
  StringAttr axis = ring->axis;
  // Step 0 sees the block of rank r + 1.
  Value k, v;
  if (auto it = lastBlock.find(keyOf(op.getKey(), op.getValue()));
      it != lastBlock.end() && n > 1) {
    std::tie(k, v) = it->second;
  } else {
    SmallVector<Value> kv = shift(*ring, {op.getKey(), op.getValue()}, -1);
    k = kv[0];
    v = kv[1];
  }
  SmallVector<Value> grads;
  for (int64_t i = 0; i < n; ++i) {
    // Step i: the block of rank r + 1 + i and its gradient so far; the
    // last step is the rank's own block.
    auto step = b.create<AttentionSectionGradOp>(
        loc, op.getQueryGrad().getType(), k.getType(), v.getType(),
        op.getQuery(), k, v, op.getOut(), op.getLse(), op.getOutGrad(), grads,
        op.getTokens(), b.getI64IntegerAttr(i + 1), mesh, axis,
        op.getNumHeadsAttr(), op.getNumKvHeadsAttr(), op.getHeadDimAttr(),
        op.getScaleAttr(), op.getEodAttr());
    grads.assign(step.getResults().begin(), step.getResults().end());
    if (i + 1 == n)
      break;
    SmallVector<Value> moved = shift(*ring, {k, v, grads[1], grads[2]}, -1);
    k = moved[0];
    v = moved[1];
    grads[1] = moved[2];
    grads[2] = moved[3];
  }
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
