//===- CheckpointPairTest.cpp - One save's model and optimizer files ------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Every state a save can stop in: before its renames (the previous pair),
// between them (the model still at its .tmp name), after them; and pairs
// that no save produced, which must be refused with both names.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TempDir.h"

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/CheckpointPair.h"
#include "runtime/rank/Error.h"
#include "runtime/rank/MappedFile.h"
#include "runtime/rank/Optimizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace loom::rank;
using loom::rank::testing::TempDir;

namespace {

/// A model file of one tensor filled with `value`; returns its data digest.
uint64_t writeModel(const std::string &path, float value) {
  std::vector<float> w(4, value);
  writeSafetensors(path, {{"w", LOOMRT_F32, {4}, w.data()}},
                   {{"format", "pt"}});
  return SafetensorsFile(path).dataDigest();
}

/// An optimizer file of `iteration` that names its model by digest.
void writeOptimizer(const std::string &path, int64_t iteration,
                    std::optional<uint64_t> modelDigest) {
  std::vector<float> m(4, float(iteration));
  TrainState state;
  state.iteration = iteration;
  std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"loom.train_state", state.toJson()}};
  if (modelDigest)
    meta[kModelDigestKey] = modelDigestStamp(*modelDigest);
  writeSafetensors(path, {{"optimizer.exp_avg.w", LOOMRT_F32, {4}, m.data()}},
                   meta);
}

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

struct Pair {
  TempDir dir;
  std::string model = dir.path("ck.safetensors");
  std::string optimizer = dir.path("ck.optim.safetensors");
};

TEST(CheckpointPair, OneSaveIsAccepted) {
  Pair p;
  writeOptimizer(p.optimizer, 4, writeModel(p.model, 4.0f));
  std::string before = slurp(p.model);
  EXPECT_EQ(settleCheckpointPair(p.model, p.optimizer), std::nullopt);
  EXPECT_EQ(slurp(p.model), before);
}

TEST(CheckpointPair, ModelOnlyCheckpointIsAccepted) {
  Pair p;
  writeModel(p.model, 1.0f);
  EXPECT_EQ(settleCheckpointPair(p.model, p.optimizer), std::nullopt);
}

TEST(CheckpointPair, SaveStoppedBetweenRenamesIsCompleted) {
  // Iteration 3's pair, then iteration 4's optimizer state in place and
  // its model still at ck.safetensors.tmp.
  Pair p;
  writeOptimizer(p.optimizer, 3, writeModel(p.model, 3.0f));
  uint64_t next = writeModel(p.model + ".tmp", 4.0f);
  std::string nextBytes = slurp(p.model + ".tmp");
  writeOptimizer(p.optimizer, 4, next);

  std::optional<std::string> note = settleCheckpointPair(p.model, p.optimizer);
  ASSERT_TRUE(note.has_value());
  EXPECT_NE(note->find("completed the interrupted save of iteration 4"),
            std::string::npos)
      << *note;
  EXPECT_EQ(slurp(p.model), nextBytes);
  EXPECT_FALSE(fileExists(p.model + ".tmp"));
  // Settled: a second look finds one save.
  EXPECT_EQ(settleCheckpointPair(p.model, p.optimizer), std::nullopt);
}

TEST(CheckpointPair, MixedPairIsRefused) {
  Pair p;
  writeModel(p.model, 3.0f);
  writeOptimizer(p.optimizer, 4, writeModel(p.dir.path("other"), 4.0f));
  std::string error =
      errorOf([&] { settleCheckpointPair(p.model, p.optimizer); });
  EXPECT_NE(error.find("checkpoint " + p.model + " and optimizer state " +
                       p.optimizer + " come from different saves"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("iteration 4"), std::string::npos) << error;
}

TEST(CheckpointPair, PartialTmpDoesNotCompleteASave) {
  // The .tmp of the right save, cut short: not a partner.
  Pair p;
  writeModel(p.model, 3.0f);
  uint64_t next = writeModel(p.model + ".tmp", 4.0f);
  writeOptimizer(p.optimizer, 4, next);
  std::string bytes = slurp(p.model + ".tmp");
  std::ofstream(p.model + ".tmp", std::ios::binary | std::ios::trunc)
      << bytes.substr(0, bytes.size() - 3);
  EXPECT_NE(errorOf([&] {
              settleCheckpointPair(p.model, p.optimizer);
            }).find("come from different saves"),
            std::string::npos);
}

TEST(CheckpointPair, OptimizerStateWithoutItsModelDigestIsRefused) {
  Pair p;
  writeModel(p.model, 3.0f);
  writeOptimizer(p.optimizer, 7, std::nullopt);
  std::string error =
      errorOf([&] { settleCheckpointPair(p.model, p.optimizer); });
  EXPECT_NE(error.find("optimizer state " + p.optimizer +
                       " (iteration 7) does not record which model file"),
            std::string::npos)
      << error;
}

TEST(CheckpointPair, DigestCoversTheDataOnly) {
  // Metadata does not enter the digest; every data byte does.
  TempDir dir;
  std::vector<float> w = {1, 2, 3, 4};
  writeSafetensors(dir.path("a"), {{"w", LOOMRT_F32, {4}, w.data()}},
                   {{"format", "pt"}});
  writeSafetensors(dir.path("b"), {{"w", LOOMRT_F32, {4}, w.data()}},
                   {{"format", "pt"}, {"other", "metadata"}});
  EXPECT_EQ(SafetensorsFile(dir.path("a")).dataDigest(),
            SafetensorsFile(dir.path("b")).dataDigest());
  w[2] = 5;
  writeSafetensors(dir.path("c"), {{"w", LOOMRT_F32, {4}, w.data()}},
                   {{"format", "pt"}});
  EXPECT_NE(SafetensorsFile(dir.path("a")).dataDigest(),
            SafetensorsFile(dir.path("c")).dataDigest());
}

} // namespace
