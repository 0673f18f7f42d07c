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
// model once, as Megatron's distributed checkpoints do. The optimizer state
// is a slice per gradient bucket (GradBuckets.h): a model with experts has
// theirs apart, written by each expert data-parallel group. Such a checkpoint
// loads back into the same plan only; the full safetensors file
// (--save/--load) moves between plans.
//
// This file is the index: what it says, and the checks that name the first
// difference between the saving plan and the loading one.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H
#define LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H

#include "runtime/rank/GradBuckets.h"
#include "runtime/rank/Manifest.h"

#include <map>
#include <string>
#include <vector>

namespace loom::rank {

/// The optimizer state a rank holds of one gradient bucket: elements
/// [begin, end) of the bucket (`elements` long).
struct FlatSlice {
  int64_t elements = 0, begin = 0, end = 0;
};

/// A bucket's slice: all of it, or with the distributed optimizer its
/// slice over the bucket's group.
FlatSlice optimizerSlice(const GradBucket &b);

/// "rank-00003.safetensors".
std::string shardFileName(int32_t rank);

/// Whether a rank writes its slice of bucket `b`: always when the
/// distributed optimizer slices it; otherwise only the first rank of the
/// bucket's group (the others' state is equal to it).
bool writesOptimizerSlice(const GradBucket &b);

/// The index key of a bucket's slice, which also begins the names of its
/// tensors in the rank file ("<key>.exp_avg", ...): "optimizer" for the
/// gradient group's bucket, "optimizer.<group>" for another (the experts':
/// "optimizer.expert:dp").
std::string optimizerKey(const Manifest &m, const std::string &group);

/// The tensors of an optimizer slice, after its key and a dot.
extern const char *const kShardedExpAvg;
extern const char *const kShardedExpAvgSq;
extern const char *const kShardedMainParam;

/// The text of DIR/index.json. `trainState` is TrainState::toJson() or
/// empty without --train.
std::string shardedIndexJson(const Manifest &m, bool distributed,
                             const std::string &trainState);

struct ShardedIndex {
  int version = 0;
  bool distributed = false;
  std::string trainState; // empty: saved without --train
  /// By rank (with a train state): the slices its file holds, by the group
  /// kind of their bucket.
  std::vector<std::map<std::string, FlatSlice>> slices;
};

/// Reads DIR/index.json and checks that it was saved under the plan of `m`
/// (world size, plan sizes, the boxes and dtypes of the shards each file
/// holds) and that the files hold every box. Version 1 indexes (every rank
/// wrote all it held) and version 2 (one bucket) load too; version 3 has a
/// slice per bucket, and is written for models with experts only. Throws
/// Error naming the first mismatch.
ShardedIndex readShardedIndex(const std::string &dir, const Manifest &m);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_SHARDEDCHECKPOINT_H
