//===- DistOptimizerTest.cpp - Slices of the distributed optimizer --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The index arithmetic of --use-distributed-optimizer: padding to a multiple
// of dp, equal slices, the pad owned by no one, and the parameter pieces of
// a slice (which must cover every element of every parameter exactly once
// over the dp ranks, the property the grad norm and the optimizer rely on).
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/DistOptimizer.h"

#include <gtest/gtest.h>

using namespace loom::rank;

namespace {

TEST(DpPartition, PadsToAMultipleOfDp) {
  DpPartition p{/*elements=*/10, /*dpSize=*/4};
  EXPECT_EQ(p.padded(), 12);
  EXPECT_EQ(p.shardSize(), 3);
  // [0,3) [3,6) [6,9) [9,10): the last slice holds one element and the pad.
  EXPECT_EQ(p.begin(0), 0);
  EXPECT_EQ(p.end(0), 3);
  EXPECT_EQ(p.begin(3), 9);
  EXPECT_EQ(p.end(3), 10);
}

TEST(DpPartition, ExactMultipleHasNoPad) {
  DpPartition p{12, 3};
  EXPECT_EQ(p.padded(), 12);
  EXPECT_EQ(p.shardSize(), 4);
  EXPECT_EQ(p.begin(2), 8);
  EXPECT_EQ(p.end(2), 12);
}

TEST(DpPartition, MoreRanksThanElementsLeavesEmptySlices) {
  DpPartition p{3, 4};
  EXPECT_EQ(p.padded(), 4);
  EXPECT_EQ(p.shardSize(), 1);
  EXPECT_EQ(p.end(2), 3);
  // Rank 3 owns only the pad: an empty range at the end.
  EXPECT_EQ(p.begin(3), 3);
  EXPECT_EQ(p.end(3), 3);
}

TEST(DpPartition, AlignToCutsAsIfTheBufferWereLonger) {
  // Two buffers of 10 and 13 elements cut alike: slices of 4 from 16.
  DpPartition shorter{10, 4, /*alignTo=*/13}, longer{13, 4, 13};
  EXPECT_EQ(shorter.padded(), 16);
  EXPECT_EQ(shorter.shardSize(), longer.shardSize());
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(shorter.begin(r), longer.begin(r));
  // The shorter one's last slices end at its own end, or are empty.
  EXPECT_EQ(shorter.end(2), 10);
  EXPECT_EQ(shorter.begin(3), 10);
  EXPECT_EQ(shorter.end(3), 10);
  EXPECT_EQ(longer.end(3), 13);
}

TEST(DpPartition, DpOneOwnsEverything) {
  DpPartition p{7, 1};
  EXPECT_EQ(p.padded(), 7);
  EXPECT_EQ(p.begin(0), 0);
  EXPECT_EQ(p.end(0), 7);
}

TEST(OwnedPieces, CutsParametersAtSliceBorders) {
  // Parameters of 5, 0, 4 and 3 elements at flat 0, 5, 5, 9.
  std::vector<int64_t> offsets = {0, 5, 5, 9}, sizes = {5, 0, 4, 3};
  std::vector<FlatPiece> pieces = ownedPieces(offsets, sizes, 3, 10);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].param, 0u);
  EXPECT_EQ(pieces[0].paramOffset, 3);
  EXPECT_EQ(pieces[0].flatOffset, 3);
  EXPECT_EQ(pieces[0].n, 2);
  // The empty parameter gives no piece.
  EXPECT_EQ(pieces[1].param, 2u);
  EXPECT_EQ(pieces[1].paramOffset, 0);
  EXPECT_EQ(pieces[1].flatOffset, 5);
  EXPECT_EQ(pieces[1].n, 4);
  EXPECT_EQ(pieces[2].param, 3u);
  EXPECT_EQ(pieces[2].paramOffset, 0);
  EXPECT_EQ(pieces[2].flatOffset, 9);
  EXPECT_EQ(pieces[2].n, 1);
  EXPECT_TRUE(ownedPieces(offsets, sizes, 12, 12).empty());
}

TEST(OwnedPieces, SlicesCoverEveryElementOnce) {
  std::vector<int64_t> sizes = {7, 1, 64, 3, 0, 33, 5};
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (int64_t n : sizes) {
    offsets.push_back(total);
    total += n;
  }
  for (int64_t dp : {1, 2, 3, 4, 8, 200}) {
    DpPartition p{total, dp};
    EXPECT_EQ(p.padded() % dp, 0);
    EXPECT_LT(p.padded() - total, dp);
    std::vector<int> hits(size_t(total), 0);
    for (int64_t r = 0; r < dp; ++r) {
      EXPECT_LE(p.end(r) - p.begin(r), p.shardSize());
      for (const FlatPiece &pc :
           ownedPieces(offsets, sizes, p.begin(r), p.end(r))) {
        EXPECT_EQ(pc.flatOffset, offsets[pc.param] + pc.paramOffset);
        EXPECT_LE(pc.paramOffset + pc.n, sizes[pc.param]);
        for (int64_t i = 0; i < pc.n; ++i)
          ++hits[size_t(pc.flatOffset + i)];
      }
    }
    for (int64_t i = 0; i < total; ++i)
      EXPECT_EQ(hits[size_t(i)], 1) << "element " << i << " with dp " << dp;
  }
}

TEST(FlatRuns, MergeJoinsTouchingRunsAndDropsEmptyOnes) {
  std::vector<FlatRun> merged =
      mergeRuns({{10, 20}, {0, 5}, {5, 8}, {30, 30}, {18, 25}, {40, 41}});
  EXPECT_EQ(merged, (std::vector<FlatRun>{{0, 8}, {10, 25}, {40, 41}}));
  EXPECT_TRUE(mergeRuns({}).empty());
}

TEST(FlatRuns, ComplementCoversTheRest) {
  EXPECT_EQ(complementRuns({{10, 25}, {0, 8}}, 30),
            (std::vector<FlatRun>{{8, 10}, {25, 30}}));
  EXPECT_EQ(complementRuns({}, 7), (std::vector<FlatRun>{{0, 7}}));
  EXPECT_TRUE(complementRuns({{0, 7}}, 7).empty());
}

// Reduce-scattering runs that tile the padded buffer gives each rank
// exactly its slice: the counts of every run add up to the slice sizes.
TEST(FlatRuns, ScatterCountsTileTheSlices) {
  for (int64_t dp : {1, 2, 3, 4, 8}) {
    DpPartition p{/*elements=*/103, dp};
    std::vector<FlatRun> chunks = {{0, 17}, {17, 60}, {60, 103}};
    std::vector<FlatRun> runs = chunks;
    for (const FlatRun &r : complementRuns(chunks, p.padded()))
      runs.push_back(r);
    std::vector<int64_t> received(size_t(dp), 0);
    for (const FlatRun &r : runs) {
      std::vector<int64_t> counts = scatterCounts(r, p);
      ASSERT_EQ(counts.size(), size_t(dp));
      int64_t sum = 0;
      for (int64_t k = 0; k < dp; ++k) {
        received[size_t(k)] += counts[size_t(k)];
        sum += counts[size_t(k)];
      }
      EXPECT_EQ(sum, r.end - r.begin);
    }
    for (int64_t k = 0; k < dp; ++k)
      EXPECT_EQ(received[size_t(k)], p.shardSize()) << "dp " << dp;
  }
}

} // namespace
