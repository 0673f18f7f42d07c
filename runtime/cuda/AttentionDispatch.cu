//===- AttentionDispatch.cu - cuDNN's fused attention or ours --*- CUDA -*-===//
//
// loomrt_attention_forward and loomrt_attention_backward of the cuda
// backend. The calls cuDNN's fused flash attention covers (f16/bf16, no
// position or document masks: unsharded and Ulysses attention, and the
// pieces that loomrt_attention_section_* and loomrt_attention_chunked_*
// cut context-parallel attention into) go to cuDNN (CudnnAttention.h),
// which is what Megatron's context parallelism runs on through
// TransformerEngine. The rest (f32, document masks, calls with positions,
// shapes without an engine) runs on Loom's kernels (Attention.h).
//
// LOOMRT_CUDA_ATTENTION chooses:
//   auto (default)  cuDNN, checked once per shape and direction: the first
//                   call runs both, returns Loom's result and compares the
//                   two. A shape cuDNN has no engine for, or whose results
//                   differ by more than f16/bf16 rounding, stays on Loom's
//                   kernels, with one line on stderr saying why.
//   cudnn           cuDNN for every call it covers, never compared; a
//                   covered call without an engine is fatal (for testing
//                   cuDNN itself against the cpu backend).
//   loom            Loom's kernels only.
// A build without cuDNN always uses Loom's kernels.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/cuda/Attention.h"
#include "runtime/cuda/Common.h"
#if LOOMRT_HAVE_CUDNN
#include "runtime/cuda/CudnnAttention.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

using namespace loomrt;

namespace {

enum class Choice { Auto, Cudnn, Loom };

Choice choice() {
  static const Choice c = [] {
    const char *env = std::getenv("LOOMRT_CUDA_ATTENTION");
    if (!env || !*env || !std::strcmp(env, "auto"))
      return Choice::Auto;
    if (!std::strcmp(env, "cudnn"))
      return Choice::Cudnn;
    if (!std::strcmp(env, "loom"))
      return Choice::Loom;
    fatal("LOOMRT_CUDA_ATTENTION", "unknown value '%s' (auto, cudnn, loom)",
          env);
  }();
  return c;
}

#if LOOMRT_HAVE_CUDNN

//===----------------------------------------------------------------------===//
// The first-call comparison
//===----------------------------------------------------------------------===//

/// out[0] = max |a - b| (NaN counts as infinity), out[1] = max |b|, as f32
/// bit patterns (non-negative floats order like their bits).
__global__ void maxAbsDiff(loomrt_dtype dt, int64_t n, const void *a,
                           const void *b, unsigned *out) {
  float diff = 0.0f, mag = 0.0f;
  GRID_STRIDE(i, n) {
    const float x = ld(a, dt, i), y = ld(b, dt, i);
    const float e = fabsf(x - y);
    diff = fmaxf(diff, isnan(e) ? INFINITY : e);
    mag = fmaxf(mag, fabsf(y));
  }
  diff = warpMax(diff);
  mag = warpMax(mag);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(out, __float_as_uint(diff));
    atomicMax(out + 1, __float_as_uint(mag));
  }
}

/// max |got - want| / max(max |want|, 1): the normwise error the cuda-vs-cpu
/// tests judge by (test/Unit/RuntimeCuda). Waits for the compute stream.
float normwiseError(loomrt_dtype dt, int64_t n, const void *got,
                    const void *want) {
  Scratch bits(2 * sizeof(unsigned));
  CUDA_CHECK(
      cudaMemsetAsync(bits.as<unsigned>(), 0, 2 * sizeof(unsigned), stream()));
  maxAbsDiff<<<gridFor(n), kThreads, 0, stream()>>>(dt, n, got, want,
                                                    bits.as<unsigned>());
  CUDA_CHECK_LAUNCH();
  unsigned host[2];
  CUDA_CHECK(cudaMemcpyAsync(host, bits.as<unsigned>(), sizeof(host),
                             cudaMemcpyDeviceToHost, stream()));
  CUDA_CHECK(syncStream(stream()));
  float diff, mag;
  std::memcpy(&diff, &host[0], sizeof(float));
  std::memcpy(&mag, &host[1], sizeof(float));
  return diff / fmaxf(mag, 1.0f);
}

