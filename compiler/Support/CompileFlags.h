//===- CompileFlags.h - The compiler's flags, declared once -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Everything that changes the compiled program, registered once for every
// tool that compiles (loom-compile, loom-train): the plan (PlanFlags, with
// Megatron's long names), the global batch, the loss mask, activation
// recomputation, --train and the backend, read into one
// loom::driver::CompileOptions. Where the program goes and what is printed
// on the way (-o, --report, --print-ir-after, ...) stay each tool's own.
//
//   static llvm::cl::OptionCategory category("loom-compile options");
//   static loom::CompileFlags compileFlags(category, "loom-compile");
//   ...
//   llvm::Expected<loom::driver::CompileOptions> o = compileFlags.options();
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_SUPPORT_COMPILEFLAGS_H
#define LOOM_COMPILER_SUPPORT_COMPILEFLAGS_H

#include "compiler/Driver/Compiler.h"
#include "compiler/Support/PlanFlags.h"

#include "llvm/Support/CommandLine.h"

#include <memory>

namespace loom {

class CompileFlags {
public:
  /// Registers the flags in `category`; errors name the tool `tool`. With
  /// `trainFlag` false there is no --train (loom-train always compiles the
  /// train step) and options() sets `train`.
  CompileFlags(llvm::cl::OptionCategory &category, llvm::StringRef tool,
               bool trainFlag = true);

  /// The options the flags give (the output fields left at their
  /// defaults), or the error naming the flag.
  llvm::Expected<driver::CompileOptions> options() const;

  /// The list flags Megatron writes space-separated (for joinListFlags).
  static std::vector<ListFlag> listFlags() { return PlanFlags::listFlags(); }

  PlanFlags plan;
  llvm::cl::opt<int64_t> globalBatchSize;
  llvm::cl::opt<bool> eodMaskLoss;
  /// Null without trainFlag.
  std::unique_ptr<llvm::cl::opt<bool>> train;
  llvm::cl::opt<bool> recomputeActivations;
  llvm::cl::opt<std::string> recomputeGranularity, recomputeMethod;
  llvm::cl::opt<int64_t> recomputeNumLayers;
  llvm::cl::opt<double> moeAuxLossCoeff, moeZLossCoeff;
  llvm::cl::opt<double> moeExpertCapacityFactor;
  llvm::cl::opt<std::string> moeTokenDropPolicy;
  llvm::cl::opt<bool> moePadExpertInputToCapacity;
  llvm::cl::opt<std::string> moeTokenDispatcherType;
  llvm::cl::opt<std::string> moeRouterLoadBalancingType;
  llvm::cl::opt<std::string> backend;
  llvm::cl::opt<bool> noFuse;
};

} // namespace loom

#endif // LOOM_COMPILER_SUPPORT_COMPILEFLAGS_H
