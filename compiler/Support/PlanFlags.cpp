//===- PlanFlags.cpp - The plan's command-line flags, declared once -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "compiler/Support/PlanFlags.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/WithColor.h"

using namespace llvm;
using namespace loom;

static std::string &intFlagTool() {
  static std::string tool = "loom";
  return tool;
}

void loom::setIntFlagTool(StringRef tool) { intFlagTool() = tool.str(); }

bool cl::parser<IntFlag>::parse(Option &, StringRef argName, StringRef arg,
                                IntFlag &out) {
  if (!arg.getAsInteger(0, out.value))
    return false;
  WithColor::error(errs(), intFlagTool())
      << "--" << argName << " expects an integer, got '" << arg << "'\n";
  return true;
}

namespace {
using IntOpt = cl::opt<IntFlag>;
} // namespace

PlanFlags::PlanFlags(cl::OptionCategory &category, StringRef tool,
                     int64_t defaultDp)
    : tp("tp", cl::desc("Tensor model-parallel size"), cl::init(IntFlag{1}),
         cl::cat(category)),
      cp("cp",
         cl::desc("Context-parallel size: each sequence in 2 x cp "
                  "load-balanced chunks (loom-compile pads a length they do "
                  "not divide at the end with masked tokens)"),
         cl::init(IntFlag{1}), cl::cat(category)),
      pp("pp", cl::desc("Pipeline model-parallel size"), cl::init(IntFlag{1}),
         cl::cat(category)),
      dp("dp",
         cl::desc(defaultDp ? "Data-parallel size (default 1)"
                            : "Data-parallel size (default: derived from "
                              "--world-size)"),
         cl::init(IntFlag{defaultDp}), cl::cat(category)),
      vpp("vpp",
          cl::desc("Virtual pipeline stages (model chunks) per pp rank; > 1 "
                   "selects the interleaved schedule"),
          cl::init(IntFlag{1}), cl::cat(category)),
      ep("ep", cl::desc("Expert model-parallel size"), cl::init(IntFlag{1}),
         cl::cat(category)),
      etp("etp", cl::desc("Expert tensor-parallel size (default: --tp)"),
          cl::init(IntFlag{0}), cl::cat(category)),
      sequenceParallel("sp", cl::desc("Sequence parallelism (with --tp)"),
                       cl::cat(category)),
      cpCommType(
          "cp-comm-type",
          cl::desc("Context-parallel attention: p2p (default, ring "
                   "attention), allgather (or all_gather), a2a (Ulysses) or "
                   "a2a+p2p (hierarchical: a2a within groups, then a ring "
                   "across them; needs --hierarchical-context-parallel-"
                   "sizes); one for every layer or one per layer, space- or "
                   "comma-separated"),
          cl::CommaSeparated, cl::value_desc("type"), cl::cat(category)),
      hierarchicalCp(
          "hierarchical-context-parallel-sizes",
          cl::desc("Sizes of hierarchical context parallelism, inner first "
                   "(for a2a+p2p the a2a group size A and the ring size P, "
                   "A x P = cp)"),
          cl::CommaSeparated, cl::value_desc("n,n,..."), cl::cat(category)),
      order("order",
            cl::desc("Rank order, fastest-varying first (tp-cp-ep-dp-pp or "
                     "tp-cp-ep-pp-dp)"),
            cl::init(std::string(rankgen::kDefaultOrder)), cl::value_desc("order"),
            cl::cat(category)),
      tpPpDpMapping("use-tp-pp-dp-mapping",
                    cl::desc("Megatron-LM's switch for --order "
                             "tp-cp-ep-pp-dp"),
                    cl::cat(category)),
      numMicrobatches("num-microbatches",
                      cl::desc("Micro-batches per step (default 1)"),
                      cl::init(IntFlag{1}), cl::cat(category)),
      microbatchGroupSize(
          "microbatch-group-size-per-vp-stage",
          cl::desc("Interleaved schedule: micro-batches run through a model "
                   "chunk before the next (default pp)"),
          cl::init(IntFlag{0}), cl::cat(category)),
      p2pMode("p2p-mode",
              cl::desc("Pipeline p2p: batched (one grouped call per schedule "
                       "step, the default) or unbatched (one call per "
                       "tensor, even ranks sending first)"),
              cl::init("batched"), cl::value_desc("batched|unbatched"),
              cl::cat(category)),
      firstStageLayers(
          "decoder-first-pipeline-num-layers",
          cl::desc("Layers of the first pipeline stage (the rest split "
                   "evenly)"),
          cl::init(IntFlag{-1}), cl::cat(category)),
      lastStageLayers("decoder-last-pipeline-num-layers",
                      cl::desc("Layers of the last pipeline stage (the rest "
                               "split evenly)"),
                      cl::init(IntFlag{-1}), cl::cat(category)),
      accountForEmbedding(
          "account-for-embedding-in-pipeline-split",
          cl::desc("The embedding takes one layer's place on the first "
                   "stage"),
          cl::cat(category)),
      accountForLoss("account-for-loss-in-pipeline-split",
                     cl::desc("The loss takes one layer's place on the last "
                              "stage"),
                     cl::cat(category)),
      pipelineLayout(
          "pipeline-model-parallel-layout",
          cl::desc("Layers of every virtual stage, e.g. 'Et|(tt|)*2tL' (E "
                   "embedding, t layer, L loss, | next stage; stage s runs "
                   "on pp rank s % pp)"),
          cl::value_desc("layout"), cl::cat(category)),
      makeVocabSizeDivisibleBy(
          "make-vocab-size-divisible-by",
          cl::desc("Pad the vocabulary to a multiple of this times tp "
                   "(default 128); the padding rows stay out of the softmax "
                   "and out of Hugging Face checkpoints"),
          cl::init(IntFlag{128}), cl::cat(category)),
      defaultDp(defaultDp) {
  setIntFlagTool(tool);
  // Megatron-LM's long names.
  auto alias = [&](const char *name, const char *desc, cl::Option &of) {
    aliases.push_back(std::make_unique<cl::alias>(
        StringRef(name), cl::desc(desc), cl::aliasopt(of), cl::NotHidden,
        cl::cat(category)));
  };
  alias("tensor-model-parallel-size", "Alias for --tp", tp);
  alias("context-parallel-size", "Alias for --cp", cp);
  alias("pipeline-model-parallel-size", "Alias for --pp", pp);
  alias("virtual-pipeline-model-parallel-size", "Alias for --vpp", vpp);
  alias("num-virtual-stages-per-pipeline-rank", "Alias for --vpp", vpp);
  alias("expert-model-parallel-size", "Alias for --ep", ep);
  alias("expert-tensor-parallel-size", "Alias for --etp", etp);
  alias("sequence-parallel", "Alias for --sp", sequenceParallel);
}

