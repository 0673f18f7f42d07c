//===- ShardedCheckpoint.h - One checkpoint file per rank -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// --save-sharded DIR writes what every rank holds, as it holds it, with no
// gathering: DIR/rank-%05d.safetensors per rank (its parameter shards under
// Loom names, and with --train its slice of the flat f32 optimizer state)
// and DIR/index.json (the plan, every rank's shard boxes and optimizer
// slice, the training state). Such a checkpoint loads back into the same
// plan only; the full safetensors file (--save/--load) moves between plans.
//
// This file is the index: what it says, and the checks that name the first
// difference between the saving plan and the loading one.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_DRIVER_SHARDEDCHECKPOINT_H
#define LOOM_RUNTIME_DRIVER_SHARDEDCHECKPOINT_H

#include "runtime/driver/Manifest.h"

#include <string>
#include <vector>

namespace loom::driver {

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
  std::string trainState;       // empty: saved without --train
  std::vector<FlatSlice> slices; // by rank (with a train state)
};

/// Reads DIR/index.json and checks that it was saved under the plan of `m`
/// (world size, plan sizes, every rank's shard boxes and dtypes). Throws
/// Error naming the first mismatch.
ShardedIndex readShardedIndex(const std::string &dir, const Manifest &m);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_SHARDEDCHECKPOINT_H
