//===- Passes.h - Lowering passes -------------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_PASSES_H
#define LOOM_PASSES_LOWERING_PASSES_H

#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace loom::lowering {

/// The function attribute that names an entry point's C symbol.
inline constexpr llvm::StringLiteral kEntryAttrName = "tfm.entry";
/// The argument attribute that names the process group of a communicator
/// argument.
inline constexpr llvm::StringLiteral kCommArgAttrName = "tfm.comm";
/// The argument attribute that names the parameter an argument carries.
inline constexpr llvm::StringLiteral kParamArgAttrName = "tfm.param";

/// The process-group kind a mesh collective runs over ("tp", "cp-dp"), from
/// the axis names tfm-materialize-mesh recorded on the mesh.
mlir::FailureOr<std::string> groupKindOf(mlir::Operation *collective,
                                         llvm::StringRef mesh,
                                         llvm::ArrayRef<int16_t> axes);

#define GEN_PASS_DECL
#include "passes/Lowering/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Lowering/Passes.h.inc"

} // namespace loom::lowering

#endif // LOOM_PASSES_LOWERING_PASSES_H
