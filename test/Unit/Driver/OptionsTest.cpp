//===- OptionsTest.cpp - Flags of the per-rank executables ----------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/Driver.h"

#include <gtest/gtest.h>

using namespace loom::driver;

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

} // namespace
