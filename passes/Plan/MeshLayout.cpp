//===- MeshLayout.cpp - Plan -> mesh axes -----------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/MeshLayout.h"

#include <algorithm>
#include <map>

using namespace loom;
using namespace loom::plan;

std::optional<int64_t> MeshAxes::axis(std::string_view token) const {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == token)
      return int64_t(i);
  return std::nullopt;
}

/// Splits "tp-cp-ep-dp-pp" and keeps the tokens of one world, reversed:
///   sizes {tp:4, cp:1, dp:2, pp:2}  ->  [pp, dp, cp, tp], shape [2, 2, 1, 4]
static MeshAxes axesFor(const std::string &order,
                        const std::map<std::string, int64_t> &sizes) {
  MeshAxes axes;
  size_t start = 0;
  while (start <= order.size()) {
    size_t end = order.find('-', start);
    if (end == std::string::npos)
      end = order.size();
    std::string token = order.substr(start, end - start);
    if (auto it = sizes.find(token); it != sizes.end()) {
      axes.names.push_back(token);
      axes.shape.push_back(it->second);
    }
    start = end + 1;
  }
  // Megatron appends tokens of size 1 that the order leaves out; their place
  // does not change any rank, so they go outermost.
  for (const auto &[token, size] : sizes)
    if (!axes.axis(token)) {
      axes.names.push_back(token);
      axes.shape.push_back(size);
    }
  std::reverse(axes.names.begin(), axes.names.end());
  std::reverse(axes.shape.begin(), axes.shape.end());
  return axes;
}

MeshAxes loom::plan::denseMeshAxes(const rankgen::ParallelConfig &config) {
  return axesFor(config.order, {{"tp", config.tp},
                                {"cp", config.cp},
                                {"dp", config.dp},
                                {"pp", config.pp}});
}

MeshAxes loom::plan::expertMeshAxes(const rankgen::ParallelConfig &config,
                                    int64_t expertDp) {
  return axesFor(config.order, {{"tp", config.etp},
                                {"ep", config.ep},
                                {"dp", expertDp},
                                {"pp", config.pp}});
}
