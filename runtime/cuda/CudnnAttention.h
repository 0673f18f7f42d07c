//===- CudnnAttention.h - cuDNN's fused attention (SDPA) --------*- C++ -*-===//
//
// Internal to runtime/cuda: scaled dot-product attention through cuDNN's
// fused flash-attention engines, on graphs built with the cuDNN 9 backend
// API (CudnnGraph.h).
// Only the cases cuDNN covers come here (f16/bf16, no position or document
// masks, top-left causal or no mask); everything else, and any shape cuDNN
// has no engine for, runs on Loom's own kernels (Attention.cu). The choice
// is made in AttentionDispatch.cu.
//
// Layouts are loomrt.h's: q and o [B, Sq, Nq*D], k and v [B, Skv, Nkv*D]
// (BSHD), lse [B, Nq, Sq] f32, all contiguous, 16-byte aligned (the graphs
// declare it; see aligned()), on the compute stream.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDNNATTENTION_H
#define LOOM_RUNTIME_CUDA_CUDNNATTENTION_H

#include "loomrt/loomrt.h"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <tuple>

namespace loomrt::cudnn {

/// One fused attention problem. causal: key j is visible from query i iff
/// j <= i (top-left aligned, as loomrt_attention_forward with NULL
/// positions); otherwise every key is visible.
struct AttentionShape {
  loomrt_dtype dtype;
  int64_t B, Sq, Skv, Nq, Nkv, D;
  bool causal;
  float scale;
};

/// What identifies a shape and direction in the caches of plans and of
/// first-call verdicts (the scale is a by-value scalar: not part of it).
using ShapeKey = std::tuple<bool, int, int64_t, int64_t, int64_t, int64_t,
                            int64_t, int64_t, bool>;
inline ShapeKey keyOf(bool backward, const AttentionShape &s) {
  return ShapeKey{backward, int(s.dtype), s.B, s.Sq,    s.Skv,
                  s.Nq,     s.Nkv,        s.D, s.causal};
}

/// Whether cuDNN can be used on this rank's device at all (compute
/// capability 8.0 or later, cuDNN 9 at run time, a handle); when not,
/// `why` says what is missing.
bool available(std::string *why);

/// Whether cuDNN's fused attention is documented to cover this problem on
/// the current device (available(), dtype, head dim, GQA ratio). No graph
/// is built; a covered shape may still find no engine (forward and
/// backward then return false).
bool covers(const AttentionShape &s);

/// Whether every pointer is 16-byte aligned, as forward and backward
/// require (a ring section's per-batch slice may not be).
bool aligned(std::initializer_list<const void *> pointers);

/// o = softmax(q k^T * scale + mask) v and lse, the natural-log log-sum-exp
/// of the scaled visible scores. Returns false, touching nothing, when
/// cuDNN finds no engine for the graph (`why` says what cuDNN answered);
/// other cuDNN failures are fatal. Plans are built once per shape and
/// cached.
bool forward(const AttentionShape &s, const void *q, const void *k,
             const void *v, void *o, float *lse, std::string *why);

/// Gradients from the forward's o and lse (for a ring step: the final,
/// merged o and lse with one chunk of k and v). Overwrites dq, dk, dv.
/// Returns false like forward.
bool backward(const AttentionShape &s, const void *q, const void *k,
              const void *v, const void *o, const float *lse, const void *dout,
              void *dq, void *dk, void *dv, std::string *why);

} // namespace loomrt::cudnn

#endif // LOOM_RUNTIME_CUDA_CUDNNATTENTION_H
