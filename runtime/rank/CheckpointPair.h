//===- CheckpointPair.h - Model and optimizer files of one save -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// `--save CKPT` with --train writes two files, CKPT and its optimizer state
// (optimizerStatePath). Two renames cannot be atomic together, so a save
// is made recoverable instead:
//   1. both files are written completely to their .tmp names and fsynced;
//   2. the optimizer file is renamed into place, then the model file.
// The optimizer file records the digest of its model file's tensor data
// ("loom.model" metadata); the model file stays a plain Hugging Face file
// whose bytes depend on the parameters alone. At any moment one complete
// pair exists on disk: the previous one (before the first rename) or the
// new one (the optimizer state in place, its model in place or still at its
// .tmp name). settleCheckpointPair finds it before a --load.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_CHECKPOINTPAIR_H
#define LOOM_RUNTIME_RANK_CHECKPOINTPAIR_H

#include <cstdint>
#include <optional>
#include <string>

namespace loom::rank {

/// The optimizer file's metadata key for its model file's digest.
inline constexpr const char *kModelDigestKey = "loom.model";

/// The value of kModelDigestKey for a model file whose data has `digest`.
std::string modelDigestStamp(uint64_t digest);

/// Before a --load with --train: makes `model` and `optimizer` the two
/// files of one save. When a save stopped between its two renames, the
/// model file's complete partner waits at model + ".tmp": it is renamed
/// into place (the save completes) and a line saying so returned. No
/// optimizer file at all is fine (a model-only checkpoint: the optimizer
/// starts from zero). Throws Error naming both files and the optimizer
/// state's iteration when they come from different saves. Runs on one
/// rank, before any rank reads either file.
std::optional<std::string> settleCheckpointPair(const std::string &model,
                                                const std::string &optimizer);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_CHECKPOINTPAIR_H
