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
#include "compiler/Support/ModelSummary.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
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
static cl::opt<int64_t> microBatchSize("micro-batch-size", cl::init(1),
                                       cl::desc("Micro-batch size (default 1)"),
                                       cl::cat(category));
static cl::opt<int64_t> seqLength(
    "seq-length", cl::init(0),
    cl::desc("Sequence length (default: the model's maximum positions)"),
    cl::cat(category));
static cl::opt<std::string> dtype("dtype", cl::init("f32"),
                                  cl::desc("Element type: f32, bf16 or f16"),
                                  cl::cat(category));
static cl::opt<int64_t> eodTokenId(
    "eod-token-id", cl::init(-1),
    cl::desc("End-of-document token id (for the reset options)"),
    cl::cat(category));
static cl::opt<bool> resetPositionIds(
    "reset-position-ids",
    cl::desc("Restart position ids after each end-of-document token"),
    cl::cat(category));
static cl::opt<bool> resetAttentionMask(
    "reset-attention-mask",
    cl::desc("Keep attention within each document (causal_document mask)"),
    cl::cat(category));
static cl::opt<double> hiddenDropout("hidden-dropout", cl::init(0.0),
                                     cl::desc("Hidden dropout probability"),
                                     cl::cat(category));
static cl::opt<int64_t> seed("seed", cl::init(1234),
                             cl::desc("Seed of the dropout masks"),
                             cl::cat(category));
static cl::opt<int64_t> makeVocabSizeDivisibleBy(
    "make-vocab-size-divisible-by", cl::init(1),
    cl::desc("Pad the vocabulary to a multiple of this (Megatron's option; "
             "e.g. 128, so it splits over tensor-parallel ranks)"),
    cl::cat(category));
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

  // 0 stands for the model's maximum positions only when the flag is absent.
  if (seqLength.getNumOccurrences() && seqLength < 1)
    return error("--seq-length " + Twine(seqLength) + " must be at least 1");

  Expected<loom::ModelConfig> config = loom::readModelConfig(inputPath);
  if (!config)
    return error(toString(config.takeError()));

  loom::ImportOptions options;
  options.microBatchSize = microBatchSize;
  options.seqLength = seqLength;
  options.dtype = dtype;
  if (eodTokenId >= 0)
    options.eodTokenId = eodTokenId;
  else if (eodTokenId.getNumOccurrences())
    return error("eod token id " + Twine(eodTokenId) + " is negative");
  options.resetPositionIds = resetPositionIds;
  options.resetAttentionMask = resetAttentionMask;
  options.hiddenDropout = hiddenDropout;
  options.seed = seed;
  options.makeVocabSizeDivisibleBy = makeVocabSizeDivisibleBy;

  mlir::MLIRContext context;
  auto module = loom::buildModelModule(context, *config, options);
  if (!module)
    return error(toString(module.takeError()));
  if (failed(mlir::verify(**module)))
    return error("the imported module does not verify (importer bug)");

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
