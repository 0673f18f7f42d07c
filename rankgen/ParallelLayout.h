//===- ParallelLayout.h - Every process group of a parallel plan -*- C++
//-*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// ParallelLayout computes, for one parallel configuration, every process group
// that Megatron-Core's initialize_model_parallel creates, with the same ranks
// in the same order:
//
//  - the dense world tp*cp*dp*pp and its groups (tp, cp, dp, pp, tp-cp, dp-cp,
//    tp-dp, tp-dp-cp and the model-parallel group tp-pp);
//  - the expert world etp*ep*edp*pp over the same ranks (MoE folding: the
//    attention layers use the dense groups, the expert MLPs the expert ones);
//  - embedding groups (first and last stage of each pipeline group, or the
//    single stage when pp == 1) and position-embedding groups (first stage);
//  - hierarchical context-parallel groups, one kind per level;
//  - with several distributed optimizer instances, the partial data-parallel
//    groups the distributed optimizer shards over and the instance groups.
//
// It also answers per-rank questions: coordinates, the group of each kind,
// pipeline stage and neighbours.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RANKGEN_PARALLELLAYOUT_H
#define LOOM_RANKGEN_PARALLELLAYOUT_H

#include "rankgen/RankGenerator.h"
#include "rankgen/Result.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom {
namespace rankgen {

/// The two orders Megatron-LM's training script chooses between
/// (--use-tp-pp-dp-mapping selects the second).
constexpr const char *kDefaultOrder = "tp-cp-ep-dp-pp";
constexpr const char *kTpPpDpOrder = "tp-cp-ep-pp-dp";

/// What the user asks for. Zero means "derive it", as Megatron-Core does.
struct ParallelConfig {
  /// Number of ranks; 0 derives it as tp*cp*dp*pp from `dp`.
  int64_t worldSize = 0;
  int64_t tp = 1;
  int64_t cp = 1;
  int64_t pp = 1;
  /// Data-parallel size; 0 derives it as worldSize / (tp*cp*pp).
  int64_t dp = 0;
  /// Expert model-parallel size.
  int64_t ep = 1;
  /// Expert tensor-parallel size; 0 means "same as tp" (Megatron's default).
  int64_t etp = 0;
  /// etp with the default resolved.
  int64_t expertTp() const { return etp ? etp : tp; }
  std::string order = kDefaultOrder;
  /// Megatron's hierarchical_context_parallel_sizes, e.g. {4, 2}; empty for
  /// none. The product must equal cp.
  std::vector<int64_t> hierarchicalCpSizes;
  /// Megatron's num_distributed_optimizer_instances: with N > 1 the
  /// distributed optimizer shards within N partial data-parallel groups and
  /// replicates across them. Must divide dp*cp and the expert dp.
  int64_t numDistributedOptimizerInstances = 1;
};

/// Which world a group kind belongs to.
enum class World : uint8_t {
  Dense,  ///< tp*cp*dp*pp: attention and every non-expert layer
  Expert, ///< etp*ep*edp*pp: expert MLPs (MoE folding)
  Derived ///< built from other groups: embedding, hierarchical cp,
          ///< partial distributed optimizer
};

/// One kind of process group and all its groups.
struct GroupKind {
  World world;
  /// Stable key: the token list for dense kinds ("tp-dp"), "expert:" plus
  /// the token list for expert kinds ("expert:tp-ep"), "embedding",
  /// "position-embedding", "hcp:<level>" for hierarchical cp levels, and
  /// "dist-opt:intra-dp-cp", "dist-opt:expert-intra-dp",
  /// "dist-opt:expert-inter-dp", "dist-opt:instance" for the partial
  /// distributed optimizer.
  std::string key;
  /// Token list for dense/expert kinds ("tp-dp"); empty otherwise.
  std::string tokens;
  /// Megatron's name for it, e.g. "tensor model-parallel".
  std::string title;
  GroupList groups;
  /// For each rank, the index of its group, or -1 when it is in none (only
  /// embedding groups leave ranks out).
  std::vector<int32_t> groupOfRank;
  /// For each rank, its position inside that group. This is its group rank
  /// for every kind except "dist-opt:instance", whose lists keep
  /// Megatron-Core's unsorted order (torch numbers a group's members by
  /// global rank).
  std::vector<int32_t> positionOfRank;
};

/// A rank's place in one group kind.
struct Membership {
  const GroupKind *kind = nullptr;
  /// Index of the group in kind->groups; -1 when the rank is in none.
  int64_t group = -1;
  /// The rank's position inside the group (its group rank).
  int64_t position = -1;
  RankSpan ranks;
};

/// Everything about one rank.
struct RankInfo {
  int64_t rank = 0;
  /// Coordinates in the dense world (indexed by Dim; ep is always 0).
  DimArray dense{};
  /// Coordinates in the expert world (tp = etp rank, dp = edp rank, cp = 0).
  DimArray expert{};
  int64_t pipelineStage = 0;
  int64_t numStages = 1;
  bool firstStage = true;
  bool lastStage = true;
  /// Neighbours in the pipeline group; like Megatron-Core they wrap around,
  /// so the last stage's next rank is the first stage.
  int64_t prevRank = 0;
  int64_t nextRank = 0;
  /// One entry per kind, in ParallelLayout::kinds() order.
  std::vector<Membership> groups;
};

/// Every group of one configuration. Cheap to move; building 65,536 ranks
/// takes a few milliseconds.
class ParallelLayout {
public:
  /// Upper bound on the world size: every kind stores a few words per rank.
  static constexpr int64_t kMaxWorldSize = int64_t(1) << 24;

