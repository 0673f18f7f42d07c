//===- SetRouterLosses.cpp - The routers' loss coefficients -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The importer writes one tfm.moe_router_loss per MoE layer with the
// config's load-balancing coefficient; training flags (Megatron's
// --moe-aux-loss-coeff, --moe-z-loss-coeff) override it here, and a loss
// with both coefficients zero is erased (with the counts only it reads)
// rather than computed as zero.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmOps.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMSETROUTERLOSSES
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

struct SetRouterLossesPass
    : plan::impl::TfmSetRouterLossesBase<SetRouterLossesPass> {
  using TfmSetRouterLossesBase::TfmSetRouterLossesBase;

  void runOnOperation() override {
    Builder b(&getContext());
    SmallVector<MoeRouterLossOp> losses;
    getOperation().walk([&](MoeRouterLossOp op) { losses.push_back(op); });
    for (MoeRouterLossOp op : losses) {
      if (auxCoeff >= 0.0)
        op.setAuxCoeffAttr(b.getF64FloatAttr(auxCoeff));
      if (zCoeff >= 0.0)
        op.setZCoeffAttr(b.getF64FloatAttr(zCoeff));
      // Nothing reads the losses but their gradient (tfm-differentiate).
      if (op.getAuxCoeff().isZero() && op.getZCoeff().isZero() &&
          op->use_empty()) {
        // Its counts too, when nothing else reads them.
        Operation *counts = op.getCounts().getDefiningOp<MoeRouteCountsOp>();
        op.erase();
        if (counts && counts->use_empty())
          counts->erase();
        ++numErased;
      }
    }
  }
};

} // namespace
