//===- PipelineLayoutTest.cpp - Tests of the pipeline layer split ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The reference's hand-derived tables (shared/reference/megatron-cp-pp-ep.md
// B1, checked there against Megatron-Core), layout strings as Megatron's
// parse_str_to_list expands them, a sweep against a transcription of
// Megatron-Core's closed-form offsets, and every error message.
//
//===----------------------------------------------------------------------===//

#include "rankgen/PipelineLayout.h"

#include "gtest/gtest.h"

using namespace loom::rankgen;
using Ids = std::vector<int64_t>;
using Stages = std::vector<std::string>;

namespace {

Ids range(int64_t begin, int64_t end) {
  Ids ids;
  for (int64_t i = begin; i <= end; ++i)
    ids.push_back(i);
  return ids;
}

PipelineLayout make(const PipelineLayoutOptions &o) {
  Result<PipelineLayout> layout = PipelineLayout::create(o);
  EXPECT_TRUE(layout.ok()) << layout.error();
  return layout.ok() ? layout.take() : PipelineLayout();
}

std::string error(const PipelineLayoutOptions &o) {
  Result<PipelineLayout> layout = PipelineLayout::create(o);
  EXPECT_FALSE(layout.ok());
  return layout.ok() ? "" : layout.error();
}

/// Layer ids of (r, v) for every r of vp stage v.
std::vector<Ids> chunk(const PipelineLayout &layout, int64_t v) {
  std::vector<Ids> out;
  for (int64_t r = 0; r < layout.pp(); ++r)
    out.push_back(layout.stage(r, v).layerIds);
  return out;
}

PipelineLayoutOptions opts(int64_t layers, int64_t pp, int64_t vpp = 0) {
  PipelineLayoutOptions o;
  o.numLayers = layers;
  o.pp = pp;
  o.vpp = vpp;
  return o;
}

} // namespace

//===----------------------------------------------------------------------===//
// The reference's examples
//===----------------------------------------------------------------------===//

TEST(PipelineLayout, EvenSplitWithVirtualStages) {
  // L = 16, P = 4, V = 2: (pp r, vp v) gets [8v+2r, 8v+2r+1].
  PipelineLayout layout = make(opts(16, 4, 2));
  ASSERT_EQ(layout.vpp(), 2);
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t v = 0; v < 2; ++v)
      EXPECT_EQ(layout.stage(r, v).layerIds,
                (Ids{8 * v + 2 * r, 8 * v + 2 * r + 1}))
          << "rank " << r << " vp " << v;
  EXPECT_TRUE(layout.stage(0, 0).embedding);
  EXPECT_TRUE(layout.stage(3, 1).loss);
  EXPECT_FALSE(layout.stage(3, 0).loss);
  EXPECT_FALSE(layout.stage(0, 1).embedding);
}

