//===- ObjectEmitter.h - LLVM dialect -> host object file -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_OBJECTEMITTER_H
#define LOOM_COMPILER_DRIVER_OBJECTEMITTER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace loom::driver {

/// Translates an LLVM-dialect module to LLVM IR, optimizes it (O2) and writes
/// a relocatable object for the host (x86-64) with LLVM's TargetMachine, in
/// process. With `llPath` non-empty, also writes the LLVM IR there.
llvm::Error emitObjectFile(mlir::ModuleOp module, llvm::StringRef objectPath,
                           llvm::StringRef llPath = "");

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_OBJECTEMITTER_H
