//===- Passes.h - Sharding passes -------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_PASSES_H
#define LOOM_PASSES_SHARDING_PASSES_H

#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::sharding {

#define GEN_PASS_DECL
#include "passes/Sharding/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Sharding/Passes.h.inc"

} // namespace loom::sharding

#endif // LOOM_PASSES_SHARDING_PASSES_H
