//===- FuseMultiLinears.cpp - Linears of one input in one op -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The tfm.linear of one input in one block (q, k and v; gate and up) ->
// tfm.multi_linear at the first of them; a chain of tfm.linear_grad of one
// input, each accumulating onto the last one's input gradient (what
// tfm-fold-gradient-adds makes of their sum) -> tfm.multi_linear_grad at
// the last of them.
//
//===----------------------------------------------------------------------===//

#include "passes/Fusion/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/Dominance.h"
#include "llvm/ADT/MapVector.h"

namespace loom::fusion {
#define GEN_PASS_DEF_TFMFUSEMULTILINEARS
#include "passes/Fusion/Passes.h.inc"
} // namespace loom::fusion

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

struct FuseMultiLinearsPass
    : fusion::impl::TfmFuseMultiLinearsBase<FuseMultiLinearsPass> {
  void runOnOperation() override {
    DominanceInfo dominance(getOperation());
    fuseForward(dominance);
    fuseBackward(dominance);
  }

  void fuseForward(DominanceInfo &dominance) {
    // The linears of each (input, block), in block order; with biases on
    // all or on none.
    llvm::MapVector<std::pair<Value, Block *>, SmallVector<LinearOp>> groups;
    getOperation().walk([&](LinearOp op) {
      groups[{op.getInput(), op->getBlock()}].push_back(op);
    });
    for (auto &[key, linears] : groups) {
      if (linears.size() < 2)
        continue;
      bool biased = bool(linears.front().getBias());
      LinearOp first = linears.front();
      // The fused op stands at the first: every weight and bias known there.
      if (!llvm::all_of(linears, [&](LinearOp l) {
            return bool(l.getBias()) == biased &&
                   dominance.properlyDominates(l.getWeight(), first) &&
                   (!biased || dominance.properlyDominates(l.getBias(), first));
          }))
        continue;
      SmallVector<Value> weights, biases;
      SmallVector<Type> types;
      for (LinearOp l : linears) {
        weights.push_back(l.getWeight());
        if (biased)
          biases.push_back(l.getBias());
        types.push_back(l.getType());
      }
      OpBuilder b(first);
      auto fused = b.create<MultiLinearOp>(first.getLoc(), types, key.first,
                                           weights, biases);
      for (auto [l, result] : llvm::zip(linears, fused.getResults())) {
        l.getResult().replaceAllUsesWith(result);
        l.erase();
      }
      numForward += linears.size();
    }
  }

  /// Whether `next` accumulates onto `prev`'s input gradient, which
  /// nothing else reads, with the same input and bias gradients alike.
  static bool continues(LinearGradOp prev, LinearGradOp next) {
    return next.getAccumulate() == prev.getInputGrad() &&
           prev.getInputGrad().hasOneUse() &&
           next.getInput() == prev.getInput() &&
           next->getBlock() == prev->getBlock() &&
           bool(next.getBiasGrad()) == bool(prev.getBiasGrad());
  }

  void fuseBackward(DominanceInfo &dominance) {
    // Chains by their last link, in block order.
    llvm::MapVector<Operation *, SmallVector<LinearGradOp>> chains;
    getOperation().walk([&](LinearGradOp op) {
      SmallVector<LinearGradOp> chain;
      if (Value acc = op.getAccumulate())
        if (auto prev = acc.getDefiningOp<LinearGradOp>())
          if (continues(prev, op) && chains.count(prev)) {
            chain = chains.lookup(prev);
            chains.erase(prev);
          }
      chain.push_back(op);
      chains[op] = std::move(chain);
    });
    for (auto &[lastOp, chain] : chains) {
      if (chain.size() < 2)
        continue;
      LinearGradOp last = chain.back();
      // The fused op stands at the last link: the others' weight and bias
      // gradients must not be read before it.
      bool late = llvm::all_of(ArrayRef(chain).drop_back(), [&](LinearGradOp l) {
        return llvm::all_of(l->getResults().drop_front(), [&](Value v) {
          return llvm::all_of(v.getUsers(), [&](Operation *user) {
            return dominance.properlyDominates(last.getOperation(), user);
          });
        });
      });
      if (!late)
        continue;
      bool biased = bool(last.getBiasGrad());
      SmallVector<Value> weights, grads;
      SmallVector<Type> weightGradTypes, biasGradTypes;
      for (LinearGradOp l : chain) {
        weights.push_back(l.getWeight());
        grads.push_back(l.getGrad());
        weightGradTypes.push_back(l.getWeightGrad().getType());
        if (biased)
          biasGradTypes.push_back(l.getBiasGrad().getType());
      }
      OpBuilder b(last);
      auto fused = b.create<MultiLinearGradOp>(
          last.getLoc(), last.getInputGrad().getType(), weightGradTypes,
          biasGradTypes, last.getInput(), weights, grads,
          chain.front().getAccumulate());
      last.getInputGrad().replaceAllUsesWith(fused.getInputGrad());
      for (auto [i, l] : llvm::enumerate(chain)) {
        l.getWeightGrad().replaceAllUsesWith(fused.getWeightGrads()[i]);
        if (biased)
          l.getBiasGrad().replaceAllUsesWith(fused.getBiasGrads()[i]);
      }
      for (LinearGradOp l : llvm::reverse(chain))
        l.erase();
      numBackward += chain.size();
    }
  }
};

} // namespace
