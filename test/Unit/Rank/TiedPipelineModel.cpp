//===- TiedPipelineModel.cpp - A hand-written two-stage tied model --------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Stands in for the programs of a pipeline-parallel compile with tied
// embeddings, so that the driver's gradient sync over the embedding group
// (runtime/rank/StageSharing.h) is tested end to end before the compiler
// has pipeline stages. Linked with libloomrt_main and libloomrt_cpu exactly
// as a compiled rank is. Static shapes (B = 2, S = 8, V = 32, H = 8):
//
//   x      = wte[tokens] + pos                     first stage
//   h      = x * norm.weight + norm.bias           last stage
//   logits = h wte^T                               last stage, tied
//   loss   = masked mean cross-entropy             last stage
//
// The word embedding wte lives on both stages; each stage's train_step
// returns only its own part of wte's gradient (the lookup's on the first
// stage, the output layer's on the last), which the driver must add up.
// The single-stage entries compute the whole model on one rank, with
// wte's gradient formed as the same two parts added, as the reference.
//
// The stages move x forward and dL/dx backward with loomrt_send/loomrt_recv
// over their two-rank pipeline group (one micro-batch in flight: forward,
// then backward).
//
// Entry args (test/Run/Inputs/driver_check.py, pipeline-program):
//   loom_forward / loom_train_step (one stage):
//     tokens, labels, loss_mask, [grad_scale], param wte, param pos,
//     param norm.weight, param norm.bias, loss, [grad x 4]
//   loom_first_forward / loom_first_train_step:
//     tokens, [grad_scale], param wte, param pos, comm pp, [grad wte, pos]
//   loom_last_forward / loom_last_train_step:
//     labels, loss_mask, [grad_scale], param wte, param norm.weight,
//     param norm.bias, comm pp, loss, [grad wte, norm.weight, norm.bias]
//   loom_skewed_train_step: loom_train_step's args, then comm tp. A
//     deliberately wrong program for two tp ranks that replicate every
//     parameter: tp rank 1 doubles norm.bias's gradient (as a missing
//     all-reduce would leave replicas with different gradients), so that
//     --check-weight-hash-interval has a divergence to find.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace {

constexpr int64_t B = 2, S = 8, V = 32, H = 8, N = B * S;
using Vec = std::vector<float>;

/// x = wte[tokens] + pos.
Vec embed(const int32_t *tokens, const float *wte, const float *pos) {
  Vec x(N * H);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j)
      x[n * H + j] = wte[tokens[n] * H + j] + pos[j];
  return x;
}

/// dwte (the lookup's part, overwritten) and dpos from dL/dx.
void embedBackward(const int32_t *tokens, const Vec &dx, float *dwte,
                   float *dpos) {
  std::fill(dwte, dwte + V * H, 0.0f);
  std::fill(dpos, dpos + H, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j) {
      dwte[tokens[n] * H + j] += dx[n * H + j];
      dpos[j] += dx[n * H + j];
    }
}

struct Head {
  const int32_t *labels;
  const float *mask, *wte, *gain, *bias;
};

/// The last stage: norm, tied output layer and loss. With `grads`, also
/// the gradients of gradScale * loss: the output layer's part of wte's
/// (overwritten), the norm's, and dL/dx.
float head(const Head &a, const Vec &x, float gradScale, float *dwte,
           float *dgain, float *dbias, Vec *dx) {
  Vec h(N * H), logits(N * V), lse(N);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j)
      h[n * H + j] = x[n * H + j] * a.gain[j] + a.bias[j];
  float maskSum = 0, lossSum = 0;
  for (int64_t n = 0; n < N; ++n) {
    float mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      float s = 0;
      for (int64_t j = 0; j < H; ++j)
        s += h[n * H + j] * a.wte[v * H + j];
      logits[n * V + v] = s;
      mx = std::max(mx, s);
    }
    float sum = 0;
    for (int64_t v = 0; v < V; ++v)
      sum += std::exp(logits[n * V + v] - mx);
    lse[n] = mx + std::log(sum);
    lossSum += a.mask[n] * (lse[n] - logits[n * V + a.labels[n]]);
    maskSum += a.mask[n];
  }
  float loss = maskSum > 0 ? lossSum / maskSum : 0.0f;
  if (!dx)
    return loss;

  // dlogits = gradScale * mask / maskSum * (softmax - onehot(label)).
  Vec dlogits(N * V);
  for (int64_t n = 0; n < N; ++n) {
    float w = maskSum > 0 ? gradScale * a.mask[n] / maskSum : 0.0f;
    for (int64_t v = 0; v < V; ++v)
      dlogits[n * V + v] =
          w * (std::exp(logits[n * V + v] - lse[n]) - (v == a.labels[n]));
  }
  Vec dh(N * H, 0.0f);
  std::fill(dwte, dwte + V * H, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = 0; v < V; ++v)
      for (int64_t j = 0; j < H; ++j) {
        dwte[v * H + j] += dlogits[n * V + v] * h[n * H + j];
        dh[n * H + j] += dlogits[n * V + v] * a.wte[v * H + j];
      }
  std::fill(dgain, dgain + H, 0.0f);
  std::fill(dbias, dbias + H, 0.0f);
  dx->assign(N * H, 0.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < H; ++j) {
      dgain[j] += dh[n * H + j] * x[n * H + j];
      dbias[j] += dh[n * H + j];
      (*dx)[n * H + j] = dh[n * H + j] * a.gain[j];
    }
  return loss;
}

