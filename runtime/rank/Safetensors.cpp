//===- Safetensors.cpp - Reading safetensors files ------------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Safetensors.h"

#include "runtime/rank/Digest.h"

#include <nlohmann/json.hpp>

#include <climits>
#include <cstring>

using json = nlohmann::json;

namespace loom::rank {

SafetensorsHeader parseSafetensors(const unsigned char *data, int64_t size,
                                   const std::string &p) {
  if (size < 8)
    throw Error("checkpoint " + p + " is truncated: " + std::to_string(size) +
                " bytes, not even a safetensors header length");
  uint64_t headerLen;
  std::memcpy(&headerLen, data, 8);
  if (headerLen > uint64_t(size - 8))
    throw Error("checkpoint " + p + " is truncated or not a safetensors "
                "file: the header claims " + std::to_string(headerLen) +
                " bytes but the file has " + std::to_string(size));
  json header;
  try {
    header = json::parse(data + 8, data + 8 + headerLen);
  } catch (const json::exception &) { // also a number out of range
    throw Error("checkpoint " + p + " is not a safetensors file: its header "
                "is not JSON");
  }
  if (!header.is_object())
    throw Error("checkpoint " + p + ": the safetensors header is not a JSON "
                "object");
  SafetensorsHeader out;
  out.dataStart = 8 + int64_t(headerLen);
  for (auto it = header.begin(); it != header.end(); ++it) {
    const json &v = it.value();
    if (it.key() == "__metadata__") {
      if (v.is_object())
        for (auto m = v.begin(); m != v.end(); ++m)
          if (m.value().is_string())
            out.metadata[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string &why) {
      return Error("checkpoint " + p + ": tensor \"" + it.key() + "\" " + why);
    };
    if (!v.is_object() || !v.contains("dtype") || !v["dtype"].is_string() ||
        !v.contains("shape") || !v["shape"].is_array() ||
        !v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2)
      throw bad("has a malformed header entry");
    SafetensorsTensor t;
    t.dtypeName = v["dtype"].get<std::string>();
    for (const json &d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        throw bad("has a malformed shape");
      t.shape.push_back(d.get<int64_t>());
    }
    const json &off = v["data_offsets"];
    if (!off[0].is_number_integer() || !off[1].is_number_integer() ||
        off[0].get<int64_t>() < 0 || off[1].get<int64_t>() < off[0].get<int64_t>())
      throw bad("has malformed data_offsets");
    // Offsets come from the file: compared before dataStart is added.
    int64_t end = off[1].get<int64_t>();
    if (end > size - out.dataStart)
      throw Error("checkpoint " + p + " is truncated: tensor \"" + it.key() +
                  "\" ends at byte " +
                  std::to_string(uint64_t(out.dataStart) + uint64_t(end)) +
                  " but the file has " + std::to_string(size) + " bytes");
    t.begin = out.dataStart + off[0].get<int64_t>();
    t.end = out.dataStart + end;
    if (auto dt = parseSafetensorsDType(t.dtypeName)) {
      int64_t bytes = t.end - t.begin, w = dtypeBytes(*dt);
      std::optional<int64_t> n = checkedNumElements(t.shape);
      bool fits = n && *n <= INT64_MAX / w;
      if (!fits || *n * w != bytes)
        throw bad("has " + std::to_string(bytes) + " bytes, but " +
                  t.dtypeName + " " + shapeString(t.shape) + " needs " +
                  (fits ? std::to_string(*n * w) : "more than 2^63"));
    }
    out.tensors[it.key()] = std::move(t);
  }
  return out;
}

SafetensorsFile::SafetensorsFile(const std::string &path)
    : file(path, "checkpoint"),
      header(parseSafetensors(file.data(), file.size(), path)) {}

uint64_t SafetensorsFile::dataDigest() const {
  Fnv1a64 hash;
  hash.update(file.data() + header.dataStart, file.size() - header.dataStart);
  return hash.value();
}

} // namespace loom::rank
