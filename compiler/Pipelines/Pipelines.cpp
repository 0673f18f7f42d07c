//===- Pipelines.cpp - Named pass pipelines ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipelines/Pipelines.h"

#include "passes/Fusion/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Plan/Passes.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

/// The plan stage after tfm-set-plan: the plan's paddings and meshes.
static void addPlanConsequences(OpPassManager &pm) {
  pm.addPass(loom::plan::createTfmPadVocab());
  pm.addPass(loom::plan::createTfmPadSequence());
  pm.addPass(loom::plan::createTfmMaterializeMesh());
}

void loom::buildTfmPlanPipeline(OpPassManager &pm, const rankgen::Plan &plan) {
  pm.addPass(loom::plan::createTfmSetPlan(plan));
  addPlanConsequences(pm);
}

void loom::buildTfmShardPipeline(OpPassManager &pm) {
  // The verifier after every pass: a pass that leaves an inconsistent
  // distribution fails there, naming the op.
  pm.addPass(sharding::createTfmPropagateDistribution());
  pm.addPass(sharding::createTfmVerifyDistribution());
  pm.addPass(sharding::createTfmLocalize());
  pm.addPass(sharding::createTfmVerifyDistribution());
  pm.addPass(sharding::createTfmReshardToCollectives());
  pm.addPass(sharding::createTfmVerifyDistribution());
}

void loom::buildTfmPipelinePipeline(OpPassManager &pm) {
  pm.addPass(pipeline::createTfmSchedulePipeline());
  pm.addPass(pipeline::createTfmVerifyPipelineP2P());
  pm.addPass(sharding::createTfmVerifyDistribution());
}

void loom::buildTfmPrepareLoweringPipeline(OpPassManager &pm) {
  // Where each gradient is summed, on the entries as they will run
  // (pipelined steps included), before their arguments change.
  pm.addPass(sharding::createTfmMarkGradientGroups());
  pm.addNestedPass<func::FuncOp>(lowering::createTfmInlineBlocks());
  pm.addNestedPass<func::FuncOp>(lowering::createTfmExpandRingAttention());
  // The ring's hops, sections and level exchanges keep the distributions
  // (or the level layout) their rules give.
  pm.addPass(sharding::createTfmVerifyDistribution());
  pm.addPass(lowering::createTfmParamsToArgs());
  pm.addPass(lowering::createTfmCommsToArgs());
  // What tfm-lower-to-runtime reads: each value's distribution decides the
  // slice positions and communicators the lowering uses.
  pm.addPass(sharding::createTfmVerifyDistribution());
}

void loom::buildTfmFusePipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(fusion::createTfmFoldGradientAdds());
  pm.addNestedPass<func::FuncOp>(fusion::createTfmFuseResidualNorms());
  pm.addNestedPass<func::FuncOp>(fusion::createTfmPairRopes());
  pm.addNestedPass<func::FuncOp>(fusion::createTfmFuseLinearGelu());
  // Before the linears of one input: gate and up go with their SwiGLU.
  pm.addNestedPass<func::FuncOp>(fusion::createTfmFuseLinearSwiglu());
  // After the folds: it fuses the chains they leave.
  pm.addNestedPass<func::FuncOp>(fusion::createTfmFuseMultiLinears());
  pm.addPass(sharding::createTfmVerifyDistribution());
}

static bool isPublicFunction(func::FuncOp *f) { return !f->isPrivate(); }
static bool isPrivateFunction(func::FuncOp *f) { return f->isPrivate(); }

