//===- Compiler.h - Ahead-of-time compilation to rank programs --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The library behind loom-compile: a tfm module and a parallel plan in,
// a directory of per-rank executables, a manifest and a launcher out
// (docs/MANIFEST.md). The tool only parses flags.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_COMPILER_H
#define LOOM_COMPILER_DRIVER_COMPILER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace loom::driver {

struct CompileOptions {
  /// Parallel sizes (Megatron meanings); see #tfm.plan.
  int64_t tp = 1, cp = 1, dp = 1, pp = 1, vpp = 1, ep = 1, etp = 0;
  bool sequenceParallel = false;
  /// Megatron's --eod-mask-loss: the loss skips end-of-document tokens (the
  /// id the model was imported with, loom-import --eod-token-id).
  bool eodMaskLoss = false;
  /// Context-parallel communication, one type or one per layer (empty: the
  /// default, p2p), and the hierarchical sizes of a2a+p2p.
  std::vector<std::string> cpCommType;
  std::vector<int64_t> hierarchicalCpSizes;
  std::string order = "tp-cp-ep-dp-pp";
  /// Megatron's --make-vocab-size-divisible-by: the vocabulary is padded to
  /// a multiple of this times tp (tfm-pad-vocab); the padding stays out of
  /// the softmax.
  int64_t makeVocabSizeDivisibleBy = 128;
  /// Also build @train_step (forward + backward); off: forward only.
  bool train = false;
  /// Megatron's activation recomputation: granularity "full" or
  /// "selective" (empty: none); with full, method "uniform" or "block" and
  /// the number of layers (empty / 0: not given, uniform and 1).
  std::string recomputeGranularity;
  std::string recomputeMethod;
  int64_t recomputeNumLayers = 0;
  /// Pipeline parallelism (pp > 1): Megatron's layer-split flags (-1: not
  /// given), the interleaved schedule's micro-batch group size (0: pp) and
  /// the p2p mode ("batched" or "unbatched").
  int64_t firstStageLayers = -1, lastStageLayers = -1;
  bool accountForEmbedding = false, accountForLoss = false;
  std::string pipelineLayout;
  int64_t microbatchGroupSize = 0;
  std::string p2pMode = "batched";
  /// Micro-batches per step (gradient accumulation).
  int64_t numMicrobatches = 1;
  /// Megatron's --global-batch-size: sequences per step over all
  /// data-parallel ranks; sets numMicrobatches to global / (micro-batch
  /// size x dp), which must divide. With `microbatchesGiven`, the two must
  /// agree.
  std::optional<int64_t> globalBatchSize;
  bool microbatchesGiven = false;
  /// The runtime backend the rank executables link: "cpu" or "cuda".
  std::string backend = "cpu";
  /// Where rank-XXXXX, manifest.json and launch are written.
  std::string outputDir = "out";
  /// Keep the LLVM IR of every distinct program next to its object.
  bool keepIntermediates = false;
  /// Receives one line per stage ("[2/6] lowering to LLVM").
  std::function<void(llvm::StringRef)> progress;
  /// A stage whose resulting module is printed to `irOutput` (plan,
  /// differentiate, shard, prepare, lower); empty: none.
  std::string printIrAfter;
  llvm::raw_ostream *irOutput = nullptr;
};

/// Compiles `module` (tfm IR at global shapes with a @forward function) for
/// the plan in `options`. Plans that need passes Loom does not have yet are
/// rejected with an error naming the flag. When `report` is non-null, writes
/// the per-rank report (memory and communication) to it.
llvm::Error compileModel(mlir::ModuleOp module, const CompileOptions &options,
                         llvm::raw_ostream *report = nullptr);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_COMPILER_H
