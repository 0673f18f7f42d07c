//===- OptionsTest.cpp - Flags of the per-rank executables ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Program.h"
#include "runtime/rank/RankProgram.h"

#include <gtest/gtest.h>

#include <regex>

using namespace loom::rank;

namespace {

std::string errorOf(const std::vector<std::string> &args) {
  try {
    parseOptions(args);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(Options, Defaults) {
  Options o = parseOptions({});
  EXPECT_EQ(o.steps, 1);
  EXPECT_EQ(o.seed, 1234u);
  EXPECT_TRUE(o.manifest.empty());
  EXPECT_TRUE(o.data.empty());
  EXPECT_FALSE(o.dataFormat);
}

TEST(Options, AllFlags) {
  Options o = parseOptions({"--manifest", "out/manifest.json", "--steps=3",
                            "--data", "tok.bin", "--data-format", "uint16",
                            "--seed", "7", "--metrics-jsonl", "m.jsonl",
                            "--load", "a.safetensors", "--save=b.safetensors",
                            "--threads", "2"});
  EXPECT_EQ(o.manifest, "out/manifest.json");
  EXPECT_EQ(o.steps, 3);
  EXPECT_EQ(o.data, "tok.bin");
  EXPECT_EQ(o.dataFormat, RawFormat::UInt16);
  EXPECT_EQ(o.seed, 7u);
  EXPECT_EQ(o.metricsJsonl, "m.jsonl");
  EXPECT_EQ(o.load, "a.safetensors");
  EXPECT_EQ(o.save, "b.safetensors");
  EXPECT_EQ(o.threads, 2);
  EXPECT_TRUE(parseOptions({"--help"}).help);
}

TEST(Options, Errors) {
  EXPECT_EQ(errorOf({"--stpes", "3"}), "unknown flag '--stpes' (see --help)");
  EXPECT_EQ(errorOf({"--steps"}), "--steps needs a value");
  EXPECT_EQ(errorOf({"--steps", "three"}),
            "--steps expects an integer, got 'three'");
  EXPECT_EQ(errorOf({"--steps", "-1"}), "--steps must be at least 0, got -1");
  EXPECT_EQ(errorOf({"--threads", "0"}), "--threads must be at least 1, got 0");
  EXPECT_EQ(errorOf({"--data", "x", "--data-format", "int64"}),
            "--data-format expects int32 or uint16, got 'int64'");
  EXPECT_EQ(errorOf({"--data-format", "int32"}), "--data-format needs --data");
  EXPECT_EQ(errorOf({"positional"}), "unknown flag 'positional' (see --help)");
  EXPECT_EQ(errorOf({"--use-distributed-optimizer"}),
            "--use-distributed-optimizer needs --train");
}

TEST(Options, DistributedOptimizerAndShardedCheckpoints) {
  EXPECT_FALSE(parseOptions({"--train"}).useDistributedOptimizer);
  EXPECT_TRUE(parseOptions({"--train", "--use-distributed-optimizer"})
                  .useDistributedOptimizer);
  Options o = parseOptions({"--load-sharded", "a", "--save-sharded=b"});
  EXPECT_EQ(o.loadSharded, "a");
  EXPECT_EQ(o.saveSharded, "b");
  EXPECT_EQ(errorOf({"--load", "x", "--load-sharded", "y"}),
            "--load and --load-sharded exclude each other");
}

TEST(Options, RepeatsKeepTheLastValue) {
  Options o = parseOptions({"--steps", "2", "--steps=5", "--train", "--train"});
  EXPECT_EQ(o.steps, 5);
  EXPECT_TRUE(o.train);
}

TEST(Options, DistributedTimeout) {
  EXPECT_EQ(parseOptions({}).distributedTimeoutMinutes, 10.0);
  EXPECT_EQ(parseOptions({"--distributed-timeout-minutes", "0.5"})
                .distributedTimeoutMinutes,
            0.5);
  EXPECT_EQ(errorOf({"--distributed-timeout-minutes", "0"}),
            "--distributed-timeout-minutes must be above 0, got 0");
}

// loom-run checks and documents the rank flags through RankProgram.h: the
// same definitions, so its --help and checks cannot drift from the parser.
TEST(Options, RankFlagsForLoomRun) {
  EXPECT_EQ(checkRankFlags({"--steps", "3", "--train"}), "");
  EXPECT_EQ(checkRankFlags({"--stpes", "3"}),
            "unknown flag '--stpes' (see --help)");
  EXPECT_EQ(checkRankFlags({"--save-interval", "2"}),
            "--save-interval needs --save or --save-sharded");
  EXPECT_TRUE(rankFlagTakesValue("--steps"));
  EXPECT_TRUE(rankFlagTakesValue("--distributed-timeout-minutes"));
  EXPECT_FALSE(rankFlagTakesValue("--train"));
  EXPECT_FALSE(rankFlagTakesValue("--stpes"));
  EXPECT_TRUE(isRankFlag("--steps"));
  EXPECT_TRUE(isRankFlag("--train-iters")); // Megatron's name, an alias
  EXPECT_TRUE(isRankFlag("--train"));
  EXPECT_FALSE(isRankFlag("--stpes"));
  EXPECT_FALSE(isRankFlag("--help")); // the tools' own
  EXPECT_FALSE(isRankFlag("steps"));
  EXPECT_EQ(parseOptions({"--train-iters", "7"}).steps, 7);

  // Every flag the help shows is one the parser takes, with a value exactly
  // when the help shows one.
  std::string usage = rankUsage("rank-00000");
  std::regex flag(R"(\n  (--[a-z0-9-]+)(?:,--[a-z0-9-]+)*( [A-Z]+)?)");
  int seen = 0;
  for (auto it = std::sregex_iterator(usage.begin(), usage.end(), flag);
       it != std::sregex_iterator(); ++it, ++seen) {
    std::string name = (*it)[1];
    bool showsValue = (*it)[2].matched;
    EXPECT_EQ(rankFlagTakesValue(name), showsValue) << name;
    EXPECT_EQ(isRankFlag(name), name != "--help") << name;
    std::string error = checkRankFlags(
        showsValue ? std::vector<std::string>{name, "1"}
                   : std::vector<std::string>{name});
    EXPECT_EQ(error.find("unknown flag"), std::string::npos) << error;
  }
  EXPECT_EQ(seen, 40) << usage; // every flag: add a new one here too
}

} // namespace
