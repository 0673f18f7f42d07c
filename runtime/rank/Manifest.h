//===- Manifest.h - The compiled program's manifest.json --------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The manifest as the rank program reads it: parsed by the one parser of
// runtime/manifest (whose types these are), then validated as a whole, so
// that every later stage (initialization, data, the step loop, checkpoints)
// can rely on shards lying inside their parameters, on Hugging Face tensors
// being covered exactly by their pieces and on groups naming existing
// ranks.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_MANIFEST_H
#define LOOM_RUNTIME_RANK_MANIFEST_H

#include "runtime/manifest/Manifest.h"
#include "runtime/rank/Error.h"

#include "loomrt/loomrt.h"

#include <optional>
#include <string>
#include <vector>

namespace loom::rank {

// The schema's types and helpers (runtime/manifest/Manifest.h).
using manifest::ArgKind;
using manifest::Box;
using manifest::checkedNumElements;
using manifest::Entry;
using manifest::EntryArg;
using manifest::HfPlacement;
using manifest::HfTensor;
using manifest::InitKind;
using manifest::Manifest;
using manifest::manifestDTypeName;
using manifest::numElements;
using manifest::ParamSpec;
using manifest::parseManifestDType;
using manifest::RankInfo;
using manifest::Shape;
using manifest::shapeString;
using manifest::Shard;

/// "F32" / "BF16" / "F16" (safetensors spelling).
std::optional<loomrt_dtype> parseSafetensorsDType(const std::string &name);
const char *safetensorsDTypeName(loomrt_dtype dtype);
int64_t dtypeBytes(loomrt_dtype dtype);

/// Parses (manifest::parse) and validates manifest text, and fills the
/// derived fields; `what` names the source in errors ("out/manifest.json").
/// Throws Error.
Manifest parseManifest(const std::string &text, const std::string &what);
/// Reads and parses a manifest file. Throws Error.
Manifest readManifest(const std::string &path);

/// Throws Error unless the boxes tile a tensor of `shape` exactly (every
/// element in exactly one box). `what` prefixes the message.
void checkTiling(const std::vector<Box> &boxes, const Shape &shape,
                 const std::string &what);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_MANIFEST_H
