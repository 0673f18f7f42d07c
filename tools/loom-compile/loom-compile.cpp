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

// Parallel sizes, with Megatron-LM's long names as aliases.
static cl::opt<int64_t> tp("tp", cl::init(1), cl::desc("Tensor-parallel size"),
                           cl::cat(category));
static cl::alias tpLong("tensor-model-parallel-size", cl::aliasopt(tp),
                        cl::desc("Alias for --tp"));
static cl::opt<int64_t>
    cp("cp", cl::init(1),
       cl::desc("Context-parallel size: each sequence in 2 x cp load-balanced "
                "chunks (a length they do not divide is padded at the end "
                "with masked tokens; --report shows it)"),
       cl::cat(category));
static cl::alias cpLong("context-parallel-size", cl::aliasopt(cp),
                        cl::desc("Alias for --cp"));
static cl::list<std::string> cpCommType(
    "cp-comm-type",
    cl::desc("Context-parallel attention: p2p (default, ring attention), "
             "allgather (or all_gather), a2a (Ulysses) or a2a+p2p "
             "(hierarchical: a2a within groups, then a ring across them; "
             "needs --hierarchical-context-parallel-sizes); one for every "
             "layer or one per layer, space- or comma-separated"),
    cl::CommaSeparated, cl::value_desc("type"), cl::cat(category));
static cl::list<int64_t> hierarchicalCp(
    "hierarchical-context-parallel-sizes",
    cl::desc("Sizes of hierarchical context parallelism, inner first: for "
             "a2a+p2p the a2a group size A and the ring size P, A x P = cp"),
    cl::CommaSeparated, cl::value_desc("a p"), cl::cat(category));
static cl::opt<int64_t> pp("pp", cl::init(1),
                           cl::desc("Pipeline-parallel size"),
                           cl::cat(category));
static cl::alias ppLong("pipeline-model-parallel-size", cl::aliasopt(pp),
                        cl::desc("Alias for --pp"));
static cl::opt<int64_t> dp("dp", cl::init(1), cl::desc("Data-parallel size"),
                           cl::cat(category));
static cl::opt<int64_t> vpp("vpp", cl::init(1),
                            cl::desc("Virtual pipeline stages per rank"),
                            cl::cat(category));
static cl::alias vppLong("virtual-pipeline-model-parallel-size",
                         cl::aliasopt(vpp), cl::desc("Alias for --vpp"));
static cl::opt<int64_t> ep("ep", cl::init(1), cl::desc("Expert-parallel size"),
                           cl::cat(category));
static cl::alias epLong("expert-model-parallel-size", cl::aliasopt(ep),
                        cl::desc("Alias for --ep"));
static cl::opt<int64_t> etp("etp", cl::init(0),
                            cl::desc("Expert tensor-parallel size (default tp)"),
                            cl::cat(category));
static cl::alias etpLong("expert-tensor-parallel-size", cl::aliasopt(etp),
                         cl::desc("Alias for --etp"));
static cl::opt<bool> sp("sp", cl::desc("Sequence parallelism"),
                        cl::cat(category));
static cl::alias spLong("sequence-parallel", cl::aliasopt(sp),
                        cl::desc("Alias for --sp"));
static cl::opt<std::string> order("order", cl::init("tp-cp-ep-dp-pp"),
                                  cl::desc("Rank order, fastest first"),
                                  cl::cat(category));
static cl::opt<int64_t> numMicrobatches(
    "num-microbatches", cl::init(1),
    cl::desc("Micro-batches per step (default 1)"), cl::cat(category));
static cl::opt<int64_t> globalBatchSize(
    "global-batch-size",
    cl::desc("Sequences per step over all data-parallel ranks (Megatron's "
             "flag): micro-batches = global / (micro-batch size x dp)"),
    cl::cat(category));
static cl::opt<bool> eodMaskLoss(
    "eod-mask-loss",
    cl::desc("Leave end-of-document tokens out of the loss (Megatron's "
             "--eod-mask-loss; the id given to loom-import --eod-token-id)"),
    cl::cat(category));
static cl::opt<int64_t> makeVocabSizeDivisibleBy(
    "make-vocab-size-divisible-by", cl::init(128),
    cl::desc("Pad the vocabulary to a multiple of this times tp (Megatron's "
             "flag, default 128); the padding rows stay out of the softmax "
             "and out of Hugging Face checkpoints"),
    cl::cat(category));
static cl::opt<bool> train(
    "train",
    cl::desc("Also compile @train_step: forward, backward and every "
             "parameter gradient (tfm-differentiate)"),
    cl::cat(category));
static cl::opt<bool> recomputeActivations(
    "recompute-activations",
    cl::desc("Megatron's flag: the same as --recompute-granularity selective"),
    cl::cat(category));
static cl::opt<std::string> recomputeGranularity(
    "recompute-granularity",
    cl::desc("Recompute in backward instead of keeping activations: full "
             "(whole layers, see --recompute-method) or selective (the core "
             "attention of every layer)"),
    cl::value_desc("full|selective"), cl::cat(category));
static cl::opt<std::string> recomputeMethod(
    "recompute-method",
    cl::desc("With full: uniform (every layer, the default) or block (the "
             "first --recompute-num-layers layers)"),
    cl::value_desc("uniform|block"), cl::cat(category));
static cl::opt<int64_t> recomputeNumLayers(
    "recompute-num-layers",
    cl::desc("With full: layers recomputed by block (uniform: 1)"),
    cl::cat(category));
