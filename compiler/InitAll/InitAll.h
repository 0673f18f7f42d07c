//===- InitAll.h - Register every Loom dialect and pass ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The one registration entry point that loom-opt and the compiler driver share.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_INITALL_INITALL_H
#define LOOM_COMPILER_INITALL_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace loom {

/// Loom's dialects plus the upstream dialects the pipeline uses (func, arith,
/// tensor, linalg, scf, mesh, bufferization, memref, llvm).
void registerAllDialects(mlir::DialectRegistry &registry);

/// Every Loom pass and pass pipeline.
void registerAllPasses();

} // namespace loom

#endif // LOOM_COMPILER_INITALL_INITALL_H
