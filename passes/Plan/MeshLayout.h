//===- MeshLayout.h - Plan -> mesh axes -------------------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The correspondence between a parallel plan and upstream `mesh.mesh` axes.
// Megatron numbers ranks with the order's first token fastest:
//
//   order tp-cp-ep-dp-pp:  rank = tp + cp*TP + dp*TP*CP + pp*TP*CP*DP
//
// A mesh's linear process index is row-major (last axis fastest), so the mesh
// axes are the order's tokens reversed: shape [PP, DP, CP, TP]. Axes of size
// 1 are kept so an axis index never depends on the sizes.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PLAN_MESHLAYOUT_H
#define LOOM_PASSES_PLAN_MESHLAYOUT_H

#include "rankgen/ParallelLayout.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::plan {

struct MeshAxes {
  /// Axis names, outermost first ("pp", "dp", "cp", "tp").
  std::vector<std::string> names;
  /// Axis sizes, in the same order.
  std::vector<int64_t> shape;

  /// Index of the axis named `token`, if any.
  std::optional<int64_t> axis(std::string_view token) const;
};

/// Axes of the dense world (tp, cp, dp, pp). `config` must be complete (see
/// ParallelLayout::config()).
MeshAxes denseMeshAxes(const rankgen::ParallelConfig &config);

/// Axes of the expert world (tp = etp, ep, dp = edp, pp).
MeshAxes expertMeshAxes(const rankgen::ParallelConfig &config,
                        int64_t expertDp);

} // namespace loom::plan

#endif // LOOM_PASSES_PLAN_MESHLAYOUT_H
