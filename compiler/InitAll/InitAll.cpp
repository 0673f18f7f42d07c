//===- InitAll.cpp - Register every Loom dialect and pass -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/InitAll/InitAll.h"
#include "compiler/Pipelines/Pipelines.h"

#include "dialects/Tfm/TfmDialect.h"
#include "dialects/Tfm/TfmOps.h"
#include "passes/Autodiff/GradientRules.h"
#include "passes/Autodiff/Passes.h"
#include "passes/Fusion/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Lowering/Runtime/Lowering.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Plan/Passes.h"
#include "passes/Sharding/Passes.h"
#include "passes/Sharding/Propagation.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Mesh/IR/MeshDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/DialectRegistry.h"

void loom::registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<loom::tfm::TfmDialect, mlir::arith::ArithDialect,
                  mlir::bufferization::BufferizationDialect,
                  mlir::cf::ControlFlowDialect,
                  mlir::func::FuncDialect, mlir::LLVM::LLVMDialect,
                  mlir::linalg::LinalgDialect, mlir::memref::MemRefDialect,
                  mlir::mesh::MeshDialect, mlir::scf::SCFDialect,
                  mlir::tensor::TensorDialect>();
  // The behaviour of each op that the passes attach as external models: the
  // mesh collectives' distribution rules, how sharding distributes each tfm
  // op, each op's gradient and its runtime lowering.
  loom::tfm::registerDistributionExternalModels(registry);
  loom::sharding::registerPropagationRules(registry);
  loom::autodiff::registerGradientRules(registry);
  loom::lowering::registerRuntimeLowerings(registry);
}

void loom::registerAllPasses() {
  loom::plan::registerTfmPlanPasses();
  loom::autodiff::registerTfmAutodiffPasses();
  loom::sharding::registerTfmShardingPasses();
  loom::lowering::registerTfmLoweringPasses();
  loom::pipeline::registerTfmPipelinePasses();
  loom::fusion::registerTfmFusionPasses();
  loom::registerAllPipelines();
}
