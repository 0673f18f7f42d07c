//===- BenchGemm.cpp - Runtime GEMM entry points vs raw OpenBLAS ----------===//
//
// GFLOP/s of loomrt_linear_forward / loomrt_gemm (f32 and bf16) next to a
// direct cblas_sgemm call on the same shapes, so the cost of the runtime
// layer (argument checks, dtype widening) is visible. Shapes are the GEMMs
// of one GPT-2-124M layer at 1024 tokens plus a Llama-style MLP slice.
//
//   bench-gemm [--benchmark_filter=...] [--benchmark_min_time=...]
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <vector>

namespace {
struct Shape {
  const char *name;
  int64_t M, N, K; // y[M,N] = x[M,K] W[N,K]^T
};

const Shape kShapes[] = {
    {"gpt2_qkv", 1024, 2304, 768}, {"gpt2_proj", 1024, 768, 768},
    {"gpt2_fc1", 1024, 3072, 768}, {"gpt2_fc2", 1024, 768, 3072},
    {"llama_up", 512, 2816, 1024}, {"lm_head_256", 256, 8192, 768},
};

std::vector<float> randomVec(size_t n) {
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(gen);
  return v;
}

void setFlops(benchmark::State &state, const Shape &s) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * double(s.M) * double(s.N) * double(s.K) * 1e-9 *
                             double(state.iterations()),
                         benchmark::Counter::kIsRate);
}

void rawSgemm(benchmark::State &state, Shape s) {
  auto x = randomVec(size_t(s.M * s.K)), w = randomVec(size_t(s.N * s.K));
  std::vector<float> y(size_t(s.M * s.N));
  // The runtime pins OpenBLAS to one thread (its GEMMs split work over the
  // runtime's own threads); the baseline gets OpenBLAS's own threading with
  // the same thread count.
  openblas_set_num_threads(loomrt_get_num_threads());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(s.M), int(s.N),
                int(s.K), 1.0f, x.data(), int(s.K), w.data(), int(s.K), 0.0f,
                y.data(), int(s.N));
    benchmark::DoNotOptimize(y.data());
  }
  openblas_set_num_threads(1);
  setFlops(state, s);
}

void linearF32(benchmark::State &state, Shape s) {
  auto x = randomVec(size_t(s.M * s.K)), w = randomVec(size_t(s.N * s.K)),
       b = randomVec(size_t(s.N));
  std::vector<float> y(size_t(s.M * s.N));
  for (auto _ : state) {
    loomrt_linear_forward(LOOMRT_F32, s.M, s.N, s.K, x.data(), w.data(),
                          b.data(), y.data());
    benchmark::DoNotOptimize(y.data());
  }
  setFlops(state, s);
}

void gemm(benchmark::State &state, Shape s, loomrt_dtype dt) {
  auto xf = randomVec(size_t(s.M * s.K)), wf = randomVec(size_t(s.N * s.K));
  const int64_t esz = loomrt_dtype_size(dt);
  std::vector<char> x(size_t(s.M * s.K * esz)), w(size_t(s.N * s.K * esz)),
      y(size_t(s.M * s.N * esz));
  loomrt_cast(LOOMRT_F32, xf.data(), dt, x.data(), s.M * s.K);
  loomrt_cast(LOOMRT_F32, wf.data(), dt, w.data(), s.N * s.K);
  for (auto _ : state) {
    loomrt_gemm(0, 1, s.M, s.N, s.K, 1.0f, dt, x.data(), s.K, 0, dt, w.data(),
                s.K, 0, 0.0f, dt, y.data(), s.N, 0, 1);
    benchmark::DoNotOptimize(y.data());
  }
  setFlops(state, s);
}

int registerAll() {
  for (const Shape &s : kShapes) {
    std::string n = s.name;
    benchmark::RegisterBenchmark(("cblas_sgemm/" + n).c_str(), rawSgemm, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("loomrt_linear_f32/" + n).c_str(), linearF32,
                                 s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("loomrt_gemm_f32/" + n).c_str(), gemm, s,
                                 LOOMRT_F32)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("loomrt_gemm_bf16/" + n).c_str(), gemm, s,
                                 LOOMRT_BF16)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  registerAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv))
    return 1;
  std::printf("loomrt bench-gemm: %d threads\n", loomrt_get_num_threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
