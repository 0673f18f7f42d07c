//===- DeviceIO.h - The driver's only ways into backend memory --*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Backend memory (`loomrt_alloc`) may be a GPU's: the driver never
// dereferences it. Host data goes in and out through loomrt_copy, and
// collectives on host values (flags, loss sums) are staged through a device
// buffer, since collectives take backend memory only. The cpu backend's
// contract check (LOOMRT_CHECK_DEVICE_CONTRACT) holds the driver to this.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_DRIVER_DEVICEIO_H
#define LOOM_RUNTIME_DRIVER_DEVICEIO_H

#include "loomrt/loomrt.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace loom::driver {

/// Backend memory owned by host code.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int64_t bytes) : ptr(loomrt_alloc(bytes)) {}
  void *get() const { return ptr.get(); }
  template <typename T> T *as() const { return static_cast<T *>(ptr.get()); }

private:
  struct Free {
    void operator()(void *p) const { loomrt_free(p); }
  };
  std::unique_ptr<void, Free> ptr;
};

/// Host f32 values written to backend memory `out` in `dtype` (rounded
/// there, as the backend rounds).
void uploadAs(const float *host, loomrt_dtype dtype, void *out, int64_t n);

/// `n` elements of `dtype` at backend memory `src`, widened to f32 on the
/// host.
std::vector<float> downloadF32(loomrt_dtype dtype, const void *src, int64_t n);

/// `bytes` of backend memory at `src` on the host.
std::vector<char> download(const void *src, int64_t bytes);

/// A new backend buffer holding a copy of `bytes` host bytes.
DeviceBuffer upload(const void *host, int64_t bytes);

/// all_reduce(op) of host floats over `comm`, in place.
void allReduceHost(loomrt_comm comm, int32_t op, float *values, int64_t n);

} // namespace loom::driver

#endif // LOOM_RUNTIME_DRIVER_DEVICEIO_H
