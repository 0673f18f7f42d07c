//===- loom-opt.cpp - Loom's opt tool ---------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Runs any Loom or upstream pass on .mlir input, for inspection and lit tests.
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll/InitAll.h"
#include "compiler/Support/ShortHelp.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/InitAllPasses.h"

int main(int argc, char **argv) {
  // Upstream passes run between Loom's (bufferization, conversions to LLVM).
  mlir::registerAllPasses();
  loom::registerAllPasses();
  mlir::DialectRegistry registry;
  loom::registerAllDialects(registry);
  loom::ShortHelpArgs parsed(argc, argv);
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      parsed.argc(), parsed.argv(), "Loom optimizer driver\n", registry));
}
