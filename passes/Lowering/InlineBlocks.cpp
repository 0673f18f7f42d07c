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

/// "embedding", "layer 3", "layer 3 backward", "head backward".
StringAttr blockName(tfm::BlockOp block) {
  std::string name = tfm::stringifyBlockKind(block.getKind()).str();
  if (std::optional<uint64_t> index = block.getIndex())
    name += " " + std::to_string(*index);
  if (block.getBackward())
    name += " backward";
  return StringAttr::get(block.getContext(), name);
}

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
      // The ops keep where they came from in their locations ("layer 3
      // backward"), for reports that count a step's forward and backward
      // apart (loom-compile --report) and for messages.
      StringAttr name = blockName(block);
      body.walk([&](Operation *op) {
        op->setLoc(NameLoc::get(name, op->getLoc()));
      });
      rewriter.inlineBlockBefore(&body, block, block.getInputs());
      rewriter.replaceOp(block, results);
    }
  }
};

} // namespace

bool lowering::isFromBackwardBlock(Location loc) {
  bool backward = false;
  loc->walk([&](Location l) {
    if (auto name = dyn_cast<NameLoc>(l))
      backward |= name.getName().getValue().ends_with(" backward");
    return WalkResult::advance();
  });
  return backward;
}
