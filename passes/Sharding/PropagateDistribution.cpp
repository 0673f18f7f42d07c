//===- PropagateDistribution.cpp - Every value gets a distribution -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Walks every function in program order (forward blocks before the
// backward blocks that reuse their decisions) and asks each op's
// propagation rule how to distribute it. Batch inputs (tokens, labels, loss
// mask) enter with their sequence split over cp in Megatron's load-balanced
// chunks, other arguments without a distribution replicated. Values leave a
// tfm.block in the residual stream's layout, partial sums reduced (Megatron
// reduces the vocab-parallel embedding and the head's input gradient before
// they leave those layers, and a partial activation saved for backward
// would be reduced twice). Parameter gradients are the exception: they may leave
// partial, summed with their other contributions, and leave the function
// distributed like their parameters (partial over cp: the rank program
// reduces them over dp x cp).
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "passes/Plan/PlanMeshes.h"
#include "passes/Sharding/Propagation.h"

#include "rankgen/RankGenerator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMPROPAGATEDISTRIBUTION
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;
using loom::sharding::Propagation;
using tfm::DistAttr;

namespace {

class Walker {
public:
  explicit Walker(Propagation &p) : p(p) {}

  LogicalResult run(func::FuncOp func) {
    Block &body = func.getBody().front();
    for (BlockArgument arg : body.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()) || tfm::getDist(arg))
        continue;
      // Batch inputs enter in the plan's layout (context parallelism
      // splits their sequence), everything else replicated.
      FailureOr<DistAttr> d = p.replicated();
      if (func.getArgAttr(arg.getArgNumber(), tfm::kInputArgAttrName))
        d = p.batchInput(arg, arg.getLoc());
      if (failed(d))
        return failure();
      Propagation::setDist(arg, *d);
    }
    if (failed(walk(body)))
      return failure();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    // Parameter gradients leave distributed like their parameters (a
    // sequence-parallel norm's weight gradient is all-reduced here), still
    // partial over cp: the rank program sums them over dp x cp once a step,
    // as Megatron reduces over its data-parallel group with cp.
    for (unsigned i = 0; i < ret.getNumOperands(); ++i)
      if (auto name = func.getResultAttrOfType<StringAttr>(
              i, tfm::kGradResultAttrName))
        if (DistAttr d = p.paramDist(name.getValue())) {
          DistAttr grad = tfm::getDist(ret.getOperand(i));
          if (!p.cp().empty() &&
              llvm::is_contained(grad.getPartialAxes(), p.cp()) &&
              grad.getReduction() == mesh::ReductionKind::Sum)
            d = d.withPartial({p.cp()});
          if (failed(p.require(ret, i, d)))
            return failure();
        }
    func.setType(FunctionType::get(func.getContext(), body.getArgumentTypes(),
                                   ret.getOperandTypes()));
    return success();
  }

private:
  LogicalResult walk(Block &body) {
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator()))
      if (failed(visit(&op)))
        return failure();
    return success();
  }

  LogicalResult visit(Operation *op) {
    if (auto block = dyn_cast<tfm::BlockOp>(op)) {
      // Values cross into and out of a block as they are.
      Block &body = block.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), block.getInputs()))
        arg.setType(input.getType());
      if (failed(walk(body)))
        return failure();
      Operation *yield = body.getTerminator();
      for (unsigned i = 0; i < yield->getNumOperands(); ++i) {
        Value v = yield->getOperand(i);
        // A rank's own expert counts (a partial sum over the ranks that
        // route the other tokens) are saved for the backward as they are.
        if (!tfm::getDist(v) || !tfm::getDist(v).isPartial() ||
            isParamGradient(block.getResult(i)) ||
            v.getDefiningOp<tfm::MoePermuteOp>())
          continue;
        FailureOr<DistAttr> want = p.residual(v, yield);
        if (failed(want) || failed(p.require(yield, i, *want)))
          return failure();
      }
      for (auto [result, yielded] :
           llvm::zip(block.getResults(), yield->getOperands()))
        result.setType(yielded.getType());
      return success();
    }
    if (auto get = dyn_cast<tfm::GetParamOp>(op)) {
      p.visitParamRead(get);
      return success();
    }
    if (isa<tfm::ReshardOp>(op))
      return success();
    LogicalResult result = success();
    if (auto rule = dyn_cast<sharding::PropagationOpInterface>(op))
      result = rule.propagate(p);
    else if (isa<tfm::DistributedOpInterface>(op))
      result = failure(failed(p.requireAsIs(op)) || failed(p.inferResults(op)));
    else
      return op->emitOpError()
             << "has no distribution rule; tfm-propagate-distribution "
                "cannot distribute it";
    return result;
  }

  /// Whether `v` is (a contribution to) a parameter's gradient: its uses
  /// end, through sums, in results of the function marked tfm.grad.
  static bool isParamGradient(Value v) {
    return !v.use_empty() && llvm::all_of(v.getUses(), [](OpOperand &use) {
      Operation *user = use.getOwner();
      if (auto add = dyn_cast<tfm::AddOp>(user))
        return isParamGradient(add.getResult());
      if (auto ret = dyn_cast<func::ReturnOp>(user))
        return bool(cast<func::FuncOp>(ret->getParentOp())
                        .getResultAttr(use.getOperandNumber(),
                                       tfm::kGradResultAttrName));
      return false;
    });
  }

  Propagation &p;
};

struct PropagateDistributionPass
    : sharding::impl::TfmPropagateDistributionBase<PropagateDistributionPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (tfm::hasLocalShapes(module)) {
      module.emitError() << "tfm-propagate-distribution needs global shapes, "
                            "but the module's are per-rank (tfm-localize ran)";
      return signalPassFailure();
    }
    FailureOr<mesh::MeshOp> mesh = plan::denseMesh(module);
    if (failed(mesh))
      return signalPassFailure();
    FailureOr<tfm::MeshAxesInfo> axes = tfm::MeshAxesInfo::of(*mesh);
    if (failed(axes)) {
      mesh->emitError() << "mesh has no " << tfm::kMeshAxesAttrName;
      return signalPassFailure();
    }
    auto plan = module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName);
    // The mesh axes carry the plan's order tokens (tfm-materialize-mesh).
    Propagation p(&getContext(), FlatSymbolRefAttr::get(*mesh), *axes, plan,
                  rankgen::dimName(rankgen::Dim::TP),
                  rankgen::dimName(rankgen::Dim::CP));
    Walker walker(p);
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() && failed(walker.run(func)))
        return signalPassFailure();
    numReshards += p.numReshards;
    numSplitParams += p.numSplitParams;
  }
};

} // namespace
