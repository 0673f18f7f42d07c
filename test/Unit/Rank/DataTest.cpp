//===- DataTest.cpp - Token files, samples and micro-batches --------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TempDir.h"

#include "runtime/rank/Data.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

using namespace loom::rank;
using loom::rank::testing::TempDir;

namespace {

/// Writes prefix.bin/.idx in Megatron's MMIDIDX format, one sequence per
/// document, with tokens stored as T (dtype code `code`).
template <typename T>
std::string writeIndexed(const TempDir &dir, const std::string &name,
                         const std::vector<std::vector<int64_t>> &docs,
                         uint8_t code) {
  std::string bin, idx;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers;
  for (const auto &doc : docs) {
    pointers.push_back(int64_t(bin.size()));
    sizes.push_back(int32_t(doc.size()));
    for (int64_t t : doc) {
      T v = T(t);
      bin.append(reinterpret_cast<const char *>(&v), sizeof(T));
    }
  }
  auto put = [&](const void *p, size_t n) {
    idx.append(static_cast<const char *>(p), n);
  };
  put("MMIDIDX\0\0", 9);
  uint64_t version = 1, n = docs.size(), ndocs = docs.size() + 1;
  put(&version, 8);
  put(&code, 1);
  put(&n, 8);
  put(&ndocs, 8);
  put(sizes.data(), 4 * sizes.size());
  put(pointers.data(), 8 * pointers.size());
  for (uint64_t i = 0; i < ndocs; ++i) {
    int64_t d = int64_t(i);
    put(&d, 8);
  }
  dir.write(name + ".bin", bin.data(), bin.size());
  dir.write(name + ".idx", idx.data(), idx.size());
  return dir.path(name);
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(Data, IndexedDatasetIsOneStream) {
  TempDir dir;
  // Three documents of uint16 ids; 0 is the EOD token ending each.
  std::string prefix = writeIndexed<uint16_t>(
      dir, "corpus", {{5, 6, 7, 0}, {8, 9, 0}, {10, 11, 12, 13, 0}}, 8);
  for (std::string given : {prefix, prefix + ".bin", prefix + ".idx"}) {
    auto s = openTokenStream(given, std::nullopt);
    ASSERT_EQ(s->size(), 12);
    std::vector<int64_t> all(12);
    s->read(0, 12, all.data());
    EXPECT_EQ(all, (std::vector<int64_t>{5, 6, 7, 0, 8, 9, 0, 10, 11, 12, 13, 0}));
    std::vector<int64_t> mid(4);
    s->read(2, 4, mid.data()); // crosses a document boundary
    EXPECT_EQ(mid, (std::vector<int64_t>{7, 0, 8, 9}));
  }
}

TEST(Data, SamplesOverlapByOneAndMaskEod) {
  TempDir dir;
  std::string prefix = writeIndexed<int32_t>(
      dir, "c", {{5, 6, 7, 0}, {8, 9, 0}, {10, 11, 12, 13, 0}}, 4);
  auto s = openTokenStream(prefix, std::nullopt);
  // B = 1, S = 3: sample k = stream[3k .. 3k+3].
  BatchReader r(*s, 1, 3, 1, 16, int64_t(0), {{0, 3}});
  EXPECT_EQ(r.numSamples(), 3); // (12 - 1) / 3
  MicroBatch mb;
  r.read(1, 0, 0, 1, mb); // sample 1 = tokens 3..6 = 0 8 9 0
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{0, 8, 9}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{8, 9, 0}));
  EXPECT_EQ(mb.lossMask, (std::vector<float>{0, 1, 1}));
  // Step 3 is past the three samples: it wraps around to sample 0.
  r.read(3, 0, 0, 1, mb);
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{5, 6, 7}));
}

TEST(Data, DataParallelAndMicroBatchOrder) {
  TempDir dir;
  std::vector<int32_t> ids(200);
  for (int i = 0; i < 200; ++i)
    ids[i] = i % 50;
  std::string path = dir.write("raw.i32", ids.data(), ids.size() * 4);
  auto s = openTokenStream(path, RawFormat::Int32);
  // B = 2, S = 4, 3 micro-batches, dp = 2.
  BatchReader r(*s, 2, 4, 3, 50, std::nullopt, {{0, 4}});
  EXPECT_EQ(r.firstSample(0, 0, 0, 2), 0);
  EXPECT_EQ(r.firstSample(0, 0, 1, 2), 2);
  EXPECT_EQ(r.firstSample(0, 1, 0, 2), 4);
  EXPECT_EQ(r.firstSample(1, 2, 1, 2), ((1 * 3 + 2) * 2 + 1) * 2);
  MicroBatch mb;
  r.read(0, 1, 1, 2, mb); // samples 6 and 7: tokens 24.. and 28..
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{24, 25, 26, 27, 28, 29, 30, 31}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{25, 26, 27, 28, 29, 30, 31, 32}));
  EXPECT_EQ(mb.lossMask, std::vector<float>(8, 1.0f));
}

