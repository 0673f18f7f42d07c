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
    // Blocks do not nest, but walking post-order would handle it anyway.
    getOperation().walk<WalkOrder::PostOrder>([&](tfm::BlockOp block) {
      Block &body = block.getBody().front();
      auto yield = cast<tfm::YieldOp>(body.getTerminator());
      SmallVector<Value> results(yield.getValues());
      rewriter.eraseOp(yield);
      rewriter.inlineBlockBefore(&body, block, block.getInputs());
      rewriter.replaceOp(block, results);
    });
  }
};

} // namespace
