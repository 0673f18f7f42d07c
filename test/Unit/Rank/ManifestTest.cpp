//===- ManifestTest.cpp - manifest.json parsing and validation ------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TestManifests.h"

#include "runtime/rank/Manifest.h"

#include <gtest/gtest.h>

#include <cstdint>

using namespace loom::rank;
using loom::rank::testing::fusedQkvManifest;
using json = nlohmann::json;

namespace {

/// The message parseManifest throws for `j`, or "" if it parses.
std::string errorOf(const json &j) {
  try {
    parseManifest(j.dump(), "m.json");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(Manifest, ParsesFusedQkv) {
  Manifest m = parseManifest(fusedQkvManifest(2).dump(), "m.json");
  EXPECT_EQ(m.worldSize, 2);
  EXPECT_EQ(m.family, "gpt2");
  EXPECT_EQ(m.microBatchSize, 2);
  EXPECT_EQ(m.seqLength, 4);
  EXPECT_EQ(m.vocabSize, 10);
  EXPECT_FALSE(m.eodTokenId.has_value());
  ASSERT_EQ(m.params.size(), 8u);
  // HF tensors: sorted by name, pieces grouped.
  ASSERT_EQ(m.hfTensors.size(), 4u);
  EXPECT_EQ(m.hfTensors[0].name, "h.0.attn.c_attn.bias");
  EXPECT_EQ(m.hfTensors[1].name, "h.0.attn.c_attn.weight");
  EXPECT_EQ(m.hfTensors[1].shape, (Shape{6, 12}));
  EXPECT_EQ(m.hfTensors[1].pieces.size(), 3u);
  EXPECT_EQ(m.hfTensors[2].name, "ln_f.weight");
  const ParamSpec *q = m.findParam("attn.q.weight");
  ASSERT_TRUE(q);
  EXPECT_TRUE(q->hf.transpose);
  ASSERT_TRUE(q->shardOf(1));
  EXPECT_EQ(q->shardOf(1)->box.offset, (Shape{2, 0}));
  // A replicated parameter has one distinct shard.
  EXPECT_EQ(m.findParam("wte.weight")->distinctShards().size(), 1u);
  EXPECT_EQ(q->distinctShards().size(), 2u);
  const Entry &fwd = m.ranks[1].entries.at("forward");
  EXPECT_EQ(fwd.symbol, "loom_forward");
  EXPECT_EQ(fwd.args[4].kind, ArgKind::Comm);
  EXPECT_EQ(fwd.args[4].name, "tp");
  EXPECT_TRUE(m.ranks[0].logsLoss);
  EXPECT_EQ(m.ranks[0].localSeqLength(), 4);
  auto g = m.groupOf("tp", 1);
  ASSERT_TRUE(g);
  EXPECT_EQ(g->second, 1);
  EXPECT_EQ(m.dataParallel(1), (std::pair<int64_t, int64_t>{1, 0}));
}

TEST(Manifest, DataParallelCoordinates) {
  json j = fusedQkvManifest(2);
  j["groups"]["dp"] = {{0, 1}};
  j["plan"]["dp"] = 2;
  j["groups"]["tp"] = {{0}, {1}};
  Manifest m = parseManifest(j.dump(), "m.json");
  EXPECT_EQ(m.dataParallel(0), (std::pair<int64_t, int64_t>{2, 0}));
  EXPECT_EQ(m.dataParallel(1), (std::pair<int64_t, int64_t>{2, 1}));
  j["plan"]["dp"] = 4;
  EXPECT_EQ(errorOf(j),
            "m.json: groups.dp: groups of 2 ranks but the plan says dp 4");
  j["plan"]["dp"] = 1;
  j["groups"]["dp"] = {{0}};
  EXPECT_EQ(errorOf(j), "m.json: groups.dp: the groups hold 1 of the 2 ranks");
}

TEST(Manifest, InvalidJson) {
  try {
    parseManifest("{\"world_size\": ", "out/manifest.json");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_EQ(std::string(e.what()).rfind("out/manifest.json: invalid JSON: ", 0),
              0u)
        << e.what();
  }
}

// Found by fuzz/ManifestFuzzer.cpp: nlohmann throws out_of_range, not
// parse_error, for a number too large for a double, and it escaped.
TEST(Manifest, NumberOutOfRange) {
  try {
    parseManifest("{\"world_size\": 777e777}", "out/manifest.json");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "out/manifest.json: invalid JSON: number overflow "
                           "parsing '777e777'");
  }
}

// Sizes and offsets at the edges of int64 are errors, not undefined
// behavior (signed overflow in the bounds checks) or huge allocations.
TEST(Manifest, IntegersAtTheEdges) {
  json j = fusedQkvManifest(2);
  j["params"][0]["shards"][1]["offset"] = {INT64_MAX, 0};
  EXPECT_EQ(errorOf(j), "m.json: params[0] (attn.q.weight): box "
                        "[9223372036854775807:9223372036854775809, 0:6] lies "
                        "outside the shape [4, 6]");
  j = fusedQkvManifest(1);
  j["params"][4]["hf"]["offset"] = {0, INT64_MAX};
  EXPECT_EQ(errorOf(j), "m.json: params[4].hf: the parameter [6, 4] "
                        "(transposed) at offset [0, 9223372036854775807] does "
                        "not fit in [6, 12]");
  j = fusedQkvManifest(1);
  j["params"][6]["shape"] = {int64_t(1) << 62, 4};
  EXPECT_EQ(errorOf(j), "m.json: params[6].shape: [4611686018427387904, 4] "
                        "has more than 2^63 elements");
  j = fusedQkvManifest(1);
  j["world_size"] = UINT64_MAX;
  EXPECT_EQ(errorOf(j), "m.json: world_size: integer 18446744073709551615 is "
                        "out of range");
  j["world_size"] = int64_t(1) << 31;
  EXPECT_EQ(errorOf(j), "m.json: world_size: 2147483648 ranks do not fit in "
                        "an MPI rank (int)");
  // Billions of ranks of which one is listed: no RankInfo for each.
  j["world_size"] = INT32_MAX;
  EXPECT_EQ(errorOf(j), "m.json: ranks: rank 1 is missing");
}

TEST(Manifest, MissingFile) {
  try {
    readManifest("/nonexistent/manifest.json");
    FAIL() << "no error";
  } catch (const Error &e) {
    EXPECT_STREQ(e.what(), "cannot open manifest /nonexistent/manifest.json");
  }
}

TEST(Manifest, MissingAndMistypedFields) {
  json j = fusedQkvManifest(1);
  j.erase("world_size");
  EXPECT_EQ(errorOf(j), "m.json: missing \"world_size\"");
  j = fusedQkvManifest(1);
  j["seq_length"] = "16";
  EXPECT_EQ(errorOf(j), "m.json: seq_length: expected an integer, got \"16\"");
  j = fusedQkvManifest(1);
  j["micro_batch_size"] = 0;
  EXPECT_EQ(errorOf(j),
            "m.json: micro_batch_size: expected a positive integer, got 0");
  j = fusedQkvManifest(1);
  j["padded_seq_length"] = 2;
  EXPECT_EQ(errorOf(j), "m.json: padded_seq_length: 2 is shorter than "
                        "seq_length 4");
  j["padded_seq_length"] = 20;
  EXPECT_EQ(parseManifest(j.dump(), "m.json").paddedSeqLength, 20);
  j = fusedQkvManifest(1);
  j["dtype"] = "f64";
  EXPECT_EQ(errorOf(j),
            "m.json: dtype: unknown dtype \"f64\" (expected f32, bf16 or f16)");
  j = fusedQkvManifest(1);
  j["format"] = "onnx";
  EXPECT_EQ(errorOf(j), "m.json: format: expected \"loom-manifest\", got \"onnx\"");
  j = fusedQkvManifest(1);
  j["version"] = 2;
  EXPECT_EQ(errorOf(j), "m.json: version: unsupported version 2 (expected "
                        "1: recompile with this loom-compile)");
  // The schema is named by every manifest: a JSON file without it is not
  // one (say, a hand-written or foreign file).
  for (const char *field : {"format", "version"}) {
    j = fusedQkvManifest(1);
    j.erase(field);
    EXPECT_EQ(errorOf(j), std::string("m.json: missing \"") + field + "\"");
  }
  j = fusedQkvManifest(1);
  j["backend"] = "tpu";
  EXPECT_EQ(errorOf(j),
            "m.json: backend: expected \"cpu\" or \"cuda\", got \"tpu\"");
  j = fusedQkvManifest(1);
  j["eod_token_id"] = 10;
  EXPECT_EQ(errorOf(j), "m.json: eod_token_id: token 10 is outside the "
                        "vocabulary [0, 10)");
}

TEST(Manifest, BadParams) {
  json j = fusedQkvManifest(2);
  j["params"][0]["shards"][1]["offset"] = {3, 0};
  EXPECT_EQ(errorOf(j), "m.json: params[0] (attn.q.weight): box [3:5, 0:6] "
                        "lies outside the shape [4, 6]");
  j = fusedQkvManifest(2);
  j["params"][0]["shards"][1]["offset"] = {1, 0};
  EXPECT_EQ(errorOf(j), "m.json: params[0] (attn.q.weight): boxes [0:2, 0:6] "
                        "and [1:3, 0:6] overlap");
  j = fusedQkvManifest(2);
  j["params"][0]["shards"].erase(1);
  EXPECT_EQ(errorOf(j), "m.json: params[0] (attn.q.weight): the pieces cover "
                        "12 of 24 elements of [4, 6]");
  j = fusedQkvManifest(2);
  j["params"][0]["shards"][1]["rank"] = 2;
  EXPECT_EQ(errorOf(j), "m.json: params[0].shards[1]: rank 2 is outside the "
                        "world of 2 ranks");
  j = fusedQkvManifest(1);
  j["params"][0]["init"] = {{"kind", "xavier"}};
  EXPECT_EQ(errorOf(j), "m.json: params[0].init.kind: unknown init \"xavier\" "
                        "(expected normal, zeros or ones)");
  j = fusedQkvManifest(1);
  j["params"][1]["name"] = "attn.q.weight";
  EXPECT_EQ(errorOf(j), "m.json: params[1]: parameter \"attn.q.weight\" is "
                        "listed twice");
}

TEST(Manifest, BadHfPlacement) {
  // v at columns 9..13 of a 12-column c_attn does not fit.
  json j = fusedQkvManifest(1);
  j["params"][4]["hf"]["offset"] = {0, 9};
  EXPECT_EQ(errorOf(j), "m.json: params[4].hf: the parameter [6, 4] "
                        "(transposed) at offset [0, 9] does not fit in [6, 12]");
  // v dropped: c_attn has a hole.
  j = fusedQkvManifest(1);
  j["params"].erase(4);
  EXPECT_EQ(errorOf(j), "m.json: HF tensor \"h.0.attn.c_attn.weight\": the "
                        "pieces cover 48 of 72 elements of [6, 12]");
  // k placed over q.
  j = fusedQkvManifest(1);
  j["params"][2]["hf"]["offset"] = {0, 2};
  EXPECT_EQ(errorOf(j), "m.json: HF tensor \"h.0.attn.c_attn.weight\": boxes "
                        "[0:6, 0:4] and [0:6, 2:6] overlap");
  j = fusedQkvManifest(1);
  j["params"][2]["hf"]["shape"] = {6, 13};
  EXPECT_EQ(errorOf(j).rfind("m.json: params[2]: HF tensor "
                             "\"h.0.attn.c_attn.weight\" has shape [6, 13] "
                             "here but [6, 12]", 0),
            0u);
}

TEST(Manifest, BadRanksAndEntries) {
  json j = fusedQkvManifest(2);
  j["ranks"][1]["logs_loss"] = true;
  EXPECT_EQ(errorOf(j), "m.json: ranks: exactly one rank must have "
                        "\"logs_loss\": true, found 2");
  j = fusedQkvManifest(2);
  j["ranks"].erase(1);
  EXPECT_EQ(errorOf(j), "m.json: ranks: rank 1 is missing");
  j = fusedQkvManifest(1);
  j["entries"]["forward"]["args"][3] = {{"kind", "gradient"}};
  EXPECT_EQ(errorOf(j), "m.json: entries.forward.args[3].kind: unknown "
                        "argument kind \"gradient\" (expected tokens, labels, "
                        "loss_mask, param, loss, comm, grad_scale or grad)");
  // Entries the driver does not run may take kinds it does not know; the
  // train step's own kinds are parsed.
  j = fusedQkvManifest(1);
  j["entries"]["train_step"] = {
      {"symbol", "loom_train_step"},
      {"args",
       {{{"kind", "master_weights"}},
        {{"kind", "tokens"}},
        {{"kind", "grad_scale"}},
        {{"kind", "grad"}, {"name", "attn.q.weight"}}}}};
  Manifest m = parseManifest(j.dump(), "m.json");
  const Entry &train = m.ranks[0].entries.at("train_step");
  EXPECT_EQ(train.args[0].kind, ArgKind::Other);
  EXPECT_EQ(train.args[0].name, "master_weights");
  EXPECT_EQ(train.args[1].kind, ArgKind::Tokens);
  EXPECT_EQ(train.args[2].kind, ArgKind::GradScale);
  EXPECT_EQ(train.args[3].kind, ArgKind::Grad);
  EXPECT_EQ(train.args[3].name, "attn.q.weight");
  EXPECT_EQ(train.args[3].chunk, -1);
  // A pipelined step's gradient names the chunk that completes it.
  j["entries"]["train_step"]["args"][3]["chunk"] = 1;
  EXPECT_EQ(parseManifest(j.dump(), "m.json")
                .ranks[0]
                .entries.at("train_step")
                .args[3]
                .chunk,
            1);
  j["entries"]["train_step"]["args"][3]["chunk"] = -2;
  EXPECT_EQ(errorOf(j), "m.json: entries.train_step.args[3].chunk: chunk -2 "
                        "must be at least 0");
  j["entries"]["train_step"]["args"][3].erase("chunk");
  j["entries"]["train_step"]["args"][1]["chunk"] = 0;
  EXPECT_EQ(errorOf(j), "m.json: entries.train_step.args[1].chunk: only a "
                        "gradient names its chunk");
  j["entries"]["train_step"]["args"][1].erase("chunk");
  j["entries"]["train_step"]["args"][3]["name"] = "nope";
  EXPECT_EQ(errorOf(j), "m.json: entries.train_step.args[3]: unknown "
                        "parameter \"nope\"");
  j = fusedQkvManifest(1);
  j["entries"]["forward"]["args"][3]["name"] = "nope";
  EXPECT_EQ(errorOf(j), "m.json: entries.forward.args[3]: unknown parameter "
                        "\"nope\"");
  j = fusedQkvManifest(1);
  j["entries"]["forward"]["args"][4]["group"] = "ep";
  EXPECT_EQ(errorOf(j), "m.json: entries.forward.args[4]: unknown group kind "
                        "\"ep\"");
  j = fusedQkvManifest(1);
  j["entries"]["forward"]["args"].erase(5);
  EXPECT_EQ(errorOf(j), "m.json: ranks[0]: rank 0 logs the loss but its "
                        "forward entry has no loss argument");
  j = fusedQkvManifest(1);
  j.erase("entries");
  EXPECT_EQ(errorOf(j), "m.json: ranks[0]: rank 0 has no \"forward\" entry");
  // A rank that takes a parameter it does not hold.
  j = fusedQkvManifest(2);
  j["params"][0]["shards"] = {{{"rank", 0}, {"offset", {0, 0}}, {"shape", {4, 6}}}};
  EXPECT_EQ(errorOf(j), "m.json: ranks[1]: entry \"forward\" of rank 1 takes "
                        "parameter \"attn.q.weight\" but the rank holds no "
                        "shard of it");
}

TEST(Manifest, Groups) {
  json j = fusedQkvManifest(2);
  j["groups"]["tp"] = {{0, 1}, {1}};
  EXPECT_EQ(errorOf(j), "m.json: groups.tp[1]: rank 1 is in two tp groups");
  j["groups"]["tp"] = {{0, 5}};
  EXPECT_EQ(errorOf(j), "m.json: groups.tp[0]: rank 5 is outside the world "
                        "of 2 ranks");
  // Placeholder kinds with no groups are ignored.
  j = fusedQkvManifest(2);
  j["groups"]["..."] = json::array();
  EXPECT_EQ(errorOf(j), "");
}

TEST(Manifest, SequenceRanges) {
  json j = fusedQkvManifest(2);
  j["ranks"][1]["sequence_ranges"] = {{0, 1}, {3, 4}};
  Manifest m = parseManifest(j.dump(), "m.json");
  EXPECT_EQ(m.ranks[1].localSeqLength(), 2);
  j["ranks"][1]["sequence_ranges"] = {{2, 5}};
  EXPECT_EQ(errorOf(j), "m.json: ranks[1].sequence_ranges[0]: range [2, 5) "
                        "is not inside [0, 4)");
}

TEST(Manifest, TilingChecksEveryElement) {
  // Disjoint boxes whose sizes add up cover the shape exactly.
  EXPECT_NO_THROW(checkTiling({{{0, 0}, {2, 3}}, {{2, 0}, {2, 3}}}, {4, 3}, "t"));
  EXPECT_THROW(checkTiling({{{0, 0}, {2, 3}}, {{1, 0}, {2, 3}}}, {4, 3}, "t"),
               Error);
  EXPECT_THROW(checkTiling({{{0, 0}, {2, 3}}}, {4, 3}, "t"), Error);
}

TEST(Manifest, PaddedVocabularyRows) {
  json j = fusedQkvManifest(1);
  json &wte = j["params"][6];
  wte["hf"] = {{"name", "wte.weight"}, {"shape", {10, 6}}, {"file_rows", 8}};
  Manifest m = parseManifest(j.dump(), "m.json");
  const HfTensor &t = *std::find_if(
      m.hfTensors.begin(), m.hfTensors.end(),
      [](const HfTensor &t) { return t.name == "wte.weight"; });
  EXPECT_TRUE(t.padded());
  EXPECT_EQ(t.fileShape(), (Shape{8, 6}));
  EXPECT_EQ(t.paddingShape(), (Shape{2, 6}));
  EXPECT_EQ(t.paddingName(), "wte.weight.vocab_padding");
  EXPECT_FALSE(m.hfTensors[0].padded());

  wte["hf"]["file_rows"] = 11;
  EXPECT_EQ(errorOf(j), "m.json: params[6].hf.file_rows: must be between 1 "
                        "and the HF tensor's 10 rows");
  wte["hf"] = {{"name", "wte.weight"},
               {"shape", {6, 10}},
               {"transpose", true},
               {"file_rows", 5}};
  EXPECT_EQ(errorOf(j), "m.json: params[6].hf.file_rows: a padded HF tensor "
                        "must hold the untransposed parameter's rows whole");
}

TEST(Manifest, PlacementOverAGroupKind) {
  // Two tp ranks: q.weight split on dim 0 by tp position, ln_f replicated.
  json j = fusedQkvManifest(2);
  j["groups"]["tp"] = {{1, 0}}; // group position 0 is rank 1
  for (json &p : j["params"]) {
    bool split = p["name"].get<std::string>().rfind("attn.", 0) == 0;
    p.erase("shards");
    p["placement"] = {{"group", "tp"}};
    if (split)
      p["placement"]["split_dim"] = 0;
  }
  Manifest m = parseManifest(j.dump(), "m.json");
  const ParamSpec &q = *m.findParam("attn.q.weight");
  ASSERT_EQ(q.shards.size(), 2u);
  EXPECT_EQ(q.shards[0].rank, 0); // sorted by rank
  EXPECT_EQ(q.shardOf(1)->box.offset, (Shape{0, 0}));
  EXPECT_EQ(q.shardOf(0)->box.offset, (Shape{2, 0}));
  EXPECT_EQ(q.shardOf(0)->box.shape, (Shape{2, 6}));
  EXPECT_EQ(m.findParam("ln_f.weight")->shardOf(0)->box.shape, (Shape{6}));

  json bad = j;
  bad["params"][0]["placement"]["group"] = "cp";
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement.group: \"groups\" has "
                          "no kind \"cp\"");
  bad = j;
  bad["params"][0]["placement"]["split_dim"] = 2;
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement.split_dim: dim 2 is "
                          "outside the parameter's [4, 6]");
  bad = j;
  bad["params"][0]["placement"]["split_dim"] = 1;
  bad["params"][0]["shape"] = {4, 5};
  bad["params"][0]["hf"]["offset"] = {0, 0};
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement: dim 1 of [4, 5] does "
                          "not split over 2 ranks");
  bad = j;
  bad["params"][0]["shards"] = json::array();
  EXPECT_EQ(errorOf(bad),
            "m.json: params[0]: give \"shards\" or \"placement\", not both");
}