/// A raw uint16 stream of the tokens 0, 1, ..., 63 in `dir`.
std::unique_ptr<TokenStream> countingStream(const TempDir &dir) {
  std::vector<uint16_t> ids(64);
  for (int i = 0; i < 64; ++i)
    ids[i] = uint16_t(i);
  return openTokenStream(dir.write("raw.u16", ids.data(), 128),
                         RawFormat::UInt16);
}

TEST(Data, SequenceRangesCutTheLocalChunks) {
  TempDir dir;
  auto s = countingStream(dir);
  // Context-parallel rank 0 of 2 with load balancing: chunks 0 and 3 of 4.
  BatchReader r(*s, 1, 8, 1, 64, std::nullopt, {{0, 2}, {6, 8}});
  MicroBatch mb;
  r.read(1, 0, 0, 1, mb); // sample 1 = tokens 8..16
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{8, 9, 14, 15}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{9, 10, 15, 16}));
}

TEST(Data, PositionsPastTheSequenceArePadding) {
  TempDir dir;
  auto s = countingStream(dir);
  // S = 7 padded to 8 for cp 2: rank 1 holds chunks 1 and 2 of 4, [2, 6);
  // rank 0 chunks 0 and 3, [0, 2) and [6, 8), where 7 is padding.
  BatchReader r1(*s, 1, 7, 1, 64, std::nullopt, {{2, 6}});
  BatchReader r0(*s, 1, 7, 1, 64, std::nullopt, {{0, 2}, {6, 8}});
  EXPECT_EQ(r0.numSamples(), 9); // (64 - 1) / 7: sampled at 7
  MicroBatch mb;
  r1.read(1, 0, 0, 1, mb); // sample 1 = tokens 7..14
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{9, 10, 11, 12}));
  EXPECT_EQ(mb.lossMask, std::vector<float>(4, 1.0f));
  r0.read(1, 0, 0, 1, mb);
  EXPECT_EQ(mb.tokens, (std::vector<int32_t>{7, 8, 13, 0}));
  EXPECT_EQ(mb.labels, (std::vector<int32_t>{8, 9, 14, 0}));
  EXPECT_EQ(mb.lossMask, (std::vector<float>{1, 1, 1, 0}));
}

TEST(Data, SyntheticStreamIsDeterministicAndLearnable) {
  auto a = syntheticTokenStream(1, 512), b = syntheticTokenStream(1, 512),
       c = syntheticTokenStream(2, 512);
  std::vector<int64_t> x(64), y(64), z(64);
  a->read(1000, 64, x.data());
  b->read(1000, 64, y.data());
  c->read(1000, 64, z.data());
  EXPECT_EQ(x, y);
  EXPECT_NE(x, z);
  for (int64_t t : x)
    EXPECT_TRUE(t >= 0 && t < 512);
  // Four interleaved arithmetic sequences: t[i] - t[i-4] is constant per
  // residue class (mod vocab).
  for (int i = 8; i < 64; ++i)
    EXPECT_EQ((x[i] - x[i - 4] + 512) % 512, (x[i - 4] - x[i - 8] + 512) % 512);
}

