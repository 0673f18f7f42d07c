//===- TestUtil.h - Helpers for the loomrt unit tests -----------*- C++ -*-===//
//
// Random data, dtype buffers, comparison with tolerances and central finite
// differences. References in the tests are written in double from the
// definitions, independently of the runtime's f32 code; backward kernels are
// checked against finite differences of those double references.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_UNIT_RUNTIME_TESTUTIL_H
#define LOOM_TEST_UNIT_RUNTIME_TESTUTIL_H

#include "loomrt/loomrt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace loomrt_test {

inline std::vector<float> randomVec(size_t n, uint32_t seed, float lo = -1.0f,
                                    float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

inline std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

inline const char *dtypeName(loomrt_dtype dt) {
  return dt == LOOMRT_F32 ? "f32" : dt == LOOMRT_BF16 ? "bf16" : "f16";
}

/// A tensor stored in some dtype. values() widens it back to f32 through the
/// runtime's own cast (tested on its own in CastTest).
struct Buf {
  loomrt_dtype dt;
  std::vector<unsigned char> bytes;

  Buf(loomrt_dtype dt, size_t n)
      : dt(dt), bytes(n * size_t(loomrt_dtype_size(dt))) {}
  Buf(loomrt_dtype dt, const std::vector<float> &v) : Buf(dt, v.size()) {
    loomrt_cast(LOOMRT_F32, v.data(), dt, data(), int64_t(v.size()));
  }
  size_t size() const { return bytes.size() / size_t(loomrt_dtype_size(dt)); }
  void *data() { return bytes.data(); }
  const void *data() const { return bytes.data(); }
  std::vector<float> values() const {
    std::vector<float> v(size());
    loomrt_cast(dt, data(), LOOMRT_F32, v.data(), int64_t(v.size()));
    return v;
  }
};

/// Rounds v through dt and back: the values a kernel actually sees.
inline std::vector<float> rounded(const std::vector<float> &v,
                                  loomrt_dtype dt) {
  return Buf(dt, v).values();
}

/// |got - want| <= atol + rtol * |want| elementwise; reports the first few
/// offending indices.
inline void expectClose(const std::vector<float> &got,
                        const std::vector<double> &want, double atol,
                        double rtol, const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    double err = std::fabs(double(got[i]) - want[i]);
    bool ok = err <= atol + rtol * std::fabs(want[i]) ||
              (std::isinf(want[i]) && double(got[i]) == want[i]);
    if (!ok) {
      ++bad;
      if (reported++ < 5)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want "
                      << want[i] << " (err " << err << ")";
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                     << " elements out of tolerance";
}

inline void expectClose(const std::vector<float> &got,
                        const std::vector<float> &want, double atol,
                        double rtol, const std::string &what) {
  expectClose(got, toDouble(want), atol, rtol, what);
}

/// Central differences of a scalar function, in double.
inline std::vector<double>
numericGrad(const std::function<double(const std::vector<double> &)> &f,
            std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f(x);
    x[i] = saved - h;
    const double down = f(x);
    x[i] = saved;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

/// sum_i a[i] * b[i] in double (the scalar objective L = <y, R> used for
/// backward checks: dL/dy = R).
inline double dot(const std::vector<double> &a, const std::vector<float> &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += a[i] * double(b[i]);
  return s;
}

} // namespace loomrt_test

#endif // LOOM_TEST_UNIT_RUNTIME_TESTUTIL_H
