//===- Checkpoint.h - Safetensors checkpoints with HF names -----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// A checkpoint is ONE safetensors file holding the full, unsharded model
// under Hugging Face names and layouts (manifest "hf" entries): GPT-2's q, k
// and v become the fused, transposed c_attn, whatever the plan. Saving
// assembles every HF tensor from the distinct shards of its parameters;
// loading cuts any plan's shards out of the file.
//
// The file format and its reader are in Safetensors.h.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_CHECKPOINT_H
#define LOOM_RUNTIME_RANK_CHECKPOINT_H

#include "runtime/rank/Digest.h"
#include "runtime/rank/Manifest.h"
#include "runtime/rank/Safetensors.h"

#include <functional>
#include <optional>
#include <map>

namespace loom::rank {

/// Calls fn(tensor, param, shard) for every distinct shard of every piece of
/// every HF tensor, in the order a checkpoint is written. The writer and
/// the ranks that send it shards walk this same order.
void forEachCheckpointPiece(
    const Manifest &m,
    const std::function<void(const HfTensor &, const ParamSpec &,
                             const Shard &)> &fn);

/// Produces the contents of one shard (a contiguous box in the param's
/// dtype) for the writer: a local copy or a receive from its owner.
using ShardFetcher =
    std::function<void(const ParamSpec &, const Shard &, void *out)>;

/// A complete, fsynced file at `tmp` that is not yet visible at `path`.
/// `digest` is the digest of its tensor data (dataDigest of the file).
struct StagedFile {
  std::string tmp, path;
  uint64_t digest = 0;
};

/// Writes the checkpoint of `m` to path.tmp and fsyncs it; publish() makes
/// it `path`. `metadata` lands in "__metadata__". Throws Error on I/O
/// failures.
StagedFile stageCheckpoint(const std::string &path, const Manifest &m,
                           const ShardFetcher &fetch,
                           const std::map<std::string, std::string> &metadata);

/// Renames a staged file over its path, durably (fsync of the directory).
void publish(const StagedFile &file);

/// stageCheckpoint, then publish: `path` is replaced atomically.
void writeCheckpoint(const std::string &path, const Manifest &m,
                     const ShardFetcher &fetch,
                     const std::map<std::string, std::string> &metadata);

/// One contiguous tensor of a plain safetensors file.
struct NamedTensor {
  std::string name;
  loomrt_dtype dtype = LOOMRT_F32;
  Shape shape;
  const void *data = nullptr; // backend memory (loomrt_alloc)
};

/// Writes `tensors`, in this order, to `path` atomically (path.tmp,
/// fsync, rename, fsync of the directory). Throws Error.
void writeSafetensors(const std::string &path,
                      const std::vector<NamedTensor> &tensors,
                      const std::map<std::string, std::string> &metadata);

/// fsync of a directory: makes renames and creations in it durable.
void syncDirectory(const std::string &dir);

/// The layout of a file of per-parameter state (optimizer moments, f32 main
/// parameters, gradients) in the checkpoint format: for each prefix, every
/// parameter of `m` again, named prefix + name and placed in HF tensor
/// prefix + hf.name, with dtype `dtype`. Parameter k of the result is
/// parameter k % n of `m` under prefixes[k / n] (n = m.params.size()), so
/// writeCheckpoint and loadCheckpoint work on it unchanged.
Manifest stateLayout(const Manifest &m, const std::vector<std::string> &prefixes,
                     loomrt_dtype dtype);

/// Fills this rank's shards from a checkpoint. `buffers` maps a parameter
/// name to the rank's shard buffer (param dtype); parameters the rank does
/// not hold are absent. Checks every HF tensor's presence, shape and dtype
/// first (F32/BF16/F16 are converted to the parameter's dtype). A padded
/// tensor's padding rows come from HfTensor::paddingName(); a file without
/// them (a Hugging Face checkpoint) is an error unless `paddingSeed` is
/// given, with which they are initialized as a fresh run with that seed
/// would. Throws Error.
void loadCheckpoint(const std::string &path, const Manifest &m, int32_t rank,
                    const std::map<std::string, void *> &buffers,
                    std::optional<uint64_t> paddingSeed = std::nullopt);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_CHECKPOINT_H
