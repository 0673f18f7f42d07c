//===- CudaVsCpuTest.cpp - The cuda backend against the cpu one -*- C++ -*-===//
//
// usage: loomrt-cuda-tests kernels|comm libloomrt_cpu.so libloomrt_cuda.so
//
// Loads both backends with dlopen(RTLD_LOCAL), so their identical loomrt_*
// symbols never meet, runs every kernel (forward and backward, each dtype)
// on the same inputs through both, and compares the cuda results with the
// cpu ones, the reference, which test/Unit/Runtime checks against
// independent double-precision definitions. "comm" (under mpirun -np 2)
// does the same for every collective and batched p2p over NCCL.
//
// Tolerances are normwise: max |cuda - cpu| <= tol * max |cpu| per output,
// with tol = 2e-4 for f32 results (summation order), 2e-3 for f16 and
// 1e-2 for bf16 (one rounding step apart), at least 1e-3 for RoPE at
// positions in the thousands; bit patterns, dropout masks, lookups, ids,
// misuse messages and infinities must match exactly.
//
// With the same library given twice it checks the harness alone, with no
// GPU (ctest: runtime-cuda.harness).
//
// Without a usable GPU (cudaGetDeviceCount fails or finds none; for "comm",
// fewer GPUs than ranks) it says why and exits with 77, which ctest reports
// as skipped.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace {

constexpr int kSkip = 77;

//===----------------------------------------------------------------------===//
// The two backends
//===----------------------------------------------------------------------===//

// Every function of loomrt.h (runtime-cuda.abi-symbols checks that the two
// libraries export the same set).
// clang-format off
#define LOOMRT_FUNCTIONS(X)                                                    \
  X(loomrt_abort)                                                              \
  X(loomrt_adamw)                                                              \
  X(loomrt_adamw_multi)                                                        \
  X(loomrt_add)                                                                \
  X(loomrt_add_bias)                                                           \
  X(loomrt_add_layer_norm_forward)                                             \
  X(loomrt_add_rms_norm_forward)                                               \
  X(loomrt_all_gather)                                                         \
  X(loomrt_all_reduce)                                                         \
  X(loomrt_all_to_all)                                                         \
  X(loomrt_alloc)                                                              \
  X(loomrt_attention_backward)                                                 \
  X(loomrt_attention_chunked_backward)                                         \
  X(loomrt_attention_chunked_forward)                                          \
  X(loomrt_attention_forward)                                                  \
  X(loomrt_attention_merge)                                                    \
  X(loomrt_attention_section_backward)                                         \
  X(loomrt_attention_section_forward)                                          \
  X(loomrt_axpy)                                                               \
  X(loomrt_barrier)                                                            \
  X(loomrt_broadcast)                                                          \
  X(loomrt_cast)                                                               \
  X(loomrt_ce_local_max)                                                       \
  X(loomrt_ce_local_sum_exp)                                                   \
  X(loomrt_ce_local_target)                                                    \
  X(loomrt_ce_loss_from_parts)                                                 \
  X(loomrt_ce_vocab_parallel_backward)                                         \
  X(loomrt_comm_create)                                                        \
  X(loomrt_comm_destroy)                                                       \
  X(loomrt_comm_rank)                                                          \
  X(loomrt_comm_size)                                                          \
  X(loomrt_comm_world)                                                         \
  X(loomrt_comm_world_rank_of)                                                 \
  X(loomrt_copy)                                                               \
  X(loomrt_copy_2d)                                                            \
  X(loomrt_cross_entropy_backward)                                             \
  X(loomrt_cross_entropy_forward)                                              \
  X(loomrt_document_ids)                                                       \
  X(loomrt_dropout_backward)                                                   \
  X(loomrt_dropout_forward)                                                    \
  X(loomrt_dtype_size)                                                         \
  X(loomrt_embedding_backward)                                                 \
  X(loomrt_embedding_forward)                                                  \
  X(loomrt_finalize)                                                           \
  X(loomrt_free)                                                               \
  X(loomrt_gelu_backward)                                                      \
  X(loomrt_gelu_forward)                                                       \
  X(loomrt_gemm)                                                               \
  X(loomrt_get_num_threads)                                                    \
  X(loomrt_grouped_linear_backward_data)                                       \
  X(loomrt_grouped_linear_backward_weight)                                     \
  X(loomrt_grouped_linear_forward)                                             \
  X(loomrt_has_nonfinite)                                                      \
  X(loomrt_init)                                                               \
  X(loomrt_layer_norm_backward)                                                \
  X(loomrt_layer_norm_forward)                                                 \
  X(loomrt_linear_backward_data)                                               \
  X(loomrt_linear_backward_data_gelu)                                          \
  X(loomrt_linear_backward_data_swiglu)                                        \
  X(loomrt_linear_backward_weight)                                             \
  X(loomrt_linear_forward)                                                     \
  X(loomrt_linear_gelu_forward)                                                \
  X(loomrt_linear_swiglu_forward)                                              \
  X(loomrt_moe_drop)                                                           \
  X(loomrt_moe_permute)                                                        \
  X(loomrt_moe_permute_backward)                                               \
  X(loomrt_moe_put_expert_rows)                                                \
  X(loomrt_moe_route_backward)                                                 \
  X(loomrt_moe_route_counts)                                                   \
  X(loomrt_moe_route_forward)                                                  \
  X(loomrt_moe_router_loss_backward)                                           \
  X(loomrt_moe_router_loss_forward)                                            \
  X(loomrt_moe_take_expert_rows)                                               \
  X(loomrt_moe_unpermute)                                                      \
  X(loomrt_moe_unpermute_backward)                                             \
  X(loomrt_multi_linear_backward_data)                                         \
  X(loomrt_multi_linear_backward_weight)                                       \
  X(loomrt_multi_linear_forward)                                               \
  X(loomrt_p2p_begin)                                                          \
  X(loomrt_p2p_end)                                                            \
  X(loomrt_position_ids)                                                       \
  X(loomrt_recv)                                                               \
  X(loomrt_reduce_scatter)                                                     \
  X(loomrt_rms_norm_backward)                                                  \
  X(loomrt_rms_norm_forward)                                                   \
  X(loomrt_rope_backward)                                                      \
  X(loomrt_rope_forward)                                                       \
  X(loomrt_rope_pair_backward)                                                 \
  X(loomrt_rope_pair_forward)                                                  \
  X(loomrt_safe_divide)                                                        \
  X(loomrt_scale)                                                              \
  X(loomrt_send)                                                               \
  X(loomrt_set_num_threads)                                                    \
  X(loomrt_sigmoid_gate_backward)                                              \
  X(loomrt_sigmoid_gate_forward)                                               \
  X(loomrt_silu_backward)                                                      \
  X(loomrt_silu_forward)                                                       \
  X(loomrt_sum_squares)                                                        \
  X(loomrt_swiglu_backward)                                                    \
  X(loomrt_swiglu_forward)                                                     \
  X(loomrt_world_rank)                                                         \
  X(loomrt_world_size)                                                         \
  X(loomrt_wtime)                                                              \
  X(loomrt_zero)
// clang-format on

/// One backend's entry points, typed from the header's declarations.
struct Backend {
  const char *name = "";
#define DECLARE(f) decltype(&::f) f = nullptr;
  LOOMRT_FUNCTIONS(DECLARE)
#undef DECLARE

  /// Loads the library and every function; returns an error or "".
  std::string load(const char *label, const char *path) {
    name = label;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h)
      return dlerror();
#define RESOLVE(f)                                                             \
  f = reinterpret_cast<decltype(&::f)>(dlsym(h, #f));                          \
  if (!f)                                                                      \
    return std::string(path) + ": missing " #f;
    LOOMRT_FUNCTIONS(RESOLVE)
#undef RESOLVE
    return "";
  }
};

Backend cpu, cuda;

//===----------------------------------------------------------------------===//
// Tensors in backend memory
//===----------------------------------------------------------------------===//

/// Host-side conversions go through the cpu backend (host memory there).
std::vector<unsigned char> encode(loomrt_dtype dt,
                                  const std::vector<float> &v) {
  std::vector<unsigned char> b(v.size() * size_t(cpu.loomrt_dtype_size(dt)));
  cpu.loomrt_cast(LOOMRT_F32, v.data(), dt, b.data(), int64_t(v.size()));
  return b;
}

std::vector<float> decode(loomrt_dtype dt,
                          const std::vector<unsigned char> &b) {
  std::vector<float> v(b.size() / size_t(cpu.loomrt_dtype_size(dt)));
  cpu.loomrt_cast(dt, b.data(), LOOMRT_F32, v.data(), int64_t(v.size()));
  return v;
}

/// A buffer allocated by one backend, filled from the host.
class Dev {
public:
  Dev(Backend &be, const void *src, size_t bytes) : be(be), bytes(bytes) {
    p = be.loomrt_alloc(int64_t(bytes));
    if (src)
      be.loomrt_copy(p, src, int64_t(bytes));
    else
      be.loomrt_zero(p, int64_t(bytes));
  }
  Dev(Backend &be, loomrt_dtype dt, const std::vector<float> &v)
      : Dev(be, encode(dt, v).data(),
            v.size() * size_t(cpu.loomrt_dtype_size(dt))) {}
  Dev(Backend &be, const std::vector<int32_t> &v)
      : Dev(be, v.data(), v.size() * 4) {}
  ~Dev() { be.loomrt_free(p); }
  Dev(const Dev &) = delete;
  Dev &operator=(const Dev &) = delete;

  void *get() const { return p; }
  template <typename T> T *as() const { return static_cast<T *>(p); }
  std::vector<unsigned char> raw() const {
    std::vector<unsigned char> b(bytes);
    be.loomrt_copy(b.data(), p, int64_t(bytes));
    return b;
  }
  std::vector<float> read(loomrt_dtype dt) const { return decode(dt, raw()); }
  std::vector<float> readInts() const {
    std::vector<int32_t> v(bytes / 4);
    be.loomrt_copy(v.data(), p, int64_t(bytes));
    return std::vector<float>(v.begin(), v.end());
  }

private:
  Backend &be;
  size_t bytes;
  void *p;
};

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

using Outs = std::vector<std::vector<float>>;
int failures = 0, checks = 0;

const char *dtName(loomrt_dtype dt) {
  return dt == LOOMRT_F32 ? "f32" : dt == LOOMRT_BF16 ? "bf16" : "f16";
}

double tolFor(loomrt_dtype dt) {
  return dt == LOOMRT_F32 ? 2e-4 : dt == LOOMRT_F16 ? 2e-3 : 1e-2;
}

/// Compares one output; tol == 0 asks for identical values.
void compareOne(const std::string &what, const std::vector<float> &want,
                const std::vector<float> &got, double tol) {
  ++checks;
  if (want.size() != got.size()) {
    std::printf("FAIL %s: %zu elements, expected %zu\n", what.c_str(),
                got.size(), want.size());
    ++failures;
    return;
  }
  double maxRef = 0.0, maxErr = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const float w = want[i], g = got[i];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      const bool same = (std::isnan(w) && std::isnan(g)) || w == g;
      if (!same) {
        std::printf("FAIL %s: element %zu is %g, expected %g\n", what.c_str(),
                    i, double(g), double(w));
        ++failures;
        return;
      }
      continue;
    }
    maxRef = std::max(maxRef, std::fabs(double(w)));
    const double err = std::fabs(double(g) - double(w));
    if (err > maxErr) {
      maxErr = err;
      worst = i;
    }
  }
  const double rel = maxRef > 0 ? maxErr / maxRef : maxErr;
  const bool ok = tol == 0 ? maxErr == 0 : rel <= tol;
  std::printf("%s %s: max err %.3g (relative %.3g, tol %g)\n",
              ok ? "ok  " : "FAIL", what.c_str(), maxErr, rel, tol);
  if (!ok) {
    std::printf("     element %zu: cuda %.9g, cpu %.9g\n", worst,
                double(got[worst]), double(want[worst]));
    ++failures;
  }
}

