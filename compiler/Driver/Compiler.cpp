//===- Compiler.cpp - Ahead-of-time compilation to rank programs -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The stages, as loom-compile prints them:
//   1. plan           attach #tfm.plan, build the process groups and meshes
//   2. differentiate  @train_step (with --train)
//   3. shard          tensor- and context-parallel layers
//   4. prepare        inline blocks, ring attention step by step,
//                     parameters and communicators become arguments
//   5. lower          tfm -> runtime calls -> LLVM dialect
//   6. codegen        LLVM IR -> object file (in process)
//   7. link           object + runtime -> one executable per rank
//   8. manifest       manifest.json and the launcher
//
//===----------------------------------------------------------------------===//

#include "compiler/Driver/Compiler.h"

#include "compiler/Driver/Collectives.h"
#include "compiler/Driver/HfNames.h"
#include "compiler/Driver/Linker.h"
#include "compiler/Driver/ObjectEmitter.h"

#include "dialects/Tfm/Distribution.h"
#include "dialects/Tfm/TfmOps.h"
#include "compiler/Pipelines/Pipelines.h"
#include "runtime/manifest/Manifest.h"
#include "rankgen/ContextParallelLayout.h"
#include "rankgen/ParallelLayout.h"
#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineSchedule.h"
#include "rankgen/PipelineTimeline.h"
#include "rankgen/RankGenerator.h"
#include "passes/Autodiff/Passes.h"
#include "passes/Lowering/Passes.h"
#include "passes/Pipeline/Passes.h"
#include "passes/Plan/Passes.h"
#include "passes/Sharding/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Mesh/IR/MeshOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <functional>
#include <set>

using namespace mlir;
using namespace loom;
using namespace loom::driver;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

namespace {

Error fail(const Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

/// A parameter as the manifest describes it.
struct ParamInfo {
  std::string name;
  SmallVector<int64_t> shape;
  Type elementType;
  tfm::InitKind init;
  double std = 0.0;
};

/// How the manifest places a parameter: the process group whose position
/// gives a rank its slice, the split dim (none: whole on every rank) and the
/// number of slices.
struct Placement {
  std::string group;
  std::optional<int64_t> splitDim;
  int64_t parts = 1;
};

Expected<Placement> placementOf(StringRef name, tfm::DistAttr dist,
                                ModuleOp module) {
  // A whole parameter names the tensor-parallel group (any group would do).
  Placement p{rankgen::dimName(rankgen::Dim::TP)};
  if (!dist || dist.isReplicated())
    return p;
  auto unplaceable = [&](StringRef why) {
    return fail("@" + name + " is " + tfm::describe(dist) +
                ", which the manifest cannot place: " + why);
  };
  if (dist.isPartial())
    return unplaceable("parameters are whole values");
  FailureOr<tfm::MeshAxesInfo> mesh =
      tfm::MeshAxesInfo::lookup(module, dist.getMesh());
  if (failed(mesh))
    return fail("@" + name + ": no mesh " + dist.getMesh().getValue());
  for (int64_t d = 0; d < dist.getNumDims(); ++d) {
    tfm::DimDist dim = dist.getDim(d);
    if (!dim.isNatural())
      return unplaceable("its chunks are reordered");
    if (dim.isWhole())
      continue;
    if (p.splitDim)
      return unplaceable("it is split on two dims");
    p.splitDim = d;
    p.parts = mesh->product(dim.axes);
    p.group = mesh->groupKind(dim.axes);
  }
  return p;
}

loomrt_dtype dtypeOf(Type t) {
  if (t.isF32())
    return LOOMRT_F32;
  if (t.isBF16())
    return LOOMRT_BF16;
  return LOOMRT_F16;
}

/// Rejects sizes below 1 and what the compiler cannot build yet, naming
/// the flag (the plan pass would say it too, for loom-opt users, but at the
/// module's location instead of the flag).
Error checkSupported(const CompileOptions &o) {
  if (auto checked = rankgen::checkPlan(o.plan); !checked)
    return fail(checked.error());
  auto notYet = [](StringRef flag, int64_t value, StringRef what) {
    return fail(llvm::formatv("{0} {1}: {2} is not implemented yet; this "
                              "compiler builds data-, tensor- and "
                              "context-parallel plans (--pp 1)",
                              flag, value, what));
  };
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
  if (o.plan.sizes.ep != 1)
    return notYet("--ep", o.plan.sizes.ep, "expert parallelism");
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

/// Peak bytes of simultaneously live buffers in a lowered function: its
/// allocations and deallocations in program order (straight-line code).
int64_t peakBufferBytes(func::FuncOp func) {
  int64_t live = 0, peak = 0;
  func.walk([&](Operation *op) {
    auto bytes = [](MemRefType t) {
      return t.getNumElements() * int64_t(t.getElementTypeBitWidth() / 8);
    };
    if (auto alloc = dyn_cast<memref::AllocOp>(op))
      peak = std::max(peak, live += bytes(alloc.getType()));
    else if (auto dealloc = dyn_cast<memref::DeallocOp>(op))
      live -= bytes(cast<MemRefType>(dealloc.getMemref().getType()));
  });
  return peak;
}

/// Bytes of the activations a training entry keeps from forward to
/// backward: the forward blocks' results read by backward blocks (per rank,
/// after sharding; per micro-batch). nullopt for an entry without backward.
std::optional<int64_t> savedActivationBytes(func::FuncOp func) {
  std::optional<int64_t> total;
  for (auto block : func.getBody().front().getOps<tfm::BlockOp>()) {
    if (block.getBackward()) {
      total = total.value_or(0);
      continue;
    }
    for (Value r : block.getResults()) {
      bool saved = llvm::any_of(r.getUsers(), [](Operation *user) {
        auto b = dyn_cast<tfm::BlockOp>(user);
        return b && b.getBackward();
      });
      auto type = dyn_cast<RankedTensorType>(r.getType());
      if (saved && type)
        total = total.value_or(0) +
                type.getNumElements() *
                    int64_t(type.getElementTypeBitWidth() / 8);
    }
  }
  return total;
}

std::vector<std::vector<int32_t>> groupsOf(const rankgen::GroupList &groups) {
  std::vector<std::vector<int32_t>> out;
  for (size_t g = 0; g < groups.numGroups(); ++g)
    out.emplace_back(groups[g].begin(), groups[g].end());
  return out;
}

Error writeFileAtomically(StringRef path, StringRef contents,
                          bool executable = false) {
  std::string tmp = (path + ".tmp").str();
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(tmp, ec, llvm::sys::fs::OF_Text);
    if (ec)
      return fail("cannot write '" + tmp + "': " + ec.message());
    os << contents;
  }
  if (executable)
    llvm::sys::fs::setPermissions(tmp, llvm::sys::fs::perms(0755));
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path))
    return fail("cannot write '" + path + "': " + ec.message());
  return Error::success();
}

