//===- Passes.h - Lowering passes -------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_PASSES_H
#define LOOM_PASSES_LOWERING_PASSES_H

#include "dialects/Tfm/TfmAttrs.h"
#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::lowering {


/// The module's functions, each after every function it calls.
llvm::SmallVector<mlir::func::FuncOp> calleesFirst(mlir::ModuleOp module);
/// Replaces `call` by a call of `callee` with `operands` (a callee that
/// gained arguments).
mlir::func::CallOp callWith(mlir::func::CallOp call, mlir::func::FuncOp callee,
                            mlir::ValueRange operands);
/// Makes each call in `caller` whose callee gained arguments (takes more
/// than the call passes) pass them too: argument i of the callee is
/// `added(builder before the call, call, callee, i)`, a null value when it
/// cannot be made (the callback reports why).
mlir::LogicalResult passAddedArguments(
    mlir::func::FuncOp caller,
    llvm::function_ref<mlir::Value(mlir::OpBuilder &, mlir::func::CallOp,
                                   mlir::func::FuncOp, unsigned)>
        added);

/// The process-group kind a mesh collective runs over ("tp", "cp-dp"), from
/// the axis names tfm-materialize-mesh recorded on the mesh.
mlir::FailureOr<std::string> groupKindOf(mlir::Operation *collective,
                                         llvm::StringRef mesh,
                                         llvm::ArrayRef<int16_t> axes);

/// The group kind and size of the ring a ring-attention op (tfm.ring_shift,
/// tfm.attention_section, tfm.attention_section_grad, tfm.pipeline_p2p) or
/// a tfm.level_all_to_all runs on: its mesh axis' group or, with `level`,
/// that level of the plan's hierarchical cp groups ("hcp:<level>");
/// nullopt for other ops.
mlir::FailureOr<std::optional<std::pair<std::string, int64_t>>>
ringGroupOf(mlir::Operation *op);

/// Whether `loc` is that of an op tfm-inline-blocks took out of a backward
/// block (its NameLoc says "... backward").
bool isFromBackwardBlock(mlir::Location loc);

#define GEN_PASS_DECL
#include "passes/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Lowering/Passes.h.inc"

} // namespace loom::lowering

#endif // LOOM_PASSES_LOWERING_PASSES_H