/// Fused attention rounds the probabilities to the storage dtype before
/// the second matmul (Loom's kernels keep them in f32): a few units of the
/// dtype's rounding, never more.
float tolerance(loomrt_dtype dt) { return dt == LOOMRT_BF16 ? 3e-2f : 4e-3f; }

/// What the first call of a shape and direction found.
enum class Verdict { Unchecked, Agrees, Refused };

Verdict &verdictOf(bool backward, const cudnn::AttentionShape &s) {
  static std::map<cudnn::ShapeKey, Verdict> verdicts;
  return verdicts[cudnn::keyOf(backward, s)];
}

/// Leaves a shape on Loom's kernels: fatal when cuDNN was asked for,
/// otherwise one line on stderr.
void refuse(const char *fn, const cudnn::AttentionShape &s, Verdict &verdict,
            const std::string &why) {
  char shape[160];
  std::snprintf(
      shape, sizeof(shape), "B=%lld Sq=%lld Skv=%lld Nq=%lld Nkv=%lld D=%lld%s",
      (long long)s.B, (long long)s.Sq, (long long)s.Skv, (long long)s.Nq,
      (long long)s.Nkv, (long long)s.D, s.causal ? " causal" : "");
  if (choice() == Choice::Cudnn)
    fatal(fn, "LOOMRT_CUDA_ATTENTION=cudnn, but cuDNN cannot run %s: %s", shape,
          why.c_str());
  std::fprintf(stderr,
               "loomrt: rank %d: %s: Loom's kernels for %s (cuDNN: %s)\n",
               loomrt_world_rank(), fn, shape, why.c_str());
  verdict = Verdict::Refused;
}

/// Whether cuDNN can run on this rank at all: said once on stderr when
/// not, fatal when it was asked for.
bool cudnnAvailable() {
  static const bool ok = [] {
    std::string why;
    if (cudnn::available(&why))
      return true;
    if (choice() == Choice::Cudnn)
      fatal("loomrt_attention", "LOOMRT_CUDA_ATTENTION=cudnn, but %s",
            why.c_str());
    std::fprintf(stderr, "loomrt: rank %d: attention on Loom's kernels: %s\n",
                 loomrt_world_rank(), why.c_str());
    return false;
  }();
  return ok;
}

/// The fused problem of a call, when cuDNN may take it.
bool fusedShape(loomrt_dtype dtype, const AttentionDims &d, float scale,
                int32_t causal, const int32_t *qPos, const int32_t *kPos,
                const int32_t *qDoc, cudnn::AttentionShape &s) {
  // The dtype test comes before cudnnAvailable(), so that f32 runs never
  // report on cuDNN.
  if (choice() == Choice::Loom || qPos || kPos || qDoc || d.B == 0 ||
      d.S == 0 || d.Sk == 0 || (dtype != LOOMRT_BF16 && dtype != LOOMRT_F16) ||
      !cudnnAvailable())
    return false;
  s = cudnn::AttentionShape{dtype, d.B, d.S,         d.Sk, d.Nq,
                            d.Nkv, d.D, causal != 0, scale};
  return cudnn::covers(s);
}