/// Runs `run` through both backends and compares every output.
void check(const std::string &name, double tol,
           const std::function<Outs(Backend &)> &run) {
  const Outs want = run(cpu), got = run(cuda);
  for (size_t k = 0; k < want.size(); ++k)
    compareOne(name + (want.size() > 1 ? "[" + std::to_string(k) + "]" : ""),
               want[k], k < got.size() ? got[k] : std::vector<float>{}, tol);
}

std::vector<float> randomVec(size_t n, uint32_t seed, float lo = -1.0f,
                             float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

std::vector<int32_t> randomInts(size_t n, uint32_t seed, int32_t lo,
                                int32_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t &x : v)
    x = dist(gen);
  return v;
}

const loomrt_dtype kDtypes[] = {LOOMRT_F32, LOOMRT_BF16, LOOMRT_F16};

//===----------------------------------------------------------------------===//
// Casts, checks, elementwise helpers, memory
//===----------------------------------------------------------------------===//

void testCasts() {
  // Specials, subnormals, ties, the f16 overflow boundary and random values.
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -2.5f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e6f,
                          -1e6f,
                          6.0e-8f,
                          3.0e-8f,
                          1e-40f,
                          1.00390625f,
                          1.01171875f,
                          3.14159265f,
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          -std::numeric_limits<float>::quiet_NaN()};
  for (float x : randomVec(5000, 1, -70000.0f, 70000.0f))
    v.push_back(x);
  for (float x : randomVec(5000, 2, -1e-4f, 1e-4f))
    v.push_back(x);
  for (loomrt_dtype from : kDtypes)
    for (loomrt_dtype to : kDtypes) {
      const std::vector<unsigned char> src = encode(from, v);
      auto run = [&](Backend &be) -> Outs {
        Dev s(be, src.data(), src.size());
        Dev d(be, nullptr, v.size() * size_t(cpu.loomrt_dtype_size(to)));
        be.loomrt_cast(from, s.get(), to, d.get(), int64_t(v.size()));
        // Bit patterns: every 16-bit half word as an (exact) float.
        std::vector<unsigned char> b = d.raw();
        std::vector<float> words(b.size() / 2);
        for (size_t i = 0; i < words.size(); ++i) {
          uint16_t w;
          std::memcpy(&w, &b[2 * i], 2);
          words[i] = float(w);
        }
        return {words};
      };
      check(std::string("cast ") + dtName(from) + "->" + dtName(to) + " (bits)",
            0.0, run);
    }
}

void testLargeCastAndSupport() {
  // Enough elements that every grid-stride loop wraps many times.
  const auto big = randomVec(3000017, 50, -300, 300);
  check("large cast f32->bf16->f16", 0.0, [&](Backend &be) -> Outs {
    Dev s(be, LOOMRT_F32, big), b(be, nullptr, big.size() * 2),
        h(be, nullptr, big.size() * 2);
    be.loomrt_cast(LOOMRT_F32, s.get(), LOOMRT_BF16, b.get(),
                   int64_t(big.size()));
    be.loomrt_cast(LOOMRT_BF16, b.get(), LOOMRT_F16, h.get(),
                   int64_t(big.size()));
    return {h.read(LOOMRT_F16)};
  });
  check("alloc alignment, zero-byte allocations, wtime", 0.0,
        [&](Backend &be) -> Outs {
          void *a = be.loomrt_alloc(1), *z1 = be.loomrt_alloc(0),
               *z2 = be.loomrt_alloc(0);
          const double t0 = be.loomrt_wtime();
          Dev d(be, LOOMRT_F32, big);
          be.loomrt_scale(LOOMRT_F32, d.get(), int64_t(big.size()), 2.0f);
          const double t1 = be.loomrt_wtime();
          std::vector<float> v = {
              float(reinterpret_cast<uintptr_t>(a) % 64),
              float(z1 != nullptr && z2 != nullptr && z1 != z2),
              float(t1 > t0)};
          be.loomrt_free(a);
          be.loomrt_free(z1);
          be.loomrt_free(z2);
          be.loomrt_free(nullptr);
          return {v};
        });
}

void testChecksAndHelpers() {
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    std::vector<float> x = randomVec(70000, 3, -3, 3);
    check("has_nonfinite " + t, 0.0, [&](Backend &be) -> Outs {
      std::vector<float> res;
      for (float bad : {1.0f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), 1e6f}) {
        std::vector<float> y = x;
        y[12345] = bad;
        Dev d(be, dt, y);
        res.push_back(float(be.loomrt_has_nonfinite(dt, d.get(), 70000)));
      }
      return {res};
    });
    check("scale/add/axpy " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev a(be, dt, x), b(be, dt, randomVec(70000, 4)), out(be, dt, x);
      be.loomrt_scale(dt, a.get(), 70000, -0.75f);
      be.loomrt_add(dt, 70000, a.get(), b.get(), out.get());
      be.loomrt_add(dt, 70000, out.get(), b.get(), out.get()); // aliasing
      Dev bias(be, dt, randomVec(700, 7));
      be.loomrt_add_bias(dt, 100, 700, out.get(), bias.get(), out.get());
      Dev y32(be, LOOMRT_F32, randomVec(70000, 5));
      be.loomrt_axpy(70000, 0.5f, dt, a.get(), LOOMRT_F32, y32.get());
      Dev y(be, dt, randomVec(70000, 6));
      be.loomrt_axpy(70000, 2.0f, LOOMRT_F32, y32.get(), dt, y.get());
      return {a.read(dt), out.read(dt), y32.read(LOOMRT_F32), y.read(dt)};
    });
    check("sum_squares " + t, 1e-5, [&](Backend &be) -> Outs {
      Dev d(be, dt, x);
      return {{be.loomrt_sum_squares(dt, d.get(), 70000),
               be.loomrt_sum_squares(dt, d.get(), 100)}};
    });
  }
  check("safe_divide", 0.0, [&](Backend &be) -> Outs {
    // The loss's mean on the device; 0 over no tokens.
    Dev parts(be, LOOMRT_F32, std::vector<float>{7.5f, 3.0f, 2.0f, 0.0f});
    Dev out(be, nullptr, 2 * sizeof(float));
    be.loomrt_safe_divide(parts.as<float>(), parts.as<float>() + 1,
                          out.as<float>());
    be.loomrt_safe_divide(parts.as<float>() + 2, parts.as<float>() + 3,
                          out.as<float>() + 1);
    return {out.read(LOOMRT_F32)};
  });
  check("copy_2d", 0.0, [&](Backend &be) -> Outs {
    // Split a fused [M, 3H] into its middle [M, H] and concatenate back.
    const int64_t M = 37, H = 20;
    std::vector<float> fused = randomVec(size_t(M * 3 * H), 7);
    Dev src(be, LOOMRT_F32, fused), mid(be, nullptr, size_t(M * H * 4));
    Dev dst(be, nullptr, size_t(M * 3 * H * 4));
    be.loomrt_copy_2d(mid.get(), H * 4, src.as<float>() + H, 3 * H * 4, M,
                      H * 4);
    be.loomrt_copy_2d(dst.as<float>() + 2 * H, 3 * H * 4, mid.get(), H * 4, M,
                      H * 4);
    return {mid.read(LOOMRT_F32), dst.read(LOOMRT_F32)};
  });
}

//===----------------------------------------------------------------------===//
// GEMM and linear layers
//===----------------------------------------------------------------------===//

void testGemm() {
  struct Case {
    int ta, tb;
    int64_t M, N, K, batch, strideA, strideB;
    float alpha, beta;
    loomrt_dtype a, b, c;
  };
  std::vector<Case> cases;
  for (loomrt_dtype dt : kDtypes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        cases.push_back(
            {ta, tb, 33, 47, 65, 3, -1, -1, 1.5f, 0.5f, dt, dt, dt});
  // Broadcast B over the batch, beta = 0 over NaN, bf16 into an f32 C.
  cases.push_back({0, 1, 16, 24, 40, 4, -1, 0, 1.0f, 0.0f, LOOMRT_BF16,
                   LOOMRT_BF16, LOOMRT_F32});
  // Mixed operand dtypes (widened), f32 inputs into a 16-bit C.
  cases.push_back({1, 0, 20, 30, 50, 2, -1, -1, 1.0f, 1.0f, LOOMRT_BF16,
                   LOOMRT_F32, LOOMRT_F16});
  cases.push_back({0, 0, 20, 30, 50, 1, -1, -1, 1.0f, 0.0f, LOOMRT_F32,
                   LOOMRT_F32, LOOMRT_BF16});
  // K = 0: C = beta C.
  cases.push_back({0, 0, 5, 6, 0, 2, -1, -1, 1.0f, 2.0f, LOOMRT_F32, LOOMRT_F32,
                   LOOMRT_F32});
  for (const Case &c : cases) {
    const int64_t lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 1,
                  ldc = c.N + 2;
    const int64_t aRows = c.ta ? c.K : c.M, bRows = c.tb ? c.N : c.K;
    const int64_t sa = c.strideA < 0 ? aRows * lda : c.strideA;
    const int64_t sb = c.strideB < 0 ? bRows * ldb : c.strideB;
    const int64_t sc = c.M * ldc;
    std::vector<float> A =
        randomVec(size_t(std::max<int64_t>(sa, aRows * lda) * c.batch + 1), 8);
    std::vector<float> B =
        randomVec(size_t(std::max<int64_t>(sb, bRows * ldb) * c.batch + 1), 9);
    std::vector<float> C = randomVec(size_t(sc * c.batch), 10);
    if (c.beta == 0.0f)
      C.assign(C.size(), std::numeric_limits<float>::quiet_NaN());
    char name[160];
    std::snprintf(name, sizeof(name),
                  "gemm ta=%d tb=%d %lldx%lldx%lld batch %lld sb=%lld "
                  "beta=%g %s*%s->%s",
                  c.ta, c.tb, (long long)c.M, (long long)c.N, (long long)c.K,
                  (long long)c.batch, (long long)sb, double(c.beta),
                  dtName(c.a), dtName(c.b), dtName(c.c));
    check(name, tolFor(c.c), [&](Backend &be) -> Outs {
      Dev a(be, c.a, A), b(be, c.b, B), cc(be, c.c, C);
      be.loomrt_gemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, c.a, a.get(), lda, sa,
                     c.b, b.get(), ldb, sb, c.beta, c.c, cc.get(), ldc, sc,
                     c.batch);
      // The padding columns of C must be untouched: compare them all.
      return {cc.read(c.c)};
    });
  }
}

