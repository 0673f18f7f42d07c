//===- TfmIrFuzzer.cpp - Fuzz loom-opt's parsing and verification ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What loom-opt does before any pass: parse the input with every dialect
// Loom registers, verify it, and print it back. Bad IR must end in a
// diagnostic; nothing may crash.
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll/InitAll.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const mlir::DialectRegistry *registry = [] {
    auto *r = new mlir::DialectRegistry();
    loom::registerAllDialects(*r);
    return r;
  }();
  // A fresh context per input: types and attributes are interned for the
  // context's lifetime, and one shared context would grow without bound.
  mlir::MLIRContext context(*registry, mlir::MLIRContext::Threading::DISABLED);
  // Diagnostics are the expected outcome for bad input; drop them.
  mlir::ScopedDiagnosticHandler quiet(
      &context, [](mlir::Diagnostic &) { return mlir::success(); });

  // MLIR's lexer reads up to a terminating NUL, which the files loom-opt
  // reads have (MemoryBuffer) and libFuzzer's input does not: a copy.
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(
          llvm::StringRef(reinterpret_cast<const char *>(data), size),
          "fuzz.mlir"),
      llvm::SMLoc());
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/true);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sources, config);
  if (!module)
    return 0;
  // loom-opt prints what it parsed (with no passes, the input verified).
  std::string printed;
  llvm::raw_string_ostream os(printed);
  module->print(os);
  return 0;
}
