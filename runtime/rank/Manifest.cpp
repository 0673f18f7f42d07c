//===- Manifest.cpp - Validate a parsed manifest.json ---------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// manifest::parse (runtime/manifest) checks each value on its own; this file
// checks how they fit together and fills the derived fields. Messages name
// the JSON path of the bad value, e.g.
//   out/manifest.json: params[3].shards[1]: shard [0:64, 64:128] lies
//   outside the parameter's shape [64, 96]
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Manifest.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace loom::rank {

using manifest::Entries;
using manifest::Placement;

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

std::optional<loomrt_dtype> parseSafetensorsDType(const std::string &name) {
  for (loomrt_dtype dtype : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16})
    if (name == safetensorsDTypeName(dtype))
      return dtype;
  return std::nullopt;
}

const char *safetensorsDTypeName(loomrt_dtype dtype) {
  return dtype == LOOMRT_BF16 ? "BF16" : dtype == LOOMRT_F16 ? "F16" : "F32";
}

int64_t dtypeBytes(loomrt_dtype dtype) { return dtype == LOOMRT_F32 ? 4 : 2; }

static std::string boxString(const Box &box) {
  std::string s = "[";
  for (size_t i = 0; i < box.shape.size(); ++i)
    // Unsigned: a box from a file may end beyond INT64_MAX.
    s += (i ? ", " : "") + std::to_string(box.offset[i]) + ":" +
         std::to_string(uint64_t(box.offset[i]) + uint64_t(box.shape[i]));
  return s + "]";
}

void checkTiling(const std::vector<Box> &boxes, const Shape &shape,
                 const std::string &what) {
  int64_t covered = 0;
  for (size_t i = 0; i < boxes.size(); ++i) {
    const Box &a = boxes[i];
    for (size_t d = 0; d < shape.size(); ++d)
      if (a.offset[d] < 0 || a.shape[d] < 0 || a.shape[d] > shape[d] ||
          a.offset[d] > shape[d] - a.shape[d]) // no overflow: all >= 0
        throw Error(what + ": box " + boxString(a) +
                    " lies outside the shape " + shapeString(shape));
    for (size_t j = 0; j < i; ++j) {
      const Box &b = boxes[j];
      bool overlap = numElements(a.shape) > 0 && numElements(b.shape) > 0;
      for (size_t d = 0; d < shape.size() && overlap; ++d)
        overlap = a.offset[d] < b.offset[d] + b.shape[d] &&
                  b.offset[d] < a.offset[d] + a.shape[d];
      if (overlap)
        throw Error(what + ": boxes " + boxString(b) + " and " + boxString(a) +
                    " overlap");
    }
    covered += numElements(a.shape);
  }
  // Disjoint boxes inside the shape cover it iff their sizes add up.
  if (covered != numElements(shape))
    throw Error(what + ": the pieces cover " + std::to_string(covered) +
                " of " + std::to_string(numElements(shape)) + " elements of " +
                shapeString(shape));
}

//===----------------------------------------------------------------------===//
// Checks of a parsed manifest, with path-carrying errors
//===----------------------------------------------------------------------===//

namespace {

class Checker {
public:
  explicit Checker(std::string what) : what(std::move(what)) {}

  [[noreturn]] void fail(const std::string &path,
                         const std::string &message) const {
    throw Error(what + ": " + (path.empty() ? "" : path + ": ") + message);
  }