  /// Validates `config` and builds every group kind. Errors name the problem
  /// and the numbers, e.g. "world size 12 is not divisible by tp*cp*pp = 8".
  static Result<ParallelLayout> create(const ParallelConfig &config);

  /// The configuration with every derived size filled in (worldSize, dp,
  /// etp) and the order lowercased.
  const ParallelConfig &config() const { return cfg; }
  int64_t worldSize() const { return cfg.worldSize; }
  /// Expert data-parallel size: worldSize / (etp*ep*pp).
  int64_t expertDp() const { return edp; }

  const RankGenerator &dense() const { return denseGen; }
  const RankGenerator &expert() const { return expertGen; }

  /// All kinds in a stable order for printing: dense (tp, cp, dp, pp, tp-cp,
  /// dp-cp, tp-dp, tp-dp-cp, tp-pp), expert (tp, ep, dp, pp, tp-ep,
  /// tp-ep-pp, ep-dp), embedding, position-embedding, one kind per
  /// hierarchical cp level, then the four partial distributed optimizer
  /// kinds when there is more than one instance.
  const std::vector<GroupKind> &kinds() const { return allKinds; }
  /// The kind with this key (see GroupKind::key), or null.
  const GroupKind *find(std::string_view key) const;

  /// Shorthands for the kinds every configuration has.
  const GroupList &denseGroups(std::string_view tokens) const;
  const GroupList &expertGroups(std::string_view tokens) const;
  const GroupList &embeddingGroups() const;
  const GroupList &positionEmbeddingGroups() const;
  /// Megatron's model-parallel group: the dense tp-pp groups.
  const GroupList &modelParallelGroups() const { return denseGroups("tp-pp"); }
  /// Hierarchical cp groups of one level (0 = innermost); empty when the
  /// configuration has no hierarchical cp sizes.
  const GroupList &hierarchicalCpGroups(size_t level) const;

  /// Any dense token combination, also ones not in kinds() ("tp-cp-dp-pp").
  Result<GroupList> groupsFor(std::string_view tokens) const {
    return denseGen.groupsFor(tokens);
  }
  /// Any expert token combination.
  Result<GroupList> expertGroupsFor(std::string_view tokens) const {
    return expertGen.groupsFor(tokens);
  }

  /// Coordinates and memberships of `rank`; fails when it is out of range.
  Result<RankInfo> rankInfo(int64_t rank) const;

private:
  ParallelLayout() = default;
  void addKind(World world, std::string key, std::string tokens,
               std::string title, GroupList groups);

  ParallelConfig cfg;
  int64_t edp = 1;
  RankGenerator denseGen;
  RankGenerator expertGen;
  std::vector<GroupKind> allKinds;
};

} // namespace rankgen
} // namespace loom

#endif // LOOM_RANKGEN_PARALLELLAYOUT_H
