//===- Passes.h - Parallel plan passes --------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_PASSES_H
#define LOOM_PASSES_PLAN_PASSES_H

#include "dialects/Tfm/TfmDialect.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::plan {

#define GEN_PASS_DECL
#include "passes/Plan/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Plan/Passes.h.inc"

} // namespace loom::plan

#endif // LOOM_PASSES_PLAN_PASSES_H
