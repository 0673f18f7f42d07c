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

#include "rankgen/Plan.h"

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
  /// The parallel plan: sizes, context parallelism, the pipeline's split and
  /// schedule, the vocabulary multiple (rankgen::Plan, from PlanFlags).
  rankgen::Plan plan;
  /// Megatron's --eod-mask-loss: the loss skips end-of-document tokens (the
  /// id the model was imported with, loom-import --eod-token-id).
  bool eodMaskLoss = false;
  /// Also build @train_step (forward + backward); off: forward only.
  bool train = false;
  /// Megatron's activation recomputation: granularity "full" or
  /// "selective" (empty: none); with full, method "uniform" or "block" and
  /// the number of layers (empty / 0: not given, uniform and 1).
  std::string recomputeGranularity;
  std::string recomputeMethod;
  int64_t recomputeNumLayers = 0;
  /// Megatron's --global-batch-size: sequences per step over all
  /// data-parallel ranks; sets the plan's micro-batches to global /
  /// (micro-batch size x dp), which must divide. With `microbatchesGiven`,
  /// the two must agree.
  std::optional<int64_t> globalBatchSize;
  bool microbatchesGiven = false;
  /// Megatron's --moe-aux-loss-coeff and --moe-z-loss-coeff for every
  /// router (unset: the model's, the config's router_aux_loss_coef and no
  /// z-loss).
  std::optional<double> moeAuxLossCoeff, moeZLossCoeff;
  /// Megatron's --moe-expert-capacity-factor (unset: dropless),
  /// --moe-token-drop-policy ("probs" or "position") and
  /// --moe-pad-expert-input-to-capacity.
  std::optional<double> moeExpertCapacityFactor;
  std::string moeTokenDropPolicy = "probs";
  bool moePadExpertInputToCapacity = false;
  /// Megatron's --moe-token-dispatcher-type allgather (else alltoall).
  bool moeAllgatherDispatcher = false;
  /// The fuse stage (tfm-fuse); --no-fuse turns it off.
  bool fuse = true;
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
  /// Where --report-json writes the report as JSON (empty: nowhere).
  std::string reportJsonPath;
};

/// Compiles `module` (tfm IR at global shapes with a @forward function) for
/// the plan in `options`. Plans that need passes Loom does not have yet are
/// rejected with an error naming the flag. When `report` is non-null, writes
/// the per-rank report (memory and communication) to it.
llvm::Error compileModel(mlir::ModuleOp module, const CompileOptions &options,
                         llvm::raw_ostream *report = nullptr);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_COMPILER_H
