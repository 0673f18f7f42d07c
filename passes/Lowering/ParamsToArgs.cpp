//===- ParamsToArgs.cpp - Parameters become function arguments --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include "llvm/ADT/MapVector.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMPARAMSTOARGS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

/// Before each call of a function that takes parameters, reads them in the
/// caller and passes them along.
LogicalResult passParamsToCallees(func::FuncOp caller) {
  return lowering::passAddedArguments(
      caller, [](OpBuilder &b, func::CallOp call, func::FuncOp callee,
                 unsigned i) -> Value {
        auto name =
            callee.getArgAttrOfType<StringAttr>(i, tfm::kParamArgAttrName);
        if (!name) {
          call.emitError() << "@" << callee.getName() << " takes argument "
                           << i << ", which is not a parameter";
          return Value();
        }
        return b.create<tfm::GetParamOp>(call.getLoc(),
                                         callee.getArgumentTypes()[i],
                                         FlatSymbolRefAttr::get(name));
      });
}

struct ParamsToArgsPass
    : lowering::impl::TfmParamsToArgsBase<ParamsToArgsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Declaration order of the parameters fixes the argument order.
    llvm::StringMap<unsigned> position;
    for (auto [i, param] : llvm::enumerate(module.getOps<tfm::ParamOp>()))
      position[param.getSymName()] = i;

    // Callees first: a call then reads the parameters its callee takes,
    // which become the caller's arguments in turn.
    for (auto func : lowering::calleesFirst(module)) {
      if (func.isExternal())
        continue;
      if (failed(passParamsToCallees(func)))
        return signalPassFailure();
      // Parameter name -> its reads, in declaration order.
      std::map<unsigned, SmallVector<tfm::GetParamOp>> reads;
      WalkResult walk = func.walk([&](Operation *op) {
        if (isa<tfm::BlockOp>(op)) {
          op->emitError() << "inline tfm.block regions (tfm-inline-blocks) "
                             "before tfm-params-to-args";
          return WalkResult::interrupt();
        }
        if (auto get = dyn_cast<tfm::GetParamOp>(op))
          reads[position.lookup(get.getName())].push_back(get);
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();

      Block &entry = func.getBody().front();
      for (auto &[pos, gets] : reads) {
        tfm::GetParamOp first = gets.front();
        unsigned index = func.getNumArguments();
        NamedAttrList attrs;
        attrs.append(tfm::kParamArgAttrName, first.getNameAttr().getAttr());
        func.insertArgument(index, first.getType(),
                            attrs.getDictionary(&getContext()),
                            first.getLoc());
        for (tfm::GetParamOp get : gets) {
          get.replaceAllUsesWith(entry.getArgument(index));
          get.erase();
        }
      }
    }
  }
};

} // namespace