/// The forward through cuDNN; false when this call must use Loom's kernels
/// (a tensor cuDNN cannot take, such as a ring section's per-batch slice
/// that is not 16-byte aligned, or a shape it refused).
bool fusedForward(const cudnn::AttentionShape &s, const void *q, const void *k,
                  const void *v, void *o, float *lse) {
  if (!cudnn::aligned({q, k, v, o, lse}))
    return false;
  Verdict &verdict = verdictOf(false, s);
  std::string why;
  if (verdict == Verdict::Refused)
    return false;
  if (verdict == Verdict::Agrees || choice() == Choice::Cudnn) {
    if (cudnn::forward(s, q, k, v, o, lse, &why))
      return true;
    refuse("loomrt_attention_forward", s, verdict, why);
    return false;
  }
  // First call: cuDNN into scratch, Loom's kernels into the outputs.
  const int64_t oN = s.B * s.Sq * s.Nq * s.D, lseN = s.B * s.Nq * s.Sq;
  const int64_t oBytes = oN * loomrt_dtype_size(s.dtype);
  Scratch scratch(Scratch::round(oBytes) + lseN * int64_t(sizeof(float)));
  void *oFused = scratch.as<char>();
  float *lseFused =
      reinterpret_cast<float *>(scratch.as<char>() + Scratch::round(oBytes));
  if (!cudnn::forward(s, q, k, v, oFused, lseFused, &why)) {
    refuse("loomrt_attention_forward", s, verdict, why);
    return false;
  }
  kernelAttentionForward(s.dtype, s.B, s.Sq, s.Skv, s.Nq, s.Nkv, s.D, s.scale,
                         s.causal, nullptr, nullptr, nullptr, nullptr, q, k, v,
                         o, lse);
  const float eo = normwiseError(s.dtype, oN, oFused, o);
  const float el = normwiseError(LOOMRT_F32, lseN, lseFused, lse);
  if (eo <= tolerance(s.dtype) && el <= 1e-3f) {
    verdict = Verdict::Agrees;
    return true;
  }
  char msg[128];
  std::snprintf(msg, sizeof(msg),
                "differs from Loom's kernel by %.3g in o, %.3g in lse", eo, el);
  refuse("loomrt_attention_forward", s, verdict, msg);
  return true; // the outputs hold Loom's result
}

/// The backward through cuDNN (accumulating through scratch, since cuDNN
/// overwrites); false when this call must use Loom's kernels.
bool fusedBackward(const cudnn::AttentionShape &s, const void *q, const void *k,
                   const void *v, const void *o, const float *lse,
                   const void *dout, void *dq, void *dk, void *dv,
                   int32_t accumulate) {
  if (!cudnn::aligned({q, k, v, o, lse, dout, dq, dk, dv}))
    return false;
  Verdict &verdict = verdictOf(true, s);
  if (verdict == Verdict::Refused)
    return false;
  const bool compare =
      verdict == Verdict::Unchecked && choice() != Choice::Cudnn;
  const int64_t es = loomrt_dtype_size(s.dtype);
  const int64_t qN = s.B * s.Sq * s.Nq * s.D, kvN = s.B * s.Skv * s.Nkv * s.D;
  const int64_t qBytes = Scratch::round(qN * es),
                kvBytes = Scratch::round(kvN * es);
  // Fused gradients land in the outputs unless they must be added to them
  // or compared first.
  const bool direct = !accumulate && !compare;
  Scratch scratch(direct ? 0 : (compare ? 2 : 1) * (qBytes + 2 * kvBytes));
  char *base = scratch.as<char>();
  void *fq = direct ? dq : base, *fk = direct ? dk : base + qBytes,
       *fv = direct ? dv : base + qBytes + kvBytes;
  std::string why;
  if (!cudnn::backward(s, q, k, v, o, lse, dout, fq, fk, fv, &why)) {
    refuse("loomrt_attention_backward", s, verdict, why);
    return false;
  }
  if (compare) {
    char *ref = base + qBytes + 2 * kvBytes;
    void *rq = ref, *rk = ref + qBytes, *rv = ref + qBytes + kvBytes;
    kernelAttentionBackward(s.dtype, s.B, s.Sq, s.Skv, s.Nq, s.Nkv, s.D,
                            s.scale, s.causal, nullptr, nullptr, nullptr,
                            nullptr, q, k, v, o, lse, dout, rq, rk, rv,
                            /*accumulate=*/0);
    const float eq = normwiseError(s.dtype, qN, fq, rq),
                ek = normwiseError(s.dtype, kvN, fk, rk),
                ev = normwiseError(s.dtype, kvN, fv, rv);
    if (eq <= tolerance(s.dtype) && ek <= tolerance(s.dtype) &&
        ev <= tolerance(s.dtype)) {
      verdict = Verdict::Agrees;
    } else {
      char msg[160];
      std::snprintf(msg, sizeof(msg),
                    "differs from Loom's kernel by %.3g in dq, %.3g in dk, "
                    "%.3g in dv",
                    eq, ek, ev);
      refuse("loomrt_attention_backward", s, verdict, msg);
    }
    // This call returns Loom's gradients either way.
    fq = rq;
    fk = rk;
    fv = rv;
  }
  if (accumulate) {
    loomrt_add(s.dtype, qN, dq, fq, dq);
    loomrt_add(s.dtype, kvN, dk, fk, dk);
    loomrt_add(s.dtype, kvN, dv, fv, dv);
  } else if (!direct) {
    CUDA_CHECK(cudaMemcpyAsync(dq, fq, size_t(qN * es),
                               cudaMemcpyDeviceToDevice, stream()));
    CUDA_CHECK(cudaMemcpyAsync(dk, fk, size_t(kvN * es),
                               cudaMemcpyDeviceToDevice, stream()));
    CUDA_CHECK(cudaMemcpyAsync(dv, fv, size_t(kvN * es),
                               cudaMemcpyDeviceToDevice, stream()));
  }
  return true;
}

