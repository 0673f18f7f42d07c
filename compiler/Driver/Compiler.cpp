//===- Compiler.cpp - Ahead-of-time compilation to rank programs -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The stages, as loom-compile prints them, each a named pass pipeline
// (compiler/Pipelines) that loom-opt runs too:
//   1. plan           attach #tfm.plan, build the process groups and meshes
//   2. differentiate  @train_step (with --train)
//   3. shard          tensor- and context-parallel layers
//      pipeline       each pp rank's step (pp > 1)
//   4. prepare        inline blocks, ring attention step by step,
//                     parameters and communicators become arguments
//   5. lower          tfm -> runtime calls -> LLVM dialect
//   6. codegen        LLVM IR -> object file (in process)
//   7. link           object + runtime -> one executable per rank
//   8. manifest       manifest.json and the launcher
// Between them the driver reads what a stage decided off the IR
// (Program.h) for the manifest and the report; it decides nothing itself.
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Compiler.h"

#include "compiler/Driver/Communication.h"
#include "compiler/Driver/Linker.h"
#include "compiler/Driver/Memory.h"
#include "compiler/Driver/ObjectEmitter.h"
#include "compiler/Driver/Program.h"
#include "compiler/Driver/Report.h"
#include "compiler/Driver/WriteManifest.h"

#include "compiler/Pipelines/Pipelines.h"
#include "dialects/Tfm/TfmOps.h"
#include "passes/Autodiff/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Plan/Passes.h"
#include "rankgen/ParallelLayout.h"
#include "rankgen/PipelineSchedule.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace mlir;
using namespace loom;
using namespace loom::driver;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

namespace {

/// Rejects sizes below 1 and what the compiler cannot build yet, naming
/// the flag (the plan pass would say it too, for loom-opt users, but at the
/// module's location instead of the flag).
Error checkSupported(const CompileOptions &o) {
  if (auto checked = rankgen::checkPlan(o.plan); !checked)
    return fail(checked.error());
  // The rank grid builds (the expert world, etp x ep x edp x pp, must fit
  // the same ranks): said here, not at the module's first line.
  if (auto layout = rankgen::ParallelLayout::create(o.plan.sizes); !layout)
    return fail("plan: " + layout.error());
  // Megatron's recompute flags.
  const std::string &g = o.recomputeGranularity, &m = o.recomputeMethod;
  if (!g.empty() && g != "full" && g != "selective")
    return fail("--recompute-granularity must be full or selective, got '" +
                g + "'");
  if (!m.empty() && m != "uniform" && m != "block")
    return fail("--recompute-method must be uniform or block, got '" + m +
                "'");
  if ((!m.empty() || o.recomputeNumLayers) && g != "full")
    return fail("--recompute-method and --recompute-num-layers need "
                "--recompute-granularity full");
  if (o.recomputeNumLayers < 0)
    return fail(llvm::formatv("--recompute-num-layers {0} must be at least 1",
                              o.recomputeNumLayers));
  if (g == "full" && m != "block" && o.recomputeNumLayers > 1)
    return fail(llvm::formatv(
        "--recompute-method uniform with --recompute-num-layers {0} "
        "(groups of layers recomputed together) is not implemented yet; use "
        "--recompute-num-layers 1, or --recompute-method block",
        o.recomputeNumLayers));
  if (!g.empty() && !o.train)
    return fail("recomputation (--recompute-granularity, "
                "--recompute-activations) needs --train: there is no backward "
                "to recompute for");
  return Error::success();
}

/// The recomputation the flags ask for, in words, for --report.
std::string recomputeDescription(const CompileOptions &o) {
  if (o.recomputeGranularity.empty())
    return "no recomputation";
  if (o.recomputeGranularity == "selective")
    return "selective recomputation: core attention";
  if (o.recomputeMethod == "block")
    return llvm::formatv("full recomputation of the first {0} layer(s)",
                         o.recomputeNumLayers ? o.recomputeNumLayers : 1);
  return "full recomputation of every layer";
}

/// Micro-batches per step: --num-microbatches, or Megatron's
/// --global-batch-size / (micro-batch size x dp).
Expected<int64_t> microbatchesPerStep(const CompileOptions &o,
                                      int64_t microBatchSize) {
  if (!o.globalBatchSize)
    return o.plan.numMicrobatches;
  int64_t dp = o.plan.sizes.dp;
  int64_t global = *o.globalBatchSize, perStep = microBatchSize * dp;
  if (global < 1)
    return fail(llvm::formatv("--global-batch-size {0} must be at least 1",
                              global));
  if (global % perStep != 0)
    return fail(llvm::formatv(
        "--global-batch-size {0} is not a multiple of micro-batch size {1} x "
        "dp {2} = {3}",
        global, microBatchSize, dp, perStep));
  int64_t n = global / perStep;
  if (o.microbatchesGiven && n != o.plan.numMicrobatches)
    return fail(llvm::formatv(
        "--global-batch-size {0} means {1} micro-batches of {2} sequences at "
        "dp {3}, not --num-microbatches {4}",
        global, n, microBatchSize, dp, o.plan.numMicrobatches));
  return n;
}

Error runPasses(ModuleOp module, llvm::function_ref<void(OpPassManager &)> build,
                StringRef stage) {
  PassManager pm(module->getContext());
  // The module is verified once per stage, not after every pass: a
  // pipelined plan's lowering has millions of ops and verifying them after
  // each of its passes took a third of the compile (loom-opt, which the
  // tests run pass by pass, still verifies after each).
  pm.enableVerifier(false);
  build(pm);
  if (failed(pm.run(module)) || failed(verify(module)))
    return fail("the " + stage + " stage failed (see the diagnostics above)");
  return Error::success();
}

/// The compile stages whose result is IR, which --print-ir-after names.
constexpr StringLiteral kIrStages[] = {"plan",    "differentiate", "shard",
                                       "pipeline", "prepare",      "fuse",
                                       "lower"};

} // namespace

