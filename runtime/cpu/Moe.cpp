//===- Moe.cpp - Mixture-of-experts kernels ----------------------*- C++ -*-===//
//
// Routing, the router's losses, token dispatch order and the grouped linear
// layers of the experts (one GEMM per expert on its group of rows), as
// loomrt.h defines them. Router math is f32 throughout; every token's
// softmax is recomputed from the logits where a backward needs it (E is
// small, the logits are saved anyway).
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cpu/Common.h"
#include "runtime/cpu/DeviceContract.h"

#include <algorithm>
#include <cmath>

using namespace loomrt;

namespace {

/// softmax of row[0..n) into out; returns the log-sum-exp.
float softmaxRow(const float *row, int64_t n, float *out) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, row[i]);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    s += out[i] = std::exp(row[i] - m);
  for (int64_t i = 0; i < n; ++i)
    out[i] /= s;
  return m + std::log(s);
}

/// The k largest of v[0..E) by descending value, ties to the lower index.
void topK(const float *v, int64_t E, int64_t k, int32_t *idx) {
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (std::find(idx, idx + j, int32_t(e)) != idx + j)
        continue;
      if (best < 0 || v[e] > v[best])
        best = int32_t(e);
    }
    idx[j] = best;
  }
}

const char *at(const void *p, int64_t elements, int64_t esz) {
  return static_cast<const char *>(p) + elements * esz;
}
char *at(void *p, int64_t elements, int64_t esz) {
  return static_cast<char *>(p) + elements * esz;
}

} // namespace

//===----------------------------------------------------------------------===//
// Router
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_moe_route_forward(int64_t T, int64_t E, int64_t k,
                                               int32_t pre_softmax,
                                               const float *logits,
                                               float *probs, int32_t *experts) {
  LOOMRT_DEVICE_CALL(logits, probs, experts);
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float *l = logits + t * E;
      int32_t *idx = experts + t * k;
      float *pr = probs + t * k;
      if (pre_softmax) {
        softmaxRow(l, E, p.data());
        topK(p.data(), E, k, idx);
        for (int64_t j = 0; j < k; ++j)
          pr[j] = p[size_t(idx[j])];
      } else {
        topK(l, E, k, idx);
        float sel[64];
        std::vector<float> big;
        float *s = k <= 64 ? sel : (big.resize(size_t(k)), big.data());
        for (int64_t j = 0; j < k; ++j)
          s[j] = l[idx[j]];
        softmaxRow(s, k, pr);
      }
    }
  }
}

void loomrt::backend::loomrt_moe_route_backward(
    int64_t T, int64_t E, int64_t k, int32_t pre_softmax, const float *logits,
    const int32_t *experts, const float *dprobs, float *dlogits) {
  LOOMRT_DEVICE_CALL(logits, experts, dprobs, dlogits);
#pragma omp parallel
  {
    std::vector<float> p(size_t(std::max(E, k))), s(static_cast<size_t>(k));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      const float *l = logits + t * E;
      const int32_t *idx = experts + t * k;
      const float *dp = dprobs + t * k;
      float *dl = dlogits + t * E;
      std::fill(dl, dl + E, 0.0f);
      if (pre_softmax) {
        // probs[j] = p[idx[j]] of the full softmax: dp scattered to the
        // experts, then through the softmax Jacobian.
        softmaxRow(l, E, p.data());
        float dot = 0.0f;
        for (int64_t j = 0; j < k; ++j)
          dot += dp[j] * p[size_t(idx[j])];
        for (int64_t e = 0; e < E; ++e)
          dl[e] = -p[size_t(e)] * dot;
        for (int64_t j = 0; j < k; ++j)
          dl[idx[j]] += p[size_t(idx[j])] * dp[j];
      } else {
        for (int64_t j = 0; j < k; ++j)
          s[size_t(j)] = l[idx[j]];
        softmaxRow(s.data(), k, p.data());
        float dot = 0.0f;
        for (int64_t j = 0; j < k; ++j)
          dot += dp[j] * p[size_t(j)];
        for (int64_t j = 0; j < k; ++j)
          dl[idx[j]] = p[size_t(j)] * (dp[j] - dot);
      }
    }
  }
}

void loomrt::backend::loomrt_moe_route_counts(int64_t T, int64_t E,
                                              int64_t k,
                                              const int32_t *experts,
                                              float *counts) {
  LOOMRT_DEVICE_CALL(experts, counts);
  std::fill(counts, counts + E, 0.0f);
  for (int64_t i = 0; i < T * k; ++i)
    if (experts[i] >= 0 && experts[i] < E)
      counts[experts[i]] += 1.0f;
}

