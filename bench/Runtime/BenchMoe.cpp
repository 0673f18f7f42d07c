//===- BenchMoe.cpp - One MoE layer vs a dense MLP of its active size -----===//
//
// Forward + backward of one mixture-of-experts MLP through the runtime's
// entry points (router linear, top-k routing, dispatch order, grouped
// SwiGLU experts, combine, and every backward), next to a dense SwiGLU MLP
// with the same active parameters per token (intermediate size k x F), in
// the same run. Both are timed per iteration in turn; the counters give
// each one's ms and the ratio moe / dense (the cost of routing and of
// grouping rows by expert: 1.0 would be free).
//
//   bench-moe [--benchmark_filter=...] [--benchmark_min_time=...]
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

namespace {

struct Shape {
  const char *name;
  int64_t T, H, F, E, k; // tokens, hidden, expert FFN size, experts, top-k
};

const Shape kShapes[] = {
    {"mixtral_like_1k", 1024, 512, 1024, 8, 2},
    {"qwen_moe_like_1k", 1024, 512, 256, 16, 4},
};

std::vector<float> randomVec(size_t n, float scale) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// Every buffer of one MoE layer's forward and backward.
struct MoeLayer {
  const Shape s;
  int64_t N; // dispatched rows: T * k (dropless)
  std::vector<float> x, router, w1, w3, w2, dy;
  std::vector<float> logits, probs, rows, gate, up, act, out, y;
  std::vector<int32_t> experts, counts, rowMap;
  std::vector<float> dout, drows, dprobs, dact, dgate, dup, drowsIn, dx,
      dlogits, dw1, dw3, dw2, drouter, dxRouter;

  explicit MoeLayer(const Shape &shape)
      : s(shape), N(shape.T * shape.k), x(randomVec(size_t(s.T * s.H), 1.0f)),
        router(randomVec(size_t(s.E * s.H), 0.1f)),
        w1(randomVec(size_t(s.E * s.F * s.H), 0.05f)),
        w3(randomVec(size_t(s.E * s.F * s.H), 0.05f)),
        w2(randomVec(size_t(s.E * s.H * s.F), 0.05f)),
        dy(randomVec(size_t(s.T * s.H), 1.0f)) {
    auto f = [](int64_t n) { return std::vector<float>(size_t(n)); };
    logits = f(s.T * s.E);
    probs = f(s.T * s.k);
    rows = f(N * s.H);
    gate = f(N * s.F);
    up = f(N * s.F);
    act = f(N * s.F);
    out = f(N * s.H);
    y = f(s.T * s.H);
    experts.resize(size_t(s.T * s.k));
    counts.resize(size_t(s.E));
    rowMap.resize(size_t(s.T * s.k));
    drows = f(N * s.H);
    dprobs = f(s.T * s.k);
    dact = f(N * s.F);
    dgate = f(N * s.F);
    dup = f(N * s.F);
    drowsIn = f(N * s.H);
    dx = f(s.T * s.H);
    dlogits = f(s.T * s.E);
    dw1 = f(s.E * s.F * s.H);
    dw3 = f(s.E * s.F * s.H);
    dw2 = f(s.E * s.H * s.F);
    drouter = f(s.E * s.H);
    dxRouter = f(s.T * s.H);
  }

  void step() {
    const loomrt_dtype f32 = LOOMRT_F32;
    const int64_t T = s.T, H = s.H, F = s.F, E = s.E, k = s.k;
    loomrt_linear_forward(f32, T, E, H, x.data(), router.data(), nullptr,
                          logits.data());
    loomrt_moe_route_forward(T, E, k, 0, logits.data(), probs.data(),
                             experts.data());
    loomrt_moe_permute(f32, T, H, k, E, N, 0, x.data(), experts.data(),
                       rows.data(), counts.data(), rowMap.data());
    loomrt_grouped_linear_forward(f32, N, F, H, E, rows.data(), w1.data(),
                                  counts.data(), gate.data());
    loomrt_grouped_linear_forward(f32, N, F, H, E, rows.data(), w3.data(),
                                  counts.data(), up.data());
    loomrt_swiglu_forward(f32, N, F, F, gate.data(), up.data(), act.data());
    loomrt_grouped_linear_forward(f32, N, H, F, E, act.data(), w2.data(),
                                  counts.data(), out.data());
    loomrt_moe_unpermute(f32, T, H, k, out.data(), probs.data(),
                         rowMap.data(), y.data());
    // Backward.
    loomrt_moe_unpermute_backward(f32, T, H, k, N, out.data(), probs.data(),
                                  rowMap.data(), dy.data(), drows.data(),
                                  dprobs.data());
    loomrt_grouped_linear_backward_data(f32, N, H, F, E, drows.data(),
                                        w2.data(), counts.data(), dact.data());
    loomrt_grouped_linear_backward_weight(f32, N, H, F, E, drows.data(),
                                          act.data(), counts.data(), f32,
                                          dw2.data(), 0);
    loomrt_swiglu_backward(f32, N, F, F, gate.data(), up.data(), dact.data(),
                           dgate.data(), dup.data());
    loomrt_grouped_linear_backward_data(f32, N, F, H, E, dgate.data(),
                                        w1.data(), counts.data(),
                                        drowsIn.data());
    loomrt_grouped_linear_backward_weight(f32, N, F, H, E, dgate.data(),
                                          rows.data(), counts.data(), f32,
                                          dw1.data(), 0);
    loomrt_grouped_linear_backward_data(f32, N, F, H, E, dup.data(),
                                        w3.data(), counts.data(), drows.data());
    loomrt_add(f32, N * H, drowsIn.data(), drows.data(), drowsIn.data());
    loomrt_grouped_linear_backward_weight(f32, N, F, H, E, dup.data(),
                                          rows.data(), counts.data(), f32,
                                          dw3.data(), 0);
    loomrt_moe_permute_backward(f32, T, H, k, drowsIn.data(), rowMap.data(),
                                dx.data());
    loomrt_moe_route_backward(T, E, k, 0, logits.data(), experts.data(),
                              dprobs.data(), dlogits.data());
    loomrt_linear_backward_data(f32, T, E, H, dlogits.data(), router.data(),
                                dx.data(), 1);
    loomrt_linear_backward_weight(f32, T, E, H, dlogits.data(), x.data(), f32,
                                  drouter.data(), nullptr, 0);
  }
};

/// A dense SwiGLU MLP with intermediate size k x F: the same multiply-adds
/// per token as the MoE layer's experts.
struct DenseLayer {
  int64_t T, H, F;
  std::vector<float> x, w1, w3, w2, dy, gate, up, act, y, dact, dgate, dup,
      dx, dw1, dw3, dw2;