void loom::buildTfmLowerToBuffersPipeline(OpPassManager &pm) {
  pm.addPass(lowering::createTfmLowerToRuntime());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // The loss and the gradients leave through caller-owned buffers, written
  // in place (no copy at the end); private functions (a pipelined step's
  // blocks) first return each buffer once and no argument.
  pm.addPass(lowering::createTfmUniqueResults());
  // Callees before callers: a caller's result that comes from a call is
  // then the buffer allocated for the call's out-param, and becomes the
  // caller's out-param in turn (else it would be copied, with a host
  // memcpy that device memory does not allow).
  bufferization::BufferResultsToOutParamsOpts callees, entries;
  callees.hoistStaticAllocs = entries.hoistStaticAllocs = true;
  callees.filterFn = isPrivateFunction;
  entries.filterFn = isPublicFunction;
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(callees));
  pm.addPass(bufferization::createBufferResultsToOutParamsPass(entries));
  // Free every buffer (tfm-plan-buffers then reuses its memory after its
  // last use).
  pm.addNestedPass<func::FuncOp>(lowering::createTfmFreeBuffers());
  pm.addPass(createCSEPass());
  pm.addPass(createCanonicalizerPass());
  // One workspace per function, with offsets fixed at compile time: an
  // entry's is provided by the rank program, a callee's by its caller.
  pm.addPass(lowering::createTfmPlanBuffers());
}

void loom::buildTfmBuffersToLLVMPipeline(OpPassManager &pm) {
  // A pipelined step's loop becomes branches.
  pm.addPass(createConvertSCFToCFPass());
  pm.addPass(createArithToLLVMConversionPass());
  // Buffers come from the runtime (loomrt_alloc through the rank driver's
  // _mlir_memref_to_llvm_* functions), so on a GPU they are device memory.
  FinalizeMemRefToLLVMConversionPassOptions memrefOptions;
  memrefOptions.useAlignedAlloc = true;
  memrefOptions.useGenericFunctions = true;
  pm.addPass(createFinalizeMemRefToLLVMConversionPass(memrefOptions));
  // Static shapes only: a memref argument is just its data pointer, which is
  // what the runtime driver hands in.
  ConvertFuncToLLVMPassOptions funcOptions;
  funcOptions.useBarePtrCallConv = true;
  pm.addPass(createConvertFuncToLLVMPass(funcOptions));
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(lowering::createTfmEmitEntry());
}

void loom::buildTfmLowerToLLVMPipeline(OpPassManager &pm) {
  buildTfmLowerToBuffersPipeline(pm);
  buildTfmBuffersToLLVMPipeline(pm);
}

void loom::registerAllPipelines() {
  // tfm-plan takes tfm-set-plan's options as they are: the plan's fields
  // are declared once, as that pass's options.
  registerPassPipeline(
      "tfm-plan",
      "Attach the parallel plan (tfm-set-plan's options), pad the vocabulary "
      "and the sequence, create the meshes (loom-compile's plan stage)",
      [](OpPassManager &pm, StringRef options,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        std::unique_ptr<Pass> setPlan = loom::plan::createTfmSetPlan();
        if (failed(setPlan->initializeOptions(options, errorHandler)))
          return failure();
        pm.addPass(std::move(setPlan));
        addPlanConsequences(pm);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)>) {});
  PassPipelineRegistration<>(
      "tfm-shard",
      "Distribute every value, localize shapes and insert the collectives, "
      "verifying after each (loom-compile's shard stage)",
      buildTfmShardPipeline);
  PassPipelineRegistration<>(
      "tfm-pipeline",
      "Cut the stages and write each pp rank's schedule, then prove its p2p "
      "and verify the distributions (loom-compile's pipeline stage)",
      buildTfmPipelinePipeline);
  PassPipelineRegistration<>(
      "tfm-prepare-lowering",
      "Inline tfm.block regions and turn parameters into arguments",
      buildTfmPrepareLoweringPipeline);
  PassPipelineRegistration<>(
      "tfm-fuse",
      "Fold gradient sums into their producers, fuse residual adds with "
      "their norms, pair q's and k's rotations, GELU and SwiGLU into their "
      "GEMMs and "
      "the linears of one input into one op, verifying after "
      "(loom-compile's fuse stage)",
      buildTfmFusePipeline);
  PassPipelineRegistration<>(
      "tfm-lower-to-llvm",
      "Lower tfm ops to runtime calls and everything to the LLVM dialect",
      buildTfmLowerToLLVMPipeline);
}