namespace {
/// The micro-batch's tokens, sum_e counts[e] / k, at least 1 (no tokens:
/// the losses are 0, not 0 / 0).
double routedTokens(int64_t E, int64_t k, const float *counts) {
  double pairs = 0.0;
  for (int64_t e = 0; e < E; ++e)
    pairs += counts[e];
  return std::max(pairs / double(k), 1.0);
}
} // namespace

void loomrt::backend::loomrt_moe_router_loss_forward(
    int64_t T, int64_t E, int64_t k, float aux_coeff, float z_coeff,
    const float *logits, const float *counts, float *aux_loss,
    float *z_loss) {
  LOOMRT_DEVICE_CALL(logits, counts, aux_loss, z_loss);
  // Sequential over tokens: a fixed summation order, and T x E is small
  // next to the layer's GEMMs.
  std::vector<double> P(size_t(E), 0.0);
  std::vector<float> p(static_cast<size_t>(E));
  double z = 0.0;
  for (int64_t t = 0; t < T; ++t) {
    float lse = softmaxRow(logits + t * E, E, p.data());
    z += double(lse) * lse;
    for (int64_t e = 0; e < E; ++e)
      P[size_t(e)] += p[size_t(e)];
  }
  double sum = 0.0;
  for (int64_t e = 0; e < E; ++e)
    sum += P[size_t(e)] * double(counts[e]);
  const double tokens = routedTokens(E, k, counts);
  *aux_loss = float(aux_coeff * double(E) / (double(k) * tokens * tokens) * sum);
  *z_loss = float(z_coeff * z / tokens);
}

void loomrt::backend::loomrt_moe_router_loss_backward(
    int64_t T, int64_t E, int64_t k, float aux_coeff, float z_coeff,
    const float *logits, const float *counts, const float *grad_scale,
    float *dlogits) {
  LOOMRT_DEVICE_CALL(logits, counts, grad_scale, dlogits);
  const double g = *grad_scale, tokens = routedTokens(E, k, counts);
  const float auxScale =
      float(g * aux_coeff * double(E) / (double(k) * tokens * tokens));
  const float zScale = float(g * z_coeff * 2.0 / tokens);
  std::vector<float> dP(counts, counts + E);
  for (float &d : dP)
    d *= auxScale;
#pragma omp parallel
  {
    std::vector<float> p(static_cast<size_t>(E));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      float lse = softmaxRow(logits + t * E, E, p.data());
      float dot = 0.0f;
      for (int64_t e = 0; e < E; ++e)
        dot += p[size_t(e)] * dP[size_t(e)];
      float *dl = dlogits + t * E;
      // d(lse^2)/dl = 2 lse softmax(l).
      for (int64_t e = 0; e < E; ++e)
        dl[e] = p[size_t(e)] * (dP[size_t(e)] - dot + zScale * lse);
    }
  }
}

//===----------------------------------------------------------------------===//
// Dispatch order and combine
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_moe_drop(int64_t T, int64_t E, int64_t k,
                                      int64_t capacity, int32_t policy,
                                      const float *probs,
                                      const int32_t *experts, int32_t *kept) {
  LOOMRT_DEVICE_CALL(probs, experts, kept);
  // Each expert's pairs in (token, slot) order; "probs" orders them by
  // descending prob, the earlier pair first on a tie (a stable sort).
  std::vector<std::vector<int64_t>> pairs(static_cast<size_t>(E));
  for (int64_t i = 0; i < T * k; ++i) {
    kept[i] = -1;
    if (experts[i] >= 0 && experts[i] < E)
      pairs[size_t(experts[i])].push_back(i);
  }
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> &v = pairs[size_t(e)];
    if (policy == 0)
      std::stable_sort(v.begin(), v.end(), [&](int64_t a, int64_t b) {
        return probs[a] > probs[b];
      });
    for (size_t r = 0; r < v.size() && int64_t(r) < capacity; ++r)
      kept[v[r]] = int32_t(e);
  }
}

