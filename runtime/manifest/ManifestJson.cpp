//===- ManifestJson.cpp - manifest.json text <-> Manifest -----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The only parser and serializer of manifest.json, both on nlohmann::json.
// nlohmann throws; nothing leaves this file but Result values.
//
// Parse errors name the JSON path of the bad value, e.g.
//   out/manifest.json: params[3].init.kind: unknown init "xavier" (expected
//   normal, zeros or ones)
//
// The serializer prints what llvm::json printed when loom-compile built the
// manifest with it, byte for byte: keys sorted (nlohmann's objects are
// std::maps), two-space indents, doubles with 17 significant digits.
//
//===----------------------------------------------------------------------===//

#include "runtime/manifest/Manifest.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstdio>
#include <new>

using json = nlohmann::json;

namespace loom::manifest {

namespace {

//===----------------------------------------------------------------------===//
// Typed access to JSON values with path-carrying errors
//===----------------------------------------------------------------------===//

/// Thrown by Reader::fail and caught by parse().
struct ParseError {
  std::string message;
};

class Reader {
public:
  explicit Reader(std::string what) : what(std::move(what)) {}

  [[noreturn]] void fail(const std::string &path,
                         const std::string &message) const {
    throw ParseError{what + ": " + (path.empty() ? "" : path + ": ") + message};
  }

