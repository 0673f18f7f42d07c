//===- GradBucketsTest.cpp - The flat gradient buffer's buckets -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// How a rank's parameter shards lay out into one bucket per gradient group
// (dense over dp, experts over expert:dp): the order, each bucket's place in
// the flat buffer and in the optimizer state, its slice over its own group
// with the distributed optimizer, and the property the grad norm and the
// optimizer rely on: over the ranks of a bucket's group, the slices hold
// every element of every parameter of the bucket exactly once. A group
// whose ranks hold different experts is an error that names them.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TestManifests.h"

#include "runtime/rank/GradBuckets.h"

#include <gtest/gtest.h>

#include <map>

using namespace loom::rank;
using loom::rank::testing::expertManifest;

namespace {

Manifest experts() { return parseManifest(expertManifest().dump(), "m.json"); }

// Per rank: wte 60 + router 24 = 84 dense elements, w1 12 + w2 10 = 22
// expert elements.
constexpr int64_t kDense = 84, kExpert = 22;

TEST(GradBuckets, DenseFirstThenEachGroupInManifestOrder) {
  Manifest m = experts();
  std::vector<GradBucket> b = gradBuckets(m, 1, /*distributed=*/false);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].group, "dp");
  EXPECT_EQ(b[0].params, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(b[1].group, "expert:dp");
  EXPECT_EQ(b[1].params, (std::vector<size_t>{1, 3}));
  // Unsliced: the buckets back to back, the state laid out alike.
  EXPECT_EQ(b[0].base, 0);
  EXPECT_EQ(b[1].base, kDense);
  EXPECT_EQ(b[1].stateBase, kDense);
  EXPECT_FALSE(b[1].sharded());
  EXPECT_EQ(b[1].ownBegin(), kDense);
  EXPECT_EQ(b[1].ownEnd(), kDense + kExpert);
  EXPECT_EQ(flatElements(b), kDense + kExpert);
  EXPECT_EQ(stateElements(b), kDense + kExpert);
  // Rank 1 is the first of its expert group [1, 3], the second of dp.
  EXPECT_EQ(b[0].groupRank, 1);
  EXPECT_EQ(b[1].groupRank, 0);
}

TEST(GradBuckets, EachBucketSlicedOverItsOwnGroup) {
  Manifest m = experts();
  std::vector<GradBucket> b = gradBuckets(m, 3, /*distributed=*/true);
  ASSERT_EQ(b.size(), 2u);
  // Dense: 84 over dp 4, 21 each; rank 3 is dp rank 3.
  EXPECT_EQ(b[0].partition.dpSize, 4);
  EXPECT_EQ(b[0].ownBegin(), 63);
  EXPECT_EQ(b[0].ownEnd(), 84);
  // Experts: 22 over expert:dp 2, 11 each; rank 3 is the second of [1, 3].
  EXPECT_EQ(b[1].partition.dpSize, 2);
  EXPECT_EQ(b[1].groupRank, 1);
  EXPECT_EQ(b[1].base, 84);
  EXPECT_EQ(b[1].sliceBegin(), 11);
  EXPECT_EQ(b[1].ownBegin(), 95);
  EXPECT_EQ(b[1].ownEnd(), 106);
  // The state holds the two slices one after the other.
  EXPECT_EQ(b[1].stateBase, 21);
  EXPECT_EQ(stateElements(b), 21 + 11);
}

TEST(GradBuckets, PadsEachBucketToItsGroup) {
  nlohmann::json j = expertManifest();
  j["params"][3]["shape"] = {4, 4}; // w2: 8 elements per rank, 20 experts'
  for (auto &s : j["params"][3]["shards"])
    s["shape"] = {2, 4};
  j["params"][2]["shape"] = {3, 6}; // router: 18, dense 78 (pad to 80)
  for (auto &s : j["params"][2]["shards"])
    s["shape"] = {3, 6};
  Manifest m = parseManifest(j.dump(), "m.json");
  std::vector<GradBucket> b = gradBuckets(m, 3, true);
  EXPECT_EQ(b[0].partition.padded(), 80);
  EXPECT_EQ(b[0].ownBegin(), 60);
  EXPECT_EQ(b[0].ownEnd(), 78); // the pad belongs to no one
  EXPECT_EQ(b[1].base, 80);
  EXPECT_EQ(b[1].partition.shardSize(), 10);
  EXPECT_EQ(b[1].ownBegin(), 90);
  EXPECT_EQ(b[1].stateBase, 20);
  EXPECT_EQ(flatElements(b), 100);
}

TEST(GradBuckets, GroupSlicesHoldEveryElementOnce) {
  Manifest m = experts();
  // For each bucket group, (param, element) -> how many slices hold it.
  std::map<std::pair<int32_t, std::string>,
           std::map<std::pair<size_t, int64_t>, int>>
      held;
  for (int32_t r = 0; r < 4; ++r)
    for (const GradBucket &b : gradBuckets(m, r, true)) {
      std::vector<int64_t> offsets, sizes;
      int64_t at = b.base;
      for (size_t i : b.params) {
        offsets.push_back(at);
        sizes.push_back(numElements(m.params[i].shardOf(r)->box.shape));
        at += sizes.back();
      }
      // The group is named by its first member.
      int32_t group = m.groupOf(b.group, r)->first->front();
      for (const FlatPiece &pc :
           ownedPieces(offsets, sizes, b.ownBegin(), b.ownEnd()))
        for (int64_t e = 0; e < pc.n; ++e)
          ++held[{group, b.group}][{b.params[pc.param], pc.paramOffset + e}];
    }
  ASSERT_EQ(held.size(), 3u); // dp [0..3], expert:dp [0, 2] and [1, 3]
  for (const auto &[group, elements] : held) {
    EXPECT_EQ(int64_t(elements.size()), group.second == "dp" ? kDense : kExpert)
        << group.second;
    for (const auto &[element, count] : elements)
      EXPECT_EQ(count, 1);
  }
}

TEST(GradBuckets, ExpertGroupsMustHoldTheSameExperts) {
  Manifest m = experts();
  EXPECT_NO_THROW(checkBucketGroups(m, 0, gradBuckets(m, 0, true)));
  nlohmann::json j = expertManifest();
  j["params"][1]["shards"][2]["offset"] = {2, 0}; // rank 2 takes w1's rows 2..4
  m = parseManifest(j.dump(), "m.json");
  try {
    checkBucketGroups(m, 0, gradBuckets(m, 0, true));
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(),
                 "--use-distributed-optimizer needs the ranks of each "
                 "expert:dp group to hold the same shards, but ranks 0 and 2 "
                 "hold different parts of \"experts.w1\"");
  }
}

TEST(GradBuckets, NoExpertsIsOneBucket) {
  nlohmann::json j = expertManifest();
  // The expert weights replicated, summed over dp as the rest.
  for (auto &p : j["params"])
    p.erase("gradient_group");
  j["params"][1]["shards"] = j["params"][0]["shards"];
  for (auto &s : j["params"][1]["shards"])
    s["shape"] = {4, 6};
  j["params"][3]["shards"] = j["params"][0]["shards"];
  for (auto &s : j["params"][3]["shards"])
    s["shape"] = {4, 5};
  Manifest m = parseManifest(j.dump(), "m.json");
  std::vector<GradBucket> b = gradBuckets(m, 1, true);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(b[0].partition.elements, 60 + 24 + 24 + 20);
}

} // namespace
