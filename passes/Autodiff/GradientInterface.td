//===- GradientInterface.td - How an op is differentiated ---*- tablegen -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_AUTODIFF_GRADIENTINTERFACE_TD
#define LOOM_PASSES_AUTODIFF_GRADIENTINTERFACE_TD

include "mlir/IR/OpBase.td"

def Tfm_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::loom::autodiff";
  let description = [{
    How tfm-differentiate writes an op's backward: its gradient ops, which
    read forward values (saved or recomputed) and the gradients of its
    results, and contribute the gradients of its operands. Attached to tfm
    ops as external models (GradientRules.cpp, one rule per op), so the
    dialect holds semantics and the autodiff pass holds the calculus; an op
    without one is an error when a gradient must flow through it.
  }];
  let methods = [
    InterfaceMethod<[{
        Writes the gradient ops at `ctx.builder`'s insertion point: reads
        forward values through `ctx.forward`, result gradients through
        `ctx.gradient` and adds operand gradients with `ctx.accumulate`.
      }],
      "::llvm::LogicalResult", "emitGradient",
      (ins "::loom::autodiff::GradientContext &":$ctx)>
  ];
}

#endif // LOOM_PASSES_AUTODIFF_GRADIENTINTERFACE_TD
