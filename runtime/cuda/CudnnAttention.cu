//===- CudnnAttention.cu - cuDNN's fused attention (SDPA) ------*- CUDA -*-===//
//
// Scaled dot-product attention, forward with its log-sum-exp and backward,
// on cuDNN's fused flash-attention engines: the process's cuDNN handle,
// which calls cuDNN covers, the plans (CudnnGraph.h) cached per shape and
// direction (as are shapes without one), and their execution on the
// compute stream. The attention scale is a by-value scalar, so it is not
// part of the key.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/Common.h"
#include "runtime/cuda/CudnnAttention.h"
#include "runtime/cuda/CudnnGraph.h"

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <vector>

using namespace loomrt;
using namespace loomrt::cudnn;

namespace {

//===----------------------------------------------------------------------===//
// Process-wide state
//===----------------------------------------------------------------------===//

/// The device and library, looked up once.
struct Device {
  cudnnHandle_t handle = nullptr; // null when cuDNN cannot be used
  int major = 0;                  // compute capability
  size_t version = 0;             // cudnnGetVersion(), e.g. 91900
  std::string unavailable;        // why handle is null
};

const Device &device() {
  static const Device dev = [] {
    Device d;
    cudaStream_t compute = stream(); // creates the context on its device
    CUDA_CHECK(cudaDeviceGetAttribute(
        &d.major, cudaDevAttrComputeCapabilityMajor, ctx().device));
    d.version = cudnnGetVersion();
    // The fused engines need Ampere or later and cuDNN 9 (the library
    // found at run time may be older than the headers built against).
    if (d.major < 8) {
      d.unavailable = "compute capability " + std::to_string(d.major) +
                      ".x (fused attention needs 8.0 or later)";
      return d;
    }
    if (d.version < 90000) {
      d.unavailable = "cuDNN " + std::to_string(d.version) +
                      " at run time (9.0 or later needed)";
      return d;
    }
    cudnnStatus_t status = cudnnCreate(&d.handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      d.handle = nullptr;
      d.unavailable = "cudnnCreate: " + describe(status);
      return d;
    }
    CUDNN_CHECK(cudnnSetStream(d.handle, compute));
    return d;
  }();
  return dev;
}

/// The masked-score value: the frontend uses -inf from cuDNN 9.10 and the
/// lowest float before (older engines preferred it). Host memory, as
/// by-value scalars are passed.
float *maskValue() {
  static float value = device().version < 91000
                           ? std::numeric_limits<float>::lowest()
                           : -std::numeric_limits<float>::infinity();
  return &value;
}

/// The cached plan of a shape and direction, built on first use.
const Plan &planFor(bool backward, const AttentionShape &s) {
  // Never destroyed, like ctx(): freeing plans at exit could run after
  // CUDA's teardown.
  static auto &plans = *new std::map<ShapeKey, Plan>;
  LOOMRT_CHECK(device().handle, "cuDNN is unavailable (check covers())");
  const ShapeKey key = keyOf(backward, s);
  auto it = plans.find(key);
  if (it == plans.end())
    it = plans
             .emplace(key,
                      buildPlan(backward, s, device().version, device().handle))
             .first;
  return it->second;
}

void execute(const Plan &p, const std::vector<int64_t> &uids,
             const std::vector<void *> &pointers, void *workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
          int64_t(uids.size()), uids.data());
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
          CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
          &workspace);
  finalize(pack.get(), "variant pack");
  CUDNN_CHECK(cudnnBackendExecute(device().handle, p.plan, pack.get()));
}

} // namespace

bool loomrt::cudnn::aligned(std::initializer_list<const void *> pointers) {
  for (const void *ptr : pointers)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

bool loomrt::cudnn::available(std::string *why) {
  const Device &dev = device();
  if (!dev.handle && why)
    *why = dev.unavailable;
  return dev.handle != nullptr;
}

bool loomrt::cudnn::covers(const AttentionShape &s) {
  if (s.dtype != LOOMRT_BF16 && s.dtype != LOOMRT_F16)
    return false;
  if (s.D <= 0 || s.D % 8 != 0 || s.Nkv <= 0 || s.Nq % s.Nkv != 0)
    return false;
  if (s.Sq == 1 && s.Skv == 1) // no backward engine
    return false;
  const Device &dev = device();
  if (!dev.handle)
    return false;
  // Known-bad releases for f16/bf16 SDPA, forward and backward.
  if (dev.version == 91000 || dev.version == 91001)
    return false;
  // Up to 9.15.0 the frontend adds a padding mask to the backward when s_kv
  // is not a multiple of 128 (an engine bug); this graph has none.
  if (dev.version <= 91500 && s.Skv % 128 != 0)
    return false;
  // The backward's head-dim limit (the forward's is never lower): 256 on
  // Hopper, 128 elsewhere.
  return s.D <= (dev.major == 9 ? 256 : 128);
}

bool loomrt::cudnn::forward(const AttentionShape &s, const void *q,
                            const void *k, const void *v, void *o, float *lse,
                            std::string *why) {
  LOOMRT_CHECK(aligned({q, k, v, o, lse}),
               "a tensor is not 16-byte aligned (cudnn::aligned)");
  const Plan &p = planFor(false, s);
  if (!p.plan) {
    if (why)
      *why = p.refusal;
    return false;
  }
  float scale = s.scale;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void *> pointers{const_cast<void *>(q),
                               const_cast<void *>(k),
                               const_cast<void *>(v),
                               o,
                               lse,
                               &scale};
  if (s.causal) {
    uids.push_back(kMaskValue);
    pointers.push_back(maskValue());
  }
  Scratch workspace(p.workspace);
  execute(p, uids, pointers, workspace.as<void>());
  return true;
}

bool loomrt::cudnn::backward(const AttentionShape &s, const void *q,
                             const void *k, const void *v, const void *o,
                             const float *lse, const void *dout, void *dq,
                             void *dk, void *dv, std::string *why) {
  LOOMRT_CHECK(aligned({q, k, v, o, lse, dout, dq, dk, dv}),
               "a tensor is not 16-byte aligned (cudnn::aligned)");
  const Plan &p = planFor(true, s);
  if (!p.plan) {
    if (why)
      *why = p.refusal;
    return false;
  }
  // Workspace: the f32 dQ accumulator and row sums (the frontend's part),
  // then cuDNN's.
  const int64_t accumBytes = Scratch::round(s.B * s.Nq * s.Sq * s.D * 4);
  const int64_t rowSumBytes = Scratch::round(s.B * s.Nq * s.Sq * 4);
  Scratch workspace(accumBytes + rowSumBytes + p.workspace);
  char *base = workspace.as<char>();
  // Before 9.6 the engines expect the accumulator zeroed by the caller.
  if (device().version < 90600)
    CUDA_CHECK(cudaMemsetAsync(base, 0, size_t(accumBytes), stream()));
  float scale = s.scale, one = 1.0f;
  std::vector<int64_t> uids{kQ,  kK,  kV,     kO,   kStats,  kDO,     kDQ,
                            kDK, kDV, kScale, kOne, kRowSum, kDQAccum};
  std::vector<void *> pointers{const_cast<void *>(q),
                               const_cast<void *>(k),
                               const_cast<void *>(v),
                               const_cast<void *>(o),
                               const_cast<float *>(lse),
                               const_cast<void *>(dout),
                               dq,
                               dk,
                               dv,
                               &scale,
                               &one,
                               base + accumBytes,
                               base};
  if (s.causal) {
    uids.push_back(kMaskValue);
    pointers.push_back(maskValue());
  }
  execute(p, uids, pointers, base + accumBytes + rowSumBytes);
  return true;
}
