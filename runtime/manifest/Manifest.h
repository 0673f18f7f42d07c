//===- Manifest.h - The schema of manifest.json -----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The one definition of out/manifest.json (docs/MANIFEST.md): its in-memory
// types, its version, and its only serializer and parser. loom-compile fills
// a Manifest and serializes it (compiler/Driver/Compiler.cpp); the rank
// program and loom-run parse it, then check how its values fit together and
// fill the fields marked "derived" (runtime/rank/Manifest.h).
//
// What parse() checks: JSON syntax, the format and version, and each value
// on its own (presence, type, spelling, sign, size), plus the few values
// whose storage depends on an earlier field: ranks lie in [0, world_size),
// micro-batch indices in [0, num_microbatches). Everything that relates
// values to each other (shards inside their parameters, Hugging Face
// tensors covered exactly, entries naming parameters and groups that exist,
// every rank listed once ...) is the rank program's check.
//
// Plain C++17 without LLVM, built with the runtime (exceptions on) and
// linked by the compiler (exceptions off): nothing in this header throws or
// names the JSON library; ManifestJson.cpp catches what the JSON library
// throws and returns errors as Result values.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_MANIFEST_MANIFEST_H
#define LOOM_RUNTIME_MANIFEST_MANIFEST_H

#include "rankgen/Result.h"

#include "loomrt/loomrt.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace loom::manifest {

/// Every manifest names its schema ("format") and version; parse() refuses
/// any other. Bump kVersion when a reader of the previous version would
/// misread what this one writes.
inline constexpr const char kFormat[] = "loom-manifest";
inline constexpr int64_t kVersion = 1;

/// A value or a one-line message (rankgen's, plain C++ without exceptions).
template <typename T> using Result = rankgen::Result<T>;

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape &shape);
/// numElements for a shape read from a file: nullopt when a dimension is
/// negative or the product does not fit in int64_t.
std::optional<int64_t> checkedNumElements(const Shape &shape);
std::string shapeString(const Shape &shape);

/// "f32" / "bf16" / "f16", the manifest's spelling of a dtype.
std::optional<loomrt_dtype> parseManifestDType(const std::string &name);
const char *manifestDTypeName(loomrt_dtype dtype);

enum class InitKind { Normal, Zeros, Ones };

/// An axis-aligned box of a tensor: elements offset[d] <= i[d] <
/// offset[d] + shape[d].
struct Box {
  Shape offset, shape;

  bool operator==(const Box &o) const {
    return offset == o.offset && shape == o.shape;
  }
  bool operator!=(const Box &o) const { return !(*this == o); }
};

/// The part of a parameter held by one rank.
struct Shard {
  int32_t rank = 0;
  Box box;
};

/// Where a parameter lives in the Hugging Face checkpoint of its family
/// ("hf"; without one a parameter is its own checkpoint tensor, and parse()
/// fills in that default).
struct HfPlacement {
  std::string name;
  Shape shape;          // the full HF tensor, as Loom assembles it
  bool transpose = false;
  Shape offset;         // in HF coordinates
  /// Rows of `shape` the Hugging Face file holds, when a vocabulary padded
  /// to a multiple gives the tensor more (0: all of them).
  int64_t fileRows = 0;
  /// Stacked experts ("experts"): the file holds each of the shape[0]
  /// slices along dim 0 as its own tensor, expertName(e) (0: one tensor).
  int64_t experts = 0;
};

/// "placement": every rank of every group of `groups[group]` holds the
/// parameter, split on `splitDim` into equal slices by its position in the
/// group (whole without one); with `ppRanks`, only the groups whose first
/// rank is at one of those pipeline positions. The compact form of a shard
/// list, which for a large world would name every rank for every parameter.
struct Placement {
  std::string group;
  std::optional<int64_t> splitDim;
  std::optional<std::vector<int64_t>> ppRanks;
  /// "then": a second split of each rank's piece, on another dim, by the
  /// rank's position in its group of another kind.
  struct Then {
    std::string group;
    int64_t splitDim = 0;
  };
  std::optional<Then> then;
};

struct ParamSpec {
  std::string name;
  Shape shape; // global
  loomrt_dtype dtype = LOOMRT_F32;
  InitKind init = InitKind::Normal;
  double std = 0.0;
  HfPlacement hf;
  /// The ranks' parts: as listed in "shards" when there is no placement;
  /// derived from the placement otherwise (by the rank program's check).
  std::vector<Shard> shards;
  /// Derived: the shards are listed in ascending rank order (as the
  /// placement expands), so shardOf can search instead of scanning: the rank
  /// program asks it for every rank of large worlds.
  bool shardsByRank = false;
  /// What loom-compile writes instead of "shards".
  std::optional<Placement> placement;
  /// The group kind its gradient is summed over when not the manifest's
  /// gradientGroup: an expert's, "expert:dp" (Megatron's expert data
  /// parallel group).
  std::optional<std::string> gradientGroup;

