//===- Passes.h - Pipeline parallelism passes -------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_PASSES_H
#define LOOM_PASSES_PIPELINE_PASSES_H

#include "dialects/Tfm/TfmDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::pipeline {

#define GEN_PASS_DECL
#include "passes/Pipeline/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Pipeline/Passes.h.inc"

} // namespace loom::pipeline

#endif // LOOM_PASSES_PIPELINE_PASSES_H