void testLinear() {
  const int64_t M = 50, N = 36, K = 70;
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    const auto x = randomVec(size_t(M * K), 11),
               W = randomVec(size_t(N * K), 12),
               bias = randomVec(size_t(N), 13),
               dy = randomVec(size_t(M * N), 14);
    check("linear_forward " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev xd(be, dt, x), wd(be, dt, W), bd(be, dt, bias);
      Dev y1(be, dt, std::vector<float>(size_t(M * N))), y2(be, dt, dy);
      be.loomrt_linear_forward(dt, M, N, K, xd.get(), wd.get(), bd.get(),
                               y1.get());
      be.loomrt_linear_forward(dt, M, N, K, xd.get(), wd.get(), nullptr,
                               y2.get());
      return {y1.read(dt), y2.read(dt)};
    });
    check("linear_backward_data " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev dyd(be, dt, dy), wd(be, dt, W), dx(be, dt, x);
      be.loomrt_linear_backward_data(dt, M, N, K, dyd.get(), wd.get(), dx.get(),
                                     1);
      Dev dx0(be, dt, x);
      be.loomrt_linear_backward_data(dt, M, N, K, dyd.get(), wd.get(),
                                     dx0.get(), 0);
      return {dx.read(dt), dx0.read(dt)};
    });
    for (loomrt_dtype gdt : {dt, LOOMRT_F32})
      check("linear_backward_weight " + t + " grads " + dtName(gdt),
            tolFor(gdt), [&](Backend &be) -> Outs {
              Dev dyd(be, dt, dy), xd(be, dt, x);
              Dev dW(be, gdt, W), db(be, gdt, bias);
              be.loomrt_linear_backward_weight(dt, M, N, K, dyd.get(), xd.get(),
                                               gdt, dW.get(), db.get(), 1);
              Dev dW0(be, gdt, W), db0(be, gdt, bias);
              be.loomrt_linear_backward_weight(dt, M, N, K, dyd.get(), xd.get(),
                                               gdt, dW0.get(), db0.get(), 0);
              return {dW.read(gdt), db.read(gdt), dW0.read(gdt), db0.read(gdt)};
            });
  }
  // The fused linears (composed from the calls above on every backend).
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    const int64_t widths[2] = {36, 12};
    const auto x = randomVec(size_t(M * K), 41), w0 = randomVec(size_t(36 * K), 42),
               w1 = randomVec(size_t(12 * K), 43), dy0 = randomVec(size_t(M * 36), 44),
               dy1 = randomVec(size_t(M * 12), 45);
    check("multi_linear " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev xd(be, dt, x), a(be, dt, w0), b(be, dt, w1), g0(be, dt, dy0),
          g1(be, dt, dy1), y0(be, dt, dy0), y1(be, dt, dy1), dx(be, dt, x),
          dw0(be, LOOMRT_F32, w0), dw1(be, LOOMRT_F32, w1);
      const void *ws[2] = {a.get(), b.get()}, *dys[2] = {g0.get(), g1.get()};
      void *ys[2] = {y0.get(), y1.get()}, *dws[2] = {dw0.get(), dw1.get()};
      be.loomrt_multi_linear_forward(dt, 2, M, K, widths, xd.get(), ws,
                                     nullptr, ys);
      be.loomrt_multi_linear_backward_data(dt, 2, M, K, widths, dys, ws,
                                           dx.get(), 1);
      be.loomrt_multi_linear_backward_weight(dt, 2, M, K, widths, dys,
                                             xd.get(), LOOMRT_F32, dws,
                                             nullptr, 0);
      return {y0.read(dt), y1.read(dt), dx.read(dt), dw0.read(LOOMRT_F32),
              dw1.read(LOOMRT_F32)};
    });
    check("linear_gelu " + t, tolFor(dt), [&](Backend &be) -> Outs {
      // fc1 [K -> 36] with GELU, then fc2 [36 -> K]'s input gradient.
      Dev xd(be, dt, x), a(be, dt, w0), pre(be, dt, dy0), act(be, dt, dy0),
          w2(be, dt, w0), g(be, dt, x), dh(be, dt, dy0);
      be.loomrt_linear_gelu_forward(dt, LOOMRT_GELU_TANH, M, 36, K, xd.get(),
                                    a.get(), nullptr, pre.get(), act.get());
      be.loomrt_linear_backward_data_gelu(dt, LOOMRT_GELU_TANH, M, K, 36,
                                          g.get(), w2.get(), pre.get(),
                                          dh.get());
      return {pre.read(dt), act.read(dt), dh.read(dt)};
    });
    check("linear_swiglu " + t, tolFor(dt), [&](Backend &be) -> Outs {
      // gate and up [K -> 12] with biases and their SwiGLU, then down
      // [12 -> K]'s input gradient through it.
      Dev xd(be, dt, x), g(be, dt, w1), u(be, dt, w1), b(be, dt, dy1),
          gate(be, dt, dy1), up(be, dt, dy1), out(be, dt, dy1), wd(be, dt, w1),
          dy(be, dt, x), dg(be, dt, dy1), du(be, dt, dy1);
      be.loomrt_linear_swiglu_forward(dt, M, 12, K, xd.get(), g.get(), u.get(),
                                      b.get(), b.get(), gate.get(), up.get(),
                                      out.get());
      be.loomrt_linear_backward_data_swiglu(dt, M, K, 12, dy.get(), wd.get(),
                                            gate.get(), up.get(), dg.get(),
                                            du.get());
      return {gate.read(dt), up.read(dt), out.read(dt), dg.read(dt),
              du.read(dt)};
    });
  }
}

//===----------------------------------------------------------------------===//
// Norms, RoPE, ids
//===----------------------------------------------------------------------===//

void testNorms() {
  for (int64_t H : {64, 1000}) {
    const int64_t rows = 45;
    for (loomrt_dtype dt : kDtypes) {
      const std::string t = dtName(dt) + std::string(" H=") + std::to_string(H);
      const auto x = randomVec(size_t(rows * H), 15, -2, 3),
                 w = randomVec(size_t(H), 16), b = randomVec(size_t(H), 17),
                 dy = randomVec(size_t(rows * H), 18);
      for (int rms = 0; rms < 2; ++rms) {
        const std::string n = rms ? "rms_norm " : "layer_norm ";
        check(n + "forward " + t, tolFor(dt), [&](Backend &be) -> Outs {
          Dev xd(be, dt, x), wd(be, dt, w), bd(be, dt, b), y(be, dt, x);
          if (rms)
            be.loomrt_rms_norm_forward(dt, rows, H, xd.get(), wd.get(), 1e-5f,
                                       y.get());
          else
            be.loomrt_layer_norm_forward(dt, rows, H, xd.get(), wd.get(),
                                         bd.get(), 1e-5f, y.get());
          return {y.read(dt)};
        });
        // The residual add and the norm of its sum in one call.
        check("add_" + n + "forward " + t, tolFor(dt), [&](Backend &be) -> Outs {
          Dev xd(be, dt, x), rd(be, dt, dy), wd(be, dt, w), bd(be, dt, b),
              sum(be, dt, x), y(be, dt, x);
          if (rms)
            be.loomrt_add_rms_norm_forward(dt, rows, H, xd.get(), rd.get(),
                                           wd.get(), 1e-5f, sum.get(), y.get());
          else
            be.loomrt_add_layer_norm_forward(dt, rows, H, xd.get(), rd.get(),
                                             wd.get(), bd.get(), 1e-5f,
                                             sum.get(), y.get());
          return {sum.read(dt), y.read(dt)};
        });
        for (loomrt_dtype gdt : {dt, LOOMRT_F32})
          for (int acc = 0; acc < 2; ++acc)
            check(n + "backward " + t + " grads " + dtName(gdt) +
                      (acc ? " accumulate" : ""),
                  std::max(tolFor(dt), tolFor(gdt)), [&](Backend &be) -> Outs {
                    Dev xd(be, dt, x), wd(be, dt, w), dyd(be, dt, dy),
                        dx(be, dt, x), dw(be, gdt, w), db(be, gdt, b);
                    // Accumulating, dx also adds what it held (dx_add = dx).
                    const void *dxAdd = acc ? dx.get() : nullptr;
                    if (rms)
                      be.loomrt_rms_norm_backward(
                          dt, rows, H, xd.get(), wd.get(), dyd.get(), 1e-5f,
                          dxAdd, dx.get(), gdt, dw.get(), acc);
                    else
                      be.loomrt_layer_norm_backward(
                          dt, rows, H, xd.get(), wd.get(), dyd.get(), 1e-5f,
                          dxAdd, dx.get(), gdt, dw.get(), db.get(), acc);
                    return {dx.read(dt), dw.read(gdt), db.read(gdt)};
                  });
      }
    }
  }
}

