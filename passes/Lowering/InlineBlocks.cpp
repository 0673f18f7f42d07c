//===- InlineBlocks.cpp - Inline tfm.block regions --------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/IR/PatternMatch.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMINLINEBLOCKS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

struct InlineBlocksPass
    : lowering::impl::TfmInlineBlocksBase<InlineBlocksPass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<tfm::BlockOp> blocks;
    getOperation().walk([&](tfm::BlockOp block) { blocks.push_back(block); });
    for (tfm::BlockOp block : blocks) {
      Block &body = block.getBody().front();
      auto yield = cast<tfm::YieldOp>(body.getTerminator());
      // A yielded region argument stands for the matching input.
      SmallVector<Value> results;
      for (Value v : yield.getValues()) {
        auto arg = dyn_cast<BlockArgument>(v);
        results.push_back(arg && arg.getOwner() == &body
                              ? block.getInputs()[arg.getArgNumber()]
                              : v);
      }
      rewriter.eraseOp(yield);
      rewriter.inlineBlockBefore(&body, block, block.getInputs());
      rewriter.replaceOp(block, results);
    }
  }
};

} // namespace
