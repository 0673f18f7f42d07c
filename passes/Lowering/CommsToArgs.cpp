//===- CommsToArgs.cpp - Communicators become function arguments -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "passes/Lowering/SlicePositions.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "llvm/ADT/TypeSwitch.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMCOMMSTOARGS
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

/// The group kind of a collective: its mesh axes' names in the plan's order,
/// fastest first. Mesh axes are the order reversed, so that is descending
/// axis index: axes [1, 2] of ["pp", "dp", "cp", "tp"] are "cp-dp". The
/// runtime's group ranks its members in mesh order (the last axis fastest),
/// which is the order of the collective's pieces only when its axes are in
/// mesh order.
FailureOr<std::string> lowering::groupKindOf(Operation *collective,
                                             StringRef meshName,
                                             ArrayRef<int16_t> axes) {
  FailureOr<tfm::MeshAxesInfo> mesh = tfm::MeshAxesInfo::lookup(
      collective, FlatSymbolRefAttr::get(collective->getContext(), meshName));
  if (failed(mesh))
    return failure();
  if (!llvm::is_sorted(axes)) {
    collective->emitError()
        << "runs over mesh axes out of the mesh's order; the runtime's "
           "groups order their ranks by the mesh";
    return failure();
  }
  if (axes.empty()) {
    collective->emitError() << "a collective over no mesh axes";
    return failure();
  }
  // The mesh ops' verifiers keep the axes within the mesh.
  SmallVector<StringRef> names;
  for (int16_t axis : axes)
    names.push_back(mesh->name(axis));
  return mesh->groupKind(names);
}

FailureOr<std::optional<std::pair<std::string, int64_t>>>
lowering::ringGroupOf(Operation *op) {
  using Result = std::optional<std::pair<std::string, int64_t>>;
  FlatSymbolRefAttr meshName;
  StringRef axis;
  std::optional<uint64_t> level;
  bool ring = llvm::TypeSwitch<Operation *, bool>(op)
                  .Case<tfm::RingShiftOp, tfm::AttentionSectionOp,
                        tfm::AttentionSectionGradOp, tfm::LevelAllToAllOp>(
                      [&](auto s) {
                        meshName = s.getMeshAttr();
                        axis = s.getAxis();
                        level = s.getLevel();
                        return true;
                      })
                  .Case<tfm::PipelineP2POp, tfm::MoeGatherCountsOp,
                        tfm::MoeDispatchOp, tfm::MoeCombineOp>([&](auto s) {
                    meshName = s.getMeshAttr();
                    axis = s.getAxis();
                    return true;
                  })
                  .Default([](Operation *) { return false; });
  if (!ring)
    return Result();
  if (level) {
    // A level of the plan's hierarchical groups of the axis (RankGen's
    // "hcp:<level>" kinds, which only context parallelism has).
    auto plan = op->getParentOfType<ModuleOp>()->getAttrOfType<tfm::PlanAttr>(
        tfm::kPlanAttrName);
    DenseI64ArrayAttr sizes = plan ? plan.getHierarchicalCpSizes() : nullptr;
    if (axis != "cp" || !sizes || *level >= uint64_t(sizes.size()))
      return op->emitOpError()
             << "runs over level " << *level << " of the hierarchical groups "
             << "of " << axis << ", which the plan does not have";
    return Result(std::make_pair("hcp:" + std::to_string(*level),
                                 sizes[int64_t(*level)]));
  }
  FailureOr<tfm::MeshAxesInfo> mesh = tfm::MeshAxesInfo::lookup(op, meshName);
  if (failed(mesh))
    return failure();
  std::optional<int16_t> index = mesh->index(axis);
  if (!index)
    return op->emitOpError() << "rings over " << axis
                             << ", which is not an axis of " << meshName;
  FailureOr<std::string> kind =
      groupKindOf(op, meshName.getValue(), ArrayRef<int16_t>{*index});
  if (failed(kind))
    return failure();
  return Result(std::make_pair(*kind, mesh->size(axis)));
}

namespace {

struct CommsToArgsPass : lowering::impl::TfmCommsToArgsBase<CommsToArgsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto ptrType = LLVM::LLVMPointerType::get(&getContext());
    // Callees first: a caller then needs its callees' communicators too
    // and passes its own along.
    for (auto func : lowering::calleesFirst(module)) {
      if (func.isExternal())
        continue;
      // Group kinds in first-use order (SetVector of strings: unique, ordered).
      SmallVector<std::string> kinds;
      SmallVector<Location> locs;
      auto need = [&](StringRef kind, Location loc) {
        if (llvm::is_contained(kinds, kind))
          return;
        kinds.push_back(kind.str());
        locs.push_back(loc);
      };
      WalkResult walk = func.walk([&](Operation *op) {
        if (auto call = dyn_cast<func::CallOp>(op)) {
          if (auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
                  call, call.getCalleeAttr()))
            for (unsigned i = 0; i < callee.getNumArguments(); ++i)
              if (auto g = callee.getArgAttrOfType<StringAttr>(
                      i, tfm::kCommArgAttrName))
                need(g.getValue(), op->getLoc());
          return WalkResult::advance();
        }
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
        else if (auto ring = lowering::ringGroupOf(op); failed(ring)) {
          return WalkResult::interrupt();
        } else if (*ring) {
          // Ring attention's hops and sections (which one depends on the
          // rank) use the ring's group.
          need((*ring)->first, op->getLoc());
          return WalkResult::advance();
        } else {
          // Ops whose kernels read where this rank's slice lies (a
          // vocab-parallel table's rows, dropout's global indices, a
          // context-parallel rank's token positions) find it in the group
          // that splits it.
          auto positioned = lowering::positionedDims(op);
          if (failed(positioned))
            return WalkResult::interrupt();
          for (const lowering::PositionedDim &d : *positioned)
            if (!d.group.empty())
              need(d.group, op->getLoc());
          return WalkResult::advance();
        }
        if (failed(key))
          return WalkResult::interrupt();
        need(*key, op->getLoc());
        return WalkResult::advance();
      });
      if (walk.wasInterrupted())
        return signalPassFailure();
      unsigned first = func.getNumArguments();
      for (auto [kind, loc] : llvm::zip(kinds, locs)) {
        NamedAttrList attrs;
        attrs.append(tfm::kCommArgAttrName,
                     StringAttr::get(&getContext(), kind));
        func.insertArgument(func.getNumArguments(), ptrType,
                            attrs.getDictionary(&getContext()), loc);
      }
      // Each call passes the communicators its callee takes, in its order.
      LogicalResult passed = lowering::passAddedArguments(
          func, [&](OpBuilder &, func::CallOp call, func::FuncOp callee,
                    unsigned i) -> Value {
            auto g =
                callee.getArgAttrOfType<StringAttr>(i, tfm::kCommArgAttrName);
            if (!g) {
              call.emitError() << "@" << callee.getName() << " takes argument "
                               << i << ", which is not a communicator";
              return Value();
            }
            auto at = llvm::find(kinds, g.getValue().str());
            return func.getArgument(first + unsigned(at - kinds.begin()));
          });
      if (failed(passed))
        return signalPassFailure();
    }
  }
};

} // namespace
