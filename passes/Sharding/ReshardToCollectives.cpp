//===- ReshardToCollectives.cpp - tfm.reshard -> mesh collectives -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/Passes.h"

#include "passes/Sharding/Reshard.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "llvm/ADT/StringMap.h"

namespace loom::sharding {
#define GEN_PASS_DEF_TFMRESHARDTOCOLLECTIVES
#include "passes/Sharding/Passes.h.inc"
} // namespace loom::sharding

using namespace mlir;
using namespace loom;

namespace {

struct ReshardToCollectivesPass
    : sharding::impl::TfmReshardToCollectivesBase<ReshardToCollectivesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<tfm::ReshardOp> reshards;
    module.walk([&](tfm::ReshardOp op) { reshards.push_back(op); });
    if (reshards.empty())
      return;
    if (!tfm::hasLocalShapes(module)) {
      reshards.front().emitError()
          << "collectives move per-rank tensors: run tfm-localize first";
      return signalPassFailure();
    }
    tfm::MeshAxesCache meshes;
    OpBuilder b(&getContext());
    for (tfm::ReshardOp op : reshards) {
      tfm::DistAttr to = tfm::getDist(op.getResult());
      const tfm::MeshAxesInfo *mesh = meshes.get(op, to.getMesh());
      if (!mesh)
        return signalPassFailure();
      b.setInsertionPoint(op);
      Operation *before = op->getPrevNode();
      FailureOr<Value> r = sharding::reshard(b, op, op.getInput(), to, *mesh);
      if (failed(r))
        return signalPassFailure();
      for (Operation *created = op->getPrevNode(); created != before;
           created = created->getPrevNode())
        if (isa<mesh::AllReduceOp, mesh::AllGatherOp, mesh::ReduceScatterOp,
                mesh::AllToAllOp>(created))
          ++numCollectives;
      op.replaceAllUsesWith(*r);
      op.erase();
    }
  }
};

} // namespace