void loomrt::backend::loomrt_moe_permute(loomrt_dtype dtype, int64_t T,
                                         int64_t H, int64_t k, int64_t E,
                                         int64_t N, int64_t pad_to,
                                         const void *x, const int32_t *experts,
                                         void *rows, int32_t *counts,
                                         int32_t *row_map) {
  LOOMRT_DEVICE_CALL(x, experts, rows, counts, row_map);
  std::vector<int64_t> next(size_t(E), 0);
  for (int64_t i = 0; i < T * k; ++i)
    if (experts[i] >= 0)
      ++next[size_t(experts[i])];
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (pad_to > 0 && next[size_t(e)] > pad_to)
      fatal(__func__, "expert %lld has %lld pairs, more than pad_to=%lld",
            (long long)e, (long long)next[size_t(e)], (long long)pad_to);
    counts[e] = int32_t(pad_to > 0 ? pad_to : next[size_t(e)]);
    next[size_t(e)] = offset;
    offset += counts[e];
  }
  if (offset > N)
    fatal(__func__, "%lld rows kept do not fit in N=%lld", (long long)offset,
          (long long)N);
  // Pairs in (token, slot) order land in each expert's group in that order.
  for (int64_t i = 0; i < T * k; ++i)
    row_map[i] = experts[i] >= 0 ? int32_t(next[size_t(experts[i])]++) : -1;
  const int64_t esz = dtypeSize(dtype);
  // Padding and rows past the groups are zero.
  if (pad_to > 0)
    std::memset(rows, 0, size_t(N * H * esz));
  else
    std::memset(at(rows, offset * H, esz), 0, size_t((N - offset) * H * esz));
#pragma omp parallel for schedule(static) if (T * k * H > kMinParallelWork)
  for (int64_t i = 0; i < T * k; ++i)
    if (row_map[i] >= 0)
      std::memcpy(at(rows, row_map[i] * H, esz), at(x, (i / k) * H, esz),
                  size_t(H * esz));
}

namespace {
/// out[t] = sum_j w[t,j] * rows[row_map[t,j]] in f32 (w = 1 without probs).
void combineRows(loomrt_dtype dtype, int64_t T, int64_t H, int64_t k,
                 const void *rows, const float *probs, const int32_t *row_map,
                 void *out) {
  const int64_t esz = dtypeSize(dtype);
#pragma omp parallel
  {
    std::vector<float> acc(static_cast<size_t>(H)), row(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        if (row_map[t * k + j] < 0)
          continue; // dropped
        toF32(dtype, at(rows, row_map[t * k + j] * H, esz), row.data(), H);
        const float w = probs ? probs[t * k + j] : 1.0f;
        for (int64_t h = 0; h < H; ++h)
          acc[size_t(h)] += w * row[size_t(h)];
      }
      fromF32(acc.data(), dtype, at(out, t * H, esz), H);
    }
  }
}
} // namespace

void loomrt::backend::loomrt_moe_permute_backward(loomrt_dtype dtype,
                                                  int64_t T, int64_t H,
                                                  int64_t k, const void *drows,
                                                  const int32_t *row_map,
                                                  void *dx) {
  LOOMRT_DEVICE_CALL(drows, row_map, dx);
  combineRows(dtype, T, H, k, drows, nullptr, row_map, dx);
}

void loomrt::backend::loomrt_moe_unpermute(loomrt_dtype dtype, int64_t T,
                                           int64_t H, int64_t k,
                                           const void *rows, const float *probs,
                                           const int32_t *row_map, void *out) {
  LOOMRT_DEVICE_CALL(rows, probs, row_map, out);
  combineRows(dtype, T, H, k, rows, probs, row_map, out);
}

namespace {
/// The runs of rows that gathered [P*N,H] (rank s's rows at row s*N,
/// grouped by expert) and the dispatched rows of rank r's experts
/// (grouped by local expert, then source rank) share, in dispatched order:
/// fn(gathered row, dispatched row, rows). Checks the counts against N and
/// M; returns the rows dispatched.
template <typename Fn>
int64_t forEachExpertRun(const char *fn, int64_t P, int64_t r, int64_t E,
                         int64_t N, int64_t M, const int32_t *counts, Fn f) {
  for (int64_t s = 0; s < P; ++s) {
    int64_t rows = 0;
    for (int64_t e = 0; e < E; ++e) {
      if (counts[s * E + e] < 0)
        fatal(fn, "a count of rows is negative (%d)", int(counts[s * E + e]));
      rows += counts[s * E + e];
    }
    if (rows > N)
      fatal(fn, "rank %lld's counts add up to %lld rows but it has %lld",
            (long long)s, (long long)rows, (long long)N);
  }
  const int64_t local = E / P;
  int64_t dst = 0;
  for (int64_t j = 0; j < local; ++j)
    for (int64_t s = 0; s < P; ++s) {
      const int64_t e = r * local + j, n = counts[s * E + e];
      int64_t src = s * N;
      for (int64_t i = 0; i < e; ++i)
        src += counts[s * E + i];
      if (dst + n > M)
        fatal(fn, "this rank's experts receive more than the %lld rows the "
                  "dispatched buffer holds",
              (long long)M);
      if (n > 0)
        f(src, dst, n);
      dst += n;
    }
  return dst;
}
} // namespace

