//===- CheckpointTest.cpp - Safetensors with fused, transposed HF tensors -===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Shards of one plan are written, then read back into other plans; the file
// itself is checked against the HF layout element by element, and damaged
// files must give clear errors.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TempDir.h"
#include "test/Unit/Rank/TestManifests.h"

#include "runtime/rank/Checkpoint.h"
#include "runtime/rank/Layout.h"
#include "runtime/rank/ParamInit.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>

using namespace loom::rank;
using loom::rank::testing::fusedQkvManifest;
using loom::rank::testing::TempDir;
using json = nlohmann::json;

namespace {

/// Every rank's shards of a plan, in one process.
struct Plan {
  Manifest m;
  std::vector<std::map<std::string, std::vector<unsigned char>>> shards;

  Plan(int tp, uint64_t seed, const std::string &dtype = "f32")
      : Plan(parseManifest(fusedQkvManifest(tp, dtype).dump(), "m.json"), tp,
             seed) {}
  Plan(Manifest manifest, int ranks, uint64_t seed)
      : m(std::move(manifest)), shards(ranks) {
    for (const ParamSpec &p : m.params)
      for (const Shard &s : p.shards) {
        auto &buf = shards[s.rank][p.name];
        buf.resize(numElements(s.box.shape) * dtypeBytes(p.dtype));
        if (seed)
          initializeBox(p, s.box, seed, buf.data());
      }
  }
  /// The writer's fetcher: reads the owner's buffer instead of receiving.
  ShardFetcher fetcher() {
    return [this](const ParamSpec &p, const Shard &s, void *out) {
      const auto &buf = shards[s.rank].at(p.name);
      std::memcpy(out, buf.data(), buf.size());
    };
  }
  void load(const std::string &path,
            std::optional<uint64_t> paddingSeed = std::nullopt) {
    for (size_t r = 0; r < shards.size(); ++r) {
      std::map<std::string, void *> ptrs;
      for (auto &[name, buf] : shards[r])
        ptrs[name] = buf.data();
      loadCheckpoint(path, m, int32_t(r), ptrs, paddingSeed);
    }
  }
};

std::string slurp(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string errorOf(const std::function<void()> &fn) {
  try {
    fn();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

TEST(Checkpoint, FusedTransposedLayout) {
  TempDir dir;
  Plan tp2(2, 11);
  std::string path = dir.path("ckpt.safetensors");
  writeCheckpoint(path, tp2.m, tp2.fetcher(), {{"format", "pt"}});
  EXPECT_FALSE(fileExists(path + ".tmp"));

  // Read the file with nothing but the format's definition.
  std::string bytes = slurp(path);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  json header = json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  json cattn = header["h.0.attn.c_attn.weight"];
  EXPECT_EQ(cattn["dtype"], "F32");
  EXPECT_EQ(cattn["shape"], json({6, 12}));
  const float *w = reinterpret_cast<const float *>(
      bytes.data() + 8 + n + cattn["data_offsets"][0].get<int64_t>());
  EXPECT_EQ(bytes.size(), 8 + n + header["wte.weight"]["data_offsets"][1]
                                      .get<size_t>());

  // c_attn[i, j*4 + o] is weight (q, k, v)[j] at [o, i]: compare with the
  // global tensors initialized directly.
  const char *names[] = {"attn.q.weight", "attn.k.weight", "attn.v.weight"};
  for (int j = 0; j < 3; ++j) {
    const ParamSpec &p = *tp2.m.findParam(names[j]);
    std::vector<float> global(24);
    initializeBox(p, {{0, 0}, {4, 6}}, 11, global.data());
    for (int o = 0; o < 4; ++o)
      for (int i = 0; i < 6; ++i)
        ASSERT_EQ(w[i * 12 + j * 4 + o], global[o * 6 + i])
            << names[j] << " [" << o << ", " << i << "]";
  }
  json bias = header["h.0.attn.c_attn.bias"];
  const float *b = reinterpret_cast<const float *>(
      bytes.data() + 8 + n + bias["data_offsets"][0].get<int64_t>());
  std::vector<float> kBias(4);
  const ParamSpec &kb = *tp2.m.findParam("attn.k.bias");
  initializeBox(kb, {{0}, {4}}, 11, kBias.data());
  for (int o = 0; o < 4; ++o)
    EXPECT_EQ(b[4 + o], kBias[o]);
}

TEST(Checkpoint, RoundTripAcrossPlans) {
  TempDir dir;
  Plan tp2(2, 5);
  std::string path = dir.path("a.safetensors");
  writeCheckpoint(path, tp2.m, tp2.fetcher(), {});
  // Loaded into tp 1 and tp 4, the shards equal those initialized directly,
  // and saving again gives the same bytes.
  for (int tp : {1, 4}) {
    Plan loaded(tp, 0), direct(tp, 5);
    loaded.load(path);
    EXPECT_EQ(loaded.shards, direct.shards) << "tp " << tp;
    std::string again = dir.path("b.safetensors");
    writeCheckpoint(again, loaded.m, loaded.fetcher(), {});
    EXPECT_EQ(slurp(again), slurp(path)) << "tp " << tp;
  }
}

TEST(Checkpoint, LowPrecisionFilesAndConversion) {
  TempDir dir;
  Plan bf(2, 9, "bf16");
  std::string path = dir.path("bf16.safetensors");
  writeCheckpoint(path, bf.m, bf.fetcher(), {});
  SafetensorsFile f(path);
  EXPECT_EQ(f.tensors().at("wte.weight").dtypeName, "BF16");
  Plan back(1, 0, "bf16"), direct(1, 9, "bf16");
  back.load(path);
  EXPECT_EQ(back.shards, direct.shards);
  // A bf16 checkpoint loads into an f32 plan as the widened values.
  Plan wide(1, 0, "f32");
  wide.load(path);
  const auto &src = direct.shards[0].at("wte.weight");
  std::vector<float> expect(60);
  loomrt_cast(LOOMRT_BF16, src.data(), LOOMRT_F32, expect.data(), 60);
  EXPECT_EQ(std::memcmp(wide.shards[0].at("wte.weight").data(), expect.data(),
                        240),
            0);
}

TEST(Checkpoint, BadFiles) {
  TempDir dir;
  Plan p(1, 3);
  std::string good = dir.path("good.safetensors");
  writeCheckpoint(good, p.m, p.fetcher(), {});
  std::string bytes = slurp(good);
  uint64_t n;
  std::memcpy(&n, bytes.data(), 8);

  EXPECT_EQ(errorOf([&] { p.load(dir.path("missing.safetensors")); }),
            "cannot open checkpoint " + dir.path("missing.safetensors") +
                ": No such file or directory");

  std::string cut = dir.write("cut.safetensors", bytes.data(), bytes.size() - 4);
  EXPECT_EQ(errorOf([&] { p.load(cut); }),
            "checkpoint " + cut + " is truncated: tensor \"wte.weight\" ends at "
            "byte " + std::to_string(bytes.size()) + " but the file has " +
            std::to_string(bytes.size() - 4) + " bytes");

  std::string tiny = dir.write("tiny.safetensors", bytes.data(), 5);
  EXPECT_EQ(errorOf([&] { p.load(tiny); }),
            "checkpoint " + tiny + " is truncated: 5 bytes, not even a "
            "safetensors header length");

  std::string text = dir.write("text.safetensors", "hello world, not a file", 23);
  EXPECT_NE(errorOf([&] { p.load(text); }).find("is truncated or not a "
                                                "safetensors file"),
            std::string::npos);

  // Same file with a tensor renamed, reshaped or retyped in the header
  // (names and shapes keep their lengths so the offsets stay valid).
  auto patched = [&](const std::string &from, const std::string &to) {
    std::string b = bytes;
    size_t at = b.find(from, 8);
    EXPECT_NE(at, std::string::npos) << from;
    b.replace(at, from.size(), to);
    return dir.write("patched.safetensors", b.data(), b.size());
  };
  std::string renamed = patched("\"ln_f.weight\"", "\"ln_x.weight\"");
  EXPECT_EQ(errorOf([&] { p.load(renamed); }),
            "checkpoint " + renamed + " has no tensor \"ln_f.weight\"");
  std::string i32 = patched("\"dtype\":\"F32\",\"shape\":[6]",
                            "\"dtype\":\"I32\",\"shape\":[6]");
  EXPECT_EQ(errorOf([&] { p.load(i32); }),
            "checkpoint " + i32 + ": tensor \"ln_f.weight\" has dtype I32, "
            "expected F32, BF16 or F16");
  std::string reshaped = patched("\"shape\":[10,6]", "\"shape\":[6,10]");
  EXPECT_EQ(errorOf([&] { p.load(reshaped); }),
            "checkpoint " + reshaped + ": tensor \"wte.weight\" has shape "
            "[6, 10], expected [10, 6]");
  std::string sized = patched("\"shape\":[10,6]", "\"shape\":[10,5]");
  EXPECT_NE(errorOf([&] { p.load(sized); }).find("has 240 bytes, but F32 "
                                                 "[10, 5] needs 200"),
            std::string::npos);
}

/// fusedQkvManifest(tp) whose wte.weight [rows, 6] is split on its rows
/// over the tp ranks and, with fileRows, is a padded vocabulary of which
/// Hugging Face files hold fileRows rows.
Manifest paddedManifest(int tp, int rows, int fileRows) {
  json j = fusedQkvManifest(tp);
  json &wte = j["params"][6];
  EXPECT_EQ(wte["name"], "wte.weight");
  wte["shape"] = {rows, 6};
  json shards = json::array();
  for (int r = 0; r < tp; ++r)
    shards.push_back({{"rank", r},
                      {"offset", {r * rows / tp, 0}},
                      {"shape", {rows / tp, 6}}});
  wte["shards"] = shards;
  if (fileRows)
    wte["hf"] = {{"name", "wte.weight"},
                 {"shape", {rows, 6}},
                 {"file_rows", fileRows}};
  return parseManifest(j.dump(), "m.json");
}

TEST(Checkpoint, PaddedVocabularyRows) {
  TempDir dir;
  // 12 rows, 10 in the file: tp rank 1's rows 6..12 straddle the border.
  Plan tp2(paddedManifest(2, 12, 10), 2, 5);
  std::string path = dir.path("padded.safetensors");
  writeCheckpoint(path, tp2.m, tp2.fetcher(), {});
  SafetensorsFile file(path);
  EXPECT_EQ(file.tensors().at("wte.weight").shape, (Shape{10, 6}));
  EXPECT_EQ(file.tensors().at("wte.weight.vocab_padding").shape,
            (Shape{2, 6}));
  const ParamSpec &wte = *tp2.m.findParam("wte.weight");
  std::vector<float> global(72);
  initializeBox(wte, {{0, 0}, {12, 6}}, 5, global.data());
  auto rowsOf = [&](const std::string &name) {
    const SafetensorsFile::Tensor &t = file.tensors().at(name);
    const float *f = reinterpret_cast<const float *>(file.data() + t.begin);
    return std::vector<float>(f, f + (t.end - t.begin) / 4);
  };
  std::vector<float> main = rowsOf("wte.weight"),
                     padding = rowsOf("wte.weight.vocab_padding");
  EXPECT_EQ(main, std::vector<float>(global.begin(), global.begin() + 60));
  EXPECT_EQ(padding, std::vector<float>(global.begin() + 60, global.end()));

  // Into one rank holding all 12 rows.
  Plan tp1(paddedManifest(1, 12, 10), 1, 0);
  tp1.load(path);
  EXPECT_EQ(std::memcmp(tp1.shards[0]["wte.weight"].data(), global.data(), 288),
            0);

  // A Hugging Face file (no padding rows): with a seed they start as a
  // fresh run's, without one the file is refused.
  Plan unpadded(paddedManifest(1, 10, 0), 1, 0);
  unpadded.load(path);
  std::string hf = dir.path("hf.safetensors");
  writeCheckpoint(hf, unpadded.m, unpadded.fetcher(), {});
  Plan fromHf(paddedManifest(2, 12, 10), 2, 0);
  EXPECT_EQ(errorOf([&] { fromHf.load(hf); }),
            "checkpoint " + hf + " has no tensor \"wte.weight.vocab_padding\" "
            "(the padding rows of the vocabulary)");
  fromHf.load(hf, 5);
  for (int r = 0; r < 2; ++r)
    EXPECT_EQ(fromHf.shards[r]["wte.weight"], tp2.shards[r]["wte.weight"]);
}

TEST(Checkpoint, UnwritableDestination) {
  Plan p(1, 3);
  EXPECT_EQ(errorOf([&] {
              writeCheckpoint("/nonexistent-dir/x.safetensors", p.m,
                              p.fetcher(), {});
            }),
            "cannot create checkpoint file /nonexistent-dir/x.safetensors.tmp: "
            "No such file or directory");
}

} // namespace