  /// The shard of `rank`, or null if it holds no part of this parameter.
  const Shard *shardOf(int32_t rank) const;
  /// One shard per distinct box (the first listed holder of each), in
  /// listing order: the pieces a checkpoint writer gathers.
  std::vector<const Shard *> distinctShards() const;
  /// The first listed holder of the box of `s` (one of this param's
  /// shards): the rank that writes it and that replicas are compared with.
  int32_t firstHolder(const Shard &s) const;
};

/// Derived: one Hugging Face checkpoint tensor and the parameters it is made
/// of.
///
/// A padded vocabulary (loom-import --make-vocab-size-divisible-by) gives
/// the embedding and output tables `shape[0]` rows of which the Hugging
/// Face file holds the first `fileRows`: a file stores those under `name`
/// and Megatron's padding rows apart, under paddingName(), so that the file
/// stays loadable by Hugging Face and a resume stays exact.
struct HfTensor {
  std::string name;
  Shape shape;
  loomrt_dtype dtype = LOOMRT_F32;
  std::vector<size_t> pieces; // indices into Manifest::params
  int64_t fileRows = 0;       // < shape[0] when padded, else shape[0]
  int64_t experts = 0;        // HfPlacement::experts

  bool padded() const { return !shape.empty() && fileRows < shape[0]; }
  /// Hugging Face's name of expert e's slice: "...experts.w1.weight" ->
  /// "...experts.<e>.w1.weight" (Mixtral's and Qwen2-MoE's layout).
  std::string expertName(int64_t e) const;
  /// The shape of one expert's slice (shape without dim 0).
  Shape expertShape() const { return Shape(shape.begin() + 1, shape.end()); }
  /// The file tensors this tensor is written as, in file order: the
  /// tensor, or its padding apart, or one per expert.
  std::vector<std::pair<std::string, Shape>> fileTensors() const;
  /// The tensor under `name` in a file: the first fileRows rows.
  Shape fileShape() const;
  /// The padding rows, under paddingName().
  Shape paddingShape() const;
  std::string paddingName() const { return name + ".vocab_padding"; }
};

/// `GradScale` (an f32 scalar input) and `Grad` (the output gradient of a
/// parameter) belong to the train step. `Other` is a kind this rank program does
/// not provide; it is an error only in an entry the rank program runs.
enum class ArgKind {
  Tokens,
  Labels,
  LossMask,
  Param,
  Loss,
  Comm,
  GradScale,
  Grad,
  Other
};

/// The kind spelled `name` ("tokens", "loss_mask", ...), Other for a name
/// the schema does not define.
ArgKind parseArgKind(const std::string &name);
/// The spelling of `kind`; null for Other (whose argument names its kind).
const char *argKindName(ArgKind kind);

struct EntryArg {
  ArgKind kind = ArgKind::Tokens;
  /// Parameter name (Param, Grad), group kind (Comm), kind (Other).
  std::string name;
  /// A pipelined step's batch input or loss: every micro-batch of the step,
  /// stacked (false for the entries that take one micro-batch per call).
  bool stacked = false;
  /// A gradient's buffer dtype when it is not the parameter's (a pipelined
  /// step returns f32 sums).
  std::optional<loomrt_dtype> dtype;
  /// The model chunk after whose last backward a pipelined step's gradient
  /// is final (it calls loomrt_grads_ready(chunk) then); -1 when it is not
  /// signalled (final when the call returns).
  int64_t chunk = -1;
};

/// A compiled entry point: `void symbol(void **args)`.
struct Entry {
  std::string symbol;
  std::vector<EntryArg> args;
  /// Bytes of the workspace the entry takes after `args` (its temporaries,
  /// at offsets fixed at compile time); 0: none. The caller allocates it
  /// once and passes the same one to every call.
  int64_t workspaceBytes = 0;
  bool hasArg(ArgKind kind) const;
  /// A pipelined step: one call runs every micro-batch of the step
  /// (loom-compile --pp), its batch inputs and losses one per micro-batch.
  bool pipelined() const;
};

/// Entry points by what the rank program does with them: "forward",
/// "train_step".
using Entries = std::map<std::string, Entry>;

struct RankInfo {
  int32_t rank = 0;
  std::string binary;
  bool logsLoss = false;
  /// Derived: the entry points of this rank's binary: its own "entries" if it
  /// has them, else those of its pp rank in "stage_entries", else the
  /// top-level ones.
  Entries entries;
  /// Ranges [begin, end) of the global sequence this rank's token buffers
  /// hold, concatenated (context parallelism); empty or [[0,
  /// padded_seq_length]] (the default, not written) for all of it.
  std::vector<std::pair<int64_t, int64_t>> sequenceRanges;
  int64_t localSeqLength() const;
  /// "ranks[r].entries": this rank's own entry points, overriding the
  /// top-level and stage ones (loom-compile writes none).
  std::optional<Entries> ownEntries;
};

