//===- Passes.h - Fusion passes ---------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_FUSION_PASSES_H
#define LOOM_PASSES_FUSION_PASSES_H

#include "dialects/Tfm/TfmDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::fusion {

#define GEN_PASS_DECL
#include "passes/Fusion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Fusion/Passes.h.inc"

} // namespace loom::fusion

#endif // LOOM_PASSES_FUSION_PASSES_H
