//===- FreeBuffers.cpp - Free a straight-line function's buffers ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-free-buffers: every memref.alloc of a single-block function is freed
// before the return; in the body of a loop (scf.for over straight-line
// code), before the yield, unless the yield passes it to the next trip. Upstream's ownership-based
// deallocation computes the same for such code, but its simplification
// pass is quadratic in the buffers of a block, and a pipelined step has
// thousands (see Passes.td). tfm-plan-buffers then places each buffer by its
// last use, so freeing at the end costs no memory.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMFREEBUFFERS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

/// Frees the buffers `block` allocates before `end`, except those `end`
/// passes on (a loop body's yield: the next trip reads them).
LogicalResult freeBefore(Block &block, Operation *end, bool mayPassOn) {
  SmallVector<memref::AllocOp> allocs(block.getOps<memref::AllocOp>());
  for (memref::AllocOp alloc : allocs) {
    if (llvm::is_contained(end->getOperands(), alloc.getResult())) {
      if (mayPassOn)
        continue;
      return alloc.emitError() << "a returned buffer (run "
                                  "buffer-results-to-out-params first)";
    }
    OpBuilder(end).create<memref::DeallocOp>(alloc.getLoc(), alloc);
  }
  return success();
}

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
    // Straight-line code, or one level of scf.for over straight-line code.
    for (Operation &op : block) {
      if (!op.getNumRegions())
        continue;
      auto loop = dyn_cast<scf::ForOp>(op);
      bool flat = loop && llvm::all_of(*loop.getBody(), [](Operation &inner) {
                    return inner.getNumRegions() == 0;
                  });
      if (!flat) {
        op.emitError() << "tfm-free-buffers takes straight-line code and "
                          "loops of it, not this op's regions";
        return signalPassFailure();
      }
      if (failed(freeBefore(*loop.getBody(), loop.getBody()->getTerminator(),
                            /*mayPassOn=*/true)))
        return signalPassFailure();
    }
    if (failed(freeBefore(block, block.getTerminator(), /*mayPassOn=*/false)))
      return signalPassFailure();
  }
};

} // namespace
