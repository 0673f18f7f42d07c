//===- ContextParallelLayout.h - Tokens of each cp rank ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Which tokens of a sequence each context-parallel rank holds, as Megatron-LM's
// get_batch_on_this_cp_rank splits a batch. With cp > 1 a sequence of S
// tokens is cut into 2*cp chunks of c = S / (2*cp) tokens, and cp rank r
// keeps chunk r followed by chunk 2*cp-1-r. Pairing an early chunk with a
// late one balances causal attention: every rank gets the same amount of
// work. With cp == 1 the only rank keeps every token in order.
//
//   S = 16, cp = 2 (c = 4):  rank 0: 0-3, 12-15   rank 1: 4-7, 8-11
//
// Like the rest of the library this is plain C++17 without LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_CONTEXTPARALLELLAYOUT_H
#define LOOM_RANKGEN_CONTEXTPARALLELLAYOUT_H

#include "rankgen/Result.h"

#include <cstdint>
#include <vector>

namespace loom {
namespace rankgen {

/// Upper bound on the sequence length: token index lists are materialized,
/// and 16M tokens exceed every context length in use.
constexpr int64_t kMaxSeqLength = int64_t(1) << 24;

/// Tokens [begin, end) of the sequence, in global token indices.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  bool operator==(const TokenRange &other) const {
    return begin == other.begin && end == other.end;
  }
  bool operator!=(const TokenRange &other) const { return !(*this == other); }
};

/// Checks that `seqLength` tokens can be split over `cp` context-parallel
/// ranks: seqLength in [1, kMaxSeqLength], cp >= 1, and with cp > 1
/// seqLength divisible by 2*cp. Returns the number of tokens each rank holds,
/// seqLength / cp. Errors name the values, e.g.
///   "sequence length 18 is not divisible by 2*cp = 8"
Result<int64_t> validateContextParallelSplit(int64_t seqLength, int64_t cp);

/// The chunks cp rank `cpRank` holds, in the order it holds them: one range
/// (the whole sequence) when cp == 1, else chunk cpRank and chunk
/// 2*cp-1-cpRank. The two are kept apart even where they touch (the last
/// rank's), so the result always mirrors Megatron-LM's two chunks.
Result<std::vector<TokenRange>>
contextParallelTokenRanges(int64_t seqLength, int64_t cp, int64_t cpRank);

/// The global token indices cp rank `cpRank` holds, in its local order, e.g.
/// {0, 1, 2, 3, 12, 13, 14, 15} for rank 0 of S = 16, cp = 2.
Result<std::vector<int64_t>>
contextParallelTokenIndices(int64_t seqLength, int64_t cp, int64_t cpRank);

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_CONTEXTPARALLELLAYOUT_H