TEST(Manifest, PlacementSplitTwice) {
  // Four ranks: q.weight [4, 6] split on dim 0 by the "ep" position, then
  // on dim 1 by the "etp" position (an expert's weights under ep x etp).
  json j = fusedQkvManifest(4);
  j["groups"]["ep"] = {{0, 1}, {2, 3}};
  j["groups"]["etp"] = {{0, 2}, {1, 3}};
  json &q = j["params"][0];
  q.erase("shards");
  q["placement"] = {{"group", "ep"},
                    {"split_dim", 0},
                    {"then", {{"group", "etp"}, {"split_dim", 1}}}};
  Manifest m = parseManifest(j.dump(), "m.json");
  const ParamSpec &w = *m.findParam("attn.q.weight");
  ASSERT_EQ(w.shards.size(), 4u);
  EXPECT_EQ(w.shardOf(0)->box.offset, (Shape{0, 0}));
  EXPECT_EQ(w.shardOf(1)->box.offset, (Shape{2, 0}));
  EXPECT_EQ(w.shardOf(2)->box.offset, (Shape{0, 3}));
  EXPECT_EQ(w.shardOf(3)->box.offset, (Shape{2, 3}));
  EXPECT_EQ(w.shardOf(3)->box.shape, (Shape{2, 3}));
  // Round trip.
  Manifest again = parseManifest(serialize(m), "again.json");
  EXPECT_EQ(again.findParam("attn.q.weight")->shardOf(2)->box.offset,
            (Shape{0, 3}));

  json bad = j;
  bad["params"][0]["placement"]["then"]["split_dim"] = 0;
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement.then.split_dim: dim 0 "
                          "is not another dim of [4, 6]");
  bad = j;
  bad["params"][0]["placement"]["then"]["group"] = "cp";
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement.then.group: "
                          "\"groups\" has no kind \"cp\"");
  bad = j;
  bad["groups"]["etp"] = {{0, 1, 2, 3}};
  EXPECT_EQ(errorOf(bad), "m.json: params[0].placement.then: dim 1 of [4, 6] "
                          "does not split over 4 ranks");
}

} // namespace
