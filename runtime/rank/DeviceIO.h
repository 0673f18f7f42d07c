//===- DeviceIO.h - The only ways into backend memory -----------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// Backend memory (`loomrt_alloc`) may be a GPU's: the rank program never
// dereferences it. Host data goes in and out through loomrt_copy (these
// helpers for buffers the host owns or fills), and collectives on host
// values cross through a backend float (Run::allReduceScalar). The cpu
// backend's contract check (LOOMRT_CHECK_DEVICE_CONTRACT) holds the rank program
// to this.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_RANK_DEVICEIO_H
#define LOOM_RUNTIME_RANK_DEVICEIO_H

#include "loomrt/loomrt.h"

#include <cstdint>
#include <memory>

namespace loom::rank {

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

/// `count` equal slots of `bytes` each in one backend buffer: a pipelined
/// step takes every micro-batch's input (and writes every loss) stacked,
/// the entries that take one micro-batch per call use slot 0.
class SlotBuffer {
public:
  SlotBuffer() = default;
  SlotBuffer(int64_t bytes, size_t count)
      : buf(bytes * int64_t(count)), bytes(bytes), count(count) {}
  void *at(size_t k) const {
    return static_cast<char *>(buf.get()) + int64_t(k) * bytes;
  }
  size_t size() const { return count; }

private:
  DeviceBuffer buf;
  int64_t bytes = 0;
  size_t count = 0;
};

/// `n` host values of `hostType` written to backend memory `out` in `dtype`
/// (converted there, as the backend rounds).
void uploadAs(loomrt_dtype hostType, const void *host, loomrt_dtype dtype,
              void *out, int64_t n);

/// A new backend buffer holding a copy of `bytes` host bytes.
DeviceBuffer upload(const void *host, int64_t bytes);

} // namespace loom::rank

#endif // LOOM_RUNTIME_RANK_DEVICEIO_H
