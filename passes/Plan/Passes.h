//===- Passes.h - Parallel plan passes --------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_PASSES_H
#define LOOM_PASSES_PLAN_PASSES_H

#include "dialects/Tfm/TfmDialect.h"
#include "rankgen/Plan.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::plan {

#define GEN_PASS_DECL
#include "passes/Plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Plan/Passes.h.inc"

/// tfm-set-plan with `plan` instead of options (the driver's plan stage).
std::unique_ptr<mlir::Pass> createTfmSetPlan(const rankgen::Plan &plan);

/// Attaches `plan` as the module's #tfm.plan; an error at the module when it
/// is not valid (the attribute's verifier) or a per-layer cp_comm_type list
/// does not have one entry per layer.
mlir::LogicalResult setPlan(mlir::ModuleOp module, const rankgen::Plan &plan);

} // namespace loom::plan

#endif // LOOM_PASSES_PLAN_PASSES_H