TEST(Data, Errors) {
  TempDir dir;
  EXPECT_EQ(errorOf([&] { openTokenStream(dir.path("none"), std::nullopt); }),
            "data file " + dir.path("none") + " does not exist (nor " +
                dir.path("none") + ".bin/.idx)");
  EXPECT_EQ(errorOf([&] { openTokenStream(dir.path("none"), RawFormat::Int32); }),
            "data file " + dir.path("none") + " does not exist");
  std::string odd = dir.write("odd.i32", "abcdef", 6);
  EXPECT_EQ(errorOf([&] { openTokenStream(odd, RawFormat::Int32); }),
            "data file " + odd + " is truncated: 6 bytes is not a whole number "
            "of int32 tokens");
  EXPECT_EQ(errorOf([&] { openTokenStream(odd, std::nullopt); }),
            "cannot tell the format of data file " + odd +
                ": give --data-format int32 or --data-format uint16 for a raw "
                "token file, or a Megatron .bin/.idx pair");

  // A .bin shorter than its index says.
  std::string prefix = writeIndexed<uint16_t>(dir, "t", {{1, 2, 3, 4}}, 8);
  dir.write("t.bin", "\1\0\2\0", 4);
  EXPECT_EQ(errorOf([&] { openTokenStream(prefix, std::nullopt); }),
            "data file " + prefix + ".bin is truncated: sequence 0 of " +
                prefix + ".idx needs 8 bytes from byte 0 but the file has 4");
  // Pointers and sizes from a corrupt index, found by
  // fuzz/MegatronIdxFuzzer.cpp: the old check computed pointer + bytes,
  // which overflowed (undefined behavior) for a pointer near INT64_MAX.
  auto corrupt = [&](const std::string &name, int32_t size, int64_t pointer) {
    std::string p = writeIndexed<uint16_t>(dir, name, {{1, 2}}, 8);
    std::string idx(9 + 8 + 1 + 8 + 8, '\0');
    std::memcpy(idx.data(), "MMIDIDX\0\0", 9);
    idx[9] = 1;
    idx[17] = 8;
    idx[18] = 1;
    idx[26] = 1;
    idx.append(reinterpret_cast<const char *>(&size), 4);
    idx.append(reinterpret_cast<const char *>(&pointer), 8);
    idx.append(8, '\0');
    dir.write(name + ".idx", idx.data(), idx.size());
    return p;
  };
  std::string far = corrupt("far", 2, INT64_MAX - 1);
  EXPECT_EQ(errorOf([&] { openTokenStream(far, std::nullopt); }),
            "data file " + far + ".bin is truncated: sequence 0 of " + far +
                ".idx needs 4 bytes from byte 9223372036854775806 but the "
                "file has 4");
  std::string negative = corrupt("negative", -1179372, INT64_MIN);
  EXPECT_EQ(errorOf([&] { openTokenStream(negative, std::nullopt); }),
            "data index " + negative + ".idx is corrupt: sequence 0 has size "
            "-1179372 and pointer -9223372036854775808");
  // An index cut in the middle of its arrays.
  writeIndexed<uint16_t>(dir, "u", {{1, 2}, {3, 4}}, 8);
  dir.write("u.idx", "MMIDIDX\0\0\1\0\0\0\0\0\0\0\x08\2\0\0\0\0\0\0\0\3\0\0\0\0\0\0\0",
            9 + 8 + 1 + 8 + 8);
  EXPECT_EQ(errorOf([&] { openTokenStream(dir.path("u"), std::nullopt); }),
            "data index " + dir.path("u") + ".idx is truncated: 2 sequences "
            "and 3 documents need more than its 34 bytes");
  dir.write("v.idx", "NOTANIDX", 8);
  dir.write("v.bin", "", 0);
  EXPECT_EQ(errorOf([&] { openTokenStream(dir.path("v"), std::nullopt); }),
            "data index " + dir.path("v") + ".idx is not a Megatron indexed "
            "dataset (no MMIDIDX header)");
  dir.write("w.bin", "", 0);
  EXPECT_EQ(errorOf([&] { openTokenStream(dir.path("w.bin"), std::nullopt); }),
            "data index " + dir.path("w") + ".idx does not exist (" +
                dir.path("w") + ".bin needs it)");

  // Too short for one sample, and ids outside the vocabulary.
  std::vector<int32_t> few = {1, 2, 3};
  auto s = openTokenStream(dir.write("few", few.data(), 12), RawFormat::Int32);
  EXPECT_EQ(errorOf([&] { BatchReader(*s, 1, 4, 1, 8, std::nullopt, {{0, 4}}); }),
            dir.path("few") + " has 3 tokens, fewer than one sample of "
            "seq_length + 1 = 5");
  BatchReader r(*s, 1, 2, 1, 3, std::nullopt, {{0, 2}});
  MicroBatch mb;
  EXPECT_EQ(errorOf([&] { r.read(0, 0, 0, 1, mb); }),
            "token id 3 at position 2 of " + dir.path("few") +
                " is outside the vocabulary [0, 3)");
}

} // namespace
