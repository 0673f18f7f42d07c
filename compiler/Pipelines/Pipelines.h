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

#include "rankgen/Plan.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace loom {

/// plan: tfm-set-plan (with `plan`), tfm-pad-vocab, tfm-pad-sequence and
/// tfm-materialize-mesh. loom-opt's `tfm-plan` pipeline runs the same with
/// tfm-set-plan's options ("tp=2 sp=true").
void buildTfmPlanPipeline(mlir::OpPassManager &pm, const rankgen::Plan &plan);

/// shard: tfm-propagate-distribution, tfm-localize and
/// tfm-reshard-to-collectives, tfm-verify-distribution after each.
void buildTfmShardPipeline(mlir::OpPassManager &pm);

/// pipeline (pp > 1): tfm-schedule-pipeline, then tfm-verify-pipeline-p2p
/// (the batches match and progress) and tfm-verify-distribution (the
/// stages' functions, sums and batches keep every value's distribution).
void buildTfmPipelinePipeline(mlir::OpPassManager &pm);

/// prepare: the part of the lowering that fixes entry signatures:
/// tfm-inline-blocks, tfm-expand-ring-attention, tfm-params-to-args,
/// tfm-comms-to-args; tfm-verify-distribution after the ring's expansion
/// and on the result, the lowering's input.
void buildTfmPrepareLoweringPipeline(mlir::OpPassManager &pm);

/// fuse: tfm-fold-gradient-adds (gradient sums into the ops computing an
/// addend), tfm-fuse-residual-norms, tfm-pair-ropes, then
/// tfm-verify-distribution.
void buildTfmFusePipeline(mlir::OpPassManager &pm);

/// tfm ops -> runtime calls on buffers: tfm-lower-to-runtime, results to
/// out-params, a free after every buffer's last use, then one arena with
/// compile-time offsets (tfm-plan-buffers).
void buildTfmLowerToBuffersPipeline(mlir::OpPassManager &pm);

/// Buffers and runtime calls -> LLVM dialect (bare pointer calling
/// convention) with packed C entry points (tfm-emit-entry).
void buildTfmBuffersToLLVMPipeline(mlir::OpPassManager &pm);

/// lower: both of the above.
void buildTfmLowerToLLVMPipeline(mlir::OpPassManager &pm);

/// Registers "tfm-plan", "tfm-shard", "tfm-pipeline", "tfm-prepare-lowering",
/// "tfm-fuse" and "tfm-lower-to-llvm" (tfm-differentiate is a pass of its
/// own).
void registerAllPipelines();

} // namespace loom

#endif // LOOM_COMPILER_PIPELINES_PIPELINES_H
