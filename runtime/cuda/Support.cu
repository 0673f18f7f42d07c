//===- Support.cu - Errors, context, memory, time --------------*- CUDA -*-===//
//
// The plumbing of the cuda backend (error reporting, the CUDA context,
// scratch memory, dtype conversion) plus the ABI's memory, thread and time
// helpers.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Backend.h"
#include "runtime/common/Profile.h"
#include "runtime/common/Watchdog.h"
#include "runtime/cuda/Common.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

using namespace loomrt;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

// fatal(): runtime/common/Errors.cpp; the entry points' argument checks:
// runtime/common/Rules.cpp.

//===----------------------------------------------------------------------===//
// Context
//===----------------------------------------------------------------------===//

namespace {
int requestedDevice = -1;
Context *theContext = nullptr;
} // namespace

bool loomrt::contextCreated() { return theContext != nullptr; }

void loomrt::requestDevice(int device) { requestedDevice = device; }

Context &loomrt::ctx() {
  if (theContext)
    return *theContext;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    fatal("loomrt_cuda", "no usable CUDA device: %s",
          err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
  auto *c = new Context;
  if (requestedDevice >= 0)
    CUDA_CHECK(cudaSetDevice(requestedDevice % count));
  CUDA_CHECK(cudaGetDevice(&c->device));
  CUDA_CHECK(cudaDeviceGetAttribute(&c->numSMs, cudaDevAttrMultiProcessorCount,
                                    c->device));
  // Non-blocking: the legacy default stream must not serialize against ours.
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->comm, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&c->reduce, cudaStreamNonBlocking));
  // Scratch (cudaMallocAsync) comes from the device's default pool, whose
  // release threshold 0 hands freed memory back to the driver at every
  // synchronization, so the next step's scratch is a new driver allocation.
  // Keep it: the pool holds at most a step's peak scratch.
  cudaMemPool_t pool;
  CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, c->device));
  uint64_t keep = UINT64_MAX;
  CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                     &keep));
  CUBLAS_CHECK(cublasCreate(&c->blas));
  CUBLAS_CHECK(cublasSetStream(c->blas, c->compute));
  // Plain f32 GEMMs stay IEEE f32 (no TF32), as on the cpu backend.
  CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
  theContext = c;
  return *c;
}

void loomrt::streamWait(cudaStream_t waiter, cudaStream_t signaller) {
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ev, signaller));
  CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
  // Destroying a recorded event is legal; it is released once it completes.
  CUDA_CHECK(cudaEventDestroy(ev));
}

namespace {
/// The last collective queued: what a stuck stream most likely waits for.
struct {
  const char *fn = "loomrt_cuda";
  const char *name = "queued GPU work";
  uint64_t seq = 0;
  std::vector<int32_t> members;
} lastCollective;
} // namespace

void loomrt::noteCollective(const char *fn, const char *name, uint64_t seq,
                            const std::vector<int32_t> &members) {
  lastCollective.fn = fn;
  lastCollective.name = name;
  lastCollective.seq = seq;
  lastCollective.members = members;
}

namespace {
/// cudaStreamSynchronize under the watchdog; syncStream and syncAll count
/// the host's wait for the profiler, once each.
cudaError_t waitStream(cudaStream_t s) {
  if (watchdog::timeout() == 0)
    return cudaStreamSynchronize(s);
  if (lastCollective.members.empty())
    lastCollective.members = {loomrt_world_rank()};
  watchdog::Operation op{lastCollective.fn, lastCollective.name,
                         lastCollective.seq, &lastCollective.members};
  cudaError_t err = cudaSuccess;
  watchdog::waitFor(op, [&] {
    err = cudaStreamQuery(s);
    return err != cudaErrorNotReady;
  });
  return err;
}
} // namespace

cudaError_t loomrt::syncStream(cudaStream_t s) {
  profile::hostSync();
  return waitStream(s);
}

void loomrt::syncAll(const char *fn) {
  profile::hostSync();
  Context &c = ctx();
  cudaError_t err = waitStream(c.compute);
  if (err == cudaSuccess)
    err = waitStream(c.comm);
  if (err == cudaSuccess)
    err = waitStream(c.reduce);
  if (err != cudaSuccess)
    fatal(fn, "asynchronous CUDA error: %s", cudaGetErrorString(err));
}

//===----------------------------------------------------------------------===//
// Scratch memory
//===----------------------------------------------------------------------===//

