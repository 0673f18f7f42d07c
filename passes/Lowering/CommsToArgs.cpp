//===- CommsToArgs.cpp - Communicators become function arguments -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "dialects/Tfm/TfmOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMCOMMSTOARGS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

/// The group kind of a collective: its mesh axes' names in the plan's order,
/// fastest first. Mesh axes are the order reversed, so that is descending
/// axis index: axes [1, 2] of ["pp", "dp", "cp", "tp"] are "cp-dp".
FailureOr<std::string> lowering::groupKindOf(Operation *collective,
                                             StringRef meshName,
                                             ArrayRef<int16_t> axes) {
  auto module = collective->getParentOfType<ModuleOp>();
  auto mesh = module.lookupSymbol<mesh::MeshOp>(meshName);
  auto names = mesh ? mesh->getAttrOfType<ArrayAttr>("tfm.mesh_axes") : nullptr;
  if (!names) {
    collective->emitError() << "mesh @" << meshName
                            << " has no tfm.mesh_axes; create it with "
                               "tfm-materialize-mesh";
    return failure();
  }
  SmallVector<int16_t> sorted(axes);
  llvm::sort(sorted, std::greater<int16_t>());
  std::string key;
  // The mesh ops' verifiers keep the axes within the mesh.
  for (int16_t axis : sorted) {
    if (!key.empty())
      key += "-";
    key += cast<StringAttr>(names[axis]).getValue().str();
  }
  if (key.empty()) {
    collective->emitError() << "a collective over no mesh axes";
    return failure();
  }
  return key;
}

namespace {

struct CommsToArgsPass : lowering::impl::TfmCommsToArgsBase<CommsToArgsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto ptrType = LLVM::LLVMPointerType::get(&getContext());
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      // Group kinds in first-use order (SetVector of strings: unique, ordered).
      SmallVector<std::string> kinds;
      SmallVector<Location> locs;
      WalkResult walk = func.walk([&](Operation *op) {
        FailureOr<std::string> key = failure();
        if (auto c = dyn_cast<mesh::AllReduceOp>(op))
          key = lowering::groupKindOf(op, c.getMesh(), c.getMeshAxes());
        else if (auto c = dyn_cast<mesh::AllGatherOp>(op))
          key = lowering::groupKindOf(op, c.getMesh(), c.getMeshAxes());
        else if (auto c = dyn_cast<mesh::ReduceScatterOp>(op))
          key = lowering::groupKindOf(op, c.getMesh(), c.getMeshAxes());
        else if (auto c = dyn_cast<mesh::AllToAllOp>(op))
          key = lowering::groupKindOf(op, c.getMesh(), c.getMeshAxes());
        else if (auto c = dyn_cast<mesh::AllSliceOp>(op))
          key = lowering::groupKindOf(op, c.getMesh(), c.getMeshAxes());
        else if (auto axis =
                     op->getAttrOfType<IntegerAttr>("vocab_parallel_axis"))
          // Vocab-parallel tfm ops reduce over (and find their vocabulary
          // slice in) the group of that axis of @dense.
          key = lowering::groupKindOf(op, "dense",
                                      {int16_t(axis.getInt())});
        else if (auto d = dyn_cast<tfm::DropoutOp>(op); d && d.getSplitAxis())
          // A split dropout finds its slice in the group of its axis.
          key = lowering::groupKindOf(op, "dense",
                                      {int16_t(*d.getSplitAxis())});
        else
          return WalkResult::advance();
        if (failed(key))
          return WalkResult::interrupt();
        if (!llvm::is_contained(kinds, *key)) {
          kinds.push_back(*key);
          locs.push_back(op->getLoc());
        }
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
      for (auto [kind, loc] : llvm::zip(kinds, locs)) {
        NamedAttrList attrs;
        attrs.append(lowering::kCommArgAttrName,
                     StringAttr::get(&getContext(), kind));
        func.insertArgument(func.getNumArguments(), ptrType,
                            attrs.getDictionary(&getContext()), loc);
      }
    }
  }
};

} // namespace
