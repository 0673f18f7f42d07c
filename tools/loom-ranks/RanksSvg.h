//===- RanksSvg.h - Draw process groups as an SVG picture -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// One panel per group kind: the ranks laid out as a grid (row-major, a fixed
// number of ranks per row, like GPUs in nodes), each cell coloured by the
// group it belongs to and labelled with its rank and group index, with a
// legend listing the groups. And a pipeline schedule as a timeline: one row
// per pp rank, one box per forward or backward step, the gaps between them
// the pipeline bubble.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOMRANKS_RANKSSVG_H
#define LOOM_TOOLS_LOOMRANKS_RANKSSVG_H

#include "rankgen/PipelineTimeline.h"
#include "rankgen/RankGenerator.h"

#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace loom {
namespace ranks {

/// One panel: a named list of groups.
struct SvgPanel {
  std::string name;  ///< short key, e.g. "tp" or "expert:tp-ep"
  std::string title; ///< Megatron's name, e.g. "tensor model-parallel"
  const rankgen::GroupList *groups;
};

/// Writes a standalone SVG document. `heading` is the picture's title line,
/// `columns` the number of ranks per grid row.
void writeSvg(llvm::raw_ostream &os, const std::string &heading,
              int64_t worldSize, int64_t columns,
              const std::vector<SvgPanel> &panels);

/// Writes a standalone SVG document of a schedule's timeline.
void writeScheduleSvg(llvm::raw_ostream &os, const std::string &heading,
                      const rankgen::PipelineTimeline &timeline);

} // namespace ranks
} // namespace loom

#endif // LOOM_TOOLS_LOOMRANKS_RANKSSVG_H