Scratch::Scratch(int64_t bytes) {
  if (bytes <= 0)
    return;
  profile::allocation();
  cudaError_t err = cudaMallocAsync(&ptr, size_t(bytes), stream());
  if (err != cudaSuccess)
    fatal("loomrt_cuda", "scratch allocation of %lld bytes failed: %s",
          (long long)bytes, cudaGetErrorString(err));
}

Scratch::~Scratch() {
  if (ptr)
    cudaFreeAsync(ptr, stream());
}

//===----------------------------------------------------------------------===//
// Conversions and small shared kernels
//===----------------------------------------------------------------------===//

namespace {
__global__ void convertKernel(loomrt_dtype sd, const void *src, loomrt_dtype dd,
                              void *dst, int64_t n) {
  GRID_STRIDE(i, n) { st(dst, dd, i, ld(src, sd, i)); }
}

/// Column sums: block (32, 8) owns 32 columns; thread row ty adds rows
/// ty, ty+8, ... in order, then the 8 partials are added in a fixed order.
__global__ void columnSumsKernel(loomrt_dtype dt, const void *x, int64_t rows,
                                 int64_t cols, loomrt_dtype od, void *out,
                                 bool accumulate) {
  __shared__ float part[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  float acc = 0.0f;
  if (c < cols)
    for (int64_t r = threadIdx.y; r < rows; r += 8)
      acc += ld(x, dt, r * cols + c);
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    float s = 0.0f;
    for (int k = 0; k < 8; ++k)
      s += part[k][threadIdx.x];
    st(out, od, c, accumulate ? ld(out, od, c) + s : s);
  }
}
} // namespace

void loomrt::convert(loomrt_dtype srcDtype, const void *src,
                     loomrt_dtype dstDtype, void *dst, int64_t n) {
  if (n == 0)
    return;
  convertKernel<<<gridFor(n), kThreads, 0, stream()>>>(srcDtype, src, dstDtype,
                                                       dst, n);
  CUDA_CHECK_LAUNCH();
}

void loomrt::columnSums(loomrt_dtype dtype, const void *x, int64_t rows,
                        int64_t cols, loomrt_dtype outDtype, void *out,
                        bool accumulate) {
  if (cols == 0)
    return;
  dim3 block(32, 8);
  columnSumsKernel<<<unsigned((cols + 31) / 32), block, 0, stream()>>>(
      dtype, x, rows, cols, outDtype, out, accumulate);
  CUDA_CHECK_LAUNCH();
}

void loomrt::storeScalar(float *dst, const float *src) {
  CUDA_CHECK(
      cudaMemcpyAsync(dst, src, sizeof(float), cudaMemcpyDefault, stream()));
  CUDA_CHECK(syncStream(stream()));
}

//===----------------------------------------------------------------------===//
// Threads, memory, time
//===----------------------------------------------------------------------===//

// Kernels run on the GPU; the host thread count only matters to code that
// asks for it (the driver's data loading), so it is just remembered.
static int defaultThreads() {
  if (const char *env = std::getenv("OMP_NUM_THREADS"))
    if (int n = std::atoi(env); n > 0)
      return n;
  unsigned hw = std::thread::hardware_concurrency();
  return hw ? int(hw) : 1;
}
static int numThreads = 0;

void loomrt::backend::loomrt_set_num_threads(int32_t n) {
  numThreads = n > 0 ? int(n) : defaultThreads();
}

int32_t loomrt::backend::loomrt_get_num_threads() {
  return numThreads > 0 ? numThreads : defaultThreads();
}

void *loomrt::backend::loomrt_alloc(int64_t bytes) {
  ctx();
  profile::allocation();
  // cudaMalloc aligns to at least 256 bytes; a zero-byte request still gets
  // a real, unique pointer.
  void *p = nullptr;
  cudaError_t err = cudaMalloc(&p, size_t(bytes ? bytes : 64));
  LOOMRT_CHECK(err == cudaSuccess,
               "out of device memory allocating %lld "
               "bytes: %s",
               (long long)bytes, cudaGetErrorString(err));
  return p;
}

void loomrt::backend::loomrt_free(void *ptr) {
  if (!ptr)
    return;
  // Work issued on our non-blocking streams may still use ptr.
  syncAll(__func__);
  CUDA_CHECK(cudaFree(ptr));
}

void loomrt::backend::loomrt_copy(void *dst, const void *src, int64_t bytes) {
  if (!bytes)
    return;
  // cudaMemcpyDefault infers the direction from the pointers (UVA), so any
  // mix of host and device memory works. The copy is ordered after earlier
  // kernels and complete on return, so host buffers can be reused at once.
  CUDA_CHECK(
      cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream()));
  CUDA_CHECK(syncStream(stream()));
}