#endif // LOOMRT_HAVE_CUDNN

} // namespace

void loomrt::backend::loomrt_attention_forward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t Sk, int64_t Nq,
    int64_t Nkv, int64_t D, float scale, int32_t causal, const int32_t *q_pos,
    const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, void *o, float *lse) {
  const AttentionDims d{B, S, Sk, Nq, Nkv, D};
  checkCudaAttention(__func__, d);
  if (B == 0 || S == 0)
    return;
  (void)choice(); // an unknown LOOMRT_CUDA_ATTENTION fails on every build
#if LOOMRT_HAVE_CUDNN
  cudnn::AttentionShape s;
  if (fusedShape(dtype, d, scale, causal, q_pos, k_pos, q_doc, s) &&
      fusedForward(s, q, k, v, o, lse))
    return;
#endif
  kernelAttentionForward(dtype, B, S, Sk, Nq, Nkv, D, scale, causal, q_pos,
                         k_pos, q_doc, k_doc, q, k, v, o, lse);
}

void loomrt::backend::loomrt_attention_backward(
    loomrt_dtype dtype, int64_t B, int64_t S, int64_t Sk, int64_t Nq,
    int64_t Nkv, int64_t D, float scale, int32_t causal, const int32_t *q_pos,
    const int32_t *k_pos, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, const void *o,
    const float *lse, const void *dout, void *dq, void *dk, void *dv,
    int32_t accumulate) {
  const AttentionDims d{B, S, Sk, Nq, Nkv, D};
  checkCudaAttention(__func__, d);
  if (B == 0 || (S == 0 && Sk == 0))
    return;
  (void)choice();
#if LOOMRT_HAVE_CUDNN
  cudnn::AttentionShape s;
  if (fusedShape(dtype, d, scale, causal, q_pos, k_pos, q_doc, s) &&
      fusedBackward(s, q, k, v, o, lse, dout, dq, dk, dv, accumulate))
    return;
#endif
  kernelAttentionBackward(dtype, B, S, Sk, Nq, Nkv, D, scale, causal, q_pos,
                          k_pos, q_doc, k_doc, q, k, v, o, lse, dout, dq, dk,
                          dv, accumulate);
}