TEST(PipelineLayout, EvenSplitWithoutVirtualStages) {
  PipelineLayout layout = make(opts(8, 4));
  EXPECT_EQ(layout.vpp(), 1);
  EXPECT_EQ(chunk(layout, 0),
            (std::vector<Ids>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  // pp 1: everything on one stage.
  EXPECT_EQ(make(opts(3, 1)).stage(0, 0).layerIds, (Ids{0, 1, 2}));
}

TEST(PipelineLayout, UnevenFirstAndLast) {
  // L = 16, P = 4, first 1, last 3: [0] [1..6] [7..12] [13..15].
  PipelineLayoutOptions o = opts(16, 4);
  o.firstStageLayers = 1;
  o.lastStageLayers = 3;
  EXPECT_EQ(chunk(make(o), 0),
            (std::vector<Ids>{{0}, range(1, 6), range(7, 12), range(13, 15)}));
  // Only the first stage set: the other three share the rest.
  o.lastStageLayers.reset();
  o.numLayers = 10;
  EXPECT_EQ(chunk(make(o), 0),
            (std::vector<Ids>{{0}, range(1, 3), range(4, 6), range(7, 9)}));
}

TEST(PipelineLayout, AccountForEmbeddingAndLoss) {
  // L = 14, P = 4, emb + loss: [0,1,2] [3..6] [7..10] [11..13].
  PipelineLayoutOptions o = opts(14, 4);
  o.accountForEmbedding = o.accountForLoss = true;
  EXPECT_EQ(chunk(make(o), 0), (std::vector<Ids>{range(0, 2), range(3, 6),
                                                 range(7, 10), range(11, 13)}));
  // L = 14, P = 4, V = 2, emb + loss: vp0 [0] [1,2] [3,4] [5,6],
  // vp1 [7,8] [9,10] [11,12] [13].
  o.vpp = 2;
  PipelineLayout layout = make(o);
  EXPECT_EQ(chunk(layout, 0), (std::vector<Ids>{{0}, {1, 2}, {3, 4}, {5, 6}}));
  EXPECT_EQ(chunk(layout, 1),
            (std::vector<Ids>{{7, 8}, {9, 10}, {11, 12}, {13}}));
  // Only the embedding: L = 15, P = 4 gives the first rank 3.
  PipelineLayoutOptions e = opts(15, 4);
  e.accountForEmbedding = true;
  EXPECT_EQ(chunk(make(e), 0), (std::vector<Ids>{range(0, 2), range(3, 6),
                                                 range(7, 10), range(11, 14)}));
  // The embedding alone can fill the first stage: L = 3, P = 4.
  e.numLayers = 3;
  EXPECT_EQ(chunk(make(e), 0), (std::vector<Ids>{{}, {0}, {1}, {2}}));
}

TEST(PipelineLayout, UnevenWithVirtualStages) {
  // L = 18, P = 4, V = 2, first 2, last 4: vp0 [0] [1,2,3] [4,5,6] [7,8],
  // vp1 [9] [10..12] [13..15] [16,17].
  PipelineLayoutOptions o = opts(18, 4, 2);
  o.firstStageLayers = 2;
  o.lastStageLayers = 4;
  PipelineLayout layout = make(o);
  EXPECT_EQ(chunk(layout, 0),
            (std::vector<Ids>{{0}, {1, 2, 3}, {4, 5, 6}, {7, 8}}));
  EXPECT_EQ(chunk(layout, 1),
            (std::vector<Ids>{{9}, range(10, 12), range(13, 15), {16, 17}}));
}

TEST(PipelineLayout, UnevenFirstAndLastAtPp2WithVirtualStages) {
  // Megatron-Core divides by the zero middle stages here; Loom assigns the
  // layers in virtual-stage order.
  PipelineLayoutOptions o = opts(10, 2, 2);
  o.firstStageLayers = 4;
  o.lastStageLayers = 6;
  PipelineLayout layout = make(o);
  EXPECT_EQ(chunk(layout, 0), (std::vector<Ids>{{0, 1}, {2, 3, 4}}));
  EXPECT_EQ(chunk(layout, 1), (std::vector<Ids>{{5, 6}, {7, 8, 9}}));
}

TEST(PipelineLayout, LayersPerVirtualStage) {
  // --num-layers-per-virtual-pipeline-stage 2 at L = 16, P = 4 is vpp 2.
  PipelineLayoutOptions o = opts(16, 4);
  o.layersPerVirtualStage = 2;
  PipelineLayout layout = make(o);
  EXPECT_EQ(layout.vpp(), 2);
  EXPECT_EQ(chunk(layout, 1),
            (std::vector<Ids>{{8, 9}, {10, 11}, {12, 13}, {14, 15}}));
  // It counts the embedding and loss slots too: L' = 16, 4 per rank, 1 per
  // virtual stage = vpp 4.
  o.numLayers = 14;
  o.accountForEmbedding = o.accountForLoss = true;
  o.layersPerVirtualStage = 1;
  EXPECT_EQ(make(o).vpp(), 4);
}

//===----------------------------------------------------------------------===//
// Layout strings
//===----------------------------------------------------------------------===//

TEST(PipelineLayout, ParseLayoutString) {
  auto parse = [](const std::string &s) {
    Result<Stages> stages = parsePipelineLayoutString(s);
    EXPECT_TRUE(stages.ok()) << stages.error();
    return stages.ok() ? stages.take() : Stages{};
  };
  EXPECT_EQ(parse("Et|tt|ttt|ttL"), (Stages{"Et", "tt", "ttt", "ttL"}));
  EXPECT_EQ(parse("E(tt|)*2L"), (Stages{"Ett", "tt", "L"}));
  EXPECT_EQ(parse("Et*3|t*2L"), (Stages{"Ettt", "ttL"}));
  // Megatron's docstring example; commas are cosmetic.
  Stages deepseek = parse("Ettt|(tt|)*29,m|L");
  ASSERT_EQ(deepseek.size(), 32u);
  EXPECT_EQ(deepseek[0], "Ettt");
  EXPECT_EQ(deepseek[29], "tt");
  EXPECT_EQ(deepseek[30], "m");
  EXPECT_EQ(deepseek[31], "L");
  // Its regex examples: (|ab)*2,cd -> |ab|abcd; a repeat of '|' splits.
  EXPECT_EQ(parse("(|Et)*2,tL"), (Stages{"", "Et", "EttL"}));
  EXPECT_EQ(parse("Et|*2tL"), (Stages{"Et", "", "tL"}));
  EXPECT_EQ(parse("Et*0|tL"), (Stages{"E", "tL"}));
  EXPECT_EQ(parse("(Et)*10"), (Stages{"EtEtEtEtEtEtEtEtEtEt"}));
}

TEST(PipelineLayout, ParseLayoutStringErrors) {
  auto error = [](const std::string &s) {
    Result<Stages> stages = parsePipelineLayoutString(s);
    EXPECT_FALSE(stages.ok());
    return stages.ok() ? "" : stages.error();
  };
  EXPECT_EQ(error("Et|tx"), "invalid character 'x' in pipeline layout "
                            "'Et|tx'; expected E, t, L, m, |, (...)*n or x*n");
  // Megatron's regex does not nest: a '(' survives.
  EXPECT_EQ(error("((t|)*2)*2"), "invalid character '(' in pipeline layout "
                                 "'((t|)*2)*2'; expected E, t, L, m, |, "
                                 "(...)*n or x*n");
  EXPECT_EQ(error("E t|tL"), "invalid character ' ' in pipeline layout "
                             "'E t|tL'; expected E, t, L, m, |, (...)*n or "
                             "x*n");
  EXPECT_EQ(error("Et*9999999999|L"),
            "pipeline layout 'Et*9999999999|L' expands to more than 1048576 "
            "characters");
}

TEST(PipelineLayout, LayoutAssignsLayers) {
  PipelineLayoutOptions o = opts(6, 4);
  o.layout = "Et|tt|tt|tL";
  PipelineLayout layout = make(o);
  EXPECT_EQ(chunk(layout, 0), (std::vector<Ids>{{0}, {1, 2}, {3, 4}, {5}}));
  EXPECT_TRUE(layout.stage(0, 0).embedding);
  EXPECT_TRUE(layout.stage(3, 0).loss);

  // The same string at pp 2 has two virtual stages per rank: stage s runs
  // on rank s % 2 as chunk s / 2.
  o.pp = 2;
  layout = make(o);
  ASSERT_EQ(layout.vpp(), 2);
  EXPECT_EQ(chunk(layout, 0), (std::vector<Ids>{{0}, {1, 2}}));
  EXPECT_EQ(chunk(layout, 1), (std::vector<Ids>{{3, 4}, {5}}));
  EXPECT_TRUE(layout.stage(1, 1).loss);

  // Repeats and empty stages: "E|(tt|)*3L" at pp 4 (the first and last
  // stage hold only the embedding and the loss).
  o = opts(6, 5);
  o.layout = "E|(tt|)*3L";
  layout = make(o);
  EXPECT_EQ(chunk(layout, 0),
            (std::vector<Ids>{{}, {0, 1}, {2, 3}, {4, 5}, {}}));
  // --vpp may repeat what the layout says.
  o = opts(6, 2, 2);
  o.layout = "Et|tt|tt|tL";
  EXPECT_EQ(make(o).vpp(), 2);
}

//===----------------------------------------------------------------------===//
// Against Megatron-Core's closed-form offsets
//===----------------------------------------------------------------------===//

namespace {
/// get_transformer_layer_offset for the even and uneven splits (pp > 1),
/// transcribed; -1 where Megatron divides by zero.
int64_t megatronOffset(const PipelineLayoutOptions &o, int64_t vpp, int64_t r,
                       int64_t v) {
  if (o.firstStageLayers || o.lastStageLayers) {
    int64_t middleStages =
        o.pp - (o.firstStageLayers ? 1 : 0) - (o.lastStageLayers ? 1 : 0);
    int64_t first = o.firstStageLayers.value_or(0);
    int64_t last = o.lastStageLayers.value_or(0);
    int64_t middle = o.numLayers - first - last;
    int64_t middleRank = o.firstStageLayers ? r - 1 : r;
    if (vpp > 1) {
      int64_t firstChunk = first / vpp, lastChunk = last / vpp;
      int64_t middleChunk = middle / vpp;
      int64_t total = firstChunk + middleChunk + lastChunk;
      if (r == 0)
        return v * total;
      if (middleStages == 0)
        return -1;
      return v * total + firstChunk + middleRank * (middleChunk / middleStages);
    }
    int64_t perRank = middleStages > 0 ? middle / middleStages : 0;
    return r == 0 ? 0 : middleRank * perRank + first;
  }
  int64_t layers = o.numLayers + (o.accountForEmbedding ? 1 : 0) +
                   (o.accountForLoss ? 1 : 0);
  int64_t perRank = layers / o.pp;
  int64_t offset =
      vpp > 1 ? v * (layers / vpp) + r * (perRank / vpp) : r * perRank;
  if (o.accountForEmbedding && !(v == 0 && r == 0))
    offset -= 1;
  return offset;
}
} // namespace

TEST(PipelineLayout, MatchesMegatronOffsets) {
  int checked = 0;
  for (int64_t pp = 2; pp <= 5; ++pp)
    for (int64_t vpp = 1; vpp <= 3; ++vpp)
      for (int64_t layers = 1; layers <= 40; ++layers)
        for (int variant = 0; variant < 8; ++variant) {
          PipelineLayoutOptions o = opts(layers, pp, vpp);
          o.accountForEmbedding = variant == 1 || variant == 3;
          o.accountForLoss = variant == 2 || variant == 3;
          if (variant >= 4) {
            o.firstStageLayers =
                variant != 5 ? std::optional<int64_t>(vpp * (variant - 3))
                             : std::nullopt;
            o.lastStageLayers =
                variant != 4 ? std::optional<int64_t>(2 * vpp) : std::nullopt;
          }
          Result<PipelineLayout> layout = PipelineLayout::create(o);
          if (!layout)
            continue;
          int64_t next = 0;
          for (int64_t v = 0; v < vpp; ++v)
            for (int64_t r = 0; r < pp; ++r) {
              const PipelineStage &stage = layout->stage(r, v);
              int64_t expected = megatronOffset(o, vpp, r, v);
              if (expected >= 0 && !stage.layerIds.empty()) {
                EXPECT_EQ(stage.layerIds.front(), expected)
                    << "L " << layers << " pp " << pp << " vpp " << vpp
                    << " variant " << variant << " rank " << r << " vp " << v;
                ++checked;
              }
              // Every layer exactly once, in virtual-stage order.
              for (int64_t id : stage.layerIds)
                EXPECT_EQ(id, next++);
            }
          EXPECT_EQ(next, layers);
        }
  EXPECT_GT(checked, 1000);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(PipelineLayout, Errors) {
  EXPECT_EQ(error(opts(0, 2)),
            "the number of layers must be at least 1, got 0");
  EXPECT_EQ(error(opts(4, 0)), "pp must be at least 1, got 0");
  EXPECT_EQ(error(opts(4, 2, -1)), "vpp must be at least 1, got -1");
  EXPECT_EQ(error(opts(4, 1, 2)), "vpp 2 needs pipeline parallelism (pp > 1)");
  EXPECT_EQ(error(opts(2, 4)), "pp 4 x vpp 1 = 4 stages but only 2 layers");
  EXPECT_EQ(error(opts(6, 4, 2)), "pp 4 x vpp 2 = 8 stages but only 6 layers");
  EXPECT_EQ(error(opts(10, 4)), "10 layers are not divisible by pp 4");
  EXPECT_EQ(error(opts(12, 2, 4)),
            "the 6 layers of each pp rank are not divisible by vpp 4");

  PipelineLayoutOptions o = opts(14, 4);
  o.accountForEmbedding = true;
  EXPECT_EQ(error(o), "14 layers (+1 for the embedding) are not divisible by "
                      "pp 4");
  o.accountForLoss = true;
  o.numLayers = 13;
  EXPECT_EQ(error(o), "13 layers (+1 for the embedding, +1 for the loss) are "
                      "not divisible by pp 4");
  o.accountForEmbedding = false;
  o.numLayers = 2;
  EXPECT_EQ(error(o), "pp 4 x vpp 1 = 4 stages but only 2 layers (+1 for the "
                      "loss)");

  // Uneven first and last stages.
  o = opts(16, 4);
  o.firstStageLayers = 0;
  EXPECT_EQ(error(o), "--decoder-first-pipeline-num-layers must be at least 1, "
                      "got 0");
  o.firstStageLayers = 2;
  o.lastStageLayers = 3;
  EXPECT_EQ(error(o), "the 11 middle layers are not divisible by the 2 middle "
                      "stages");
  o.lastStageLayers = 15;
  EXPECT_EQ(error(o), "the first and last stages take 17 layers, more than the "
                      "model's 16");
  o.lastStageLayers = 14;
  EXPECT_EQ(error(o), "no layers are left for the 2 middle stages");
  o = opts(16, 2);
  o.firstStageLayers = 4;
  o.lastStageLayers = 4;
  EXPECT_EQ(error(o), "8 layers are left for the middle stages, but pp 2 has "
                      "none");
  o = opts(16, 4, 2);
  o.firstStageLayers = 3;
  EXPECT_EQ(error(o), "the 3 layers of the first stage are not divisible by "
                      "vpp 2");
  o.firstStageLayers = 4;
  o.lastStageLayers = 6;
  EXPECT_EQ(error(o), "the 3 layers of each middle stage are not divisible by "
                      "vpp 2");
  o = opts(16, 4);
  o.lastStageLayers = 4;
  o.accountForLoss = true;
  EXPECT_EQ(error(o), "--decoder-first/last-pipeline-num-layers cannot be "
                      "combined with "
                      "--account-for-embedding/loss-in-pipeline-split");
  o = opts(16, 1);
  o.firstStageLayers = 4;
  EXPECT_EQ(error(o), "--decoder-first/last-pipeline-num-layers need pipeline "
                      "parallelism (pp > 1)");

  // Layers per virtual stage.
  o = opts(16, 4, 2);
  o.layersPerVirtualStage = 2;
  EXPECT_EQ(error(o), "--vpp and --num-layers-per-virtual-pipeline-stage "
                      "cannot both be given");
  o.vpp = 0;
  o.layersPerVirtualStage = 3;
  EXPECT_EQ(error(o), "the 4 layers of each pp rank are not divisible by 3 "
                      "layers per virtual stage");
  o.layersPerVirtualStage = 0;
  EXPECT_EQ(error(o), "--num-layers-per-virtual-pipeline-stage must be at "
                      "least 1, got 0");
  o.layersPerVirtualStage = 2;
  o.firstStageLayers = 4;
  EXPECT_EQ(error(o), "--num-layers-per-virtual-pipeline-stage cannot be "
                      "combined with --decoder-first/last-pipeline-num-layers; "
                      "give --vpp");

  // Layout strings.
  o = opts(6, 4);
  o.layout = "Et|tt|tt|tL";
  o.accountForLoss = true;
  EXPECT_EQ(error(o), "--pipeline-model-parallel-layout cannot be combined "
                      "with --decoder-first/last-pipeline-num-layers, "
                      "--account-for-embedding/loss-in-pipeline-split or "
                      "--num-layers-per-virtual-pipeline-stage");
  o = opts(6, 3);
  o.layout = "Et|tt|tt|tL";
  EXPECT_EQ(error(o), "pipeline layout 'Et|tt|tt|tL' has 4 stages, which is "
                      "not divisible by pp 3");
  o = opts(6, 2, 1);
  o.layout = "Et|tt|tt|tL";
  EXPECT_EQ(error(o), "vpp 1 conflicts with pipeline layout 'Et|tt|tt|tL', "
                      "which has 2 virtual stages per pp rank");
  o = opts(6, 1);
  o.layout = "Et|tt|tt|tL";
  EXPECT_EQ(error(o), "vpp 4 needs pipeline parallelism (pp > 1)");
  o = opts(8, 4);
  o.layout = "Et|tt|tt|tL";
  EXPECT_EQ(error(o), "pipeline layout 'Et|tt|tt|tL' has 6 transformer layers "
                      "'t' but the model has 8");
  o = opts(6, 4);
  o.layout = "tE|tt|tt|tL";
  EXPECT_EQ(error(o), "pipeline layout 'tE|tt|tt|tL' must start with the "
                      "embedding 'E' in its first stage");
  o.layout = "|Ett|tt|ttL";
  EXPECT_EQ(error(o), "pipeline layout '|Ett|tt|ttL' must start with the "
                      "embedding 'E' in its first stage");
  o.layout = "Et|tt|ttL|t";
  EXPECT_EQ(error(o), "pipeline layout 'Et|tt|ttL|t' must end with the loss "
                      "'L' in its last stage");
  o.layout = "Et|tt|tt|t";
  EXPECT_EQ(error(o), "pipeline layout 'Et|tt|tt|t' must name the embedding "
                      "'E' and the loss 'L' once each, not 1 and 0 times");
  o.layout = "Et|tt|tt|tmL";
  EXPECT_EQ(error(o), "pipeline layout 'Et|tt|tt|tmL' has multi-token "
                      "prediction layers ('m'), which Loom does not build");
  o.layout = "Et|tt|tt|t?";
  EXPECT_EQ(error(o), "invalid character '?' in pipeline layout "
                      "'Et|tt|tt|t?'; expected E, t, L, m, |, (...)*n or x*n");
}
