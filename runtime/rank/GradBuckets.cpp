//===- GradBuckets.cpp - The flat gradient buffer's buckets ---------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/GradBuckets.h"

#include "runtime/rank/StageSharing.h"

#include <algorithm>

namespace loom::rank {

namespace {

/// Elements of the shards of `group`'s parameters that `rank` holds.
int64_t groupElements(const Manifest &m, int32_t rank,
                      const std::string &group) {
  int64_t n = 0;
  for (const ParamSpec &p : m.params)
    if (const Shard *s = p.shardOf(rank); s && m.gradientGroupOf(p) == group)
      n += numElements(s->box.shape);
  return n;
}

} // namespace

std::vector<GradBucket> gradBuckets(const Manifest &m, int32_t rank,
                                    bool distributed) {
  StageSharing sharing = findStageSharing(m, rank);
  std::vector<std::string> groups = {m.gradientGroup};
  for (const ParamSpec &p : m.params)
    if (std::find(groups.begin(), groups.end(), m.gradientGroupOf(p)) ==
        groups.end())
      groups.push_back(m.gradientGroupOf(p));

  std::vector<GradBucket> buckets;
  int64_t base = 0, stateBase = 0;
  for (const std::string &group : groups) {
    GradBucket b;
    b.group = group;
    b.params = sharing.params; // only the gradient group's own shared ones
    b.params.erase(std::remove_if(b.params.begin(), b.params.end(),
                                  [&](size_t i) {
                                    return m.gradientGroupOf(m.params[i]) !=
                                           group;
                                  }),
                   b.params.end());
    for (size_t i = 0; i < m.params.size(); ++i)
      if (!sharing.shares(i) && m.params[i].shardOf(rank) &&
          m.gradientGroupOf(m.params[i]) == group)
        b.params.push_back(i);
    if (b.params.empty() && group != m.gradientGroup)
      continue;
    int64_t groupSize = 1;
    if (auto g = m.groupOf(group, rank)) {
      groupSize = int64_t(g->first->size());
      b.groupRank = g->second;
    }
    b.partition = {groupElements(m, rank, group), distributed ? groupSize : 1};
    if (b.partition.dpSize > 1 && group == m.gradientGroup)
      if (auto embedding = m.groupOf("embedding", rank))
        if (embedding->first->size() > 1)
          for (int32_t peer : *embedding->first)
            b.partition.alignTo =
                std::max(b.partition.alignTo, groupElements(m, peer, group));
    b.base = base;
    b.stateBase = stateBase;
    base = b.end();
    stateBase += b.partition.shardSize();
    buckets.push_back(std::move(b));
  }
  return buckets;
}

int64_t flatElements(const std::vector<GradBucket> &buckets) {
  return buckets.empty() ? 0 : buckets.back().end();
}

int64_t stateElements(const std::vector<GradBucket> &buckets) {
  return buckets.empty()
             ? 0
             : buckets.back().stateBase + buckets.back().partition.shardSize();
}

void checkBucketGroups(const Manifest &m, int32_t rank,
                       const std::vector<GradBucket> &buckets) {
  for (const GradBucket &b : buckets) {
    auto g = m.groupOf(b.group, rank);
    if (!g)
      continue;
    std::string what = b.group == m.gradientGroup
                           ? std::string("a data-parallel group")
                           : "each " + b.group + " group";
    for (const ParamSpec &p : m.params) {
      if (m.gradientGroupOf(p) != b.group)
        continue;
      for (int32_t peer : *g->first) {
        const Shard *x = p.shardOf(rank), *y = p.shardOf(peer);
        if (!x && !y)
          continue;
        if (!x || !y || x->box != y->box)
          throw Error("--use-distributed-optimizer needs the ranks of " + what +
                      " to hold the same shards, but ranks " +
                      std::to_string(rank) + " and " + std::to_string(peer) +
                      " hold different parts of \"" + p.name + "\"");
      }
    }
  }
}

} // namespace loom::rank
