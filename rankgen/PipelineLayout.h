//===- PipelineLayout.h - Layers of each pipeline stage ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Which transformer layers each (pp rank, virtual stage) builds, exactly as
// Megatron-Core's get_num_layers_to_build and get_transformer_layer_offset
// assign them. A model of L layers over pp ranks with vpp virtual stages each
// has pp*vpp stages; virtual stage s = vp*pp + r runs on pp rank r as its
// model chunk vp, and the layers go to the stages in virtual-stage order:
//
//   L = 16, pp 4, vpp 2:          (r, v) holds 8v+2r, 8v+2r+1
//   L = 16, pp 4, first 1, last 3: [0] [1..6] [7..12] [13..15]
//   L = 14, pp 4, embedding + loss counted as layers:
//                                 [0,1,2] [3..6] [7..10] [11..13]
//   layout "Et|tt|tt|tL":         [0] [1,2] [3,4] [5]
//
// Four ways to say the split, as Megatron-LM's flags: an even split (with
// the embedding and/or the loss optionally counted as one layer each),
// uneven first and last stages, or a layout string. Where Megatron-Core
// itself fails on a well-defined split (uneven first and last stages with
// vpp at pp 2: a division by the zero middle stages), the layers still go to
// the stages in virtual-stage order. Splits that cannot work are errors that
// name the numbers.
//
// Like the rest of the library this is plain C++17 without LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PIPELINELAYOUT_H
#define LOOM_RANKGEN_PIPELINELAYOUT_H

#include "rankgen/Result.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom {
namespace rankgen {

/// Upper bound on layers and on a layout string's expanded length: layer id
/// lists are materialized.
constexpr int64_t kMaxPipelineLayers = int64_t(1) << 20;

/// Megatron-LM's layer-split flags.
struct PipelineLayoutOptions {
  int64_t pp = 1;
  /// Virtual stages per pp rank (--virtual-pipeline-model-parallel-size);
  /// 0 when not given (then 1, or what the layout or layersPerVirtualStage
  /// say).
  int64_t vpp = 0;
  int64_t numLayers = 0;
  /// --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers.
  std::optional<int64_t> firstStageLayers;
  std::optional<int64_t> lastStageLayers;
  /// --account-for-embedding-in-pipeline-split / ...-loss-...: the embedding
  /// (loss) takes one layer's place on the first (last) stage.
  bool accountForEmbedding = false;
  bool accountForLoss = false;
  /// --num-layers-per-virtual-pipeline-stage: vpp = (L' / pp) / this.
  std::optional<int64_t> layersPerVirtualStage;
  /// --pipeline-model-parallel-layout; empty when not given.
  std::string layout;
};

/// One stage: the layers pp rank `ppRank` builds as model chunk `vpStage`.
struct PipelineStage {
  int64_t ppRank = 0;
  int64_t vpStage = 0;
  /// 0-based global layer indices, ascending and contiguous (Megatron's
  /// layer_number is one more).
  std::vector<int64_t> layerIds;
  bool embedding = false; ///< holds the embedding (Megatron's pre_process)
  bool loss = false;      ///< holds the output layer and loss (post_process)
};

/// Expands a --pipeline-model-parallel-layout string into its stages in
/// virtual-stage order, each a string of 'E' (embedding), 't' (transformer
/// layer), 'L' (loss) and 'm' (MTP), as Megatron's parse_str_to_list does:
/// commas are dropped, then every `(...)*n` is unrolled, then every `x*n`,
/// then the string is split at '|'. "E(tt|)*2L" gives {"Ett", "tt", "L"}.
Result<std::vector<std::string>>
parsePipelineLayoutString(const std::string &layout);

/// The layers of every stage of a pipeline.
class PipelineLayout {
public:
  /// Validates the options as Megatron-LM does (arguments.py and
  /// TransformerConfig) and assigns the layers.
  static Result<PipelineLayout> create(const PipelineLayoutOptions &options);

  int64_t pp() const { return pp_; }
  int64_t vpp() const { return vpp_; }
  int64_t numLayers() const { return numLayers_; }

  /// Every stage, ordered by pp rank, then virtual stage.
  const std::vector<PipelineStage> &stages() const { return stages_; }
  const PipelineStage &stage(int64_t ppRank, int64_t vpStage) const {
    return stages_[static_cast<size_t>(ppRank * vpp_ + vpStage)];
  }

private:
  int64_t pp_ = 1, vpp_ = 1, numLayers_ = 0;
  std::vector<PipelineStage> stages_;
};

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PIPELINELAYOUT_H
