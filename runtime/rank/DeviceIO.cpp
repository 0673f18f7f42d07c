//===- DeviceIO.cpp - The only ways into backend memory ---------*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/rank/DeviceIO.h"

namespace loom::rank {

void uploadAs(loomrt_dtype hostType, const void *host, loomrt_dtype dtype,
              void *out, int64_t n) {
  int64_t bytes = n * loomrt_dtype_size(hostType);
  if (hostType == dtype) {
    loomrt_copy(out, host, bytes);
    return;
  }
  DeviceBuffer staged = upload(host, bytes);
  loomrt_cast(hostType, staged.get(), dtype, out, n);
}

DeviceBuffer upload(const void *host, int64_t bytes) {
  DeviceBuffer buf(bytes);
  loomrt_copy(buf.get(), host, bytes);
  return buf;
}

} // namespace loom::rank
