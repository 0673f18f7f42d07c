//===- ParamInit.cpp - Plan-independent parameter initialization ----------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/ParamInit.h"
#include "runtime/rank/DeviceIO.h"

#include "runtime/rank/Layout.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <functional>
#include <thread>

namespace loom::rank {

static constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t streamKey(uint64_t seed, const std::string &name) {
  // FNV-1a of the name, then mixed with the seed so that neighbouring seeds
  // give unrelated streams.
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : name)
    h = (h ^ c) * 0x100000001B3ull;
  return mix64(mix64(seed + kGolden) ^ h);
}

double uniformAt(uint64_t key, uint64_t index) {
  // splitmix64: the n-th output is mix64(key + n * golden).
  uint64_t bits = mix64(key + (index + 1) * kGolden);
  return double(bits >> 11) * 0x1.0p-53;
}

double normalAt(uint64_t key, uint64_t index) {
  // Box-Muller on draws 2p and 2p+1 of pair p = index / 2: even elements
  // take the cosine branch, odd ones the sine branch. The value depends on
  // the element index alone, and neighbours share the expensive part.
  uint64_t pair = index >> 1;
  double u1 = 1.0 - uniformAt(key, 2 * pair); // (0, 1]: log is finite
  double u2 = uniformAt(key, 2 * pair + 1);
  double r = std::sqrt(-2.0 * std::log(u1)), theta = 2.0 * M_PI * u2;
  return (index & 1) ? r * std::sin(theta) : r * std::cos(theta);
}

namespace {

/// Fills values[begin, end) (local flat indices of `box`) with the normal
/// initialization of `param`.
void fillNormal(const ParamSpec &param, const Box &box, uint64_t key,
                int64_t begin, int64_t end, float *values) {
  Shape globalStrides = contiguousStrides(param.shape);
  Shape localStrides = contiguousStrides(box.shape);
  size_t rank = box.shape.size();
  // Multi-index of `begin`, then odometer steps.
  Shape index(rank, 0);
  for (size_t d = 0, rest = size_t(begin); d < rank; ++d) {
    index[d] = int64_t(rest) / localStrides[d];
    rest %= size_t(localStrides[d]);
  }
  // The last Box-Muller pair: along a row, elements 2p and 2p+1 share it.
  uint64_t lastPair = UINT64_MAX;
  double radius = 0, theta = 0;
  for (int64_t i = begin; i < end; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < rank; ++d)
      flat += (box.offset[d] + index[d]) * globalStrides[d];
    uint64_t pair = uint64_t(flat) >> 1;
    if (pair != lastPair) {
      // Exactly normalAt's arithmetic.
      radius = std::sqrt(-2.0 * std::log(1.0 - uniformAt(key, 2 * pair)));
      theta = 2.0 * M_PI * uniformAt(key, 2 * pair + 1);
      lastPair = pair;
    }
    double z = (flat & 1) ? radius * std::sin(theta) : radius * std::cos(theta);
    values[i] = float(param.std * z);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < box.shape[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace

void initializeBox(const ParamSpec &param, const Box &box, uint64_t seed,
                   void *out) {
  int64_t n = numElements(box.shape);
  std::vector<float> values(n);
  if (param.init == InitKind::Normal) {
    // Elements are independent: split them over the runtime's threads (the
    // init of a 124M-parameter model is seconds of libm otherwise).
    uint64_t key = streamKey(seed, param.name);
    int64_t threads = std::max<int64_t>(
        1, std::min<int64_t>(loomrt_get_num_threads(), n / 65536));
    std::vector<std::thread> pool;
    for (int64_t t = 1; t < threads; ++t)
      pool.emplace_back(fillNormal, std::cref(param), std::cref(box), key,
                        n * t / threads, n * (t + 1) / threads, values.data());
    fillNormal(param, box, key, 0, n / threads, values.data());
    for (std::thread &th : pool)
      th.join();
  } else {
    std::fill(values.begin(), values.end(),
              param.init == InitKind::Ones ? 1.0f : 0.0f);
  }
  uploadAs(LOOMRT_F32, values.data(), param.dtype, out, n);
}

} // namespace loom::rank