void loomrt::backend::loomrt_moe_take_expert_rows(
    loomrt_dtype dtype, int64_t P, int64_t r, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *gathered,
    void *dispatched, int32_t *local_counts) {
  LOOMRT_DEVICE_CALL(all_counts, gathered, dispatched, local_counts);
  const int64_t esz = dtypeSize(dtype), local = E / P;
  const int64_t received = forEachExpertRun(
      __func__, P, r, E, N, M, all_counts,
      [&](int64_t src, int64_t dst, int64_t n) {
        std::memcpy(at(dispatched, dst * H, esz), at(gathered, src * H, esz),
                    size_t(n * H * esz));
      });
  std::memset(at(dispatched, received * H, esz), 0,
              size_t((M - received) * H * esz));
  for (int64_t j = 0; j < local; ++j) {
    local_counts[j] = 0;
    for (int64_t s = 0; s < P; ++s)
      local_counts[j] += all_counts[s * E + r * local + j];
  }
}

void loomrt::backend::loomrt_moe_put_expert_rows(
    loomrt_dtype dtype, int64_t P, int64_t r, int64_t E, int64_t N, int64_t H,
    int64_t M, const int32_t *all_counts, const void *dispatched,
    void *gathered) {
  LOOMRT_DEVICE_CALL(all_counts, dispatched, gathered);
  const int64_t esz = dtypeSize(dtype);
  std::memset(gathered, 0, size_t(P * N * H * esz));
  forEachExpertRun(__func__, P, r, E, N, M, all_counts,
                   [&](int64_t src, int64_t dst, int64_t n) {
                     std::memcpy(at(gathered, src * H, esz),
                                 at(dispatched, dst * H, esz),
                                 size_t(n * H * esz));
                   });
}

