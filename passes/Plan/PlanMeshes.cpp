//===- PlanMeshes.cpp - The meshes a plan is materialized on ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/PlanMeshes.h"

#include "passes/Plan/MeshLayout.h"

#include "dialects/Tfm/TfmAttrs.h"

#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace loom;

/// The mesh.mesh of the module plan's world `world` (dense or expert).
static FailureOr<mesh::MeshOp> worldMesh(ModuleOp module, bool expert) {
  auto planAttr = module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName);
  if (!planAttr)
    return module.emitError() << "module has no tfm.plan; run --tfm-set-plan "
                                 "first";
  auto layout = rankgen::ParallelLayout::create(planAttr.toParallelConfig());
  if (!layout)
    return module.emitError() << "plan: " << layout.error();
  plan::MeshAxes want = expert ? plan::expertMeshAxes(layout->config(), layout->expertDp())
                         : plan::denseMeshAxes(layout->config());
  for (auto m : module.getOps<mesh::MeshOp>()) {
    auto names = m->getAttrOfType<ArrayAttr>(tfm::kMeshAxesAttrName);
    if (!names || names.size() != want.names.size() ||
        m.getShape() != ArrayRef<int64_t>(want.shape))
      continue;
    if (llvm::all_of(llvm::zip(names, want.names), [](auto pair) {
          return cast<StringAttr>(std::get<0>(pair)).getValue() ==
                 std::get<1>(pair);
        }))
      return m;
  }
  std::string axes;
  for (auto [name, size] : llvm::zip(want.names, want.shape))
    axes += (axes.empty() ? "" : ", ") + name + " " + std::to_string(size);
  return module.emitError() << "no mesh.mesh of the plan's "
                            << (expert ? "expert" : "dense") << " world (axes "
                            << axes << "); run tfm-materialize-mesh";
}

FailureOr<mesh::MeshOp> plan::denseMesh(ModuleOp module) {
  return worldMesh(module, /*expert=*/false);
}

FailureOr<mesh::MeshOp> plan::expertMesh(ModuleOp module) {
  return worldMesh(module, /*expert=*/true);
}
