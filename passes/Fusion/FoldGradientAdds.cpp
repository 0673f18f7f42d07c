//===- FoldGradientAdds.cpp - Gradient sums into their producers -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm.add of two input gradients -> the later producer accumulates onto the
// earlier addend (see Passes.td). An accumulated linear_grad writes over
// the addend's buffer (tfm-lower-to-runtime checks that nothing reads it
// later, and copies it otherwise), so there the addend must be an op's
// value in the producer's block whose every other reader runs before the
// producer; a norm's backward reads it as an input, which may be anything
// known before it (a pipeline block's incoming gradient, an argument, too,
// so that the same sums fold whatever the stages).
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMFOLDGRADIENTADDS
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// The op that computes `v` as an input gradient it could accumulate onto
/// another value (not accumulating yet), or null.
Operation *accumulatingProducer(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || v != def->getResult(0))
    return nullptr;
  if (auto op = dyn_cast<LinearGradOp>(def))
    return op.getAccumulate() ? nullptr : def;
  if (auto op = dyn_cast<LayerNormGradOp>(def))
    return op.getAccumulate() ? nullptr : def;
  if (auto op = dyn_cast<RmsNormGradOp>(def))
    return op.getAccumulate() ? nullptr : def;
  return nullptr;
}

/// Whether `producer` may take `addend` to accumulate onto, `add` summing
/// them. Both are in one block, and the addend is known there before the
/// producer: an argument of the block or an op's value computed before.
/// A linear_grad writes its sum over the addend's buffer (beta = 1), so
/// there the addend must also be an op's value whose every other reader
/// runs before the producer (its buffer is then free to be written over);
/// a norm reads the addend as an input of its own (dx_add).
bool canAccumulateOnto(Value addend, Operation *producer, Operation *add) {
  Block *block = producer->getBlock();
  if (add->getBlock() != block)
    return false;
  if (isa<LinearGradOp>(producer))
    return overwritableAt(addend, producer, /*except=*/add);
  Operation *def = addend.getDefiningOp();
  return def ? def->getBlock() == block && def->isBeforeInBlock(producer)
             : cast<BlockArgument>(addend).getOwner() == block;
}

void setAccumulate(Operation *producer, Value addend) {
  // The accumulate operand is the last: after input, weight, grad.
  producer->insertOperands(producer->getNumOperands(), addend);
}

struct FoldGradientAddsPass
    : fusion::impl::TfmFoldGradientAddsBase<FoldGradientAddsPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp add) { adds.push_back(add); });
    for (AddOp add : adds) {
      Value lhs = add.getLhs(), rhs = add.getRhs();
      if (lhs.getType() != rhs.getType() ||
          lhs.getType() != add.getResult().getType())
        continue;
      // The later producer accumulates onto the other addend.
      for (auto [own, other] : {std::pair(rhs, lhs), std::pair(lhs, rhs)}) {
        Operation *producer = accumulatingProducer(own);
        if (!producer || !own.hasOneUse() || own == other ||
            !canAccumulateOnto(other, producer, add))
          continue;
        setAccumulate(producer, other);
        add.getResult().replaceAllUsesWith(own);
        add.erase();
        ++numFolded;
        break;
      }
    }
  }
};

} // namespace
