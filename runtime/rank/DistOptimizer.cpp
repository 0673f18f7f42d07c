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

} // namespace loom::rank
