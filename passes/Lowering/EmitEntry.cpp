//===- EmitEntry.cpp - Packed C entry points --------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/Passes.h"

#include "llvm/ADT/StringSet.h"

#include "mlir/IR/Builders.h"

namespace loom::lowering {
#define GEN_PASS_DEF_TFMEMITENTRY
#include "passes/Lowering/Passes.h.inc"
} // namespace loom::lowering

using namespace mlir;
using namespace loom;

namespace {

struct EmitEntryPass : lowering::impl::TfmEmitEntryBase<EmitEntryPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    auto voidType = LLVM::LLVMVoidType::get(ctx);

    SmallVector<LLVM::LLVMFuncOp> entries;
    llvm::StringSet<> wrappers;
    for (auto func : module.getOps<LLVM::LLVMFuncOp>())
      if (func->hasAttr(tfm::kEntryAttrName))
        entries.push_back(func);

    for (LLVM::LLVMFuncOp func : entries) {
      auto symbol = func->getAttrOfType<StringAttr>(tfm::kEntryAttrName);
      if (!symbol) {
        func.emitError() << "tfm.entry must be a non-empty string";
        return signalPassFailure();
      }
      LLVM::LLVMFunctionType type = func.getFunctionType();
      if (!isa<LLVM::LLVMVoidType>(type.getReturnType())) {
        func.emitError() << "entry @" << func.getName()
                         << " returns a value; results must be out-params "
                            "(run buffer-results-to-out-params)";
        return signalPassFailure();
      }
      for (auto [i, t] : llvm::enumerate(type.getParams()))
        if (!isa<LLVM::LLVMPointerType>(t)) {
          func.emitError() << "entry @" << func.getName() << " argument " << i
                           << " has type " << t
                           << "; entries take buffers only (bare pointers)";
          return signalPassFailure();
        }

      OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
      Location loc = func.getLoc();
      auto wrapper = b.create<LLVM::LLVMFuncOp>(
          loc, symbol.getValue(), LLVM::LLVMFunctionType::get(voidType, {ptrType}));
      wrappers.insert(wrapper.getName());
      Block *body = wrapper.addEntryBlock(b);
      b.setInsertionPointToStart(body);
      Value argv = body->getArgument(0);
      SmallVector<Value> args;
      for (unsigned i = 0; i < type.getNumParams(); ++i) {
        Value slot = b.create<LLVM::GEPOp>(loc, ptrType, ptrType, argv,
                                           ArrayRef<LLVM::GEPArg>{int32_t(i)});
        args.push_back(b.create<LLVM::LoadOp>(loc, ptrType, slot));
      }
      b.create<LLVM::CallOp>(loc, func, args);
      b.create<LLVM::ReturnOp>(loc, ValueRange());

      func->removeAttr(tfm::kEntryAttrName);
    }

    // A pipelined step calls each block's function once per micro-batch:
    // inlining them would copy every layer's code into the step as many
    // times, for nothing (a block's work is in its kernels). They are the
    // defined functions that are neither entries nor their wrappers.
    for (auto func : module.getOps<LLVM::LLVMFuncOp>()) {
      func->removeAttr(tfm::kPipelineRankAttrName);
      if (!func.isExternal() && !llvm::is_contained(entries, func) &&
          !wrappers.contains(func.getName()))
        func.setNoInline(true);
    }

    // The names of parameters, inputs and communicators have served their
    // purpose (the manifest was written from them before lowering); LLVM IR
    // has no place for them. The same holds for the gradient names
    // out-params inherited from results.
    // (All arguments at once: a pipelined step has thousands.)
    for (auto func : module.getOps<LLVM::LLVMFuncOp>()) {
      ArrayAttr all = func.getArgAttrsAttr();
      if (!all)
        continue;
      SmallVector<Attribute> kept;
      for (Attribute a : all) {
        NamedAttrList attrs(cast<DictionaryAttr>(a));
        for (StringRef name :
             {tfm::kParamArgAttrName, tfm::kGradResultAttrName,
              tfm::kGradGroupAttrName, tfm::kCommArgAttrName,
              tfm::kInputArgAttrName, tfm::kMicrobatchesAttrName})
          attrs.erase(name);
        kept.push_back(attrs.getDictionary(ctx));
      }
      func.setArgAttrsAttr(ArrayAttr::get(ctx, kept));
    }
  }
};

} // namespace