void testRope() {
  const int64_t B = 2, S = 9, N = 3, D = 16;
  const std::vector<int32_t> pos = randomInts(size_t(B * S), 19, 0, 4000);
  for (loomrt_dtype dt : kDtypes)
    for (int64_t rot : {D, int64_t(8)})
      for (int usePos = 0; usePos < 2; ++usePos)
        for (int32_t scaling : {LOOMRT_ROPE_DEFAULT, LOOMRT_ROPE_LLAMA3}) {
          // Llama 3.1's scaling with an original context of 400 puts D = 16's
          // wavelengths (6.3 .. 19869) in all three bands.
          const std::string t =
              std::string(dtName(dt)) + " rot_dim=" + std::to_string(rot) +
              (usePos ? " positions" : " arange") + (scaling ? " llama3" : "");
          const auto x = randomVec(size_t(B * S * N * D), 20);
          // Positions in the thousands turn a 1-ulp difference of inv_freq
          // (glibc's powf is not always correctly rounded) into ~2e-4 of angle.
          check("rope " + t, std::max(tolFor(dt), 1e-3),
                [&](Backend &be) -> Outs {
                  Dev xd(be, dt, x), y(be, dt, x), p(be, pos);
                  const int32_t *pp = usePos ? p.as<int32_t>() : nullptr;
                  be.loomrt_rope_forward(dt, B, S, N, D, rot, 10000.0f, scaling,
                                         8.0f, 1.0f, 4.0f, 400, pp, xd.get(),
                                         y.get());
                  Dev inPlace(be, dt, x);
                  be.loomrt_rope_backward(dt, B, S, N, D, rot, 500000.0f,
                                          scaling, 8.0f, 1.0f, 4.0f, 400, pp,
                                          inPlace.get(), inPlace.get());
                  return {y.read(dt), inPlace.read(dt)};
                });
          // q and k (a third of the heads) in one call, both ways.
          check("rope_pair " + t, std::max(tolFor(dt), 1e-3),
                [&](Backend &be) -> Outs {
                  const int64_t K = N / 3 ? N / 3 : 1;
                  Dev q(be, dt, x), k(be, dt, x), q2(be, dt, x), k2(be, dt, x),
                      p(be, pos);
                  const int32_t *pp = usePos ? p.as<int32_t>() : nullptr;
                  be.loomrt_rope_pair_forward(dt, B, S, N, K, D, rot, 10000.0f,
                                              scaling, 8.0f, 1.0f, 4.0f, 400,
                                              pp, q.get(), k.get(), q2.get(),
                                              k2.get());
                  be.loomrt_rope_pair_backward(dt, B, S, N, K, D, rot,
                                               10000.0f, scaling, 8.0f, 1.0f,
                                               4.0f, 400, pp, q2.get(),
                                               k2.get(), q2.get(), k2.get());
                  return {q2.read(dt), k2.read(dt)};
                });
        }
  check("document_ids/position_ids", 0.0, [&](Backend &be) -> Outs {
    const std::vector<int32_t> tokens = randomInts(3 * 50, 21, 0, 5);
    Dev tk(be, tokens), doc(be, nullptr, 3 * 50 * 4), p0(be, nullptr, 600),
        p1(be, nullptr, 600);
    be.loomrt_document_ids(3, 50, tk.as<int32_t>(), 0, doc.as<int32_t>());
    be.loomrt_position_ids(3, 50, tk.as<int32_t>(), 0, 1, p1.as<int32_t>());
    be.loomrt_position_ids(3, 50, tk.as<int32_t>(), 0, 0, p0.as<int32_t>());
    return {doc.readInts(), p0.readInts(), p1.readInts()};
  });
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

struct AttnCase {
  const char *name;
  int64_t B, S, Sk, Nq, Nkv, D;
  bool causal, positions, docs;
};

/// Under LOOMRT_CUDA_ATTENTION=cudnn the 16-bit cases run on cuDNN's fused
/// attention, which rounds the probabilities to the storage dtype before
/// the second matmul (the cpu backend keeps them in f32): a few more units
/// of rounding than the kernels' one.
double attentionTol(loomrt_dtype dt) {
  const char *env = std::getenv("LOOMRT_CUDA_ATTENTION");
  const bool fused = env && std::string(env) == "cudnn";
  return tolFor(dt) * (fused && dt != LOOMRT_F32 ? 3 : 1);
}

void testAttention() {
  const AttnCase cases[] = {
      {"gqa no mask", 2, 13, 21, 4, 2, 32, false, false, false},
      {"causal", 1, 70, 70, 2, 2, 64, true, false, false},
      {"causal docs gqa D=40", 2, 40, 40, 6, 2, 40, true, false, true},
      {"shuffled positions (cp chunk)", 2, 24, 33, 2, 1, 16, true, true, false},
      {"fully masked rows", 1, 12, 12, 2, 1, 8, true, true, true},
      {"long D=128", 1, 150, 150, 2, 1, 128, true, false, false},
      {"D=256", 1, 20, 40, 1, 1, 256, false, false, false},
      // Key lengths that are multiples of 128: cuDNN's fused attention
      // takes these (16-bit dtypes) on every cuDNN 9 release.
      {"causal gqa S=256", 2, 256, 256, 4, 2, 64, true, false, false},
      {"no mask Sk=128 D=128", 1, 64, 128, 2, 2, 128, false, false, false},
  };
  for (const AttnCase &c : cases) {
    const int64_t qn = c.B * c.S * c.Nq * c.D, kn = c.B * c.Sk * c.Nkv * c.D;
    const auto q = randomVec(size_t(qn), 22, -2, 2),
               k = randomVec(size_t(kn), 23, -2, 2),
               v = randomVec(size_t(kn), 24), dout = randomVec(size_t(qn), 25);
    std::vector<int32_t> qPos(size_t(c.B * c.S)), kPos(size_t(c.B * c.Sk)),
        qDoc(size_t(c.B * c.S)), kDoc(size_t(c.B * c.Sk));
    std::mt19937 gen(26);
    for (int64_t b = 0; b < c.B; ++b) {
      for (int64_t i = 0; i < c.S; ++i) {
        qPos[size_t(b * c.S + i)] = int32_t(c.positions ? gen() % 64 : i);
        qDoc[size_t(b * c.S + i)] = int32_t(i * 3 / std::max<int64_t>(c.S, 1));
      }
      for (int64_t j = 0; j < c.Sk; ++j) {
        kPos[size_t(b * c.Sk + j)] = int32_t(c.positions ? gen() % 64 : j);
        kDoc[size_t(b * c.Sk + j)] =
            int32_t(j * 3 / std::max<int64_t>(c.Sk, 1));
      }
    }
    if (std::string(c.name) == "fully masked rows")
      for (int64_t j = 0; j < c.Sk; ++j) // no key in document 0
        kDoc[size_t(j)] = 1 + int32_t(j % 2);
    const float scale = 1.0f / std::sqrt(float(c.D));
    for (loomrt_dtype dt : kDtypes) {
      const std::string t =
          std::string("attention ") + c.name + " " + dtName(dt);
      auto run = [&](Backend &be, bool backward, int accumulate) -> Outs {
        Dev qd(be, dt, q), kd(be, dt, k), vd(be, dt, v), od(be, dt, dout),
            dod(be, dt, dout);
        Dev lse(be, nullptr, size_t(c.B * c.Nq * c.S * 4));
        Dev qp(be, qPos), kp(be, kPos), qdc(be, qDoc), kdc(be, kDoc);
        const int32_t *qpp = c.positions ? qp.as<int32_t>() : nullptr;
        const int32_t *kpp = c.positions ? kp.as<int32_t>() : nullptr;
        const int32_t *qdp = c.docs ? qdc.as<int32_t>() : nullptr;
        const int32_t *kdp = c.docs ? kdc.as<int32_t>() : nullptr;
        be.loomrt_attention_forward(
            dt, c.B, c.S, c.Sk, c.Nq, c.Nkv, c.D, scale, c.causal, qpp, kpp,
            qdp, kdp, qd.get(), kd.get(), vd.get(), od.get(), lse.as<float>());
        if (!backward)
          return {od.read(dt), lse.read(LOOMRT_F32)};
        Dev dq(be, dt, q), dk(be, dt, k), dv(be, dt, v);
        be.loomrt_attention_backward(
            dt, c.B, c.S, c.Sk, c.Nq, c.Nkv, c.D, scale, c.causal, qpp, kpp,
            qdp, kdp, qd.get(), kd.get(), vd.get(), od.get(), lse.as<float>(),
            dod.get(), dq.get(), dk.get(), dv.get(), accumulate);
        return {dq.read(dt), dk.read(dt), dv.read(dt)};
      };
      // lse is f32 in every dtype, but is computed from rounded inputs.
      check(t + " forward", attentionTol(dt),
            [&](Backend &be) { return run(be, false, 0); });
      check(t + " backward", attentionTol(dt),
            [&](Backend &be) { return run(be, true, 0); });
      check(t + " backward accumulate", attentionTol(dt),
            [&](Backend &be) { return run(be, true, 1); });
    }
  }
  // A ring of two key chunks: forward per chunk and merge, then the
  // backward per chunk with the merged o/lse, dq accumulated over chunks.
  for (loomrt_dtype dt : kDtypes) {
    const int64_t B = 2, S = 24, Sk = 2 * S, Nq = 4, Nkv = 2, D = 32;
    const auto q = randomVec(size_t(B * S * Nq * D), 51),
               k = randomVec(size_t(B * Sk * Nkv * D), 52),
               v = randomVec(size_t(B * Sk * Nkv * D), 53),
               dout = randomVec(size_t(B * S * Nq * D), 54);
    // Queries sit at positions [S, 2S) (the second chunk of a causal
    // sequence); key chunk c covers positions [c S, (c + 1) S).
    std::vector<int32_t> qPos(size_t(B * S)), kPos[2];
    for (int c = 0; c < 2; ++c)
      kPos[c].resize(size_t(B * S));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < S; ++i) {
        qPos[size_t(b * S + i)] = int32_t(S + i);
        for (int c = 0; c < 2; ++c)
          kPos[c][size_t(b * S + i)] = int32_t(c * S + i);
      }
    check(std::string("attention ring of two key chunks ") + dtName(dt),
          attentionTol(dt), [&](Backend &be) -> Outs {
            const int64_t esz = cpu.loomrt_dtype_size(dt);
            const int64_t kvRow = Nkv * D * esz;
            Dev qd(be, dt, q), kd(be, dt, k), vd(be, dt, v), dod(be, dt, dout);
            Dev qp(be, qPos), kp0(be, kPos[0]), kp1(be, kPos[1]);
            const int32_t *kp[2] = {kp0.as<int32_t>(), kp1.as<int32_t>()};
            // Chunk c of k/v: rows [c S, (c + 1) S) of every batch entry.
            Dev kc0(be, nullptr, size_t(B * S * kvRow)),
                kc1(be, nullptr, size_t(B * S * kvRow)),
                vc0(be, nullptr, size_t(B * S * kvRow)),
                vc1(be, nullptr, size_t(B * S * kvRow));
            Dev *kc[2] = {&kc0, &kc1}, *vc[2] = {&vc0, &vc1};
            for (int c = 0; c < 2; ++c)
              for (int64_t b = 0; b < B; ++b) {
                be.loomrt_copy_2d(kc[c]->as<char>() + b * S * kvRow, kvRow,
                                  kd.as<char>() + (b * Sk + c * S) * kvRow,
                                  kvRow, S, kvRow);
                be.loomrt_copy_2d(vc[c]->as<char>() + b * S * kvRow, kvRow,
                                  vd.as<char>() + (b * Sk + c * S) * kvRow,
                                  kvRow, S, kvRow);
              }
            const size_t lseBytes = size_t(B * Nq * S * 4);
            Dev o(be, dt, dout), lse(be, nullptr, lseBytes), o1(be, dt, dout),
                lse1(be, nullptr, lseBytes);
            be.loomrt_attention_forward(dt, B, S, S, Nq, Nkv, D, 0.2f, 1,
                                        qp.as<int32_t>(), kp[0], nullptr,
                                        nullptr, qd.get(), kc0.get(), vc0.get(),
                                        o.get(), lse.as<float>());
            be.loomrt_attention_forward(dt, B, S, S, Nq, Nkv, D, 0.2f, 1,
                                        qp.as<int32_t>(), kp[1], nullptr,
                                        nullptr, qd.get(), kc1.get(), vc1.get(),
                                        o1.get(), lse1.as<float>());
            be.loomrt_attention_merge(dt, B, S, Nq, D, o.get(), lse.as<float>(),
                                      o1.get(), lse1.as<float>());
            Dev dq(be, dt, q), dk0(be, dt, q), dv0(be, dt, q), dk1(be, dt, q),
                dv1(be, dt, q);
            Dev *dk[2] = {&dk0, &dk1}, *dv[2] = {&dv0, &dv1};
            for (int c = 0; c < 2; ++c)
              be.loomrt_attention_backward(
                  dt, B, S, S, Nq, Nkv, D, 0.2f, 1, qp.as<int32_t>(), kp[c],
                  nullptr, nullptr, qd.get(), kc[c]->get(), vc[c]->get(),
                  o.get(), lse.as<float>(), dod.get(), dq.get(), dk[c]->get(),
                  dv[c]->get(), /*accumulate=*/c);
            const size_t kvN = size_t(B * S * Nkv * D);
            auto head = [&](const Dev &d) {
              std::vector<float> x = d.read(dt);
              x.resize(kvN);
              return x;
            };
            return {o.read(dt),  lse.read(LOOMRT_F32),
                    dq.read(dt), head(dk0),
                    head(dv0),   head(dk1),
                    head(dv1)};
          });
  }
  // Each section of causal ring attention: the forward merged into an
  // accumulator, then the backward added to gradients that start nonzero.
  // B = 2 exercises the per-batch slicing of LOWER and UPPER. With no
  // positions and no documents these are calls cuDNN takes.
  for (int32_t section :
       {LOOMRT_SECTION_DIAGONAL, LOOMRT_SECTION_LOWER, LOOMRT_SECTION_UPPER})
    for (loomrt_dtype dt : kDtypes) {
      // L/2 = 128 keys in LOWER's tile: see "causal gqa S=256" above.
      const int64_t B = 2, L = 256, Nq = 4, Nkv = 2, D = 64;
      const auto q = randomVec(size_t(B * L * Nq * D), 61, -2, 2),
                 k = randomVec(size_t(B * L * Nkv * D), 62, -2, 2),
                 v = randomVec(size_t(B * L * Nkv * D), 63),
                 o0 = randomVec(size_t(B * L * Nq * D), 64),
                 dout = randomVec(size_t(B * L * Nq * D), 65);
      // An accumulator as a previous section would leave it: finite lse
      // everywhere, so the backward below sees a plausible final lse.
      const auto lse0 = randomVec(size_t(B * Nq * L), 66, 1, 3);
      check(std::string("attention section ") + std::to_string(section) + " " +
                dtName(dt),
            attentionTol(dt), [&](Backend &be) -> Outs {
              Dev qd(be, dt, q), kd(be, dt, k), vd(be, dt, v), od(be, dt, o0),
                  dod(be, dt, dout), lse(be, LOOMRT_F32, lse0);
              be.loomrt_attention_section_forward(
                  dt, B, L, Nq, Nkv, D, 0.125f, section, nullptr, nullptr,
                  qd.get(), kd.get(), vd.get(), od.get(), lse.as<float>());
              Dev dq(be, dt, q), dk(be, dt, k), dv(be, dt, v);
              be.loomrt_attention_section_backward(
                  dt, B, L, Nq, Nkv, D, 0.125f, section, nullptr, nullptr,
                  qd.get(), kd.get(), vd.get(), od.get(), lse.as<float>(),
                  dod.get(), dq.get(), dk.get(), dv.get());
              return {od.read(dt), lse.read(LOOMRT_F32), dq.read(dt),
                      dk.read(dt), dv.read(dt)};
            });
    }
  // The all-gather scheme: cp rank 1 of 2 in the load-balanced layout holds
  // global chunks 1 and 2 and attends over the whole sequence. Its pieces
  // (128 or 256 keys whole, a 128-token causal diagonal) are calls cuDNN
  // takes; the backward overwrites gradients that start nonzero.
  for (loomrt_dtype dt : kDtypes) {
    const int64_t B = 2, chunk = 128, L = 2 * chunk, start = L;
    const int64_t Nq = 4, Nkv = 2, D = 64;
    const int32_t numChunks = 4;
    const int64_t S = numChunks * chunk, order[numChunks] = {0, 3, 1, 2};
    const auto q = randomVec(size_t(B * L * Nq * D), 71, -2, 2),
               k = randomVec(size_t(B * S * Nkv * D), 72, -2, 2),
               v = randomVec(size_t(B * S * Nkv * D), 73),
               dout = randomVec(size_t(B * L * Nq * D), 74);
    check(std::string("attention chunked (cp rank 1 of 2) ") + dtName(dt),
          attentionTol(dt), [&](Backend &be) -> Outs {
            Dev qd(be, dt, q), kd(be, dt, k), vd(be, dt, v), dod(be, dt, dout),
                od(be, dt, dout), lse(be, nullptr, size_t(B * Nq * L * 4));
            be.loomrt_attention_chunked_forward(
                dt, B, L, start, chunk, numChunks, order, Nq, Nkv, D, 0.125f,
                nullptr, nullptr, qd.get(), kd.get(), vd.get(), od.get(),
                lse.as<float>());
            Dev dq(be, dt, q), dk(be, dt, k), dv(be, dt, v);
            be.loomrt_attention_chunked_backward(
                dt, B, L, start, chunk, numChunks, order, Nq, Nkv, D, 0.125f,
                nullptr, nullptr, qd.get(), kd.get(), vd.get(), od.get(),
                lse.as<float>(), dod.get(), dq.get(), dk.get(), dv.get());
            return {od.read(dt), lse.read(LOOMRT_F32), dq.read(dt), dk.read(dt),
                    dv.read(dt)};
          });
  }
  // Ring step: merge two key chunks' partial results.
  for (loomrt_dtype dt : kDtypes) {
    const int64_t B = 2, S = 10, Nq = 3, D = 24;
    const auto o1 = randomVec(size_t(B * S * Nq * D), 27),
               o2 = randomVec(size_t(B * S * Nq * D), 28);
    auto l1 = randomVec(size_t(B * Nq * S), 29, -3, 3),
         l2 = randomVec(size_t(B * Nq * S), 30, -3, 3);
    const float inf = std::numeric_limits<float>::infinity();
    l1[0] = -inf;
    l2[1] = -inf;
    l1[2] = l2[2] = -inf;
    check(std::string("attention_merge ") + dtName(dt), tolFor(dt),
          [&](Backend &be) -> Outs {
            Dev a(be, dt, o1), b(be, dt, o2), la(be, LOOMRT_F32, l1),
                lb(be, LOOMRT_F32, l2);
            be.loomrt_attention_merge(dt, B, S, Nq, D, a.get(), la.as<float>(),
                                      b.get(), lb.as<float>());
            return {a.read(dt), la.read(LOOMRT_F32)};
          });
  }
}

