//===- TestModel.cpp - A hand-written "compiled" rank program -------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Stands in for a loom-compile object file so that the driver can be tested
// end to end (flags, MPI, shards, data, loss averaging, checkpoints) before
// and independently of the compiler. Linked with libloomrt_main and
// libloomrt_cpu exactly as a compiled rank is.
//
// The model is a vocab-parallel bigram model with static shapes, as a
// compiled program has (B = 2, S = 8, V = 32, H = 8):
//   x      = concat(wte.a[tokens], wte.b[tokens])        [B*S, H]
//   logits = x head.weight^T    (head.weight [V, H], rows split over tp)
//   loss   = masked mean cross-entropy (Megatron's vocab-parallel form)
// Entry args (test/Run/Inputs/*.json): tokens, labels, loss_mask,
// param wte.a, param wte.b, param head.weight, comm tp, loss.
//
//===----------------------------------------------------------------------===//

#include "loomrt/loomrt.h"

#include <vector>

namespace {
constexpr int64_t B = 2, S = 8, V = 32, H = 8, N = B * S;
} // namespace

extern "C" void loom_forward(void **args) {
  auto *tokens = static_cast<const int32_t *>(args[0]);
  auto *labels = static_cast<const int32_t *>(args[1]);
  auto *mask = static_cast<const float *>(args[2]);
  auto *wteA = static_cast<const float *>(args[3]);
  auto *wteB = static_cast<const float *>(args[4]);
  auto *head = static_cast<const float *>(args[5]);
  loomrt_comm tp = *static_cast<loomrt_comm *>(args[6]);
  auto *loss = static_cast<float *>(args[7]);

  int32_t tpSize = tp ? loomrt_comm_size(tp) : 1;
  int32_t tpRank = tp ? loomrt_comm_rank(tp) : 0;
  int64_t vl = V / tpSize, vocabStart = tpRank * vl;

  std::vector<float> xa(N * H / 2), xb(N * H / 2), x(N * H);
  loomrt_embedding_forward(LOOMRT_F32, N, H / 2, tokens, 0, V, wteA, xa.data());
  loomrt_embedding_forward(LOOMRT_F32, N, H / 2, tokens, 0, V, wteB, xb.data());
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < H / 2; ++j) {
      x[i * H + j] = xa[i * H / 2 + j];
      x[i * H + H / 2 + j] = xb[i * H / 2 + j];
    }
  std::vector<float> logits(N * vl);
  loomrt_linear_forward(LOOMRT_F32, N, vl, H, x.data(), head, nullptr,
                        logits.data());

  std::vector<float> rowMax(N), sumExp(N), target(N);
  loomrt_ce_local_max(LOOMRT_F32, N, vl, vl, logits.data(), rowMax.data());
  if (tp)
    loomrt_all_reduce(tp, LOOMRT_F32, LOOMRT_MAX, rowMax.data(), rowMax.data(),
                      N);
  loomrt_ce_local_sum_exp(LOOMRT_F32, N, vl, vl, logits.data(), rowMax.data(),
                          sumExp.data());
  loomrt_ce_local_target(LOOMRT_F32, N, vl, logits.data(), labels, vocabStart,
                         target.data());
  if (tp) {
    loomrt_all_reduce(tp, LOOMRT_F32, LOOMRT_SUM, sumExp.data(), sumExp.data(),
                      N);
    loomrt_all_reduce(tp, LOOMRT_F32, LOOMRT_SUM, target.data(), target.data(),
                      N);
  }
  float maskedSum = 0, maskSum = 0;
  loomrt_ce_loss_from_parts(N, rowMax.data(), sumExp.data(), target.data(),
                            mask, nullptr, &maskedSum, &maskSum);
  *loss = maskSum > 0 ? maskedSum / maskSum : 0.0f;
}