  std::string what;
};

std::string at(const std::string &base, const std::string &key) {
  return base.empty() ? key : base + "." + key;
}
std::string at(const std::string &base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

/// Group kinds with no groups are placeholders (such as "..."): dropped.
void checkGroups(const Checker &r, Manifest &m) {
  for (auto it = m.groups.begin(); it != m.groups.end();) {
    std::string path = at("groups", it->first);
    std::set<int32_t> seen;
    for (size_t g = 0; g < it->second.size(); ++g) {
      std::string gp = at(path, g);
      for (int32_t rank : it->second[g])
        if (!seen.insert(rank).second)
          r.fail(gp, "rank " + std::to_string(rank) + " is in two " +
                         it->first + " groups");
      if (it->second[g].empty())
        r.fail(gp, "empty group");
    }
    it = it->second.empty() ? m.groups.erase(it) : std::next(it);
  }
}

/// Entry arguments name parameters and group kinds that exist.
void checkEntries(const Checker &r, const Entries &entries,
                  const std::string &path, const Manifest &m) {
  for (const auto &[name, e] : entries)
    for (size_t i = 0; i < e.args.size(); ++i) {
      const EntryArg &a = e.args[i];
      std::string p = at(at(at(path, name), "args"), i);
      if ((a.kind == ArgKind::Param || a.kind == ArgKind::Grad) &&
          !m.findParam(a.name))
        r.fail(p, "unknown parameter \"" + a.name + "\"");
      if (a.kind == ArgKind::Comm && !m.groups.count(a.name))
        r.fail(p, "unknown group kind \"" + a.name + "\"");
    }
}

// "placement": {"group": KIND, "split_dim": D}: every rank of every group
// of KIND holds the parameter, split on D by its position in the group (or
// whole without split_dim); with "then": {"group": KIND2, "split_dim": D2}
// each rank's piece is split again on D2 by its position in its KIND2
// group (an expert's weights: over ep, then over the expert tp group).
void placeShards(const Checker &r, const Placement &pl,
                 const std::string &path, const Manifest &m, ParamSpec &p) {
  auto groups = m.groups.find(pl.group);
  if (groups == m.groups.end())
    r.fail(at(path, "group"), "\"groups\" has no kind \"" + pl.group + "\"");
  std::optional<size_t> dim;
  if (pl.splitDim) {
    int64_t k = *pl.splitDim;
    if (k < 0 || k >= int64_t(p.shape.size()))
      r.fail(at(path, "split_dim"), "dim " + std::to_string(k) +
                                        " is outside the parameter's " +
                                        shapeString(p.shape));
    dim = size_t(k);
  }
  // "pp_ranks": only the pipeline stages whose programs read it hold it.
  std::optional<std::set<int64_t>> stages;
  if (pl.ppRanks) {
    std::string sp = at(path, "pp_ranks");
    stages.emplace();
    for (size_t k = 0; k < pl.ppRanks->size(); ++k) {
      int64_t st = (*pl.ppRanks)[k];
      if (st < 0 || st >= m.ppSize())
        r.fail(at(sp, k), "pp rank " + std::to_string(st) +
                              " is outside the plan's pp " +
                              std::to_string(m.ppSize()));
      stages->insert(st);
    }
  }
  // The second split: each rank's position in its group of that kind, and
  // the group's size.
  std::map<int32_t, std::pair<int64_t, int64_t>> thenPosition;
  if (pl.then) {
    std::string tp = at(path, "then");
    auto thenGroups = m.groups.find(pl.then->group);
    if (thenGroups == m.groups.end())
      r.fail(at(tp, "group"),
             "\"groups\" has no kind \"" + pl.then->group + "\"");
    int64_t k = pl.then->splitDim;
    if (k < 0 || k >= int64_t(p.shape.size()) || (dim && size_t(k) == *dim))
      r.fail(at(tp, "split_dim"),
             "dim " + std::to_string(k) + " is not another dim of " +
                 shapeString(p.shape));
    for (const std::vector<int32_t> &g : thenGroups->second) {
      if (p.shape[size_t(k)] % int64_t(g.size()) != 0)
        r.fail(tp, "dim " + std::to_string(k) + " of " + shapeString(p.shape) +
                       " does not split over " + std::to_string(g.size()) +
                       " ranks");
      for (size_t c = 0; c < g.size(); ++c)
        thenPosition[g[c]] = {int64_t(c), int64_t(g.size())};
    }
  }
  p.shards.clear();
  for (const std::vector<int32_t> &members : groups->second) {
    if (stages && !stages->count(m.ppRankOf(members.front())))
      continue;
    int64_t n = int64_t(members.size());
    if (dim && p.shape[*dim] % n != 0)
      r.fail(path, "dim " + std::to_string(*dim) + " of " +
                       shapeString(p.shape) + " does not split over " +
                       std::to_string(n) + " ranks");
    for (int64_t c = 0; c < n; ++c) {
      Shard sh;
      sh.rank = members[size_t(c)];
      sh.box = {Shape(p.shape.size(), 0), p.shape};
      if (dim) {
        sh.box.shape[*dim] /= n;
        sh.box.offset[*dim] = c * sh.box.shape[*dim];
      }
      if (pl.then) {
        auto where = thenPosition.find(sh.rank);
        if (where == thenPosition.end())
          r.fail(at(path, "then"), "rank " + std::to_string(sh.rank) +
                                       " is in no group of kind \"" +
                                       pl.then->group + "\"");
        size_t k = size_t(pl.then->splitDim);
        sh.box.shape[k] /= where->second.second;
        sh.box.offset[k] = where->second.first * sh.box.shape[k];
      }
      p.shards.push_back(std::move(sh));
    }
  }
  std::sort(p.shards.begin(), p.shards.end(),
            [](const Shard &a, const Shard &b) { return a.rank < b.rank; });
}

// Where the parameter sits in its HF tensor, and which ranks hold which
// part of it.
void checkParam(const Checker &r, size_t i, Manifest &m) {
  ParamSpec &p = m.params[i];
  std::string path = at("params", i);
  std::string hp = at(path, "hf");
  if (p.hf.offset.size() != p.hf.shape.size())
    r.fail(hp, "offset has " + std::to_string(p.hf.offset.size()) +
                   " dims but shape has " + std::to_string(p.hf.shape.size()));
  if (p.hf.transpose && p.shape.size() != 2)
    r.fail(hp, "transpose needs a 2-d parameter, not " + shapeString(p.shape));
  if (p.hf.shape.size() != p.shape.size())
    r.fail(hp, "the HF tensor has rank " + std::to_string(p.hf.shape.size()) +
                   " but the parameter has rank " +
                   std::to_string(p.shape.size()));
  Shape placed = p.shape;
  if (p.hf.transpose)
    std::swap(placed[0], placed[1]);
  for (size_t d = 0; d < placed.size(); ++d)
    if (placed[d] > p.hf.shape[d] ||
        p.hf.offset[d] > p.hf.shape[d] - placed[d]) // no overflow
      r.fail(hp, "the parameter " + shapeString(placed) +
                     (p.hf.transpose ? " (transposed)" : "") + " at offset " +
                     shapeString(p.hf.offset) + " does not fit in " +
                     shapeString(p.hf.shape));
  // The padding rows are the parameter's own last rows.
  if (p.hf.fileRows &&
      (p.hf.transpose || p.hf.offset[0] != 0 || p.shape[0] != p.hf.shape[0]))
    r.fail(at(hp, "file_rows"), "a padded HF tensor must hold the "
                                "untransposed parameter's rows whole");
  if (p.hf.experts && p.hf.transpose)
    r.fail(at(hp, "experts"), "stacked experts cannot be transposed");

  if (p.placement) {
    placeShards(r, *p.placement, at(path, "placement"), m, p);
  } else {
    std::set<int32_t> holders;
    for (size_t s = 0; s < p.shards.size(); ++s) {
      std::string sp = at(at(path, "shards"), s);
      const Shard &sh = p.shards[s];
      if (!holders.insert(sh.rank).second)
        r.fail(sp, "rank " + std::to_string(sh.rank) + " holds two shards");
      if (sh.box.offset.size() != p.shape.size() ||
          sh.box.shape.size() != p.shape.size())
        r.fail(sp, "offset and shape must have the parameter's rank " +
                       std::to_string(p.shape.size()));
    }
  }
  if (p.shards.empty())
    r.fail(path, "parameter \"" + p.name + "\" has no shards");
  p.shardsByRank = std::is_sorted(
      p.shards.begin(), p.shards.end(),
      [](const Shard &a, const Shard &b) { return a.rank < b.rank; });
  std::vector<Box> boxes;
  for (const Shard *s : p.distinctShards())
    boxes.push_back(s->box);
  checkTiling(boxes, p.shape, r.what + ": " + path + " (" + p.name + ")");
}

void checkParams(const Checker &r, Manifest &m) {
  std::set<std::string> names;
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!names.insert(m.params[i].name).second)
      r.fail(at("params", i),
             "parameter \"" + m.params[i].name + "\" is listed twice");
    checkParam(r, i, m);
  }
}

