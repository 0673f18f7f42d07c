//===- VerifyDistribution.cpp - Check distributions against rules -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "llvm/ADT/StringMap.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMVERIFYDISTRIBUTION
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;

namespace {

/// Values in a hierarchical ring level's layout carry no distribution (no
/// #tfm.dist names it): they come from tfm.level_all_to_all and flow only
/// through the ring's ops, whose rules check them.
bool isRingOp(Operation *op) {
  return isa_and_nonnull<tfm::LevelAllToAllOp, tfm::PermuteChunksOp,
                         tfm::RingShiftOp, tfm::AttentionSectionOp,
                         tfm::AttentionSectionGradOp>(op);
}

/// Ops that pass values as they are or only read them: their values are
/// checked where they are defined and used. Calls are typed by their
/// callee (func.call's own verifier), pipeline batches move a value to
/// the stage that computes with it as its type says (tfm-verify-pipeline-
/// p2p checks the pairs), markers compute nothing, and a step's stacked
/// micro-batches are sliced and filled as their types say; a loop
/// (a pipelined step's steady phase) hands its values from trip to trip
/// with their types.
bool isStructure(Operation *op) {
  return isa<tfm::BlockOp, tfm::YieldOp, func::ReturnOp, func::CallOp,
             tfm::PipelineP2POp, tfm::GradsReadyOp, tfm::PipelineDataOp,
             tfm::MicrobatchSliceOp, tfm::MicrobatchInsertOp, tfm::EmptyOp,
             scf::ForOp, scf::YieldOp>(op);
}

class Verifier {
public:
  explicit Verifier(ModuleOp module)
      : local(tfm::hasLocalShapes(module)) {}

  /// `v` has a distribution on a mesh that has its axes, and at global
  /// shapes its splits divide.
  LogicalResult value(Value v, Operation *where) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type)
      return success();
    tfm::DistAttr dist = tfm::getDist(type);
    if (!dist && isRingOp(v.getDefiningOp()))
      return success(); // a ring level's layout: the op's rule checks it
    if (!dist)
      return where->emitError()
             << "a value of type " << type
             << " has no distribution (run tfm-propagate-distribution)";
    const tfm::MeshAxesInfo *mesh = meshes.get(where, dist.getMesh());
    if (!mesh || failed(mesh->verify(dist, where)))
      return failure();
    if (!local &&
        failed(tfm::localShape(type.getShape(), dist, *mesh, where, "")))
      return failure();
    return success();
  }

  LogicalResult op(Operation *op) {
    for (Region &r : op->getRegions())
      for (BlockArgument arg : r.getArguments())
        if (failed(value(arg, op)))
          return failure();
    for (Value r : op->getResults())
      if (failed(value(r, op)))
        return failure();
    if (auto get = dyn_cast<tfm::GetParamOp>(op)) {
      tfm::DistAttr d = tfm::getDist(get.getResult());
      auto [it, inserted] = params.try_emplace(get.getName(), d);
      if (!inserted && it->second != d)
        return op->emitError()
               << "@" << get.getName() << " is read as "
               << tfm::describe(d) << " here and as "
               << tfm::describe(it->second) << " elsewhere";
    }
    // A value in a ring level's layout is read by the ring's ops alone
    // (their rules check it); anywhere else it would be read as if it had
    // a distribution.
    for (Value v : op->getOperands())
      if (isa<RankedTensorType>(v.getType()) && !tfm::getDist(v) &&
          isRingOp(v.getDefiningOp()) && !isRingOp(op))
        return op->emitOpError()
               << "reads a value in a hierarchical ring level's layout "
                  "(no distribution), which only the ring's ops may read; "
                  "tfm.level_all_to_all brings it back";
    // An operand without a distribution was reported where it is defined
    // (the walk is in program order); its users' rules cannot be checked.
    if (llvm::any_of(op->getOperands(), [](Value v) {
          return isa<RankedTensorType>(v.getType()) && !tfm::getDist(v) &&
                 !isRingOp(v.getDefiningOp());
        }))
      return failure();
    if (auto rule = dyn_cast<tfm::DistributedOpInterface>(op))
      return rule.verifyDistribution();
    // Structure passes values as they are; any other op computing on
    // tensors must have a rule.
    if (isStructure(op))
      return success();
    if (llvm::any_of(op->getOperandTypes(), llvm::IsaPred<TensorType>))
      return op->emitOpError()
             << "has no distribution rule, so its distributions cannot be "
                "checked";
    return success();
  }

private:
  bool local;
  tfm::MeshAxesCache meshes;
  llvm::StringMap<tfm::DistAttr> params;
};

struct VerifyDistributionPass
    : sharding::impl::TfmVerifyDistributionBase<VerifyDistributionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    Verifier verifier(module);
    bool ok = true;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      for (BlockArgument arg : func.getArguments())
        ok &= succeeded(verifier.value(arg, func));
      // Report every op that breaks its rule, not just the first.
      // Pre-order: block arguments before the ops that use them.
      func.walk<WalkOrder::PreOrder>([&](Operation *op) {
        if (op != func)
          ok &= succeeded(verifier.op(op));
      });
    }
    if (!ok)
      signalPassFailure();
  }
};

} // namespace
