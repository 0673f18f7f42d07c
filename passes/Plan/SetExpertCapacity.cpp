//===- SetExpertCapacity.cpp - Token dropping at an expert capacity -------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The importer builds MoE layers dropless; a capacity (Megatron's
// --moe-expert-capacity-factor) is a training choice, so it is set here:
// a tfm.moe_drop after each router, the dispatch told its capacity, and the
// dispatched rows resized through the expert layers that work on them. The
// capacity is static (the micro-batch's token count is), which is what lets
// the buffers be planned at compile time.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/ExpertRows.h"
#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmOps.h"

#include <cmath>

namespace loom::plan {
#define GEN_PASS_DEF_TFMSETEXPERTCAPACITY
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// Gives `rows` (the dispatched rows) `n` rows, and every value computed
/// row by row from it up to the combine.
struct SetExpertCapacityPass
    : plan::impl::TfmSetExpertCapacityBase<SetExpertCapacityPass> {
  using TfmSetExpertCapacityBase::TfmSetExpertCapacityBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (!(capacityFactor >= 0.0) || !std::isfinite(capacityFactor)) {
      module.emitError() << "capacity-factor " << capacityFactor
                         << " must be a finite number >= 0";
      return signalPassFailure();
    }
    std::optional<DropPolicy> policy = symbolizeDropPolicy(dropPolicy);
    if (!policy) {
      module.emitError() << "drop-policy '" << dropPolicy
                         << "' is not probs or position";
      return signalPassFailure();
    }
    if (capacityFactor == 0.0) {
      if (padToCapacity) {
        module.emitError() << "pad-to-capacity needs a capacity factor";
        return signalPassFailure();
      }
      return; // dropless
    }
    bool differentiated = false;
    module.walk([&](MoePermuteGradOp) { differentiated = true; });
    if (differentiated) {
      module.emitError() << "tfm-set-expert-capacity runs before "
                            "tfm-differentiate (the module has gradients)";
      return signalPassFailure();
    }
    SmallVector<MoePermuteOp> permutes;
    module.walk([&](MoePermuteOp op) { permutes.push_back(op); });
    Builder attrs(&getContext());
    for (MoePermuteOp permute : permutes) {
      if (permute.getCapacity()) {
        permute.emitOpError() << "already has a capacity";
        return signalPassFailure();
      }
      auto route = permute.getExperts().getDefiningOp<MoeRouteOp>();
      if (!route) {
        permute.emitOpError() << "dispatches experts that do not come from a "
                                 "tfm.moe_route: no probabilities to drop by";
        return signalPassFailure();
      }
      auto experts = cast<RankedTensorType>(route.getExperts().getType());
      const int64_t tokens = experts.getDimSize(0) * experts.getDimSize(1),
                    k = experts.getDimSize(2),
                    e = int64_t(permute.getNumExperts());
      // Megatron's get_capacity over the micro-batch's pairs; an expert
      // takes a token at most once, so never more than the tokens.
      auto capacity = int64_t(std::ceil(double(tokens * k) / double(e) *
                                        capacityFactor));
      capacity = std::clamp<int64_t>(capacity, 1, std::max<int64_t>(tokens, 1));
      OpBuilder b(permute);
      Value kept = b.create<MoeDropOp>(
          permute.getLoc(), route.getProbs(), route.getExperts(),
          attrs.getI64IntegerAttr(e), attrs.getI64IntegerAttr(capacity),
          DropPolicyAttr::get(&getContext(), *policy));
      permute.getExpertsMutable().assign(kept);
      permute.setCapacityAttr(attrs.getI64IntegerAttr(capacity));
      if (padToCapacity)
        permute.setPadToCapacity(true);
      int64_t rows = padToCapacity ? e * capacity
                                   : std::min(tokens * k, e * capacity);
      if (failed(plan::resizeExpertRows(permute.getRows(), rows,
                                        getArgument())))
        return signalPassFailure();
      ++numLayers;
    }
  }
};

} // namespace
