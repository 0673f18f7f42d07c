//===- SetPlan.cpp - Attach a parallel plan to the module -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMSETPLAN
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;

namespace {

struct SetPlanPass : plan::impl::TfmSetPlanBase<SetPlanPass> {
  using TfmSetPlanBase::TfmSetPlanBase;
  explicit SetPlanPass(rankgen::Plan plan) : given(std::move(plan)) {}

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (given) {
      if (failed(plan::setPlan(module, *given)))
        signalPassFailure();
      return;
    }
    rankgen::Plan plan;
    plan.sizes.tp = tp;
    plan.sizes.cp = cp;
    plan.sizes.dp = dp;
    plan.sizes.pp = pp;
    plan.sizes.ep = ep;
    plan.sizes.etp = etp;
    plan.sizes.order = order;
    plan.sizes.hierarchicalCpSizes.assign(hierarchicalCpSizes.begin(),
                                          hierarchicalCpSizes.end());
    plan.vpp = vpp;
    plan.sequenceParallel = sequenceParallel;
    for (const std::string &t : cpCommType) {
      auto type = rankgen::parseCpCommType(t);
      if (!type) {
        module.emitError() << "cp-comm-type: " << type.error();
        return signalPassFailure();
      }
      plan.cpCommTypes.push_back(*type);
    }
    auto mode = rankgen::parseP2PMode(p2pMode);
    if (!mode) {
      module.emitError() << "p2p-mode: " << mode.error();
      return signalPassFailure();
    }
    plan.p2pMode = *mode;
    plan.numMicrobatches = numMicrobatches;
    plan.microbatchGroupSize = microbatchGroupSize;
    if (firstStageLayers >= 0)
      plan.firstStageLayers = int64_t(firstStageLayers);
    if (lastStageLayers >= 0)
      plan.lastStageLayers = int64_t(lastStageLayers);
    plan.accountForEmbedding = accountForEmbedding;
    plan.accountForLoss = accountForLoss;
    plan.pipelineLayout = layout;
    plan.makeVocabSizeDivisibleBy = makeVocabSizeDivisibleBy;
    if (failed(plan::setPlan(module, plan)))
      return signalPassFailure();
  }

  /// The plan the driver gives, instead of the options.
  std::optional<rankgen::Plan> given;
};

} // namespace

std::unique_ptr<Pass> plan::createTfmSetPlan(const rankgen::Plan &plan) {
  return std::make_unique<SetPlanPass>(plan);
}

LogicalResult plan::setPlan(ModuleOp module, const rankgen::Plan &plan) {
  auto emitError = [&] { return module.emitError(); };
  auto attr = tfm::PlanAttr::getChecked(emitError, module.getContext(), plan);
  if (!attr)
    return failure();
  // A per-layer list must have one entry per layer of the model.
  size_t types = plan.cpCommTypes.size();
  if (types > 1) {
    auto model = module->getAttrOfType<DictionaryAttr>("tfm.model");
    auto layers = model ? model.getAs<IntegerAttr>("num_layers") : nullptr;
    if (!layers)
      return module.emitError() << "a per-layer cp_comm_type list needs the "
                                   "module's tfm.model num_layers";
    if (int64_t(types) != layers.getInt())
      return module.emitError()
             << "cp_comm_type has " << types << " entries but the model has "
             << layers.getInt() << " layers";
  }
  module->setAttr(tfm::kPlanAttrName, attr);
  return success();
}