//===----------------------------------------------------------------------===//
// Activations, dropout
//===----------------------------------------------------------------------===//

void testActivations() {
  const int64_t n = 20000;
  const auto x = randomVec(size_t(n), 31, -6, 6), dy = randomVec(size_t(n), 32);
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    for (int approx : {LOOMRT_GELU_ERF, LOOMRT_GELU_TANH})
      check("gelu " + std::string(approx ? "tanh " : "erf ") + t, tolFor(dt),
            [&](Backend &be) -> Outs {
              Dev xd(be, dt, x), y(be, dt, x), g(be, dt, dy);
              be.loomrt_gelu_forward(dt, approx, n, xd.get(), y.get());
              be.loomrt_gelu_backward(dt, approx, n, xd.get(), g.get(),
                                      g.get()); // dx aliases dy
              return {y.read(dt), g.read(dt)};
            });
    check("silu " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev xd(be, dt, x), y(be, dt, x), dyd(be, dt, dy), dx(be, dt, dy);
      be.loomrt_silu_forward(dt, n, xd.get(), y.get());
      be.loomrt_silu_backward(dt, n, xd.get(), dyd.get(), dx.get());
      return {y.read(dt), dx.read(dt)};
    });
    // Fused [rows, 2F] (gate first) and separate [rows, F] tensors.
    const int64_t rows = 40, F = 96;
    const auto fused = randomVec(size_t(rows * 2 * F), 33, -4, 4),
               dout = randomVec(size_t(rows * F), 34);
    for (int isFused = 0; isFused < 2; ++isFused)
      check("swiglu " + std::string(isFused ? "fused " : "separate ") + t,
            tolFor(dt), [&](Backend &be) -> Outs {
              Dev in(be, dt, fused), out(be, dt, dout), d(be, dt, dout),
                  grad(be, dt, fused);
              const int64_t esz = cpu.loomrt_dtype_size(dt);
              const int64_t ld = isFused ? 2 * F : F;
              // Separate: gate and up are the two halves of the buffer.
              char *g = in.as<char>(), *gg = grad.as<char>();
              char *u = isFused ? g + F * esz : g + rows * F * esz;
              char *gu = isFused ? gg + F * esz : gg + rows * F * esz;
              be.loomrt_swiglu_forward(dt, rows, F, ld, g, u, out.get());
              be.loomrt_swiglu_backward(dt, rows, F, ld, g, u, d.get(), gg, gu);
              return {out.read(dt), grad.read(dt)};
            });
    // The mask must be bit-identical: compare exactly for f32.
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f})
      check("dropout p=" + std::to_string(p) + " " + t,
            dt == LOOMRT_F32 ? 0.0 : tolFor(dt), [&](Backend &be) -> Outs {
              // A [30, 50] shard at column 70 of a [30, 300] global tensor.
              Dev xd(be, dt, x), y(be, dt, x), dx(be, dt, x);
              be.loomrt_dropout_forward(dt, 30, 50, xd.get(), y.get(), p,
                                        0x1234abcd5678ull, 70, 300);
              be.loomrt_dropout_backward(dt, 1, 1500, xd.get(), dx.get(), p, 42,
                                         3, 0);
              return {y.read(dt), dx.read(dt)};
            });
  }
}

//===----------------------------------------------------------------------===//
// Embedding, cross-entropy, AdamW
//===----------------------------------------------------------------------===//

void testEmbedding() {
  const int64_t n = 300, H = 48, start = 100, end = 180;
  // Many repeats (the deterministic scatter-add), ids outside the range.
  const std::vector<int32_t> ids = randomInts(size_t(n), 35, 60, 200);
  for (loomrt_dtype dt : kDtypes) {
    const auto table = randomVec(size_t((end - start) * H), 36),
               dout = randomVec(size_t(n * H), 37);
    check(std::string("embedding_forward ") + dtName(dt), 0.0,
          [&](Backend &be) -> Outs {
            Dev id(be, ids), tb(be, dt, table), out(be, dt, dout);
            be.loomrt_embedding_forward(dt, n, H, id.as<int32_t>(), start, end,
                                        tb.get(), out.get());
            return {out.read(dt)};
          });
    for (loomrt_dtype gdt : {dt, LOOMRT_F32})
      check(std::string("embedding_backward ") + dtName(dt) + " grads " +
                dtName(gdt),
            tolFor(gdt), [&](Backend &be) -> Outs {
              Dev id(be, ids), d(be, dt, dout), g0(be, gdt, table),
                  g1(be, gdt, table);
              be.loomrt_embedding_backward(dt, n, H, id.as<int32_t>(), start,
                                           end, d.get(), gdt, g0.get(), 0);
              be.loomrt_embedding_backward(dt, n, H, id.as<int32_t>(), start,
                                           end, d.get(), gdt, g1.get(), 1);
              return {g0.read(gdt), g1.read(gdt)};
            });
  }
}

