//===- Common.h - Shared helpers of the cuda backend -----------*- CUDA -*-===//
//
// Internal to runtime/cuda: error reporting, the per-process CUDA context
// (device, streams, cuBLAS handle), stream-ordered scratch memory, and the
// device-side dtype helpers every kernel uses.
//
// Kernels read and write tensors through ld()/st(), which switch on the
// storage dtype at run time. The switch is uniform across a warp, costs
// nothing measurable in memory-bound kernels, and keeps the library at one
// instantiation per kernel instead of one per dtype (compile time on the
// 2-core CI machine). Every value is computed in f32 and rounded once, with
// round-to-nearest-even, on the store.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_COMMON_H
#define LOOM_RUNTIME_CUDA_COMMON_H

#include "loomrt/loomrt.h"
#include "runtime/common/Errors.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace loomrt {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// fatal(), LOOMRT_CHECK and checkedDtypeSize() come from
// runtime/common/Errors.h, shared with the other backend.

/// Aborts with the CUDA error string when a runtime call fails.
#define CUDA_CHECK(call)                                                       \
  do {                                                                         \
    cudaError_t err_ = (call);                                                 \
    if (err_ != cudaSuccess)                                                   \
      ::loomrt::fatal(__func__, "%s: %s", #call, cudaGetErrorString(err_));    \
  } while (0)

#define CUBLAS_CHECK(call)                                                     \
  do {                                                                         \
    cublasStatus_t st_ = (call);                                               \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::loomrt::fatal(__func__, "%s: %s", #call, cublasGetStatusString(st_));  \
  } while (0)

/// Checks the launch of the kernel just issued (bad configuration, no
/// device); faults inside the kernel surface at the next synchronization.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())


//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

/// One per process, created on first use on the current device (or on the
/// device loomrt_init picked). Every kernel, copy and cuBLAS call runs on
/// `compute`; NCCL runs on `comm`, ordered against compute with events.
/// Because every runtime call is issued on `compute` (or waits for it),
/// calls see each other's effects in program order without host syncs.
struct Context {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  /// Overlapped gradient reductions (loomrt_*_start): apart from `comm`, so
  /// the step's own collectives do not queue behind them.
  cudaStream_t reduce = nullptr;
  cublasHandle_t blas = nullptr;
  int numSMs = 1;
};
Context &ctx();
/// Whether ctx() has been created (loomrt_init may still pick the device).
bool contextCreated();
/// Device index (modulo the device count) ctx() will use when it is created.
void requestDevice(int device);
inline cudaStream_t stream() { return ctx().compute; }

/// Makes `waiter` wait for everything issued so far on `signaller`.
void streamWait(cudaStream_t waiter, cudaStream_t signaller);

/// Blocks the host until the compute, comm and reduce streams are idle.
void syncAll(const char *fn);

/// cudaStreamSynchronize under the watchdog (runtime/common/Watchdog.h):
/// with a timeout set, queued work that does not finish in time (a peer that
/// never joins a collective) ends the job with a report naming the last
/// collective queued.
cudaError_t syncStream(cudaStream_t s);

/// Records the collective or p2p batch just queued on the comm stream, for
/// syncStream's report.
void noteCollective(const char *fn, const char *name, uint64_t seq,
                    const std::vector<int32_t> &members);

//===----------------------------------------------------------------------===//
// Scratch memory
//===----------------------------------------------------------------------===//

/// Device scratch from the stream-ordered pool (cudaMallocAsync on the
/// compute stream): kernels issued on that stream before the destructor's
/// cudaFreeAsync may use it, with no host synchronization.
class Scratch {
public:
  explicit Scratch(int64_t bytes);
  ~Scratch();
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(ptr); }
  /// `bytes` rounded up to 256: where the next piece of one Scratch that
  /// holds several buffers starts (cuBLAS and cuDNN want aligned tensors).
  static int64_t round(int64_t bytes) { return (bytes + 255) / 256 * 256; }

private:
  void *ptr = nullptr;
};

//===----------------------------------------------------------------------===//
// Launch geometry
//===----------------------------------------------------------------------===//

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements: enough to fill the GPU,
/// never more than the elements need.
inline unsigned gridFor(int64_t n, int threads = kThreads) {
  int64_t blocks = (n + threads - 1) / threads;
  int64_t cap = int64_t(ctx().numSMs) * 8;
  if (blocks > cap)
    blocks = cap;
  return unsigned(blocks < 1 ? 1 : blocks);
}

#define GRID_STRIDE(i, n)                                                      \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);    \
       i += int64_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Device-side dtype helpers
//===----------------------------------------------------------------------===//

/// f32 -> bf16 with round-to-nearest-even; NaN stays a quiet NaN with its
/// sign (bit-identical to the cpu backend's f32ToBf16).
__device__ __forceinline__ uint16_t f32ToBf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// f32 -> f16 with round-to-nearest-even (overflow to inf by the hardware
/// conversion); NaN becomes 0x7e00 | sign as on the cpu backend.
__device__ __forceinline__ uint16_t f32ToF16(float f) {
  if (isnan(f))
    return uint16_t(0x7e00u | ((__float_as_uint(f) >> 16) & 0x8000u));
  return __half_as_ushort(__float2half_rn(f));
}

/// f16 -> f32, exact, with the NaN payload and sign kept bit for bit as on
/// the cpu backend (the hardware conversion may canonicalize NaNs).
__device__ __forceinline__ float f16ToF32(uint16_t h) {
  if ((h & 0x7c00u) != 0x7c00u)
    return __half2float(__ushort_as_half(h));
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  return __uint_as_float(sign | 0x7f800000u | (uint32_t(h & 0x3ffu) << 13));
}

__device__ __forceinline__ float ld(const void *p, loomrt_dtype dt, int64_t i) {
  if (dt == LOOMRT_F32)
    return static_cast<const float *>(p)[i];
  const uint16_t h = static_cast<const uint16_t *>(p)[i];
  if (dt == LOOMRT_BF16)
    return __uint_as_float(uint32_t(h) << 16);
  return f16ToF32(h);
}

__device__ __forceinline__ void st(void *p, loomrt_dtype dt, int64_t i,
                                   float v) {
  if (dt == LOOMRT_F32)
    static_cast<float *>(p)[i] = v;
  else
    static_cast<uint16_t *>(p)[i] =
        dt == LOOMRT_BF16 ? f32ToBf16(v) : f32ToF16(v);
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

__device__ __forceinline__ float warpSum(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warpMax(float v) {
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned
/// to every thread. The combination order is fixed, so the result is
/// deterministic. `shared` holds 32 floats; the call ends with a barrier so
/// the buffer can be reused right away.
__device__ __forceinline__ float blockSum(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpSum(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? shared[lane] : 0.0f;
  v = warpSum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float blockMax(float v, float *shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warpMax(v);
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = lane < warps ? shared[lane] : -INFINITY;
  v = warpMax(v);
  __syncthreads();
  return v;
}

//===----------------------------------------------------------------------===//
// Host-side helpers shared by several files
//===----------------------------------------------------------------------===//

/// y[i] = x[i] converted between dtypes on the compute stream (n elements).
void convert(loomrt_dtype srcDtype, const void *src, loomrt_dtype dstDtype,
             void *dst, int64_t n);

/// Column sums of a row-major [rows, cols] f32-computed matrix, written to
/// out (dtype) overwriting or accumulating: the bias gradient. The order of
/// additions is fixed (no atomics).
void columnSums(loomrt_dtype dtype, const void *x, int64_t rows, int64_t cols,
                loomrt_dtype outDtype, void *out, bool accumulate);

/// Stores a float computed on the device at `src` into `dst`, which may be
/// device memory or host memory (cudaMemcpyDefault with UVA), and waits for
/// it: used for the scalar outputs (loss, masked_sum, mask_sum).
void storeScalar(float *dst, const float *src);

} // namespace loomrt

#endif // LOOM_RUNTIME_CUDA_COMMON_H
