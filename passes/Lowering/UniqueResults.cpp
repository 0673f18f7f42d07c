//===- UniqueResults.cpp - Private functions return distinct buffers -----===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-unique-results: a private function's result that repeats an earlier
// result, or is one of its arguments, is dropped; its callers use the
// earlier result or the argument they passed instead. Then every result is
// a buffer of the function's own, which buffer-results-to-out-params can
// turn into an out-param written in place.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMUNIQUERESULTS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

/// Where result i comes from instead: an earlier result or an argument.
struct Replacement {
  bool argument;
  unsigned index;
};

struct UniqueResultsPass
    : lowering::impl::TfmUniqueResultsBase<UniqueResultsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // The calls of each function (a pipelined step has thousands).
    llvm::StringMap<SmallVector<func::CallOp>> callsOf;
    module.walk(
        [&](func::CallOp call) { callsOf[call.getCallee()].push_back(call); });
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal() || !f.isPrivate())
        continue;
      auto ret = cast<func::ReturnOp>(f.getBody().front().getTerminator());
      DenseMap<unsigned, Replacement> replaced;
      for (auto [i, v] : llvm::enumerate(ret.getOperands())) {
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          replaced[unsigned(i)] = {true, arg.getArgNumber()};
          continue;
        }
        for (unsigned k = 0; k < i; ++k)
          if (ret.getOperand(k) == v && !replaced.count(k)) {
            replaced[unsigned(i)] = {false, k};
            break;
          }
      }
      if (replaced.empty())
        continue;
      // Callers first, while the results are still there.
      llvm::BitVector drop(f.getNumResults());
      for (auto &[i, r] : replaced)
        drop.set(i);
      for (func::CallOp call : callsOf[f.getName()]) {
        for (auto &[i, r] : replaced)
          call.getResult(i).replaceAllUsesWith(
              r.argument ? call.getOperand(r.index) : call.getResult(r.index));
        OpBuilder b(call);
        SmallVector<Type> types;
        for (unsigned i = 0; i < call.getNumResults(); ++i)
          if (!drop.test(i))
            types.push_back(call.getResult(i).getType());
        auto kept = b.create<func::CallOp>(call.getLoc(), f.getName(), types,
                                           call.getOperands());
        unsigned next = 0;
        for (unsigned i = 0; i < call.getNumResults(); ++i)
          if (!drop.test(i))
            call.getResult(i).replaceAllUsesWith(kept.getResult(next++));
        call.erase();
      }
      SmallVector<Value> returned;
      for (unsigned i = 0; i < ret.getNumOperands(); ++i)
        if (!drop.test(i))
          returned.push_back(ret.getOperand(i));
      OpBuilder(ret).create<func::ReturnOp>(ret.getLoc(), returned);
      ret.erase();
      (void)f.eraseResults(drop);
    }
  }
};

} // namespace
