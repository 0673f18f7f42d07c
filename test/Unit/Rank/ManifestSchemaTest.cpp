//===- ManifestSchemaTest.cpp - manifest.json written, then read ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The one serializer and parser of runtime/manifest: what loom-compile
// writes parses back into the same structs, for a manifest with every kind
// of field (pipelined entries, context-parallel groups and sequence ranges,
// HF placements, a padded vocabulary and sequence), and the text is the
// format loom-compile has always written (llvm::json's).
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TestManifests.h"

#include "runtime/manifest/Manifest.h"
#include "runtime/rank/Manifest.h"

#include <gtest/gtest.h>

#include <cmath>

namespace loom::manifest {

// Every field, derived ones included (the parser leaves them empty, as a
// writer does).
bool operator==(const Shard &a, const Shard &b) {
  return a.rank == b.rank && a.box == b.box;
}
bool operator==(const HfPlacement &a, const HfPlacement &b) {
  return a.name == b.name && a.shape == b.shape &&
         a.transpose == b.transpose && a.offset == b.offset &&
         a.fileRows == b.fileRows;
}
bool operator==(const Placement &a, const Placement &b) {
  return a.group == b.group && a.splitDim == b.splitDim &&
         a.ppRanks == b.ppRanks;
}
bool operator==(const ParamSpec &a, const ParamSpec &b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
         a.init == b.init && a.std == b.std && a.hf == b.hf &&
         a.shards == b.shards && a.shardsByRank == b.shardsByRank &&
         a.placement == b.placement;
}
bool operator==(const HfTensor &a, const HfTensor &b) {
  return a.name == b.name && a.shape == b.shape && a.dtype == b.dtype &&
         a.pieces == b.pieces && a.fileRows == b.fileRows;
}
bool operator==(const EntryArg &a, const EntryArg &b) {
  return a.kind == b.kind && a.name == b.name &&
         a.stacked == b.stacked && a.dtype == b.dtype &&
         a.chunk == b.chunk;
}
bool operator==(const Entry &a, const Entry &b) {
  return a.symbol == b.symbol && a.args == b.args;
}
bool operator==(const RankInfo &a, const RankInfo &b) {
  return a.rank == b.rank && a.binary == b.binary &&
         a.logsLoss == b.logsLoss && a.entries == b.entries &&
         a.sequenceRanges == b.sequenceRanges && a.ownEntries == b.ownEntries;
}
bool operator==(const Manifest &a, const Manifest &b) {
  return a.family == b.family && a.worldSize == b.worldSize &&
         a.backend == b.backend && a.microBatchSize == b.microBatchSize &&
         a.seqLength == b.seqLength && a.paddedSeqLength == b.paddedSeqLength &&
         a.numMicrobatches == b.numMicrobatches &&
         a.vocabSize == b.vocabSize && a.dtype == b.dtype &&
         a.eodTokenId == b.eodTokenId && a.plan == b.plan &&
         a.groups == b.groups && a.ranks == b.ranks && a.params == b.params &&
         a.hfTensors == b.hfTensors && a.paramIndex == b.paramIndex &&
         a.ppRankByRank == b.ppRankByRank &&
         a.gradientGroup == b.gradientGroup && a.model == b.model &&
         a.sequenceParallel == b.sequenceParallel && a.order == b.order &&
         a.entries == b.entries && a.stageEntries == b.stageEntries;
}

} // namespace loom::manifest

using namespace loom::manifest;

