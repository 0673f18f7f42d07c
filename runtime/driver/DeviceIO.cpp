//===- DeviceIO.cpp - The driver's only ways into backend memory -*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//

#include "runtime/driver/DeviceIO.h"

namespace loom::driver {

void uploadAs(const float *host, loomrt_dtype dtype, void *out, int64_t n) {
  if (dtype == LOOMRT_F32) {
    loomrt_copy(out, host, n * int64_t(sizeof(float)));
    return;
  }
  DeviceBuffer staged = upload(host, n * int64_t(sizeof(float)));
  loomrt_cast(LOOMRT_F32, staged.get(), dtype, out, n);
}

std::vector<float> downloadF32(loomrt_dtype dtype, const void *src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (dtype == LOOMRT_F32) {
    loomrt_copy(out.data(), src, n * int64_t(sizeof(float)));
    return out;
  }
  DeviceBuffer wide(n * int64_t(sizeof(float)));
  loomrt_cast(dtype, src, LOOMRT_F32, wide.get(), n);
  loomrt_copy(out.data(), wide.get(), n * int64_t(sizeof(float)));
  return out;
}

std::vector<char> download(const void *src, int64_t bytes) {
  std::vector<char> out(static_cast<size_t>(bytes));
  loomrt_copy(out.data(), src, bytes);
  return out;
}

DeviceBuffer upload(const void *host, int64_t bytes) {
  DeviceBuffer buf(bytes);
  loomrt_copy(buf.get(), host, bytes);
  return buf;
}

void allReduceHost(loomrt_comm comm, int32_t op, float *values, int64_t n) {
  int64_t bytes = n * int64_t(sizeof(float));
  DeviceBuffer buf = upload(values, bytes);
  loomrt_all_reduce(comm, LOOMRT_F32, op, buf.get(), buf.get(), n);
  loomrt_copy(values, buf.get(), bytes);
}

} // namespace loom::driver