// Groups the parameters by HF tensor and checks that each is covered once.
void buildHfTensors(const Checker &r, Manifest &m) {
  std::map<std::string, HfTensor> byName;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec &p = m.params[i];
    auto [it, inserted] = byName.try_emplace(p.hf.name);
    HfTensor &t = it->second;
    int64_t fileRows =
        p.hf.fileRows ? p.hf.fileRows : (p.hf.shape.empty() ? 0 : p.hf.shape[0]);
    if (inserted) {
      t.name = p.hf.name;
      t.shape = p.hf.shape;
      t.dtype = p.dtype;
      t.fileRows = fileRows;
      t.experts = p.hf.experts;
    } else if (t.fileRows != fileRows || t.padded()) {
      r.fail(at("params", i), "HF tensor \"" + t.name + "\" has a padded "
                              "vocabulary, which only one parameter may fill");
    } else if (t.shape != p.hf.shape) {
      r.fail(at("params", i), "HF tensor \"" + t.name + "\" has shape " +
                                  shapeString(p.hf.shape) + " here but " +
                                  shapeString(t.shape) + " for \"" +
                                  m.params[t.pieces[0]].name + "\"");
    } else if (t.dtype != p.dtype) {
      r.fail(at("params", i), "HF tensor \"" + t.name +
                                  "\" mixes dtypes " +
                                  manifestDTypeName(t.dtype) + " and " +
                                  manifestDTypeName(p.dtype));
    }
    t.pieces.push_back(i);
  }
  for (auto &[name, t] : byName) {
    std::vector<Box> boxes;
    for (size_t i : t.pieces) {
      const ParamSpec &p = m.params[i];
      Shape placed = p.shape;
      if (p.hf.transpose)
        std::swap(placed[0], placed[1]);
      boxes.push_back({p.hf.offset, placed});
    }
    checkTiling(boxes, t.shape, r.what + ": HF tensor \"" + name + "\"");
    m.hfTensors.push_back(std::move(t));
  }
}

