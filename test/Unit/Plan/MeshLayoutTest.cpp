//===- MeshLayoutTest.cpp - mesh axes reproduce Megatron groups -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The plan's mesh must be laid out so that a `mesh` collective over some axes
// runs over exactly the Megatron process group of those dims: same ranks, same
// order inside each group. A mesh collective over axes A groups the processes
// that agree on every other axis, and orders a group by the row-major index
// of its coordinates on A. These tests build the groups that way from the mesh
// shape alone and compare them with the rank generator's.
//
//===----------------------------------------------------------------------===//

#include "passes/Plan/MeshLayout.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <map>
#include <sstream>

using namespace loom;
using loom::plan::MeshAxes;

namespace {

using Groups = std::vector<std::vector<int64_t>>;

/// Splits "tp-dp" into tokens.
std::vector<std::string> tokensOf(const std::string &kind) {
  std::vector<std::string> out;
  std::stringstream ss(kind);
  for (std::string t; std::getline(ss, t, '-');)
    out.push_back(t);
  return out;
}

/// The groups a mesh collective over the axes named in `kind` forms.
Groups meshGroups(const MeshAxes &axes, const std::string &kind) {
  std::vector<bool> selected(axes.shape.size(), false);
  for (const std::string &t : tokensOf(kind))
    selected[*axes.axis(t)] = true;
  int64_t world = 1;
  for (int64_t s : axes.shape)
    world *= s;
  // Key: coordinates on the other axes. Position: row-major index over the
  // selected axes (mesh order, last fastest).
  std::map<std::vector<int64_t>, std::map<int64_t, int64_t>> byKey;
  for (int64_t rank = 0; rank < world; ++rank) {
    std::vector<int64_t> coord(axes.shape.size());
    int64_t rest = rank;
    for (int64_t i = int64_t(axes.shape.size()) - 1; i >= 0; --i) {
      coord[i] = rest % axes.shape[i];
      rest /= axes.shape[i];
    }
    std::vector<int64_t> key;
    int64_t position = 0;
    for (size_t i = 0; i < coord.size(); ++i) {
      if (selected[i])
        position = position * axes.shape[i] + coord[i];
      else
        key.push_back(coord[i]);
    }
    byKey[key][position] = rank;
  }
  Groups groups;
  for (auto &[key, members] : byKey) {
    std::vector<int64_t> g;
    for (auto &[pos, rank] : members)
      g.push_back(rank);
    groups.push_back(g);
  }
  std::sort(groups.begin(), groups.end());
  return groups;
}

Groups sorted(const rankgen::GroupList &list) {
  Groups g = list.toVectors();
  std::sort(g.begin(), g.end());
  return g;
}

struct Case {
  int64_t tp, cp, dp, pp, ep, etp;
  const char *order;
};

rankgen::ParallelConfig configOf(const Case &c) {
  rankgen::ParallelConfig config;
  config.tp = c.tp;
  config.cp = c.cp;
  config.dp = c.dp;
  config.pp = c.pp;
  config.ep = c.ep;
  config.etp = c.etp;
  config.order = c.order;
  return config;
}

class MeshLayoutTest : public ::testing::TestWithParam<Case> {};

TEST_P(MeshLayoutTest, DenseAxesGiveMegatronGroups) {
  Case c = GetParam();
  auto layout = rankgen::ParallelLayout::create(configOf(c));
  ASSERT_TRUE(layout.ok()) << layout.error();
  MeshAxes axes = plan::denseMeshAxes(layout->config());
  ASSERT_EQ(axes.names.size(), 4u);
  for (const char *kind : {"tp", "cp", "dp", "pp", "tp-cp", "dp-cp", "tp-dp",
                           "tp-dp-cp", "tp-pp", "cp-pp", "tp-cp-dp-pp"}) {
    auto groups = layout->groupsFor(kind);
    ASSERT_TRUE(groups.ok()) << groups.error();
    EXPECT_EQ(meshGroups(axes, kind), sorted(*groups))
        << "kind " << kind << " order " << c.order;
  }
}

TEST_P(MeshLayoutTest, ExpertAxesGiveMegatronExpertGroups) {
  Case c = GetParam();
  auto layout = rankgen::ParallelLayout::create(configOf(c));
  ASSERT_TRUE(layout.ok()) << layout.error();
  MeshAxes axes = plan::expertMeshAxes(layout->config(), layout->expertDp());
  for (const char *kind : {"tp", "ep", "dp", "pp", "tp-ep", "tp-ep-pp",
                           "ep-dp"}) {
    auto groups = layout->expertGroupsFor(kind);
    ASSERT_TRUE(groups.ok()) << groups.error();
    EXPECT_EQ(meshGroups(axes, kind), sorted(*groups))
        << "expert kind " << kind << " order " << c.order;
  }
}

TEST(MeshLayout, DefaultOrderIsPpDpCpTp) {
  rankgen::ParallelConfig config;
  config.tp = 4;
  config.pp = 2;
  config.dp = 2;
  auto layout = rankgen::ParallelLayout::create(config);
  ASSERT_TRUE(layout.ok()) << layout.error();
  MeshAxes axes = plan::denseMeshAxes(layout->config());
  EXPECT_EQ(axes.names, (std::vector<std::string>{"pp", "dp", "cp", "tp"}));
  EXPECT_EQ(axes.shape, (std::vector<int64_t>{2, 2, 1, 4}));
  EXPECT_EQ(*axes.axis("tp"), 3);
  EXPECT_FALSE(axes.axis("ep").has_value());
}

INSTANTIATE_TEST_SUITE_P(
    Plans, MeshLayoutTest,
    ::testing::Values(
        // Seed examples: TP4-PP2-DP2 and ETP1-PP2-EP4-EDP2 on 16 ranks.
        Case{4, 1, 2, 2, 1, 0, "tp-cp-ep-dp-pp"},
        Case{2, 1, 4, 2, 4, 1, "tp-cp-ep-dp-pp"},
        // Seed 003's TP2-PP4 (dp 1), and with dp 2.
        Case{2, 1, 1, 4, 1, 0, "tp-cp-ep-dp-pp"},
        Case{2, 1, 2, 4, 1, 0, "tp-cp-ep-dp-pp"},
        // Context parallel, alone and with everything else.
        Case{1, 4, 2, 1, 1, 0, "tp-cp-ep-dp-pp"},
        Case{2, 2, 2, 2, 1, 0, "tp-cp-ep-dp-pp"},
        Case{2, 2, 2, 2, 2, 1, "tp-cp-ep-dp-pp"},
        Case{2, 2, 3, 2, 3, 2, "tp-cp-ep-dp-pp"},
        // --use-tp-pp-dp-mapping.
        Case{2, 1, 2, 2, 1, 0, "tp-cp-ep-pp-dp"},
        Case{4, 1, 2, 3, 2, 2, "tp-cp-ep-pp-dp"},
        Case{2, 2, 2, 1, 2, 2, "tp-cp-ep-pp-dp"},
        // Odd sizes.
        Case{3, 1, 5, 2, 1, 0, "tp-cp-ep-dp-pp"},
        Case{1, 1, 8, 1, 8, 1, "tp-cp-ep-dp-pp"}));

} // namespace
