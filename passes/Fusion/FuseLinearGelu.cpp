//===- FuseLinearGelu.cpp - GELU as the epilogue of its GEMMs ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm.linear then tfm.gelu of its result -> tfm.linear_gelu (at the
// linear); tfm.linear_grad of gelu(h) then tfm.gelu_grad of its input
// gradient -> tfm.linear_grad_gelu (at the linear_grad): the GELU of a
// GPT MLP as its GEMMs' epilogues, forward and backward.
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/LinearGradRewrite.h"
#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Dominance.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMFUSELINEARGELU
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// The first tfm.gelu of the linear's result in its block.
GeluOp geluOf(LinearOp linear) {
  GeluOp first;
  for (Operation *user : linear.getResult().getUsers())
    if (auto gelu = dyn_cast<GeluOp>(user))
      if (gelu->getBlock() == linear->getBlock() &&
          (!first || gelu->isBeforeInBlock(first)))
        first = gelu;
  return first;
}

/// The value `activation` was made from by a GELU of approximation
/// `approximate` (tfm.gelu, or tfm.linear_gelu's result), or null.
Value geluInputOf(Value activation, GeluApprox approximate) {
  if (auto gelu = activation.getDefiningOp<GeluOp>())
    return gelu.getApproximate() == approximate ? gelu.getInput() : Value();
  if (auto fused = activation.getDefiningOp<LinearGeluOp>())
    if (activation == fused.getResult() &&
        fused.getApproximate() == approximate)
      return fused.getPreActivation();
  return {};
}

struct FuseLinearGeluPass
    : fusion::impl::TfmFuseLinearGeluBase<FuseLinearGeluPass> {
  void runOnOperation() override {
    SmallVector<LinearOp> linears;
    getOperation().walk([&](LinearOp op) { linears.push_back(op); });
    for (LinearOp linear : linears) {
      GeluOp gelu = geluOf(linear);
      if (!gelu)
        continue;
      // At the linear: the GELU reads nothing else.
      OpBuilder b(linear);
      auto fused = b.create<LinearGeluOp>(
          linear.getLoc(), TypeRange{linear.getType(), gelu.getType()},
          linear.getInput(), linear.getWeight(), linear.getBias(),
          gelu.getApproximateAttr());
      gelu.getResult().replaceAllUsesWith(fused.getResult());
      gelu.erase();
      linear.getResult().replaceAllUsesWith(fused.getPreActivation());
      linear.erase();
      ++numForward;
    }

    SmallVector<GeluGradOp> geluGrads;
    getOperation().walk([&](GeluGradOp op) { geluGrads.push_back(op); });
    DominanceInfo dominance(getOperation());
    for (GeluGradOp geluGrad : geluGrads) {
      auto linearGrad = geluGrad.getGrad().getDefiningOp<LinearGradOp>();
      // The GELU's gradient of the linear's input gradient, which nothing
      // else reads, and of the value the GELU made the linear's input from.
      if (!linearGrad || linearGrad.getAccumulate() ||
          geluGrad.getGrad() != linearGrad.getInputGrad() ||
          !linearGrad.getInputGrad().hasOneUse() ||
          linearGrad->getBlock() != geluGrad->getBlock() ||
          geluGrad.getType() != linearGrad.getInputGrad().getType() ||
          geluGrad.getType() != linearGrad.getInput().getType() ||
          geluInputOf(linearGrad.getInput(), geluGrad.getApproximate()) !=
              geluGrad.getInput() ||
          !dominance.properlyDominates(geluGrad.getInput(), linearGrad))
        continue;
      // At the linear_grad: its weight and bias gradients keep their place.
      OpBuilder b(linearGrad);
      auto fused = b.create<LinearGradGeluOp>(
          linearGrad.getLoc(), linearGrad->getResultTypes(),
          linearGrad.getInput(), linearGrad.getWeight(), linearGrad.getGrad(),
          geluGrad.getInput(), geluGrad.getApproximateAttr());
      geluGrad.getResult().replaceAllUsesWith(fused.getInputGrad());
      geluGrad.erase();
      fusion::replaceLinearGrad(linearGrad, fused.getWeightGrad(),
                                fused.getBiasGrad());
      ++numBackward;
    }
  }
};

} // namespace
