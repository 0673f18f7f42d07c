//===- ObjectEmitter.cpp - LLVM dialect -> host object file -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/ObjectEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Transforms/InstCombine/InstCombine.h"
#include "llvm/Transforms/Scalar/EarlyCSE.h"
#include "llvm/Transforms/Scalar/SROA.h"
#include "llvm/Transforms/Scalar/SimplifyCFG.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"

using namespace llvm;

static Error fail(const Twine &message) {
  return createStringError(inconvertibleErrorCode(), message);
}

/// A light function pipeline, not O2: the module is glue around runtime
/// calls (straight-line, but for a pipelined step's one loop; the kernels
/// are compiled with the runtime), and what it needs is the memref
/// descriptors' insert/extract pairs and the constant pointer arithmetic
/// folded. On a pipelined GPT-3
/// compile (steps of thousands of calls) O2 took 9.3 s of 34, O1 8.5 s,
/// this 2.9 s.
static void optimize(Module &module, TargetMachine &tm) {
  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  FunctionPassManager fpm;
  fpm.addPass(SROAPass(SROAOptions::ModifyCFG));
  fpm.addPass(EarlyCSEPass());
  fpm.addPass(InstCombinePass());
  fpm.addPass(SimplifyCFGPass());
  ModulePassManager mpm;
  mpm.addPass(createModuleToFunctionPassAdaptor(std::move(fpm)));
  mpm.run(module, mam);
}

/// Instruction selection works on one basic block at a time and its cost
/// grows faster than the block: a pipelined step is one block of thousands
/// of calls. After optimization (which would merge them back), blocks are
/// cut every few calls; the branches cost nothing at run time.
static void splitLongBlocks(Module &module) {
  constexpr int kCallsPerBlock = 16;
  for (Function &f : module)
    for (auto bb = f.begin(); bb != f.end(); ++bb) {
      int calls = 0;
      for (auto it = bb->begin(); it != bb->end(); ++it)
        if (isa<CallInst>(*it) && ++calls == kCallsPerBlock &&
            !std::next(it)->isTerminator()) {
          // The rest becomes the next block, visited in turn.
          bb->splitBasicBlock(std::next(it));
          break;
        }
    }
}

Error loom::driver::emitObjectFile(mlir::ModuleOp module, StringRef objectPath,
                                   StringRef llPath) {
  mlir::DialectRegistry registry;
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  module->getContext()->appendDialectRegistry(registry);

  LLVMContext llvmContext;
  std::unique_ptr<Module> llvmModule =
      mlir::translateModuleToLLVMIR(module, llvmContext, "loom");
  if (!llvmModule)
    return fail("cannot translate the lowered module to LLVM IR");

  InitializeNativeTarget();
  InitializeNativeTargetAsmPrinter();
  std::string triple = sys::getDefaultTargetTriple();
  std::string error;
  const Target *target = TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return fail("no LLVM target for " + triple + ": " + error);
  // Position-independent, for the default PIE executables of the host.
  // Instruction selection and register allocation without optimization:
  // the code is glue around runtime calls (the IR pipeline below already
  // folds its arithmetic), and the greedy allocator's time grows faster
  // than linearly with a function's calls: a pipelined GPT-3 step (16
  // stages x 64 micro-batches) spent 46 s there against a few at O0.
  std::unique_ptr<TargetMachine> tm(target->createTargetMachine(
      triple, "generic", "", TargetOptions(), Reloc::PIC_, std::nullopt,
      CodeGenOptLevel::None));
  llvmModule->setTargetTriple(triple);
  llvmModule->setDataLayout(tm->createDataLayout());
  optimize(*llvmModule, *tm);
  splitLongBlocks(*llvmModule);

  if (!llPath.empty()) {
    std::error_code ec;
    raw_fd_ostream ll(llPath, ec, sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + llPath + "': " + ec.message());
    llvmModule->print(ll, nullptr);
  }

  std::error_code ec;
  ToolOutputFile out(objectPath, ec, sys::fs::OF_None);
  if (ec)
    return fail("cannot write '" + objectPath + "': " + ec.message());
  legacy::PassManager codegen;
  if (tm->addPassesToEmitFile(codegen, out.os(), nullptr,
                              CodeGenFileType::ObjectFile))
    return fail("the host target cannot emit object files");
  codegen.run(*llvmModule);
  out.keep();
  return Error::success();
}
