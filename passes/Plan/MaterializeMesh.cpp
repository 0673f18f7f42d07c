//===- MaterializeMesh.cpp - Plan -> mesh.mesh symbols ----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/MeshLayout.h"
#include "passes/Plan/Passes.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace loom::plan {
#define GEN_PASS_DEF_TFMMATERIALIZEMESH
#include "passes/Plan/Passes.h.inc"
} // namespace loom::plan

using namespace mlir;
using namespace loom;

namespace {

struct MaterializeMeshPass
    : plan::impl::TfmMaterializeMeshBase<MaterializeMeshPass> {
  using TfmMaterializeMeshBase::TfmMaterializeMeshBase;

  /// Creates (or replaces) the mesh `name` at the start of the module.
  void createMesh(ModuleOp module, StringRef name, const plan::MeshAxes &axes) {
    if (Operation *old = SymbolTable::lookupSymbolIn(module, name))
      old->erase();
    OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
    auto mesh = b.create<mesh::MeshOp>(module.getLoc(), name, axes.shape);
    SmallVector<StringRef> names(axes.names.begin(), axes.names.end());
    mesh->setAttr(tfm::kMeshAxesAttrName, b.getStrArrayAttr(names));
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto plan = module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName);
    if (!plan) {
      module.emitError() << "module has no tfm.plan; run --tfm-set-plan first";
      return signalPassFailure();
    }
    if (worldSize != 0 && worldSize != plan.getWorldSize()) {
      module.emitError() << "plan world size " << plan.getWorldSize()
                         << " (tp*cp*dp*pp) does not match world size "
                         << int64_t(worldSize);
      return signalPassFailure();
    }
    // The plan verified, so the layout builds; it resolves etp and edp.
    auto layout = rankgen::ParallelLayout::create(plan.toParallelConfig());
    if (!layout) {
      module.emitError() << "plan: " << layout.error();
      return signalPassFailure();
    }
    const rankgen::ParallelConfig &config = layout->config();
    // Expert mesh first so that @dense ends up first in the module.
    if (config.ep > 1 || config.etp != config.tp)
      createMesh(module, "expert",
                 plan::expertMeshAxes(config, layout->expertDp()));
    createMesh(module, "dense", plan::denseMeshAxes(config));
  }
};

} // namespace
