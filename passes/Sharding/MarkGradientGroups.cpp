//===- MarkGradientGroups.cpp - Where each gradient is summed ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "rankgen/RankGenerator.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMMARKGRADIENTGROUPS
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;

namespace {

struct MarkGradientGroupsPass
    : sharding::impl::TfmMarkGradientGroupsBase<MarkGradientGroupsPass> {
  void runOnOperation() override {
    for (auto f : getOperation().getOps<func::FuncOp>()) {
      if (!f->hasAttr(tfm::kEntryAttrName))
        continue;
      for (unsigned i = 0; i < f.getNumResults(); ++i)
        if (f.getResultAttr(i, tfm::kGradResultAttrName) &&
            failed(mark(f, i)))
          return signalPassFailure();
    }
  }

  /// The group of result `i` of `f`: dp and the axes it is partial over.
  LogicalResult mark(func::FuncOp f, unsigned i) {
    auto name = f.getResultAttrOfType<StringAttr>(i, tfm::kGradResultAttrName);
    tfm::DistAttr dist = tfm::getDist(f.getResultTypes()[i]);
    if (!dist)
      return f.emitError() << "the gradient of " << name
                           << " has no distribution (run tfm-shard first)";
    SmallVector<StringRef> axes = {rankgen::dimName(rankgen::Dim::DP)};
    if (dist.isPartial()) {
      if (dist.getReduction() != mesh::ReductionKind::Sum)
        return f.emitError() << "the gradient of " << name << " leaves @"
                             << f.getName() << " " << tfm::describe(dist)
                             << "; the rank program sums gradients";
      for (StringRef axis : dist.getPartialAxes())
        axes.push_back(axis);
    }
    FailureOr<tfm::MeshAxesInfo> mesh =
        tfm::MeshAxesInfo::lookup(f, dist.getMesh());
    if (failed(mesh))
      return failure();
    for (StringRef axis : axes)
      if (!mesh->index(axis))
        return f.emitError() << "the gradient of " << name << " is summed "
                             << "over mesh axis " << axis << ", which @"
                             << dist.getMesh().getValue() << " has not";
    f.setResultAttr(i, tfm::kGradGroupAttrName,
                    StringAttr::get(f.getContext(), mesh->groupKind(axes)));
    return success();
  }
};

} // namespace