void testCrossEntropy() {
  const int64_t n = 37, V = 1000;
  const std::vector<int32_t> labels =
      randomInts(size_t(n), 38, 0, int32_t(V - 1));
  std::vector<float> mask(size_t(n), 1.0f);
  for (size_t i = 0; i < mask.size(); i += 3)
    mask[i] = 0.0f;
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    const auto logits = randomVec(size_t(n * V), 39, -8, 8);
    check("cross_entropy " + t, tolFor(LOOMRT_F32), [&](Backend &be) -> Outs {
      Dev x(be, dt, logits), lb(be, labels), m(be, LOOMRT_F32, mask),
          rl(be, nullptr, size_t(n * 4)), loss(be, nullptr, 8);
      be.loomrt_cross_entropy_forward(dt, n, V, x.get(), lb.as<int32_t>(),
                                      m.as<float>(), loss.as<float>(),
                                      rl.as<float>());
      float hostLoss = 0.0f; // a host pointer for the scalar works too
      be.loomrt_cross_entropy_forward(dt, n, V, x.get(), lb.as<int32_t>(),
                                      nullptr, &hostLoss, nullptr);
      return {loss.read(LOOMRT_F32), {hostLoss}, rl.read(LOOMRT_F32)};
    });
    check("cross_entropy_backward " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev x(be, dt, logits), lb(be, labels), m(be, LOOMRT_F32, mask),
          g(be, dt, logits);
      be.loomrt_cross_entropy_backward(dt, n, V, x.get(), lb.as<int32_t>(),
                                       m.as<float>(), 2.0f, g.get());
      be.loomrt_cross_entropy_backward(dt, n, V, x.get(), lb.as<int32_t>(),
                                       nullptr, 1.0f, x.get()); // in place
      return {g.read(dt), x.read(dt)};
    });
    check("cross_entropy all masked " + t, 0.0, [&](Backend &be) -> Outs {
      Dev x(be, dt, logits), lb(be, labels),
          m(be, LOOMRT_F32, std::vector<float>(size_t(n), 0.0f)),
          g(be, dt, logits);
      float loss = -1.0f;
      be.loomrt_cross_entropy_forward(dt, n, V, x.get(), lb.as<int32_t>(),
                                      m.as<float>(), &loss, nullptr);
      be.loomrt_cross_entropy_backward(dt, n, V, x.get(), lb.as<int32_t>(),
                                       m.as<float>(), 1.0f, g.get());
      return {{loss}, g.read(dt)};
    });
    // Vocab-parallel pieces on a shard [300, 700) of the vocabulary whose
    // last 37 columns are padding (left out of the softmax).
    const int64_t v0 = 300, Vl = 400, valid = 363;
    check("vocab-parallel cross-entropy pieces " + t, tolFor(dt),
          [&](Backend &be) -> Outs {
            Dev x(be, dt, logits), lb(be, labels), m(be, LOOMRT_F32, mask);
            // The shard's columns, gathered row by row.
            const int64_t esz = cpu.loomrt_dtype_size(dt);
            Dev shard(be, nullptr, size_t(n * Vl * esz));
            be.loomrt_copy_2d(shard.get(), Vl * esz, x.as<char>() + v0 * esz,
                              V * esz, n, Vl * esz);
            Dev mx(be, nullptr, size_t(n * 4)), se(be, nullptr, size_t(n * 4)),
                tg(be, nullptr, size_t(n * 4)), rl(be, nullptr, size_t(n * 4)),
                sums(be, nullptr, 8),
                g(be, dt, std::vector<float>(size_t(n * Vl)));
            be.loomrt_ce_local_max(dt, n, Vl, valid, shard.get(),
                                   mx.as<float>());
            be.loomrt_ce_local_sum_exp(dt, n, Vl, valid, shard.get(),
                                       mx.as<float>(), se.as<float>());
            be.loomrt_ce_local_target(dt, n, Vl, shard.get(), lb.as<int32_t>(),
                                      v0, tg.as<float>());
            be.loomrt_ce_loss_from_parts(n, mx.as<float>(), se.as<float>(),
                                         tg.as<float>(), m.as<float>(),
                                         rl.as<float>(), sums.as<float>(),
                                         sums.as<float>() + 1);
            Dev scale(be, LOOMRT_F32, std::vector<float>{0.25f});
            be.loomrt_ce_vocab_parallel_backward(
                dt, n, Vl, valid, shard.get(), lb.as<int32_t>(), v0,
                mx.as<float>(), se.as<float>(), m.as<float>(),
                scale.as<float>(), g.get());
            return {mx.read(LOOMRT_F32),   se.read(LOOMRT_F32),
                    tg.read(LOOMRT_F32),   rl.read(LOOMRT_F32),
                    sums.read(LOOMRT_F32), g.read(dt)};
          });
  }
}

