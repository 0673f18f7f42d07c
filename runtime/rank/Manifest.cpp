//===- Manifest.cpp - Parse and validate manifest.json --------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Messages name the JSON path of the bad value, e.g.
//   out/manifest.json: params[3].shards[1]: shard [0:64, 64:128] lies
//   outside the parameter's shape [64, 96]
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <fstream>
#include <set>
#include <sstream>

using json = nlohmann::json;

namespace loom::rank {

//===----------------------------------------------------------------------===//
// Small helpers
//===----------------------------------------------------------------------===//

int64_t numElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

std::optional<int64_t> checkedNumElements(const Shape &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n))
      return std::nullopt;
  return n;
}

std::string shapeString(const Shape &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

static std::string boxString(const Box &box) {
  std::string s = "[";
  for (size_t i = 0; i < box.shape.size(); ++i)
    // Unsigned: a box from a file may end beyond INT64_MAX.
    s += (i ? ", " : "") + std::to_string(box.offset[i]) + ":" +
         std::to_string(uint64_t(box.offset[i]) + uint64_t(box.shape[i]));
  return s + "]";
}

std::optional<loomrt_dtype> parseManifestDType(const std::string &name) {
  if (name == "f32")
    return LOOMRT_F32;
  if (name == "bf16")
    return LOOMRT_BF16;
  if (name == "f16")
    return LOOMRT_F16;
  return std::nullopt;
}

std::optional<loomrt_dtype> parseSafetensorsDType(const std::string &name) {
  if (name == "F32")
    return LOOMRT_F32;
  if (name == "BF16")
    return LOOMRT_BF16;
  if (name == "F16")
    return LOOMRT_F16;
  return std::nullopt;
}

const char *manifestDTypeName(loomrt_dtype dtype) {
  return dtype == LOOMRT_BF16 ? "bf16" : dtype == LOOMRT_F16 ? "f16" : "f32";
}

const char *safetensorsDTypeName(loomrt_dtype dtype) {
  return dtype == LOOMRT_BF16 ? "BF16" : dtype == LOOMRT_F16 ? "F16" : "F32";
}

int64_t dtypeBytes(loomrt_dtype dtype) { return dtype == LOOMRT_F32 ? 4 : 2; }

Shape HfTensor::fileShape() const {
  Shape s = shape;
  s[0] = fileRows;
  return s;
}

Shape HfTensor::paddingShape() const {
  Shape s = shape;
  s[0] -= fileRows;
  return s;
}

const Shard *ParamSpec::shardOf(int32_t rank) const {
  if (shardsByRank) {
    auto it = std::lower_bound(
        shards.begin(), shards.end(), rank,
        [](const Shard &s, int32_t r) { return s.rank < r; });
    return it != shards.end() && it->rank == rank ? &*it : nullptr;
  }
  for (const Shard &s : shards)
    if (s.rank == rank)
      return &s;
  return nullptr;
}

int32_t ParamSpec::firstHolder(const Shard &s) const {
  for (const Shard &h : shards)
    if (h.box == s.box)
      return h.rank;
  return s.rank;
}

std::vector<const Shard *> ParamSpec::distinctShards() const {
  std::vector<const Shard *> out;
  for (const Shard &s : shards) {
    bool seen = std::any_of(out.begin(), out.end(), [&](const Shard *o) {
      return o->box == s.box;
    });
    if (!seen)
      out.push_back(&s);
  }
  return out;
}

bool Entry::pipelined() const {
  return std::any_of(args.begin(), args.end(),
                     [](const EntryArg &a) { return a.microbatch >= 0; });
}

int64_t Manifest::ppSize() const {
  auto it = plan.find("pp");
  return it == plan.end() ? 1 : it->second;
}

int64_t Manifest::ppRankOf(int32_t rank) const {
  if (size_t(rank) < ppRankByRank.size())
    return ppRankByRank[size_t(rank)];
  auto g = groupOf("pp", rank);
  return g ? g->second : 0;
}

bool Entry::hasArg(ArgKind kind) const {
  return std::any_of(args.begin(), args.end(),
                     [&](const EntryArg &a) { return a.kind == kind; });
}

int64_t RankInfo::localSeqLength() const {
  int64_t n = 0;
  for (auto [begin, end] : sequenceRanges)
    n += end - begin;
  return n;
}

void Manifest::indexParams() {
  paramIndex.clear();
  for (size_t i = 0; i < params.size(); ++i)
    paramIndex.emplace(params[i].name, i);
}

const ParamSpec *Manifest::findParam(const std::string &name) const {
  // The index is current when it covers every param (names are unique).
  if (paramIndex.size() == params.size() && !params.empty()) {
    auto it = paramIndex.find(name);
    return it == paramIndex.end() ? nullptr : &params[it->second];
  }
  for (const ParamSpec &p : params)
    if (p.name == name)
      return &p;
  return nullptr;
}

std::optional<std::pair<const std::vector<int32_t> *, int32_t>>
Manifest::groupOf(const std::string &kind, int32_t rank) const {
  auto it = groups.find(kind);
  if (it == groups.end())
    return std::nullopt;
  for (const std::vector<int32_t> &g : it->second)
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i] == rank)
        return std::make_pair(&g, int32_t(i));
  return std::nullopt;
}

