//===- Localize.cpp - Global shapes become per-rank shapes ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMLOCALIZE
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;

namespace {

class Localizer {
public:
  /// Gives `v` its per-rank shape; errors name `where`.
  LogicalResult localize(Value v, Operation *where) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    tfm::DistAttr dist = tfm::getDist(type);
    if (!dist)
      return success();
    const tfm::MeshAxesInfo *mesh = meshes.get(where, dist.getMesh());
    if (!mesh || failed(mesh->verify(dist, where)))
      return failure();
    FailureOr<SmallVector<int64_t>> local =
        tfm::localShape(type.getShape(), dist, *mesh, where, "");
    if (failed(local))
      return failure();
    v.setType(type.clone(*local));
    return success();
  }

  LogicalResult run(func::FuncOp func) {
    Block &body = func.getBody().front();
    // Pre-order: the function's arguments first, then every op's region
    // arguments before the ops inside.
    WalkResult walk = func.walk<WalkOrder::PreOrder>([&](Operation *op) {
      for (Region &r : op->getRegions())
        for (BlockArgument arg : r.getArguments())
          if (failed(localize(arg, op)))
            return WalkResult::interrupt();
      for (Value r : op->getResults())
        if (failed(localize(r, op)))
          return WalkResult::interrupt();
      if (auto rule = dyn_cast<tfm::DistributedOpInterface>(op))
        rule.adaptToLocalShapes();
      return WalkResult::advance();
    });
    if (walk.wasInterrupted())
      return failure();
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   body.getTerminator()->getOperandTypes()));
    return success();
  }

private:
  tfm::MeshAxesCache meshes;
};

struct LocalizePass : sharding::impl::TfmLocalizeBase<LocalizePass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tfm::hasLocalShapes(module)) {
      module.emitError() << "shapes are already per-rank (tfm-localize ran)";
      return signalPassFailure();
    }
    Localizer localizer;
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && failed(localizer.run(func)))
        return signalPassFailure();
    module->setAttr(tfm::kLocalShapesAttrName, UnitAttr::get(&getContext()));
  }
};

} // namespace