  const json &member(const json &obj, const std::string &path,
                     const char *key) const {
    if (!obj.is_object())
      fail(path, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end())
      fail(path, std::string("missing \"") + key + "\"");
    return *it;
  }
  const json *optMember(const json &obj, const char *key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  /// An optional member of `obj` that is an object when present.
  const json *optObject(const json &obj, const char *key,
                        const std::string &path) const {
    const json *v = optMember(obj, key);
    if (v && !v->is_object())
      fail(path, "expected an object");
    return v;
  }

  int64_t integer(const json &v, const std::string &path) const {
    if (!v.is_number_integer())
      fail(path, "expected an integer, got " + v.dump());
    // nlohmann keeps integers above INT64_MAX as unsigned.
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX))
      fail(path, "integer " + v.dump() + " is out of range");
    return v.get<int64_t>();
  }
  int64_t positive(const json &v, const std::string &path) const {
    int64_t n = integer(v, path);
    if (n < 1)
      fail(path, "expected a positive integer, got " + std::to_string(n));
    return n;
  }
  /// A rank of the world of `worldSize` ranks; one outside it is named at
  /// `holder`, the path of what names it.
  int32_t rank(const json &v, const std::string &path, int32_t worldSize,
               const std::string &holder) const {
    int64_t rank = integer(v, path);
    if (rank < 0 || rank >= worldSize)
      fail(holder, "rank " + std::to_string(rank) +
                       " is outside the world of " +
                       std::to_string(worldSize) + " ranks");
    return int32_t(rank);
  }
  double number(const json &v, const std::string &path) const {
    if (!v.is_number())
      fail(path, "expected a number, got " + v.dump());
    return v.get<double>();
  }
  std::string string(const json &v, const std::string &path) const {
    if (!v.is_string())
      fail(path, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  bool boolean(const json &v, const std::string &path) const {
    if (!v.is_boolean())
      fail(path, "expected true or false, got " + v.dump());
    return v.get<bool>();
  }
  const json &array(const json &v, const std::string &path) const {
    if (!v.is_array())
      fail(path, "expected an array, got " + v.dump());
    return v;
  }
  Shape shape(const json &v, const std::string &path, bool allowZero) const {
    Shape s;
    for (size_t i = 0; i < array(v, path).size(); ++i) {
      int64_t d = integer(v[i], path + "[" + std::to_string(i) + "]");
      if (d < (allowZero ? 0 : 1))
        fail(path, "dimension " + std::to_string(i) + " is " +
                       std::to_string(d));
      s.push_back(d);
    }
    // A tensor's shape (offsets and boxes are checked to lie inside one).
    if (!allowZero && !checkedNumElements(s))
      fail(path, shapeString(s) + " has more than 2^63 elements");
    return s;
  }
  loomrt_dtype dtype(const json &v, const std::string &path) const {
    std::string name = string(v, path);
    if (auto d = parseManifestDType(name))
      return *d;
    fail(path, "unknown dtype \"" + name + "\" (expected f32, bf16 or f16)");
  }

  std::string what;
};

std::string at(const std::string &base, const char *key) {
  return base.empty() ? key : base + "." + key;
}
std::string at(const std::string &base, size_t i) {
  return base + "[" + std::to_string(i) + "]";
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

/// The entries the rank program runs; their arguments must all be kinds it
/// provides. Other entries (a train step before the rank program runs it) may
/// carry kinds it does not know yet.
bool isRunEntry(const std::string &name) { return name == "forward"; }

EntryArg parseArg(const Reader &r, const json &v, const std::string &p,
                  bool strict) {
  std::string kind = r.string(r.member(v, p, "kind"), at(p, "kind"));
  EntryArg a;
  a.kind = parseArgKind(kind);
  if (a.kind == ArgKind::Param || a.kind == ArgKind::Grad) {
    a.name = r.string(r.member(v, p, "name"), at(p, "name"));
  } else if (a.kind == ArgKind::Comm) {
    a.name = r.string(r.member(v, p, "group"), at(p, "group"));
  } else if (a.kind == ArgKind::Other) {
    if (strict)
      r.fail(at(p, "kind"), "unknown argument kind \"" + kind +
                                "\" (expected tokens, labels, loss_mask, "
                                "param, loss, comm, grad_scale or grad)");
    a.name = kind;
  }
  if (const json *d = r.optMember(v, "dtype")) {
    if (a.kind != ArgKind::Grad)
      r.fail(at(p, "dtype"), "only a gradient names its dtype");
    a.dtype = r.dtype(*d, at(p, "dtype"));
  }
  if (const json *c = r.optMember(v, "chunk")) {
    if (a.kind != ArgKind::Grad)
      r.fail(at(p, "chunk"), "only a gradient names its chunk");
    a.chunk = r.integer(*c, at(p, "chunk"));
    if (a.chunk < 0)
      r.fail(at(p, "chunk"),
             "chunk " + std::to_string(a.chunk) + " must be at least 0");
  }
  if (const json *st = r.optMember(v, "stacked")) {
    if (a.kind != ArgKind::Tokens && a.kind != ArgKind::Labels &&
        a.kind != ArgKind::LossMask && a.kind != ArgKind::GradScale &&
        a.kind != ArgKind::Loss)
      r.fail(at(p, "stacked"), "only batch inputs and losses hold a step's "
                               "micro-batches");
    a.stacked = r.boolean(*st, at(p, "stacked"));
  }
  return a;
}

Entries parseEntries(const Reader &r, const json &v,
                     const std::string &path) {
  if (!v.is_object())
    r.fail(path, "expected an object");
  Entries entries;
  for (auto it = v.begin(); it != v.end(); ++it) {
    std::string ep = at(path, it.key().c_str());
    Entry e;
    e.symbol = r.string(r.member(it.value(), ep, "symbol"), at(ep, "symbol"));
    const json &args =
        r.array(r.member(it.value(), ep, "args"), at(ep, "args"));
    for (size_t i = 0; i < args.size(); ++i)
      e.args.push_back(parseArg(r, args[i], at(at(ep, "args"), i),
                                isRunEntry(it.key())));
    if (const json *w = r.optMember(it.value(), "workspace_bytes"))
      e.workspaceBytes = r.positive(*w, at(ep, "workspace_bytes"));
    entries[it.key()] = std::move(e);
  }
  return entries;
}

void parseModel(const Reader &r, const json &root, Manifest &m) {
  const json *model = r.optMember(root, "model");
  if (!model || !model->is_object())
    return;
  m.model.emplace();
  for (auto it = model->begin(); it != model->end(); ++it) {
    const json &v = it.value();
    if (v.is_null())
      continue;
    if (it.key() == "family")
      m.family = r.string(v, "model.family");
    else if (v.is_boolean())
      (*m.model)[it.key()] = v.get<bool>();
    else if (v.is_number_integer() &&
             !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX))
      (*m.model)[it.key()] = v.get<int64_t>();
    else if (v.is_number())
      (*m.model)[it.key()] = v.get<double>();
    else if (v.is_string())
      (*m.model)[it.key()] = v.get<std::string>();
    // Anything else is the importer's business, not the rank program's.
  }
}

void parsePlan(const Reader &r, const json &root, Manifest &m) {
  const json *plan = r.optObject(root, "plan", "plan");
  if (!plan)
    return;
  for (auto it = plan->begin(); it != plan->end(); ++it) {
    const json &v = it.value();
    if (v.is_number_integer())
      m.plan[it.key()] = v.get<int64_t>();
    else if (it.key() == "sequence_parallel" && v.is_boolean())
      m.sequenceParallel = v.get<bool>();
    else if (it.key() == "order" && v.is_string())
      m.order = v.get<std::string>();
  }
}

void parseGroups(const Reader &r, const json &root, Manifest &m) {
  const json *groups = r.optObject(root, "groups", "groups");
  if (!groups)
    return;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    std::string path = at("groups", it.key().c_str());
    if (!it.value().is_array())
      r.fail(path, "expected a list of groups");
    std::vector<std::vector<int32_t>> &lists = m.groups[it.key()];
    for (size_t g = 0; g < it.value().size(); ++g) {
      std::string gp = at(path, g);
      const json &list = r.array(it.value()[g], gp);
      std::vector<int32_t> &ranks = lists.emplace_back();
      for (size_t k = 0; k < list.size(); ++k)
        ranks.push_back(r.rank(list[k], at(gp, k), m.worldSize, gp));
    }
  }
}

HfPlacement parseHf(const Reader &r, const json &hf, const std::string &hp) {
  HfPlacement h;
  h.name = r.string(r.member(hf, hp, "name"), at(hp, "name"));
  h.shape = r.shape(r.member(hf, hp, "shape"), at(hp, "shape"), false);
  if (const json *t = r.optMember(hf, "transpose"))
    h.transpose = r.boolean(*t, at(hp, "transpose"));
  h.offset = Shape(h.shape.size(), 0);
  if (const json *o = r.optMember(hf, "offset"))
    h.offset = r.shape(*o, at(hp, "offset"), true);
  if (const json *f = r.optMember(hf, "file_rows")) {
    std::string fp = at(hp, "file_rows");
    h.fileRows = r.integer(*f, fp);
    if (h.shape.empty() || h.fileRows < 1 || h.fileRows > h.shape[0])
      r.fail(fp, "must be between 1 and the HF tensor's " +
                     std::to_string(h.shape.empty() ? 0 : h.shape[0]) +
                     " rows");
  }
  if (const json *e = r.optMember(hf, "experts")) {
    std::string ep = at(hp, "experts");
    h.experts = r.integer(*e, ep);
    if (h.shape.empty() || h.experts != h.shape[0] || h.fileRows)
      r.fail(ep, "must be the HF tensor's " +
                     std::to_string(h.shape.empty() ? 0 : h.shape[0]) +
                     " rows (one file tensor each), without file_rows");
  }
  return h;
}

Placement parsePlacement(const Reader &r, const json &v,
                         const std::string &path) {
  if (!v.is_object())
    r.fail(path, "expected an object");
  Placement p;
  p.group = r.string(r.member(v, path, "group"), at(path, "group"));
  if (const json *d = r.optMember(v, "split_dim"))
    p.splitDim = r.integer(*d, at(path, "split_dim"));
  if (const json *s = r.optMember(v, "pp_ranks")) {
    std::string sp = at(path, "pp_ranks");
    p.ppRanks.emplace();
    for (size_t k = 0; k < r.array(*s, sp).size(); ++k)
      p.ppRanks->push_back(r.integer((*s)[k], at(sp, k)));
  }
  if (const json *t = r.optMember(v, "then")) {
    std::string tp = at(path, "then");
    if (!t->is_object())
      r.fail(tp, "expected an object");
    p.then = Placement::Then{
        r.string(r.member(*t, tp, "group"), at(tp, "group")),
        r.integer(r.member(*t, tp, "split_dim"), at(tp, "split_dim"))};
  }
  return p;
}

void parseParams(const Reader &r, const json &root, Manifest &m) {
  const json &params = r.array(r.member(root, "", "params"), "params");
  for (size_t i = 0; i < params.size(); ++i) {
    const json &v = params[i];
    std::string path = at("params", i);
    ParamSpec p;
    p.name = r.string(r.member(v, path, "name"), at(path, "name"));
    p.shape = r.shape(r.member(v, path, "shape"), at(path, "shape"), false);
    p.dtype = m.dtype;
    if (const json *d = r.optMember(v, "dtype"))
      p.dtype = r.dtype(*d, at(path, "dtype"));

    const json &init = r.member(v, path, "init");
    std::string ip = at(path, "init");
    std::string kind = r.string(r.member(init, ip, "kind"), at(ip, "kind"));
    if (kind == "normal") {
      p.init = InitKind::Normal;
      p.std = r.number(r.member(init, ip, "std"), at(ip, "std"));
      if (!(p.std >= 0))
        r.fail(at(ip, "std"), "standard deviation must be non-negative");
    } else if (kind == "zeros") {
      p.init = InitKind::Zeros;
    } else if (kind == "ones") {
      p.init = InitKind::Ones;
    } else {
      r.fail(at(ip, "kind"), "unknown init \"" + kind +
                                 "\" (expected normal, zeros or ones)");
    }

    // Without an "hf" entry a parameter is its own checkpoint tensor.
    p.hf = {p.name, p.shape, false, Shape(p.shape.size(), 0)};
    if (const json *hf = r.optMember(v, "hf"))
      p.hf = parseHf(r, *hf, at(path, "hf"));

    if (const json *g = r.optMember(v, "gradient_group"))
      p.gradientGroup = r.string(*g, at(path, "gradient_group"));
    const json *placement = r.optMember(v, "placement");
    if (placement && r.optMember(v, "shards"))
      r.fail(path, "give \"shards\" or \"placement\", not both");
    if (placement) {
      p.placement = parsePlacement(r, *placement, at(path, "placement"));
    } else {
      const json &shards =
          r.array(r.member(v, path, "shards"), at(path, "shards"));
      for (size_t s = 0; s < shards.size(); ++s) {
        std::string sp = at(at(path, "shards"), s);
        Shard sh;
        sh.rank = r.rank(r.member(shards[s], sp, "rank"), at(sp, "rank"),
                         m.worldSize, sp);
        sh.box.offset =
            r.shape(r.member(shards[s], sp, "offset"), at(sp, "offset"), true);
        sh.box.shape =
            r.shape(r.member(shards[s], sp, "shape"), at(sp, "shape"), true);
        p.shards.push_back(std::move(sh));
      }
    }
    m.params.push_back(std::move(p));
  }
}

void parseRanks(const Reader &r, const json &root, Manifest &m) {
  const json &ranks = r.array(r.member(root, "", "ranks"), "ranks");
  if (const json *e = r.optMember(root, "entries"))
    m.entries = parseEntries(r, *e, "entries");
  if (const json *se = r.optMember(root, "stage_entries")) {
    const json &list = r.array(*se, "stage_entries");
    m.stageEntries.emplace();
    for (size_t k = 0; k < list.size(); ++k)
      m.stageEntries->push_back(parseEntries(r, list[k], at("stage_entries", k)));
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::string path = at("ranks", i);
    const json &v = ranks[i];
    RankInfo info;
    info.rank = r.rank(r.member(v, path, "rank"), at(path, "rank"),
                       m.worldSize, path);
    info.binary = r.string(r.member(v, path, "binary"), at(path, "binary"));
    if (const json *l = r.optMember(v, "logs_loss"))
      info.logsLoss = r.boolean(*l, at(path, "logs_loss"));
    if (const json *e = r.optMember(v, "entries"))
      info.ownEntries =
          parseEntries(r, *e, at(path, "entries"));
    if (const json *sr = r.optMember(v, "sequence_ranges")) {
      std::string sp = at(path, "sequence_ranges");
      if (r.array(*sr, sp).empty())
        r.fail(sp, "expected at least one range");
      for (size_t k = 0; k < sr->size(); ++k) {
        const json &range = (*sr)[k];
        if (!range.is_array() || range.size() != 2)
          r.fail(at(sp, k), "expected [begin, end]");
        info.sequenceRanges.push_back(
            {r.integer(range[0], at(sp, k)), r.integer(range[1], at(sp, k))});
      }
    }
    m.ranks.push_back(std::move(info));
  }
}

Manifest parseRoot(const Reader &r, const json &root) {
  if (!root.is_object())
    r.fail("", "expected a JSON object");
  // Every manifest names its schema: a file that is not one, or one of
  // another version, is refused before anything else is read.
  const json &format = r.member(root, "", "format");
  if (!format.is_string() || format.get<std::string>() != kFormat)
    r.fail("format", std::string("expected \"") + kFormat + "\", got " +
                         format.dump());
  const json &version = r.member(root, "", "version");
  if (r.integer(version, "version") != kVersion)
    r.fail("version", "unsupported version " + version.dump() +
                          " (expected " + std::to_string(kVersion) +
                          ": recompile with this loom-compile)");

  Manifest m;
  if (const json *b = r.optMember(root, "backend")) {
    m.backend = r.string(*b, "backend");
    if (m.backend != "cpu" && m.backend != "cuda")
      r.fail("backend", "expected \"cpu\" or \"cuda\", got " + b->dump());
  }
  parseModel(r, root, m);
  int64_t worldSize =
      r.positive(r.member(root, "", "world_size"), "world_size");
  if (worldSize > INT32_MAX)
    r.fail("world_size", std::to_string(worldSize) + " ranks do not fit in "
                         "an MPI rank (int)");
  m.worldSize = int32_t(worldSize);
  m.microBatchSize = r.positive(r.member(root, "", "micro_batch_size"),
                                "micro_batch_size");
  m.seqLength = r.positive(r.member(root, "", "seq_length"), "seq_length");
  m.paddedSeqLength = m.seqLength;
  if (const json *p = r.optMember(root, "padded_seq_length"))
    m.paddedSeqLength = r.positive(*p, "padded_seq_length");
  if (const json *n = r.optMember(root, "num_microbatches"))
    m.numMicrobatches = r.positive(*n, "num_microbatches");
  m.vocabSize = r.positive(r.member(root, "", "vocab_size"), "vocab_size");
  if (const json *d = r.optMember(root, "dtype"))
    m.dtype = r.dtype(*d, "dtype");
  if (const json *e = r.optMember(root, "eod_token_id"))
    m.eodTokenId = r.integer(*e, "eod_token_id");
  if (const json *l = r.optMember(root, "router_losses")) {
    for (auto [key, slot] :
         {std::pair<const char *, int64_t *>{"load_balancing",
                                             &m.routerLosses.loadBalancing},
          {"z_loss", &m.routerLosses.zLoss}})
      if (const json *n = r.optMember(*l, key))
        *slot = r.integer(*n, std::string("router_losses.") + key);
  }
  parsePlan(r, root, m);
  parseGroups(r, root, m);
  if (const json *g = r.optMember(root, "gradient_group"))
    m.gradientGroup = r.string(*g, "gradient_group");
  parseParams(r, root, m);
  parseRanks(r, root, m);
  return m;
}

//===----------------------------------------------------------------------===//
// Serializing
//===----------------------------------------------------------------------===//

json shapeJson(const Shape &shape) {
  json a = json::array();
  for (int64_t d : shape)
    a.push_back(d);
  return a;
}

json entriesJson(const Entries &entries) {
  json out = json::object();
  for (const auto &[name, e] : entries) {
    json args = json::array();
    for (const EntryArg &a : e.args) {
      const char *kind = argKindName(a.kind);
      json arg = {{"kind", kind ? kind : a.name}};
      if (a.kind == ArgKind::Param || a.kind == ArgKind::Grad)
        arg["name"] = a.name;
      else if (a.kind == ArgKind::Comm)
        arg["group"] = a.name;
      if (a.stacked)
        arg["stacked"] = true;
      if (a.dtype)
        arg["dtype"] = manifestDTypeName(*a.dtype);
      if (a.chunk >= 0)
        arg["chunk"] = a.chunk;
      args.push_back(std::move(arg));
    }
    out[name] = {{"symbol", e.symbol}, {"args", std::move(args)}};
    if (e.workspaceBytes > 0)
      out[name]["workspace_bytes"] = e.workspaceBytes;
  }
  return out;
}

json paramJson(const ParamSpec &p) {
  static const char *const initKinds[] = {"normal", "zeros", "ones"};
  json init = {{"kind", initKinds[int(p.init)]}};
  if (p.init == InitKind::Normal)
    init["std"] = p.std;
  json hf = {{"name", p.hf.name},
             {"shape", shapeJson(p.hf.shape)},
             {"transpose", p.hf.transpose},
             {"offset", shapeJson(p.hf.offset)}};
  if (p.hf.fileRows)
    hf["file_rows"] = p.hf.fileRows;
  if (p.hf.experts)
    hf["experts"] = p.hf.experts;
  json out = {{"name", p.name},
              {"shape", shapeJson(p.shape)},
              {"dtype", manifestDTypeName(p.dtype)},
              {"init", std::move(init)},
              {"hf", std::move(hf)}};
  if (p.gradientGroup)
    out["gradient_group"] = *p.gradientGroup;
  if (p.placement) {
    json placement = {{"group", p.placement->group}};
    if (p.placement->splitDim)
      placement["split_dim"] = *p.placement->splitDim;
    if (p.placement->ppRanks)
      placement["pp_ranks"] = *p.placement->ppRanks;
    if (p.placement->then)
      placement["then"] = {{"group", p.placement->then->group},
                           {"split_dim", p.placement->then->splitDim}};
    out["placement"] = std::move(placement);
  } else {
    json shards = json::array();
    for (const Shard &s : p.shards)
      shards.push_back({{"rank", s.rank},
                        {"offset", shapeJson(s.box.offset)},
                        {"shape", shapeJson(s.box.shape)}});
    out["shards"] = std::move(shards);
  }
  return out;
}

json rankJson(const Manifest &m, const RankInfo &info) {
  json out = {{"rank", info.rank},
              {"binary", info.binary},
              {"logs_loss", info.logsLoss}};
  // All of the sequence is the default.
  if (!info.sequenceRanges.empty() &&
      info.sequenceRanges !=
          std::vector<std::pair<int64_t, int64_t>>{{0, m.paddedSeqLength}}) {
    json ranges = json::array();
    for (auto [begin, end] : info.sequenceRanges)
      ranges.push_back({begin, end});
    out["sequence_ranges"] = std::move(ranges);
  }
  if (info.ownEntries)
    out["entries"] = entriesJson(*info.ownEntries);
  return out;
}

json manifestJson(const Manifest &m) {
  json model = nullptr;
  if (m.model || !m.family.empty()) {
    model = json::object();
    if (m.model)
      for (const auto &[key, value] : *m.model)
        std::visit([&](const auto &v) { model[key] = v; }, value);
    if (!m.family.empty())
      model["family"] = m.family;
  }
  json plan = json::object();
  for (const auto &[key, value] : m.plan)
    plan[key] = value;
  if (m.sequenceParallel)
    plan["sequence_parallel"] = *m.sequenceParallel;
  if (m.order)
    plan["order"] = *m.order;
  json groups = json::object();
  for (const auto &[kind, lists] : m.groups)
    groups[kind] = lists;
  json ranks = json::array();
  for (const RankInfo &info : m.ranks)
    ranks.push_back(rankJson(m, info));
  json params = json::array();
  for (const ParamSpec &p : m.params)
    params.push_back(paramJson(p));

  json root = {{"format", kFormat},
               {"version", kVersion},
               {"model", std::move(model)},
               {"plan", std::move(plan)},
               {"world_size", m.worldSize},
               {"backend", m.backend},
               {"micro_batch_size", m.microBatchSize},
               {"seq_length", m.seqLength},
               {"num_microbatches", m.numMicrobatches},
               {"dtype", manifestDTypeName(m.dtype)},
               {"vocab_size", m.vocabSize},
               {"eod_token_id", m.eodTokenId ? json(*m.eodTokenId) : json()},
               {"groups", std::move(groups)},
               {"gradient_group", m.gradientGroup},
               {"ranks", std::move(ranks)},
               {"params", std::move(params)},
               {"entries", entriesJson(m.entries)}};
  if (m.routerLosses.loadBalancing || m.routerLosses.zLoss)
    root["router_losses"] = {{"load_balancing", m.routerLosses.loadBalancing},
                             {"z_loss", m.routerLosses.zLoss}};
  if (m.paddedSeqLength != m.seqLength)
    root["padded_seq_length"] = m.paddedSeqLength;
  if (m.stageEntries) {
    json stages = json::array();
    for (const Entries &e : *m.stageEntries)
      stages.push_back(entriesJson(e));
    root["stage_entries"] = std::move(stages);
  }
  return root;
}

/// A JSON string as llvm::json quotes it: '"' and '\' escaped, \t \n \r
/// short, other control characters as \u00XX, everything else as it is.
void quote(std::string &out, const std::string &s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c >= 0x20) {
      out += char(c);
      continue;
    }
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", c);
    out += c == '\t' ? "\\t" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : buf;
  }
  out += '"';
}

