//===- CudnnGraph.h - The cuDNN graphs of fused attention ------*- C++ -*-===//
//
// Internal to runtime/cuda: the operation graphs of cuDNN's fused attention
// (CudnnAttention.h), built with the cuDNN 9 backend API, and their plans.
// Kept apart from the rest of the backend (it needs no CUDA context), so
// that a test can have cuDNN's own descriptor checks judge every graph on a
// machine without a GPU (test/Unit/RuntimeCuda/CudnnGraphTest.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDNNGRAPH_H
#define LOOM_RUNTIME_CUDA_CUDNNGRAPH_H

#include "runtime/cuda/CudnnAttention.h"
#include "runtime/common/Errors.h"

#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loomrt::cudnn {

/// cuDNN's name for a status and, when it has one, its message about the
/// failure just seen on this thread.
std::string describe(cudnnStatus_t status);

/// Aborts when a cuDNN call fails: a malformed descriptor or a failed
/// launch is a bug here, not a shape cuDNN declines.
#define CUDNN_CHECK(call)                                                      \
  do {                                                                         \
    cudnnStatus_t st_ = (call);                                                \
    if (st_ != CUDNN_STATUS_SUCCESS)                                           \
      ::loomrt::fatal(__func__, "%s: %s", #call,                               \
                      ::loomrt::cudnn::describe(st_).c_str());                 \
  } while (0)

/// Owns one cudnnBackendDescriptor_t.
class Descriptor {
public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc));
  }
  ~Descriptor() {
    if (desc)
      cudnnBackendDestroyDescriptor(desc);
  }
  Descriptor(Descriptor &&other) noexcept
      : desc(std::exchange(other.desc, nullptr)) {}
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;
  cudnnBackendDescriptor_t get() const { return desc; }

private:
  cudnnBackendDescriptor_t desc = nullptr;
};

/// cudnnBackendSetAttribute; aborts naming the attribute when it fails.
void setAttr(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t count,
             const void *values);

/// cudnnBackendFinalize of a descriptor cuDNN must accept; aborts naming
/// `what` when it does not.
void finalize(cudnnBackendDescriptor_t desc, const char *what);

/// Unique ids: the variant pack binds the non-virtual ones to memory.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kScale,
  kOne,
  kMaskValue,
  kRowSum,
  kDQAccum,
  kFirstVirtual = 100,
};

/// An execution plan with everything it refers to, or why there is none.
struct Plan {
  std::vector<Descriptor> descriptors;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  std::string refusal;
  /// Whether cuDNN accepted the operation graph (it checks every op's
  /// shapes and types there, with or without a device).
  bool graphFinalized = false;
};

/// The forward (or backward) of `s` for cuDNN `version`
/// (cudnnGetVersion()) and its plan on `handle`: heuristics mode A, then
/// the first engine configuration that finalizes. With a null handle (no
/// device) only the operation graph is finalized; the plan stays null.
Plan buildPlan(bool backward, const AttentionShape &s, size_t version,
               cudnnHandle_t handle);

} // namespace loomrt::cudnn

#endif // LOOM_RUNTIME_CUDA_CUDNNGRAPH_H
