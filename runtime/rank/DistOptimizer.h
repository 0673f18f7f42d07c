//===- DistOptimizer.h - Slicing of the distributed optimizer ---*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Megatron-Core's DistributedOptimizer splits the flat gradient buffer of a
// data-parallel group into dp contiguous, equal slices: after the last
// micro-batch the main gradients are reduce-scattered so that dp rank d
// holds the reduced slice d, rank d runs AdamW only on the parameters (and
// the f32 main parameters and moments) of that slice, and the updated
// parameters are all-gathered. The flat buffer is padded with zeros to a
// multiple of dp so that every slice has the same size (the collectives need
// equal blocks). This file is the index arithmetic, kept apart from the step
// loop so that unit tests pin it down.
//
// The flat buffer of a rank is its parameter shards in manifest order; the
// ranks of a data-parallel group hold the same shards, so they agree on it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_DISTOPTIMIZER_H
#define LOOM_RUNTIME_RANK_DISTOPTIMIZER_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::rank {

/// How `elements` flat elements are split over `dpSize` ranks.
struct DpPartition {
  int64_t elements = 0; // the unpadded flat buffer
  int64_t dpSize = 1;
  /// Cut the slices as if the buffer had max(elements, alignTo) elements:
  /// ranks whose buffers begin with the same parameters but differ in
  /// length (pipeline stages sharing the tied embedding) then own the same
  /// elements of that prefix.
  int64_t alignTo = 0;

  /// max(elements, alignTo) rounded up to a multiple of dpSize (the buffer
  /// that is reduce-scattered and all-gathered).
  int64_t padded() const;
  /// padded() / dpSize: every rank's slice, pad included.
  int64_t shardSize() const;
  /// The elements dp rank `r` owns: [begin(r), end(r)), end clamped to
  /// `elements`, so the pad belongs to no one (a slice may be empty).
  int64_t begin(int64_t r) const;
  int64_t end(int64_t r) const;
};

/// A run of flat elements that belongs to one parameter shard.
struct FlatPiece {
  size_t param = 0;        // index into the list given to ownedPieces
  int64_t paramOffset = 0; // first element within the parameter shard
  int64_t flatOffset = 0;  // first element within the flat buffer
  int64_t n = 0;           // elements
};

/// The pieces of [begin, end) that fall into the parameters, which lie at
/// flat [offsets[i], offsets[i] + sizes[i]) (ascending, not overlapping).
/// Empty parameters and empty intersections give no piece.
std::vector<FlatPiece> ownedPieces(const std::vector<int64_t> &offsets,
                                   const std::vector<int64_t> &sizes,
                                   int64_t begin, int64_t end);

/// Flat elements [begin, end).
struct FlatRun {
  int64_t begin = 0, end = 0;
  bool operator==(const FlatRun &o) const {
    return begin == o.begin && end == o.end;
  }
};

/// `runs` sorted, with touching or overlapping runs joined and empty ones
/// dropped: what one collective each can reduce (a pipeline chunk's
/// parameters are mostly adjacent in the flat buffer).
std::vector<FlatRun> mergeRuns(std::vector<FlatRun> runs);

/// The parts of [0, end) outside the (merged) `covered` runs.
std::vector<FlatRun> complementRuns(const std::vector<FlatRun> &covered,
                                    int64_t end);

/// How the reduce-scatter of `run` divides among the dp ranks: rank k
/// receives its intersection with slice k, [k, k + 1) x shardSize().
std::vector<int64_t> scatterCounts(const FlatRun &run, const DpPartition &p);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_DISTOPTIMIZER_H
