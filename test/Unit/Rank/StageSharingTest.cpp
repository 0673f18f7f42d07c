//===- StageSharingTest.cpp - Parameters shared by pipeline stages --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Which parameters the embedding group sums (the tied word embedding of the
// first and last stage), the errors for copies no group would sum, and the
// aligned data-parallel slices of the distributed optimizer. Ranks are
// numbered as Megatron's tp-cp-ep-dp-pp order does with tp 2, dp 2, pp 3:
// rank = t + 2 d + 4 p.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/GradBuckets.h"
#include "runtime/rank/StageSharing.h"

#include <gtest/gtest.h>

using namespace loom::rank;

namespace {

constexpr int32_t kTp = 2, kDp = 2, kPp = 3, kWorld = kTp * kDp * kPp;

int32_t rankOf(int32_t t, int32_t d, int32_t p) {
  return t + kTp * d + kTp * kDp * p;
}

/// A parameter of `rows` x 4 split over tp on its rows, held by the stages
/// in `stages`.
ParamSpec param(const std::string &name, int64_t rows,
                std::vector<int32_t> stages) {
  ParamSpec p;
  p.name = name;
  p.shape = {rows, 4};
  for (int32_t s : stages)
    for (int32_t d = 0; d < kDp; ++d)
      for (int32_t t = 0; t < kTp; ++t)
        p.shards.push_back(
            {rankOf(t, d, s), {{t * rows / kTp, 0}, {rows / kTp, 4}}});
  std::sort(p.shards.begin(), p.shards.end(),
            [](const Shard &a, const Shard &b) { return a.rank < b.rank; });
  return p;
}

/// GPT-like: wte tied (first and last stage), a layer per stage, the final
/// norm on the last stage.
Manifest pipeline(bool embeddingGroups = true) {
  Manifest m;
  m.worldSize = kWorld;
  for (int32_t p = 0; p < kPp; ++p)
    for (int32_t t = 0; t < kTp; ++t) {
      std::vector<int32_t> dp;
      for (int32_t d = 0; d < kDp; ++d)
        dp.push_back(rankOf(t, d, p));
      m.groups["dp"].push_back(dp);
    }
  for (int32_t d = 0; d < kDp; ++d)
    for (int32_t t = 0; t < kTp; ++t) {
      std::vector<int32_t> pp;
      for (int32_t p = 0; p < kPp; ++p)
        pp.push_back(rankOf(t, d, p));
      m.groups["pp"].push_back(pp);
      if (embeddingGroups)
        m.groups["embedding"].push_back({pp.front(), pp.back()});
    }
  m.params = {param("wte", 16, {0, kPp - 1}), param("h.0", 8, {0}),
              param("h.1", 8, {1}), param("h.2", 8, {2}),
              param("ln_f", 4, {kPp - 1})};
  return m;
}

std::string errorOf(const Manifest &m, int32_t rank) {
  try {
    findStageSharing(m, rank);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(StageSharing, FirstAndLastStageShareTheTiedEmbedding) {
  Manifest m = pipeline();
  for (int32_t p : {0, kPp - 1}) {
    StageSharing s = findStageSharing(m, rankOf(1, 1, p));
    ASSERT_TRUE(s.group);
    EXPECT_EQ(*s.group, (std::vector<int32_t>{rankOf(1, 1, 0),
                                              rankOf(1, 1, kPp - 1)}));
    EXPECT_EQ(s.params, (std::vector<size_t>{0}));
    EXPECT_TRUE(s.shares(0));
    EXPECT_FALSE(s.shares(1));
  }
  // The middle stage holds no copy.
  StageSharing middle = findStageSharing(m, rankOf(0, 0, 1));
  EXPECT_FALSE(middle.group);
  EXPECT_TRUE(middle.params.empty());
}

TEST(StageSharing, NothingWithoutPipelineOrWithUntiedEmbeddings) {
  Manifest m = pipeline();
  m.params[0] = param("wte", 16, {0}); // untied: the head is another param
  m.params.push_back(param("lm_head", 16, {kPp - 1}));
  for (int32_t r = 0; r < kWorld; ++r)
    EXPECT_FALSE(findStageSharing(m, r).group) << r;
  // A manifest without pipeline groups (pp 1 written by hand).
  m = pipeline();
  m.groups.erase("pp");
  EXPECT_FALSE(findStageSharing(m, 0).group);
}

TEST(StageSharing, CopiesNoEmbeddingGroupSumsAreAnError) {
  EXPECT_EQ(errorOf(pipeline(/*embeddingGroups=*/false), 0),
            "parameter \"wte\" is held by ranks [0, 8] of pipeline group "
            "[0, 4, 8], but no embedding group holds rank 0: copies on "
            "different pipeline stages must be exactly an embedding group, "
            "which sums their gradients");
  // A layer on two stages, where only the embedding group would sum.
  Manifest m = pipeline();
  m.params[2] = param("h.1", 8, {0, 1});
  EXPECT_EQ(errorOf(m, 4),
            "parameter \"h.1\" is held by ranks [0, 4] of pipeline group "
            "[0, 4, 8], but no embedding group holds rank 4: copies on "
            "different pipeline stages must be exactly an embedding group, "
            "which sums their gradients");
  EXPECT_EQ(errorOf(m, 0),
            "parameter \"h.1\" is held by ranks [0, 4] of pipeline group "
            "[0, 4, 8], but the embedding group of rank 0 is [0, 8]: copies "
            "on different pipeline stages must be exactly an embedding "
            "group, which sums their gradients");
}

TEST(StageSharing, StagesMustHoldTheSameBox) {
  Manifest m = pipeline();
  for (Shard &s : m.params[0].shards)
    if (s.rank == rankOf(0, 0, kPp - 1))
      s.box = {{0, 0}, {16, 4}};
  EXPECT_EQ(errorOf(m, 0),
            "parameter \"wte\": ranks 0 and 8 of pipeline group [0, 4, 8] "
            "hold different parts of it; pipeline stages can only share a "
            "parameter whole");
}

TEST(StageSharing, DistributedSlicesLineUpOverTheEmbeddingGroup) {
  Manifest m = pipeline();
  // First stage: wte 32 + h.0 16 = 48; last: wte 32 + h.2 16 + ln_f 8 = 56.
  auto partition = [&](int32_t rank, bool distributed) {
    std::vector<GradBucket> buckets = gradBuckets(m, rank, distributed);
    EXPECT_EQ(buckets.size(), 1u);
    return buckets[0].partition;
  };
  DpPartition first = partition(rankOf(0, 1, 0), true);
  DpPartition last = partition(rankOf(0, 1, kPp - 1), true);
  EXPECT_EQ(first.elements, 48);
  EXPECT_EQ(last.elements, 56);
  EXPECT_EQ(first.shardSize(), 28);
  EXPECT_EQ(last.shardSize(), 28);
  // dp rank 1 owns flat [28, ...) on both: the same elements of wte.
  EXPECT_EQ(first.begin(1), last.begin(1));
  EXPECT_EQ(first.end(1), 48);
  EXPECT_EQ(last.end(1), 56);
  // The middle stage is in no embedding group of two: its own length.
  EXPECT_EQ(partition(rankOf(0, 1, 1), true).shardSize(), 8);
  // Without the distributed optimizer, one slice of everything.
  DpPartition whole = partition(rankOf(0, 1, 0), false);
  EXPECT_EQ(whole.dpSize, 1);
  EXPECT_EQ(whole.padded(), 48);
  EXPECT_EQ(whole.end(0), 48);
}

} // namespace
