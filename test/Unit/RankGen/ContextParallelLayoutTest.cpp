//===- ContextParallelLayoutTest.cpp - Tests of the cp token layout -------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Hand-derived tables of Megatron-LM's get_batch_on_this_cp_rank (S = 16 at
// cp 2 and 4 were checked against Megatron-LM itself), a sweep against a
// transcription of its view/index_select, and every error message.
//
//===----------------------------------------------------------------------===//

#include "rankgen/ContextParallelLayout.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace loom::rankgen;
using Indices = std::vector<int64_t>;

namespace {

Indices indices(int64_t seq, int64_t cp, int64_t rank) {
  Result<Indices> result = contextParallelTokenIndices(seq, cp, rank);
  EXPECT_TRUE(result.ok()) << result.error();
  return result.ok() ? result.take() : Indices{};
}

std::vector<Indices> table(int64_t seq, int64_t cp) {
  std::vector<Indices> out;
  for (int64_t r = 0; r < cp; ++r)
    out.push_back(indices(seq, cp, r));
  return out;
}

Indices iota(int64_t begin, int64_t end) {
  Indices out;
  for (int64_t t = begin; t < end; ++t)
    out.push_back(t);
  return out;
}

/// Megatron-LM, literally: view the tokens as [2*cp, c], index_select rows
/// [r, 2*cp-1-r], flatten. Without cp the batch is returned unchanged.
Indices megatron(int64_t seq, int64_t cp, int64_t rank) {
  if (cp == 1)
    return iota(0, seq);
  int64_t c = seq / (2 * cp);
  std::vector<Indices> rows;
  for (int64_t row = 0; row < 2 * cp; ++row)
    rows.push_back(iota(row * c, (row + 1) * c));
  Indices out = rows[rank];
  const Indices &second = rows[2 * cp - rank - 1];
  out.insert(out.end(), second.begin(), second.end());
  return out;
}

//===----------------------------------------------------------------------===//
// Tables
//===----------------------------------------------------------------------===//

TEST(ContextParallelLayout, NoContextParallelismKeepsEveryToken) {
  EXPECT_EQ(table(16, 1), (std::vector<Indices>{iota(0, 16)}));
  // Megatron-LM does not split without cp, so odd lengths are fine.
  EXPECT_EQ(table(7, 1), (std::vector<Indices>{iota(0, 7)}));
  EXPECT_EQ(*contextParallelTokenRanges(16, 1, 0),
            (std::vector<TokenRange>{{0, 16}}));
}

TEST(ContextParallelLayout, Seq16) {
  EXPECT_EQ(table(16, 2), (std::vector<Indices>{{0, 1, 2, 3, 12, 13, 14, 15},
                                                {4, 5, 6, 7, 8, 9, 10, 11}}));
  EXPECT_EQ(table(16, 4),
            (std::vector<Indices>{
                {0, 1, 14, 15}, {2, 3, 12, 13}, {4, 5, 10, 11}, {6, 7, 8, 9}}));
  EXPECT_EQ(table(16, 8), (std::vector<Indices>{{0, 15},
                                                {1, 14},
                                                {2, 13},
                                                {3, 12},
                                                {4, 11},
                                                {5, 10},
                                                {6, 9},
                                                {7, 8}}));
}

TEST(ContextParallelLayout, Seq32) {
  EXPECT_EQ(
      table(32, 2),
      (std::vector<Indices>{
          {0, 1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30, 31},
          {8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}}));
  EXPECT_EQ(table(32, 4),
            (std::vector<Indices>{{0, 1, 2, 3, 28, 29, 30, 31},
                                  {4, 5, 6, 7, 24, 25, 26, 27},
                                  {8, 9, 10, 11, 20, 21, 22, 23},
                                  {12, 13, 14, 15, 16, 17, 18, 19}}));
  EXPECT_EQ(table(32, 8), (std::vector<Indices>{{0, 1, 30, 31},
                                                {2, 3, 28, 29},
                                                {4, 5, 26, 27},
                                                {6, 7, 24, 25},
                                                {8, 9, 22, 23},
                                                {10, 11, 20, 21},
                                                {12, 13, 18, 19},
                                                {14, 15, 16, 17}}));
}

TEST(ContextParallelLayout, RangesKeepBothChunks) {
  EXPECT_EQ(*contextParallelTokenRanges(16, 2, 0),
            (std::vector<TokenRange>{{0, 4}, {12, 16}}));
  // The last rank's chunks touch but stay two, as in Megatron-LM.
  EXPECT_EQ(*contextParallelTokenRanges(16, 2, 1),
            (std::vector<TokenRange>{{4, 8}, {8, 12}}));
}

/// Every valid (seq, cp) up to 96 tokens: the ranks match Megatron-LM, hold
/// seq / cp tokens each, and together hold every token exactly once.
TEST(ContextParallelLayout, MatchesMegatronAndPartitionsTheSequence) {
  int checked = 0;
  for (int64_t cp = 1; cp <= 16; ++cp) {
    for (int64_t seq = 1; seq <= 96; ++seq) {
      Result<int64_t> perRank = validateContextParallelSplit(seq, cp);
      if (cp > 1 && seq % (2 * cp) != 0) {
        EXPECT_FALSE(perRank.ok()) << "seq " << seq << " cp " << cp;
        continue;
      }
      ASSERT_TRUE(perRank.ok()) << perRank.error();
      EXPECT_EQ(*perRank, seq / cp);
      Indices all;
      for (int64_t r = 0; r < cp; ++r) {
        Indices mine = indices(seq, cp, r);
        EXPECT_EQ(mine, megatron(seq, cp, r))
            << "seq " << seq << " cp " << cp << " rank " << r;
        EXPECT_EQ(static_cast<int64_t>(mine.size()), *perRank);
        all.insert(all.end(), mine.begin(), mine.end());
      }
      std::sort(all.begin(), all.end());
      EXPECT_EQ(all, iota(0, seq)) << "seq " << seq << " cp " << cp;
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(ContextParallelLayout, Errors) {
  EXPECT_EQ(validateContextParallelSplit(18, 4).error(),
            "sequence length 18 is not divisible by 2*cp = 8");
  // Divisible by cp is not enough: each rank takes two chunks.
  EXPECT_EQ(validateContextParallelSplit(12, 4).error(),
            "sequence length 12 is not divisible by 2*cp = 8");
  EXPECT_EQ(validateContextParallelSplit(4, 4).error(),
            "sequence length 4 is not divisible by 2*cp = 8");
  EXPECT_EQ(validateContextParallelSplit(0, 2).error(),
            "sequence length must be at least 1, got 0");
  EXPECT_EQ(validateContextParallelSplit(-16, 1).error(),
            "sequence length must be at least 1, got -16");
  EXPECT_EQ(validateContextParallelSplit(16, 0).error(),
            "cp must be at least 1, got 0");
  EXPECT_EQ(validateContextParallelSplit(16, -2).error(),
            "cp must be at least 1, got -2");
  EXPECT_EQ(validateContextParallelSplit(kMaxSeqLength + 2, 1).error(),
            "sequence length 16777218 exceeds the supported maximum 16777216");
  // 2*cp is reported without overflowing.
  EXPECT_EQ(validateContextParallelSplit(16, INT64_MAX).error(),
            "sequence length 16 is not divisible by 2*cp = "
            "18446744073709551614");
  EXPECT_EQ(contextParallelTokenIndices(16, 2, 2).error(),
            "cp rank 2 is out of range for cp 2");
  EXPECT_EQ(contextParallelTokenRanges(16, 2, -1).error(),
            "cp rank -1 is out of range for cp 2");
  EXPECT_EQ(contextParallelTokenIndices(18, 4, 0).error(),
            "sequence length 18 is not divisible by 2*cp = 8");
  EXPECT_EQ(*validateContextParallelSplit(kMaxSeqLength, 8), kMaxSeqLength / 8);
}

} // namespace