static cl::opt<int64_t> firstStageLayers(
    "decoder-first-pipeline-num-layers", cl::init(-1),
    cl::desc("Layers of the first pipeline stage (Megatron's flag; the rest "
             "split evenly)"),
    cl::cat(category));
static cl::opt<int64_t> lastStageLayers(
    "decoder-last-pipeline-num-layers", cl::init(-1),
    cl::desc("Layers of the last pipeline stage (Megatron's flag)"),
    cl::cat(category));
static cl::opt<bool> accountForEmbedding(
    "account-for-embedding-in-pipeline-split",
    cl::desc("The embedding takes one layer's place on the first stage"),
    cl::cat(category));
static cl::opt<bool> accountForLoss(
    "account-for-loss-in-pipeline-split",
    cl::desc("The loss takes one layer's place on the last stage"),
    cl::cat(category));
static cl::opt<std::string> pipelineLayout(
    "pipeline-model-parallel-layout",
    cl::desc("Megatron's layout string of stages ('E', 't', 'L', '|', "
             "repeats), e.g. \"Ett|tt|ttL\""),
    cl::cat(category));
static cl::opt<int64_t> microbatchGroupSize(
    "microbatch-group-size-per-vp-stage", cl::init(0),
    cl::desc("Interleaved schedule: micro-batches per group (default pp)"),
    cl::cat(category));
static cl::opt<std::string> p2pMode(
    "p2p-mode", cl::init("batched"),
    cl::desc("Pipeline p2p: batched (one grouped call per schedule step) or "
             "unbatched (one call per tensor, even ranks sending first)"),
    cl::value_desc("batched|unbatched"), cl::cat(category));
static cl::opt<std::string> backend(
    "backend", cl::init("cpu"),
    cl::desc("Runtime the rank executables link: cpu (OpenBLAS + MPI) or "
             "cuda (CUDA kernels, cuBLAS, NCCL; one GPU per rank)"),
    cl::value_desc("cpu|cuda"), cl::cat(category));
static cl::opt<bool> report("report",
                            cl::desc("Print per-rank memory and communication"),
                            cl::cat(category));
static cl::opt<bool> keep("keep-intermediates",
                          cl::desc("Keep the object file and LLVM IR"),
                          cl::cat(category));
static cl::opt<bool> quiet("quiet", cl::desc("Do not print progress"),
                           cl::cat(category));
static cl::opt<std::string> printIrAfter(
    "print-ir-after",
    cl::desc("Print the module after a stage to stdout: plan, "
             "differentiate, shard, pipeline (pp > 1), prepare or lower (as the progress lines "
             "name them)"),
    cl::value_desc("stage"), cl::cat(category));

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-compile") << message << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  // Megatron's list flags take space-separated values.
  auto isCommTypes = [](const std::string &word) {
    for (StringRef t : llvm::split(word, ','))
      if (!llvm::is_contained(
              ArrayRef<StringRef>{"p2p", "a2a", "allgather", "all_gather",
                                  "a2a+p2p"},
              t))
        return false;
    return true;
  };
  auto isSizes = [](const std::string &word) {
    for (StringRef n : llvm::split(word, ','))
      if (!loom::isDecimal(n.str()))
        return false;
    return true;
  };
  std::vector<std::string> storage;
  std::vector<const char *> args = loom::joinListFlags(
      argc, argv,
      {{"cp-comm-type", isCommTypes},
       {"hierarchical-context-parallel-sizes", isSizes}},
      storage);
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

  loom::driver::CompileOptions options;
  options.backend = backend;
  options.tp = tp;
  options.cp = cp;
  options.dp = dp;
  options.pp = pp;
  options.vpp = vpp;
  options.ep = ep;
  options.etp = etp;
  options.sequenceParallel = sp;
  options.eodMaskLoss = eodMaskLoss;
  options.cpCommType.assign(cpCommType.begin(), cpCommType.end());
  options.hierarchicalCpSizes.assign(hierarchicalCp.begin(),
                                     hierarchicalCp.end());
  options.order = order;
  options.firstStageLayers = firstStageLayers;
  options.lastStageLayers = lastStageLayers;
  options.accountForEmbedding = accountForEmbedding;
  options.accountForLoss = accountForLoss;
  options.pipelineLayout = pipelineLayout;
  options.microbatchGroupSize = microbatchGroupSize;
  options.p2pMode = p2pMode;
  options.numMicrobatches = numMicrobatches;
  options.microbatchesGiven = numMicrobatches.getNumOccurrences() > 0;
  if (globalBatchSize.getNumOccurrences())
    options.globalBatchSize = globalBatchSize;
  options.train = train;
  options.recomputeGranularity = recomputeGranularity;
  if (recomputeActivations) {
    if (!options.recomputeGranularity.empty() &&
        options.recomputeGranularity != "selective")
      return error("--recompute-activations (selective) conflicts with "
                  "--recompute-granularity " +
                  options.recomputeGranularity);
    options.recomputeGranularity = "selective";
  }
  options.recomputeMethod = recomputeMethod;
  if (recomputeNumLayers.getNumOccurrences()) {
    if (recomputeNumLayers < 1)
      return error("--recompute-num-layers " +
                  std::to_string(recomputeNumLayers) + " must be at least 1");
    options.recomputeNumLayers = recomputeNumLayers;
  }
  options.makeVocabSizeDivisibleBy = makeVocabSizeDivisibleBy;
  options.outputDir = outputDir;
  options.keepIntermediates = keep;
  options.printIrAfter = printIrAfter;
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