namespace {

EntryArg arg(ArgKind kind, std::string name = "", bool stacked = false) {
  EntryArg a;
  a.kind = kind;
  a.name = std::move(name);
  a.stacked = stacked;
  return a;
}

/// What loom-compile writes for a 4-layer model at tp 2 x cp 2 x pp 2 with
/// 2 micro-batches (order tp-cp-dp-pp: rank = tp + 2 cp + 4 pp), filled as
/// the driver fills it, with every kind of field: a model config of each
/// scalar type, pipelined stage entries (micro-batches, f32 gradients,
/// chunks, an argument kind the rank program does not know), a rank's own
/// entries, context-parallel sequence ranges of a padded sequence, placed
/// and listed shards, transposed and padded-vocabulary HF placements.
Manifest everyField() {
  Manifest m;
  m.family = "gpt2";
  m.model = std::map<std::string, Scalar>{{"num_layers", int64_t(4)},
                                          {"tie_word_embeddings", true},
                                          {"rope_theta", 10000.5},
                                          {"activation", std::string("gelu")}};
  m.plan = {{"tp", 2}, {"cp", 2}, {"dp", 1}, {"pp", 2},
            {"vpp", 1}, {"ep", 1}, {"etp", 2}};
  m.sequenceParallel = true;
  m.order = "tp-cp-ep-dp-pp";
  m.worldSize = 8;
  m.backend = "cuda";
  m.microBatchSize = 1;
  m.seqLength = 14;
  m.paddedSeqLength = 16;
  m.numMicrobatches = 2;
  m.dtype = LOOMRT_BF16;
  m.vocabSize = 14;
  m.eodTokenId = 3;
  m.gradientGroup = "dp-cp";
  for (int32_t r = 0; r < 8; ++r) {
    int32_t tp = r % 2, cp = r / 2 % 2, pp = r / 4;
    if (tp == 0)
      m.groups["tp"].push_back({r, r + 1});
    if (cp == 0) {
      m.groups["cp"].push_back({r, r + 2});
      m.groups["dp-cp"].push_back({r, r + 2});
    }
    if (pp == 0) {
      m.groups["pp"].push_back({r, r + 4});
      m.groups["embedding"].push_back({r, r + 4});
    }
    m.groups["dp"].push_back({r});
    RankInfo &info = m.ranks.emplace_back();
    info.rank = r;
    info.binary = "rank-0000" + std::to_string(r);
    info.logsLoss = r == 4;
    // Chunks 0 and 3, or 1 and 2, of the 16 padded tokens.
    info.sequenceRanges = cp == 0 ? std::vector<std::pair<int64_t, int64_t>>{
                                        {0, 4}, {12, 16}}
                                  : std::vector<std::pair<int64_t, int64_t>>{
                                        {4, 8}, {8, 12}};
  }

  // The embedding: a padded vocabulary of 16 rows (14 in HF files), split
  // over tp, on both pipeline stages.
  ParamSpec &embedding = m.params.emplace_back();
  embedding.name = "transformer.wte.weight";
  embedding.shape = {16, 8};
  embedding.dtype = LOOMRT_BF16;
  embedding.std = 0.02;
  embedding.hf = {"transformer.wte.weight", {16, 8}, false, {0, 0}, 14};
  embedding.placement = Placement{"tp", 0, std::vector<int64_t>{0, 1}};
  // A Conv1D weight, stored transposed; split on its second dim on the
  // last stage only.
  ParamSpec &conv1d = m.params.emplace_back();
  conv1d.name = "transformer.h.3.attn.c_proj.weight";
  conv1d.shape = {8, 8};
  conv1d.dtype = LOOMRT_BF16;
  conv1d.std = 0.02 / std::sqrt(8.0); // 17 significant digits
  conv1d.hf = {"transformer.h.3.attn.c_proj.weight", {8, 8}, true, {0, 0}, 0};
  conv1d.placement = Placement{"tp", 1, std::vector<int64_t>{1}};
  // Listed shards (a hand-written manifest's form), f32 in a bf16 model.
  ParamSpec &norm = m.params.emplace_back();
  norm.name = "transformer.ln_f.weight";
  norm.shape = {8};
  norm.init = InitKind::Ones;
  norm.hf = {"transformer.ln_f.weight", {8}, false, {0}, 0};
  for (int32_t r = 0; r < 8; ++r)
    norm.shards.push_back({r, {{0}, {8}}});
  ParamSpec &bias = m.params.emplace_back();
  bias.name = "transformer.ln_f.bias";
  bias.shape = {8};
  bias.dtype = LOOMRT_BF16;
  bias.init = InitKind::Zeros;
  bias.hf = {"transformer.ln_f.bias", {8}, false, {0}, 0};
  bias.placement = Placement{"tp", std::nullopt, std::nullopt};

  const std::string &wte = m.params[0].name, &proj = m.params[1].name,
                    &ln = m.params[2].name;

  // Each stage's entries: one call runs both micro-batches.
  m.stageEntries.emplace(2);
  for (int64_t stage = 0; stage < 2; ++stage) {
    Entry forward, train;
    forward.symbol = "loom_forward_pp" + std::to_string(stage);
    train.symbol = "loom_train_step_pp" + std::to_string(stage);
    for (ArgKind k : {ArgKind::Tokens, ArgKind::Labels, ArgKind::LossMask}) {
      forward.args.push_back(arg(k, "", true));
      train.args.push_back(arg(k, "", true));
    }
    train.args.push_back(arg(ArgKind::GradScale, "", true));
    train.args.push_back(arg(ArgKind::Other, "master_weights"));
    for (Entry *e : {&forward, &train}) {
      e->args.push_back(arg(ArgKind::Param, wte));
      if (stage == 1)
        e->args.push_back(arg(ArgKind::Param, proj));
      e->args.push_back(arg(ArgKind::Comm, "tp"));
      e->args.push_back(arg(ArgKind::Comm, "cp"));
      if (stage == 1)
        e->args.push_back(arg(ArgKind::Loss, "", true));
    }
    EntryArg grad = arg(ArgKind::Grad, wte);
    grad.dtype = LOOMRT_F32;
    grad.chunk = 0;
    train.args.push_back(grad);
    (*m.stageEntries)[size_t(stage)] = {{"forward", forward},
                                        {"train_step", train}};
  }
  // Top-level entries (which the stage entries override) and a rank with
  // its own.
  Entry plain;
  plain.symbol = "loom_forward";
  plain.args = {arg(ArgKind::Tokens), arg(ArgKind::Labels),
                arg(ArgKind::LossMask), arg(ArgKind::Param, ln),
                arg(ArgKind::Loss)};
  m.entries["forward"] = plain;
  m.ranks[7].ownEntries = Entries{{"forward", plain}};
  return m;
}

TEST(ManifestSchema, RoundTripsEveryField) {
  Manifest m = everyField();
  std::string text = serialize(m);
  Result<Manifest> parsed = parse(text, "m.json");
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_TRUE(*parsed == m);
  // Field by field, for a readable failure.
  EXPECT_EQ(parsed->model, m.model);
  EXPECT_EQ(parsed->groups, m.groups);
  EXPECT_TRUE(parsed->ranks == m.ranks);
  EXPECT_TRUE(parsed->params == m.params);
  EXPECT_TRUE(parsed->stageEntries == m.stageEntries);
  EXPECT_EQ(parsed->params[1].std, 0.02 / std::sqrt(8.0));
  EXPECT_EQ(serialize(*parsed), text);

  // And it is a manifest the rank program accepts, whose derived fields
  // come from what was written.
  loom::rank::Manifest checked = loom::rank::parseManifest(text, "m.json");
  EXPECT_EQ(checked.ranks[4].entries.at("train_step").symbol,
            "loom_train_step_pp1");
  EXPECT_EQ(checked.ranks[7].entries.at("forward").symbol, "loom_forward");
  EXPECT_EQ(checked.ranks[2].localSeqLength(), 8);
  EXPECT_EQ(
      checked.findParam("transformer.h.3.attn.c_proj.weight")->shards.size(),
      4u);
  EXPECT_TRUE(checked.hfTensors[3].padded());
  // The checked manifest writes what it read: derived fields are not
  // written, and the defaults it filled in are the written defaults.
  EXPECT_EQ(serialize(checked), text);
}

// A hand-written manifest's defaults (no "hf", listed shards) are written
// out explicitly and read back the same.
TEST(ManifestSchema, RoundTripsAHandWrittenManifest) {
  Result<Manifest> m =
      parse(loom::rank::testing::fusedQkvManifest(2).dump(), "m.json");
  ASSERT_TRUE(m) << m.error();
  std::string text = serialize(*m);
  Result<Manifest> again = parse(text, "m.json");
  ASSERT_TRUE(again) << again.error();
  EXPECT_TRUE(*again == *m);
  EXPECT_EQ(serialize(*again), text);
}

// llvm::json's layout, which loom-compile wrote before this serializer:
// keys sorted, two-space indents, one array element a line, empty
// containers inline, doubles with 17 significant digits, optional fields
// left out.
TEST(ManifestSchema, WritesTheCompilersFormat) {
  Manifest m;
  m.vocabSize = 4;
  ParamSpec &p = m.params.emplace_back();
  p.name = "w";
  p.shape = {2};
  p.std = 0.1;
  p.hf = {"w", {2}, false, {0}, 0};
  p.placement = Placement{"tp", std::nullopt, std::nullopt};
  RankInfo &r = m.ranks.emplace_back();
  r.binary = "rank-00000";
  r.logsLoss = true;
  m.entries["forward"].symbol = "loom_forward";
  m.entries["forward"].args = {arg(ArgKind::Tokens), arg(ArgKind::Loss)};
  m.groups["tp"] = {{0}};
  EXPECT_EQ(serialize(m), R"({
  "backend": "cpu",
  "dtype": "f32",
  "entries": {
    "forward": {
      "args": [
        {
          "kind": "tokens"
        },
        {
          "kind": "loss"
        }
      ],
      "symbol": "loom_forward"
    }
  },
  "eod_token_id": null,
  "format": "loom-manifest",
  "gradient_group": "dp",
  "groups": {
    "tp": [
      [
        0
      ]
    ]
  },
  "micro_batch_size": 1,
  "model": null,
  "num_microbatches": 1,
  "params": [
    {
      "dtype": "f32",
      "hf": {
        "name": "w",
        "offset": [
          0
        ],
        "shape": [
          2
        ],
        "transpose": false
      },
      "init": {
        "kind": "normal",
        "std": 0.10000000000000001
      },
      "name": "w",
      "placement": {
        "group": "tp"
      },
      "shape": [
        2
      ]
    }
  ],
  "plan": {},
  "ranks": [
    {
      "binary": "rank-00000",
      "logs_loss": true,
      "rank": 0
    }
  ],
  "seq_length": 1,
  "version": 1,
  "vocab_size": 4,
  "world_size": 1
}
)");
}

} // namespace
