//===- ConfigFuzzer.cpp - Fuzz the Hugging Face config importer -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What loom-import does with a config.json: parse it into a ModelConfig and,
// when that succeeds, build the tfm module and verify it. A rejected config
// must come back as an llvm::Error; an accepted one that builds must verify
// (loom-import calls a failure an importer bug, so this aborts).
//
//===----------------------------------------------------------------------===//

#include "compiler/Import/ModelImporter.h"

#include "dialects/Tfm/TfmDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<loom::ModelConfig> config = loom::parseModelConfig(text);
  if (!config) {
    llvm::consumeError(config.takeError());
    return 0;
  }
  // The module holds a block per layer: a config of a billion layers is a
  // valid request for a huge program, not a parser input worth a minute.
  if (config->numLayers > 4)
    return 0;

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.loadDialect<loom::tfm::TfmDialect, mlir::func::FuncDialect>();
  loom::ImportOptions options;
  // A short sequence keeps the activations' shapes small whatever the
  // config's maximum; the config's own maximum is exercised by its checks.
  options.seqLength = std::min<int64_t>(config->maxPositions, 8);
  auto module = loom::buildModelModule(context, *config, options);
  if (!module) {
    llvm::consumeError(module.takeError());
    return 0;
  }
  if (mlir::failed(mlir::verify(**module))) {
    llvm::errs() << "accepted config builds a module that does not verify\n";
    std::abort();
  }
  return 0;
}