/// The manifest's description of one entry point (docs/MANIFEST.md): its
/// arguments (batch inputs by their tfm.input, parameters, communicators),
/// then the results that became out-params (the loss, then one gradient per
/// parameter).
FailureOr<manifest::Entry> describeEntry(func::FuncOp f) {
  manifest::Entry entry;
  auto arg = [&](manifest::ArgKind kind, StringRef name = "") {
    manifest::EntryArg &a = entry.args.emplace_back();
    a.kind = kind;
    a.name = name.str();
    return &a;
  };
  for (unsigned i = 0; i < f.getNumArguments(); ++i) {
    if (auto input = f.getArgAttrOfType<StringAttr>(i, tfm::kInputArgAttrName)) {
      manifest::ArgKind kind = manifest::parseArgKind(input.getValue().str());
      manifest::EntryArg *a =
          arg(kind, kind == manifest::ArgKind::Other ? input.getValue() : "");
      if (auto m = f.getArgAttrOfType<IntegerAttr>(i, tfm::kMicrobatchAttrName))
        a->microbatch = m.getInt();
      continue;
    }
    if (auto group = f.getArgAttrOfType<StringAttr>(i, tfm::kCommArgAttrName)) {
      arg(manifest::ArgKind::Comm, group.getValue());
      continue;
    }
    auto name = f.getArgAttrOfType<StringAttr>(i, tfm::kParamArgAttrName);
    if (!name)
      return f.emitError() << "argument " << i << " of @" << f.getName()
                           << " is neither a batch input (tfm.input), a "
                              "parameter nor a communicator";
    arg(manifest::ArgKind::Param, name.getValue());
  }
  // The loss (a pipelined step's last stage: one per micro-batch), then
  // the gradients.
  bool pipelined = f->hasAttr(tfm::kPipelineRankAttrName);
  // The chunk whose tfm.grads_ready completes each returned gradient.
  DenseMap<Value, int64_t> readyChunk;
  f.walk([&](tfm::GradsReadyOp ready) {
    for (Value g : ready.getGrads())
      readyChunk[g] = int64_t(ready.getChunk());
  });
  Operation *ret = f.getBody().front().getTerminator();
  for (unsigned i = 0; i < f.getNumResults(); ++i) {
    auto micro = f.getResultAttrOfType<IntegerAttr>(i, tfm::kMicrobatchAttrName);
    if (i == 0 && !pipelined) {
      arg(manifest::ArgKind::Loss);
      continue;
    }
    if (micro) {
      arg(manifest::ArgKind::Loss)->microbatch = micro.getInt();
      continue;
    }
    auto name = f.getResultAttrOfType<StringAttr>(i, tfm::kGradResultAttrName);
    if (!name)
      return f.emitError() << "result " << i << " of @" << f.getName()
                           << " is not a parameter gradient";
    manifest::EntryArg *grad = arg(manifest::ArgKind::Grad, name.getValue());
    // A pipelined step sums micro-batches in f32 whatever the parameter's
    // dtype: the buffer the rank program provides must say so.
    if (pipelined)
      grad->dtype = dtypeOf(
          cast<ShapedType>(f.getResultTypes()[i]).getElementType());
    if (auto it = readyChunk.find(ret->getOperand(i)); it != readyChunk.end())
      grad->chunk = it->second;
  }
  entry.symbol =
      f->getAttrOfType<StringAttr>(tfm::kEntryAttrName).getValue().str();
  return entry;
}

