//===- Pipelines.h - Named pass pipelines -----------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loom-compile's stages as pipelines that loom-opt runs by name, so that
//
//   loom-opt m.mlir --tfm-plan="tp=2 sp=true" --tfm-differentiate --tfm-shard
//
// prints exactly what `loom-compile m.mlir --tp 2 --sp --train
// --print-ir-after=shard` prints.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_COMPILER_PIPELINES_PIPELINES_H
#define LOOM_COMPILER_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassOptions.h"

#include <string>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace loom {

/// The plan stage's options: Megatron's parallel sizes (see #tfm.plan).
struct TfmPlanPipelineOptions
    : mlir::PassPipelineOptions<TfmPlanPipelineOptions> {
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> cp{*this, "cp", llvm::cl::desc("Context-parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> dp{*this, "dp", llvm::cl::desc("Data-parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> pp{*this, "pp", llvm::cl::desc("Pipeline-parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> vpp{*this, "vpp",
                      llvm::cl::desc("Virtual pipeline stages per rank"),
                      llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep", llvm::cl::desc("Expert-parallel size"),
                     llvm::cl::init(1)};
  Option<int64_t> etp{*this, "etp",
                      llvm::cl::desc("Expert tensor-parallel size (0 = tp)"),
                      llvm::cl::init(0)};
  Option<bool> sequenceParallel{*this, "sp",
                                llvm::cl::desc("Sequence parallelism"),
                                llvm::cl::init(false)};
  ListOption<std::string> cpCommType{
      *this, "cp-comm-type",
      llvm::cl::desc("Context-parallel communication: p2p, a2a, allgather, "
                     "a2a+p2p; one value, or one per layer")};
  ListOption<int64_t> hierarchicalCpSizes{
      *this, "hierarchical-cp-sizes",
      llvm::cl::desc("Sizes of hierarchical context parallelism, inner "
                     "first")};
  Option<std::string> order{*this, "order",
                            llvm::cl::desc("Rank order, fastest first"),
                            llvm::cl::init("tp-cp-ep-dp-pp")};
  Option<int64_t> makeVocabSizeDivisibleBy{
      *this, "make-vocab-size-divisible-by",
      llvm::cl::desc("Pad the vocabulary to a multiple of this times tp"),
      llvm::cl::init(128)};
};

/// plan: tfm-set-plan, tfm-pad-vocab and tfm-materialize-mesh.
void buildTfmPlanPipeline(mlir::OpPassManager &pm,
                          const TfmPlanPipelineOptions &options);

/// shard: tfm-propagate-distribution, tfm-localize and
/// tfm-reshard-to-collectives, tfm-verify-distribution after each.
void buildTfmShardPipeline(mlir::OpPassManager &pm);

/// prepare: the part of the lowering that fixes entry signatures:
/// tfm-inline-blocks, tfm-expand-ring-attention, tfm-params-to-args,
/// tfm-comms-to-args.
void buildTfmPrepareLoweringPipeline(mlir::OpPassManager &pm);

/// tfm ops -> runtime calls on buffers: tfm-lower-to-runtime, results to
/// out-params, a free after every buffer's last use, then one arena with
/// compile-time offsets (tfm-plan-buffers).
void buildTfmLowerToBuffersPipeline(mlir::OpPassManager &pm);

/// Buffers and runtime calls -> LLVM dialect (bare pointer calling
/// convention) with packed C entry points (tfm-emit-entry).
void buildTfmBuffersToLLVMPipeline(mlir::OpPassManager &pm);

/// lower: both of the above.
void buildTfmLowerToLLVMPipeline(mlir::OpPassManager &pm);

/// Registers "tfm-plan", "tfm-shard", "tfm-prepare-lowering" and
/// "tfm-lower-to-llvm" (tfm-differentiate is a pass of its own).
void registerAllPipelines();

} // namespace loom

#endif // LOOM_COMPILER_PIPELINES_PIPELINES_H
