//===- ExpertRows.cpp - The chain of ops on an MoE layer's rows -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/ExpertRows.h"

#include "dialects/Tfm/TfmOps.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

FailureOr<SmallVector<OpOperand *>>
plan::resizeExpertRows(Value rows, int64_t n, StringRef pass) {
  SmallVector<OpOperand *> ends;
  SmallVector<Value> work{rows};
  DenseSet<Value> done;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!done.insert(v).second)
      continue;
    auto type = cast<RankedTensorType>(v.getType());
    SmallVector<int64_t> shape(type.getShape());
    shape[0] = n;
    v.setType(type.clone(shape));
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (auto unpermute = dyn_cast<MoeUnpermuteOp>(user)) {
        if (&use != &unpermute.getRowsMutable())
          return user->emitOpError()
                 << "reads the dispatched rows other than as its rows";
        ends.push_back(&use);
        continue;
      }
      if (auto linear = dyn_cast<GroupedLinearOp>(user)) {
        if (linear.getInput() != v)
          return user->emitOpError()
                 << "reads the dispatched rows other than as its input";
        work.push_back(linear.getResult());
        continue;
      }
      if (isa<SwigluOp, SiluOp, GeluOp, CastOp>(user)) {
        work.push_back(user->getResult(0));
        continue;
      }
      return user->emitOpError() << "reads the dispatched rows; " << pass
                                 << " cannot resize them through it";
    }
  }
  return ends;
}
