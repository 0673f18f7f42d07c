//===- Manifest.cpp - The manifest's types --------------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// What the types of Manifest.h answer; ManifestJson.cpp reads and writes
// them.
//
//===----------------------------------------------------------------------===//

#include "runtime/manifest/Manifest.h"

#include <algorithm>

namespace loom::manifest {

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

std::optional<loomrt_dtype> parseManifestDType(const std::string &name) {
  for (loomrt_dtype dtype : {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16})
    if (name == manifestDTypeName(dtype))
      return dtype;
  return std::nullopt;
}

const char *manifestDTypeName(loomrt_dtype dtype) {
  return dtype == LOOMRT_BF16 ? "bf16" : dtype == LOOMRT_F16 ? "f16" : "f32";
}

// The schema's spelling of each argument kind but Other.
static const std::pair<const char *, ArgKind> kArgKinds[] = {
    {"tokens", ArgKind::Tokens}, {"labels", ArgKind::Labels},
    {"loss_mask", ArgKind::LossMask}, {"param", ArgKind::Param},
    {"loss", ArgKind::Loss}, {"comm", ArgKind::Comm},
    {"grad_scale", ArgKind::GradScale}, {"grad", ArgKind::Grad}};

ArgKind parseArgKind(const std::string &name) {
  for (const auto &[spelling, kind] : kArgKinds)
    if (name == spelling)
      return kind;
  return ArgKind::Other;
}

const char *argKindName(ArgKind kind) {
  for (const auto &[spelling, k] : kArgKinds)
    if (k == kind)
      return spelling;
  return nullptr;
}

Shape HfTensor::fileShape() const {
  Shape s = shape;
  s[0] = fileRows;
  return s;
}

std::string HfTensor::expertName(int64_t e) const {
  static const std::string kExperts = ".experts.";
  size_t at = name.rfind(kExperts);
  if (at == std::string::npos)
    return name + "." + std::to_string(e);
  size_t after = at + kExperts.size();
  return name.substr(0, after) + std::to_string(e) + "." + name.substr(after);
}

std::vector<std::pair<std::string, Shape>> HfTensor::fileTensors() const {
  if (experts > 0) {
    std::vector<std::pair<std::string, Shape>> out;
    for (int64_t e = 0; e < experts; ++e)
      out.emplace_back(expertName(e), expertShape());
    return out;
  }
  if (padded())
    return {{name, fileShape()}, {paddingName(), paddingShape()}};
  return {{name, shape}};
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
                     [](const EntryArg &a) { return a.stacked; });
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

} // namespace loom::manifest
