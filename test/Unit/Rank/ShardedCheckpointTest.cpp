//===- ShardedCheckpointTest.cpp - index.json of sharded checkpoints ------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The index a --save-sharded directory carries: it round-trips, records each
// rank's optimizer slice (the distributed optimizer's half, or everything
// once per data-parallel group), lists every box once (in its first
// holder's file), and a checkpoint of another plan, a changed shard box, a
// box no file holds or a missing index are refused with a message that
// names the difference.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TempDir.h"
#include "test/Unit/Rank/TestManifests.h"

#include "runtime/rank/ShardedCheckpoint.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace loom::rank;
using loom::rank::testing::expertManifest;
using loom::rank::testing::fusedQkvManifest;
using loom::rank::testing::TempDir;

namespace {

/// fusedQkvManifest(2) whose two ranks also form one data-parallel group
/// (only the flat-buffer arithmetic looks at it).
Manifest dpManifest() {
  nlohmann::json j = fusedQkvManifest(2);
  j["groups"]["dp"] = {{0, 1}};
  j["plan"]["dp"] = 2;
  return parseManifest(j.dump(), "m.json");
}

std::string errorOf(const std::string &dir, const Manifest &m) {
  try {
    readShardedIndex(dir, m);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

void writeIndex(const TempDir &t, const std::string &text) {
  std::ofstream(t.path("index.json")) << text;
}

TEST(ShardedCheckpoint, OptimizerSlices) {
  Manifest m = dpManifest();
  // Per rank: q, k, v weights [2, 6] and biases [2], wte [10, 6], ln_f [6].
  // One bucket: no parameter has a gradient group of its own.
  ASSERT_EQ(gradBuckets(m, 1, false).size(), 1u);
  FlatSlice all = optimizerSlice(gradBuckets(m, 1, /*distributed=*/false)[0]);
  EXPECT_EQ(all.elements, 3 * 12 + 3 * 2 + 60 + 6);
  EXPECT_EQ(all.begin, 0);
  EXPECT_EQ(all.end, 108);
  FlatSlice half0 = optimizerSlice(gradBuckets(m, 0, true)[0]),
            half1 = optimizerSlice(gradBuckets(m, 1, true)[0]);
  EXPECT_EQ(half0.begin, 0);
  EXPECT_EQ(half0.end, 54);
  EXPECT_EQ(half1.begin, 54);
  EXPECT_EQ(half1.end, 108);
  EXPECT_EQ(shardFileName(3), "rank-00003.safetensors");
}

TEST(ShardedCheckpoint, IndexRoundTrip) {
  TempDir t;
  Manifest m = dpManifest();
  writeIndex(t, shardedIndexJson(m, true, R"({"iteration": 3})"));
  ShardedIndex index = readShardedIndex(t.path(""), m);
  EXPECT_TRUE(index.distributed);
  EXPECT_EQ(index.trainState, R"({"iteration":3})");
  EXPECT_EQ(index.version, 2);
  ASSERT_EQ(index.slices.size(), 2u);
  ASSERT_EQ(index.slices[1].count("dp"), 1u);
  EXPECT_EQ(index.slices[1].at("dp").begin, 54);
  EXPECT_EQ(index.slices[1].at("dp").end, 108);
  // The plain optimizer's state is equal over dp: rank 0 writes it.
  writeIndex(t, shardedIndexJson(m, false, R"({"iteration": 3})"));
  index = readShardedIndex(t.path(""), m);
  ASSERT_EQ(index.slices.size(), 2u);
  ASSERT_EQ(index.slices[0].count("dp"), 1u);
  EXPECT_EQ(index.slices[0].at("dp").end, 108);
  EXPECT_TRUE(index.slices[1].empty());
  // Without a training state there are no slices.
  writeIndex(t, shardedIndexJson(m, false, ""));
  EXPECT_TRUE(readShardedIndex(t.path(""), m).trainState.empty());
}

TEST(ShardedCheckpoint, ExpertSlicesApart) {
  // dp 4 x ep 2: 84 dense and 22 expert elements per rank.
  TempDir t;
  Manifest m = parseManifest(expertManifest().dump(), "m.json");
  std::string text = shardedIndexJson(m, true, R"({"iteration": 3})");
  nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["ranks"][3]["optimizer"]["begin"], 63);
  EXPECT_EQ(j["ranks"][3]["optimizer.expert:dp"]["begin"], 11);
  EXPECT_EQ(optimizerKey(m, "dp"), "optimizer");
  EXPECT_EQ(optimizerKey(m, "expert:dp"), "optimizer.expert:dp");
  writeIndex(t, text);
  ShardedIndex index = readShardedIndex(t.path(""), m);
  ASSERT_EQ(index.slices.size(), 4u);
  const FlatSlice &e = index.slices[3].at("expert:dp");
  EXPECT_EQ(e.elements, 22);
  EXPECT_EQ(e.begin, 11);
  EXPECT_EQ(e.end, 22);
  EXPECT_EQ(index.slices[3].at("dp").end, 84);
  // The plain optimizer: dense state from dp rank 0, each expert group's
  // from its first rank (0 of [0, 2], 1 of [1, 3]).
  writeIndex(t, shardedIndexJson(m, false, R"({"iteration": 3})"));
  index = readShardedIndex(t.path(""), m);
  EXPECT_EQ(index.slices[0].size(), 2u);
  EXPECT_EQ(index.slices[1].size(), 1u);
  EXPECT_EQ(index.slices[1].at("expert:dp").end, 22);
  EXPECT_TRUE(index.slices[2].empty());
  EXPECT_TRUE(index.slices[3].empty());
  // A wrong length is named by its key.
  j["ranks"][3]["optimizer.expert:dp"]["elements"] = 23;
  writeIndex(t, j.dump());
  EXPECT_EQ(errorOf(t.path(""), m),
            "sharded checkpoint " + t.path("") +
                ": rank 3 has a bad optimizer.expert:dp slice in index.json");
  // Before version 3 experts shared the dense slice: no slices are taken
  // (loading the optimizer state refuses it, the model loads).
  j = nlohmann::json::parse(text);
  j["version"] = 2;
  writeIndex(t, j.dump());
  index = readShardedIndex(t.path(""), m);
  EXPECT_EQ(index.version, 2);
  EXPECT_TRUE(index.slices[3].empty());
}

TEST(ShardedCheckpoint, EachBoxOnce) {
  Manifest m = dpManifest();
  // Rank 0 is the first holder of every replicated box (wte, ln_f) and of
  // its own q/k/v rows; rank 1 writes only its q/k/v rows.
  const ParamSpec &wte = *m.findParam("wte.weight");
  EXPECT_EQ(wte.firstHolder(*wte.shardOf(1)), 0);
  const ParamSpec &q = *m.findParam("attn.q.weight");
  EXPECT_EQ(q.firstHolder(*q.shardOf(1)), 1);
  EXPECT_TRUE(writesOptimizerSlice(gradBuckets(m, 0, false)[0]));
  EXPECT_FALSE(writesOptimizerSlice(gradBuckets(m, 1, false)[0]));
  EXPECT_TRUE(writesOptimizerSlice(gradBuckets(m, 1, true)[0]));
  nlohmann::json index = nlohmann::json::parse(shardedIndexJson(m, false, ""));
  EXPECT_EQ(index["version"], 2);
  EXPECT_EQ(index["ranks"][0]["params"].size(), 8u);
  std::vector<std::string> names;
  for (const auto &p : index["ranks"][1]["params"])
    names.push_back(p["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "attn.q.weight", "attn.q.bias", "attn.k.weight",
                       "attn.k.bias", "attn.v.weight", "attn.v.bias"}));

  // A box no file holds.
  TempDir t;
  index["ranks"][0]["params"].erase(index["ranks"][0]["params"].end() - 1);
  writeIndex(t, index.dump());
  EXPECT_EQ(errorOf(t.path(""), m),
            "sharded checkpoint " + t.path("") +
                ": rank 0 saved no shard of \"ln_f.weight\"");
  // Version 1: every rank listed all it held; that loads too.
  index = nlohmann::json::parse(shardedIndexJson(m, false, ""));
  index["version"] = 1;
  index["ranks"][1]["params"] = index["ranks"][0]["params"];
  for (size_t i = 0; i < 6; ++i)
    index["ranks"][1]["params"][i]["offset"][0] = 2;
  writeIndex(t, index.dump());
  EXPECT_EQ(errorOf(t.path(""), m), "");
}

TEST(ShardedCheckpoint, OtherPlansAreNamed) {
  TempDir t;
  writeIndex(t, shardedIndexJson(
                    parseManifest(fusedQkvManifest(2).dump(), "m.json"), false,
                    ""));
  Manifest tp1 = parseManifest(fusedQkvManifest(1).dump(), "m.json");
  std::string dir = t.path("");
  EXPECT_EQ(errorOf(dir, tp1),
            "sharded checkpoint " + dir +
                ": saved under the plan cp 1, dp 1, pp 1, tp 2, world size 2, "
                "but this program is cp 1, dp 1, pp 1, tp 1, world size 1; a "
                "sharded checkpoint loads into its own plan only (save a full "
                "checkpoint with --save and --load it to change plans)");

  // Same plan, another box for one shard.
  nlohmann::json j = fusedQkvManifest(2);
  j["params"][0]["shards"][1]["offset"] = {1, 0};
  j["params"][0]["shards"][0]["shape"] = {1, 6};
  j["params"][0]["shards"][1]["shape"] = {3, 6};
  Manifest moved = parseManifest(j.dump(), "m.json");
  EXPECT_EQ(errorOf(dir, moved),
            "sharded checkpoint " + dir +
                ": rank 0 saved \"attn.q.weight\" [0:2, 0:6], but holds "
                "[0:1, 0:6] here");

  EXPECT_EQ(errorOf(t.path("none"), tp1),
            "sharded checkpoint " + t.path("none") +
                " has no index.json (not a sharded checkpoint, or its save "
                "did not finish)");
  writeIndex(t, "{\"format\": 3");
  EXPECT_EQ(errorOf(dir, tp1),
            "sharded checkpoint " + dir + ": index.json is not JSON");
}

} // namespace
