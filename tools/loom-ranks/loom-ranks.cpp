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
//
//===----------------------------------------------------------------------===//

#include "RanksSvg.h"

#include "loom/Support/ShortHelp.h"
#include "loom/RankGen/ContextParallelLayout.h"
#include "loom/RankGen/ParallelLayout.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <deque>

using namespace llvm;
using namespace loom::rankgen;

//===----------------------------------------------------------------------===//
// Options. Short names follow Loom's other tools, the aliases Megatron-LM's.
//===----------------------------------------------------------------------===//

static int error(const Twine &message) {
  WithColor::error(errs(), "loom-ranks") << message << "\n";
  return 1;
}

namespace {
/// The value of an integer flag. A type of its own so that cl::parser<Int>
/// below, not cl's integer parser (which prints its complaint in a format of
/// its own), reads it: a malformed number is reported like every other error.
struct Int {
  int64_t value = 0;
};
} // namespace

namespace llvm {
namespace cl {
template <> class parser<Int> : public basic_parser<Int> {
public:
  parser(Option &option) : basic_parser(option) {}
  bool parse(Option &, StringRef argName, StringRef arg, Int &out) {
    if (!arg.getAsInteger(0, out.value))
      return false;
    error("--" + argName + " expects an integer, got '" + arg + "'");
    return true;
  }
  StringRef getValueName() const override { return "n"; }
  // Used by --print-options; the value is not worth printing there.
  void printOptionDiff(const Option &option, Int, const OptionValue<Int> &,
                       size_t globalWidth) const {
    printOptionNoValue(option, globalWidth);
  }
};
} // namespace cl
} // namespace llvm

using IntOpt = cl::opt<Int>;

static cl::OptionCategory category("loom-ranks options");

static IntOpt optWorldSize("world-size",
                           cl::desc("Number of ranks (default: tp*cp*pp"
                                    "*dp with --dp, else required)"),
                           cl::init(Int{0}), cl::cat(category));
static cl::alias worldAlias("world", cl::desc("Alias for --world-size"),
                            cl::aliasopt(optWorldSize), cl::NotHidden,
                            cl::cat(category));

static IntOpt optTp("tp", cl::desc("Tensor model-parallel size"),
                    cl::init(Int{1}), cl::value_desc("n"), cl::cat(category));
static cl::alias tpAlias("tensor-model-parallel-size",
                         cl::desc("Alias for --tp"), cl::aliasopt(optTp),
                         cl::NotHidden, cl::cat(category));

static IntOpt optCp("cp", cl::desc("Context-parallel size"), cl::init(Int{1}),
                    cl::value_desc("n"), cl::cat(category));
static cl::alias cpAlias("context-parallel-size", cl::desc("Alias for --cp"),
                         cl::aliasopt(optCp), cl::NotHidden, cl::cat(category));

static IntOpt optPp("pp", cl::desc("Pipeline model-parallel size"),
                    cl::init(Int{1}), cl::value_desc("n"), cl::cat(category));
static cl::alias ppAlias("pipeline-model-parallel-size",
                         cl::desc("Alias for --pp"), cl::aliasopt(optPp),
                         cl::NotHidden, cl::cat(category));

static IntOpt optDp("dp",
                    cl::desc("Data-parallel size (default: derived "
                             "from --world-size)"),
                    cl::init(Int{0}), cl::value_desc("n"), cl::cat(category));

static IntOpt optEp("ep", cl::desc("Expert model-parallel size"),
                    cl::init(Int{1}), cl::value_desc("n"), cl::cat(category));
static cl::alias epAlias("expert-model-parallel-size",
                         cl::desc("Alias for --ep"), cl::aliasopt(optEp),
                         cl::NotHidden, cl::cat(category));

static IntOpt optEtp("etp",
                     cl::desc("Expert tensor-parallel size (default: "
                              "--tp)"),
                     cl::init(Int{0}), cl::value_desc("n"), cl::cat(category));
static cl::alias etpAlias("expert-tensor-parallel-size",
                          cl::desc("Alias for --etp"), cl::aliasopt(optEtp),
                          cl::NotHidden, cl::cat(category));

static cl::opt<std::string>
    optOrder("order",
             cl::desc("Rank order, fastest-varying first (tp-cp-ep-dp-pp or "
                      "tp-cp-ep-pp-dp)"),
             cl::init(kDefaultOrder), cl::value_desc("order"),
             cl::cat(category));
static cl::opt<bool> optTpPpDpMapping(
    "use-tp-pp-dp-mapping",
    cl::desc("Megatron-LM's switch for --order tp-cp-ep-pp-dp"),
    cl::cat(category));

static cl::list<Int> optHierarchicalCp(
    "hierarchical-context-parallel-sizes",
    cl::desc("Hierarchical context-parallel sizes, innermost first, e.g. 4,2"),
    cl::CommaSeparated, cl::value_desc("n,n,..."), cl::cat(category));

