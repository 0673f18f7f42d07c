//===- loom-ranks.cpp - Print or draw Megatron-style process groups -------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// loom-ranks shows the process groups a parallel plan creates, exactly as
// Megatron-Core's initialize_model_parallel would:
//
//   loom-ranks --world-size 16 --tp 4 --pp 2            # every group kind
//   loom-ranks --world-size 16 --tp 4 --pp 2 --rank 5   # one rank
//   loom-ranks --world-size 16 --etp 1 --ep 4 --pp 2 --json
//   loom-ranks --world-size 16 --tp 4 --pp 2 --svg groups.svg
//   loom-ranks --world-size 8 --cp 4 --seq-length 16   # tokens per cp rank
//   loom-ranks --world-size 4 --pp 4 --vpp 2 --num-layers 16 \
//     --num-microbatches 8 --schedule [--json | --svg timeline.svg]
//                                 # each stage's layers, each rank's steps
//
//===----------------------------------------------------------------------===//

#include "tools/loom-ranks/RanksSvg.h"

#include "compiler/Support/PlanFlags.h"
#include "compiler/Support/ShortHelp.h"
#include "rankgen/ContextParallelLayout.h"
#include "rankgen/ParallelLayout.h"
#include "rankgen/PipelineLayout.h"
#include "rankgen/PipelineP2P.h"
#include "rankgen/PipelineSchedule.h"
#include "rankgen/PipelineTimeline.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <deque>
#include <optional>

using namespace llvm;
using namespace loom::rankgen;

//===----------------------------------------------------------------------===//
// Options. Short names follow Loom's other tools, the aliases Megatron-LM's.
//===----------------------------------------------------------------------===//

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-ranks") << message << "\n";
  return 1;
}

using loom::IntFlag;
using IntOpt = cl::opt<IntFlag>;

static cl::OptionCategory category("loom-ranks options");

// The plan's flags, declared once for every tool that takes a plan (dp is
// derived from --world-size unless given).
static loom::PlanFlags planFlags(category, "loom-ranks", /*defaultDp=*/0);

static IntOpt optWorldSize("world-size",
                           cl::desc("Number of ranks (default: tp*cp*pp"
                                    "*dp with --dp, else required)"),
                           cl::init(IntFlag{0}), cl::cat(category));
static cl::alias worldAlias("world", cl::desc("Alias for --world-size"),
                            cl::aliasopt(optWorldSize), cl::NotHidden,
                            cl::cat(category));









static IntOpt optInstances(
    "num-distributed-optimizer-instances",
    cl::desc("Distributed optimizer instances (partial data-parallel groups)"),
    cl::init(IntFlag{1}), cl::cat(category));

static IntOpt optSeqLength(
    "seq-length",
    cl::desc("Sequence length: also list the tokens each cp rank holds, as "
             "Megatron-LM splits them (2*cp chunks; cp rank r keeps chunks r "
             "and 2*cp-1-r; the length must be divisible by 2*cp when cp > 1)"),
    cl::init(IntFlag{0}), cl::cat(category));

//===----------------------------------------------------------------------===//
// Pipeline options: the layer split and the schedule.
//===----------------------------------------------------------------------===//

static IntOpt optLayersPerVirtualStage(
    "num-layers-per-virtual-pipeline-stage",
    cl::desc("Layers per virtual stage (sets vpp to the layers per pp rank "
             "divided by it)"),
    cl::init(IntFlag{0}), cl::cat(category));
static IntOpt optNumLayers(
    "num-layers",
    cl::desc("Transformer layers: also list the layers of every pipeline "
             "stage, as Megatron-Core assigns them"),
    cl::init(IntFlag{0}), cl::cat(category));
static cl::opt<bool> optSchedule(
    "schedule",
    cl::desc("Print each pp rank's forward and backward steps under "
             "Megatron-Core's schedule (no pipelining, 1F1B or interleaved "
             "1F1B), checked for matched, deadlock-free p2p first"),
    cl::cat(category));
static cl::opt<bool> optForwardOnly(
    "forward-only",
    cl::desc("The forward-only (evaluation) schedule"), cl::cat(category));

static IntOpt optRank("rank",
                      cl::desc("Print the coordinates and groups of "
                               "this rank"),
                      cl::init(IntFlag{-1}), cl::value_desc("n"),
                      cl::cat(category));
static cl::list<std::string> optKinds(
    "kinds",
    cl::desc("Only these group kinds, comma-separated; any dense token "
             "combination (tp-cp-dp-pp) or expert:<tokens> is allowed"),
    cl::CommaSeparated, cl::value_desc("kind,..."), cl::cat(category));
