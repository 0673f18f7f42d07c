//===- FuseLinearSwiglu.cpp - SwiGLU with the GEMMs around it ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm.swiglu of two tfm.linear of one input (gate and up) ->
// tfm.linear_swiglu (at the first linear); tfm.linear_grad of a SwiGLU's
// output then tfm.swiglu_grad of its input gradient ->
// tfm.linear_grad_swiglu (at the linear_grad): a Llama MLP's activation
// with its GEMMs, forward and backward.
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/LinearGradRewrite.h"
#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Dominance.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMFUSELINEARSWIGLU
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// The gate and up a SwiGLU made `activation` from (tfm.swiglu, or
/// tfm.linear_swiglu's result), or nulls.
std::pair<Value, Value> swigluInputsOf(Value activation) {
  if (auto s = activation.getDefiningOp<SwigluOp>())
    return {s.getGate(), s.getUp()};
  if (auto fused = activation.getDefiningOp<LinearSwigluOp>())
    if (activation == fused.getResult())
      return {fused.getGate(), fused.getUp()};
  return {};
}

struct FuseLinearSwigluPass
    : fusion::impl::TfmFuseLinearSwigluBase<FuseLinearSwigluPass> {
  void runOnOperation() override {
    DominanceInfo dominance(getOperation());
    SmallVector<SwigluOp> swiglus;
    getOperation().walk([&](SwigluOp op) { swiglus.push_back(op); });
    for (SwigluOp swiglu : swiglus) {
      auto gate = swiglu.getGate().getDefiningOp<LinearOp>();
      auto up = swiglu.getUp().getDefiningOp<LinearOp>();
      if (!gate || !up || gate == up ||
          bool(gate.getBias()) != bool(up.getBias()) ||
          gate.getInput() != up.getInput() ||
          gate.getType() != swiglu.getType() ||
          up.getType() != swiglu.getType() ||
          gate.getWeight().getType() != up.getWeight().getType() ||
          gate->getBlock() != swiglu->getBlock() ||
          up->getBlock() != swiglu->getBlock())
        continue;
      // At the first linear: the other's weight known there.
      LinearOp first = gate->isBeforeInBlock(up) ? gate : up;
      LinearOp second = first == gate ? up : gate;
      SmallVector<Value> biases;
      if (gate.getBias())
        biases = {gate.getBias(), up.getBias()};
      if (!dominance.properlyDominates(second.getWeight(), first) ||
          (second.getBias() &&
           !dominance.properlyDominates(second.getBias(), first)))
        continue;
      OpBuilder b(first);
      Type t = swiglu.getType();
      auto fused = b.create<LinearSwigluOp>(swiglu.getLoc(), TypeRange{t, t, t},
                                            gate.getInput(), gate.getWeight(),
                                            up.getWeight(), biases);
      swiglu.getResult().replaceAllUsesWith(fused.getResult());
      swiglu.erase();
      gate.getResult().replaceAllUsesWith(fused.getGate());
      up.getResult().replaceAllUsesWith(fused.getUp());
      gate.erase();
      up.erase();
      ++numForward;
    }

    SmallVector<SwigluGradOp> grads;
    getOperation().walk([&](SwigluGradOp op) { grads.push_back(op); });
    for (SwigluGradOp swigluGrad : grads) {
      auto linearGrad = swigluGrad.getGrad().getDefiningOp<LinearGradOp>();
      Type t = swigluGrad.getGate().getType();
      if (!linearGrad || linearGrad.getAccumulate() ||
          swigluGrad.getGrad() != linearGrad.getInputGrad() ||
          !linearGrad.getInputGrad().hasOneUse() ||
          linearGrad->getBlock() != swigluGrad->getBlock() ||
          swigluGrad.getUp().getType() != t ||
          swigluGrad.getGateGrad().getType() != t ||
          swigluGrad.getUpGrad().getType() != t ||
          linearGrad.getInput().getType() != t ||
          swigluInputsOf(linearGrad.getInput()) !=
              std::pair<Value, Value>(swigluGrad.getGate(), swigluGrad.getUp()) ||
          !dominance.properlyDominates(swigluGrad.getGate(), linearGrad) ||
          !dominance.properlyDominates(swigluGrad.getUp(), linearGrad))
        continue;
      // At the linear_grad: its weight and bias gradients keep their place.
      SmallVector<Type> types{t, t};
      llvm::append_range(types, TypeRange(linearGrad->getResultTypes()).drop_front());
      OpBuilder b(linearGrad);
      auto fused = b.create<LinearGradSwigluOp>(
          linearGrad.getLoc(), types, linearGrad.getInput(),
          linearGrad.getWeight(), linearGrad.getGrad(), swigluGrad.getGate(),
          swigluGrad.getUp());
      swigluGrad.getGateGrad().replaceAllUsesWith(fused.getGateGrad());
      swigluGrad.getUpGrad().replaceAllUsesWith(fused.getUpGrad());
      swigluGrad.erase();
      fusion::replaceLinearGrad(linearGrad, fused.getWeightGrad(),
                                fused.getBiasGrad());
      ++numBackward;
    }
  }
};

} // namespace
