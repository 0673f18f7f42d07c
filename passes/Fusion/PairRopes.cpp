//===- PairRopes.cpp - Two rotations at the same positions as one -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Two tfm.rope (or two tfm.rope_grad) of one block with the same positions,
// head dim, theta and scaling -> one tfm.rope_pair (tfm.rope_pair_grad):
// attention's q and k, or their gradients.
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Dominance.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMPAIRROPES
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

template <typename OpT> bool sameRotation(OpT a, OpT b) {
  return a.getPositions() == b.getPositions() &&
         a.getHeadDim() == b.getHeadDim() && a.getTheta() == b.getTheta() &&
         a.getScalingAttr() == b.getScalingAttr() &&
         getElementTypeOrSelf(a.getInput().getType()) ==
             getElementTypeOrSelf(b.getInput().getType());
}

struct PairRopesPass : fusion::impl::TfmPairRopesBase<PairRopesPass> {
  void runOnOperation() override {
    pairAll<RopeOp, RopePairOp>();
    pairAll<RopeGradOp, RopePairGradOp>();
  }

  /// Pairs each op with the next one of its block that rotates alike; the
  /// pair stands where the first stood when the second's input is known
  /// there, else where the second stood when nothing reads the first's
  /// result in between.
  template <typename OpT, typename PairT> void pairAll() {
    SmallVector<OpT> ops;
    getOperation().walk([&](OpT op) { ops.push_back(op); });
    DominanceInfo dominance(getOperation());
    llvm::DenseSet<Operation *> done;
    for (size_t i = 0; i < ops.size(); ++i) {
      OpT first = ops[i];
      if (done.contains(first))
        continue;
      for (size_t j = i + 1; j < ops.size(); ++j) {
        OpT second = ops[j];
        if (done.contains(second) ||
            second->getBlock() != first->getBlock() ||
            !sameRotation(first, second))
          continue;
        Operation *at = nullptr;
        if (dominance.properlyDominates(second.getInput(), first))
          at = first;
        else if (llvm::all_of(first.getResult().getUsers(), [&](Operation *u) {
                   return u->getBlock() == second->getBlock() &&
                          second->isBeforeInBlock(u);
                 }))
          at = second;
        if (!at)
          continue;
        OpBuilder b(at);
        auto pair = b.create<PairT>(
            first.getLoc(),
            TypeRange{first.getType(), second.getType()}, first.getInput(),
            second.getInput(), first.getPositions(), first.getHeadDimAttr(),
            first.getThetaAttr(), first.getScalingAttr());
        first.getResult().replaceAllUsesWith(pair.getFirstResult());
        second.getResult().replaceAllUsesWith(pair.getSecondResult());
        done.insert(first);
        done.insert(second);
        first.erase();
        second.erase();
        ++numPaired;
        break;
      }
    }
  }
};

} // namespace