Error loom::driver::compileModel(ModuleOp module, const CompileOptions &o,
                                 llvm::raw_ostream *reportOut) {
  auto start = std::chrono::steady_clock::now();
  int stageNumber = 0;
  auto stage = [&](StringRef what) {
    if (!o.progress)
      return;
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    o.progress(llvm::formatv("[{0}/9] {1} ({2:F2} s)", ++stageNumber, what,
                             seconds)
                   .str());
  };
  // A backend this build cannot link fails now, not after codegen.
  if (Expected<std::string> lib = backendLibrary(o.backend); !lib)
    return lib.takeError();
  // --print-ir-after: the module after the named stage.
  if (!o.printIrAfter.empty() &&
      !llvm::is_contained(kIrStages, StringRef(o.printIrAfter)))
    return fail("--print-ir-after " + o.printIrAfter +
                ": not a stage with IR (plan, differentiate, shard, pipeline, "
                "prepare, fuse, lower)");
  auto printAfter = [&](StringRef name) {
    if (o.printIrAfter == name && o.irOutput)
      *o.irOutput << module << "\n";
  };
  auto run = [&](StringRef name,
                 llvm::function_ref<void(OpPassManager &)> build) -> Error {
    if (Error e = runPasses(module, build, name))
      return e;
    printAfter(name);
    return Error::success();
  };

  if (Error e = checkSupported(o))
    return e;
  // Mixture-of-experts layers route each rank's own tokens under context
  // parallelism, and under tensor parallelism with experts not split over
  // tp (--expert-tensor-parallel-size 1): a rank's sequence-parallel share.
  // Token dropping would then drop among a rank's own tokens (Megatron's
  // capacity is per rank), which no one-rank run reproduces, so it is
  // refused rather than compiled differently.
  int64_t cp = o.plan.sizes.cp, tp = o.plan.sizes.tp,
          etp = o.plan.sizes.expertTp();
  bool moe = false;
  int64_t numExperts = 0;
  module.walk([&](tfm::MoePermuteOp op) {
    moe = true;
    numExperts = int64_t(op.getNumExperts());
  });
  if (moe && etp != tp && etp != 1)
    return fail(llvm::formatv(
        "--expert-tensor-parallel-size {0} with --tp {1} is not implemented: "
        "the experts are split over tp as a dense MLP is (--expert-tensor-"
        "parallel-size {1}, the default) or not split (1)",
        etp, tp));
  bool localTokens = moe && tp > 1 && etp == 1;
  if (localTokens && !o.plan.sequenceParallel)
    return fail(llvm::formatv(
        "--expert-tensor-parallel-size 1 with --tp {0} needs "
        "--sequence-parallel: each tp rank routes its own share of the "
        "sequence to whole experts",
        tp));
  if (moe && o.moeExpertCapacityFactor && (cp > 1 || localTokens))
    return fail(llvm::formatv(
        "--moe-expert-capacity-factor with {0} is not implemented: each rank "
        "would drop tokens among its own share of the sequence; train "
        "dropless (without a capacity factor){1}",
        cp > 1 ? llvm::formatv("--cp {0}", cp).str()
               : "--expert-tensor-parallel-size 1 and --tp " +
                     std::to_string(tp),
        cp > 1 ? " or with --cp 1" : " or with the experts split over tp"));
  // Expert parallelism: each rank holds ep's share of the experts and
  // exchanges tokens with the other ranks of its ep group.
  if (int64_t ep = o.plan.sizes.ep; ep > 1) {
    if (!moe)
      return fail(llvm::formatv(
          "--ep {0}: the model has no mixture-of-experts layers to split", ep));
    if (numExperts % ep != 0)
      return fail(llvm::formatv("--ep {0}: the model's {1} experts do not "
                                "divide over {0} ranks",
                                ep, numExperts));
  }

  // The program: the forward entry, tokens, labels and loss mask -> loss.
  Expected<func::FuncOp> forward = forwardEntry(module);
  if (!forward)
    return forward.takeError();
  auto tokensType = cast<RankedTensorType>(
      forward->getArgumentTypes()[*inputArgument(*forward, "tokens")]);
  Expected<int64_t> numMicrobatches =
      microbatchesPerStep(o, tokensType.getDimSize(0));
  if (!numMicrobatches)
    return numMicrobatches.takeError();
  std::string forwardName = forward->getName().str();
  // The token whose loss --eod-mask-loss masks (the driver's loss mask).
  std::optional<int64_t> eodMask;
  if (o.eodMaskLoss) {
    auto model = module->getAttrOfType<DictionaryAttr>(tfm::kModelAttrName);
    auto eod = model ? model.getAs<IntegerAttr>("eod_token_id") : IntegerAttr();
    if (!eod)
      return fail("--eod-mask-loss needs the end-of-document token id: import "
                  "the model with loom-import --eod-token-id");
    eodMask = eod.getInt();
  }

  // 1. Plan, with the step's micro-batches (--global-batch-size decides them
  // once the micro-batch size is known).
  stage("plan: process groups and meshes");
  rankgen::Plan plan = o.plan;
  plan.numMicrobatches = *numMicrobatches;
  if (Error e = run("plan", [&](OpPassManager &pm) {
        buildTfmPlanPipeline(pm, plan);
      }))
    return e;
  // The model as planned (tfm-pad-vocab may have padded the vocabulary).
  ModelInfo model = readModel(module, tokensType);
  auto layout = rankgen::ParallelLayout::create(
      module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName)
          .toParallelConfig());
  if (!layout)
    return fail("plan: " + layout.error());
  const rankgen::ParallelConfig &config = layout->config();

  // 2. Differentiate: the train step (forward + backward) next to forward.
  stage(o.train ? "differentiate: backward of every block"
                : "differentiate: skipped (forward only; --train adds it)");
  if (o.train && o.recomputeMethod == "block" && model.attrs)
    if (auto layers = model.attrs.getAs<IntegerAttr>("num_layers");
        layers && o.recomputeNumLayers > layers.getInt())
      return fail(llvm::formatv("--recompute-num-layers {0} exceeds the "
                                "model's {1} layers",
                                o.recomputeNumLayers, layers.getInt()));
  autodiff::TfmDifferentiateOptions diffOptions;
  diffOptions.granularity = o.recomputeGranularity;
  diffOptions.method = o.recomputeMethod.empty() ? "uniform" : o.recomputeMethod;
  diffOptions.numLayers = o.recomputeNumLayers ? o.recomputeNumLayers : 1;
  diffOptions.function = forwardName;
  plan::TfmSetRouterLossesOptions routerLosses;
  routerLosses.auxCoeff = o.moeAuxLossCoeff.value_or(-1.0);
  routerLosses.zCoeff = o.moeZLossCoeff.value_or(-1.0);
  plan::TfmSetExpertCapacityOptions capacity;
  capacity.capacityFactor = o.moeExpertCapacityFactor.value_or(0.0);
  capacity.dropPolicy = o.moeTokenDropPolicy;
  capacity.padToCapacity = o.moePadExpertInputToCapacity;
  if (o.moeExpertCapacityFactor && !moe)
    return fail("--moe-expert-capacity-factor: the model has no MoE layers");
  if (Error e = run("differentiate", [&](OpPassManager &pm) {
        pm.addPass(plan::createTfmSetExpertCapacity(capacity));
        pm.addPass(plan::createTfmSetRouterLosses(routerLosses));
        pm.addPass(plan::createTfmDispatchExperts(
            {/*allgather=*/o.moeAllgatherDispatcher}));
        if (o.train)
          pm.addPass(autodiff::createTfmDifferentiate(diffOptions));
      }))
    return e;
  // The experts' weights (the grouped linears' parameters), for --report.
  llvm::StringSet<> expertParams;
  module.walk([&](tfm::GroupedLinearOp op) {
    if (auto get = op.getWeight().getDefiningOp<tfm::GetParamOp>())
      expertParams.insert(get.getName());
  });
  // The routers' losses the rank program logs (one per MoE layer each).
  RouterLossCounts routerLossCounts;
  if (auto fwd = module.lookupSymbol<func::FuncOp>(forwardName))
    fwd.walk([&](tfm::MoeRouterLossOp op) {
      routerLossCounts.loadBalancing += !op.getAuxCoeff().isZero();
      routerLossCounts.zLoss += !op.getZCoeff().isZero();
    });

  // 3. Shard: every value distributed, per-rank shapes, the collectives.
  stage(config.tp > 1 && config.cp > 1 ? "shard: tensor and context parallel layers"
        : config.tp > 1               ? "shard: tensor parallel layers"
        : config.cp > 1               ? "shard: context parallel layers"
                                      : "shard: nothing to split (tp 1, cp 1)");
  if (Error e = run("shard", buildTfmShardPipeline))
    return e;
  // Pipeline parallelism: the stages, and each pp rank's schedule as one
  // function, proven to match and progress before anything else is built.
  if (config.pp > 1)
    if (Error e = run("pipeline", buildTfmPipelinePipeline))
      return e;
  Expected<SmallVector<ParamInfo, 0>> params = describeParams(module, config.pp);
  if (!params)
    return params.takeError();
  // What the report says of the sharded entries: the activations a train
  // step keeps, the attention ops that repeat kv heads.
  llvm::StringMap<int64_t> savedBytes;
  int64_t repeatedKv = 0;
  std::optional<Report::ExpertDispatch> expertDispatch;
  for (func::FuncOp f : entryPoints(module)) {
    if (std::optional<int64_t> saved = savedActivationBytes(f))
      savedBytes[f.getName()] = *saved;
    f.walk([&](tfm::RepeatKvOp) { ++repeatedKv; });
  }
  // Expert parallelism: one MoE layer's dispatch (they are all alike).
  module.walk([&](tfm::MoeDispatchOp op) {
    expertDispatch = Report::ExpertDispatch{
        numExperts, bytesOf(op.getRows().getType()),
        bytesOf(op.getDispatched().getType()), op.getAllgather()};
    return WalkResult::interrupt();
  });

  // 4. Prepare: the argument lists of the entry points are fixed here, and
  // every communication is an op.
  stage("prepare: inline blocks, parameters become arguments");
  if (Error e = run("prepare", buildTfmPrepareLoweringPipeline))
    return e;
  SmallVector<func::FuncOp> entries = entryPoints(module);
  Expected<GradientGroups> gradientGroups = driver::gradientGroups(entries);
  if (!gradientGroups)
    return gradientGroups.takeError();
  manifest::Manifest mf;
  if (Error e = addEntries(mf, entries, config.pp))
    return e;
  ProgramFacts facts{.plan = plan,
                     .layout = *layout,
                     .model = model,
                     .params = *params,
                     .backend = o.backend,
                     .eodTokenId = eodMask,
                     .gradientGroups = *gradientGroups,
                     .entries = entries,
                     .routerLosses = routerLossCounts};
  if (Error e = describeProgram(mf, facts))
    return e;
  SmallVector<std::pair<std::string, EntryVolume>> volumes;
  for (func::FuncOp f : entries)
    volumes.push_back({f.getName().str(), countCommunication(f)});

  // 5. Fuse: fewer runtime calls for the same function.
  stage(o.fuse ? "fuse: gradient sums, residual norms, q and k rotations, linears"
               : "fuse: skipped (--no-fuse)");
  if (o.fuse) {
    if (Error e = run("fuse", buildTfmFusePipeline))
      return e;
  } else {
    printAfter("fuse");
  }

  // 6. Lower. The buffer plan is read off the lowered functions before they
  // become LLVM.
  stage("lower: runtime calls, buffers, LLVM dialect");
  if (Error e = runPasses(module, buildTfmLowerToBuffersPipeline, "lower"))
    return e;
  llvm::StringMap<int64_t> peaks;
  for (func::FuncOp f : entries)
    peaks[f.getName()] = peakBufferBytes(f);
  addWorkspaces(mf, entries);
  entries.clear(); // the functions become llvm.func below
  if (Error e = run("lower", buildTfmBuffersToLLVMPipeline))
    return e;

  // 7. Codegen. Every rank of a data-parallel plan runs the same code.
  stage("codegen: LLVM IR -> object file");
  if (std::error_code ec = llvm::sys::fs::create_directories(o.outputDir))
    return fail("cannot create '" + o.outputDir + "': " + ec.message());
  SmallString<256> objectPath(o.outputDir), llPath(o.outputDir);
  llvm::sys::path::append(objectPath, "program-0.o");
  llvm::sys::path::append(llPath, "program-0.ll");
  if (Error e = emitObjectFile(module, objectPath,
                               o.keepIntermediates ? StringRef(llPath) : ""))
    return e;

  // 8. Link once, then give every rank its executable (hard links of the
  // one program).
  stage("link: rank executables");
  int64_t world = layout->worldSize();
  SmallString<256> first(o.outputDir);
  llvm::sys::path::append(first, rankBinary(0));
  if (Error e = linkExecutable(objectPath, first, o.backend))
    return e;
  for (int64_t r = 1; r < world; ++r) {
    SmallString<256> path(o.outputDir);
    llvm::sys::path::append(path, rankBinary(r));
    llvm::sys::fs::remove(path);
    if (llvm::sys::fs::create_hard_link(first, path) &&
        llvm::sys::fs::copy_file(first, path))
      return fail("cannot create '" + path + "'");
    llvm::sys::fs::setPermissions(path, llvm::sys::fs::perms(0755));
  }
  if (!o.keepIntermediates)
    llvm::sys::fs::remove(objectPath);

  // 9. Manifest and launcher.
  stage("manifest and launcher");
  if (Error e = writeManifestAndLauncher(o.outputDir, mf))
    return e;

  if (!reportOut && o.reportJsonPath.empty())
    return Error::success();
  Report report;
  report.plan = plan;
  report.worldSize = world;
  report.microBatchSize = model.microBatchSize;
  report.seqLength = model.seqLength;
  report.paddedSeqLength = model.paddedSeqLength;
  report.recomputation = recomputeDescription(o);
  report.repeatedKv = repeatedKv;
  report.moe = !expertParams.empty();
  report.expertDispatch = expertDispatch;
  if (config.pp > 1) {
    // The schedule tfm-schedule-pipeline built and checked, a function of
    // the plan: the report's timeline and bubble.
    rankgen::ScheduleOptions so;
    so.pp = config.pp;
    so.vpp = plan.vpp;
    so.numMicrobatches = plan.numMicrobatches;
    so.microbatchGroupSize = plan.microbatchGroupSize;
    so.forwardOnly = !o.train;
    if (auto schedule = rankgen::PipelineSchedule::create(so))
      report.schedule = *schedule;
  }
  // One program per pp rank: its ranks, the parameters its stage holds and
  // its entries (without pipelining, every rank runs every entry).
  for (int64_t r = 0; r < config.pp; ++r) {
    ProgramReport &p = report.programs.emplace_back();
    if (config.pp > 1)
      p.ppRank = r;
    for (int64_t rank = 0; rank < world; ++rank)
      if (layout->rankInfo(rank)->dense[size_t(rankgen::Dim::PP)] == r)
        p.ranks.push_back(rank);
    for (const ParamInfo &param : *params)
      if (config.pp == 1 || param.ppRanks.count(r)) {
        p.parameterBytes += param.localBytes();
        if (expertParams.contains(param.name))
          p.expertParameterBytes += param.localBytes();
      }
    std::string suffix = "_pp" + std::to_string(r);
    for (auto &[name, volume] : volumes) {
      if (config.pp > 1 && !StringRef(name).ends_with(suffix))
        continue;
      EntryReport &e = p.entries.emplace_back();
      e.name = name;
      e.runsPerStep = config.pp > 1 ? 1 : plan.numMicrobatches;
      e.volume = volume;
      e.peakBytes = peaks.lookup(name);
      if (auto it = savedBytes.find(name); it != savedBytes.end())
        e.savedBytes = it->second;
    }
  }
  if (reportOut)
    printReport(*reportOut, report);
  if (!o.reportJsonPath.empty()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    os << llvm::formatv("{0:2}", reportJson(report)) << "\n";
    if (Error e = writeFileAtomically(o.reportJsonPath, text))
      return e;
  }
  return Error::success();
}
