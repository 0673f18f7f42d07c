//===- ChunkOrder.cpp - Orders of a tensor dim's chunks ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "dialects/Tfm/ChunkOrder.h"

#include <numeric>

using namespace llvm;

SmallVector<int64_t> loom::tfm::zigzagOrder(int64_t n) {
  SmallVector<int64_t> order;
  for (int64_t r = 0; r < n; ++r) {
    order.push_back(r);
    order.push_back(2 * n - 1 - r);
  }
  return order;
}

std::optional<int64_t> loom::tfm::zigzagPairs(ArrayRef<int64_t> order) {
  if (order.size() < 4 || order.size() % 2)
    return std::nullopt;
  int64_t n = int64_t(order.size()) / 2;
  if (ArrayRef<int64_t>(zigzagOrder(n)) != order)
    return std::nullopt;
  return n;
}

bool loom::tfm::isPermutation(ArrayRef<int64_t> order) {
  SmallVector<bool> seen(order.size(), false);
  for (int64_t i : order) {
    if (i < 0 || i >= int64_t(order.size()) || seen[i])
      return false;
    seen[i] = true;
  }
  return true;
}

SmallVector<int64_t> loom::tfm::refineChunkOrder(ArrayRef<int64_t> order,
                                                 int64_t factor) {
  SmallVector<int64_t> fine;
  for (int64_t chunk : order)
    for (int64_t i = 0; i < factor; ++i)
      fine.push_back(chunk * factor + i);
  return fine;
}

/// Whether `order` is `coarse` refined by `m`: every run of m stored chunks
/// is one run of m consecutive global chunks starting at a multiple of m.
static bool refinesBy(ArrayRef<int64_t> order, int64_t m) {
  for (size_t b = 0; b < order.size(); b += m) {
    if (order[b] % m)
      return false;
    for (int64_t i = 1; i < m; ++i)
      if (order[b + i] != order[b] + i)
        return false;
  }
  return true;
}

SmallVector<int64_t> loom::tfm::canonicalChunkOrder(ArrayRef<int64_t> order) {
  int64_t k = int64_t(order.size());
  // The largest m with order a refinement of an order of k/m chunks.
  for (int64_t m = k; m >= 1; --m) {
    if (k % m || !refinesBy(order, m))
      continue;
    SmallVector<int64_t> coarse;
    for (int64_t b = 0; b < k; b += m)
      coarse.push_back(order[b] / m);
    if (coarse.size() <= 1)
      return {};
    return coarse;
  }
  return {};
}

/// Both orders over one chunk count (their least common multiple); the
/// natural order of that count stands in for an empty one.
static std::pair<SmallVector<int64_t>, SmallVector<int64_t>>
commonRefinement(ArrayRef<int64_t> a, ArrayRef<int64_t> b) {
  int64_t ka = std::max<int64_t>(1, a.size()), kb = std::max<int64_t>(1, b.size());
  int64_t k = std::lcm(ka, kb);
  SmallVector<int64_t> ia(a), ib(b);
  if (ia.empty())
    ia = {0};
  if (ib.empty())
    ib = {0};
  return {loom::tfm::refineChunkOrder(ia, k / ka),
          loom::tfm::refineChunkOrder(ib, k / kb)};
}

SmallVector<int64_t>
loom::tfm::composeChunkOrders(ArrayRef<int64_t> stored,
                              ArrayRef<int64_t> permutation) {
  auto [s, p] = commonRefinement(stored, permutation);
  SmallVector<int64_t> result;
  for (int64_t j : p)
    result.push_back(s[j]);
  return canonicalChunkOrder(result);
}

SmallVector<int64_t> loom::tfm::chunkOrderBetween(ArrayRef<int64_t> from,
                                                  ArrayRef<int64_t> to) {
  // from[o[j]] = to[j]: o = from^-1 . to.
  auto [f, t] = commonRefinement(from, to);
  SmallVector<int64_t> inverse(f.size());
  for (auto [j, chunk] : llvm::enumerate(f))
    inverse[chunk] = int64_t(j);
  SmallVector<int64_t> o;
  for (int64_t chunk : t)
    o.push_back(inverse[chunk]);
  return canonicalChunkOrder(o);
}
