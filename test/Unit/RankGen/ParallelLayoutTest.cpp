//===- ParallelLayoutTest.cpp - Tests of every Megatron process group -----===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Worked examples from seed 001 (TP4-PP2-DP2 and ETP1-PP2-EP4-EDP2 on 16
// ranks), seed 003 (TP2-PP4 on 16 ranks) and Megatron-Core's docstrings,
// both rank orders, hierarchical context parallelism, per-rank queries,
// large worlds and every error message.
//
//===----------------------------------------------------------------------===//

#include "rankgen/ParallelLayout.h"

#include "gtest/gtest.h"

using namespace loom::rankgen;
using Groups = std::vector<std::vector<int64_t>>;

namespace {

ParallelLayout make(const ParallelConfig &config) {
  Result<ParallelLayout> layout = ParallelLayout::create(config);
  EXPECT_TRUE(layout.ok()) << layout.error();
  return layout.take();
}

std::string createError(const ParallelConfig &config) {
  Result<ParallelLayout> layout = ParallelLayout::create(config);
  EXPECT_FALSE(layout.ok());
  return layout.error();
}

ParallelConfig config(int64_t world, int64_t tp, int64_t pp, int64_t cp = 1) {
  ParallelConfig c;
  c.worldSize = world;
  c.tp = tp;
  c.pp = pp;
  c.cp = cp;
  return c;
}

Groups dense(const ParallelLayout &layout, const char *tokens) {
  return layout.denseGroups(tokens).toVectors();
}
Groups expert(const ParallelLayout &layout, const char *tokens) {
  return layout.expertGroups(tokens).toVectors();
}

//===----------------------------------------------------------------------===//
// Seed 001, dense: TP4-PP2-DP2 on 16 ranks, every group kind
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, Seed001Tp4Pp2Dp2EveryKind) {
  ParallelLayout layout = make(config(16, 4, 2));
  EXPECT_EQ(layout.config().dp, 2);
  EXPECT_EQ(layout.config().order, "tp-cp-ep-dp-pp");

  Groups tp = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}};
  Groups dp = {{0, 4},  {1, 5},  {2, 6},   {3, 7},
               {8, 12}, {9, 13}, {10, 14}, {11, 15}};
  Groups pp = {{0, 8},  {1, 9},  {2, 10}, {3, 11},
               {4, 12}, {5, 13}, {6, 14}, {7, 15}};
  Groups singles;
  for (int64_t r = 0; r < 16; ++r)
    singles.push_back({r});
  Groups halves = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};

  EXPECT_EQ(dense(layout, "tp"), tp);
  EXPECT_EQ(dense(layout, "cp"), singles);
  EXPECT_EQ(dense(layout, "dp"), dp);
  EXPECT_EQ(dense(layout, "pp"), pp);
  EXPECT_EQ(dense(layout, "tp-cp"), tp);
  EXPECT_EQ(dense(layout, "dp-cp"), dp);
  EXPECT_EQ(dense(layout, "tp-dp"), halves);
  EXPECT_EQ(dense(layout, "tp-dp-cp"), halves);
  EXPECT_EQ(layout.modelParallelGroups().toVectors(),
            (Groups{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}}));
  // Embedding: first and last stage of each pipeline group.
  EXPECT_EQ(layout.embeddingGroups().toVectors(), pp);
  EXPECT_EQ(layout.positionEmbeddingGroups().toVectors(),
            (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));

  // kinds() lists every kind in a stable order.
  std::vector<std::string> keys;
  for (const GroupKind &kind : layout.kinds())
    keys.push_back(kind.key);
  EXPECT_EQ(keys,
            (std::vector<std::string>{
                "tp", "cp", "dp", "pp", "tp-cp", "dp-cp", "tp-dp", "tp-dp-cp",
                "tp-pp", "expert:tp", "expert:ep", "expert:dp", "expert:pp",
                "expert:tp-ep", "expert:tp-ep-pp", "expert:ep-dp", "embedding",
                "position-embedding"}));
  EXPECT_EQ(layout.find("hcp:0"), nullptr);
}

