//===- Pipelines.cpp - Named pass pipelines ---------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Pipelines/Pipelines.h"

#include "passes/Lowering/Passes.h"
#include "passes/Plan/Passes.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void loom::buildTfmPlanPipeline(OpPassManager &pm,
                                const TfmPlanPipelineOptions &o) {
  plan::TfmSetPlanOptions plan;
  plan.tp = o.tp;
  plan.cp = o.cp;
  plan.dp = o.dp;
  plan.pp = o.pp;
  plan.vpp = o.vpp;
  plan.ep = o.ep;
  plan.etp = o.etp;
  plan.sequenceParallel = o.sequenceParallel;
  plan.cpCommType = o.cpCommType;
  plan.hierarchicalCpSizes = o.hierarchicalCpSizes;
  plan.order = o.order;
  pm.addPass(plan::createTfmSetPlan(plan));
  plan::TfmPadVocabOptions pad;
  pad.divisibleBy = o.makeVocabSizeDivisibleBy;
  pm.addPass(plan::createTfmPadVocab(pad));
  pm.addPass(plan::createTfmPadSequence());
  pm.addPass(plan::createTfmMaterializeMesh());
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

void loom::buildTfmPrepareLoweringPipeline(OpPassManager &pm) {
  pm.addNestedPass<func::FuncOp>(lowering::createTfmInlineBlocks());
  pm.addNestedPass<func::FuncOp>(lowering::createTfmExpandRingAttention());
  pm.addPass(lowering::createTfmParamsToArgs());
  pm.addPass(lowering::createTfmCommsToArgs());
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
  // One arena per call, with offsets fixed at compile time.
  pm.addNestedPass<func::FuncOp>(lowering::createTfmPlanBuffers());
}

void loom::buildTfmBuffersToLLVMPipeline(OpPassManager &pm) {
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
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(lowering::createTfmEmitEntry());
}

void loom::buildTfmLowerToLLVMPipeline(OpPassManager &pm) {
  buildTfmLowerToBuffersPipeline(pm);
  buildTfmBuffersToLLVMPipeline(pm);
}

void loom::registerAllPipelines() {
  PassPipelineRegistration<TfmPlanPipelineOptions>(
      "tfm-plan",
      "Attach the parallel plan and create its meshes (loom-compile's plan "
      "stage)",
      buildTfmPlanPipeline);
  PassPipelineRegistration<>(
      "tfm-shard",
      "Distribute every value, localize shapes and insert the collectives, "
      "verifying after each (loom-compile's shard stage)",
      buildTfmShardPipeline);
  PassPipelineRegistration<>(
      "tfm-prepare-lowering",
      "Inline tfm.block regions and turn parameters into arguments",
      buildTfmPrepareLoweringPipeline);
  PassPipelineRegistration<>(
      "tfm-lower-to-llvm",
      "Lower tfm ops to runtime calls and everything to the LLVM dialect",
      buildTfmLowerToLLVMPipeline);
}
