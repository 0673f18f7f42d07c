//===- SafetensorsTest.cpp - parseSafetensors on malformed headers --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Headers that fuzz/SafetensorsFuzzer.cpp found to escape the reader's
// checks, each now a clear Error. (Whole files and the checks against a
// manifest are in CheckpointTest.cpp.)
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/Safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

using namespace loom::rank;

namespace {

/// A safetensors file: the length of `header`, `header`, then `data`.
std::string file(const std::string &header, const std::string &data = "") {
  uint64_t n = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &n, 8);
  return bytes + header + data;
}

/// The message parseSafetensors throws for `bytes`, or "" if it parses.
std::string errorOf(const std::string &bytes) {
  try {
    parseSafetensors(reinterpret_cast<const unsigned char *>(bytes.data()),
                     int64_t(bytes.size()), "f.safetensors");
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST(Safetensors, ParsesFromMemory) {
  std::string bytes =
      file("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"__metadata__\":{\"format\":\"pt\"}}",
           std::string(8, '\0'));
  SafetensorsHeader h =
      parseSafetensors(reinterpret_cast<const unsigned char *>(bytes.data()),
                       int64_t(bytes.size()), "f.safetensors");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors.at("a").begin, h.dataStart);
  EXPECT_EQ(h.tensors.at("a").end, h.dataStart + 8);
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

// Offsets and shapes at the edges of int64: the bounds checks overflowed
// (undefined behavior) before they could reject them.
TEST(Safetensors, IntegersAtTheEdges) {
  std::string far = file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],"
                         "\"data_offsets\":[9223372036854775800,"
                         "9223372036854775804]}}");
  EXPECT_EQ(errorOf(far),
            "checkpoint f.safetensors is truncated: tensor \"a\" ends at byte "
            "9223372036854775902 but the file has 98 bytes");
  std::string huge = file("{\"a\":{\"dtype\":\"F32\",\"shape\":"
                          "[4611686018427387904,4],\"data_offsets\":[0,0]}}");
  EXPECT_EQ(errorOf(huge),
            "checkpoint f.safetensors: tensor \"a\" has 0 bytes, but F32 "
            "[4611686018427387904, 4] needs more than 2^63");
  std::string wide = file("{\"a\":{\"dtype\":\"BF16\",\"shape\":"
                          "[4611686018427387904],\"data_offsets\":[0,0]}}");
  EXPECT_EQ(errorOf(wide),
            "checkpoint f.safetensors: tensor \"a\" has 0 bytes, but BF16 "
            "[4611686018427387904] needs more than 2^63");
}

// nlohmann throws out_of_range, not parse_error, for a number too large for
// a double; it escaped the reader.
TEST(Safetensors, NumberOutOfRange) {
  EXPECT_EQ(errorOf(file("{\"a\":777e777}")),
            "checkpoint f.safetensors is not a safetensors file: its header "
            "is not JSON");
}