//===----------------------------------------------------------------------===//
// Seed 001, MoE: ETP1-PP2-EP4-EDP2 on the same 16 ranks (MoE folding)
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, Seed001ExpertEtp1Pp2Ep4Edp2) {
  ParallelConfig c = config(16, 4, 2);
  c.ep = 4;
  c.etp = 1;
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.expertDp(), 2);

  Groups quads = {{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}};
  Groups singles;
  for (int64_t r = 0; r < 16; ++r)
    singles.push_back({r});
  EXPECT_EQ(expert(layout, "ep"), quads);
  EXPECT_EQ(expert(layout, "tp"), singles);
  EXPECT_EQ(expert(layout, "tp-ep"), quads);
  EXPECT_EQ(expert(layout, "dp"), (Groups{{0, 4},
                                          {1, 5},
                                          {2, 6},
                                          {3, 7},
                                          {8, 12},
                                          {9, 13},
                                          {10, 14},
                                          {11, 15}}));
  EXPECT_EQ(expert(layout, "pp"), (Groups{{0, 8},
                                          {1, 9},
                                          {2, 10},
                                          {3, 11},
                                          {4, 12},
                                          {5, 13},
                                          {6, 14},
                                          {7, 15}}));
  EXPECT_EQ(expert(layout, "tp-ep-pp"),
            (Groups{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}}));
  EXPECT_EQ(expert(layout, "ep-dp"),
            (Groups{{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}}));
  // The expert world shares the pipeline groups of the dense world.
  EXPECT_EQ(layout.expertGroups("pp"), layout.denseGroups("pp"));
}

// etp defaults to tp, as in Megatron-Core.
TEST(ParallelLayout, ExpertTensorParallelDefaultsToTp) {
  ParallelConfig c = config(16, 2, 2);
  c.ep = 2;
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.config().etp, 2);
  EXPECT_EQ(layout.expertDp(), 2);
  EXPECT_EQ(expert(layout, "tp"), dense(layout, "tp"));
  EXPECT_EQ(expert(layout, "ep"), (Groups{{0, 2},
                                          {1, 3},
                                          {4, 6},
                                          {5, 7},
                                          {8, 10},
                                          {9, 11},
                                          {12, 14},
                                          {13, 15}}));
}

//===----------------------------------------------------------------------===//
// Seed 003 (and Megatron-Core's docstring): TP2-PP4 on 16 ranks
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, Seed003Tp2Pp4) {
  ParallelLayout layout = make(config(16, 2, 4));
  EXPECT_EQ(dense(layout, "dp"), (Groups{{0, 2},
                                         {1, 3},
                                         {4, 6},
                                         {5, 7},
                                         {8, 10},
                                         {9, 11},
                                         {12, 14},
                                         {13, 15}}));
  EXPECT_EQ(dense(layout, "tp"), (Groups{{0, 1},
                                         {2, 3},
                                         {4, 5},
                                         {6, 7},
                                         {8, 9},
                                         {10, 11},
                                         {12, 13},
                                         {14, 15}}));
  EXPECT_EQ(
      dense(layout, "pp"),
      (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  // The seed prints the second group as [g2, g3, g6, g7, g10, g8, g14, g15],
  // a typo for g11: the model-parallel groups partition the ranks.
  EXPECT_EQ(layout.modelParallelGroups().toVectors(),
            (Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}}));
  EXPECT_EQ(layout.embeddingGroups().toVectors(),
            (Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}}));
  EXPECT_EQ(layout.positionEmbeddingGroups().toVectors(),
            (Groups{{0}, {1}, {2}, {3}}));
}

