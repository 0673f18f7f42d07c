//===- StageSharing.cpp - Parameters shared by pipeline stages ------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/StageSharing.h"

#include <algorithm>

namespace loom::rank {

namespace {

std::string rankList(const std::vector<int32_t> &ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i)
    s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

} // namespace

bool StageSharing::shares(size_t param) const {
  return std::binary_search(params.begin(), params.end(), param);
}

StageSharing findStageSharing(const Manifest &m, int32_t rank) {
  StageSharing sharing;
  auto pp = m.groupOf("pp", rank);
  if (!pp)
    return sharing;
  auto embedding = m.groupOf("embedding", rank);
  std::vector<int32_t> expected;
  if (embedding)
    expected = *embedding->first;
  std::sort(expected.begin(), expected.end());

  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamSpec &p = m.params[i];
    const Shard *mine = p.shardOf(rank);
    if (!mine)
      continue;
    std::vector<int32_t> holders;
    for (int32_t peer : *pp->first) {
      const Shard *theirs = p.shardOf(peer);
      if (!theirs)
        continue;
      if (mine->box != theirs->box)
        throw Error("parameter \"" + p.name + "\": ranks " +
                    std::to_string(rank) + " and " + std::to_string(peer) +
                    " of pipeline group " + rankList(*pp->first) +
                    " hold different parts of it; pipeline stages can only "
                    "share a parameter whole");
      holders.push_back(peer);
    }
    if (holders.size() < 2)
      continue;
    std::sort(holders.begin(), holders.end());
    if (holders != expected)
      throw Error(
          "parameter \"" + p.name + "\" is held by ranks " +
          rankList(holders) + " of pipeline group " + rankList(*pp->first) +
          ", but " +
          (embedding ? "the embedding group of rank " + std::to_string(rank) +
                           " is " + rankList(*embedding->first)
                     : "no embedding group holds rank " +
                           std::to_string(rank)) +
          ": copies on different pipeline stages must be exactly an "
          "embedding group, which sums their gradients");
    sharing.params.push_back(i);
  }
  if (!sharing.params.empty())
    sharing.group = embedding->first;
  return sharing;
}

} // namespace loom::rank