/// `v` as llvm::json's OStream prints it with an indent of 2: every array
/// element and object member on its own line, "key": value, empty
/// containers as [] and {}.
void print(std::string &out, const json &v, int indent) {
  auto newline = [&](int n) {
    out += '\n';
    out.append(size_t(n), ' ');
  };
  switch (v.type()) {
  case json::value_t::object: {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      out += first ? "" : ",";
      first = false;
      newline(indent + 2);
      quote(out, it.key());
      out += ": ";
      print(out, it.value(), indent + 2);
    }
    if (!first)
      newline(indent);
    out += '}';
    return;
  }
  case json::value_t::array: {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      out += i ? "," : "";
      newline(indent + 2);
      print(out, v[i], indent + 2);
    }
    if (!v.empty())
      newline(indent);
    out += ']';
    return;
  }
  case json::value_t::string:
    quote(out, v.get_ref<const std::string &>());
    return;
  case json::value_t::boolean:
    out += v.get<bool>() ? "true" : "false";
    return;
  case json::value_t::number_integer:
    out += std::to_string(v.get<int64_t>());
    return;
  case json::value_t::number_unsigned:
    out += std::to_string(v.get<uint64_t>());
    return;
  case json::value_t::number_float: {
    // max_digits10: every double prints as the value it is.
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v.get<double>());
    out += buf;
    return;
  }
  default:
    out += "null";
    return;
  }
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Result<Manifest> parse(const std::string &text, const std::string &what) {
  Reader r(what);
  try {
    json root;
    try {
      root = json::parse(text);
    } catch (const json::exception &e) {
      // A syntax error, or a number out of range (out_of_range.406, not a
      // parse_error). e.what() is "[json.exception.parse_error.101] parse
      // error at ...".
      std::string msg = e.what();
      size_t pos = msg.find("] ");
      return rankgen::fail(
          what + ": invalid JSON: " +
          (pos == std::string::npos ? msg : msg.substr(pos + 2)));
    }
    return parseRoot(r, root);
  } catch (const ParseError &e) {
    return rankgen::fail(e.message);
  } catch (const std::bad_alloc &) {
    return rankgen::fail(what + ": out of memory while reading it");
  } catch (const std::exception &e) {
    // Not expected: the reader checks every type before nlohmann converts.
    return rankgen::fail(what + ": " + e.what());
  }
}

std::string serialize(const Manifest &m) noexcept {
  std::string text;
  print(text, manifestJson(m), 0);
  return text + "\n";
}

} // namespace loom::manifest