static IntOpt optInstances(
    "num-distributed-optimizer-instances",
    cl::desc("Distributed optimizer instances (partial data-parallel groups)"),
    cl::init(Int{1}), cl::cat(category));

static IntOpt optSeqLength(
    "seq-length",
    cl::desc("Sequence length: also list the tokens each cp rank holds, as "
             "Megatron-LM splits them (2*cp chunks; cp rank r keeps chunks r "
             "and 2*cp-1-r; the length must be divisible by 2*cp when cp > 1)"),
    cl::init(Int{0}), cl::cat(category));

static IntOpt optRank("rank",
                      cl::desc("Print the coordinates and groups of "
                               "this rank"),
                      cl::init(Int{-1}), cl::value_desc("n"),
                      cl::cat(category));
static cl::list<std::string> optKinds(
    "kinds",
    cl::desc("Only these group kinds, comma-separated; any dense token "
             "combination (tp-cp-dp-pp) or expert:<tokens> is allowed"),
    cl::CommaSeparated, cl::value_desc("kind,..."), cl::cat(category));
static cl::opt<bool> optJson("json", cl::desc("Print one JSON object"),
                             cl::cat(category));
static cl::opt<std::string> optSvgFile("svg",
                                       cl::desc("Draw the groups into this SVG "
                                                "file"),
                                       cl::value_desc("file"),
                                       cl::cat(category));
static IntOpt optSvgColumns("svg-columns",
                            cl::desc("Ranks per grid row in the SVG"),
                            cl::init(Int{8}), cl::value_desc("n"),
                            cl::cat(category));

/// The SVG has one cell per rank and panel; beyond this it is unreadable.
static constexpr int64_t kMaxSvgRanks = 1024;

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
  return optEp.getNumOccurrences() > 0 || optEtp.getNumOccurrences() > 0;
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

/// Every kind, each as a header line and its groups wrapped at 100 columns.
static void printTable(raw_ostream &os, const ParallelLayout &layout,
                       const std::vector<Shown> &shown) {
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
                      const std::vector<Shown> &shown, const RankInfo &info) {
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

static void printJson(raw_ostream &os, const ParallelLayout &layout,
                      const std::vector<Shown> &shown) {
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
  });
  os << "\n";
}

static void printRankJson(raw_ostream &os, const ParallelLayout &layout,
                          const std::vector<Shown> &shown,
                          const RankInfo &info) {
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
          "as Megatron-Core builds them\n",
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

  ParallelConfig config;
  config.worldSize = optWorldSize.value;
  config.tp = optTp.value;
  config.cp = optCp.value;
  config.pp = optPp.value;
  config.dp = optDp.value;
  config.ep = optEp.value;
  config.etp = optEtp.value;
  config.order = optOrder;
  if (optTpPpDpMapping) {
    if (optOrder.getNumOccurrences() &&
        StringRef(optOrder).lower() != kTpPpDpOrder)
      return error("--use-tp-pp-dp-mapping conflicts with --order " + optOrder);
    config.order = kTpPpDpOrder;
  }
  config.numDistributedOptimizerInstances = optInstances.value;
  for (const Int &size : optHierarchicalCp)
    config.hierarchicalCpSizes.push_back(size.value);
  if (optWorldSize.getNumOccurrences() && optWorldSize.value <= 0)
    return error("world size must be at least 1, got " +
                 Twine(optWorldSize.value));
  if (optDp.getNumOccurrences() && optDp.value <= 0)
    return error("dp must be at least 1, got " + Twine(optDp.value));
  if (optEtp.getNumOccurrences() && optEtp.value <= 0)
    return error("etp must be at least 1, got " + Twine(optEtp.value));
  if (!optWorldSize.getNumOccurrences() && !optDp.getNumOccurrences())
    return error("--world-size is required (or give --dp)");

  Result<ParallelLayout> layout = ParallelLayout::create(config);
  if (!layout)
    return error(layout.error());
  // Checked once here, so the printers can take the token lists as given.
  if (optSeqLength.getNumOccurrences()) {
    Result<int64_t> split =
        validateContextParallelSplit(optSeqLength.value, layout->config().cp);
    if (!split)
      return error("--seq-length: " + split.error());
  }

  std::deque<GroupList> extra;
  Result<std::vector<Shown>> shown = selectKinds(*layout, extra);
  if (!shown)
    return error(shown.error());

  if (!optSvgFile.empty()) {
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
      printRankJson(outs(), *layout, *shown, *info);
    else
      printRank(outs(), *layout, *shown, *info);
    return 0;
  }
  if (optJson)
    printJson(outs(), *layout, *shown);
  else if (optSvgFile.empty())
    printTable(outs(), *layout, *shown);
  return 0;
}