// Every rank listed once, with the entries it runs (its own, its pp rank's
// or the top-level ones) and the part of the sequence it holds; m.ranks
// ends up indexed by rank.
void checkRanks(const Checker &r, Manifest &m) {
  checkEntries(r, m.entries, "entries", m);
  if (m.stageEntries) {
    if (int64_t(m.stageEntries->size()) != m.ppSize())
      r.fail("stage_entries", "has " + std::to_string(m.stageEntries->size()) +
                                  " entries for a plan of pp " +
                                  std::to_string(m.ppSize()));
    for (size_t k = 0; k < m.stageEntries->size(); ++k)
      checkEntries(r, (*m.stageEntries)[k], at("stage_entries", k), m);
  }
  // Position in "ranks" by rank, until every rank is known to be listed: a
  // world_size of billions must be an error, not an allocation.
  std::map<int32_t, size_t> listed;
  int logging = 0;
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    std::string path = at("ranks", i);
    RankInfo &info = m.ranks[i];
    std::string rank = std::to_string(info.rank);
    if (!listed.emplace(info.rank, i).second)
      r.fail(path, "rank " + rank + " is listed twice");
    logging += info.logsLoss;
    info.entries = m.entries;
    if (m.stageEntries)
      info.entries = (*m.stageEntries)[size_t(m.ppRankOf(info.rank))];
    if (info.ownEntries) {
      checkEntries(r, *info.ownEntries, at(path, "entries"), m);
      info.entries = *info.ownEntries;
    }
    if (info.sequenceRanges.empty())
      info.sequenceRanges = {{0, m.paddedSeqLength}};
    for (size_t k = 0; k < info.sequenceRanges.size(); ++k) {
      auto [b, e] = info.sequenceRanges[k];
      if (b < 0 || b >= e || e > m.paddedSeqLength)
        r.fail(at(at(path, "sequence_ranges"), k),
               "range [" + std::to_string(b) + ", " + std::to_string(e) +
                   ") is not inside [0, " + std::to_string(m.paddedSeqLength) +
                   ")");
    }
    if (!info.entries.count("forward"))
      r.fail(path, "rank " + rank + " has no \"forward\" entry");
    for (auto &[name, entry] : info.entries)
      for (const EntryArg &a : entry.args)
        if ((a.kind == ArgKind::Param || a.kind == ArgKind::Grad) &&
            !m.findParam(a.name)->shardOf(info.rank))
          r.fail(path, "entry \"" + name + "\" of rank " + rank + " takes " +
                           (a.kind == ArgKind::Grad ? "the gradient of " : "") +
                           "parameter \"" + a.name +
                           "\" but the rank holds no shard of it");
    if (info.logsLoss && !info.entries["forward"].hasArg(ArgKind::Loss))
      r.fail(path, "rank " + rank +
                       " logs the loss but its forward entry has no loss "
                       "argument");
  }
  for (int32_t k = 0; k < m.worldSize; ++k)
    if (!listed.count(k))
      r.fail("ranks", "rank " + std::to_string(k) + " is missing");
  std::vector<RankInfo> byRank;
  for (auto &[rank, i] : listed)
    byRank.push_back(std::move(m.ranks[i]));
  m.ranks = std::move(byRank);
  if (logging != 1)
    r.fail("ranks", "exactly one rank must have \"logs_loss\": true, found " +
                        std::to_string(logging));
}