std::pair<int64_t, int64_t> Manifest::dataParallel(int32_t rank) const {
  if (auto g = groupOf("dp", rank))
    return {int64_t(g->first->size()), g->second};
  return {1, 0};
}

std::pair<int64_t, int64_t> Manifest::gradientParallel(int32_t rank) const {
  if (auto g = groupOf(gradientGroup, rank))
    return {int64_t(g->first->size()), g->second};
  return {1, 0};
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
// Typed access to JSON values with path-carrying errors
//===----------------------------------------------------------------------===//

namespace {

class Reader {
public:
  explicit Reader(std::string what) : what(std::move(what)) {}

  [[noreturn]] void fail(const std::string &path,
                         const std::string &message) const {
    throw Error(what + ": " + (path.empty() ? "" : path + ": ") + message);
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

/// The entries the rank program runs; their arguments must all be kinds it
/// provides. Other entries (a train step before the rank program runs it) may
/// carry kinds it does not know yet.
bool isRunEntry(const std::string &name) { return name == "forward"; }

Entry parseEntry(const Reader &r, const json &v, const std::string &path,
                 const Manifest &m, bool strict) {
  Entry e;
  e.symbol = r.string(r.member(v, path, "symbol"), at(path, "symbol"));
  const json &args = r.array(r.member(v, path, "args"), at(path, "args"));
  for (size_t i = 0; i < args.size(); ++i) {
    std::string p = at(at(path, "args"), i);
    std::string kind = r.string(r.member(args[i], p, "kind"), at(p, "kind"));
    EntryArg a;
    if (kind == "tokens")
      a.kind = ArgKind::Tokens;
    else if (kind == "labels")
      a.kind = ArgKind::Labels;
    else if (kind == "loss_mask")
      a.kind = ArgKind::LossMask;
    else if (kind == "loss")
      a.kind = ArgKind::Loss;
    else if (kind == "grad_scale")
      a.kind = ArgKind::GradScale;
    else if (kind == "param" || kind == "grad") {
      a.kind = kind == "param" ? ArgKind::Param : ArgKind::Grad;
      a.name = r.string(r.member(args[i], p, "name"), at(p, "name"));
      if (!m.findParam(a.name))
        r.fail(p, "unknown parameter \"" + a.name + "\"");
    } else if (kind == "comm") {
      a.kind = ArgKind::Comm;
      a.name = r.string(r.member(args[i], p, "group"), at(p, "group"));
      if (!m.groups.count(a.name))
        r.fail(p, "unknown group kind \"" + a.name + "\"");
    } else if (strict) {
      r.fail(at(p, "kind"), "unknown argument kind \"" + kind +
                                "\" (expected tokens, labels, loss_mask, "
                                "param, loss, comm, grad_scale or grad)");
    } else {
      a.kind = ArgKind::Other;
      a.name = kind;
    }
    if (const json *d = r.optMember(args[i], "dtype")) {
      if (a.kind != ArgKind::Grad)
        r.fail(at(p, "dtype"), "only a gradient names its dtype");
      a.dtype = r.dtype(*d, at(p, "dtype"));
    }
    if (const json *c = r.optMember(args[i], "chunk")) {
      if (a.kind != ArgKind::Grad)
        r.fail(at(p, "chunk"), "only a gradient names its chunk");
      a.chunk = r.integer(*c, at(p, "chunk"));
      if (a.chunk < 0)
        r.fail(at(p, "chunk"), "chunk " + std::to_string(a.chunk) +
                                   " must be at least 0");
    }
    if (const json *mb = r.optMember(args[i], "microbatch")) {
      if (a.kind != ArgKind::Tokens && a.kind != ArgKind::Labels &&
          a.kind != ArgKind::LossMask && a.kind != ArgKind::GradScale &&
          a.kind != ArgKind::Loss)
        r.fail(at(p, "microbatch"), "only batch inputs and losses belong to "
                                    "a micro-batch");
      a.microbatch = r.integer(*mb, at(p, "microbatch"));
      if (a.microbatch < 0 || a.microbatch >= m.numMicrobatches)
        r.fail(at(p, "microbatch"),
               "micro-batch " + std::to_string(a.microbatch) +
                   " is outside the step's " +
                   std::to_string(m.numMicrobatches));
    }
    e.args.push_back(std::move(a));
  }
  return e;
}

std::map<std::string, Entry> parseEntries(const Reader &r, const json &v,
                                          const std::string &path,
                                          const Manifest &m) {
  if (!v.is_object())
    r.fail(path, "expected an object");
  std::map<std::string, Entry> entries;
  for (auto it = v.begin(); it != v.end(); ++it)
    entries[it.key()] = parseEntry(r, it.value(), at(path, it.key().c_str()),
                                   m, isRunEntry(it.key()));
  return entries;
}

// "placement": {"group": KIND, "split_dim": D}: every rank of every group
// of KIND holds the parameter, split on D by its position in the group (or
// whole without split_dim). The compact form of a shard list, which for a
// large world would list every rank of every parameter.
void placeShards(const Reader &r, const json &v, const std::string &path,
                 const Manifest &m, ParamSpec &p) {
  if (!v.is_object())
    r.fail(path, "expected an object");
  std::string kind = r.string(r.member(v, path, "group"), at(path, "group"));
  auto groups = m.groups.find(kind);
  if (groups == m.groups.end())
    r.fail(at(path, "group"), "\"groups\" has no kind \"" + kind + "\"");
  std::optional<size_t> dim;
  if (const json *d = r.optMember(v, "split_dim")) {
    int64_t k = r.integer(*d, at(path, "split_dim"));
    if (k < 0 || k >= int64_t(p.shape.size()))
      r.fail(at(path, "split_dim"), "dim " + std::to_string(k) +
                                        " is outside the parameter's " +
                                        shapeString(p.shape));
    dim = size_t(k);
  }
  // "pp_ranks": only the pipeline stages whose programs read it hold it.
  std::optional<std::set<int64_t>> stages;
  if (const json *s = r.optMember(v, "pp_ranks")) {
    std::string sp = at(path, "pp_ranks");
    stages.emplace();
    for (size_t k = 0; k < r.array(*s, sp).size(); ++k) {
      int64_t st = r.integer((*s)[k], at(sp, k));
      if (st < 0 || st >= m.ppSize())
        r.fail(at(sp, k), "pp rank " + std::to_string(st) +
                              " is outside the plan's pp " +
                              std::to_string(m.ppSize()));
      stages->insert(st);
    }
  }
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
      p.shards.push_back(std::move(sh));
    }
  }
  std::sort(p.shards.begin(), p.shards.end(),
            [](const Shard &a, const Shard &b) { return a.rank < b.rank; });
}

void parseParams(const Reader &r, const json &root, Manifest &m) {
  const json &params = r.array(r.member(root, "", "params"), "params");
  std::set<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    const json &v = params[i];
    std::string path = at("params", i);
    ParamSpec p;
    p.name = r.string(r.member(v, path, "name"), at(path, "name"));
    if (!names.insert(p.name).second)
      r.fail(path, "parameter \"" + p.name + "\" is listed twice");
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
    if (const json *hf = r.optMember(v, "hf")) {
      std::string hp = at(path, "hf");
      p.hf.name = r.string(r.member(*hf, hp, "name"), at(hp, "name"));
      p.hf.shape = r.shape(r.member(*hf, hp, "shape"), at(hp, "shape"), false);
      if (const json *t = r.optMember(*hf, "transpose"))
        p.hf.transpose = r.boolean(*t, at(hp, "transpose"));
      p.hf.offset = Shape(p.hf.shape.size(), 0);
      if (const json *o = r.optMember(*hf, "offset"))
        p.hf.offset = r.shape(*o, at(hp, "offset"), true);
      if (p.hf.offset.size() != p.hf.shape.size())
        r.fail(hp, "offset has " + std::to_string(p.hf.offset.size()) +
                       " dims but shape has " +
                       std::to_string(p.hf.shape.size()));
      if (p.hf.transpose && p.shape.size() != 2)
        r.fail(hp, "transpose needs a 2-d parameter, not " +
                       shapeString(p.shape));
      if (p.hf.shape.size() != p.shape.size())
        r.fail(hp, "the HF tensor has rank " +
                       std::to_string(p.hf.shape.size()) +
                       " but the parameter has rank " +
                       std::to_string(p.shape.size()));
      Shape placed = p.shape;
      if (p.hf.transpose)
        std::swap(placed[0], placed[1]);
      for (size_t d = 0; d < placed.size(); ++d)
        if (placed[d] > p.hf.shape[d] ||
            p.hf.offset[d] > p.hf.shape[d] - placed[d]) // no overflow
          r.fail(hp, "the parameter " + shapeString(placed) +
                         (p.hf.transpose ? " (transposed)" : "") +
                         " at offset " + shapeString(p.hf.offset) +
                         " does not fit in " + shapeString(p.hf.shape));
      if (const json *f = r.optMember(*hf, "file_rows")) {
        std::string fp = at(hp, "file_rows");
        p.hf.fileRows = r.integer(*f, fp);
        if (p.hf.shape.empty() || p.hf.fileRows < 1 ||
            p.hf.fileRows > p.hf.shape[0])
          r.fail(fp, "must be between 1 and the HF tensor's " +
                         std::to_string(p.hf.shape.empty() ? 0
                                                           : p.hf.shape[0]) +
                         " rows");
        // The padding rows are the parameter's own last rows.
        if (p.hf.transpose || p.hf.offset[0] != 0 ||
            p.shape[0] != p.hf.shape[0])
          r.fail(fp, "a padded HF tensor must hold the untransposed "
                     "parameter's rows whole");
      }
    }

    const json *placement = r.optMember(v, "placement");
    if (placement && r.optMember(v, "shards"))
      r.fail(path, "give \"shards\" or \"placement\", not both");
    if (placement)
      placeShards(r, *placement, at(path, "placement"), m, p);
    const json empty = json::array();
    const json &shards =
        placement ? empty
                  : r.array(r.member(v, path, "shards"), at(path, "shards"));
    std::set<int32_t> holders;
    for (size_t s = 0; s < shards.size(); ++s) {
      std::string sp = at(at(path, "shards"), s);
      Shard sh;
      int64_t rank = r.integer(r.member(shards[s], sp, "rank"), at(sp, "rank"));
      if (rank < 0 || rank >= m.worldSize)
        r.fail(sp, "rank " + std::to_string(rank) +
                       " is outside the world of " +
                       std::to_string(m.worldSize) + " ranks");
      sh.rank = int32_t(rank);
      if (!holders.insert(sh.rank).second)
        r.fail(sp, "rank " + std::to_string(rank) + " holds two shards");
      sh.box.offset =
          r.shape(r.member(shards[s], sp, "offset"), at(sp, "offset"), true);
      sh.box.shape =
          r.shape(r.member(shards[s], sp, "shape"), at(sp, "shape"), true);
      if (sh.box.offset.size() != p.shape.size() ||
          sh.box.shape.size() != p.shape.size())
        r.fail(sp, "offset and shape must have the parameter's rank " +
                       std::to_string(p.shape.size()));
      p.shards.push_back(std::move(sh));
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
    m.params.push_back(std::move(p));
  }
}

// Groups the parameters by HF tensor and checks that each is covered once.
void buildHfTensors(const Reader &r, Manifest &m) {
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

void parseGroups(const Reader &r, const json &root, Manifest &m) {
  const json *groups = r.optMember(root, "groups");
  if (!groups)
    return;
  if (!groups->is_object())
    r.fail("groups", "expected an object");
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    std::string path = at("groups", it.key().c_str());
    // The manifest may carry placeholder kinds such as "...".
    if (!it.value().is_array())
      r.fail(path, "expected a list of groups");
    std::vector<std::vector<int32_t>> lists;
    std::set<int32_t> seen;
    for (size_t g = 0; g < it.value().size(); ++g) {
      std::string gp = at(path, g);
      const json &list = r.array(it.value()[g], gp);
      std::vector<int32_t> ranks;
      for (size_t k = 0; k < list.size(); ++k) {
        int64_t rank = r.integer(list[k], at(gp, k));
        if (rank < 0 || rank >= m.worldSize)
          r.fail(gp, "rank " + std::to_string(rank) +
                         " is outside the world of " +
                         std::to_string(m.worldSize) + " ranks");
        if (!seen.insert(int32_t(rank)).second)
          r.fail(gp, "rank " + std::to_string(rank) + " is in two " +
                         it.key() + " groups");
        ranks.push_back(int32_t(rank));
      }
      if (ranks.empty())
        r.fail(gp, "empty group");
      lists.push_back(std::move(ranks));
    }
    if (!lists.empty())
      m.groups[it.key()] = std::move(lists);
  }
}

void parseRanks(const Reader &r, const json &root, Manifest &m) {
  const json &ranks = r.array(r.member(root, "", "ranks"), "ranks");
  // By rank until every rank is known to be listed: a world_size of
  // billions must be an error, not an allocation.
  std::map<int32_t, RankInfo> listed;
  std::map<std::string, Entry> topLevel;
  if (const json *e = r.optMember(root, "entries"))
    topLevel = parseEntries(r, *e, "entries", m);
  // Pipelined programs: the entries of each pp rank.
  std::vector<std::map<std::string, Entry>> stageEntries;
  if (const json *se = r.optMember(root, "stage_entries")) {
    const json &list = r.array(*se, "stage_entries");
    if (int64_t(list.size()) != m.ppSize())
      r.fail("stage_entries", "has " + std::to_string(list.size()) +
                                  " entries for a plan of pp " +
                                  std::to_string(m.ppSize()));
    for (size_t k = 0; k < list.size(); ++k)
      stageEntries.push_back(
          parseEntries(r, list[k], at("stage_entries", k), m));
  }
  int logging = 0;
  for (size_t i = 0; i < ranks.size(); ++i) {
    std::string path = at("ranks", i);
    const json &v = ranks[i];
    int64_t rank = r.integer(r.member(v, path, "rank"), at(path, "rank"));
    if (rank < 0 || rank >= m.worldSize)
      r.fail(path, "rank " + std::to_string(rank) + " is outside the world of " +
                       std::to_string(m.worldSize) + " ranks");
    if (listed.count(int32_t(rank)))
      r.fail(path, "rank " + std::to_string(rank) + " is listed twice");
    RankInfo &info = listed[int32_t(rank)];
    info.rank = int32_t(rank);
    info.binary = r.string(r.member(v, path, "binary"), at(path, "binary"));
    if (const json *l = r.optMember(v, "logs_loss"))
      info.logsLoss = r.boolean(*l, at(path, "logs_loss"));
    logging += info.logsLoss;
    info.entries = topLevel;
    if (!stageEntries.empty())
      info.entries = stageEntries[size_t(m.ppRankOf(info.rank))];
    if (const json *e = r.optMember(v, "entries"))
      info.entries = parseEntries(r, *e, at(path, "entries"), m);
    info.sequenceRanges = {{0, m.paddedSeqLength}};
    if (const json *sr = r.optMember(v, "sequence_ranges")) {
      std::string sp = at(path, "sequence_ranges");
      info.sequenceRanges.clear();
      for (size_t k = 0; k < r.array(*sr, sp).size(); ++k) {
        const json &range = (*sr)[k];
        if (!range.is_array() || range.size() != 2)
          r.fail(at(sp, k), "expected [begin, end]");
        int64_t b = r.integer(range[0], at(sp, k)),
                e = r.integer(range[1], at(sp, k));
        if (b < 0 || b >= e || e > m.paddedSeqLength)
          r.fail(at(sp, k), "range [" + std::to_string(b) + ", " +
                                std::to_string(e) +
                                ") is not inside [0, " +
                                std::to_string(m.paddedSeqLength) + ")");
        info.sequenceRanges.push_back({b, e});
      }
    }
    if (!info.entries.count("forward"))
      r.fail(path, "rank " + std::to_string(rank) +
                       " has no \"forward\" entry");
    for (auto &[name, entry] : info.entries)
      for (const EntryArg &a : entry.args)
        if ((a.kind == ArgKind::Param || a.kind == ArgKind::Grad) &&
            !m.findParam(a.name)->shardOf(info.rank))
          r.fail(path, "entry \"" + name + "\" of rank " +
                           std::to_string(rank) + " takes " +
                           (a.kind == ArgKind::Grad ? "the gradient of " : "") +
                           "parameter \"" + a.name +
                           "\" but the rank holds no shard of it");
    if (info.logsLoss && !info.entries["forward"].hasArg(ArgKind::Loss))
      r.fail(path, "rank " + std::to_string(rank) +
                       " logs the loss but its forward entry has no loss "
                       "argument");
  }
  for (int32_t k = 0; k < m.worldSize; ++k)
    if (!listed.count(k))
      r.fail("ranks", "rank " + std::to_string(k) + " is missing");
  for (auto &[rank, info] : listed)
    m.ranks.push_back(std::move(info));
  if (logging != 1)
    r.fail("ranks", "exactly one rank must have \"logs_loss\": true, found " +
                        std::to_string(logging));
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

Manifest parseManifest(const std::string &text, const std::string &what) {
  Reader r(what);
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception &e) {
    // A syntax error, or a number out of range (out_of_range.406, not a
    // parse_error). e.what() is "[json.exception.parse_error.101] parse
    // error at ...".
    std::string msg = e.what();
    size_t pos = msg.find("] ");
    throw Error(what + ": invalid JSON: " +
                (pos == std::string::npos ? msg : msg.substr(pos + 2)));
  }
  if (!root.is_object())
    r.fail("", "expected a JSON object");
  // Every manifest names its schema: a file that is not one, or one of
  // another version, is refused before anything else is read.
  const json &format = r.member(root, "", "format");
  if (!format.is_string() || format.get<std::string>() != "loom-manifest")
    r.fail("format", "expected \"loom-manifest\", got " + format.dump());
  const json &version = r.member(root, "", "version");
  if (r.integer(version, "version") != 1)
    r.fail("version", "unsupported version " + version.dump() +
                          " (expected 1: recompile with this loom-compile)");

  Manifest m;
  if (const json *b = r.optMember(root, "backend")) {
    m.backend = r.string(*b, "backend");
    if (m.backend != "cpu" && m.backend != "cuda")
      r.fail("backend", "expected \"cpu\" or \"cuda\", got " + b->dump());
  }
  if (const json *model = r.optMember(root, "model"))
    if (const json *f = r.optMember(*model, "family"))
      m.family = r.string(*f, "model.family");
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
  if (const json *p = r.optMember(root, "padded_seq_length")) {
    m.paddedSeqLength = r.positive(*p, "padded_seq_length");
    if (m.paddedSeqLength < m.seqLength)
      r.fail("padded_seq_length",
             std::to_string(m.paddedSeqLength) + " is shorter than "
             "seq_length " + std::to_string(m.seqLength));
  }
  m.numMicrobatches = 1;
  if (const json *n = r.optMember(root, "num_microbatches"))
    m.numMicrobatches = r.positive(*n, "num_microbatches");
  m.vocabSize = r.positive(r.member(root, "", "vocab_size"), "vocab_size");
  if (const json *d = r.optMember(root, "dtype"))
    m.dtype = r.dtype(*d, "dtype");
  if (const json *e = r.optMember(root, "eod_token_id")) {
    int64_t eod = r.integer(*e, "eod_token_id");
    if (eod < 0 || eod >= m.vocabSize)
      r.fail("eod_token_id", "token " + std::to_string(eod) +
                                 " is outside the vocabulary [0, " +
                                 std::to_string(m.vocabSize) + ")");
    m.eodTokenId = eod;
  }
  if (const json *plan = r.optMember(root, "plan")) {
    if (!plan->is_object())
      r.fail("plan", "expected an object");
    for (auto it = plan->begin(); it != plan->end(); ++it)
      if (it.value().is_number_integer())
        m.plan[it.key()] = it.value().get<int64_t>();
  }

  parseGroups(r, root, m);
  if (auto pp = m.groups.find("pp"); pp != m.groups.end()) {
    m.ppRankByRank.assign(size_t(m.worldSize), 0);
    for (const std::vector<int32_t> &g : pp->second)
      for (size_t i = 0; i < g.size(); ++i)
        m.ppRankByRank[size_t(g[i])] = int32_t(i);
  }
  if (const json *g = r.optMember(root, "gradient_group")) {
    m.gradientGroup = r.string(*g, "gradient_group");
    if (m.gradientGroup != "dp" && !m.groups.count(m.gradientGroup))
      r.fail("gradient_group", "\"" + m.gradientGroup +
                                   "\" is not a group kind of \"groups\"");
  }
  parseParams(r, root, m);
  m.indexParams();
  buildHfTensors(r, m);
  parseRanks(r, root, m);

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
