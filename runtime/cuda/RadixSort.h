//===- RadixSort.h - CUB radix sorts on the runtime's stream ---*- CUDA -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The sorts the embedding's backward and the experts' dispatch use: CUB's
// stable radix sort of 64-bit keys (and int32 values), its temporary
// storage from the scratch pool. For .cu files only (it includes CUB).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_CUDA_RADIXSORT_H
#define LOOM_RUNTIME_CUDA_RADIXSORT_H

#include "runtime/cuda/Common.h"

#include <cub/device/device_radix_sort.cuh>

namespace loomrt {

/// The bits values 0..v need.
inline int significantBits(uint64_t v) {
  int bits = 0;
  for (; v; v >>= 1)
    ++bits;
  return bits;
}

/// out = in sorted (stable) by bits [beginBit, endBit) of the n keys; with
/// values, valuesOut = valuesIn in the same order.
inline void radixSort(const uint64_t *in, uint64_t *out, int64_t n,
                      int beginBit, int endBit,
                      const int32_t *valuesIn = nullptr,
                      int32_t *valuesOut = nullptr) {
  LOOMRT_CHECK(n <= INT32_MAX, "%lld keys are too many for one sort",
               (long long)n);
  auto sort = [&](void *temp, size_t &bytes) {
    if (valuesIn)
      CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, in, out,
                                                 valuesIn, valuesOut, int(n),
                                                 beginBit, endBit, stream()));
    else
      CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp, bytes, in, out, int(n),
                                                beginBit, endBit, stream()));
  };
  size_t bytes = 0;
  sort(nullptr, bytes);
  Scratch temp(static_cast<int64_t>(bytes));
  sort(temp.as<void>(), bytes);
}

} // namespace loomrt

#endif // LOOM_RUNTIME_CUDA_RADIXSORT_H