/// The entry points of a module (functions with tfm.entry), in module order.
SmallVector<func::FuncOp> entryPoints(ModuleOp module) {
  SmallVector<func::FuncOp> entries;
  for (auto f : module.getOps<func::FuncOp>())
    if (f->hasAttr(tfm::kEntryAttrName))
      entries.push_back(f);
  return entries;
}

/// The argument of `f` that carries batch input `kind` ("tokens"), if any.
std::optional<unsigned> inputArgument(func::FuncOp f, StringRef kind) {
  for (unsigned i = 0; i < f.getNumArguments(); ++i)
    if (auto a = f.getArgAttrOfType<StringAttr>(i, tfm::kInputArgAttrName);
        a && a.getValue() == kind)
      return i;
  return std::nullopt;
}

/// The model's forward entry: tokens, labels and loss mask in, the loss
/// out. Errors name what is missing.
Expected<func::FuncOp> forwardEntry(ModuleOp module) {
  for (func::FuncOp f : entryPoints(module)) {
    if (inputArgument(f, "grad_scale"))
      continue;
    for (StringRef kind : {"tokens", "labels", "loss_mask"})
      if (!inputArgument(f, kind))
        return fail("entry @" + f.getName() + " has no argument marked " +
                    tfm::kInputArgAttrName + " = \"" + kind +
                    "\" (import the model with loom-import)");
    if (f.getNumArguments() != 3 || f.getNumResults() != 1)
      return fail("entry @" + f.getName() +
                  " must take (tokens, labels, loss_mask) and return the "
                  "loss");
    auto tokens = dyn_cast<RankedTensorType>(
        f.getArgumentTypes()[*inputArgument(f, "tokens")]);
    if (!tokens || tokens.getRank() != 2)
      return fail("the tokens of @" + f.getName() +
                  " must be a [batch, seq] tensor");
    return f;
  }
  return fail("the module has no forward entry point (a function with " +
              Twine(tfm::kEntryAttrName) +
              "; import a model with loom-import)");
}

/// The compile stages whose result is IR, which --print-ir-after names.
constexpr StringLiteral kIrStages[] = {"plan",     "differentiate", "shard",
                                       "pipeline", "prepare",       "lower"};

/// Runs the rank's program under mpirun or Slurm: picks the binary of the
/// rank from the launcher's environment (docs/MANIFEST.md).
constexpr const char *kLaunchScript = R"SH(#!/bin/sh
# Generated by loom-compile. Run once per rank by mpirun (loom-run does it):
# picks this rank's executable and runs it with the given arguments.
dir=$(CDPATH= cd -- "$(dirname -- "$0")" && pwd)
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-${SLURM_PROCID:-}}}}
if [ -z "$rank" ]; then
  echo "launch: error: no MPI rank in the environment; start it with loom-run or mpirun" >&2
  exit 1
fi
exec "$dir/$(printf 'rank-%05d' "$rank")" --manifest "$dir/manifest.json" "$@"
)SH";

} // namespace

