//===- RankGeneratorTest.cpp - Tests of the orthogonal rank groups --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The expected lists come from seed 001's worked examples and the docstrings
// of Megatron-Core's generate_masked_orthogonal_rank_groups; the same
// configurations were cross-checked against a transcription of Megatron-Core.
//
//===----------------------------------------------------------------------===//

#include "rankgen/RankGenerator.h"

#include "gtest/gtest.h"

#include <algorithm>

using namespace loom::rankgen;
using Groups = std::vector<std::vector<int64_t>>;

namespace {

/// Sizes indexed by Dim: {tp, cp, ep, dp, pp}.
RankGenerator make(DimArray sizes, const char *order) {
  Result<RankGenerator> gen = RankGenerator::create(sizes, order);
  EXPECT_TRUE(gen.ok()) << gen.error();
  return gen.take();
}

Groups groups(const RankGenerator &gen, const char *tokens) {
  Result<GroupList> list = gen.groupsFor(tokens);
  EXPECT_TRUE(list.ok()) << list.error();
  return list->toVectors();
}

std::string createError(DimArray sizes, const char *order) {
  Result<RankGenerator> gen = RankGenerator::create(sizes, order);
  EXPECT_FALSE(gen.ok());
  return gen.error();
}

//===----------------------------------------------------------------------===//
// Tokens
//===----------------------------------------------------------------------===//

TEST(RankGenTokens, ParsesMasks) {
  EXPECT_EQ(*parseDimMask("tp"), dimBit(Dim::TP));
  EXPECT_EQ(*parseDimMask("tp-dp-cp"),
            dimBit(Dim::TP) | dimBit(Dim::DP) | dimBit(Dim::CP));
  // Megatron-Core lowercases the order; tokens are case-insensitive too.
  EXPECT_EQ(*parseDimMask("EP-Dp"), dimBit(Dim::EP) | dimBit(Dim::DP));
  EXPECT_STREQ(dimName(Dim::PP), "pp");
}

TEST(RankGenTokens, RejectsBadTokenLists) {
  EXPECT_EQ(parseDimMask("tp-xp").error(),
            "unknown token 'xp' in group kind 'tp-xp'; expected tp, cp, ep, "
            "dp or pp");
  EXPECT_EQ(parseDimMask("dp-dp").error(),
            "group kind 'dp-dp' repeats token 'dp'");
  EXPECT_EQ(parseDimMask("tp-").error(), "group kind 'tp-' has an empty token");
  EXPECT_EQ(parseDimMask("").error(),
            "group kind is empty; expected tokens such as 'tp-cp-ep-dp-pp'");
}

//===----------------------------------------------------------------------===//
// Seed 001: TP4-PP2-DP2 over 16 ranks, order tp-cp-ep-dp-pp
//===----------------------------------------------------------------------===//

TEST(RankGenerator, Seed001DenseTp4Pp2Dp2) {
  RankGenerator gen = make({4, 1, 1, 2, 2}, "tp-cp-ep-dp-pp");
  EXPECT_EQ(gen.worldSize(), 16);
  EXPECT_EQ(groups(gen, "dp"), (Groups{{0, 4},
                                       {1, 5},
                                       {2, 6},
                                       {3, 7},
                                       {8, 12},
                                       {9, 13},
                                       {10, 14},
                                       {11, 15}}));
  EXPECT_EQ(
      groups(gen, "tp"),
      (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(groups(gen, "pp"), (Groups{{0, 8},
                                       {1, 9},
                                       {2, 10},
                                       {3, 11},
                                       {4, 12},
                                       {5, 13},
                                       {6, 14},
                                       {7, 15}}));
  // global_rank = tp_rank + dp_rank*tp + pp_rank*tp*dp
  EXPECT_EQ(gen.stride(Dim::TP), 1);
  EXPECT_EQ(gen.stride(Dim::DP), 4);
  EXPECT_EQ(gen.stride(Dim::PP), 8);
  EXPECT_EQ(gen.rankAt({3, 0, 0, 1, 1}), 15);
}

TEST(RankGenerator, Seed001ExpertEtp1Ep4Edp2Pp2) {
  RankGenerator gen = make({1, 1, 4, 2, 2}, "tp-cp-ep-dp-pp");
  EXPECT_EQ(
      groups(gen, "ep"),
      (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(groups(gen, "dp"), (Groups{{0, 4},
                                       {1, 5},
                                       {2, 6},
                                       {3, 7},
                                       {8, 12},
                                       {9, 13},
                                       {10, 14},
                                       {11, 15}}));
  EXPECT_EQ(groups(gen, "pp"), (Groups{{0, 8},
                                       {1, 9},
                                       {2, 10},
                                       {3, 11},
                                       {4, 12},
                                       {5, 13},
                                       {6, 14},
                                       {7, 15}}));
  // etp 1: every rank is its own expert tensor-parallel group.
  EXPECT_EQ(gen.groupsFor("tp")->numGroups(), 16u);
}

// The docstring example of generate_masked_orthogonal_rank_groups: sizes
// [tp 2, dp 3, pp 4] in order tp-dp-pp, dp groups.
TEST(RankGenerator, MegatronDocstringTpDpPp) {
  RankGenerator gen = make({2, 1, 1, 3, 4}, "tp-dp-pp");
  Groups dp = groups(gen, "dp");
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (std::vector<int64_t>{0, 2, 4}));
  EXPECT_EQ(dp[1], (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(dp[7], (std::vector<int64_t>{19, 21, 23}));
  // Missing tokens of size 1 are appended: the full order is tp-dp-pp-ep-cp.
  EXPECT_EQ(gen.order()[3], Dim::EP);
  EXPECT_EQ(gen.order()[4], Dim::CP);
  EXPECT_EQ(gen.orderString(), "tp-dp-pp");
}

// Groups of a multi-token kind list members with the fastest axis of the
// order first, whatever the spelling of the kind.
TEST(RankGenerator, CombinedKindsFollowTheOrder) {
  RankGenerator gen = make({2, 2, 1, 2, 1}, "tp-cp-ep-dp-pp");
  EXPECT_EQ(groups(gen, "dp-cp"), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(groups(gen, "cp-dp"), groups(gen, "dp-cp"));
  EXPECT_EQ(groups(gen, "tp-dp"), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(groups(gen, "tp-cp-dp-pp"), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
}

TEST(RankGenerator, TpPpDpOrder) {
  // tp 2, pp 2, dp 2 with dp outermost: pp is the middle axis.
  RankGenerator gen = make({2, 1, 1, 2, 2}, "tp-cp-ep-pp-dp");
  EXPECT_EQ(groups(gen, "pp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(groups(gen, "dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(groups(gen, "tp-pp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
}

//===----------------------------------------------------------------------===//
// Properties over many shapes and all 32 masks
//===----------------------------------------------------------------------===//

TEST(RankGenerator, GroupsPartitionTheWorldAndLocateAgrees) {
  const char *orders[] = {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "pp-dp-ep-cp-tp",
                          "dp-tp-pp-cp-ep"};
  const DimArray shapes[] = {
      {2, 3, 1, 4, 2}, {3, 1, 2, 2, 5}, {1, 1, 1, 1, 1}, {4, 2, 1, 1, 3}};
  for (const char *order : orders) {
    for (const DimArray &sizes : shapes) {
      RankGenerator gen = make(sizes, order);
      for (DimMask mask = 0; mask < 32; ++mask) {
        GroupList list = gen.groupsFor(mask);
        int64_t expectedSize = 1;
        for (int d = 0; d < kNumDims; ++d)
          if (mask & (1u << d))
            expectedSize *= sizes[d];
        ASSERT_EQ(list.groupSize(), expectedSize);
        std::vector<int> seen(gen.worldSize(), 0);
        for (size_t g = 0; g < list.numGroups(); ++g) {
          RankSpan ranks = list[g];
          for (size_t i = 0; i < ranks.size(); ++i) {
            int64_t r = ranks[i];
            ++seen[r];
            RankGenerator::Location loc = gen.locate(r, mask);
            EXPECT_EQ(loc.group, int64_t(g)) << order << " mask " << mask;
            EXPECT_EQ(loc.position, int64_t(i)) << order << " mask " << mask;
            // Members differ from the first only along masked axes.
            for (int d = 0; d < kNumDims; ++d) {
              if (!(mask & (1u << d))) {
                EXPECT_EQ(gen.coordinate(r, Dim(d)),
                          gen.coordinate(ranks[0], Dim(d)));
              }
            }
          }
        }
        EXPECT_TRUE(std::all_of(seen.begin(), seen.end(),
                                [](int n) { return n == 1; }));
      }
      for (int64_t r = 0; r < gen.worldSize(); ++r) {
        EXPECT_EQ(gen.rankAt(gen.coordinates(r)), r);
        // Row-major linearization over rowMajorAxes() gives the rank back.
        int64_t linear = 0;
        for (Dim axis : gen.rowMajorAxes())
          linear = linear * gen.size(axis) + gen.coordinate(r, axis);
        EXPECT_EQ(linear, r);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(RankGenerator, OrderErrors) {
  DimArray sizes = {2, 2, 1, 2, 2};
  EXPECT_EQ(createError(sizes, "tp-cp-tp-dp-pp"),
            "order 'tp-cp-tp-dp-pp' repeats token 'tp'");
  EXPECT_EQ(createError(sizes, "tp-xp-dp-pp"),
            "unknown token 'xp' in order 'tp-xp-dp-pp'; expected tp, cp, ep, "
            "dp or pp");
  EXPECT_EQ(createError(sizes, "tp--dp-pp"),
            "order 'tp--dp-pp' has an empty token");
  EXPECT_EQ(createError(sizes, ""),
            "order is empty; expected tokens such as 'tp-cp-ep-dp-pp'");
  EXPECT_EQ(createError(sizes, "tp-dp-pp"),
            "order 'tp-dp-pp' has no token 'cp' but cp is 2");
  EXPECT_EQ(createError({0, 1, 1, 1, 1}, "tp-cp-ep-dp-pp"),
            "tp size must be at least 1, got 0");
  EXPECT_EQ(createError({int64_t(1) << 40, int64_t(1) << 40, 1, 1, 1},
                        "tp-cp-ep-dp-pp"),
            "world size overflows: tp*cp*ep*dp*pp is too large");
}

TEST(RankGenerator, GroupsForErrors) {
  RankGenerator gen = make({2, 1, 1, 2, 1}, "tp-cp-ep-dp-pp");
  EXPECT_EQ(gen.groupsFor("tp-zz").error(),
            "unknown token 'zz' in group kind 'tp-zz'; expected tp, cp, ep, "
            "dp or pp");
  EXPECT_EQ(gen.groupsFor("tp-tp").error(),
            "group kind 'tp-tp' repeats token 'tp'");
}

} // namespace
