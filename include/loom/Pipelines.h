//===- Pipelines.h - Named pass pipelines -----------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Pipelines are functions that loom-opt (by name) and loom-compile share.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PIPELINES_H
#define LOOM_PIPELINES_H

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace loom {

/// The part of the lowering that fixes entry signatures: tfm-inline-blocks,
/// tfm-params-to-args, tfm-comms-to-args.
void buildTfmPrepareLoweringPipeline(mlir::OpPassManager &pm);

/// tfm ops -> runtime calls on buffers: tfm-lower-to-runtime, results to
/// out-params, a free after every buffer's last use, then one arena with
/// compile-time offsets (tfm-plan-buffers).
void buildTfmLowerToBuffersPipeline(mlir::OpPassManager &pm);

/// Buffers and runtime calls -> LLVM dialect (bare pointer calling
/// convention) with packed C entry points (tfm-emit-entry).
void buildTfmBuffersToLLVMPipeline(mlir::OpPassManager &pm);

/// Both of the above.
void buildTfmLowerToLLVMPipeline(mlir::OpPassManager &pm);

/// Registers "tfm-prepare-lowering" and "tfm-lower-to-llvm" (the whole
/// lowering is "tfm-prepare-lowering,tfm-lower-to-llvm").
void registerAllPipelines();

} // namespace loom

#endif // LOOM_PIPELINES_H