  explicit DenseLayer(const Shape &s)
      : T(s.T), H(s.H), F(s.F * s.k), x(randomVec(size_t(T * H), 1.0f)),
        w1(randomVec(size_t(F * H), 0.05f)), w3(randomVec(size_t(F * H), 0.05f)),
        w2(randomVec(size_t(H * F), 0.05f)), dy(randomVec(size_t(T * H), 1.0f)) {
    auto f = [](int64_t n) { return std::vector<float>(size_t(n)); };
    gate = f(T * F);
    up = f(T * F);
    act = f(T * F);
    y = f(T * H);
    dact = f(T * F);
    dgate = f(T * F);
    dup = f(T * F);
    dx = f(T * H);
    dw1 = f(F * H);
    dw3 = f(F * H);
    dw2 = f(H * F);
  }

  void step() {
    const loomrt_dtype f32 = LOOMRT_F32;
    loomrt_linear_forward(f32, T, F, H, x.data(), w1.data(), nullptr,
                          gate.data());
    loomrt_linear_forward(f32, T, F, H, x.data(), w3.data(), nullptr,
                          up.data());
    loomrt_swiglu_forward(f32, T, F, F, gate.data(), up.data(), act.data());
    loomrt_linear_forward(f32, T, H, F, act.data(), w2.data(), nullptr,
                          y.data());
    loomrt_linear_backward_data(f32, T, H, F, dy.data(), w2.data(),
                                dact.data(), 0);
    loomrt_linear_backward_weight(f32, T, H, F, dy.data(), act.data(), f32,
                                  dw2.data(), nullptr, 0);
    loomrt_swiglu_backward(f32, T, F, F, gate.data(), up.data(), dact.data(),
                           dgate.data(), dup.data());
    loomrt_linear_backward_data(f32, T, F, H, dgate.data(), w1.data(),
                                dx.data(), 0);
    loomrt_linear_backward_weight(f32, T, F, H, dgate.data(), x.data(), f32,
                                  dw1.data(), nullptr, 0);
    loomrt_linear_backward_data(f32, T, F, H, dup.data(), w3.data(),
                                dx.data(), 1);
    loomrt_linear_backward_weight(f32, T, F, H, dup.data(), x.data(), f32,
                                  dw3.data(), nullptr, 0);
  }
};

void BM_MoeVsDense(benchmark::State &state, Shape s) {
  MoeLayer moe(s);
  DenseLayer dense(s);
  moe.step(); // warm up both
  dense.step();
  double moeMs = 0, denseMs = 0;
  int64_t n = 0;
  for (auto _ : state) {
    auto t = Clock::now();
    moe.step();
    moeMs += msSince(t);
    t = Clock::now();
    dense.step();
    denseMs += msSince(t);
    ++n;
  }
  state.counters["moe_ms"] = moeMs / double(n);
  state.counters["dense_ms"] = denseMs / double(n);
  state.counters["moe_over_dense"] = moeMs / denseMs;
  // Expert GEMM flops of forward + backward (3 GEMMs, each 3x): the same
  // for both.
  state.counters["expert_gflops_per_s"] = benchmark::Counter(
      double(n) * 3.0 * 3.0 * 2.0 * double(s.T * s.k * s.F * s.H) / 1e9 /
      (moeMs / 1e3));
}

} // namespace

int main(int argc, char **argv) {
  for (const Shape &s : kShapes)
    benchmark::RegisterBenchmark(s.name, BM_MoeVsDense, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