void check(const Checker &r, Manifest &m) {
  if (m.paddedSeqLength < m.seqLength)
    r.fail("padded_seq_length", std::to_string(m.paddedSeqLength) +
                                    " is shorter than seq_length " +
                                    std::to_string(m.seqLength));
  if (m.eodTokenId && (*m.eodTokenId < 0 || *m.eodTokenId >= m.vocabSize))
    r.fail("eod_token_id", "token " + std::to_string(*m.eodTokenId) +
                               " is outside the vocabulary [0, " +
                               std::to_string(m.vocabSize) + ")");
  checkGroups(r, m);
  if (auto pp = m.groups.find("pp"); pp != m.groups.end()) {
    m.ppRankByRank.assign(size_t(m.worldSize), 0);
    for (const std::vector<int32_t> &g : pp->second)
      for (size_t i = 0; i < g.size(); ++i)
        m.ppRankByRank[size_t(g[i])] = int32_t(i);
  }
  if (m.gradientGroup != "dp" && !m.groups.count(m.gradientGroup))
    r.fail("gradient_group", "\"" + m.gradientGroup +
                                 "\" is not a group kind of \"groups\"");
  for (const ParamSpec &p : m.params)
    if (p.gradientGroup && !m.groups.count(*p.gradientGroup))
      r.fail("params", "the gradient group \"" + *p.gradientGroup + "\" of \"" +
                           p.name + "\" is not a group kind of \"groups\"");
  checkParams(r, m);
  m.indexParams();
  buildHfTensors(r, m);
  checkRanks(r, m);

  // The data-parallel groups decide which samples each rank reads; they
  // must agree with the plan's dp degree when both are given.
  auto dp = m.groups.find("dp");
  if (dp != m.groups.end()) {
    size_t members = 0;
    for (const auto &g : dp->second) {
      if (g.size() != dp->second[0].size())
        r.fail("groups.dp", "data-parallel groups have different sizes");
      members += g.size();
    }
    // Every rank reads data as some data-parallel rank.
    if (members != size_t(m.worldSize))
      r.fail("groups.dp", "the groups hold " + std::to_string(members) +
                              " of the " + std::to_string(m.worldSize) +
                              " ranks");
    auto planDp = m.plan.find("dp");
    if (planDp != m.plan.end() && planDp->second != int64_t(dp->second[0].size()))
      r.fail("groups.dp", "groups of " + std::to_string(dp->second[0].size()) +
                              " ranks but the plan says dp " +
                              std::to_string(planDp->second));
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Manifest parseManifest(const std::string &text, const std::string &what) {
  manifest::Result<Manifest> parsed = manifest::parse(text, what);
  if (!parsed)
    throw Error(parsed.error());
  Manifest m = parsed.take();
  check(Checker(what), m);
  return m;
}

Manifest readManifest(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot open manifest " + path);
  std::stringstream text;
  text << in.rdbuf();
  return parseManifest(text.str(), path);
}

} // namespace loom::rank
