//===- Manifest.h - The compiled program's manifest.json --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The in-memory form of out/manifest.json (docs/MANIFEST.md), validated as a
// whole when it is read: every later stage (initialization, data, the step
// loop, checkpoints) can rely on shards lying inside their parameters, on
// Hugging Face tensors being covered exactly by their pieces and on groups
// naming existing ranks.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_MANIFEST_H
#define LOOM_RUNTIME_RANK_MANIFEST_H

#include "runtime/rank/Error.h"

#include "loomrt/loomrt.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom::rank {

using Shape = std::vector<int64_t>;

int64_t numElements(const Shape &shape);
/// numElements for a shape read from a file: nullopt when a dimension is
/// negative or the product does not fit in int64_t.
std::optional<int64_t> checkedNumElements(const Shape &shape);
std::string shapeString(const Shape &shape);

/// "f32" / "bf16" / "f16" (manifest spelling) and "F32" / "BF16" / "F16"
/// (safetensors spelling).
std::optional<loomrt_dtype> parseManifestDType(const std::string &name);
std::optional<loomrt_dtype> parseSafetensorsDType(const std::string &name);
const char *manifestDTypeName(loomrt_dtype dtype);
const char *safetensorsDTypeName(loomrt_dtype dtype);
int64_t dtypeBytes(loomrt_dtype dtype);

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

/// Where a parameter lives in the Hugging Face checkpoint of its family.
struct HfPlacement {
  std::string name;
  Shape shape;          // the full HF tensor, as Loom assembles it
  bool transpose = false;
  Shape offset;         // in HF coordinates
  /// Rows of `shape` the Hugging Face file holds, when a vocabulary padded
  /// to a multiple gives the tensor more (0: all of them).
  int64_t fileRows = 0;
};

struct ParamSpec {
  std::string name;
  Shape shape; // global
  loomrt_dtype dtype = LOOMRT_F32;
  InitKind init = InitKind::Normal;
  double std = 0.0;
  HfPlacement hf;
  std::vector<Shard> shards;
  /// The shards are listed in ascending rank order (as loom-compile writes
  /// them), so shardOf can search instead of scanning: the rank program asks it
  /// for every rank of large worlds.
  bool shardsByRank = false;

  /// The shard of `rank`, or null if it holds no part of this parameter.
  const Shard *shardOf(int32_t rank) const;
  /// One shard per distinct box (the first listed holder of each), in
  /// listing order: the pieces a checkpoint writer gathers.
  std::vector<const Shard *> distinctShards() const;
  /// The first listed holder of the box of `s` (one of this param's
  /// shards): the rank that writes it and that replicas are compared with.
  int32_t firstHolder(const Shard &s) const;
};

/// One Hugging Face checkpoint tensor and the parameters it is made of.
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

  bool padded() const { return !shape.empty() && fileRows < shape[0]; }
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

struct EntryArg {
  ArgKind kind = ArgKind::Tokens;
  /// Parameter name (Param, Grad), group kind (Comm), kind (Other).
  std::string name;
  /// The micro-batch of a pipelined step's batch input or loss; -1 for the
  /// entries that take one micro-batch per call.
  int64_t microbatch = -1;
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
  bool hasArg(ArgKind kind) const;
  /// A pipelined step: one call runs every micro-batch of the step
  /// (loom-compile --pp), its batch inputs and losses one per micro-batch.
  bool pipelined() const;
};

struct RankInfo {
  int32_t rank = 0;
  std::string binary;
  bool logsLoss = false;
  /// Entry points of this rank's binary: the rank's own "entries" if it has
  /// them, else those of its pp rank in "stage_entries", else the top-level
  /// ones.
  std::map<std::string, Entry> entries;
  /// Ranges [begin, end) of the global sequence this rank's token buffers
  /// hold, concatenated (context parallelism); [[0, seq_length]] by default.
  std::vector<std::pair<int64_t, int64_t>> sequenceRanges;
  int64_t localSeqLength() const;
};

struct Manifest {
  std::string family;
  int32_t worldSize = 1;
  std::string backend = "cpu"; // the runtime the executables link
  int64_t microBatchSize = 1;
  int64_t seqLength = 1; // what the data is sampled at
  /// The length the program runs at (seq_length padded for context or
  /// sequence parallelism); tokens past seqLength are masked padding.
  int64_t paddedSeqLength = 1;
  int64_t numMicrobatches = 1;
  int64_t vocabSize = 1;
  loomrt_dtype dtype = LOOMRT_F32;
  std::optional<int64_t> eodTokenId;
  std::map<std::string, int64_t> plan; // tp, cp, dp, pp, ... (integers only)
  /// Group kind -> list of groups -> world ranks, in group-rank order.
  std::map<std::string, std::vector<std::vector<int32_t>>> groups;
  std::vector<RankInfo> ranks; // indexed by rank
  std::vector<ParamSpec> params;
  std::vector<HfTensor> hfTensors; // sorted by name
  /// params by name, for findParam; indexParams() fills it.
  std::unordered_map<std::string, size_t> paramIndex;

  const ParamSpec *findParam(const std::string &name) const;
  /// Indexes params by name for findParam (parseManifest does it; code that
  /// rebuilds params calls it again). Without an index findParam scans.
  void indexParams();
  /// The group of `kind` that holds `rank` and the rank's position in it;
  /// nullopt when the kind is absent or no group of it holds the rank.
  std::optional<std::pair<const std::vector<int32_t> *, int32_t>>
  groupOf(const std::string &kind, int32_t rank) const;
  /// The plan's pipeline size (1 when not given) and `rank`'s position in
  /// its pipeline group (0 without "pp" groups).
  int64_t ppSize() const;
  int64_t ppRankOf(int32_t rank) const;
  /// ppRankOf by rank, filled from "groups" by the parser (empty: compute).
  std::vector<int32_t> ppRankByRank;
  /// Data-parallel size and this rank's index in its data-parallel group
  /// (1 and 0 without "dp" groups).
  std::pair<int64_t, int64_t> dataParallel(int32_t rank) const;
  /// The group kind over which parameter gradients are reduced and the
  /// distributed optimizer shards: "dp", or with context parallelism
  /// Megatron's "dp-cp" (the gradients are partial sums over cp).
  std::string gradientGroup = "dp";
  /// Its size and this rank's index in it (1 and 0 without such groups).
  std::pair<int64_t, int64_t> gradientParallel(int32_t rank) const;
};

/// Parses and validates manifest text; `what` names the source in errors
/// ("out/manifest.json"). Throws Error.
Manifest parseManifest(const std::string &text, const std::string &what);
/// Reads and parses a manifest file. Throws Error.
Manifest readManifest(const std::string &path);

/// Throws Error unless the boxes tile a tensor of `shape` exactly (every
/// element in exactly one box). `what` prefixes the message.
void checkTiling(const std::vector<Box> &boxes, const Shape &shape,
                 const std::string &what);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_MANIFEST_H
