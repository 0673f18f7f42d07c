//===- ParallelLayout.cpp - Every process group of a parallel plan --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The sequence of checks and groups follows Megatron-Core's
// initialize_model_parallel so that a configuration it rejects is rejected
// here too, and every accepted one yields identical groups.
//
//===----------------------------------------------------------------------===//

#include "rankgen/ParallelLayout.h"


using namespace loom::rankgen;

static std::string str(int64_t v) { return std::to_string(v); }

static std::string listString(const std::vector<int64_t> &values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i)
    out += (i ? "," : "") + str(values[i]);
  return out + "]";
}

/// Multiplies positive sizes, failing instead of overflowing.
static bool mulChecked(int64_t a, int64_t b, int64_t &out) {
  if (a > INT64_MAX / b)
    return false;
  out = a * b;
  return true;
}

//===----------------------------------------------------------------------===//
// Derived groups
//===----------------------------------------------------------------------===//

/// Megatron-Core's default_embedding_ranks: the first and last rank of each
/// pipeline group (the word embedding and the output layer share weights),
/// or the only rank when pp == 1.
static GroupList buildEmbeddingGroups(const GroupList &pp) {
  int64_t size = pp.groupSize() == 1 ? 1 : 2;
  std::vector<int64_t> flat;
  flat.reserve(pp.numGroups() * size);
  for (size_t g = 0; g < pp.numGroups(); ++g) {
    flat.push_back(pp[g].front());
    if (size == 2)
      flat.push_back(pp[g].back());
  }
  return GroupList(size, std::move(flat));
}

/// Megatron-Core's default_position_embedding_ranks: the first stage only.
static GroupList buildPositionEmbeddingGroups(const GroupList &pp) {
  std::vector<int64_t> flat;
  flat.reserve(pp.numGroups());
  for (size_t g = 0; g < pp.numGroups(); ++g)
    flat.push_back(pp[g].front());
  return GroupList(1, std::move(flat));
}

/// Level `level` of Megatron-Core's create_hierarchical_groups applied to
/// every cp group. A cp group of size s0*s1*...*sn is viewed as a grid with
/// level 0 fastest; a level-l sub-group varies only the level-l digit.
/// Sub-groups are listed per cp group, outer levels major and inner levels
/// minor (einops "(l s u) -> (l u) s").
///   e.g. cp group [0..7] with sizes [4, 2]:
///     level 0: [0, 1, 2, 3], [4, 5, 6, 7]   level 1: [0, 4], [1, 5], ...
static GroupList buildHierarchicalGroups(const GroupList &cp,
                                         const std::vector<int64_t> &sizes,
                                         size_t level) {
  int64_t inner = 1, outer = 1;
  for (size_t i = 0; i < level; ++i)
    inner *= sizes[i];
  for (size_t i = level + 1; i < sizes.size(); ++i)
    outer *= sizes[i];
  int64_t s = sizes[level];
  std::vector<int64_t> flat;
  flat.reserve(cp.flat().size());
  for (size_t g = 0; g < cp.numGroups(); ++g) {
    RankSpan ranks = cp[g];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t u = 0; u < inner; ++u)
        for (int64_t k = 0; k < s; ++k)
          flat.push_back(ranks[(o * s + k) * inner + u]);
  }
  return GroupList(s, std::move(flat));
}

//===----------------------------------------------------------------------===//
// ParallelLayout
//===----------------------------------------------------------------------===//

void ParallelLayout::addKind(World world, std::string key, std::string tokens,
                             std::string title, GroupList groups) {
  GroupKind kind;
  kind.world = world;
  kind.key = std::move(key);
  kind.tokens = std::move(tokens);
  kind.title = std::move(title);
  kind.groupOfRank.assign(cfg.worldSize, -1);
  kind.positionOfRank.assign(cfg.worldSize, -1);
  for (size_t g = 0; g < groups.numGroups(); ++g) {
    RankSpan ranks = groups[g];
    for (size_t i = 0; i < ranks.size(); ++i) {
      kind.groupOfRank[ranks[i]] = static_cast<int32_t>(g);
      kind.positionOfRank[ranks[i]] = static_cast<int32_t>(i);
    }
  }
  kind.groups = std::move(groups);
  allKinds.push_back(std::move(kind));
}