void loomrt::backend::loomrt_moe_unpermute_backward(
    loomrt_dtype dtype, int64_t T, int64_t H, int64_t k, int64_t N,
    const void *rows, const float *probs, const int32_t *row_map,
    const void *dout, void *drows, float *dprobs) {
  LOOMRT_DEVICE_CALL(rows, probs, row_map, dout, drows, dprobs);
  const int64_t esz = dtypeSize(dtype);
  std::memset(drows, 0, size_t(N * H * esz));
#pragma omp parallel
  {
    std::vector<float> d(static_cast<size_t>(H)), row(static_cast<size_t>(H)), out(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      toF32(dtype, at(dout, t * H, esz), d.data(), H);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = row_map[t * k + j];
        if (r < 0) {
          dprobs[t * k + j] = 0.0f; // dropped
          continue;
        }
        toF32(dtype, at(rows, r * H, esz), row.data(), H);
        const float p = probs[t * k + j];
        float dot = 0.0f;
        for (int64_t h = 0; h < H; ++h) {
          dot += d[size_t(h)] * row[size_t(h)];
          out[size_t(h)] = p * d[size_t(h)];
        }
        dprobs[t * k + j] = dot;
        fromF32(out.data(), dtype, at(drows, r * H, esz), H);
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Grouped linear: one linear per expert on its rows
//===----------------------------------------------------------------------===//

namespace {
/// Calls fn(e, first row, rows) for each expert; returns the rows covered.
template <typename Fn>
int64_t forEachGroup(const char *fn, int64_t M, int64_t E,
                     const int32_t *counts, Fn body) {
  int64_t offset = 0;
  for (int64_t e = 0; e < E; ++e) {
    if (counts[e] < 0 || counts[e] > M - offset)
      fatal(fn, "expert %lld's %d rows do not fit in the %lld rows of x",
            (long long)e, counts[e], (long long)M);
    body(e, offset, int64_t(counts[e]));
    offset += counts[e];
  }
  return offset;
}
} // namespace

void loomrt::backend::loomrt_grouped_linear_forward(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *x, const void *W, const int32_t *counts, void *y) {
  LOOMRT_DEVICE_CALL(x, W, counts, y);
  const int64_t esz = dtypeSize(dtype);
  int64_t used = forEachGroup(__func__, M, E, counts,
                              [&](int64_t e, int64_t first, int64_t rows) {
                                if (rows)
                                  loomrt_linear_forward(
                                      dtype, rows, N, K, at(x, first * K, esz),
                                      at(W, e * N * K, esz), nullptr,
                                      at(y, first * N, esz));
                              });
  std::memset(at(y, used * N, esz), 0, size_t((M - used) * N * esz));
}

void loomrt::backend::loomrt_grouped_linear_backward_data(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *dy, const void *W, const int32_t *counts, void *dx) {
  LOOMRT_DEVICE_CALL(dy, W, counts, dx);
  const int64_t esz = dtypeSize(dtype);
  int64_t used = forEachGroup(
      __func__, M, E, counts, [&](int64_t e, int64_t first, int64_t rows) {
        if (rows)
          loomrt_linear_backward_data(dtype, rows, N, K,
                                      at(dy, first * N, esz),
                                      at(W, e * N * K, esz),
                                      at(dx, first * K, esz), 0);
      });
  std::memset(at(dx, used * K, esz), 0, size_t((M - used) * K * esz));
}

void loomrt::backend::loomrt_grouped_linear_backward_weight(
    loomrt_dtype dtype, int64_t M, int64_t N, int64_t K, int64_t E,
    const void *dy, const void *x, const int32_t *counts, loomrt_dtype gdtype,
    void *dW, int32_t accumulate) {
  LOOMRT_DEVICE_CALL(dy, x, counts, dW);
  const int64_t esz = dtypeSize(dtype), gsz = dtypeSize(gdtype);
  // An expert without rows: M = 0 zeroes its gradient (or keeps it).
  forEachGroup(__func__, M, E, counts,
               [&](int64_t e, int64_t first, int64_t rows) {
                 loomrt_linear_backward_weight(
                     dtype, rows, N, K, at(dy, first * N, esz),
                     at(x, first * K, esz), gdtype, at(dW, e * N * K, gsz),
                     nullptr, accumulate);
               });
}

//===----------------------------------------------------------------------===//
// Shared expert gate
//===----------------------------------------------------------------------===//

void loomrt::backend::loomrt_sigmoid_gate_forward(loomrt_dtype dtype,
                                                  int64_t rows, int64_t H,
                                                  const void *x,
                                                  const void *gate, void *out) {
  LOOMRT_DEVICE_CALL(x, gate, out);
  const int64_t esz = dtypeSize(dtype);
  std::vector<float> g(static_cast<size_t>(rows));
  toF32(dtype, gate, g.data(), rows);
#pragma omp parallel
  {
    std::vector<float> row(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      toF32(dtype, at(x, r * H, esz), row.data(), H);
      const float s = 1.0f / (1.0f + std::exp(-g[size_t(r)]));
      for (float &v : row)
        v *= s;
      fromF32(row.data(), dtype, at(out, r * H, esz), H);
    }
  }
}

void loomrt::backend::loomrt_sigmoid_gate_backward(
    loomrt_dtype dtype, int64_t rows, int64_t H, const void *x,
    const void *gate, const void *dout, void *dx, void *dgate) {
  LOOMRT_DEVICE_CALL(x, gate, dout, dx, dgate);
  const int64_t esz = dtypeSize(dtype);
  std::vector<float> g(static_cast<size_t>(rows)), dg(static_cast<size_t>(rows));
  toF32(dtype, gate, g.data(), rows);
#pragma omp parallel
  {
    std::vector<float> xr(static_cast<size_t>(H)), d(static_cast<size_t>(H));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      toF32(dtype, at(x, r * H, esz), xr.data(), H);
      toF32(dtype, at(dout, r * H, esz), d.data(), H);
      const float s = 1.0f / (1.0f + std::exp(-g[size_t(r)]));
      float dot = 0.0f;
      for (int64_t h = 0; h < H; ++h) {
        dot += d[size_t(h)] * xr[size_t(h)];
        d[size_t(h)] *= s;
      }
      dg[size_t(r)] = s * (1.0f - s) * dot;
      fromF32(d.data(), dtype, at(dx, r * H, esz), H);
    }
  }
  fromF32(dg.data(), dtype, dgate, rows);
}
