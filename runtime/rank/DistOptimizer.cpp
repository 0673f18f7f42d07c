//===- DistOptimizer.cpp - Slicing of the distributed optimizer -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/DistOptimizer.h"

#include <algorithm>

namespace loom::rank {

int64_t DpPartition::padded() const {
  int64_t n = std::max(elements, alignTo);
  return (n + dpSize - 1) / dpSize * dpSize;
}

int64_t DpPartition::shardSize() const { return padded() / dpSize; }

int64_t DpPartition::begin(int64_t r) const {
  return std::min(r * shardSize(), elements);
}

int64_t DpPartition::end(int64_t r) const {
  return std::min((r + 1) * shardSize(), elements);
}

std::vector<FlatPiece> ownedPieces(const std::vector<int64_t> &offsets,
                                   const std::vector<int64_t> &sizes,
                                   int64_t begin, int64_t end) {
  std::vector<FlatPiece> out;
  for (size_t i = 0; i < offsets.size(); ++i) {
    int64_t lo = std::max(begin, offsets[i]);
    int64_t hi = std::min(end, offsets[i] + sizes[i]);
    if (lo < hi)
      out.push_back({i, lo - offsets[i], lo, hi - lo});
  }
  return out;
}

std::vector<FlatRun> mergeRuns(std::vector<FlatRun> runs) {
  std::sort(runs.begin(), runs.end(), [](const FlatRun &a, const FlatRun &b) {
    return a.begin < b.begin;
  });
  std::vector<FlatRun> out;
  for (const FlatRun &r : runs) {
    if (r.begin >= r.end)
      continue;
    if (!out.empty() && r.begin <= out.back().end)
      out.back().end = std::max(out.back().end, r.end);
    else
      out.push_back(r);
  }
  return out;
}

std::vector<FlatRun> complementRuns(const std::vector<FlatRun> &covered,
                                    int64_t end) {
  std::vector<FlatRun> out;
  int64_t at = 0;
  for (const FlatRun &r : mergeRuns(covered)) {
    if (r.begin > at)
      out.push_back({at, std::min(r.begin, end)});
    at = std::max(at, r.end);
  }
  if (at < end)
    out.push_back({at, end});
  return mergeRuns(out);
}

std::vector<int64_t> scatterCounts(const FlatRun &run, const DpPartition &p) {
  std::vector<int64_t> counts;
  int64_t shard = p.shardSize();
  for (int64_t k = 0; k < p.dpSize; ++k) {
    int64_t lo = std::max(run.begin, k * shard);
    int64_t hi = std::min(run.end, (k + 1) * shard);
    counts.push_back(std::max<int64_t>(0, hi - lo));
  }
  return counts;
}

} // namespace loom::rank
