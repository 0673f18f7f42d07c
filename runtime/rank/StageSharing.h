//===- StageSharing.h - Parameters shared by pipeline stages ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// With pipeline parallelism and tied embeddings the word embedding lives on
// two stages: the first stage looks tokens up in it and the last stage uses
// it as the output layer. Each copy's gradient is only its stage's part, so
// Megatron-Core (finalize_model_grads, _allreduce_word_embedding_grads) adds
// the parts with an all-reduce over the embedding group (the first and last
// rank of each pipeline group, RankGen's "embedding" kind) after the
// data-parallel reduction; both copies then take the same update.
//
// The manifest says which boxes a rank holds; this file finds, for one rank,
// the parameters whose gradient must be summed that way: those of which
// every member of the rank's embedding group holds the same box. Two holders
// of one box in one pipeline group that are not exactly an embedding group
// would silently train diverging copies, so that is an error.
//
// The rank program lays these parameters out first in its flat gradient
// buffer, in manifest order, and (with the distributed optimizer) cuts every
// member's gradient-group bucket into data-parallel slices of the same size
// (GradBuckets.h): then each member's optimizer slice holds the same
// elements of the shared parameters, and the all-reduce covers only that
// slice (Megatron gives the shared embedding its own bucket for the same
// reason).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_STAGESHARING_H
#define LOOM_RUNTIME_RANK_STAGESHARING_H

#include "runtime/rank/Manifest.h"

namespace loom::rank {

struct StageSharing {
  /// This rank's embedding group when it has more than one member and they
  /// share parameters; null otherwise (pp 1, or untied embeddings).
  const std::vector<int32_t> *group = nullptr;
  /// Indices into Manifest::params of the shared parameters, ascending.
  std::vector<size_t> params;

  bool shares(size_t param) const;
};

/// The shared parameters of `rank`. Throws Error when a box held by two
/// ranks of one pipeline group is not held by exactly the members of one
/// embedding group.
StageSharing findStageSharing(const Manifest &m, int32_t rank);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_STAGESHARING_H
