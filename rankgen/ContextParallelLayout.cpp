//===- ContextParallelLayout.cpp - Tokens of each cp rank -----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Mirrors Megatron-LM's get_batch_on_this_cp_rank: view the sequence as
// [2*cp, c] and index_select rows [r, 2*cp-1-r].
//
//===----------------------------------------------------------------------===//

#include "rankgen/ContextParallelLayout.h"

#include <string>

using namespace loom::rankgen;

static std::string str(int64_t v) { return std::to_string(v); }

Result<int64_t> loom::rankgen::validateContextParallelSplit(int64_t seqLength,
                                                            int64_t cp) {
  if (seqLength < 1)
    return fail("sequence length must be at least 1, got " + str(seqLength));
  if (seqLength > kMaxSeqLength)
    return fail("sequence length " + str(seqLength) +
                " exceeds the supported maximum " + str(kMaxSeqLength));
  if (cp < 1)
    return fail("cp must be at least 1, got " + str(cp));
  // Megatron-LM leaves the batch untouched without context parallelism, so
  // any length works there.
  if (cp == 1)
    return seqLength;
  // 2*cp in uint64_t cannot overflow, whatever cp the caller passes.
  uint64_t chunks = 2 * static_cast<uint64_t>(cp);
  if (static_cast<uint64_t>(seqLength) % chunks != 0)
    return fail("sequence length " + str(seqLength) +
                " is not divisible by 2*cp = " + std::to_string(chunks));
  return seqLength / cp;
}

Result<std::vector<TokenRange>>
loom::rankgen::contextParallelTokenRanges(int64_t seqLength, int64_t cp,
                                          int64_t cpRank) {
  Result<int64_t> perRank = validateContextParallelSplit(seqLength, cp);
  if (!perRank)
    return fail(perRank.error());
  if (cpRank < 0 || cpRank >= cp)
    return fail("cp rank " + str(cpRank) + " is out of range for cp " +
                str(cp));
  if (cp == 1)
    return std::vector<TokenRange>{{0, seqLength}};
  int64_t chunk = seqLength / (2 * cp);
  int64_t mirror = 2 * cp - 1 - cpRank;
  return std::vector<TokenRange>{{cpRank * chunk, (cpRank + 1) * chunk},
                                 {mirror * chunk, (mirror + 1) * chunk}};
}

Result<std::vector<int64_t>>
loom::rankgen::contextParallelTokenIndices(int64_t seqLength, int64_t cp,
                                           int64_t cpRank) {
  Result<std::vector<TokenRange>> ranges =
      contextParallelTokenRanges(seqLength, cp, cpRank);
  if (!ranges)
    return fail(ranges.error());
  std::vector<int64_t> indices;
  indices.reserve(static_cast<size_t>(seqLength / cp));
  for (const TokenRange &range : *ranges)
    for (int64_t t = range.begin; t < range.end; ++t)
      indices.push_back(t);
  return indices;
}
