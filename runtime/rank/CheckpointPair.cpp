//===- CheckpointPair.cpp - Model and optimizer files of one save ---------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/CheckpointPair.h"

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/Digest.h"
#include "runtime/rank/Error.h"
#include "runtime/rank/MappedFile.h"
#include "runtime/rank/Optimizer.h"

namespace loom::rank {

std::string modelDigestStamp(uint64_t digest) { return digestText(digest); }

namespace {

/// "iteration N" of an optimizer file, from its training state.
std::string iterationOf(const SafetensorsFile &optimizer) {
  auto it = optimizer.metadata().find("loom.train_state");
  if (it == optimizer.metadata().end())
    return "an unknown iteration";
  return "iteration " +
         std::to_string(TrainState::fromJson(it->second, "optimizer state " +
                                                             optimizer.path())
                            .iteration);
}

/// Whether `path` is a complete safetensors file whose data has `digest`.
bool hasDigest(const std::string &path, const std::string &digest) {
  if (!fileExists(path))
    return false;
  try {
    return digestText(SafetensorsFile(path).dataDigest()) == digest;
  } catch (const Error &) {
    return false; // a partial .tmp: that save never reached its renames
  }
}

} // namespace

std::optional<std::string> settleCheckpointPair(const std::string &model,
                                                const std::string &optimizer) {
  if (!fileExists(optimizer))
    return std::nullopt;
  SafetensorsFile optimizerFile(optimizer);
  // Not a Loom optimizer file at all: loading it says so.
  if (!optimizerFile.metadata().count("loom.train_state"))
    return std::nullopt;
  auto recorded = optimizerFile.metadata().find(kModelDigestKey);
  if (recorded == optimizerFile.metadata().end())
    throw Error("optimizer state " + optimizer + " (" +
                iterationOf(optimizerFile) +
                ") does not record which model file it was saved with; "
                "refusing to pair it with " +
                model);
  const std::string &digest = recorded->second;
  if (hasDigest(model, digest))
    return std::nullopt; // one save
  const std::string partner = model + ".tmp";
  if (hasDigest(partner, digest)) {
    // The save stopped between its renames: finish it.
    publish({partner, model, 0});
    return "loom: completed the interrupted save of " +
           iterationOf(optimizerFile) + ": renamed " + partner + " to " + model;
  }
  throw Error("checkpoint " + model + " and optimizer state " + optimizer +
              " come from different saves: the optimizer state of " +
              iterationOf(optimizerFile) +
              " was saved with another model file; refusing to resume from "
              "a mixed pair");
}

} // namespace loom::rank