static cl::opt<bool> optJson("json", cl::desc("Print one JSON object"),
                             cl::cat(category));
static cl::opt<std::string> optSvgFile(
    "svg",
    cl::desc("Draw the groups (with --schedule: the schedule's timeline) "
             "into this SVG file"),
    cl::value_desc("file"), cl::cat(category));
static IntOpt optSvgColumns("svg-columns",
                            cl::desc("Ranks per grid row in the SVG"),
                            cl::init(IntFlag{8}), cl::value_desc("n"),
                            cl::cat(category));

/// The SVG has one cell per rank and panel; beyond this it is unreadable.
static constexpr int64_t kMaxSvgRanks = 1024;
/// The schedule timeline has one box per step.
static constexpr int64_t kMaxSvgSteps = 16384;

//===----------------------------------------------------------------------===//
// What to show
//===----------------------------------------------------------------------===//

namespace {
/// A group kind to show: one of the layout's, or a token combination the
/// user asked for with --kinds.
struct Shown {
  std::string key;
  std::string title;
  World world;
  std::string tokens;
  const GroupList *groups;
  const GroupKind *kind; // null for combinations not in the layout
};
} // namespace

static bool expertRequested() {
  return planFlags.ep.getNumOccurrences() > 0 || planFlags.etp.getNumOccurrences() > 0;
}

/// Whether any expert kind is shown (then the expert sizes are printed too).
static bool showsExpert(const std::vector<Shown> &shown) {
  for (const Shown &s : shown)
    if (s.world == World::Expert)
      return true;
  return false;
}

/// The kinds to print: all of the layout's (expert ones only when --ep or
/// --etp was given), or exactly those named by --kinds.
static Result<std::vector<Shown>> selectKinds(const ParallelLayout &layout,
                                              std::deque<GroupList> &extra) {
  std::vector<Shown> shown;
  if (optKinds.empty()) {
    for (const GroupKind &kind : layout.kinds())
      if (kind.world != World::Expert || expertRequested())
        shown.push_back({kind.key, kind.title, kind.world, kind.tokens,
                         &kind.groups, &kind});
    return shown;
  }
  for (const std::string &key : optKinds) {
    if (const GroupKind *kind = layout.find(key)) {
      shown.push_back({kind->key, kind->title, kind->world, kind->tokens,
                       &kind->groups, kind});
      continue;
    }
    StringRef tokens(key);
    bool isExpert = tokens.consume_front("expert:");
    Result<GroupList> groups = isExpert ? layout.expertGroupsFor(tokens.str())
                                        : layout.groupsFor(tokens.str());
    if (!groups)
      return fail(groups.error());
    extra.push_back(groups.take());
    shown.push_back(
        {key, isExpert ? "expert token combination" : "token combination",
         isExpert ? World::Expert : World::Dense, tokens.str(), &extra.back(),
         nullptr});
  }
  return shown;
}

//===----------------------------------------------------------------------===//
// The pipeline: layer split and schedule
//===----------------------------------------------------------------------===//

namespace {
/// What the pipeline flags asked for, built and checked before printing.
struct Pipeline {
  std::optional<PipelineLayout> layers;
  std::optional<PipelineSchedule> schedule;
  std::optional<PipelineTimeline> timeline;
  P2PMode mode = P2PMode::Batched;
};
} // namespace

/// The first of `options` given on the command line, or null.
static const cl::Option *
firstGiven(std::initializer_list<const cl::Option *> options) {
  for (const cl::Option *o : options)
    if (o->getNumOccurrences())
      return o;
  return nullptr;
}

