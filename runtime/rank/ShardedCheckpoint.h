//===- ShardedCheckpoint.h - One checkpoint file per rank -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// --save-sharded DIR writes what the ranks hold, as they hold it, with no
// gathering and each piece once: DIR/rank-%05d.safetensors per rank (the
// parameter shards whose box it is the first listed holder of, under Loom
// names, and with --train its slice of the flat f32 optimizer state when
// no other rank holds the same: every rank with the distributed optimizer,
// else data-parallel rank 0) and DIR/index.json (the plan, what every file
// holds, the training state). Data-parallel replicas therefore write the
// model once, as Megatron's distributed checkpoints do. Such a checkpoint
// loads back into the same plan only; the full safetensors file
// (--save/--load) moves between plans.
//
// This file is the index: what it says, and the checks that name the first
// difference between the saving plan and the loading one.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H
#define LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H

#include "runtime/rank/Manifest.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::rank {

/// The optimizer state a rank holds: elements [begin, end) of the flat
/// buffer of its parameter shards (`elements` long; parameters shared with
/// another pipeline stage first, then manifest order).
struct FlatSlice {
  int64_t elements = 0, begin = 0, end = 0;
};

/// Rank `rank`'s slice: everything, or with the distributed optimizer and
/// dp > 1 its flatPartition slice.
FlatSlice optimizerSlice(const Manifest &m, int32_t rank, bool distributed);

/// "rank-00003.safetensors".
std::string shardFileName(int32_t rank);

/// Whether `rank` writes its optimizer slice: always with the distributed
/// optimizer and dp > 1; otherwise only data-parallel rank 0 (the others'
/// flat buffers are equal to it).
bool writesOptimizerSlice(const Manifest &m, int32_t rank, bool distributed);

/// The tensor names of the optimizer slice in a rank file.
extern const char *const kShardedExpAvg;
extern const char *const kShardedExpAvgSq;
extern const char *const kShardedMainParam;

/// The text of DIR/index.json. `trainState` is TrainState::toJson() or
/// empty without --train.
std::string shardedIndexJson(const Manifest &m, bool distributed,
                             const std::string &trainState);

struct ShardedIndex {
  bool distributed = false;
  std::string trainState; // empty: saved without --train
  /// By rank (with a train state): the slice its file holds, if any.
  std::vector<std::optional<FlatSlice>> slices;
};

/// Reads DIR/index.json and checks that it was saved under the plan of `m`
/// (world size, plan sizes, the boxes and dtypes of the shards each file
/// holds) and that the files hold every box. Version 1 indexes (every rank
/// wrote all it held) load too. Throws Error naming the first mismatch.
ShardedIndex readShardedIndex(const std::string &dir, const Manifest &m);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H
