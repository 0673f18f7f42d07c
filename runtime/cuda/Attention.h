//===- Attention.h - Loom's own attention kernels ---------------*- C++ -*-===//
//
// Internal to runtime/cuda. Attention.cu implements loomrt_attention_forward
// and loomrt_attention_backward for every mask and dtype with its own
// kernels; AttentionDispatch.cu, which owns the loomrt_* entry points, calls
// them whenever cuDNN's fused attention (CudnnAttention.h) is not used.
// Arguments and semantics are loomrt.h's, already checked by the ABI front
// (runtime/common/Rules.cpp) and checkCudaAttention.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_ATTENTION_H
#define LOOM_RUNTIME_CUDA_ATTENTION_H

#include "loomrt/loomrt.h"

#include <cstdint>

namespace loomrt {

/// The sizes of one attention call (q [B,S,Nq,D], k/v [B,Sk,Nkv,D]).
struct AttentionDims {
  int64_t B, S, Sk, Nq, Nkv, D;
};

/// The kernels' limits (head dim, grid dimensions), beyond the ABI's rules.
void checkCudaAttention(const char *fn, const AttentionDims &d);

void kernelAttentionForward(loomrt_dtype dtype, int64_t B, int64_t S,
                            int64_t Sk, int64_t Nq, int64_t Nkv, int64_t D,
                            float scale, int32_t causal, const int32_t *q_pos,
                            const int32_t *k_pos, const int32_t *q_doc,
                            const int32_t *k_doc, const void *q, const void *k,
                            const void *v, void *o, float *lse);

void kernelAttentionBackward(loomrt_dtype dtype, int64_t B, int64_t S,
                             int64_t Sk, int64_t Nq, int64_t Nkv, int64_t D,
                             float scale, int32_t causal, const int32_t *q_pos,
                             const int32_t *k_pos, const int32_t *q_doc,
                             const int32_t *k_doc, const void *q, const void *k,
                             const void *v, const void *o, const float *lse,
                             const void *dout, void *dq, void *dk, void *dv,
                             int32_t accumulate);

} // namespace loomrt

#endif // LOOM_RUNTIME_CUDA_ATTENTION_H
