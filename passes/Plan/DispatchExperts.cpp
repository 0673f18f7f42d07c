//===- DispatchExperts.cpp - Expert parallelism's token dispatch -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Around each MoE layer's experts: a counts exchange, a dispatch of the rows
// to the ranks holding their experts and a combine of the outputs back
// (Megatron's MoEAlltoAllTokenDispatcher). The experts' chain between them
// is resized to the rows a rank may receive.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/ExpertRows.h"
#include "passes/Plan/Passes.h"
#include "passes/Plan/PlanMeshes.h"

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmOps.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMDISPATCHEXPERTS
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

struct DispatchExpertsPass
    : plan::impl::TfmDispatchExpertsBase<DispatchExpertsPass> {
  using TfmDispatchExpertsBase::TfmDispatchExpertsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto planAttr = module->getAttrOfType<PlanAttr>(kPlanAttrName);
    if (!planAttr) {
      module.emitError() << "module has no tfm.plan; run --tfm-set-plan first";
      return signalPassFailure();
    }
    const int64_t ep = planAttr.getEp();
    if (ep == 1)
      return;
    SmallVector<MoePermuteOp> permutes;
    bool differentiated = false;
    module.walk([&](Operation *op) {
      if (auto permute = dyn_cast<MoePermuteOp>(op))
        permutes.push_back(permute);
      differentiated |= isa<MoePermuteGradOp>(op);
    });
    if (differentiated) {
      module.emitError() << "tfm-dispatch-experts runs before "
                            "tfm-differentiate (the module has gradients)";
      return signalPassFailure();
    }
    if (permutes.empty())
      return;
    FailureOr<mesh::MeshOp> expert = plan::expertMesh(module);
    if (failed(expert))
      return signalPassFailure();
    auto meshRef = FlatSymbolRefAttr::get(*expert);
    auto axis = StringAttr::get(&getContext(), "ep");
    for (MoePermuteOp permute : permutes)
      if (failed(dispatch(permute, meshRef, axis, ep, tokenRanks(planAttr))))
        return signalPassFailure();
  }

  /// The ranks a micro-batch's tokens are routed on, each its own share:
  /// the cp ranks, and the tp ranks where those route their own
  /// sequence-parallel tokens.
  static int64_t tokenRanks(PlanAttr plan) {
    return plan.getCp() * (plan.routesLocalTokens() ? plan.getTp() : 1);
  }

  LogicalResult dispatch(MoePermuteOp permute, FlatSymbolRefAttr mesh,
                         StringAttr axis, int64_t ep, int64_t shares) {
    const int64_t experts = int64_t(permute.getNumExperts());
    if (experts % ep != 0)
      return permute.emitOpError()
             << "dispatches " << experts
             << " experts, which do not divide over ep " << ep;
    Value rows = permute.getRows(), counts = permute.getCounts();
    // The experts' chain reads the rows and counts only.
    for (Value v : {rows, counts})
      for (Operation *user : v.getUsers())
        if (!isa<GroupedLinearOp>(user))
          return user->emitOpError()
                 << "reads an MoE layer's permuted rows or counts; only "
                    "grouped linears may (tfm-dispatch-experts moves them "
                    "to other ranks)";
    auto rowsType = cast<RankedTensorType>(rows.getType());
    auto countsType = cast<RankedTensorType>(counts.getType());
    OpBuilder b = OpBuilder::atBlockEnd(permute->getBlock());
    b.setInsertionPointAfter(permute);
    Location loc = permute.getLoc();
    Value all = b.create<MoeGatherCountsOp>(
        loc, RankedTensorType::get({ep * experts}, countsType.getElementType()),
        counts, mesh, axis);
    // Global IR: every rank's P * N rows at most, split over ep; a rank's
    // rows are those of its own share of the tokens (N / cp, and / tp
    // where it routes its sequence-parallel tokens).
    if (rowsType.getDimSize(0) % shares != 0)
      return permute.emitOpError()
             << "permutes " << rowsType.getDimSize(0)
             << " rows, which do not divide over the " << shares
             << " ranks that route a share of the tokens each";
    const int64_t received = ep * ep * rowsType.getDimSize(0) / shares;
    UnitAttr gather = allgather ? b.getUnitAttr() : UnitAttr();
    auto dispatched = b.create<MoeDispatchOp>(
        loc, rowsType.clone({received, rowsType.getDimSize(1)}), countsType,
        rows, all, mesh, axis, gather);
    rows.replaceAllUsesExcept(dispatched.getDispatched(), dispatched);
    counts.replaceUsesWithIf(dispatched.getLocalCounts(), [&](OpOperand &use) {
      return isa<GroupedLinearOp>(use.getOwner());
    });
    FailureOr<SmallVector<OpOperand *>> ends = plan::resizeExpertRows(
        dispatched.getDispatched(), received, getArgument());
    if (failed(ends))
      return failure();
    for (OpOperand *end : *ends) {
      OpBuilder before(end->getOwner());
      auto out = cast<RankedTensorType>(end->get().getType());
      Value back = before.create<MoeCombineOp>(
          loc, out.clone({rowsType.getDimSize(0), out.getDimSize(1)}),
          end->get(), all, mesh, axis, gather);
      end->set(back);
    }
    ++numLayers;
    return success();
  }
};

} // namespace
