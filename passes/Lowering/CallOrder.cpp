//===- CallOrder.cpp - Functions ordered callees first ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The passes that turn what a function reads (parameters, communicators)
// into arguments must rewrite a callee before its callers: a call then
// passes what the callee now takes (callWith). Pipelined steps call one
// function per model block (tfm-schedule-pipeline); calls are not recursive.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace loom;

SmallVector<func::FuncOp> lowering::calleesFirst(ModuleOp module) {
  SmallVector<func::FuncOp> order;
  llvm::DenseSet<Operation *> visited;
  std::function<void(func::FuncOp)> visit = [&](func::FuncOp f) {
    if (!visited.insert(f).second)
      return;
    f.walk([&](func::CallOp call) {
      if (auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
              call, call.getCalleeAttr()))
        visit(callee);
    });
    order.push_back(f);
  };
  for (auto f : module.getOps<func::FuncOp>())
    visit(f);
  return order;
}

LogicalResult lowering::passAddedArguments(
    func::FuncOp caller,
    function_ref<Value(OpBuilder &, func::CallOp, func::FuncOp, unsigned)>
        added) {
  SmallVector<func::CallOp> calls;
  caller.walk([&](func::CallOp call) { calls.push_back(call); });
  for (func::CallOp call : calls) {
    auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
        call, call.getCalleeAttr());
    if (!callee || callee.getNumArguments() == call.getNumOperands())
      continue;
    OpBuilder b(call);
    SmallVector<Value> operands(call.getOperands());
    for (unsigned i = call.getNumOperands(); i < callee.getNumArguments();
         ++i) {
      Value v = added(b, call, callee, i);
      if (!v)
        return failure();
      operands.push_back(v);
    }
    callWith(call, callee, operands);
  }
  return success();
}

func::CallOp lowering::callWith(func::CallOp call, func::FuncOp callee,
                                ValueRange operands) {
  OpBuilder b(call);
  auto replacement = b.create<func::CallOp>(call.getLoc(), callee, operands);
  call.replaceAllUsesWith(replacement.getResults());
  call.erase();
  return replacement;
}