Result<ParallelLayout> ParallelLayout::create(const ParallelConfig &config) {
  ParallelLayout layout;
  ParallelConfig &cfg = layout.cfg;
  cfg = config;

  // Sizes must be positive; 0 is allowed only where it means "derive".
  struct Named {
    const char *name;
    int64_t value;
    bool zeroDerives;
  };
  for (const Named &n :
       {Named{"world size", cfg.worldSize, true}, Named{"tp", cfg.tp, false},
        Named{"cp", cfg.cp, false}, Named{"pp", cfg.pp, false},
        Named{"dp", cfg.dp, true}, Named{"ep", cfg.ep, false},
        Named{"etp", cfg.etp, true}})
    if (n.value < 0 || (n.value == 0 && !n.zeroDerives))
      return fail(std::string(n.name) + " must be at least 1, got " +
                  str(n.value));
  for (int64_t s : cfg.hierarchicalCpSizes)
    if (s < 1)
      return fail("hierarchical context-parallel sizes " +
                  listString(cfg.hierarchicalCpSizes) +
                  " must all be at least 1");

  // Dense world: world = tp*cp*dp*pp, dp derived as in Megatron-Core.
  int64_t modelSize;
  if (!mulChecked(cfg.tp, cfg.cp, modelSize) ||
      !mulChecked(modelSize, cfg.pp, modelSize))
    return fail("tp*cp*pp overflows");
  if (cfg.worldSize == 0) {
    if (cfg.dp == 0)
      return fail("either a world size or a data-parallel size is required");
    if (!mulChecked(modelSize, cfg.dp, cfg.worldSize))
      return fail("world size tp*cp*dp*pp overflows");
  } else {
    if (cfg.worldSize % modelSize != 0)
      return fail("world size " + str(cfg.worldSize) +
                  " is not divisible by tp*cp*pp = " + str(modelSize));
    int64_t dp = cfg.worldSize / modelSize;
    if (cfg.dp != 0 && cfg.dp != dp)
      return fail("dp " + str(cfg.dp) + " does not match world size " +
                  str(cfg.worldSize) + " / (tp*cp*pp = " + str(modelSize) +
                  ") = " + str(dp));
    cfg.dp = dp;
  }
  if (cfg.worldSize > kMaxWorldSize)
    return fail("world size " + str(cfg.worldSize) +
                " exceeds the supported maximum " + str(kMaxWorldSize));

  Result<RankGenerator> dense = RankGenerator::create(
      {cfg.tp, cfg.cp, /*ep=*/1, cfg.dp, cfg.pp}, cfg.order);
  if (!dense)
    return fail(dense.error());
  layout.denseGen = dense.take();
  cfg.order = layout.denseGen.orderString();

  // Expert world over the same ranks: etp*ep*edp*pp, etp defaulting to tp.
  if (cfg.etp == 0)
    cfg.etp = cfg.tp;
  int64_t expertModelSize;
  if (!mulChecked(cfg.etp, cfg.ep, expertModelSize) ||
      !mulChecked(expertModelSize, cfg.pp, expertModelSize))
    return fail("etp*ep*pp overflows");
  if (cfg.worldSize % expertModelSize != 0)
    return fail("world size " + str(cfg.worldSize) +
                " is not divisible by etp*ep*pp = " + str(expertModelSize) +
                " (etp " + str(cfg.etp) + ", ep " + str(cfg.ep) + ", pp " +
                str(cfg.pp) + ")");
  layout.edp = cfg.worldSize / expertModelSize;
  Result<RankGenerator> expert = RankGenerator::create(
      {cfg.etp, /*cp=*/1, cfg.ep, layout.edp, cfg.pp}, cfg.order);
  if (!expert)
    return fail(expert.error());
  layout.expertGen = expert.take();

  // Megatron-Core: unless pp is the outermost (last) dimension, the dense
  // and expert layers must have the same dp.
  bool ppLast = cfg.order.size() >= 2 &&
                cfg.order.compare(cfg.order.size() - 2, 2, "pp") == 0;
  if (!ppLast && cfg.pp != 1 && layout.edp != cfg.dp)
    return fail("order '" + cfg.order +
                "' does not end with pp, so expert dp " + str(layout.edp) +
                " must equal dp " + str(cfg.dp) + " (etp " + str(cfg.etp) +
                ", ep " + str(cfg.ep) + ")");

  // Megatron-Core asserts both worlds have the same pipeline groups. They
  // are {first + k*stride : k < pp}, so with pp > 1 they agree exactly when
  // pp has the same stride in both worlds.
  int64_t denseStride = layout.denseGen.stride(Dim::PP);
  int64_t expertStride = layout.expertGen.stride(Dim::PP);
  if (cfg.pp > 1 && denseStride != expertStride)
    return fail("order '" + cfg.order + "' gives pp stride " +
                str(denseStride) + " in the dense world but " +
                str(expertStride) +
                " in the expert world; pipeline groups must be the same in "
                "both");

  if (!cfg.hierarchicalCpSizes.empty()) {
    int64_t product = 1;
    for (int64_t s : cfg.hierarchicalCpSizes)
      if (!mulChecked(product, s, product))
        return fail("hierarchical context-parallel sizes " +
                    listString(cfg.hierarchicalCpSizes) + " overflow");
    if (product != cfg.cp)
      return fail("hierarchical context-parallel sizes " +
                  listString(cfg.hierarchicalCpSizes) + " multiply to " +
                  str(product) + ", not cp " + str(cfg.cp));
  }

  // Partial distributed optimizer: dp*cp and edp split into equal instances.
  int64_t instances = cfg.numDistributedOptimizerInstances;
  if (instances < 1)
    return fail("distributed optimizer instances must be at least 1, got " +
                str(instances));
  if ((cfg.dp * cfg.cp) % instances != 0)
    return fail("dp*cp = " + str(cfg.dp * cfg.cp) + " is not divisible by " +
                str(instances) + " distributed optimizer instances");
  if (layout.edp % instances != 0)
    return fail("expert dp " + str(layout.edp) + " is not divisible by " +
                str(instances) + " distributed optimizer instances");

  // Dense kinds: the single dimensions first, then Megatron's combinations.
  struct KindSpec {
    const char *tokens;
    const char *title;
  };
  static const KindSpec denseKinds[] = {
      {"tp", "tensor model-parallel"},
      {"cp", "context-parallel"},
      {"dp", "data-parallel"},
      {"pp", "pipeline model-parallel"},
      {"tp-cp", "tensor and context parallel"},
      {"dp-cp", "data-parallel with context parallel"},
      {"tp-dp", "tensor and data parallel"},
      {"tp-dp-cp", "tensor, data and context parallel"},
      {"tp-pp", "model-parallel"},
  };
  static const KindSpec expertKinds[] = {
      {"tp", "expert tensor-parallel"},
      {"ep", "expert model-parallel"},
      {"dp", "expert data-parallel"},
      {"pp", "expert pipeline model-parallel"},
      {"tp-ep", "expert tensor and model parallel"},
      {"tp-ep-pp", "expert tensor, model and pipeline parallel"},
      {"ep-dp", "expert model and data parallel"},
  };
  for (const KindSpec &k : denseKinds) {
    GroupList groups = *layout.denseGen.groupsFor(k.tokens);
    layout.addKind(World::Dense, k.tokens, k.tokens, k.title,
                   std::move(groups));
  }
  for (const KindSpec &k : expertKinds) {
    GroupList groups = *layout.expertGen.groupsFor(k.tokens);
    layout.addKind(World::Expert, std::string("expert:") + k.tokens, k.tokens,
                   k.title, std::move(groups));
  }
  layout.addKind(World::Derived, "embedding", "",
                 "word embedding: first and last pipeline stage",
                 buildEmbeddingGroups(layout.denseGroups("pp")));
  layout.addKind(World::Derived, "position-embedding", "",
                 "position embedding: first pipeline stage",
                 buildPositionEmbeddingGroups(layout.denseGroups("pp")));
  // addKind() may grow allKinds, so a derived list must be computed before
  // the call or from a copy, never from a reference held across it.
  if (!cfg.hierarchicalCpSizes.empty()) {
    GroupList cp = layout.denseGroups("cp");
    for (size_t level = 0; level < cfg.hierarchicalCpSizes.size(); ++level)
      layout.addKind(
          World::Derived, "hcp:" + str(level), "",
          "hierarchical context-parallel level " + str(level),
          buildHierarchicalGroups(cp, cfg.hierarchicalCpSizes, level));
  }
  if (instances > 1) {
    // Consecutive slices of each dp-cp group (Megatron-Core's
    // INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP): same flat list, smaller
    // groups.
    GroupList dpCp = layout.denseGroups("dp-cp");
    layout.addKind(World::Derived, "dist-opt:intra-dp-cp", "",
                   "partial data-parallel with context parallel",
                   GroupList(dpCp.groupSize() / instances, dpCp.flat()));
    // Each expert dp group as a two-level hierarchy [edp / instances,
    // instances]: level 0 shards within an instance, level 1 joins the
    // replicas across instances.
    GroupList expertDp = layout.expertGroups("dp");
    std::vector<int64_t> levels = {layout.edp / instances, instances};
    layout.addKind(World::Derived, "dist-opt:expert-intra-dp", "",
                   "intra-partial expert data-parallel",
                   buildHierarchicalGroups(expertDp, levels, 0));
    layout.addKind(World::Derived, "dist-opt:expert-inter-dp", "",
                   "inter-partial expert data-parallel",
                   buildHierarchicalGroups(expertDp, levels, 1));
    // One optimizer instance: edp / instances consecutive tp-ep-pp groups
    // concatenated, in Megatron-Core's order (not sorted).
    GroupList tpEpPp = layout.expertGroups("tp-ep-pp");
    layout.addKind(World::Derived, "dist-opt:instance", "",
                   "distributed optimizer instance",
                   GroupList(tpEpPp.groupSize() * (layout.edp / instances),
                             tpEpPp.flat()));
  }
  return layout;
}