/// Builds the layer split (with --num-layers) and the schedule (with
/// --schedule) of a pipeline of `pp` ranks. The schedule must pass the
/// static p2p check in the chosen mode: a plan whose sends could meet the
/// wrong receive, or block forever, is an error, not a table.
static Result<Pipeline> buildPipeline(int64_t pp) {
  Pipeline pipeline;
  if (planFlags.vpp.getNumOccurrences() && planFlags.vpp.value < 1)
    return fail("vpp must be at least 1, got " + std::to_string(planFlags.vpp.value));
  // 0: not given (a layout string or layers per virtual stage may set it).
  int64_t vpp = planFlags.vpp.getNumOccurrences() ? planFlags.vpp.value : 0;

  const cl::Option *layerFlag =
      firstGiven({&planFlags.firstStageLayers, &planFlags.lastStageLayers,
                  &planFlags.accountForEmbedding, &planFlags.accountForLoss, &planFlags.pipelineLayout,
                  &optLayersPerVirtualStage});
  if (layerFlag && !optNumLayers.getNumOccurrences())
    return fail("--" + layerFlag->ArgStr.str() + " needs --num-layers");
  if (optNumLayers.getNumOccurrences()) {
    PipelineLayoutOptions o;
    o.pp = pp;
    o.vpp = vpp;
    o.numLayers = optNumLayers.value;
    if (planFlags.firstStageLayers.getNumOccurrences())
      o.firstStageLayers = planFlags.firstStageLayers.value;
    if (planFlags.lastStageLayers.getNumOccurrences())
      o.lastStageLayers = planFlags.lastStageLayers.value;
    o.accountForEmbedding = planFlags.accountForEmbedding;
    o.accountForLoss = planFlags.accountForLoss;
    if (optLayersPerVirtualStage.getNumOccurrences())
      o.layersPerVirtualStage = optLayersPerVirtualStage.value;
    o.layout = planFlags.pipelineLayout;
    Result<PipelineLayout> layers = PipelineLayout::create(o);
    if (!layers)
      return fail(layers.error());
    vpp = layers->vpp();
    pipeline.layers = layers.take();
  } else if (vpp > 1 && pp == 1) {
    return fail("vpp " + std::to_string(vpp) +
                " needs pipeline parallelism (pp > 1)");
  }

  const cl::Option *scheduleFlag = firstGiven(
      {&planFlags.numMicrobatches, &planFlags.microbatchGroupSize, &optForwardOnly, &planFlags.p2pMode});
  if (scheduleFlag && !optSchedule)
    return fail("--" + scheduleFlag->ArgStr.str() + " needs --schedule");
  if (!optSchedule)
    return pipeline;
  if (!planFlags.numMicrobatches.getNumOccurrences())
    return fail("--schedule needs --num-microbatches");
  Result<P2PMode> mode = parseP2PMode(planFlags.p2pMode);
  if (!mode)
    return fail("--p2p-mode: " + mode.error());
  pipeline.mode = *mode;
  if (planFlags.microbatchGroupSize.getNumOccurrences() && planFlags.microbatchGroupSize.value < 1)
    return fail("--microbatch-group-size-per-vp-stage must be at least 1, "
                "got " +
                std::to_string(planFlags.microbatchGroupSize.value));
  ScheduleOptions o;
  o.pp = pp;
  o.vpp = std::max<int64_t>(vpp, 1);
  o.numMicrobatches = planFlags.numMicrobatches.value;
  o.microbatchGroupSize = planFlags.microbatchGroupSize.value;
  o.forwardOnly = optForwardOnly;
  Result<PipelineSchedule> schedule = PipelineSchedule::create(o);
  if (!schedule)
    return fail(schedule.error());
  Result<bool> checked = checkPipelineP2P(*schedule, pipeline.mode);
  if (!checked) {
    std::string message = checked.error();
    if (pipeline.mode == P2PMode::Batched &&
        checkPipelineP2P(*schedule, P2PMode::Unbatched).ok())
      message += "; it passes with --p2p-mode unbatched";
    return fail(message);
  }
  Result<PipelineTimeline> timeline = computeTimeline(*schedule);
  if (!timeline)
    return fail(timeline.error());
  pipeline.schedule = schedule.take();
  pipeline.timeline = timeline.take();
  return pipeline;
}

/// Contiguous layer ids as "4-7", "4", or "none".
static std::string layerRange(const std::vector<int64_t> &ids) {
  if (ids.empty())
    return "none";
  std::string out = std::to_string(ids.front());
  if (ids.size() > 1)
    out += "-" + std::to_string(ids.back());
  return out;
}

/// "interleaved 1F1B, pp 4 x vpp 2, 8 micro-batches in groups of 4".
static std::string scheduleTitle(const PipelineSchedule &s) {
  const ScheduleOptions &o = s.options();
  std::string out = scheduleKindName(s.kind());
  if (o.forwardOnly)
    out += " forward-only";
  out += ", pp " + std::to_string(o.pp);
  if (o.vpp > 1)
    out += " x vpp " + std::to_string(o.vpp);
  out += ", " + std::to_string(o.numMicrobatches) +
         (o.numMicrobatches == 1 ? " micro-batch" : " micro-batches");
  if (s.kind() == ScheduleKind::Interleaved)
    out += " in groups of " + std::to_string(s.microbatchGroupSize());
  return out;
}

static std::string stepsString(const RankSchedule &rank) {
  std::string out;
  for (const ScheduleStep &step : rank.steps)
    out += (out.empty() ? "" : " ") + step.str();
  return out;
}

//===----------------------------------------------------------------------===//
// Text output
//===----------------------------------------------------------------------===//

