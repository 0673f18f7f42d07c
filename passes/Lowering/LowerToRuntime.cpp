//===- LowerToRuntime.cpp - tfm ops -> runtime calls on buffers -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A dialect conversion: every op with a RuntimeLoweringInterface (the tfm
// ops and the mesh collectives; their lowerings live in Runtime/, one file
// per concern) becomes runtime calls on buffers through one pattern, and the
// tensor types of functions, calls and returns become memrefs through the
// same type converter.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "passes/Lowering/Runtime/Lowering.h"

#include "dialects/Tfm/TfmOps.h"

#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Dialect/SCF/Transforms/Patterns.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/DialectConversion.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMLOWERTORUNTIME
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;
using namespace loom::tfm;

namespace {

/// Any op with a runtime lowering: its calls, then its results' buffers in
/// place of its results.
struct LowerThroughInterface
    : OpInterfaceConversionPattern<lowering::RuntimeLoweringInterface> {
  using OpInterfaceConversionPattern::OpInterfaceConversionPattern;

  LogicalResult
  matchAndRewrite(lowering::RuntimeLoweringInterface op,
                  ArrayRef<Value> operands,
                  ConversionPatternRewriter &rewriter) const override {
    lowering::Emitter e(op, operands, rewriter);
    if (failed(op.lowerToRuntime(e)))
      return failure();
    rewriter.replaceOp(op, e.results());
    return success();
  }
};

struct LowerToRuntimePass
    : lowering::impl::TfmLowerToRuntimeBase<LowerToRuntimePass> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    TypeConverter converter;
    converter.addConversion([](Type t) { return t; });
    converter.addConversion([](RankedTensorType t) -> Type {
      return MemRefType::get(t.getShape(), t.getElementType());
    });
    // Tensor values that meet memref values during conversion.
    auto materialize = [](OpBuilder &b, Type type, ValueRange inputs,
                          Location loc) -> Value {
      return b.create<UnrealizedConversionCastOp>(loc, type, inputs)
          .getResult(0);
    };
    converter.addSourceMaterialization(materialize);
    converter.addTargetMaterialization(materialize);

    RewritePatternSet patterns(ctx);
    patterns.add<LowerThroughInterface>(converter, ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                   converter);
    populateCallOpTypeConversionPattern(patterns, converter);
    populateReturnOpTypeConversionPattern(patterns, converter);

    ConversionTarget target(*ctx);
    target.addLegalDialect<memref::MemRefDialect, LLVM::LLVMDialect>();
    // Scalar arithmetic is fine; arithmetic on tensors has no lowering here.
    target.addDynamicallyLegalDialect<arith::ArithDialect>(
        [&](Operation *op) { return converter.isLegal(op); });
    target.addIllegalDialect<TfmDialect>();
    target.addIllegalOp<mesh::AllReduceOp, mesh::AllGatherOp,
                        mesh::ReduceScatterOp, mesh::AllToAllOp,
                        mesh::AllSliceOp>();
    target.addLegalOp<mesh::MeshOp>();
    target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp f) {
      return converter.isSignatureLegal(f.getFunctionType()) &&
             converter.isLegal(&f.getBody());
    });
    target.addDynamicallyLegalOp<func::CallOp, func::ReturnOp>(
        [&](Operation *op) { return converter.isLegal(op); });
    // A pipelined step's loop carries buffers instead of tensors.
    scf::populateSCFStructuralTypeConversionsAndLegality(converter, patterns,
                                                         target);

    WalkResult reshards = getOperation().walk([](ReshardOp op) {
      op.emitError() << "a tfm.reshard is left; run "
                        "tfm-reshard-to-collectives before lowering";
      return WalkResult::interrupt();
    });
    if (reshards.wasInterrupted())
      return signalPassFailure();
    // Parameters are the runtime's buffers, passed in as arguments; their
    // declarations have no code.
    for (ParamOp param :
         llvm::make_early_inc_range(getOperation().getOps<ParamOp>()))
      param.erase();
    // Full conversion: an op no pattern handles (say a tensor op) is an
    // error here, where it can be named, not in LLVM translation later.
    target.addLegalOp<ModuleOp, UnrealizedConversionCastOp>();
    if (failed(applyFullConversion(getOperation(), target,
                                   std::move(patterns))))
      return signalPassFailure();
    // Meshes only name the groups of collectives; once none refers to a
    // mesh it has no code either.
    for (mesh::MeshOp mesh :
         llvm::make_early_inc_range(getOperation().getOps<mesh::MeshOp>()))
      if (SymbolTable::symbolKnownUseEmpty(mesh, getOperation()))
        mesh.erase();
  }
};

} // namespace
