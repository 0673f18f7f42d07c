//===- InitTest.cpp - Plan-independent parameter initialization -----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "test/Unit/Rank/TestManifests.h"

#include "runtime/rank/Layout.h"
#include "runtime/rank/ParamInit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

using namespace loom::rank;
using loom::rank::testing::fusedQkvManifest;

namespace {

/// The global tensor of `name` assembled from the shards of a tp-way plan,
/// each initialized on its own.
std::vector<float> assembled(int tp, const std::string &name, uint64_t seed) {
  Manifest m = parseManifest(fusedQkvManifest(tp).dump(), "m.json");
  const ParamSpec &p = *m.findParam(name);
  std::vector<float> global(numElements(p.shape), NAN);
  for (int r = 0; r < tp; ++r) {
    const Shard &s = *p.shardOf(r);
    std::vector<float> local(numElements(s.box.shape));
    initializeBox(p, s.box, seed, local.data());
    StridedView dst{0, contiguousStrides(p.shape)};
    for (size_t d = 0; d < p.shape.size(); ++d)
      dst.base += s.box.offset[d] * dst.strides[d];
    copyStrided(s.box.shape, 4, local.data(), {0, contiguousStrides(s.box.shape)},
                global.data(), dst);
  }
  return global;
}

TEST(Init, SameGlobalTensorsWhateverTheSharding) {
  for (const char *name : {"attn.q.weight", "attn.k.bias", "wte.weight"}) {
    std::vector<float> one = assembled(1, name, 7);
    for (int tp : {2, 4}) {
      std::vector<float> many = assembled(tp, name, 7);
      ASSERT_EQ(one.size(), many.size());
      EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * 4), 0)
          << name << " differs between tp 1 and tp " << tp;
    }
  }
}

TEST(Init, SeedAndNameSelectTheStream) {
  std::vector<float> a = assembled(1, "attn.q.weight", 1);
  std::vector<float> b = assembled(1, "attn.q.weight", 2);
  std::vector<float> c = assembled(1, "attn.k.weight", 1);
  EXPECT_NE(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(a, assembled(1, "attn.q.weight", 1));
}

TEST(Init, NormalStatistics) {
  // 2^16 draws of N(0, 0.02^2): mean and std within a few standard errors.
  ParamSpec p;
  p.name = "big";
  p.shape = {256, 256};
  p.std = 0.02;
  std::vector<float> v(256 * 256);
  initializeBox(p, {{0, 0}, {256, 256}}, 1234, v.data());
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
  }
  double mean = sum / v.size(), std = std::sqrt(sq / v.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 4 * 0.02 / 256);
  EXPECT_NEAR(std, 0.02, 0.02 * 0.02);
}

TEST(Init, MatchesTheDocumentedFormula) {
  // Odd widths put Box-Muller pairs across row and box edges.
  ParamSpec p;
  p.name = "formula";
  p.shape = {7, 5};
  p.std = 0.5;
  Box box{{2, 1}, {3, 3}};
  std::vector<float> v(9);
  initializeBox(p, box, 42, v.data());
  uint64_t key = streamKey(42, "formula");
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 3; ++c) {
      uint64_t flat = uint64_t((2 + r) * 5 + 1 + c);
      EXPECT_EQ(v[r * 3 + c], float(0.5 * normalAt(key, flat))) << r << "," << c;
    }
  // The sine and cosine of one pair: a point on a circle of radius
  // sqrt(-2 ln(1 - u)).
  double a = normalAt(key, 10), b = normalAt(key, 11);
  double u1 = 1.0 - uniformAt(key, 10);
  EXPECT_NEAR(a * a + b * b, -2.0 * std::log(u1), 1e-12);
}

TEST(Init, ThreadedFillEqualsRowByRow) {
  // 512 x 512 elements are split over 4 threads; single rows are filled by
  // one thread each. Same values, bit for bit.
  ParamSpec p;
  p.name = "threaded";
  p.shape = {512, 512};
  p.std = 1.0;
  loomrt_set_num_threads(4);
  std::vector<float> whole(512 * 512), rows(512 * 512);
  initializeBox(p, {{0, 0}, {512, 512}}, 5, whole.data());
  for (int64_t r = 0; r < 512; ++r)
    initializeBox(p, {{r, 0}, {1, 512}}, 5, rows.data() + r * 512);
  loomrt_set_num_threads(0);
  EXPECT_EQ(std::memcmp(whole.data(), rows.data(), whole.size() * 4), 0);
}

TEST(Init, ZerosOnesAndLowPrecision) {
  Manifest m = parseManifest(fusedQkvManifest(1, "bf16").dump(), "m.json");
  const ParamSpec &ln = *m.findParam("ln_f.weight");
  std::vector<uint16_t> ones(6);
  initializeBox(ln, ln.shards[0].box, 1, ones.data());
  for (uint16_t x : ones)
    EXPECT_EQ(x, 0x3F80); // 1.0 in bf16
  // A bf16 tensor is the f32 tensor rounded.
  const ParamSpec &q = *m.findParam("attn.q.weight");
  std::vector<uint16_t> low(24);
  initializeBox(q, q.shards[0].box, 3, low.data());
  std::vector<float> widened(24);
  loomrt_cast(LOOMRT_BF16, low.data(), LOOMRT_F32, widened.data(), 24);
  std::vector<float> full = assembled(1, "attn.q.weight", 3);
  for (int i = 0; i < 24; ++i)
    EXPECT_NEAR(widened[i], full[i], std::fabs(full[i]) / 128) << i;
  ParamSpec zeros;
  zeros.name = "z";
  zeros.shape = {5};
  zeros.init = InitKind::Zeros;
  std::vector<float> z(5, 1.0f);
  initializeBox(zeros, {{0}, {5}}, 1, z.data());
  EXPECT_EQ(z, std::vector<float>(5, 0.0f));
}

} // namespace
