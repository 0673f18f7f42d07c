//===- GradBuckets.h - The flat gradient buffer's buckets -------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A rank's f32 training state (main gradients, moments, main parameters) is
// one flat buffer of its parameter shards, cut into one bucket per group
// kind the gradients are summed over (Manifest::gradientGroupOf): the dense
// parameters' over dp (dp x cp with context parallelism), and with expert
// parallelism the experts' over the expert data-parallel group
// ("expert:dp"), as Megatron-Core keeps a dense and an expert grad buffer.
// Each bucket is reduced over its own group and, with the distributed
// optimizer, sliced over that group (DistOptimizer.h): the ranks of a
// bucket's group hold the same shards of its parameters, so they agree on
// its layout, while the ranks of a dense dp group hold different experts.
//
// Layout: the gradient group's bucket first (parameters shared with another
// pipeline stage first, StageSharing.h, then manifest order), then one
// bucket per other group kind in the order the manifest first names it,
// each in manifest order. Buckets follow each other in the flat buffer,
// each padded to a multiple of its group size; the optimizer state holds
// each bucket's slice, one after the other. A model without experts has one
// bucket: the flat buffer as it always was.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_GRADBUCKETS_H
#define LOOM_RUNTIME_RANK_GRADBUCKETS_H

#include "runtime/rank/DistOptimizer.h"
#include "runtime/rank/Manifest.h"

#include <string>
#include <vector>

namespace loom::rank {

struct GradBucket {
  std::string group;          // the group kind its gradients are summed over
  std::vector<size_t> params; // Manifest::params held by the rank, in order
  int64_t base = 0;           // its first element in the flat buffer
  int64_t stateBase = 0;      // its slice's first in the optimizer state
  DpPartition partition;      // its elements over its group (dpSize 1 unless
                              // sharded by the distributed optimizer)
  int64_t groupRank = 0;      // the rank's position in its group

  bool sharded() const { return partition.dpSize > 1; }
  /// The rank's slice, relative to the bucket: all of it unless sharded.
  int64_t sliceBegin() const {
    return partition.begin(sharded() ? groupRank : 0);
  }
  int64_t sliceEnd() const { return partition.end(sharded() ? groupRank : 0); }
  /// The same in the flat buffer.
  int64_t ownBegin() const { return base + sliceBegin(); }
  int64_t ownEnd() const { return base + sliceEnd(); }
  int64_t ownElements() const { return sliceEnd() - sliceBegin(); }
  /// The flat buffer's end of the bucket, pad included.
  int64_t end() const { return base + partition.padded(); }
};

/// The buckets of `rank` (see above), sliced over their groups when
/// `distributed`. The gradient group's bucket is always there (maybe
/// empty); another only when the rank holds some of its parameters. When
/// sliced, the members of an embedding group of two ranks cut their
/// gradient group's buckets as if all were as long as their longest, so
/// that their slices hold the same elements of the shared prefix. Throws
/// Error as findStageSharing does.
std::vector<GradBucket> gradBuckets(const Manifest &m, int32_t rank,
                                    bool distributed);

/// The flat buffer's length: the last bucket's end.
int64_t flatElements(const std::vector<GradBucket> &buckets);
/// The optimizer state's length: the buckets' slices (pad included).
int64_t stateElements(const std::vector<GradBucket> &buckets);

/// Throws Error unless every rank of each bucket's group holds the same
/// shards of the bucket's parameters as `rank` (the distributed optimizer
/// slices them alike).
void checkBucketGroups(const Manifest &m, int32_t rank,
                       const std::vector<GradBucket> &buckets);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_GRADBUCKETS_H
