//===- SequencePositions.h - A rank's global token positions ----*- C++ -*-===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// The host computation behind loomrt_sequence_positions, shared by the
// backends (the cpu one writes the result in place, the cuda one copies it
// to the device).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H
#define LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H

#include "runtime/common/Errors.h"

#include <algorithm>
#include <cstdint>

namespace loomrt {

/// Checks loomrt_sequence_positions' sizes; false when there is nothing to
/// write (B * L == 0).
inline bool checkSequencePositions(int64_t B, int64_t L, int64_t start,
                                   int64_t chunk, int32_t numChunks,
                                   const int32_t *pos) {
  LOOMRT_CHECK(B >= 0 && L >= 0 && start >= 0 && chunk > 0 && numChunks > 0,
               "bad sizes B=%lld L=%lld start=%lld chunk=%lld chunks=%d",
               (long long)B, (long long)L, (long long)start, (long long)chunk,
               numChunks);
  LOOMRT_CHECK(start + L <= chunk * numChunks,
               "tokens [%lld, %lld) beyond a sequence of %lld", (long long)start,
               (long long)(start + L), (long long)(chunk * numChunks));
  if (B * L == 0)
    return false;
  LOOMRT_CHECK(pos, "NULL tensor");
  return true;
}

/// Checks loomrt_gather_positions' sizes; false when there is nothing to
/// gather (B * L == 0).
inline bool checkGatherPositions(int64_t B, int64_t S, int64_t L,
                                 const int32_t *src, const int32_t *idx,
                                 const int32_t *dst) {
  LOOMRT_CHECK(B >= 0 && S >= 0 && L >= 0, "negative size B=%lld S=%lld L=%lld",
               (long long)B, (long long)S, (long long)L);
  if (B * L == 0)
    return false;
  LOOMRT_CHECK(src && idx && dst, "NULL tensor");
  return true;
}

/// Writes the positions into host memory `out` [B, L] (see loomrt.h).
inline void fillSequencePositions(int64_t B, int64_t L, int64_t start,
                                  int64_t chunk, const int64_t *order,
                                  int32_t *out) {
  for (int64_t i = 0; i < L; ++i) {
    int64_t s = start + i, j = s / chunk;
    out[i] = int32_t((order ? order[j] : j) * chunk + s % chunk);
  }
  for (int64_t b = 1; b < B; ++b)
    std::copy(out, out + L, out + b * L);
}

} // namespace loomrt

#endif // LOOM_RUNTIME_COMMON_SEQUENCEPOSITIONS_H
