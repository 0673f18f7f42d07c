//===- Program.h - What the compiled program is, read off its IR -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The facts the driver needs about the program (for the manifest and the
// report) are read off the IR after the stage that decides them, never
// decided again here: the model as imported and planned (tfm.model), each
// parameter's distribution and the pipeline ranks that read it, each
// entry's arguments and results, and the group each gradient is summed
// over (tfm-mark-gradient-groups).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_DRIVER_PROGRAM_H
#define LOOM_COMPILER_DRIVER_PROGRAM_H

#include "dialects/Tfm/TfmOps.h"
#include "runtime/manifest/Manifest.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <set>
#include <string>

namespace loom::driver {

/// An error with `message` (the driver's errors are plain messages).
llvm::Error fail(const llvm::Twine &message);

/// Writes `contents` to `path` through a temporary file renamed into place,
/// so a reader never sees half a file; `executable` sets mode 0755.
llvm::Error writeFileAtomically(llvm::StringRef path, llvm::StringRef contents,
                                bool executable = false);

/// The runtime's dtype of an element type.
loomrt_dtype dtypeOf(mlir::Type elementType);

/// The bytes a tensor or memref of static shape `shaped` holds.
int64_t bytesOf(mlir::Type shaped);

/// The model as loom-import described it and the plan stage padded it.
struct ModelInfo {
  std::string family = "gpt2";
  int64_t hidden = 0, vocab = 0, unpaddedVocab = 0;
  /// The sequence the data is sampled at and the one the program runs at
  /// (tfm-pad-sequence pads it for cp and SP).
  int64_t seqLength = 0, paddedSeqLength = 0;
  int64_t microBatchSize = 0;
  /// The whole tfm.model dictionary (null when the module has none).
  mlir::DictionaryAttr attrs;
};

/// Reads tfm.model; `tokens` is the forward entry's tokens type.
ModelInfo readModel(mlir::ModuleOp module, mlir::RankedTensorType tokens);

/// How a rank holds a parameter: whole, or split on one dim over the
/// process group whose position gives a rank its slice.
struct Placement {
  std::string group;
  std::optional<int64_t> splitDim;
  int64_t parts = 1;
  /// A second split, within the first's piece (an expert's weights: the
  /// experts over ep, then each expert's features over the expert tp
  /// group).
  struct Then {
    std::string group;
    int64_t splitDim = 0;
    int64_t parts = 1;
  };
  std::optional<Then> then;
};

/// A parameter: its declaration, placement and the pp ranks whose
/// functions read it (empty without pipelining: all of them).
struct ParamInfo {
  std::string name;
  llvm::SmallVector<int64_t> shape;
  mlir::Type elementType;
  tfm::InitKind init;
  double std = 0.0;
  Placement placement;
  std::set<int64_t> ppRanks;

  /// The bytes one rank holds.
  int64_t localBytes() const;
};

/// The module's parameters, after the shard stage (and the pipeline stage,
/// which decides the pp ranks that read each).
llvm::Expected<llvm::SmallVector<ParamInfo, 0>> describeParams(mlir::ModuleOp module,
                                                            int64_t pp);

/// The entry points of a module (functions with tfm.entry), in module order.
llvm::SmallVector<mlir::func::FuncOp> entryPoints(mlir::ModuleOp module);
/// The argument of `f` that carries batch input `kind` ("tokens"), if any.
std::optional<unsigned> inputArgument(mlir::func::FuncOp f,
                                      llvm::StringRef kind);
/// The model's forward entry: tokens, labels and loss mask in, the loss
/// out. Errors name what is missing.
llvm::Expected<mlir::func::FuncOp> forwardEntry(mlir::ModuleOp module);

/// The manifest's description of one prepared entry point
/// (docs/MANIFEST.md): its arguments (batch inputs, parameters,
/// communicators), then the results that become out-params (the loss, then
/// one gradient per parameter).
mlir::FailureOr<manifest::Entry> describeEntry(mlir::func::FuncOp f);

/// The groups the rank program sums gradients over (tfm.grad_group of the
/// gradient results of `entries`): one for the dense parameters ("dp"
/// without gradients) and, with expert parallelism, the experts' own
/// (Megatron's expert-data-parallel group, "expert:dp").
struct GradientGroups {
  std::string dense;
  /// The parameters whose gradient is summed over another group.
  llvm::StringMap<std::string> others;
};
/// Dense gradients that name different groups are an error: the rank
/// program reduces them as one buffer.
llvm::Expected<GradientGroups>
gradientGroups(llvm::ArrayRef<mlir::func::FuncOp> entries);

/// Bytes of activations a sharded train step keeps for its backward (the
/// forward blocks' results that backward blocks read; per micro-batch).
/// nullopt for an entry without backward.
std::optional<int64_t> savedActivationBytes(mlir::func::FuncOp func);

} // namespace loom::driver

#endif // LOOM_COMPILER_DRIVER_PROGRAM_H
