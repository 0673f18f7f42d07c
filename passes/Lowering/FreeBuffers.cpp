//===- FreeBuffers.cpp - Free a straight-line function's buffers ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-free-buffers: every memref.alloc of a single-block function without
// regions is freed before the return. Upstream's ownership-based
// deallocation computes the same for such code, but its simplification
// pass is quadratic in the buffers of a block, and a pipelined step has
// thousands (see Passes.td). tfm-plan-buffers then places each buffer by its
// last use, so freeing at the end costs no memory.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMFREEBUFFERS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

struct FreeBuffersPass : lowering::impl::TfmFreeBuffersBase<FreeBuffersPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitError() << "tfm-free-buffers takes single-block functions";
      return signalPassFailure();
    }
    Block &block = func.getBody().front();
    SmallVector<memref::AllocOp> allocs;
    for (Operation &op : block) {
      if (op.getNumRegions()) {
        op.emitError() << "tfm-free-buffers takes straight-line code, not "
                          "ops with regions";
        return signalPassFailure();
      }
      if (auto alloc = dyn_cast<memref::AllocOp>(op))
        allocs.push_back(alloc);
    }
    Operation *ret = block.getTerminator();
    for (memref::AllocOp alloc : allocs) {
      if (llvm::is_contained(ret->getOperands(), alloc.getResult())) {
        alloc.emitError() << "a returned buffer (run "
                             "buffer-results-to-out-params first)";
        return signalPassFailure();
      }
      OpBuilder(ret).create<memref::DeallocOp>(alloc.getLoc(), alloc);
    }
  }
};

} // namespace
