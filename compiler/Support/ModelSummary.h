//===- ModelSummary.h - Human-readable summary of a tfm module --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_MODELSUMMARY_H
#define LOOM_COMPILER_SUPPORT_MODELSUMMARY_H

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace loom {

/// Prints what the IR holds: the model attributes, parameter count and size,
/// the model parts (tfm.block) and how many ops of each kind there are.
void printModelSummary(mlir::ModuleOp module, llvm::raw_ostream &os);

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_MODELSUMMARY_H
