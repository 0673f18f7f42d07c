//===- PlanMeshes.h - The meshes a plan is materialized on ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// tfm-materialize-mesh writes one mesh.mesh per world of the plan (dense
// layers; experts when they differ), each with its axis names. Passes that
// distribute values find a world's mesh by those axes, never by its symbol
// name.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_PLANMESHES_H
#define LOOM_PASSES_PLAN_PLANMESHES_H

#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace loom::plan {

/// The mesh.mesh of the module plan's dense world (axes tp, cp, dp and pp in
/// the plan's order and sizes). Emits an error at the module and fails when
/// the module has no plan or no such mesh.
mlir::FailureOr<mlir::mesh::MeshOp> denseMesh(mlir::ModuleOp module);

/// The mesh.mesh of the module plan's expert world (axes tp (etp), ep, dp
/// (edp) and pp), which tfm-materialize-mesh writes when ep > 1 or etp
/// differs from tp; errors as denseMesh.
mlir::FailureOr<mlir::mesh::MeshOp> expertMesh(mlir::ModuleOp module);

} // namespace loom::plan

#endif // LOOM_PASSES_PLAN_PLANMESHES_H