/// Pipeline group ranks: the first stage is 0, the last 1.
void sendTo(loomrt_comm pp, int32_t peer, const Vec &buf) {
  loomrt_send(pp, LOOMRT_F32, buf.data(), int64_t(buf.size()), peer);
}
void recvFrom(loomrt_comm pp, int32_t peer, Vec &buf) {
  buf.assign(N * H, 0.0f);
  loomrt_recv(pp, LOOMRT_F32, buf.data(), int64_t(buf.size()), peer);
}

template <typename T> T arg(void **args, int i) {
  return static_cast<T>(args[i]);
}
loomrt_comm commArg(void **args, int i) {
  return *static_cast<loomrt_comm *>(args[i]);
}

} // namespace

extern "C" void loom_forward(void **args) {
  Vec x = embed(arg<const int32_t *>(args, 0), arg<const float *>(args, 3),
                arg<const float *>(args, 4));
  Head a{arg<const int32_t *>(args, 1), arg<const float *>(args, 2),
         arg<const float *>(args, 3), arg<const float *>(args, 5),
         arg<const float *>(args, 6)};
  *arg<float *>(args, 7) =
      head(a, x, 0.0f, nullptr, nullptr, nullptr, nullptr);
}

extern "C" void loom_train_step(void **args) {
  const auto *tokens = arg<const int32_t *>(args, 0);
  float gradScale = *arg<const float *>(args, 3);
  const auto *wte = arg<const float *>(args, 4);
  Vec x = embed(tokens, wte, arg<const float *>(args, 5));
  Head a{arg<const int32_t *>(args, 1), arg<const float *>(args, 2), wte,
         arg<const float *>(args, 6), arg<const float *>(args, 7)};
  Vec dwteOut(V * H), dwteIn(V * H), dx;
  *arg<float *>(args, 8) = head(a, x, gradScale, dwteOut.data(),
                                arg<float *>(args, 11), arg<float *>(args, 12),
                                &dx);
  embedBackward(tokens, dx, dwteIn.data(), arg<float *>(args, 10));
  float *dwte = arg<float *>(args, 9);
  for (int64_t i = 0; i < V * H; ++i)
    dwte[i] = dwteIn[i] + dwteOut[i];
}

extern "C" void loom_first_forward(void **args) {
  Vec x = embed(arg<const int32_t *>(args, 0), arg<const float *>(args, 1),
                arg<const float *>(args, 2));
  sendTo(commArg(args, 3), 1, x);
}

extern "C" void loom_last_forward(void **args) {
  Vec x;
  recvFrom(commArg(args, 5), 0, x);
  Head a{arg<const int32_t *>(args, 0), arg<const float *>(args, 1),
         arg<const float *>(args, 2), arg<const float *>(args, 3),
         arg<const float *>(args, 4)};
  *arg<float *>(args, 6) =
      head(a, x, 0.0f, nullptr, nullptr, nullptr, nullptr);
}

extern "C" void loom_first_train_step(void **args) {
  const auto *tokens = arg<const int32_t *>(args, 0);
  loomrt_comm pp = commArg(args, 4);
  Vec x = embed(tokens, arg<const float *>(args, 2),
                arg<const float *>(args, 3));
  sendTo(pp, 1, x);
  Vec dx;
  recvFrom(pp, 1, dx);
  embedBackward(tokens, dx, arg<float *>(args, 5), arg<float *>(args, 6));
}

extern "C" void loom_last_train_step(void **args) {
  loomrt_comm pp = commArg(args, 6);
  Vec x;
  recvFrom(pp, 0, x);
  Head a{arg<const int32_t *>(args, 0), arg<const float *>(args, 1),
         arg<const float *>(args, 3), arg<const float *>(args, 4),
         arg<const float *>(args, 5)};
  Vec dx;
  *arg<float *>(args, 7) =
      head(a, x, *arg<const float *>(args, 2), arg<float *>(args, 8),
           arg<float *>(args, 9), arg<float *>(args, 10), &dx);
  sendTo(pp, 0, dx);
}

extern "C" void loom_skewed_train_step(void **args) {
  loom_train_step(args);
  loomrt_comm tp = commArg(args, 13);
  if (tp && loomrt_comm_rank(tp) == 1)
    for (float *dbias = arg<float *>(args, 12), *end = dbias + H; dbias < end;
         ++dbias)
      *dbias *= 2.0f;
}
