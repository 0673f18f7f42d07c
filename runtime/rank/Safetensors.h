//===- Safetensors.h - Reading safetensors files ----------------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// safetensors: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, ...,
//    "__metadata__": {"format": "pt", ...}}
// (padded with spaces to a multiple of 8), then the tensor bytes; offsets
// are relative to the end of the header.
//
// The header is parsed from memory (parseSafetensors), so a fuzzer can feed
// it bytes; SafetensorsFile maps a file and parses it.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_RANK_SAFETENSORS_H
#define LOOM_RUNTIME_RANK_SAFETENSORS_H

#include "runtime/rank/Manifest.h"
#include "runtime/rank/MappedFile.h"

#include <cstdint>
#include <map>
#include <string>

namespace loom::rank {

/// One tensor of a safetensors header.
struct SafetensorsTensor {
  std::string dtypeName; // as written, e.g. "F32" or "I64"
  Shape shape;
  int64_t begin = 0, end = 0; // absolute file offsets
};

/// A structurally validated safetensors header: every tensor lies inside
/// the file, and one of a known dtype has exactly the bytes its shape needs.
struct SafetensorsHeader {
  int64_t dataStart = 0; // file offset of the tensor data
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata; // string values only
};

/// Parses the safetensors file of `size` bytes at `data`; `path` names it
/// in errors. Throws Error for a bad header or a file shorter than its
/// header says.
SafetensorsHeader parseSafetensors(const unsigned char *data, int64_t size,
                                   const std::string &path);

/// A mapped, parsed and structurally validated safetensors file.
class SafetensorsFile {
public:
  using Tensor = SafetensorsTensor;

  /// Throws Error for a missing file, a bad header or a file shorter than
  /// its header says.
  explicit SafetensorsFile(const std::string &path);

  const std::map<std::string, Tensor> &tensors() const {
    return header.tensors;
  }
  const std::map<std::string, std::string> &metadata() const {
    return header.metadata;
  }
  const unsigned char *data() const { return file.data(); }
  const std::string &path() const { return file.path(); }
  /// The digest of everything after the header (the tensor data), the value
  /// StagedFile::digest had when the file was written.
  uint64_t dataDigest() const;

private:
  MappedFile file;
  SafetensorsHeader header;
};

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_SAFETENSORS_H
