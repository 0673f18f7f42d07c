//===- FuseResidualNorms.cpp - Residual adds into their norms ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm.add whose sum a tfm.layer_norm / tfm.rms_norm normalizes ->
// tfm.add_layer_norm / tfm.add_rms_norm at the add, giving the sum (for its
// other readers: the next residual add, the norm's backward) and the norm.
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Dominance.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMFUSERESIDUALNORMS
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// The first norm in the add's block that normalizes its sum.
Operation *normOf(AddOp add) {
  Operation *first = nullptr;
  for (Operation *user : add.getResult().getUsers())
    if (isa<LayerNormOp, RmsNormOp>(user) && user->getOperand(0) == add &&
        user->getBlock() == add->getBlock() &&
        (!first || user->isBeforeInBlock(first)))
      first = user;
  return first;
}

struct FuseResidualNormsPass
    : fusion::impl::TfmFuseResidualNormsBase<FuseResidualNormsPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp add) { adds.push_back(add); });
    DominanceInfo dominance(getOperation());
    for (AddOp add : adds) {
      Type type = add.getResult().getType();
      if (add.getLhs().getType() != type || add.getRhs().getType() != type)
        continue;
      Operation *norm = normOf(add);
      // The fused op stands where the add stood: the norm's weights must be
      // known there.
      if (!norm || !llvm::all_of(norm->getOperands().drop_front(), [&](Value v) {
            return dominance.properlyDominates(v, add);
          }))
        continue;
      OpBuilder b(add);
      Operation *fused;
      if (auto ln = dyn_cast<LayerNormOp>(norm))
        fused = b.create<AddLayerNormOp>(
            add.getLoc(), TypeRange{type, type}, add.getLhs(), add.getRhs(),
            ln.getWeight(), ln.getBias(), ln.getEpsilonAttr());
      else
        fused = b.create<AddRmsNormOp>(
            add.getLoc(), TypeRange{type, type}, add.getLhs(), add.getRhs(),
            cast<RmsNormOp>(norm).getWeight(),
            cast<RmsNormOp>(norm).getEpsilonAttr());
      norm->getResult(0).replaceAllUsesWith(fused->getResult(1));
      norm->erase();
      add.getResult().replaceAllUsesWith(fused->getResult(0));
      add.erase();
      ++numFused;
    }
  }
};

} // namespace
