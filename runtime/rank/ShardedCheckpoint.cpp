//===- ShardedCheckpoint.cpp - One checkpoint file per rank ---------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/ShardedCheckpoint.h"

#include "runtime/rank/MappedFile.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <set>

using json = nlohmann::json;

namespace loom::rank {

const char *const kShardedExpAvg = "exp_avg";
const char *const kShardedExpAvgSq = "exp_avg_sq";
const char *const kShardedMainParam = "main_param";

FlatSlice optimizerSlice(const GradBucket &b) {
  return {b.partition.elements, b.sliceBegin(), b.sliceEnd()};
}

std::string shardFileName(int32_t rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank-%05d.safetensors", rank);
  return name;
}

bool writesOptimizerSlice(const GradBucket &b) {
  return b.sharded() || b.groupRank == 0;
}

std::string optimizerKey(const Manifest &m, const std::string &group) {
  return group == m.gradientGroup ? "optimizer" : "optimizer." + group;
}

std::string shardedIndexJson(const Manifest &m, bool distributed,
                             const std::string &trainState) {
  json ranks = json::array();
  for (const RankInfo &r : m.ranks) {
    json params = json::array();
    for (const ParamSpec &p : m.params)
      if (const Shard *s = p.shardOf(r.rank); s && p.firstHolder(*s) == r.rank)
        params.push_back({{"name", p.name},
                          {"dtype", manifestDTypeName(p.dtype)},
                          {"offset", s->box.offset},
                          {"shape", s->box.shape}});
    json rank = {{"rank", r.rank},
                 {"file", shardFileName(r.rank)},
                 {"params", params}};
    if (!trainState.empty())
      for (const GradBucket &b : gradBuckets(m, r.rank, distributed))
        if (writesOptimizerSlice(b)) {
          FlatSlice s = optimizerSlice(b);
          rank[optimizerKey(m, b.group)] = {
              {"elements", s.elements}, {"begin", s.begin}, {"end", s.end}};
        }
    ranks.push_back(rank);
  }
  // Version 3: the experts' optimizer state in a bucket of its own; the
  // index of a model without experts is version 2's.
  json index = {{"format", "loom-sharded-checkpoint"},
                {"version", m.hasOwnGradientGroups() ? 3 : 2},
                {"family", m.family},
                {"world_size", m.worldSize},
                {"plan", m.plan},
                {"distributed_optimizer", distributed},
                {"train_state", trainState.empty() ? json(nullptr)
                                                   : json::parse(trainState)},
                {"ranks", ranks}};
  return index.dump(1) + "\n";
}

namespace {

std::string boxString(const Shape &offset, const Shape &shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d)
    s += (d ? ", " : "") + std::to_string(offset[d]) + ":" +
         std::to_string(offset[d] + shape[d]);
  return s + "]";
}

std::string planString(int64_t worldSize,
                       const std::map<std::string, int64_t> &plan) {
  std::string s;
  for (const auto &[k, v] : plan)
    s += k + " " + std::to_string(v) + ", ";
  return s + "world size " + std::to_string(worldSize);
}

} // namespace

