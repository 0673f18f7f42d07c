//===- ShardedCheckpointTest.cpp - index.json of sharded checkpoints ------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The index a --save-sharded directory carries: it round-trips, records each
// rank's optimizer slice (the distributed optimizer's half, or everything),
// and a checkpoint of another plan, a changed shard box or a missing index
// are refused with a message that names the difference.
//
//===----------------------------------------------------------------------===//

#include "TempDir.h"
#include "TestManifests.h"

#include "runtime/driver/ShardedCheckpoint.h"

#include <gtest/gtest.h>

#include <fstream>

using namespace loom::driver;
using loom::driver::testing::fusedQkvManifest;
using loom::driver::testing::TempDir;

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
  FlatSlice all = optimizerSlice(m, 1, /*distributed=*/false);
  EXPECT_EQ(all.elements, 3 * 12 + 3 * 2 + 60 + 6);
  EXPECT_EQ(all.begin, 0);
  EXPECT_EQ(all.end, 108);
  FlatSlice half0 = optimizerSlice(m, 0, true), half1 = optimizerSlice(m, 1, true);
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
  ASSERT_EQ(index.slices.size(), 2u);
  EXPECT_EQ(index.slices[1].begin, 54);
  EXPECT_EQ(index.slices[1].end, 108);
  // Without a training state there are no slices.
  writeIndex(t, shardedIndexJson(m, false, ""));
  EXPECT_TRUE(readShardedIndex(t.path(""), m).trainState.empty());
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