/// An integer, boolean, number or string of the free-form "model" object
/// (loom-import's model attributes).
using Scalar = std::variant<int64_t, bool, double, std::string>;

struct Manifest {
  /// "model.family" ("" without one): the log and checkpoints name it.
  std::string family;
  int32_t worldSize = 1;
  std::string backend = "cpu"; // the runtime the executables link
  int64_t microBatchSize = 1;
  int64_t seqLength = 1; // what the data is sampled at
  /// The length the program runs at (seq_length padded for context or
  /// sequence parallelism); tokens past seqLength are masked padding.
  /// Written only when it differs from seqLength.
  int64_t paddedSeqLength = 1;
  int64_t numMicrobatches = 1;
  int64_t vocabSize = 1;
  loomrt_dtype dtype = LOOMRT_F32;
  std::optional<int64_t> eodTokenId;
  /// Mixture-of-experts layers whose router computes a load-balancing loss
  /// and a z-loss ("router_losses"; written when not both 0): the rank
  /// program logs their means, which the step accumulates in loomrt_metrics.
  struct RouterLosses {
    int64_t loadBalancing = 0, zLoss = 0;
  } routerLosses;
  std::map<std::string, int64_t> plan; // tp, cp, dp, pp, ... (integers only)
  /// Group kind -> list of groups -> world ranks, in group-rank order.
  std::map<std::string, std::vector<std::vector<int32_t>>> groups;
  std::vector<RankInfo> ranks; // indexed by rank (once checked)
  std::vector<ParamSpec> params;
  std::vector<HfTensor> hfTensors; // derived; sorted by name
  /// Derived: params by name, for findParam; indexParams() fills it.
  std::unordered_map<std::string, size_t> paramIndex;

  const ParamSpec *findParam(const std::string &name) const;
  /// Indexes params by name for findParam (the rank program's check does
  /// it; code that rebuilds params calls it again). Without an index
  /// findParam scans.
  void indexParams();
  /// The group of `kind` that holds `rank` and the rank's position in it;
  /// nullopt when the kind is absent or no group of it holds the rank.
  std::optional<std::pair<const std::vector<int32_t> *, int32_t>>
  groupOf(const std::string &kind, int32_t rank) const;
  /// The plan's pipeline size (1 when not given) and `rank`'s position in
  /// its pipeline group (0 without "pp" groups).
  int64_t ppSize() const;
  int64_t ppRankOf(int32_t rank) const;
  /// Derived: ppRankOf by rank, filled from "groups" (empty: compute).
  std::vector<int32_t> ppRankByRank;
  /// Data-parallel size and this rank's index in its data-parallel group
  /// (1 and 0 without "dp" groups).
  std::pair<int64_t, int64_t> dataParallel(int32_t rank) const;
  /// The group kind over which parameter gradients are reduced and the
  /// distributed optimizer shards: "dp", or with context parallelism
  /// Megatron's "dp-cp" (the gradients are partial sums over cp).
  std::string gradientGroup = "dp";
  /// The group kind parameter `p`'s gradient is summed over.
  const std::string &gradientGroupOf(const ParamSpec &p) const {
    return p.gradientGroup ? *p.gradientGroup : gradientGroup;
  }
  /// Whether some parameter's gradient has a group of its own (experts):
  /// then the ranks of a gradientGroup group hold different parameters, and
  /// the rank program keeps one gradient bucket per group.
  bool hasOwnGradientGroups() const {
    for (const ParamSpec &p : params)
      if (p.gradientGroup)
        return true;
    return false;
  }
  /// Its size and this rank's index in it (1 and 0 without such groups).
  std::pair<int64_t, int64_t> gradientParallel(int32_t rank) const;

  // What the rank program reads only in part (it prints the family and the
  // integer sizes of the plan) or through the fields above.

  /// "model" but its family: null (nullopt) or the imported model's
  /// configuration.
  std::optional<std::map<std::string, Scalar>> model;
  /// "plan.sequence_parallel" and "plan.order", the plan's other fields.
  std::optional<bool> sequenceParallel;
  std::optional<std::string> order;
  /// "entries": the top-level entry points (always written).
  Entries entries;
  /// "stage_entries" (pipelined plans): the entry points of each pp rank.
  std::optional<std::vector<Entries>> stageEntries;
};

/// Parses manifest text: the format, the version and every value on its own
/// (see the top of this file); `what` names the source in the message
/// ("out/manifest.json: seq_length: expected an integer, got \"16\"").
/// The derived fields stay empty.
Result<Manifest> parse(const std::string &text, const std::string &what);

/// The manifest as loom-compile writes it: JSON with two-space indents,
/// object keys sorted, a newline at the end; the derived fields are not
/// written. Does not fail (running out of memory terminates, as in the
/// compiler).
std::string serialize(const Manifest &m) noexcept;

} // namespace loom::manifest

#endif // LOOM_RUNTIME_MANIFEST_MANIFEST_H