const GroupKind *ParallelLayout::find(std::string_view key) const {
  for (const GroupKind &kind : allKinds)
    if (kind.key == key)
      return &kind;
  return nullptr;
}

static const GroupList &emptyGroups() {
  static const GroupList empty;
  return empty;
}

const GroupList &ParallelLayout::denseGroups(std::string_view tokens) const {
  const GroupKind *kind = find(tokens);
  return kind && kind->world == World::Dense ? kind->groups : emptyGroups();
}

const GroupList &ParallelLayout::expertGroups(std::string_view tokens) const {
  const GroupKind *kind = find("expert:" + std::string(tokens));
  return kind ? kind->groups : emptyGroups();
}

const GroupList &ParallelLayout::embeddingGroups() const {
  return find("embedding")->groups;
}

const GroupList &ParallelLayout::positionEmbeddingGroups() const {
  return find("position-embedding")->groups;
}

const GroupList &ParallelLayout::hierarchicalCpGroups(size_t level) const {
  const GroupKind *kind = find("hcp:" + str(static_cast<int64_t>(level)));
  return kind ? kind->groups : emptyGroups();
}

Result<RankInfo> ParallelLayout::rankInfo(int64_t rank) const {
  if (rank < 0 || rank >= cfg.worldSize)
    return fail("rank " + str(rank) + " is out of range for world size " +
                str(cfg.worldSize));
  RankInfo info;
  info.rank = rank;
  info.dense = denseGen.coordinates(rank);
  info.expert = expertGen.coordinates(rank);

  // Pipeline neighbours come from the rank's pp group, as in Megatron-Core's
  // get_pipeline_model_parallel_{next,prev}_rank (which wrap around).
  const GroupKind &pp = *find("pp");
  RankSpan stages = pp.groups[pp.groupOfRank[rank]];
  int64_t stage = pp.positionOfRank[rank];
  int64_t n = static_cast<int64_t>(stages.size());
  info.pipelineStage = stage;
  info.numStages = n;
  info.firstStage = stage == 0;
  info.lastStage = stage == n - 1;
  info.prevRank = stages[(stage - 1 + n) % n];
  info.nextRank = stages[(stage + 1) % n];

  for (const GroupKind &kind : allKinds) {
    Membership m;
    m.kind = &kind;
    m.group = kind.groupOfRank[rank];
    if (m.group >= 0) {
      m.position = kind.positionOfRank[rank];
      m.ranks = kind.groups[m.group];
    }
    info.groups.push_back(m);
  }
  return info;
}
