//===- ImportFlags.h - The importer's flags, declared once ------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The flags that shape the imported model beyond its config.json (micro-batch
// size, sequence length, dtype, document masks, dropout), registered once for
// every tool that imports (loom-import, loom-train) and read into one
// loom::ImportOptions.
//
//   static llvm::cl::OptionCategory category("loom-import options");
//   static loom::ImportFlags importFlags(category);
//   ...
//   llvm::Expected<loom::ImportOptions> options = importFlags.options();
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_IMPORTFLAGS_H
#define LOOM_COMPILER_SUPPORT_IMPORTFLAGS_H

#include "compiler/Import/ModelImporter.h"

#include "llvm/Support/CommandLine.h"

#include <memory>

namespace loom {

class ImportFlags {
public:
  /// Registers the flags in `category`. Without `vocabPadding`,
  /// --make-vocab-size-divisible-by is left to the compile-time flags
  /// (loom-train: Megatron's flag pads out of the softmax, at compile time).
  explicit ImportFlags(llvm::cl::OptionCategory &category,
                       bool vocabPadding = true);

  /// The options the flags give, or the error naming the flag.
  llvm::Expected<ImportOptions> options() const;

  llvm::cl::opt<int64_t> microBatchSize, seqLength;
  llvm::cl::opt<std::string> dtype;
  llvm::cl::opt<int64_t> eodTokenId;
  llvm::cl::opt<bool> resetPositionIds, resetAttentionMask;
  llvm::cl::opt<double> hiddenDropout;
  llvm::cl::opt<int64_t> seed;
  /// Null without vocabPadding.
  std::unique_ptr<llvm::cl::opt<int64_t>> makeVocabSizeDivisibleBy;
};

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_IMPORTFLAGS_H