std::vector<ListFlag> PlanFlags::listFlags() {
  auto isCommTypes = [](const std::string &word) {
    for (StringRef t : split(word, ','))
      if (!rankgen::parseCpCommType(t.str()))
        return false;
    return true;
  };
  auto isSizes = [](const std::string &word) {
    for (StringRef n : split(word, ','))
      if (!isDecimal(n.str()))
        return false;
    return true;
  };
  return {{"cp-comm-type", isCommTypes},
          {"hierarchical-context-parallel-sizes", isSizes}};
}

rankgen::Result<rankgen::Plan> PlanFlags::plan() const {
  rankgen::Plan p;
  rankgen::ParallelConfig &s = p.sizes;
  s.tp = tp.value;
  s.cp = cp.value;
  s.pp = pp.value;
  s.dp = dp.getNumOccurrences() ? dp.value : defaultDp;
  s.ep = ep.value;
  s.etp = etp.value;
  s.order = order;
  if (tpPpDpMapping) {
    if (order.getNumOccurrences() &&
        StringRef(order).lower() != rankgen::kTpPpDpOrder)
      return rankgen::fail("--use-tp-pp-dp-mapping conflicts with --order " +
                           order);
    s.order = rankgen::kTpPpDpOrder;
  }
  for (const IntFlag &size : hierarchicalCp)
    s.hierarchicalCpSizes.push_back(size.value);
  p.vpp = vpp.value;
  p.sequenceParallel = sequenceParallel;
  for (const std::string &name : cpCommType) {
    auto type = rankgen::parseCpCommType(name);
    if (!type)
      return rankgen::fail("--cp-comm-type: " + type.error());
    p.cpCommTypes.push_back(*type);
  }
  if (firstStageLayers.getNumOccurrences())
    p.firstStageLayers = firstStageLayers.value;
  if (lastStageLayers.getNumOccurrences())
    p.lastStageLayers = lastStageLayers.value;
  p.accountForEmbedding = accountForEmbedding;
  p.accountForLoss = accountForLoss;
  p.pipelineLayout = pipelineLayout;
  p.numMicrobatches = numMicrobatches.value;
  p.microbatchGroupSize = microbatchGroupSize.value;
  auto mode = rankgen::parseP2PMode(p2pMode);
  if (!mode)
    return rankgen::fail("--p2p-mode: " + mode.error());
  p.p2pMode = *mode;
  p.makeVocabSizeDivisibleBy = makeVocabSizeDivisibleBy.value;
  return p;
}