namespace {
/// Pinned host memory the uploads are staged in: a ring whose regions are
/// reused once the copies reading them are done (an event each).
struct UploadRing {
  char *base = nullptr;
  size_t capacity = 0, head = 0;
  struct InFlight {
    size_t begin, end;
    cudaEvent_t done;
  };
  std::vector<InFlight> inFlight; // oldest first

  /// Waits for the copies that read [begin, end) and forgets every copy
  /// that is done.
  void release(size_t begin, size_t end) {
    std::vector<InFlight> pending;
    for (InFlight &f : inFlight) {
      bool overlaps = f.begin < end && begin < f.end;
      cudaError_t state = cudaEventQuery(f.done);
      if (state == cudaErrorNotReady && !overlaps) {
        pending.push_back(f);
        continue;
      }
      if (state == cudaErrorNotReady) {
        profile::hostSync();
        CUDA_CHECK(cudaEventSynchronize(f.done));
      } else {
        CUDA_CHECK(state);
      }
      CUDA_CHECK(cudaEventDestroy(f.done));
    }
    inFlight = std::move(pending);
  }

  char *reserve(size_t bytes) {
    bytes = (bytes + 255) & ~size_t(255);
    if (bytes > capacity) {
      release(0, capacity); // every copy done before the ring is replaced
      if (base)
        CUDA_CHECK(cudaFreeHost(base));
      capacity = std::max<size_t>(bytes * 4, size_t(4) << 20);
      CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&base), capacity,
                               cudaHostAllocDefault));
      profile::allocation();
      head = 0;
    }
    if (head + bytes > capacity)
      head = 0;
    release(head, head + bytes);
    char *p = base + head;
    head += bytes;
    return p;
  }
} uploads;
} // namespace

void loomrt::backend::loomrt_upload(void *dst, const void *src,
                                    int64_t bytes) {
  if (!bytes)
    return;
  char *staged = uploads.reserve(size_t(bytes));
  std::memcpy(staged, src, size_t(bytes));
  CUDA_CHECK(cudaMemcpyAsync(dst, staged, size_t(bytes),
                             cudaMemcpyHostToDevice, stream()));
  cudaEvent_t done;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(done, stream()));
  size_t begin = size_t(staged - uploads.base);
  uploads.inFlight.push_back({begin, begin + size_t(bytes), done});
}

void loomrt::backend::loomrt_zero(void *dst, int64_t bytes) {
  if (bytes)
    CUDA_CHECK(cudaMemsetAsync(dst, 0, size_t(bytes), stream()));
}

void loomrt::backend::loomrt_copy_2d(void *dst, int64_t dst_stride,
                                     const void *src, int64_t src_stride,
                                     int64_t rows, int64_t row_bytes) {
  if (rows == 0 || row_bytes == 0)
    return;
  // A single row may come with any stride; cudaMemcpy2D insists on
  // pitch >= width.
  if (rows == 1) {
    dst_stride = row_bytes;
    src_stride = row_bytes;
  }
  CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_stride), src, size_t(src_stride),
                               size_t(row_bytes), size_t(rows),
                               cudaMemcpyDefault, stream()));
}

double loomrt::backend::loomrt_wtime() {
  // Durations must cover the GPU work issued so far, not just its launch.
  if (contextCreated())
    syncAll(__func__);
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

//===----------------------------------------------------------------------===//
// The profiler's timeline: events on the compute stream, kept across steps
//===----------------------------------------------------------------------===//

namespace {
struct Timeline {
  std::vector<cudaEvent_t> events; // created once, reused every step
  size_t used = 0;
};
Timeline &timeline() {
  static Timeline t;
  return t;
}
} // namespace

void loomrt::backend::profiling::reset() { timeline().used = 0; }

int32_t loomrt::backend::profiling::mark() {
  Timeline &t = timeline();
  if (t.used == t.events.size()) {
    cudaEvent_t e;
    CUDA_CHECK(cudaEventCreate(&e));
    t.events.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(t.events[t.used], stream()));
  return int32_t(t.used++);
}

void loomrt::backend::profiling::finish() {
  Timeline &t = timeline();
  if (t.used)
    CUDA_CHECK(cudaEventSynchronize(t.events[t.used - 1]));
}

double loomrt::backend::profiling::elapsedMs(int32_t a, int32_t b) {
  Timeline &t = timeline();
  float ms = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&ms, t.events[size_t(a)],
                                  t.events[size_t(b)]));
  return double(ms);
}
