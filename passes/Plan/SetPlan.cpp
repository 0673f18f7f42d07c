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

  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    Builder b(ctx);

    ArrayAttr commTypes;
    if (!cpCommType.empty()) {
      SmallVector<Attribute> types;
      // TransformerEngine spells it all_gather, Megatron's help allgather.
      for (const std::string &t : cpCommType)
        types.push_back(b.getStringAttr(t == "all_gather" ? "allgather" : t));
      commTypes = b.getArrayAttr(types);
    }
    DenseI64ArrayAttr hierarchical;
    if (!hierarchicalCpSizes.empty())
      hierarchical = b.getDenseI64ArrayAttr(hierarchicalCpSizes);

    auto emitError = [&] { return module.emitError(); };
    auto plan = tfm::PlanAttr::getChecked(
        emitError, ctx, int64_t(tp), int64_t(cp), int64_t(dp), int64_t(pp),
        int64_t(vpp), int64_t(ep), int64_t(etp),
        sequenceParallel ? b.getBoolAttr(true) : BoolAttr(), commTypes,
        hierarchical, StringRef(order));
    if (!plan)
      return signalPassFailure();

    // A per-layer list must have one entry per layer of the model.
    if (commTypes && commTypes.size() > 1) {
      auto model = module->getAttrOfType<DictionaryAttr>("tfm.model");
      auto layers = model ? model.getAs<IntegerAttr>("num_layers") : nullptr;
      if (!layers) {
        module.emitError() << "a per-layer cp_comm_type list needs the "
                              "module's tfm.model num_layers";
        return signalPassFailure();
      }
      if (int64_t(commTypes.size()) != layers.getInt()) {
        module.emitError() << "cp_comm_type has " << commTypes.size()
                           << " entries but the model has " << layers.getInt()
                           << " layers";
        return signalPassFailure();
      }
    }
    module->setAttr(tfm::kPlanAttrName, plan);
  }
};

} // namespace