Error loom::driver::compileModel(ModuleOp module, const CompileOptions &o,
                                 llvm::raw_ostream *report) {
  auto start = std::chrono::steady_clock::now();
  int stageNumber = 0;
  auto stage = [&](StringRef what) {
    if (!o.progress)
      return;
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    o.progress(llvm::formatv("[{0}/8] {1} ({2:F2} s)", ++stageNumber, what,
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
                "prepare, lower)");
  auto printAfter = [&](StringRef name) {
    if (o.printIrAfter == name && o.irOutput)
      *o.irOutput << module << "\n";
  };

  if (Error e = checkSupported(o))
    return e;

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
  auto model = module->getAttrOfType<DictionaryAttr>(tfm::kModelAttrName);
  // The token whose loss --eod-mask-loss masks (the driver's loss mask).
  std::optional<int64_t> eodMask;
  if (o.eodMaskLoss) {
    auto eod = model ? model.getAs<IntegerAttr>("eod_token_id") : IntegerAttr();
    if (!eod)
      return fail("--eod-mask-loss needs the end-of-document token id: import "
                  "the model with loom-import --eod-token-id");
    eodMask = eod.getInt();
  }

  // 1. Plan.
  stage("plan: process groups and meshes");
  // The plan with the step's micro-batches (--global-batch-size decides
  // them once the micro-batch size is known).
  rankgen::Plan plan = o.plan;
  plan.numMicrobatches = *numMicrobatches;
  if (Error e = runPasses(
          module,
          [&](OpPassManager &pm) { buildTfmPlanPipeline(pm, plan); },
          "plan"))
    return e;
  printAfter("plan");
  // The model as planned (tfm-pad-vocab may have padded the vocabulary).
  model = module->getAttrOfType<DictionaryAttr>(tfm::kModelAttrName);
  StringRef family = "gpt2";
  int64_t hidden = 0, vocab = 0, unpaddedVocab = 0;
  // The sequence the program runs at (tfm-pad-sequence may have padded it
  // for cp and SP); the data is still sampled at the imported length.
  int64_t seqLength = tokensType.getDimSize(1), paddedSeqLength = seqLength;
  if (model) {
    if (auto p = model.getAs<IntegerAttr>("padded_seq_length"))
      paddedSeqLength = p.getInt();
    if (auto u = model.getAs<IntegerAttr>("unpadded_vocab_size"))
      unpaddedVocab = u.getInt();
    if (auto f = model.getAs<StringAttr>("family"))
      family = f.getValue();
    if (auto h = model.getAs<IntegerAttr>("hidden_size"))
      hidden = h.getInt();
    if (auto v = model.getAs<IntegerAttr>("vocab_size"))
      vocab = v.getInt();
  }
  auto planAttr = module->getAttrOfType<tfm::PlanAttr>(tfm::kPlanAttrName);
  auto layout = rankgen::ParallelLayout::create(planAttr.toParallelConfig());
  if (!layout)
    return fail("plan: " + layout.error());
  int64_t world = layout->worldSize();
  const rankgen::ParallelConfig &config = layout->config();

  SmallVector<ParamInfo> params;
  for (auto p : module.getOps<tfm::ParamOp>())
    params.push_back({p.getSymName().str(),
                      SmallVector<int64_t>(p.getTensorType().getShape()),
                      p.getTensorType().getElementType(), p.getInit(),
                      p.getStd() ? p.getStd()->convertToDouble() : 0.0});

  // 2. Differentiate: the train step (forward + backward) next to forward.
  stage(o.train ? "differentiate: backward of every block"
                : "differentiate: skipped (forward only; --train adds it)");
  if (o.train && o.recomputeMethod == "block" && model)
    if (auto layers = model.getAs<IntegerAttr>("num_layers");
        layers && o.recomputeNumLayers > layers.getInt())
      return fail(llvm::formatv("--recompute-num-layers {0} exceeds the "
                                "model's {1} layers",
                                o.recomputeNumLayers, layers.getInt()));
  if (o.train) {
    autodiff::TfmDifferentiateOptions diffOptions;
    diffOptions.granularity = o.recomputeGranularity;
    diffOptions.method =
        o.recomputeMethod.empty() ? "uniform" : o.recomputeMethod;
    diffOptions.numLayers = o.recomputeNumLayers ? o.recomputeNumLayers : 1;
    diffOptions.function = forward->getName().str();
    if (Error e = runPasses(
            module,
            [&](OpPassManager &pm) {
              pm.addPass(autodiff::createTfmDifferentiate(diffOptions));
            },
            "differentiate"))
      return e;
  }
  printAfter("differentiate");

  // 3. Shard: every value distributed, per-rank shapes, the collectives.
  stage(config.tp > 1 && config.cp > 1 ? "shard: tensor and context parallel layers"
        : config.tp > 1               ? "shard: tensor parallel layers"
        : config.cp > 1               ? "shard: context parallel layers"
                                      : "shard: nothing to split (tp 1, cp 1)");
  if (Error e = runPasses(module, buildTfmShardPipeline, "shard"))
    return e;
  printAfter("shard");
  // Pipeline parallelism: the stages, and each pp rank's schedule as one
  // function, proven to match and progress before anything else is built.
  std::optional<rankgen::PipelineSchedule> pipelineSchedule;
  if (config.pp > 1) {
    if (Error e = runPasses(module, buildTfmPipelinePipeline, "pipeline"))
      return e;
    printAfter("pipeline");
    // The report's timeline and bubble: the schedule the pass built, a
    // function of the plan (it checked it).
    rankgen::ScheduleOptions so;
    so.pp = config.pp;
    so.vpp = plan.vpp;
    so.numMicrobatches = plan.numMicrobatches;
    so.microbatchGroupSize = plan.microbatchGroupSize;
    so.forwardOnly = !o.train;
    if (auto schedule = rankgen::PipelineSchedule::create(so))
      pipelineSchedule = *schedule;
  }
  // The pp ranks whose functions read each parameter (all of them without
  // pipelining).
  llvm::StringMap<std::set<int64_t>> paramStages;
  if (config.pp > 1) {
    // A pp rank's function reads parameters in the functions of its blocks
    // (each walked once per rank, not once per micro-batch's call).
    std::set<std::pair<Operation *, int64_t>> walked;
    std::function<void(func::FuncOp, int64_t)> reads = [&](func::FuncOp f,
                                                           int64_t r) {
      if (!walked.insert({f.getOperation(), r}).second)
        return;
      f.walk([&](Operation *op) {
        if (auto get = dyn_cast<tfm::GetParamOp>(op))
          paramStages[get.getName()].insert(r);
        else if (auto call = dyn_cast<func::CallOp>(op))
          if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
            reads(callee, r);
      });
    };
    for (auto f : module.getOps<func::FuncOp>())
      if (auto r = f->getAttrOfType<IntegerAttr>(tfm::kPipelineRankAttrName))
        reads(f, r.getInt());
  }
  // How each parameter is distributed, and the collectives each entry runs
  // per micro-batch, read off the sharded IR before lowering hides them.
  llvm::StringMap<tfm::DistAttr> paramDist;
  module.walk([&](tfm::GetParamOp get) {
    paramDist[get.getName()] = tfm::getDist(get.getResult());
  });
  llvm::StringMap<Placement> placements;
  for (const ParamInfo &p : params) {
    Expected<Placement> placement =
        placementOf(p.name, paramDist.lookup(p.name), module);
    if (!placement)
      return placement.takeError();
    placements[p.name] = *placement;
  }
  SmallVector<func::FuncOp> entryFuncs = entryPoints(module);
  // The group the rank program reduces parameter gradients over: dp, or
  // with context parallelism dp x cp, whose gradients leave the train step
  // partial sums over cp (tfm-propagate-distribution), every one of them.
  std::string gradientGroup = "dp";
  for (func::FuncOp f : entryFuncs)
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto name =
          f.getResultAttrOfType<StringAttr>(i, tfm::kGradResultAttrName);
      if (!name)
        continue;
      tfm::DistAttr d = tfm::getDist(f.getResultTypes()[i]);
      SmallVector<StringRef> partial;
      if (d)
        partial = d.getPartialAxes();
      bool overCp = partial.size() == 1 &&
                    partial[0] == rankgen::dimName(rankgen::Dim::CP) &&
                    d.getReduction() == mesh::ReductionKind::Sum;
      if ((config.cp > 1) != overCp)
        return fail("the gradient of " + name.getValue().str() + " leaves @" +
                    f.getName().str() + " " + tfm::describe(d) +
                    "; the rank program reduces gradients over " +
                    (config.cp > 1 ? "dp x cp and needs them partial over cp"
                                   : "dp and needs them whole"));
      if (config.cp > 1)
        gradientGroup = "dp-cp";
    }
  SmallVector<std::pair<std::string, EntryVolume>> volumes;
  SmallVector<std::pair<std::string, int64_t>> savedBytes;
  int64_t repeatedKv = 0;
  for (func::FuncOp f : entryFuncs) {
    volumes.push_back({f.getName().str(), collectiveVolume(f)});
    if (std::optional<int64_t> saved = savedActivationBytes(f))
      savedBytes.push_back({f.getName().str(), *saved});
    f.walk([&](tfm::RepeatKvOp) { ++repeatedKv; });
  }

  // 4. Prepare: the argument lists of the entry points are fixed here.
  stage("prepare: inline blocks, parameters become arguments");
  if (Error e = runPasses(module, buildTfmPrepareLoweringPipeline, "prepare"))
    return e;
  printAfter("prepare");
  // The manifest (runtime/manifest), filled as the stages learn its
  // fields; the entries first, whose arguments are fixed now.
  manifest::Manifest mf;
  // Pipelined: each pp rank's entries.
  if (config.pp > 1)
    mf.stageEntries.emplace(size_t(config.pp));
  SmallVector<std::string> commKinds;
  for (func::FuncOp f : entryFuncs)
    for (unsigned i = 0; i < f.getNumArguments(); ++i)
      if (auto g = f.getArgAttrOfType<StringAttr>(i, tfm::kCommArgAttrName))
        if (!llvm::is_contained(commKinds, g.getValue().str()))
          commKinds.push_back(g.getValue().str());
  for (func::FuncOp f : entryFuncs) {
    FailureOr<manifest::Entry> entry = describeEntry(f);
    if (failed(entry))
      return fail("@" + f.getName() + " is not an entry point loom-run "
                  "knows (see the diagnostics above)");
    // Keyed by what the rank program does with it, whatever the function
    // is called: a train step takes the loss scale.
    StringRef key = inputArgument(f, "grad_scale") ? "train_step" : "forward";
    if (auto r = f->getAttrOfType<IntegerAttr>(tfm::kPipelineRankAttrName))
      (*mf.stageEntries)[size_t(r.getInt())][key.str()] = std::move(*entry);
    else
      mf.entries[key.str()] = std::move(*entry);
  }

  // 5. Lower. The buffer plan is read off the lowered functions before they
  // become LLVM.
  stage("lower: runtime calls, buffers, LLVM dialect");
  if (Error e = runPasses(module, buildTfmLowerToBuffersPipeline, "lower"))
    return e;
  // Names and sizes only: the functions become llvm.func below.
  SmallVector<std::pair<std::string, int64_t>> activationBytes;
  for (func::FuncOp f : entryFuncs)
    activationBytes.push_back({f.getName().str(), peakBufferBytes(f)});
  entryFuncs.clear();
  if (Error e = runPasses(module, buildTfmBuffersToLLVMPipeline, "lower"))
    return e;
  printAfter("lower");

  // 6. Codegen. Every rank of a data-parallel plan runs the same code.
  stage("codegen: LLVM IR -> object file");
  if (std::error_code ec = llvm::sys::fs::create_directories(o.outputDir))
    return fail("cannot create '" + o.outputDir + "': " + ec.message());
  SmallString<256> objectPath(o.outputDir), llPath(o.outputDir);
  llvm::sys::path::append(objectPath, "program-0.o");
  llvm::sys::path::append(llPath, "program-0.ll");
  if (Error e = emitObjectFile(module, objectPath,
                               o.keepIntermediates ? StringRef(llPath) : ""))
    return e;

  // 7. Link once, then give every rank its executable (hard links of the
  // one program).
  stage("link: rank executables");
  auto rankBinary = [](int64_t r) { return llvm::formatv("rank-{0:d5}", r).str(); };
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

  // 8. Manifest and launcher.
  stage("manifest and launcher");
  mf.plan = {{"tp", config.tp}, {"cp", config.cp}, {"dp", config.dp},
             {"pp", config.pp}, {"vpp", plan.vpp}, {"ep", config.ep},
             {"etp", config.etp}};
  mf.sequenceParallel = plan.sequenceParallel;
  mf.order = config.order;
  for (const rankgen::GroupKind &kind : layout->kinds())
    mf.groups[kind.key] = groupsOf(kind.groups);
  // The communicators the entries take (tfm-comms-to-args names them by the
  // mesh axes, e.g. "cp-dp") must be in the list the driver reads.
  for (const std::string &kind : commKinds)
    if (!mf.groups.count(kind)) {
      auto list = layout->groupsFor(kind);
      if (!list)
        return fail("group kind '" + kind + "': " + list.error());
      mf.groups[kind] = groupsOf(*list);
    }

  // The loss is printed by data-parallel rank 0 of the last stage, tp and cp
  // rank 0: the rank whose dense coordinates are all 0 but pp.
  for (int64_t r = 0; r < world; ++r) {
    auto info = layout->rankInfo(r);
    const rankgen::DimArray &c = info->dense;
    manifest::RankInfo &rank = mf.ranks.emplace_back();
    rank.rank = int32_t(r);
    rank.binary = rankBinary(r);
    rank.logsLoss = info->lastStage && c[size_t(rankgen::Dim::TP)] == 0 &&
                    c[size_t(rankgen::Dim::CP)] == 0 &&
                    c[size_t(rankgen::Dim::DP)] == 0;
    // Context parallelism: the pieces of every sample's sequence this
    // rank's token buffers hold (Megatron's get_batch_on_this_cp_rank; the
    // batch inputs' distribution in the IR says the same).
    if (config.cp > 1) {
      auto pieces = rankgen::contextParallelTokenRanges(
          paddedSeqLength, config.cp, c[size_t(rankgen::Dim::CP)]);
      if (!pieces)
        return fail(pieces.error());
      for (const rankgen::TokenRange &t : *pieces)
        rank.sequenceRanges.push_back({t.begin, t.end});
    }
  }

  // What each pp rank holds (all of it without pipelining).
  std::vector<int64_t> stageParamBytes(size_t(config.pp), 0);
  for (const ParamInfo &p : params) {
    manifest::ParamSpec &spec = mf.params.emplace_back();
    spec.name = p.name;
    spec.shape.assign(p.shape.begin(), p.shape.end());
    spec.dtype = dtypeOf(p.elementType);
    spec.init = p.init == tfm::InitKind::normal  ? manifest::InitKind::Normal
                : p.init == tfm::InitKind::zeros ? manifest::InitKind::Zeros
                                                 : manifest::InitKind::Ones;
    if (p.init == tfm::InitKind::normal)
      spec.std = p.std;
    spec.hf = hfPlacement(family, p.name, p.shape, hidden, unpaddedVocab);
    // Every rank holds it: whole, or split on one dim over some mesh axes,
    // the rank's position in their group giving its slice. The compact
    // "placement" form: a shard list would name every rank for every
    // parameter (240 MB for gpt3-175b on 1024 ranks).
    const Placement *placement = &placements[p.name];
    SmallVector<int64_t> local(p.shape);
    manifest::Placement &where = spec.placement.emplace();
    where.group = placement->group;
    if (config.pp > 1) {
      std::set<int64_t> stages = paramStages.lookup(p.name);
      where.ppRanks.emplace(stages.begin(), stages.end());
    }
    if (placement->splitDim) {
      where.splitDim = *placement->splitDim;
      local[*placement->splitDim] /= placement->parts;
    }
    int64_t elements = 1;
    for (int64_t d : local)
      elements *= d;
    int64_t bytes = elements * int64_t(p.elementType.getIntOrFloatBitWidth() / 8);
    for (int64_t r = 0; r < config.pp; ++r)
      if (config.pp == 1 || paramStages.lookup(p.name).count(r))
        stageParamBytes[size_t(r)] += bytes;
  }

  mf.worldSize = int32_t(world);
  mf.backend = o.backend;
  mf.microBatchSize = tokensType.getDimSize(0);
  mf.seqLength = seqLength;
  mf.paddedSeqLength = paddedSeqLength;
  mf.numMicrobatches = *numMicrobatches;
  mf.dtype = params.empty() ? LOOMRT_F32 : dtypeOf(params.front().elementType);
  // The tokenizer's vocabulary (token ids the data may hold), not the
  // padded one the tables have.
  mf.vocabSize = unpaddedVocab ? unpaddedVocab : vocab;
  mf.eodTokenId = eodMask;
  mf.gradientGroup = gradientGroup;
  if (model) {
    mf.model.emplace();
    for (NamedAttribute a : model) {
      std::string key = a.getName().getValue().str();
      if (auto i = dyn_cast<IntegerAttr>(a.getValue()))
        (*mf.model)[key] = i.getInt();
      else if (auto b = dyn_cast<BoolAttr>(a.getValue()))
        (*mf.model)[key] = b.getValue();
      else if (auto s = dyn_cast<StringAttr>(a.getValue())) {
        if (key == "family")
          mf.family = s.getValue().str();
        else
          (*mf.model)[key] = s.getValue().str();
      }
    }
  }

  std::string text = manifest::serialize(mf);
  SmallString<256> manifestPath(o.outputDir), launchPath(o.outputDir);
  llvm::sys::path::append(manifestPath, "manifest.json");
  llvm::sys::path::append(launchPath, "launch");
  if (Error e = writeFileAtomically(manifestPath, text))
    return e;
  if (Error e = writeFileAtomically(launchPath, kLaunchScript,
                                    /*executable=*/true))
    return e;

  if (report) {
    *report << "plan: tp " << config.tp << ", cp " << config.cp << ", dp "
            << config.dp << ", pp " << config.pp << " (world size " << world
            << ")\n";
    int64_t microBatchSize = tokensType.getDimSize(0);
    *report << llvm::formatv("batch: micro-batch size {0} x {1} micro-batch"
                             "{2} x dp {3} = global batch {4}\n",
                             microBatchSize, *numMicrobatches,
                             *numMicrobatches == 1 ? "" : "es", config.dp,
                             microBatchSize * *numMicrobatches * config.dp);
    if (paddedSeqLength != seqLength) {
      bool cpSplit = config.cp > 1, sp = plan.sequenceParallel;
      *report << llvm::formatv(
          "sequence: {0} tokens padded to {1} (a multiple of {2}: {3}); {4} "
          "masked tokens a sample\n",
          seqLength, paddedSeqLength, plan.sequenceMultiple(),
          cpSplit ? (sp ? "the 2 x cp chunks, each over tp with SP"
                        : "the 2 x cp chunks")
                  : "the tp pieces of sequence parallelism",
          paddedSeqLength - seqLength);
    }
    if (pipelineSchedule) {
      // Per pp rank: the micro-batches whose activations wait for their
      // backward at the worst moment (pp - r in 1F1B), and the idle share
      // of the schedule with a backward costing two forwards.
      auto timeline = rankgen::computeTimeline(*pipelineSchedule, 1, 2);
      *report << llvm::formatv(
          "pipeline: {0}, pp {1} x vpp {2}, {3} micro-batches, {4} p2p; "
          "bubble {5:P1} of the step (backward = 2 x forward)\n",
          rankgen::scheduleKindName(pipelineSchedule->kind()), config.pp,
          plan.vpp, *numMicrobatches, rankgen::p2pModeName(plan.p2pMode),
          timeline ? timeline->bubbleFraction : 0.0);
      for (const rankgen::RankSchedule &rs : pipelineSchedule->ranks()) {
        int64_t live = 0, most = 0;
        for (const rankgen::ScheduleStep &st : rs.steps) {
          live += st.forward ? 1 : -1;
          most = std::max(most, live);
        }
        *report << llvm::formatv(
            "  pp rank {0}: parameters {1} bytes, at most {2} micro-batch "
            "chunk(s) of activations in flight ({3} warmup forwards)\n",
            rs.ppRank, stageParamBytes[size_t(rs.ppRank)], most, rs.warmup);
      }
    }
    for (int64_t r = 0; r < world; ++r) {
      int64_t ppRank = layout->rankInfo(r)->dense[size_t(rankgen::Dim::PP)];
      *report << llvm::formatv("rank {0}: parameters {1} bytes", r,
                               stageParamBytes[size_t(ppRank)]);
      // A pipelined rank runs its pp rank's functions only, each a whole
      // step.
      std::string suffix = "_pp" + std::to_string(ppRank);
      auto runs = [&](StringRef name) {
        return !pipelineSchedule || name.ends_with(suffix);
      };
      StringRef per = pipelineSchedule ? "step" : "micro-batch";
      for (auto &[name, bytes] : activationBytes)
        if (runs(name))
          *report << llvm::formatv(", @{0} peak buffers {1} bytes", name,
                                   bytes);
      *report << "\n";
      for (auto &[name, v] : volumes) {
        if (!runs(name))
          continue;
        *report << llvm::formatv("  @{0} per {1}: {2}\n", name, per,
                                 v.total().str());
        if (v.hasBackward)
          *report << "    forward: " << v.forward.str() << "\n"
                  << "    backward: " << v.backward.str() << "\n";
      }
      for (auto &[name, bytes] : savedBytes)
        if (runs(name))
          *report << llvm::formatv(
            "  @{0} keeps {1} bytes of activations {2} for "
            "backward ({3})\n",
            name, bytes,
            pipelineSchedule ? "over all its micro-batches"
                             : "per micro-batch",
            recomputeDescription(o));
      if (repeatedKv)
        *report << llvm::formatv(
            "  kv heads repeated to one per tp rank in {0} attention op(s): "
            "k and v all-gathered before, their gradients after "
            "(docs/ARCHITECTURE.md)\n",
            repeatedKv);
    }
  }
  return Error::success();
}
