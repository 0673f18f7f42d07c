//===- GradientRules.h - One gradient rule per tfm op -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_AUTODIFF_GRADIENTRULES_H
#define LOOM_PASSES_AUTODIFF_GRADIENTRULES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/Operation.h"

namespace loom::autodiff {

/// What a rule needs from the pass while it writes the backward of one op.
struct GradientContext {
  mlir::OpBuilder &builder;
  /// The value, in the backward code, of a forward value the rule reads.
  llvm::function_ref<mlir::Value(mlir::Value)> forward;
  /// The gradient of a forward result (null when nothing depends on it).
  llvm::function_ref<mlir::Value(mlir::Value)> gradient;
  /// Adds `grad` to the gradient of the forward value `operand`.
  llvm::function_ref<void(mlir::Value operand, mlir::Value grad)> accumulate;
};

/// Whether gradients flow through values of this type (float tensors; token
/// ids, positions and masks are data).
bool isDifferentiable(mlir::Type type);

/// Writes the gradient ops of `op` at the builder's insertion point
/// (DifferentiableOpInterface). Fails with an error on `op` when it has no
/// rule.
mlir::LogicalResult emitGradient(mlir::Operation *op, GradientContext &ctx);

/// Attaches every tfm op's gradient rule when the tfm dialect loads.
void registerGradientRules(mlir::DialectRegistry &registry);

} // namespace loom::autodiff

#include "passes/Autodiff/GradientInterface.h.inc"

#endif // LOOM_PASSES_AUTODIFF_GRADIENTRULES_H
