//===- loom-import.cpp - Model config -> tfm IR -----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
//   loom-import examples/gpt-tiny.json -o gpt.mlir
//   loom-import examples/llama3-8b.json --seq-length 4096 --dtype bf16 --summary
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/ShortHelp.h"
#include "compiler/Import/ModelImporter.h"
#include "compiler/Support/ImportFlags.h"
#include "compiler/Support/ModelSummary.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;

static cl::OptionCategory category("loom-import options");

static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<config.json>"),
                                      cl::cat(category));
static cl::opt<std::string> outputPath("o", cl::init("-"),
                                       cl::desc("Output file (default stdout)"),
                                       cl::value_desc("file"),
                                       cl::cat(category));
// The flags that shape the model, declared once for every tool that imports
// (compiler/Support/ImportFlags.h).
static loom::ImportFlags importFlags(category);
static cl::opt<bool> summary(
    "summary",
    cl::desc("Print a summary of the IR instead of the IR itself (with -o, "
             "the IR is still written)"),
    cl::cat(category));

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-import") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  loom::ShortHelpArgs parsed(argc, argv);
  cl::ParseCommandLineOptions(
      parsed.argc(), parsed.argv(),
      "Loom model importer: Hugging Face config.json (GPT-2, Llama, Qwen2 or "
      "Mistral) -> tfm IR\n");

  Expected<loom::ImportOptions> options = importFlags.options();
  if (!options)
    return error(toString(options.takeError()));
  mlir::MLIRContext context;
  auto module = loom::importModel(context, inputPath, *options);
  if (!module)
    return error(toString(module.takeError()));

  bool writeIR = !summary || outputPath != "-";
  if (writeIR) {
    std::string message;
    auto output = mlir::openOutputFile(outputPath, &message);
    if (!output)
      return error(message);
    (*module)->print(output->os());
    output->os() << "\n";
    output->keep();
  }
  if (summary)
    loom::printModelSummary(**module, outs());
  return 0;
}
