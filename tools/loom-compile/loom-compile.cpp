//===- loom-compile.cpp - Ahead-of-time compiler driver ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
//   loom-compile model.mlir --dp 2 -o out/
//
// Parses flags and hands the module to loom::driver::compileModel.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ShortHelp.h"
#include "compiler/Driver/Compiler.h"
#include "compiler/InitAll/InitAll.h"
#include "compiler/Support/CompileFlags.h"
#include "compiler/Support/ListFlags.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/WithColor.h"

#include "mlir/IR/Diagnostics.h"

using namespace llvm;

static cl::OptionCategory category("loom-compile options");

static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<model.mlir>"),
                                      cl::cat(category));
static cl::opt<std::string> outputDir("o", cl::init("out"),
                                      cl::desc("Output directory (default out)"),
                                      cl::value_desc("dir"), cl::cat(category));

// Everything that changes the program: the plan's flags (sizes, context
// parallelism, the pipeline, with Megatron-LM's long names as aliases) and
// the program's (global batch, recomputation, --train, the backend),
// declared once for every tool that compiles (compiler/Support/CompileFlags.h).
static loom::CompileFlags compileFlags(category, "loom-compile");
static cl::opt<bool> report(
    "report",
    cl::desc("Print each distinct rank program's memory and communication "
             "per step, counted through every function it calls"),
    cl::cat(category));
static cl::opt<std::string> reportJson(
    "report-json",
    cl::desc("Write the report as JSON to this file (one object per "
             "distinct rank program)"),
    cl::value_desc("file"), cl::cat(category));
static cl::opt<bool> keep("keep-intermediates",
                          cl::desc("Keep the object file and LLVM IR"),
                          cl::cat(category));
static cl::opt<bool> quiet("quiet", cl::desc("Do not print progress"),
                           cl::cat(category));
static cl::opt<std::string> printIrAfter(
    "print-ir-after",
    cl::desc("Print the module after a stage to stdout: plan, "
             "differentiate, shard, pipeline (pp > 1), prepare, fuse or "
             "lower (as the progress lines name them)"),
    cl::value_desc("stage"), cl::cat(category));

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-compile") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  // Megatron's list flags take space-separated values.
  std::vector<std::string> storage;
  std::vector<const char *> args = loom::joinListFlags(
      argc, argv, loom::CompileFlags::listFlags(), storage);
  loom::ShortHelpArgs parsed(int(args.size()), args.data());
  cl::ParseCommandLineOptions(
      parsed.argc(), parsed.argv(),
      "Loom ahead-of-time compiler: tfm IR + parallel plan -> per-rank "
      "executables, manifest.json and a launcher\n");

  mlir::DialectRegistry registry;
  loom::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  // A user's error names the place and the problem; the op it was found on,
  // printed whole (a module for plan errors), helps only a compiler
  // developer, who can run loom-opt.
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  mlir::SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);

  std::string message;
  auto file = mlir::openInputFile(inputPath, &message);
  if (!file)
    return error(message);
  sourceMgr.AddNewSourceBuffer(std::move(file), SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
  if (!module)
    return error("cannot parse '" + inputPath + "'");

  Expected<loom::driver::CompileOptions> compileOptions =
      compileFlags.options();
  if (!compileOptions)
    return error(toString(compileOptions.takeError()));
  loom::driver::CompileOptions &options = *compileOptions;
  options.outputDir = outputDir;
  options.keepIntermediates = keep;
  options.printIrAfter = printIrAfter;
  options.reportJsonPath = reportJson;
  options.irOutput = &outs();
  if (!quiet)
    options.progress = [](StringRef line) { errs() << line << "\n"; };

  if (Error e = loom::driver::compileModel(*module, options,
                                           report ? &outs() : nullptr))
    return error(toString(std::move(e)));
  if (!quiet)
    errs() << "wrote " << outputDir << "/ (run it with: loom-run " << outputDir
           << " --steps N)\n";
  return 0;
}
