//===- Passes.h - Automatic differentiation ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_AUTODIFF_PASSES_H
#define LOOM_PASSES_AUTODIFF_PASSES_H

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::autodiff {

#define GEN_PASS_DECL
#include "passes/Autodiff/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Autodiff/Passes.h.inc"

} // namespace loom::autodiff

#endif // LOOM_PASSES_AUTODIFF_PASSES_H