// Megatron-Core's context_parallel_size docstring: 8 GPUs, tp 4, cp 2.
TEST(ParallelLayout, ContextParallelDocstring) {
  ParallelLayout layout = make(config(8, 4, 1, 2));
  EXPECT_EQ(dense(layout, "cp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(dense(layout, "tp-cp"), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(layout.config().dp, 1);
}

//===----------------------------------------------------------------------===//
// Orders
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, TpPpDpOrder) {
  ParallelConfig c = config(8, 2, 2);
  c.order = kTpPpDpOrder;
  ParallelLayout layout = make(c);
  EXPECT_EQ(dense(layout, "pp"), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(dense(layout, "dp"), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(dense(layout, "tp-dp"), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
  EXPECT_EQ(dense(layout, "tp-pp"), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.embeddingGroups().toVectors(),
            (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(layout.positionEmbeddingGroups().toVectors(),
            (Groups{{0}, {1}, {4}, {5}}));
}

// tp 2, cp 2, pp 2, ep 4, etp 1 on 32 ranks with dp outermost; checked
// against Megatron-Core's RankGenerator.
TEST(ParallelLayout, TpPpDpOrderWithExperts) {
  ParallelConfig c = config(32, 2, 2, 2);
  c.ep = 4;
  c.etp = 1;
  c.order = "TP-CP-EP-PP-DP"; // Megatron-Core lowercases the order.
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.config().order, "tp-cp-ep-pp-dp");
  EXPECT_EQ(dense(layout, "dp-cp")[0],
            (std::vector<int64_t>{0, 2, 8, 10, 16, 18, 24, 26}));
  EXPECT_EQ(dense(layout, "tp-dp")[1],
            (std::vector<int64_t>{2, 3, 10, 11, 18, 19, 26, 27}));
  EXPECT_EQ(expert(layout, "tp-ep-pp")[3],
            (std::vector<int64_t>{24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(expert(layout, "dp")[5], (std::vector<int64_t>{5, 13, 21, 29}));
  EXPECT_EQ(expert(layout, "ep-dp")[0],
            (std::vector<int64_t>{0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24,
                                  25, 26, 27}));
}

//===----------------------------------------------------------------------===//
// Embedding groups with pp == 1, hierarchical context parallelism
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, EmbeddingWithoutPipeline) {
  ParallelLayout layout = make(config(4, 2, 1));
  // Megatron-Core's default_embedding_ranks keeps the single stage.
  EXPECT_EQ(layout.embeddingGroups().toVectors(), (Groups{{0}, {1}, {2}, {3}}));
  EXPECT_EQ(layout.positionEmbeddingGroups().toVectors(),
            (Groups{{0}, {1}, {2}, {3}}));
}

TEST(ParallelLayout, HierarchicalCp42) {
  ParallelConfig c = config(8, 1, 1, 8);
  c.hierarchicalCpSizes = {4, 2};
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.hierarchicalCpGroups(0).toVectors(),
            (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.hierarchicalCpGroups(1).toVectors(),
            (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_NE(layout.find("hcp:1"), nullptr);
  EXPECT_EQ(layout.find("hcp:2"), nullptr);
}

TEST(ParallelLayout, HierarchicalCp22WithTp) {
  ParallelConfig c = config(16, 2, 1, 4);
  c.hierarchicalCpSizes = {2, 2};
  ParallelLayout layout = make(c);
  EXPECT_EQ(
      dense(layout, "cp"),
      (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}}));
  // Sub-groups are listed per cp group, as Megatron-Core creates them.
  EXPECT_EQ(layout.hierarchicalCpGroups(0).toVectors(), (Groups{{0, 2},
                                                                {4, 6},
                                                                {1, 3},
                                                                {5, 7},
                                                                {8, 10},
                                                                {12, 14},
                                                                {9, 11},
                                                                {13, 15}}));
  EXPECT_EQ(layout.hierarchicalCpGroups(1).toVectors(), (Groups{{0, 4},
                                                                {2, 6},
                                                                {1, 5},
                                                                {3, 7},
                                                                {8, 12},
                                                                {10, 14},
                                                                {9, 13},
                                                                {11, 15}}));
}

// The docstring of create_hierarchical_groups: 16 ranks, sizes [2, 2, 4].
TEST(ParallelLayout, HierarchicalCpDocstring224) {
  ParallelConfig c = config(16, 1, 1, 16);
  c.hierarchicalCpSizes = {2, 2, 4};
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.hierarchicalCpGroups(0).toVectors(), (Groups{{0, 1},
                                                                {2, 3},
                                                                {4, 5},
                                                                {6, 7},
                                                                {8, 9},
                                                                {10, 11},
                                                                {12, 13},
                                                                {14, 15}}));
  EXPECT_EQ(layout.hierarchicalCpGroups(1).toVectors(), (Groups{{0, 2},
                                                                {1, 3},
                                                                {4, 6},
                                                                {5, 7},
                                                                {8, 10},
                                                                {9, 11},
                                                                {12, 14},
                                                                {13, 15}}));
  EXPECT_EQ(
      layout.hierarchicalCpGroups(2).toVectors(),
      (Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
}

//===----------------------------------------------------------------------===//
// Partial distributed optimizer (num_distributed_optimizer_instances)
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, DistributedOptimizerInstances) {
  ParallelConfig c = config(32, 2, 2, 2);
  c.ep = 4;
  c.etp = 1;
  c.numDistributedOptimizerInstances = 2;
  ParallelLayout layout = make(c);
  auto groupsOf = [&](const char *key) {
    const GroupKind *kind = layout.find(key);
    EXPECT_NE(kind, nullptr) << key;
    return kind ? kind->groups.toVectors() : Groups{};
  };
  // Each dp-cp group [0, 2, 4, ..., 14] is cut into two halves.
  EXPECT_EQ(groupsOf("dist-opt:intra-dp-cp"), (Groups{{0, 2, 4, 6},
                                                      {8, 10, 12, 14},
                                                      {1, 3, 5, 7},
                                                      {9, 11, 13, 15},
                                                      {16, 18, 20, 22},
                                                      {24, 26, 28, 30},
                                                      {17, 19, 21, 23},
                                                      {25, 27, 29, 31}}));
  // Expert dp group [0, 4, 8, 12] as a [2, 2] hierarchy.
  Groups intra = groupsOf("dist-opt:expert-intra-dp");
  Groups inter = groupsOf("dist-opt:expert-inter-dp");
  ASSERT_EQ(intra.size(), 16u);
  ASSERT_EQ(inter.size(), 16u);
  EXPECT_EQ(intra[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(intra[1], (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(inter[0], (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(inter[1], (std::vector<int64_t>{4, 12}));
  // Instances concatenate edp / 2 = 2 tp-ep-pp groups, unsorted as in
  // Megatron-Core.
  EXPECT_EQ(
      groupsOf("dist-opt:instance"),
      (Groups{{0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23},
              {8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31}}));
  // With one instance (the default) none of these kinds exist.
  EXPECT_EQ(make(config(32, 2, 2, 2)).find("dist-opt:instance"), nullptr);
}

TEST(ParallelLayout, DistributedOptimizerErrors) {
  ParallelConfig c = config(24, 2, 2); // dp 6
  c.numDistributedOptimizerInstances = 4;
  EXPECT_EQ(createError(c),
            "dp*cp = 6 is not divisible by 4 distributed optimizer instances");
  ParallelConfig expert = config(16, 1, 2); // dp 8, expert dp 2
  expert.ep = 4;
  expert.numDistributedOptimizerInstances = 4;
  EXPECT_EQ(
      createError(expert),
      "expert dp 2 is not divisible by 4 distributed optimizer instances");
  expert.numDistributedOptimizerInstances = 0;
  EXPECT_EQ(createError(expert),
            "distributed optimizer instances must be at least 1, got 0");
}

//===----------------------------------------------------------------------===//
// Per-rank queries
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, RankInfoTp4Pp2Dp2) {
  ParallelConfig c = config(16, 4, 2);
  c.ep = 4;
  c.etp = 1;
  ParallelLayout layout = make(c);

  RankInfo info = *layout.rankInfo(5);
  EXPECT_EQ(info.dense, (DimArray{1, 0, 0, 1, 0}));  // tp 1, dp 1, pp 0
  EXPECT_EQ(info.expert, (DimArray{0, 0, 1, 1, 0})); // ep 1, edp 1, pp 0
  EXPECT_EQ(info.pipelineStage, 0);
  EXPECT_EQ(info.numStages, 2);
  EXPECT_TRUE(info.firstStage);
  EXPECT_FALSE(info.lastStage);
  EXPECT_EQ(info.prevRank, 13); // wraps around, as in Megatron-Core
  EXPECT_EQ(info.nextRank, 13);
  ASSERT_EQ(info.groups.size(), layout.kinds().size());
  for (const Membership &m : info.groups) {
    if (m.kind->key == "tp") {
      EXPECT_EQ(m.ranks.vec(), (std::vector<int64_t>{4, 5, 6, 7}));
      EXPECT_EQ(m.group, 1);
      EXPECT_EQ(m.position, 1);
    } else if (m.kind->key == "expert:ep") {
      EXPECT_EQ(m.ranks.vec(), (std::vector<int64_t>{4, 5, 6, 7}));
    } else if (m.kind->key == "tp-dp") {
      EXPECT_EQ(m.position, 5);
    } else if (m.kind->key == "embedding") {
      EXPECT_EQ(m.ranks.vec(), (std::vector<int64_t>{5, 13}));
    }
  }

  RankInfo last = *layout.rankInfo(13);
  EXPECT_TRUE(last.lastStage);
  EXPECT_FALSE(last.firstStage);
  EXPECT_EQ(last.nextRank, 5);
  EXPECT_EQ(last.prevRank, 5);
}

TEST(ParallelLayout, RankInfoMiddleStageHasNoEmbedding) {
  ParallelLayout layout = make(config(16, 2, 4));
  RankInfo info = *layout.rankInfo(6); // pp group [2, 6, 10, 14], stage 1
  EXPECT_EQ(info.pipelineStage, 1);
  EXPECT_EQ(info.prevRank, 2);
  EXPECT_EQ(info.nextRank, 10);
  for (const Membership &m : info.groups)
    if (m.kind->key == "embedding" || m.kind->key == "position-embedding") {
      EXPECT_EQ(m.group, -1);
      EXPECT_TRUE(m.ranks.empty());
    }
  EXPECT_EQ(layout.rankInfo(16).error(),
            "rank 16 is out of range for world size 16");
  EXPECT_EQ(layout.rankInfo(-1).error(),
            "rank -1 is out of range for world size 16");
}

//===----------------------------------------------------------------------===//
// Large worlds
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, LargeWorld65536) {
  ParallelConfig c = config(65536, 8, 8, 4);
  c.ep = 16;
  c.etp = 2;
  c.hierarchicalCpSizes = {2, 2};
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.config().dp, 256);
  EXPECT_EQ(layout.expertDp(), 256);

  for (const GroupKind &kind : layout.kinds()) {
    // Every kind except the embedding ones covers each rank exactly once.
    std::vector<int> seen(65536, 0);
    for (int64_t r : kind.groups.flat())
      ++seen[r];
    bool partial = kind.key == "embedding" || kind.key == "position-embedding";
    for (int64_t r = 0; r < 65536; ++r)
      ASSERT_EQ(seen[r], partial ? (seen[r] ? 1 : 0) : 1) << kind.key;
  }
  EXPECT_EQ(layout.denseGroups("tp").numGroups(), 8192u);
  EXPECT_EQ(layout.denseGroups("dp-cp").groupSize(), 1024);
  EXPECT_EQ(layout.expertGroups("tp-ep").groupSize(), 32);
  EXPECT_EQ(layout.embeddingGroups().numGroups(), 8192u);
  EXPECT_EQ(layout.hierarchicalCpGroups(1).numGroups(), 32768u);

  // global rank = tp + cp*8 + dp*32 + pp*8192
  RankInfo info = *layout.rankInfo(3 + 2 * 8 + 100 * 32 + 5 * 8192);
  EXPECT_EQ(info.dense, (DimArray{3, 2, 0, 100, 5}));
  EXPECT_EQ(info.prevRank, info.rank - 8192);
  EXPECT_EQ(info.nextRank, info.rank + 8192);
  // Expert: etp + ep*2 + edp*32 + pp*8192; 3 + 16 = 19 -> etp 1, ep 9.
  EXPECT_EQ(info.expert, (DimArray{1, 0, 9, 100, 5}));
}

TEST(ParallelLayout, DpGivenInsteadOfWorld) {
  ParallelConfig c;
  c.tp = 2;
  c.cp = 2;
  c.pp = 2;
  c.dp = 3;
  ParallelLayout layout = make(c);
  EXPECT_EQ(layout.worldSize(), 24);
  EXPECT_EQ(dense(layout, "dp")[0], (std::vector<int64_t>{0, 4, 8}));
  // Any dense token combination, even the whole world.
  EXPECT_EQ(layout.groupsFor("tp-cp-dp-pp")->numGroups(), 1u);
  EXPECT_EQ(layout.expertGroupsFor("tp-pp")->groupSize(), 4);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

TEST(ParallelLayout, SizeErrors) {
  EXPECT_EQ(createError(config(12, 4, 2)),
            "world size 12 is not divisible by tp*cp*pp = 8");
  EXPECT_EQ(createError(config(16, 2, 2, 3)),
            "world size 16 is not divisible by tp*cp*pp = 12");
  EXPECT_EQ(createError(config(16, 0, 2)), "tp must be at least 1, got 0");
  EXPECT_EQ(createError(config(16, 2, -1)), "pp must be at least 1, got -1");
  EXPECT_EQ(createError(config(-4, 1, 1)),
            "world size must be at least 1, got -4");
  EXPECT_EQ(createError(ParallelConfig{}),
            "either a world size or a data-parallel size is required");

  ParallelConfig dp = config(16, 2, 2);
  dp.dp = 3;
  EXPECT_EQ(createError(dp),
            "dp 3 does not match world size 16 / (tp*cp*pp = 4) = 4");

  ParallelConfig expert = config(16, 2, 2);
  expert.ep = 4;
  expert.etp = 3;
  EXPECT_EQ(createError(expert), "world size 16 is not divisible by etp*ep*pp "
                                 "= 24 (etp 3, ep 4, pp 2)");
  expert.ep = 0;
  EXPECT_EQ(createError(expert), "ep must be at least 1, got 0");

  ParallelConfig huge = config(int64_t(1) << 25, 1, 1);
  EXPECT_EQ(createError(huge),
            "world size 33554432 exceeds the supported maximum 16777216");
  ParallelConfig overflow = config(16, int64_t(1) << 40, int64_t(1) << 40);
  EXPECT_EQ(createError(overflow), "tp*cp*pp overflows");
}

TEST(ParallelLayout, OrderErrors) {
  ParallelConfig c = config(16, 2, 2, 2);
  c.order = "tp-cp-tp-dp-pp";
  EXPECT_EQ(createError(c), "order 'tp-cp-tp-dp-pp' repeats token 'tp'");
  c.order = "tp-cp-ep-xp-pp";
  EXPECT_EQ(createError(c), "unknown token 'xp' in order 'tp-cp-ep-xp-pp'; "
                            "expected tp, cp, ep, dp or pp");
  c.order = "tp-dp-pp";
  EXPECT_EQ(createError(c), "order 'tp-dp-pp' has no token 'cp' but cp is 2");

  // ep only exists in the expert world, so it is that world that complains.
  ParallelConfig noEp = config(16, 2, 2);
  noEp.ep = 2;
  noEp.order = "tp-cp-dp-pp";
  EXPECT_EQ(createError(noEp), "order 'tp-cp-dp-pp' has no token 'ep' but ep "
                               "is 2");

  // dp outside pp needs the same dp in the dense and expert worlds.
  ParallelConfig tpPpDp = config(16, 2, 2);
  tpPpDp.ep = 4;
  tpPpDp.etp = 2;
  tpPpDp.order = kTpPpDpOrder;
  EXPECT_EQ(createError(tpPpDp),
            "order 'tp-cp-ep-pp-dp' does not end with pp, "
            "so expert dp 1 must equal dp 4 (etp 2, ep 4)");

  // Same dp, but pp sits inside tp in one world and outside etp in the other.
  ParallelConfig stride = config(16, 2, 2, 2);
  stride.ep = 4;
  stride.etp = 1;
  stride.order = "tp-pp-cp-ep-dp";
  EXPECT_EQ(createError(stride),
            "order 'tp-pp-cp-ep-dp' gives pp stride 2 in the dense world but 1 "
            "in the expert world; pipeline groups must be the same in both");
}

TEST(ParallelLayout, HierarchicalCpErrors) {
  ParallelConfig c = config(16, 1, 1, 4);
  c.hierarchicalCpSizes = {4, 2};
  EXPECT_EQ(
      createError(c),
      "hierarchical context-parallel sizes [4,2] multiply to 8, not cp 4");
  c.hierarchicalCpSizes = {2, 0};
  EXPECT_EQ(createError(c), "hierarchical context-parallel sizes [2,0] must "
                            "all be at least 1");
}

} // namespace