void testAdamW() {
  const int64_t n = 5000;
  check("adamw 3 steps", 1e-6, [&](Backend &be) -> Outs {
    Dev p(be, LOOMRT_F32, randomVec(size_t(n), 40)),
        m(be, LOOMRT_F32, std::vector<float>(size_t(n))),
        v(be, LOOMRT_F32, std::vector<float>(size_t(n)));
    for (int step = 1; step <= 3; ++step) {
      Dev g(be, LOOMRT_F32, randomVec(size_t(n), 41 + uint32_t(step)));
      be.loomrt_adamw(n, p.as<float>(), g.as<float>(), m.as<float>(),
                      v.as<float>(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                      nullptr, 0.0f);
    }
    return {p.read(LOOMRT_F32), m.read(LOOMRT_F32), v.read(LOOMRT_F32)};
  });
  // The device's sum of squares: clipped (norm 50 over 1.0), then a
  // non-finite one that must leave everything unchanged.
  check("adamw clip and skip", 1e-6, [&](Backend &be) -> Outs {
    Dev p(be, LOOMRT_F32, randomVec(size_t(n), 40)),
        m(be, LOOMRT_F32, std::vector<float>(size_t(n), 0.1f)),
        v(be, LOOMRT_F32, std::vector<float>(size_t(n), 0.2f)),
        g(be, LOOMRT_F32, randomVec(size_t(n), 45)),
        big(be, LOOMRT_F32, std::vector<float>{2500.0f}),
        inf(be, LOOMRT_F32,
            std::vector<float>{std::numeric_limits<float>::infinity()});
    be.loomrt_adamw(n, p.as<float>(), g.as<float>(), m.as<float>(),
                    v.as<float>(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1,
                    big.as<float>(), 1.0f);
    be.loomrt_adamw(n, p.as<float>(), g.as<float>(), m.as<float>(),
                    v.as<float>(), 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 2,
                    inf.as<float>(), 1.0f);
    return {p.read(LOOMRT_F32), m.read(LOOMRT_F32), v.read(LOOMRT_F32)};
  });
  // The multi-tensor step: more tensors than one launch takes (64), odd
  // sizes across chunks, an empty one, decay and a bf16 model copy on some;
  // clipped, then skipped. The tensors are slices of shared buffers.
  auto multi = [&](Backend &be) -> Outs {
    std::vector<int64_t> sizes, offsets;
    int64_t total = 0;
    for (int k = 0; k < 70; ++k) {
      sizes.push_back(k == 5 ? 0 : (k * 997) % 9000 + 1);
      offsets.push_back(total);
      total += sizes.back();
    }
    Dev p(be, LOOMRT_F32, randomVec(size_t(total), 46)),
        m(be, LOOMRT_F32, std::vector<float>(size_t(total), 0.1f)),
        v(be, LOOMRT_F32, std::vector<float>(size_t(total), 0.2f)),
        g(be, LOOMRT_F32, randomVec(size_t(total), 47)),
        model(be, LOOMRT_BF16, std::vector<float>(size_t(total), 3.0f)),
        big(be, LOOMRT_F32, std::vector<float>{2500.0f}),
        inf(be, LOOMRT_F32,
            std::vector<float>{std::numeric_limits<float>::infinity()});
    std::vector<loomrt_adamw_tensor> table;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t at = offsets[k];
      table.push_back({sizes[k], p.as<float>() + at, g.as<float>() + at,
                       m.as<float>() + at, v.as<float>() + at,
                       k % 3 ? model.as<uint16_t>() + at : nullptr,
                       k % 2 ? 0.1f : 0.0f});
    }
    for (int step = 1; step <= 2; ++step)
      be.loomrt_adamw_multi(
          int64_t(table.size()), table.data(), LOOMRT_BF16, 1e-3f, 0.9f, 0.95f,
          1e-8f, step, step == 1 ? big.as<float>() : inf.as<float>(), 1.0f);
    return {p.read(LOOMRT_F32), m.read(LOOMRT_F32), v.read(LOOMRT_F32),
            model.read(LOOMRT_BF16)};
  };
  // The f32 state as loomrt_adamw's; the bf16 copy one rounding apart (an
  // f32 ulp of difference may cross a bf16 rounding boundary).
  check("adamw multi clip and skip", 1e-6, [&](Backend &be) {
    Outs o = multi(be);
    o.pop_back();
    return o;
  });
  check("adamw multi model copy", tolFor(LOOMRT_BF16),
        [&](Backend &be) { return Outs{multi(be).back()}; });
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

void testMoe() {
  // T tokens, top-2 of E = 4 experts; expert 3's logit is far below the
  // others, so it gets no token (a group with no rows). Rows 0 and 1 tie
  // (ties go to the lower expert).
  const int64_t T = 37, E = 4, k = 2, H = 48;
  std::vector<float> logits = randomVec(size_t(T * E), 80, -3, 3);
  for (int64_t t = 0; t < T; ++t)
    logits[size_t(t * E + 3)] = -20.0f;
  for (int64_t e = 0; e < 3; ++e) {
    logits[size_t(e)] = 0.5f;
    logits[size_t(E + e)] = e == 0 ? -1.0f : 0.25f;
  }
  const auto dprobs = randomVec(size_t(T * k), 81);
  for (int32_t pre = 0; pre < 2; ++pre)
    check("moe_route pre_softmax=" + std::to_string(pre), tolFor(LOOMRT_F32),
          [&](Backend &be) -> Outs {
            Dev l(be, LOOMRT_F32, logits), p(be, nullptr, size_t(T * k * 4)),
                ex(be, nullptr, size_t(T * k * 4)), dp(be, LOOMRT_F32, dprobs),
                dl(be, LOOMRT_F32, logits);
            be.loomrt_moe_route_forward(T, E, k, pre, l.as<float>(),
                                        p.as<float>(), ex.as<int32_t>());
            be.loomrt_moe_route_backward(T, E, k, pre, l.as<float>(),
                                         ex.as<int32_t>(), dp.as<float>(),
                                         dl.as<float>());
            // Ids are compared as exact floats within the f32 tolerance:
            // the smallest difference, 1 in 3, is far beyond it.
            return {p.read(LOOMRT_F32), ex.readInts(), dl.read(LOOMRT_F32)};
          });

  // Fixed experts for the rest: two distinct ones of 0..2 per token.
  std::vector<int32_t> experts(size_t(T * k));
  {
    const std::vector<int32_t> first = randomInts(size_t(T), 82, 0, 2),
                               step = randomInts(size_t(T), 83, 1, 2);
    for (int64_t t = 0; t < T; ++t) {
      experts[size_t(t * k)] = first[size_t(t)];
      experts[size_t(t * k + 1)] = (first[size_t(t)] + step[size_t(t)]) % 3;
    }
  }
  // The counts exactly; the losses from them, and from counts of a
  // micro-batch three times this rank's tokens (this rank's share).
  check("moe_router_loss", tolFor(LOOMRT_F32), [&](Backend &be) -> Outs {
    Dev l(be, LOOMRT_F32, logits), ex(be, experts), losses(be, nullptr, 16),
        counts(be, LOOMRT_F32, std::vector<float>(size_t(E), -1.0f)),
        scale(be, LOOMRT_F32, std::vector<float>{0.5f}),
        dl(be, LOOMRT_F32, logits), dlShare(be, LOOMRT_F32, logits);
    be.loomrt_moe_route_counts(T, E, k, ex.as<int32_t>(), counts.as<float>());
    be.loomrt_moe_router_loss_forward(T, E, k, 0.01f, 0.001f, l.as<float>(),
                                      counts.as<float>(), losses.as<float>(),
                                      losses.as<float>() + 1);
    be.loomrt_moe_router_loss_backward(T, E, k, 0.01f, 0.001f, l.as<float>(),
                                       counts.as<float>(), scale.as<float>(),
                                       dl.as<float>());
    std::vector<float> tripled = counts.read(LOOMRT_F32);
    for (float &c : tripled)
      c *= 3.0f;
    Dev whole(be, LOOMRT_F32, tripled);
    be.loomrt_moe_router_loss_forward(T, E, k, 0.01f, 0.001f, l.as<float>(),
                                      whole.as<float>(), losses.as<float>() + 2,
                                      losses.as<float>() + 3);
    be.loomrt_moe_router_loss_backward(T, E, k, 0.01f, 0.001f, l.as<float>(),
                                       whole.as<float>(), scale.as<float>(),
                                       dlShare.as<float>());
    const std::vector<float> all = losses.read(LOOMRT_F32);
    // Each loss on its own scale.
    return {counts.read(LOOMRT_F32), {all[0]}, {all[1]}, {all[2]}, {all[3]},
            dl.read(LOOMRT_F32), dlShare.read(LOOMRT_F32)};
  });

  const std::vector<float> probs = randomVec(size_t(T * k), 84, 0, 1);
  const int64_t N = T * k + 5; // capacity padding: rows no pair maps to
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    const auto x = randomVec(size_t(T * H), 85),
               dout = randomVec(size_t(T * H), 86),
               drowsIn = randomVec(size_t(T * k * H), 87);
    // Dispatch is a copy and a stable sort: exact.
    check("moe_permute " + t, 0.0, [&](Backend &be) -> Outs {
      Dev xd(be, dt, x), ex(be, experts), rows(be, dt, drowsIn),
          counts(be, std::vector<int32_t>(size_t(E), -1)),
          map(be, std::vector<int32_t>(size_t(T * k), -1));
      be.loomrt_moe_permute(dt, T, H, k, E, T * k, 0, xd.get(),
                            ex.as<int32_t>(), rows.get(), counts.as<int32_t>(),
                            map.as<int32_t>());
      return {rows.read(dt), counts.readInts(), map.readInts()};
    });
    // Capacity 9 of the pairs each expert received, both policies, then
    // dispatched packed and padded to the capacity (and combined back).
    const int64_t capacity = 9;
    for (int32_t policy = 0; policy < 2; ++policy)
      for (int64_t pad : {int64_t(0), capacity})
        check("moe_drop/permute/unpermute policy=" + std::to_string(policy) +
                  " pad=" + std::to_string(pad) + " " + t,
              tolFor(dt), [&](Backend &be) -> Outs {
                const int64_t rowsN = E * capacity;
                Dev pr(be, LOOMRT_F32, probs), ex(be, experts),
                    kept(be, std::vector<int32_t>(size_t(T * k), 7)),
                    xd(be, dt, x), rows(be, dt, randomVec(size_t(rowsN * H), 92)),
                    counts(be, std::vector<int32_t>(size_t(E), -1)),
                    map(be, std::vector<int32_t>(size_t(T * k), 7)),
                    out(be, dt, x), drows(be, dt, randomVec(size_t(rowsN * H), 93)),
                    dpr(be, LOOMRT_F32, probs), dod(be, dt, dout);
                be.loomrt_moe_drop(T, E, k, capacity, policy, pr.as<float>(),
                                   ex.as<int32_t>(), kept.as<int32_t>());
                be.loomrt_moe_permute(dt, T, H, k, E, rowsN, pad, xd.get(),
                                      kept.as<int32_t>(), rows.get(),
                                      counts.as<int32_t>(), map.as<int32_t>());
                be.loomrt_moe_unpermute(dt, T, H, k, rows.get(), pr.as<float>(),
                                        map.as<int32_t>(), out.get());
                be.loomrt_moe_unpermute_backward(
                    dt, T, H, k, rowsN, rows.get(), pr.as<float>(),
                    map.as<int32_t>(), dod.get(), drows.get(), dpr.as<float>());
                return {kept.readInts(), rows.read(dt),  counts.readInts(),
                        map.readInts(),  out.read(dt),   drows.read(dt),
                        dpr.read(LOOMRT_F32)};
              });
    check("moe_permute_backward/unpermute/unpermute_backward " + t, tolFor(dt),
          [&](Backend &be) -> Outs {
            // Each backend's own row_map (checked exactly above).
            Dev xd(be, dt, x), ex(be, experts), rows(be, dt, drowsIn),
                counts(be, nullptr, size_t(E * 4)),
                map(be, nullptr, size_t(T * k * 4));
            be.loomrt_moe_permute(dt, T, H, k, E, T * k, 0, xd.get(),
                                  ex.as<int32_t>(), rows.get(),
                                  counts.as<int32_t>(), map.as<int32_t>());
            Dev dr(be, dt, drowsIn), dx(be, dt, x);
            be.loomrt_moe_permute_backward(dt, T, H, k, dr.get(),
                                           map.as<int32_t>(), dx.get());
            Dev pr(be, LOOMRT_F32, probs), out(be, dt, x);
            be.loomrt_moe_unpermute(dt, T, H, k, dr.get(), pr.as<float>(),
                                    map.as<int32_t>(), out.get());
            Dev dod(be, dt, dout), drows(be, dt, randomVec(size_t(N * H), 88)),
                dpr(be, LOOMRT_F32, probs);
            be.loomrt_moe_unpermute_backward(
                dt, T, H, k, N, dr.get(), pr.as<float>(), map.as<int32_t>(),
                dod.get(), drows.get(), dpr.as<float>());
            return {dx.read(dt), out.read(dt), drows.read(dt),
                    dpr.read(LOOMRT_F32)};
          });

    // The allgather dispatcher's rows of group rank 1's experts (2 of 4
    // over 2 ranks) out of and back into the gathered rows, an empty
    // expert among them and rows past the counts: exact copies, the counts
    // read on the device.
    check("moe_take/put_expert_rows " + t, 0.0, [&](Backend &be) -> Outs {
      const int64_t P = 2, r = 1, rankRows = 13, M = P * rankRows;
      const std::vector<int32_t> all = {3, 4, 0, 5, 2, 0, 6, 3};
      Dev cnt(be, all), gathered(be, dt, randomVec(size_t(P * rankRows * H), 94)),
          dispatched(be, dt, randomVec(size_t(M * H), 95)),
          local(be, std::vector<int32_t>(2, -1)),
          back(be, dt, randomVec(size_t(P * rankRows * H), 96));
      be.loomrt_moe_take_expert_rows(dt, P, r, E, rankRows, H, M,
                                     cnt.as<int32_t>(), gathered.get(),
                                     dispatched.get(), local.as<int32_t>());
      be.loomrt_moe_put_expert_rows(dt, P, r, E, rankRows, H, M,
                                    cnt.as<int32_t>(), dispatched.get(),
                                    back.get());
      return {dispatched.read(dt), local.readInts(), back.read(dt)};
    });

    // Grouped linear: groups that cross 64-row tiles, an empty group, and
    // 6 rows past the groups (zero in y and dx; y and dx start nonzero).
    const int64_t M = 150, Nf = 36, K = 70;
    const std::vector<int32_t> groupRows = {70, 0, 65, 9};
    const auto gx = randomVec(size_t(M * K), 89),
               gW = randomVec(size_t(E * Nf * K), 90),
               gdy = randomVec(size_t(M * Nf), 91);
    check("grouped_linear_forward/backward_data " + t, tolFor(dt),
          [&](Backend &be) -> Outs {
            Dev xd(be, dt, gx), wd(be, dt, gW), dyd(be, dt, gdy),
                cnt(be, groupRows), y(be, dt, gdy), dx(be, dt, gx);
            be.loomrt_grouped_linear_forward(dt, M, Nf, K, E, xd.get(),
                                             wd.get(), cnt.as<int32_t>(),
                                             y.get());
            be.loomrt_grouped_linear_backward_data(dt, M, Nf, K, E, dyd.get(),
                                                   wd.get(), cnt.as<int32_t>(),
                                                   dx.get());
            return {y.read(dt), dx.read(dt)};
          });
    for (loomrt_dtype gdt : {dt, LOOMRT_F32})
      check("grouped_linear_backward_weight " + t + " grads " + dtName(gdt),
            tolFor(gdt), [&](Backend &be) -> Outs {
              Dev xd(be, dt, gx), dyd(be, dt, gdy), cnt(be, groupRows);
              // Expert 1 has no rows: zero, or unchanged when accumulating.
              Dev dW0(be, gdt, gW), dW1(be, gdt, gW);
              be.loomrt_grouped_linear_backward_weight(
                  dt, M, Nf, K, E, dyd.get(), xd.get(), cnt.as<int32_t>(), gdt,
                  dW0.get(), 0);
              be.loomrt_grouped_linear_backward_weight(
                  dt, M, Nf, K, E, dyd.get(), xd.get(), cnt.as<int32_t>(), gdt,
                  dW1.get(), 1);
              return {dW0.read(gdt), dW1.read(gdt)};
            });

    const int64_t rows = 29, Hg = 300;
    const auto sx = randomVec(size_t(rows * Hg), 92),
               gate = randomVec(size_t(rows), 93, -4, 4),
               sdout = randomVec(size_t(rows * Hg), 94);
    check("sigmoid_gate " + t, tolFor(dt), [&](Backend &be) -> Outs {
      Dev xd(be, dt, sx), gd(be, dt, gate), dod(be, dt, sdout), out(be, dt, sx),
          dx(be, dt, sx), dg(be, dt, gate);
      be.loomrt_sigmoid_gate_forward(dt, rows, Hg, xd.get(), gd.get(),
                                     out.get());
      be.loomrt_sigmoid_gate_backward(dt, rows, Hg, xd.get(), gd.get(),
                                      dod.get(), dx.get(), dg.get());
      return {out.read(dt), dx.read(dt), dg.read(dt)};
    });
  }
}

//===----------------------------------------------------------------------===//
// Misuse
//===----------------------------------------------------------------------===//

/// Runs f in a child process and returns what it printed on stderr, plus a
/// note unless it died abnormally (misuse must end the job).
std::string misuseOutput(Backend &be, const std::function<void(Backend &)> &f) {
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0)
    return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    f(be); // the runtime's checks run before any CUDA call
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[256];
  for (ssize_t got; (got = read(fds[0], buf, sizeof(buf))) > 0;)
    text.append(buf, size_t(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    text += " (returned normally)";
  return text;
}

void testMisuse() {
  const std::pair<const char *, std::function<void(Backend &)>> cases[] = {
      {"bad dtype",
       [](Backend &be) {
         float x = 0;
         be.loomrt_gemm(0, 0, 1, 1, 1, 1.0f, 7, &x, 1, 0, LOOMRT_F32, &x, 1, 0,
                        0.0f, LOOMRT_F32, &x, 1, 0, 1);
       }},
      {"heads not divisible",
       [](Backend &be) {
         be.loomrt_attention_forward(
             LOOMRT_F32, 1, 1, 1, 3, 2, 8, 1.0f, 0, nullptr, nullptr, nullptr,
             nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
       }},
      {"collective before init",
       [](Backend &be) {
         be.loomrt_all_reduce(nullptr, LOOMRT_F32, LOOMRT_SUM, nullptr, nullptr,
                              0);
       }},
      {"dropout probability",
       [](Backend &be) {
         be.loomrt_dropout_forward(LOOMRT_F32, 1, 1, nullptr, nullptr, 2.0f, 0,
                                   0, 1);
       }},
  };
  for (const auto &[what, f] : cases) {
    const std::string want = misuseOutput(cpu, f), got = misuseOutput(cuda, f);
    ++checks;
    const bool ok = want == got;
    std::printf("%s misuse (%s): \"%s\"\n", ok ? "ok  " : "FAIL", what,
                got.substr(0, got.find('\n')).c_str());
    if (!ok) {
      std::printf("     cpu said \"%s\"\n", want.c_str());
      ++failures;
    }
  }
}

//===----------------------------------------------------------------------===//
// Communication (mpirun -np 2 or more, one GPU per rank)
//===----------------------------------------------------------------------===//

void testComm() {
  const int rank = cpu.loomrt_world_rank(), P = cpu.loomrt_world_size();
  const uint32_t seed = 100 + uint32_t(rank);
  for (loomrt_dtype dt : kDtypes) {
    const std::string t = dtName(dt);
    const auto x = randomVec(1000, seed);
    for (int op : {LOOMRT_SUM, LOOMRT_MAX})
      check("all_reduce " + std::string(op ? "max " : "sum ") + t, tolFor(dt),
            [&](Backend &be) -> Outs {
              Dev s(be, dt, x), r(be, dt, x);
              be.loomrt_all_reduce(be.loomrt_comm_world(), dt, op, s.get(),
                                   r.get(), 1000);
              be.loomrt_all_reduce(be.loomrt_comm_world(), dt, op, s.get(),
                                   s.get(), 1000); // in place
              return {r.read(dt), s.read(dt)};
            });
    check("broadcast " + t, 0.0, [&](Backend &be) -> Outs {
      Dev b(be, dt, x);
      be.loomrt_broadcast(be.loomrt_comm_world(), dt, b.get(), 1000, P - 1);
      return {b.read(dt)};
    });
    const int64_t shape[3] = {4, 6 * P, 5};
    for (int32_t dim = 0; dim < 3; ++dim) {
      int64_t local[3] = {4, 6 * P, 5};
      local[dim] = dim == 1 ? 6 : local[dim];
      const int64_t ln = local[0] * local[1] * local[2];
      check("all_gather dim " + std::to_string(dim) + " " + t, 0.0,
            [&](Backend &be) -> Outs {
              Dev s(be, dt, randomVec(size_t(ln), seed + 1)),
                  r(be, nullptr, size_t(ln * P * 4));
              be.loomrt_all_gather(be.loomrt_comm_world(), dt, 3, local, dim,
                                   s.get(), r.get());
              std::vector<float> v = r.read(dt);
              v.resize(size_t(ln * P));
              return {v};
            });
    }
    for (int32_t dim : {0, 1}) {
      int64_t full[3] = {2 * P, 6 * P, 5};
      const int64_t fn = full[0] * full[1] * full[2];
      check("reduce_scatter dim " + std::to_string(dim) + " " + t, tolFor(dt),
            [&](Backend &be) -> Outs {
              Dev s(be, dt, randomVec(size_t(fn), seed + 2)),
                  r(be, nullptr, size_t(fn / P * 4));
              be.loomrt_reduce_scatter(be.loomrt_comm_world(), dt, 3, full, dim,
                                       s.get(), r.get());
              std::vector<float> v = r.read(dt);
              v.resize(size_t(fn / P));
              return {v};
            });
    }
    (void)shape;
    check("all_to_all split 1 concat 0 " + t, 0.0, [&](Backend &be) -> Outs {
      int64_t s3[3] = {3, 4 * P, 7};
      const int64_t tn = s3[0] * s3[1] * s3[2];
      Dev s(be, dt, randomVec(size_t(tn), seed + 3)),
          r(be, nullptr, size_t(tn * 4));
      be.loomrt_all_to_all(be.loomrt_comm_world(), dt, 3, s3, 1, 0, s.get(),
                           r.get());
      std::vector<float> v = r.read(dt);
      v.resize(size_t(tn));
      return {v};
    });
  }
  check("batched p2p ring both directions", 0.0, [&](Backend &be) -> Outs {
    loomrt_comm w = be.loomrt_comm_world();
    Dev a(be, LOOMRT_F32, randomVec(500, seed + 4)),
        b(be, LOOMRT_BF16, randomVec(300, seed + 5)), ra(be, nullptr, 2000),
        rb(be, nullptr, 600);
    be.loomrt_p2p_begin(w);
    be.loomrt_send(w, LOOMRT_F32, a.get(), 500, (rank + 1) % P);
    be.loomrt_send(w, LOOMRT_BF16, b.get(), 300, (rank + P - 1) % P);
    be.loomrt_recv(w, LOOMRT_F32, ra.get(), 500, (rank + P - 1) % P);
    be.loomrt_recv(w, LOOMRT_BF16, rb.get(), 300, (rank + 1) % P);
    be.loomrt_p2p_end(w);
    return {ra.read(LOOMRT_F32), rb.read(LOOMRT_BF16)};
  });
  check("comm_create from lists", 0.0, [&](Backend &be) -> Outs {
    // Reverse order: group rank r is world rank P-1-r.
    std::vector<int32_t> sizes = {P}, ranks;
    for (int r = P - 1; r >= 0; --r)
      ranks.push_back(r);
    loomrt_comm c = be.loomrt_comm_create(1, sizes.data(), ranks.data());
    Dev x(be, LOOMRT_F32, std::vector<float>{float(be.loomrt_comm_rank(c))});
    be.loomrt_broadcast(c, LOOMRT_F32, x.get(), 1, 0);
    std::vector<float> v = {float(be.loomrt_comm_rank(c)),
                            float(be.loomrt_comm_world_rank_of(c, 0))};
    std::vector<float> got = x.read(LOOMRT_F32);
    v.insert(v.end(), got.begin(), got.end());
    be.loomrt_barrier(c);
    be.loomrt_comm_destroy(c);
    return {v};
  });
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

/// The number of GPUs, or -1 with a reason when none can be used.
int countGpus(std::string &why) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    why = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(err);
    return -1;
  }
  if (count == 0)
    why = "cudaGetDeviceCount found 0 devices";
  return count;
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 4 || (std::strcmp(argv[1], "kernels") != 0 &&
                    std::strcmp(argv[1], "comm") != 0)) {
    std::fprintf(stderr,
                 "usage: %s kernels|comm libloomrt_cpu.so "
                 "libloomrt_cuda.so\n",
                 argv[0]);
    return 2;
  }
  const bool comm = std::strcmp(argv[1], "comm") == 0;
  // Both libraries must load and resolve every function, GPU or not.
  for (auto [be, label, path] :
       {std::tuple{&cpu, "cpu", argv[2]}, std::tuple{&cuda, "cuda", argv[3]}}) {
    std::string err = be->load(label, path);
    if (!err.empty()) {
      std::printf("FAIL cannot load the %s backend: %s\n", label, err.c_str());
      return 1;
    }
  }
  // The same library twice checks the harness itself (every case runs and
  // agrees exactly with itself); no GPU is involved.
  const bool selfCheck = std::strcmp(argv[2], argv[3]) == 0;
  std::string why;
  const int gpus = selfCheck ? 0 : countGpus(why);
  if (selfCheck && comm) {
    std::printf("the comm test needs two different backends\n");
    return 2;
  }
  if (!selfCheck && gpus <= 0) {
    std::printf("SKIPPED: no GPU (%s); both backends load and resolve every "
                "loomrt function, nothing ran on a GPU\n",
                why.c_str());
    return kSkip;
  }

  if (comm) {
    // The cpu backend initializes MPI; the cuda one finds it initialized.
    cpu.loomrt_init(&argc, &argv);
    const int P = cpu.loomrt_world_size();
    if (P < 2 || gpus < P) {
      std::printf("SKIPPED: %d ranks on %d GPU(s); the NCCL test needs at "
                  "least 2 ranks and one GPU per rank\n",
                  P, gpus);
      cpu.loomrt_finalize();
      return kSkip;
    }
    cuda.loomrt_init(&argc, &argv);
    testComm();
    cuda.loomrt_finalize();
    cpu.loomrt_finalize();
  } else {
    testCasts();
    testLargeCastAndSupport();
    testChecksAndHelpers();
    testGemm();
    testLinear();
    testNorms();
    testRope();
    testAttention();
    testActivations();
    testEmbedding();
    testCrossEntropy();
    testAdamW();
    testMoe();
    testMisuse();
  }
  std::printf("%d of %d comparisons failed\n", failures, checks);
  return failures ? 1 : 0;
}