ShardedIndex readShardedIndex(const std::string &dir, const Manifest &m) {
  std::string path = dir + "/index.json";
  std::string what = "sharded checkpoint " + dir;
  if (!fileExists(path))
    throw Error(what + " has no index.json (not a sharded checkpoint, or "
                "its save did not finish)");
  json j;
  try {
    MappedFile file(path, "checkpoint index");
    j = json::parse(file.data(), file.data() + file.size());
  } catch (const json::exception &) {
    throw Error(what + ": index.json is not JSON");
  }
  auto fail = [&](const std::string &why) { return Error(what + ": " + why); };
  try {
    int version = j.value("version", 0);
    if (j.value("format", "") != "loom-sharded-checkpoint" || version < 1 ||
        version > 3)
      throw fail("index.json is not a loom-sharded-checkpoint of version 1, "
                 "2 or 3");
    auto plan = j.at("plan").get<std::map<std::string, int64_t>>();
    int64_t worldSize = j.at("world_size").get<int64_t>();
    if (plan != m.plan || worldSize != m.worldSize)
      throw fail("saved under the plan " + planString(worldSize, plan) +
                 ", but this program is " + planString(m.worldSize, m.plan) +
                 "; a sharded checkpoint loads into its own plan only (save "
                 "a full checkpoint with --save and --load it to change "
                 "plans)");
    const json &ranks = j.at("ranks");
    if (!ranks.is_array() || ranks.size() != m.ranks.size())
      throw fail("index.json lists " + std::to_string(ranks.size()) +
                 " ranks, expected " + std::to_string(m.ranks.size()));
    ShardedIndex index;
    index.version = version;
    index.distributed = j.at("distributed_optimizer").get<bool>();
    if (!j.at("train_state").is_null())
      index.trainState = j.at("train_state").dump();
    // (param, rank) pairs some file holds: every box needs its writer's.
    std::set<std::pair<const ParamSpec *, int32_t>> held;
    for (const RankInfo &r : m.ranks) {
      const json &saved = ranks.at(r.rank);
      if (saved.at("rank").get<int32_t>() != r.rank)
        throw fail("index.json lists its ranks out of order");
      for (const json &e : saved.at("params")) {
        std::string name = e.at("name").get<std::string>();
        const ParamSpec *p = m.findParam(name);
        const Shard *s = p ? p->shardOf(r.rank) : nullptr;
        if (!s)
          throw fail("rank " + std::to_string(r.rank) + " saved a shard of \"" +
                     name + "\", which it does not hold here");
        if (!held.insert({p, r.rank}).second)
          throw fail("rank " + std::to_string(r.rank) + " saved \"" + name +
                     "\" twice");
        Shape offset = e.at("offset").get<Shape>();
        Shape shape = e.at("shape").get<Shape>();
        std::string dtype = e.at("dtype").get<std::string>();
        if (offset != s->box.offset || shape != s->box.shape)
          throw fail("rank " + std::to_string(r.rank) + " saved \"" + name +
                     "\" " + boxString(offset, shape) + ", but holds " +
                     boxString(s->box.offset, s->box.shape) + " here");
        if (dtype != manifestDTypeName(p->dtype))
          throw fail("rank " + std::to_string(r.rank) + " saved \"" + name +
                     "\" as " + dtype + ", but it is " +
                     manifestDTypeName(p->dtype) + " here");
      }
      if (index.trainState.empty())
        continue;
      index.slices.emplace_back();
      // Before version 3 a rank's experts and dense parameters shared one
      // slice, in manifest order: loadShardedOptimizer refuses that.
      if (version < 3 && m.hasOwnGradientGroups())
        continue;
      for (const GradBucket &b : gradBuckets(m, r.rank, false)) {
        auto o = saved.find(optimizerKey(m, b.group));
        if (o == saved.end())
          continue;
        FlatSlice slice{o->at("elements").get<int64_t>(),
                        o->at("begin").get<int64_t>(),
                        o->at("end").get<int64_t>()};
        if (slice.elements != b.partition.elements || slice.begin < 0 ||
            slice.begin > slice.end || slice.end > slice.elements)
          throw fail("rank " + std::to_string(r.rank) + " has a bad " +
                     o.key() + " slice in index.json");
        index.slices.back()[b.group] = slice;
      }
    }
    for (const ParamSpec &p : m.params)
      for (const Shard *s : p.distinctShards())
        if (!held.count({&p, s->rank}))
          throw fail("rank " + std::to_string(s->rank) +
                     " saved no shard of \"" + p.name + "\"");
    return index;
  } catch (const json::exception &e) {
    throw fail(std::string("malformed index.json (") + e.what() + ")");
  }
}

} // namespace loom::rank