static std::string groupString(RankSpan ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

static void printSizes(raw_ostream &os, const ParallelLayout &layout,
                       const std::vector<Shown> &shown) {
  const ParallelConfig &c = layout.config();
  os << "world size " << c.worldSize << " = tp " << c.tp << " x cp " << c.cp
     << " x dp " << c.dp << " x pp " << c.pp << ", order " << c.order << "\n";
  if (showsExpert(shown))
    os << "expert world: etp " << c.etp << " x ep " << c.ep << " x edp "
       << layout.expertDp() << " x pp " << c.pp << "\n";
  if (c.numDistributedOptimizerInstances > 1)
    os << "distributed optimizer instances: "
       << c.numDistributedOptimizerInstances << "\n";
  if (!c.hierarchicalCpSizes.empty()) {
    os << "hierarchical cp sizes:";
    for (int64_t s : c.hierarchicalCpSizes)
      os << " " << s;
    os << "\n";
  }
}

/// Token ranges as "0-3,12-15", touching ranges merged ("4-11", not
/// "4-7,8-11") and single tokens without a dash.
static std::string rangesString(const std::vector<TokenRange> &ranges) {
  std::vector<TokenRange> merged;
  for (const TokenRange &r : ranges)
    if (!merged.empty() && merged.back().end == r.begin)
      merged.back().end = r.end;
    else
      merged.push_back(r);
  std::string out;
  for (const TokenRange &r : merged) {
    out += (out.empty() ? "" : ",") + std::to_string(r.begin);
    if (r.size() > 1)
      out += "-" + std::to_string(r.end - 1);
  }
  return out;
}

/// The --seq-length section: how the sequence is cut, then each cp rank's
/// tokens. The split has been validated in main().
static void printCpLayout(raw_ostream &os, int64_t seqLength, int64_t cp) {
  os << "\ncp token layout (seq length " << seqLength << ", cp " << cp << "): ";
  if (cp == 1)
    os << "every token on the one cp rank\n";
  else
    os << 2 * cp << " chunks of " << seqLength / (2 * cp)
       << (seqLength == 2 * cp ? " token" : " tokens")
       << ", cp rank r holds chunks r and " << 2 * cp - 1 << "-r\n";
  for (int64_t r = 0; r < cp; ++r)
    os << "  cp rank " << r << ": "
       << rangesString(*contextParallelTokenRanges(seqLength, cp, r)) << "\n";
}

/// The --num-layers section: every stage's layers, by pp rank.
static void printPipelineLayers(raw_ostream &os, const PipelineLayout &layers) {
  os << "\npipeline layers: " << layers.numLayers() << " over pp "
     << layers.pp();
  if (layers.vpp() > 1)
    os << " x vpp " << layers.vpp();
  os << "\n";
  for (const PipelineStage &stage : layers.stages()) {
    os << "  pp rank " << stage.ppRank;
    if (layers.vpp() > 1)
      os << ", vp " << stage.vpStage;
    os << ": " << layerRange(stage.layerIds);
    if (stage.embedding)
      os << ", embedding";
    if (stage.loss)
      os << ", loss";
    os << "\n";
  }
}

/// The --schedule section: one line of steps per pp rank.
static void printSchedule(raw_ostream &os, const Pipeline &pipeline) {
  const PipelineSchedule &s = *pipeline.schedule;
  os << "\npipeline schedule: " << scheduleTitle(s) << "\n";
  if (s.kind() != ScheduleKind::NoPipelining)
    os << "  p2p " << p2pModeName(pipeline.mode)
       << ": every send meets its receive, no rank blocks\n";
  os << "  bubble: "
     << format("%.1f", 100.0 * pipeline.timeline->bubbleFraction)
     << "% (a backward taking twice a forward)\n";
  for (const RankSchedule &rank : s.ranks()) {
    os << "  pp rank " << rank.ppRank;
    if (s.kind() != ScheduleKind::NoPipelining)
      os << " (warmup " << rank.warmup << ", steady " << rank.steady
         << ", cooldown " << rank.cooldown << ")";
    os << ": " << stepsString(rank) << "\n";
  }
}

/// Every kind, each as a header line and its groups wrapped at 100 columns.
static void printTable(raw_ostream &os, const ParallelLayout &layout,
                       const std::vector<Shown> &shown,
                       const Pipeline &pipeline) {
  printSizes(os, layout, shown);
  for (const Shown &s : shown) {
    size_t n = s.groups->numGroups();
    os << "\n"
       << s.key << " (" << s.title << "): " << n
       << (n == 1 ? " group of " : " groups of ") << s.groups->groupSize()
       << "\n";
    size_t column = 0;
    for (size_t g = 0; g < n; ++g) {
      std::string text = groupString((*s.groups)[g]);
      if (column > 0 && column + 2 + text.size() > 100) {
        os << "\n";
        column = 0;
      }
      os << "  " << text;
      column += 2 + text.size();
    }
    os << "\n";
  }
  if (optSeqLength.getNumOccurrences())
    printCpLayout(os, optSeqLength.value, layout.config().cp);
  if (pipeline.layers)
    printPipelineLayers(os, *pipeline.layers);
  if (pipeline.schedule)
    printSchedule(os, pipeline);
}

/// Finds `rank` in a list of groups: (group, position) or (-1, -1).
static std::pair<int64_t, int64_t> findRank(const GroupList &groups,
                                            int64_t r) {
  const std::vector<int64_t> &flat = groups.flat();
  for (size_t i = 0; i < flat.size(); ++i)
    if (flat[i] == r)
      return {int64_t(i) / groups.groupSize(), int64_t(i) % groups.groupSize()};
  return {-1, -1};
}

static Membership membershipOf(const Shown &s, const RankInfo &info) {
  if (s.kind)
    for (const Membership &m : info.groups)
      if (m.kind == s.kind)
        return m;
  Membership m;
  auto [group, position] = findRank(*s.groups, info.rank);
  m.group = group;
  m.position = position;
  if (group >= 0)
    m.ranks = (*s.groups)[group];
  return m;
}

static void printRank(raw_ostream &os, const ParallelLayout &layout,
                      const std::vector<Shown> &shown, const RankInfo &info,
                      const Pipeline &pipeline) {
  const ParallelConfig &c = layout.config();
  os << "rank " << info.rank << " of " << c.worldSize << " (order " << c.order
     << ")\n";
  os << "  coordinates: tp " << info.dense[int(Dim::TP)] << "/" << c.tp
     << ", cp " << info.dense[int(Dim::CP)] << "/" << c.cp << ", dp "
     << info.dense[int(Dim::DP)] << "/" << c.dp << ", pp "
     << info.dense[int(Dim::PP)] << "/" << c.pp << "\n";
  if (showsExpert(shown))
    os << "  expert coordinates: etp " << info.expert[int(Dim::TP)] << "/"
       << c.etp << ", ep " << info.expert[int(Dim::EP)] << "/" << c.ep
       << ", edp " << info.expert[int(Dim::DP)] << "/" << layout.expertDp()
       << ", pp " << info.expert[int(Dim::PP)] << "/" << c.pp << "\n";
  os << "  pipeline: stage " << info.pipelineStage << " of " << info.numStages;
  if (info.firstStage || info.lastStage)
    os << " ("
       << (info.firstStage && info.lastStage ? "first and last"
           : info.firstStage                 ? "first"
                                             : "last")
       << ")";
  os << ", previous rank " << info.prevRank << ", next rank " << info.nextRank
     << "\n";
  if (optSeqLength.getNumOccurrences()) {
    int64_t cpRank = info.dense[int(Dim::CP)];
    os << "  tokens: "
       << rangesString(
              *contextParallelTokenRanges(optSeqLength.value, c.cp, cpRank))
       << " (cp rank " << cpRank << ", seq length " << optSeqLength.value
       << ")\n";
  }
  int64_t ppRank = info.dense[int(Dim::PP)];
  if (pipeline.layers) {
    os << "  layers:";
    for (int64_t v = 0; v < pipeline.layers->vpp(); ++v) {
      const PipelineStage &stage = pipeline.layers->stage(ppRank, v);
      os << (v ? ", " : " ");
      if (pipeline.layers->vpp() > 1)
        os << "vp " << v << ": ";
      os << layerRange(stage.layerIds);
      if (stage.embedding)
        os << " (embedding)";
      if (stage.loss)
        os << " (loss)";
    }
    os << "\n";
  }
  if (pipeline.schedule)
    os << "  schedule: "
       << stepsString(pipeline.schedule->ranks()[size_t(ppRank)]) << "\n";
  os << "  groups:\n";
  for (const Shown &s : shown) {
    Membership m = membershipOf(s, info);
    os << "    " << left_justify(s.key, 20);
    if (m.group < 0) {
      os << "none\n";
      continue;
    }
    os << groupString(m.ranks) << "  (group " << m.group << ", rank "
       << m.position << " in it)\n";
  }
}

//===----------------------------------------------------------------------===//
// JSON output
//===----------------------------------------------------------------------===//

static void writeGroups(json::OStream &j, const GroupList &groups) {
  j.array([&] {
    for (size_t g = 0; g < groups.numGroups(); ++g)
      j.array([&] {
        for (int64_t r : groups[g])
          j.value(r);
      });
  });
}

static void writeTokenIndices(json::OStream &j, int64_t seqLength, int64_t cp,
                              int64_t cpRank) {
  // Held in a local: a range-for over *Result<...> of a temporary would read
  // the vector after the Result is destroyed.
  Result<std::vector<int64_t>> tokens =
      contextParallelTokenIndices(seqLength, cp, cpRank);
  j.array([&] {
    for (int64_t t : *tokens)
      j.value(t);
  });
}

static void writeIds(json::OStream &j, const std::vector<int64_t> &ids) {
  j.array([&] {
    for (int64_t id : ids)
      j.value(id);
  });
}

static void writeSteps(json::OStream &j, const RankSchedule &rank) {
  j.array([&] {
    for (const ScheduleStep &step : rank.steps)
      j.value(step.str());
  });
}

/// "layers", "schedule" and "schedule_info", as asked for.
static void writePipelineJson(json::OStream &j, const Pipeline &pipeline) {
  if (pipeline.layers)
    j.attributeArray("layers", [&] {
      for (const PipelineStage &stage : pipeline.layers->stages())
        j.object([&] {
          j.attribute("pp_rank", stage.ppRank);
          j.attribute("vp_stage", stage.vpStage);
          j.attributeBegin("layer_ids");
          writeIds(j, stage.layerIds);
          j.attributeEnd();
        });
    });
  if (!pipeline.schedule)
    return;
  const PipelineSchedule &s = *pipeline.schedule;
  j.attributeObject("schedule", [&] {
    for (const RankSchedule &rank : s.ranks()) {
      j.attributeBegin(std::to_string(rank.ppRank));
      writeSteps(j, rank);
      j.attributeEnd();
    }
  });
  j.attributeObject("schedule_info", [&] {
    static const char *kinds[] = {"no-pipelining", "1f1b", "interleaved-1f1b"};
    j.attribute("kind", kinds[int(s.kind())]);
    j.attribute("vpp", s.options().vpp);
    j.attribute("num_microbatches", s.options().numMicrobatches);
    if (s.kind() == ScheduleKind::Interleaved)
      j.attribute("microbatch_group_size", s.microbatchGroupSize());
    j.attribute("forward_only", s.options().forwardOnly);
    j.attribute("p2p_mode", p2pModeName(pipeline.mode));
    j.attributeArray("warmup", [&] {
      for (const RankSchedule &rank : s.ranks())
        j.value(rank.warmup);
    });
  });
}

static void printJson(raw_ostream &os, const ParallelLayout &layout,
                      const std::vector<Shown> &shown,
                      const Pipeline &pipeline) {
  const ParallelConfig &c = layout.config();
  json::OStream j(os);
  j.object([&] {
    j.attribute("world_size", c.worldSize);
    j.attribute("order", c.order);
    j.attributeObject("sizes", [&] {
      j.attribute("tp", c.tp);
      j.attribute("cp", c.cp);
      j.attribute("dp", c.dp);
      j.attribute("pp", c.pp);
      if (showsExpert(shown)) {
        j.attribute("etp", c.etp);
        j.attribute("ep", c.ep);
        j.attribute("edp", layout.expertDp());
      }
    });
    j.attributeObject("dense", [&] {
      for (const Shown &s : shown)
        if (s.world == World::Dense)
          j.attributeBegin(s.tokens), writeGroups(j, *s.groups),
              j.attributeEnd();
    });
    if (showsExpert(shown))
      j.attributeObject("expert", [&] {
        for (const Shown &s : shown)
          if (s.world == World::Expert)
            j.attributeBegin(s.tokens), writeGroups(j, *s.groups),
                j.attributeEnd();
      });
    for (const Shown &s : shown) {
      if (s.key == "embedding" || s.key == "position-embedding") {
        j.attributeBegin(s.key == "embedding" ? "embedding"
                                              : "position_embedding");
        writeGroups(j, *s.groups);
        j.attributeEnd();
      }
    }
    // Partial distributed optimizer groups, keyed without their "dist-opt:"
    // prefix.
    bool anyDistOpt = false;
    for (const Shown &s : shown)
      anyDistOpt |= StringRef(s.key).starts_with("dist-opt:");
    if (anyDistOpt)
      j.attributeObject("distributed_optimizer", [&] {
        for (const Shown &s : shown)
          if (StringRef(s.key).starts_with("dist-opt:")) {
            j.attributeBegin(StringRef(s.key).drop_front(9));
            writeGroups(j, *s.groups);
            j.attributeEnd();
          }
      });
    if (!c.hierarchicalCpSizes.empty()) {
      j.attributeArray("hierarchical_cp", [&] {
        for (size_t l = 0; l < c.hierarchicalCpSizes.size(); ++l)
          writeGroups(j, layout.hierarchicalCpGroups(l));
      });
    }
    if (optSeqLength.getNumOccurrences()) {
      j.attribute("seq_length", optSeqLength.value);
      j.attributeArray("cp_layout", [&] {
        for (int64_t r = 0; r < c.cp; ++r)
          j.object([&] {
            j.attribute("cp_rank", r);
            j.attributeBegin("token_indices");
            writeTokenIndices(j, optSeqLength.value, c.cp, r);
            j.attributeEnd();
          });
      });
    }
    writePipelineJson(j, pipeline);
  });
  os << "\n";
}

static void printRankJson(raw_ostream &os, const ParallelLayout &layout,
                          const std::vector<Shown> &shown,
                          const RankInfo &info, const Pipeline &pipeline) {
  json::OStream j(os);
  j.object([&] {
    j.attribute("rank", info.rank);
    j.attribute("world_size", layout.worldSize());
    j.attributeObject("coordinates", [&] {
      for (Dim d : {Dim::TP, Dim::CP, Dim::DP, Dim::PP})
        j.attribute(dimName(d), info.dense[int(d)]);
    });
    j.attributeObject("expert_coordinates", [&] {
      j.attribute("etp", info.expert[int(Dim::TP)]);
      j.attribute("ep", info.expert[int(Dim::EP)]);
      j.attribute("edp", info.expert[int(Dim::DP)]);
      j.attribute("pp", info.expert[int(Dim::PP)]);
    });
    j.attributeObject("pipeline", [&] {
      j.attribute("stage", info.pipelineStage);
      j.attribute("num_stages", info.numStages);
      j.attribute("first", info.firstStage);
      j.attribute("last", info.lastStage);
      j.attribute("prev", info.prevRank);
      j.attribute("next", info.nextRank);
    });
    if (optSeqLength.getNumOccurrences()) {
      j.attribute("seq_length", optSeqLength.value);
      j.attributeBegin("token_indices");
      writeTokenIndices(j, optSeqLength.value, layout.config().cp,
                        info.dense[int(Dim::CP)]);
      j.attributeEnd();
    }
    int64_t ppRank = info.dense[int(Dim::PP)];
    if (pipeline.layers)
      j.attributeArray("layers", [&] {
        for (int64_t v = 0; v < pipeline.layers->vpp(); ++v)
          j.object([&] {
            j.attribute("vp_stage", v);
            j.attributeBegin("layer_ids");
            writeIds(j, pipeline.layers->stage(ppRank, v).layerIds);
            j.attributeEnd();
          });
      });
    if (pipeline.schedule) {
      j.attributeBegin("schedule");
      writeSteps(j, pipeline.schedule->ranks()[size_t(ppRank)]);
      j.attributeEnd();
    }
    j.attributeObject("groups", [&] {
      for (const Shown &s : shown) {
        Membership m = membershipOf(s, info);
        j.attributeBegin(s.key);
        if (m.group < 0) {
          j.value(nullptr);
        } else {
          j.array([&] {
            for (int64_t r : m.ranks)
              j.value(r);
          });
        }
        j.attributeEnd();
      }
    });
  });
  os << "\n";
}

//===----------------------------------------------------------------------===//
// main
//===----------------------------------------------------------------------===//

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  // Let cl report bad flags into a string so they come out in the same
  // "loom-ranks: error: ..." form as every other error.
  std::string flagErrors;
  raw_string_ostream flagErrorStream(flagErrors);
  loom::ShortHelpArgs parsed(argc, argv);
  if (!cl::ParseCommandLineOptions(
          parsed.argc(), parsed.argv(),
          "loom-ranks: print or draw the process groups of a parallel plan, "
          "as Megatron-Core builds them, and its pipeline's layer split and "
          "schedule\n",
          &flagErrorStream)) {
    StringRef text = StringRef(flagErrors).trim();
    SmallVector<StringRef> lines;
    text.split(lines, '\n', -1, /*KeepEmpty=*/false);
    for (StringRef line : lines) {
      line.consume_front("loom-ranks: ");
      error(line.trim());
    }
    return 1;
  }

  Result<Plan> plan = planFlags.plan();
  if (!plan)
    return error(plan.error());
  ParallelConfig config = plan->sizes;
  config.worldSize = optWorldSize.value;
  config.numDistributedOptimizerInstances = optInstances.value;
  if (optWorldSize.getNumOccurrences() && optWorldSize.value <= 0)
    return error("world size must be at least 1, got " +
                 Twine(optWorldSize.value));
  if (planFlags.dp.getNumOccurrences() && planFlags.dp.value <= 0)
    return error("dp must be at least 1, got " + Twine(planFlags.dp.value));
  if (planFlags.etp.getNumOccurrences() && planFlags.etp.value <= 0)
    return error("etp must be at least 1, got " + Twine(planFlags.etp.value));
  if (!optWorldSize.getNumOccurrences() && !planFlags.dp.getNumOccurrences())
    return error("--world-size is required (or give --dp)");

  Result<ParallelLayout> layout = ParallelLayout::create(config);
  if (!layout)
    return error(layout.error());
  // Checked once here, so the printers can take the token lists as given.
  if (optSeqLength.getNumOccurrences()) {
    Result<int64_t> split =
        validateContextParallelSplit(optSeqLength.value, layout->config().cp);
    if (!split) {
      int64_t chunks = 2 * layout->config().cp;
      int64_t padded = (optSeqLength.value + chunks - 1) / chunks * chunks;
      return error("--seq-length: " + split.error() +
                   (optSeqLength.value > 0
                        ? " (loom-compile pads it to " + std::to_string(padded) +
                              " with masked tokens at the end; --seq-length " +
                              std::to_string(padded) + " shows that layout)"
                        : std::string()));
    }
  }

  Result<Pipeline> pipeline = buildPipeline(layout->config().pp);
  if (!pipeline)
    return error(pipeline.error());

  std::deque<GroupList> extra;
  Result<std::vector<Shown>> shown = selectKinds(*layout, extra);
  if (!shown)
    return error(shown.error());

  if (!optSvgFile.empty() && pipeline->schedule) {
    const PipelineSchedule &s = *pipeline->schedule;
    int64_t steps = 0;
    for (const RankSchedule &rank : s.ranks())
      steps += int64_t(rank.steps.size());
    if (steps > kMaxSvgSteps)
      return error("--svg draws at most " + Twine(kMaxSvgSteps) +
                   " schedule steps, but the schedule has " + Twine(steps));
    std::error_code ec;
    ToolOutputFile out(optSvgFile, ec, sys::fs::OF_Text);
    if (ec)
      return error("cannot write '" + optSvgFile + "': " + ec.message());
    loom::ranks::writeScheduleSvg(out.os(), "pipeline schedule: " +
                                                scheduleTitle(s),
                                  *pipeline->timeline);
    out.keep();
  } else if (!optSvgFile.empty()) {
    if (layout->worldSize() > kMaxSvgRanks)
      return error("--svg draws at most " + Twine(kMaxSvgRanks) +
                   " ranks, but the world size is " +
                   Twine(layout->worldSize()));
    if (optSvgColumns.value < 1)
      return error("--svg-columns must be at least 1, got " +
                   Twine(optSvgColumns.value));
    std::error_code ec;
    ToolOutputFile out(optSvgFile, ec, sys::fs::OF_Text);
    if (ec)
      return error("cannot write '" + optSvgFile + "': " + ec.message());
    const ParallelConfig &c = layout->config();
    std::string heading = "world size " + std::to_string(c.worldSize) +
                          ": tp " + std::to_string(c.tp) + ", cp " +
                          std::to_string(c.cp) + ", dp " +
                          std::to_string(c.dp) + ", pp " + std::to_string(c.pp);
    if (showsExpert(*shown))
      heading += "; expert: etp " + std::to_string(c.etp) + ", ep " +
                 std::to_string(c.ep) + ", edp " +
                 std::to_string(layout->expertDp());
    heading += " (order " + c.order + ")";
    std::vector<loom::ranks::SvgPanel> panels;
    for (const Shown &s : *shown)
      panels.push_back({s.key, s.title, s.groups});
    loom::ranks::writeSvg(out.os(), heading, c.worldSize, optSvgColumns.value,
                          panels);
    out.keep();
  }

  if (optRank.getNumOccurrences()) {
    Result<RankInfo> info = layout->rankInfo(optRank.value);
    if (!info)
      return error(info.error());
    if (optJson)
      printRankJson(outs(), *layout, *shown, *info, *pipeline);
    else
      printRank(outs(), *layout, *shown, *info, *pipeline);
    return 0;
  }
  if (optJson)
    printJson(outs(), *layout, *shown, *pipeline);
  else if (optSvgFile.empty())
    printTable(outs(), *layout, *shown, *pipeline);
  return 0;
}
